#!/usr/bin/env python3
"""Fits the fused-MoE call's fixed cost t0 and streaming efficiency eta
(docs/design.md §9: t(n) = t0 + U(n) * bytes_e / (eta * hbm_bw)) to the measured
fused-MoE timings in real-data/costs/fused_moe_timings.csv, per (gpu, dtype,
tuned) group with at least three token counts, by least squares on the
straight line t = t0 + U * c. U(n) is the expected union of n tokens under
random routing, E * (1 - (1 - k/E)^n). eta is relative to the hw preset's
hbm_bw (the effective copy rate the simulator uses), and also to the
datasheet peak. Plain Python; prints a table.

usage: scripts/fit_costs.py [REAL_DATA_DIR]   (default ../shared/real-data)
"""
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_data  # noqa: E402


E, K, D, F = 128, 8, 2048, 768  # Qwen3-30B-A3B expert shape
BYTES = {"fp8": 3 * D * F * 1.0, "bf16": 3 * D * F * 2.0}
# effective rate of the hw preset (workloads/hw) and datasheet peak, bytes/s
HBM = {"H100": (3.0e12, 3.35e12), "A100-PCIe": (1.8e12, 1.935e12)}


def union(n):
    return E * (1 - (1 - K / E) ** n)


def main():
    path = real_data.path(sys.argv[1:], "costs", "fused_moe_timings.csv", "fit_costs")
    if path is None:
        return 2
    groups = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if not r["shape"].startswith("qwen3-30b-a3b (E=128"):
                continue
            groups.setdefault((r["gpu"], r["dtype"], r["tuned"]), []).append((int(r["tokens"]), float(r["time_us"]) * 1e-6))
    print("gpu,dtype,tuned,points,t0_us,eta_of_preset_bw,eta_of_peak,max_rel_error")
    for (gpu, dt, tuned), pts in sorted(groups.items()):
        if len(pts) < 3 or gpu not in HBM:
            continue
        xs = [union(n) for n, _ in pts]
        ys = [t for _, t in pts]
        m = len(xs)
        mx, my = sum(xs) / m, sum(ys) / m
        c = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        t0 = my - c * mx
        eff, peak = HBM[gpu]
        eta = BYTES[dt] / (c * eff)
        err = max(abs(t0 + c * x - y) / y for x, y in zip(xs, ys))
        print(f"{gpu},{dt},{tuned},{m},{t0 * 1e6:.1f},{eta:.3f},{BYTES[dt] / (c * peak):.3f},{err:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
