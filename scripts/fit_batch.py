#!/usr/bin/env python3
"""Fits SGLang's engine.request_s to plain decoding against batch (real-data
batch/decode_vs_batch.csv) through the whole simulator, each benchmark run as it
ran (docs/design.md §19), and checks the sglang preset against every point.

What each source ran:
  * angelslim-163, specforge-339: Qwen3-30B-A3B on 4 and 2 H100s (TP4, TP2),
    SpecForge's bench_eagle3 against an SGLang server: MT-Bench's questions
    (80 by its default, 20 in specforge-339's mtbench:20), two turns each,
    through `run_batch(num_threads=batch)`: a closed loop of min(batch,
    questions) clients, each sending its next turn when the last one ends,
    at most 2,048 new tokens a turn; throughput is output tokens over the
    wall time, tail and prefills included. The prompts (the system prompt
    and a question, ~170 tokens; a second turn's new tokens are about as
    many, the first turn being in SGLang's prefix cache) and the answers'
    lengths (a clipped normal, mean 1,200, sd 600, 32-2,048) are leads: no
    source states them. `--lengths MEAN` moves the answers' mean.
  * inferencex-870: DeepSeek-R1 FP8 on 8 H200s, TP8, SGLang 0.5.7, a closed
    loop of C clients (InferenceX's online benchmark), 1,024 input and 1,024
    output tokens per request: mean time per output token.
Fitted: specforge-339 and inferencex-870, whose benchmarks state their
workloads. angelslim-163 ran bench_eagle3's default list (five benchmarks,
MT-Bench first) and does not say which one's throughput it printed: it is
run as MT-Bench:80 and reported beside the fit, not fitted.
A closed loop's schedule (which requests share which step) is decided by
token counts alone, so each measured quantity is linear in request_s:
    q(r) = q(0) + r * s
(q: seconds per output token for a throughput, the mean TPOT for a TPOT).
Two runs per point give q(0) and s; request_s is the least squares of the
relative residuals over the points beyond batch 1 (batch 1 belongs to the
batch-1 fits). One coefficient for the engine, all three layouts at once;
the per-source fits are printed beside it, for what they say about it.
  scripts/fit_batch.py [REAL_DATA_DIR] [--quick] [--lengths MEAN]
  scripts/fit_batch.py [REAL_DATA_DIR] --check TOL [--points SOURCE:BATCH,...]
      --check: runs each fitted point and each layout's batch of 1 (or the
      points named) from the sglang preset alone (its request_s and layer sync
      as the preset holds them) and exits 1 if any misses by more than TOL (a
      fraction).
(ACCEPTMOE: the binary.)
"""
import csv
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from real_data import path as real_data_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ACCEPTMOE", os.path.join(ROOT, "build", "acceptmoe"))
ARGV = sys.argv[1:]
QUICK = "--quick" in ARGV


def option(name, default):
    if name in ARGV:
        i = ARGV.index(name)
        if i + 1 >= len(ARGV):
            sys.exit("fit_batch.py: %s needs a value" % name)
        return float(ARGV[i + 1])
    return default


LENGTH_MEAN = option("--lengths", 1200.0)
CHECK = option("--check", None)
VALUED = ("--lengths", "--check", "--points")
ARGS = [a for i, a in enumerate(ARGV) if not a.startswith("--") and (i == 0 or ARGV[i - 1] not in VALUED)]
POINTS = ARGV[ARGV.index("--points") + 1].split(",") if "--points" in ARGV[:-1] else []
PROBE = 1e-4  # the second run's request_s, for the slope

# Each source: the deployment, and the benchmark's loop at a batch.
SOURCES = {
    "angelslim-163": dict(model="qwen3-30b-a3b", hw="h100", gpus=4, questions=80, tp=4, fitted=False),
    "specforge-339": dict(model="qwen3-30b-a3b", hw="h100", gpus=2, questions=20, tp=2, fitted=True),
    "inferencex-870": dict(model="deepseek-v3", hw="h200", gpus=8, tp=8, fitted=True),
}


def spec_text(src, batch):
    s = SOURCES[src]
    head = ("name: fit-batch\nbaseline: false\nmodel: %s\n"
            "hardware: {preset: %s, gpus: %d, interconnect: nvlink4}\n"
            "parallel: {attention_tp: %d, moe_ep: 1, moe_tp: %d}\n"
            "engine: {preset: sglang}\npolicies: [autoregressive]\n" % (s["model"], s["hw"], s["gpus"], s["tp"], s["tp"]))
    if "questions" in s:  # bench_eagle3: two turns per question, min(batch, questions) threads
        n = s["questions"]
        return head + ("workload:\n  seed: 7\n  prompt_tokens: 170\n  tokens_per_request: %d\n"
                       "  prefill_schedule: chunked\n  requests: %d\n"
                       "  arrival: {process: concurrency, concurrency: %d, lengths: normal, prompt_sd: 40, "
                       "prompt_min: 60, prompt_max: 400, output_sd: %d, output_min: 32, output_max: 2048}\n"
                       % (LENGTH_MEAN, 2 * n, min(batch, n), LENGTH_MEAN / 2))
    reqs = (2 if QUICK else 4) * batch  # InferenceX: a closed loop of C clients at 1k/1k
    return head + ("workload:\n  seed: 1\n  prompt_tokens: 1024\n  tokens_per_request: %d\n"
                   "  prefill_schedule: chunked\n  requests: %d\n"
                   "  arrival: {process: concurrency, concurrency: %d}\n" % (256 if QUICK else 1024, reqs, batch))


