#!/usr/bin/env python3
"""Grid search for the generator's routing defaults (docs/generator.md).

Runs `acceptmoe inspect` on the Mixtral fit spec over a grid of
(temperature, locality, skew) and prints the points closest to the real
Mixtral-8x7B window-union curve. The targets are the statistics of the real
trace (`acceptmoe inspect` on it reproduces them); no data file is read here.

usage: scripts/fit_generator.py [build/acceptmoe] [--blocks N]
"""
import itertools, json, subprocess, sys

TARGET = {"2": 3.31, "4": 4.98, "8": 6.62, "16": 7.58}
TOP1 = 0.69
exe = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "build/acceptmoe"
blocks = int(sys.argv[sys.argv.index("--blocks") + 1]) if "--blocks" in sys.argv else 1000

def measure(t, rho, skew, noise=1.0, corr=0.5, blocks=blocks, seed=11):
    out = subprocess.run([exe, "inspect", "workloads/specs/mixtral-fit.yaml", "--json",
                          "--set", f"workload.blocks={blocks}", "--set", f"workload.seed={seed}",
                          "--set", f"workload.routing.temperature={t}",
                          "--set", f"workload.routing.locality={rho}",
                          "--set", f"workload.routing.skew={skew}",
                          "--set", f"workload.routing.noise={noise}",
                          "--set", f"workload.routing.layer_correlation={corr}"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)

def error(s):
    rel = max(abs(s["window_union"][w] / v - 1) for w, v in TARGET.items())
    return rel, abs(s["top1_weight_mean"] - TOP1)

results = []
for t, rho, skew in itertools.product([0.5, 0.6, 0.7, 0.8], [0.3, 0.45, 0.6, 0.7, 0.8], [0.3, 0.6, 0.9, 1.2]):
    s = measure(t, rho, skew)
    rel, dt = error(s)
    results.append((rel + dt, rel, dt, t, rho, skew, s["window_union"], s["top1_weight_mean"]))
    print(f"T={t} rho={rho} skew={skew}: max rel err {rel:.3f}, top1 {s['top1_weight_mean']:.3f}", flush=True)
results.sort()
print("best:")
for r in results[:5]:
    print(r)
