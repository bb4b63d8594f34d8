#!/usr/bin/env python3
"""Fits engine.request_s to plain decoding against batch (real-data
batch/decode_vs_batch.csv) through the whole simulator.

Each layout's autoregressive row runs at every measured batch with request_s = 0.
A pass's time is linear in it: each request beyond the first adds it, so
    t(B) = t0(B) + request_s * (b(B) - 1)
with b(B) the pass's mean occupancy (the requests in it: short requests, 16 tokens
each over 4,000 blocks, keep it within 6% of B). A batch of one is left to the
batch-1 fits (layer_sync_per_peer_s, the presets), which this does not move.
Least squares on the time per pass:
  * Qwen3-30B-A3B on 4 and 2 H100s (TP4, TP2), SGLang through bench_eagle3: the
    measured pass is batch / throughput; one request_s for both layouts (one
    engine, one benchmark), 9 points beyond batch 1.
  * DeepSeek-R1 on 8 H200s, TP8, SGLang 0.5.7 (InferenceX): the measured pass is
    the mean time per output token at each concurrency; 4 points.
Prints each point's measured and simulated pass and the residual. The benchmarks'
prefills (bench_eagle3 counts them; InferenceX's join the decodes) are not
simulated: request_s takes them in, with the engine's per-request work.
  scripts/fit_batch.py [REAL_DATA_DIR] [--quick]          (ACCEPTMOE: the binary)
"""
import csv
import os
import subprocess
import sys
import tempfile

from real_data import path as real_data_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ACCEPTMOE", os.path.join(ROOT, "build", "acceptmoe"))
QUICK = "--quick" in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]

QWEN = os.path.join(ROOT, "workloads", "specs", "figure-batch-qwen3.yaml")
DEEPSEEK = os.path.join(ROOT, "workloads", "specs", "figure-batch-deepseek.yaml")


def measured(p):
    out = {}
    for r in csv.DictReader(open(p)):
        b, v = int(r["batch"]), float(r["value"])
        if r["source"] == "angelslim-163":
            out.setdefault("tp4", {})[b] = b / v
        elif r["source"] == "specforge-339":
            out.setdefault("tp2", {})[b] = b / v
        elif r["source"] == "inferencex-870" and r["metric"] == "mean_tpot_ms":
            out.setdefault("tp8", {})[b] = v / 1e3
    return out


def simulate(spec, batches, sets, tmp):
    """{batch: (time per pass, mean occupancy)} of the autoregressive row at the
    spec's swept batches (which hold the measured ones)."""
    d = os.path.join(tmp, "run")
    args = [BIN, "run", spec, "--quiet", "--out", d, "--set", "policies=[autoregressive]", "--set",
            "engine.request_s=0", "--set", "workload.tokens_per_request=16", "--set",
            "workload.blocks=%d" % (600 if QUICK else 4000)]
    for s in sets:
        args += ["--set", s]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    out = {}
    for r in csv.DictReader(open(os.path.join(d, "summary.csv"))):
        if r["policy"] != "autoregressive":
            continue
        t = float(r["committed_tokens"]) / float(r["tokens_per_s"]) / float(r["forward_passes"])
        out[int(r["workload.batch"])] = (t, float(r["batch_occupancy_mean"]))
    missing = [b for b in batches if b not in out]
    if missing:
        sys.exit("fit_batch.py: %s does not sweep workload.batch over %s" % (spec, missing))
    return out


def fit(points):
    """request_s by least squares over (measured, t0, occupancy) beyond batch 1."""
    num = sum((o - 1) * (t - t0) for t, t0, o in points)
    den = sum((o - 1) ** 2 for t, t0, o in points)
    return num / den


def main():
    p = real_data_path(ARGS, "batch", "decode_vs_batch.csv", "fit_batch.py")
    if not p:
        sys.exit(2)
    m = measured(p)
    with tempfile.TemporaryDirectory() as tmp:
        sim = {}
        for lay, g in (("tp4", 4), ("tp2", 2)):
            sim[lay] = simulate(QWEN, sorted(m[lay]), ["hardware.gpus=%d" % g, "parallel.attention_tp=%d" % g,
                                                      "parallel.moe_tp=%d" % g], tmp)
        sim["tp8"] = simulate(DEEPSEEK, sorted(m["tp8"]), [], tmp)
    print("layout,batch,occupancy,measured_pass_s,simulated_pass_s_at_0,simulated_pass_s,residual")
    for group, name in ((("tp4", "tp2"), "qwen3-30b-a3b, sglang bench_eagle3 (tp4, tp2)"),
                        (("tp8",), "deepseek-r1 (deepseek-v3 shapes), sglang 0.5.7 tp8")):
        pts = [(lay, b, t) + sim[lay][b] for lay in group for b, t in sorted(m[lay].items())]
        c = fit([(t, t0, o) for lay, b, t, t0, o in pts if b > 1])
        for lay, b, t, t0, o in pts:
            f = t0 + c * (o - 1)
            print("%s,%d,%.2f,%.6g,%.6g,%.6g,%+.1f%%" % (lay, b, o, t, t0, f, 100 * (f - t) / t))
        print("# %s: engine.request_s %.3g s" % (name, c))


if __name__ == "__main__":
    main()
