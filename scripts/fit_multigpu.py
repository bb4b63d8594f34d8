#!/usr/bin/env python3
"""Fits the interconnect preset's terms (docs/design.md §16) to the several-GPU
measurements in real-data/multi-gpu/step_times.csv.

1. allreduce_latency_s, allreduce_bw: the custom one-shot all-reduce on 8
   NVSwitch-connected H100s (the kind batch-1 engines use), latency + bytes /
   bus bandwidth by least squares over the sizes a batch-1 pass sends (up to
   1 MB: 64 tokens x 7168 x 2 B is 0.9 MB).
2. layer_sync_per_peer_s (with --sim BINARY): the fixed time per decoder layer
   and GPU beyond the first, beyond bytes, kernels and all-reduces, from the
   step times of DeepSeek-R1 FP8 on 8 H200s (TensorRT-LLM, batch 1): runs
   workloads/specs/multigpu-fit-deepseek.yaml with it at 0 and takes the mean
   per-layer shortfall over the expert-parallel rows (EP4, EP8: the layouts
   batch-1 engines choose) over the 7 peers of attention TP8; the TP8 row is
   shown, not fitted.

Plain Python; prints the fits, their residuals and the preset lines.

usage: scripts/fit_multigpu.py [REAL_DATA_DIR] [--sim build/acceptmoe]
"""
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_data  # noqa: E402

SIZES = [2e3, 16e3, 128e3, 1e6, 2e6, 4e6]  # bytes: 2 KB / 16 KB / 128 KB / 1 MB / 2 MB / 4 MB


def step_fit(sim, rows):
    """layer_sync_per_peer_s from the simulator's step times at 0."""
    step = next((r for r in rows if r["setting"].startswith("TRT-LLM; batch 1; ISL 1600; attention TP8 + MoE TP8")), None)
    meas = {1: 13.78e-3, 4: 10.81e-3, 8: 11.00e-3}
    if step is None:
        print("fit_multigpu: no TP8 step-time row", file=sys.stderr)
    layers = 61  # DeepSeek-V3/R1 decoder layers
    with tempfile.TemporaryDirectory() as d:
        spec = os.path.join(os.path.dirname(__file__), "..", "workloads", "specs", "multigpu-fit-deepseek.yaml")
        subprocess.run([sim, "run", spec, "--set", "hardware.interconnect.layer_sync_per_peer_s=0", "--out", d, "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
        pred = {}
        with open(os.path.join(d, "summary.csv")) as f:
            for r in csv.DictReader(f):
                if r["policy"] == "autoregressive":
                    pred[int(r["parallel.moe_ep"])] = float(r["time_per_token_s"])
    a = sum((meas[ep] - pred[ep]) / layers for ep in (4, 8)) / 2
    print("layout,measured_ms,simulated_without_ms,simulated_with_ms,error")
    for ep, name in ((1, "TP8"), (4, "EP4 x TP2"), (8, "EP8")):
        w = pred[ep] + layers * a
        print(f"{name},{meas[ep] * 1e3:.2f},{pred[ep] * 1e3:.2f},{w * 1e3:.2f},{100 * (w - meas[ep]) / meas[ep]:+.1f}%"
              f"{'' if ep > 1 else ' (not fitted)'}")
    print(f"layer_sync_per_peer_s: {a / 7:.3g}  (attention TP8: 7 peers; {a:.3g} s per layer)")


def main():
    args = [a for a in sys.argv[1:]]
    sim = None
    if "--sim" in args:
        i = args.index("--sim")
        sim = args[i + 1]
        del args[i:i + 2]
    path = real_data.path(args, "multi-gpu", "step_times.csv", "fit_multigpu")
    if path is None:
        return 2
    row = next((r for r in csv.DictReader(open(path)) if r["quantity"].startswith("all-reduce latency (custom one-shot)")), None)
    if row is None:
        print("fit_multigpu: no custom one-shot all-reduce row", file=sys.stderr)
        return 2
    us = [float(v) for v in row["value"].split("/")]
    pts = [(b, t * 1e-6) for b, t in zip(SIZES, us) if b <= 1e6]
    n = len(pts)
    mx = sum(b for b, _ in pts) / n
    my = sum(t for _, t in pts) / n
    slope = sum((b - mx) * (t - my) for b, t in pts) / sum((b - mx) ** 2 for b, _ in pts)
    lat = my - slope * mx
    print("bytes,measured_us,fitted_us,error")
    for b, t in zip(SIZES, us):
        f = (lat + slope * b) * 1e6
        print(f"{b:.0f},{t},{f:.2f},{100 * (f - t) / t:+.0f}%{'' if b <= 1e6 else ' (not fitted)'}")
    print(f"# interconnect preset lines:\nallreduce_latency_s: {lat:.3g}\nallreduce_bw: {1 / slope:.3g}")
    if sim:
        step_fit(sim, list(csv.DictReader(open(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