def measured(p):
    """[(source, batch, metric, value)]: throughputs of bench_eagle3, InferenceX's TPOT."""
    out = []
    for r in csv.DictReader(open(p)):
        if r["source"] in SOURCES and r["metric"] in ("throughput_tok_s", "mean_tpot_ms"):
            v = float(r["value"])
            out.append((r["source"], int(r["batch"]), r["metric"], 1 / v if r["metric"] == "throughput_tok_s" else v / 1e3))
    return out


def simulate(src, batch, metric, request_s, tmp):
    """The point's quantity (s per output token, or the mean TPOT) at request_s;
    request_s None: the preset's."""
    d = tempfile.mkdtemp(dir=tmp)
    spec = os.path.join(d, "spec.yaml")
    open(spec, "w").write(spec_text(src, batch))
    args = [BIN, "run", spec, "--quiet", "--out", os.path.join(d, "out")]
    if request_s is not None:
        args += ["--set", "engine.request_s=%r" % request_s]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    r = next(csv.DictReader(open(os.path.join(d, "out", "summary.csv"))))
    if metric == "throughput_tok_s":
        return float(r["duration_s"]) / float(r["committed_tokens"])
    return float(r["tpot_mean_s"])


def fit(pts):
    """request_s minimising the relative residuals: pts [(measured, q0, slope)]."""
    num = sum(s * (m - q0) / m ** 2 for m, q0, s in pts)
    den = sum(s * s / m ** 2 for m, q0, s in pts)
    return num / den


def miss(metric, m, q):
    """The signed miss of the simulated quantity q on the measured m, in the metric's own terms."""
    return m / q - 1 if metric == "throughput_tok_s" else q / m - 1


def show(metric, q):
    return "%.1f tok/s" % (1 / q) if metric == "throughput_tok_s" else "%.2f ms" % (1e3 * q)


def main():
    p = real_data_path(ARGS, "batch", "decode_vs_batch.csv", "fit_batch.py")
    if not p:
        sys.exit(2)
    pts = measured(p)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        if CHECK is not None:
            # a fitted source's points, and batch 1 of every layout (the layer sync's fit)
            pts = [t for t in pts if (SOURCES[t[0]]["fitted"] or t[1] == 1) and (not POINTS or "%s:%d" % t[:2] in POINTS)]
            if POINTS and len(pts) != len(POINTS):
                sys.exit("fit_batch.py: --points %s: each must be a fitted source's measured point or a batch of 1"
                         % ",".join(POINTS))
            got = list(ex.map(lambda t: simulate(t[0], t[1], t[2], None, tmp), pts))
            worst = 0
            print("source,batch,measured,preset,residual")
            for (src, b, metric, m), q in zip(pts, got):
                res = miss(metric, m, q)
                print("%s,%d,%s,%s,%+.1f%%" % (src, b, show(metric, m), show(metric, q), 100 * res))
                worst = max(worst, abs(res))
            print("# worst: %.1f%% (tolerance %.1f%%)" % (100 * worst, 100 * CHECK))
            sys.exit(1 if worst > CHECK else 0)
        q0 = list(ex.map(lambda t: simulate(t[0], t[1], t[2], 0.0, tmp), pts))
        q1 = list(ex.map(lambda t: simulate(t[0], t[1], t[2], PROBE, tmp), pts))
    rows = [(src, b, metric, m, a, (c - a) / PROBE) for (src, b, metric, m), a, c in zip(pts, q0, q1)]
    beyond = [(m, a, s) for src, b, metric, m, a, s in rows if b > 1 and SOURCES[src]["fitted"]]
    r = fit(beyond)
    print("source,batch,measured,simulated_at_0,simulated,residual")
    for src, b, metric, m, a, s in rows:
        q = a + r * s
        print("%s,%d,%s,%s,%s,%+.1f%%" % (src, b, show(metric, m), show(metric, a), show(metric, q), 100 * miss(metric, m, q)))
    for src in SOURCES:
        own = [(m, a, s) for s_, b, metric, m, a, s in rows if s_ == src and b > 1]
        print("# %s alone: request_s %.3g s" % (src, fit(own)))
    print("# sglang, the fitted sources at once (answers' mean %d tokens): engine.request_s %.3g s" % (LENGTH_MEAN, r))


if __name__ == "__main__":
    main()
