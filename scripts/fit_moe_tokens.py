#!/usr/bin/env python3
"""Fits how one MoE layer's time grows with the tokens in it (docs/design.md §9,
§17) to real-data batch/moe_module_vs_tokens.csv: a DeepSeek-V3-shaped routed
MoE layer (hidden 7168, 256 experts, top-8, moe_intermediate 2048, NVFP4) on one
B200, one rank of TP8, TensorRT-LLM's grouped GEMM (the engine default), 1-384
tokens.

The form is the cost function's own (sim/cost/cost.h):
    t(n) = t0 + sum over experts e of max(mem_s, n_e * per_token_s)
with n_e an expert's tokens. The benchmark does not state its routing, so
n_e ~ Binomial(n, k/E) (uniform routing; the expectation of the max is summed
exactly). Three coefficients, t0, mem_s and per_token_s, fitted together by
least squares on the relative residuals (a coordinate search that halves its
steps), starting from the memory-bound line t = t0 + U(n) mem_s on n <= 128
(U(n) = E (1 - (1 - k/E)^n) experts loaded).
Prints the fit, its residual at every point and what each coefficient means
in the simulator's terms: mem_s as a streaming efficiency of the B200's HBM,
per_token_s as an effective FLOP rate. Plain Python.

With --sim it also runs workloads/specs/moe-tokens-b200.yaml (the b200 preset,
which carries this fit, and DeepSeek-V3's NVFP4 experts on 8 B200s, plain
decoding at a batch of n requests: n tokens in each pass's MoE layers) through
the whole simulator and prints its MoE time per layer and pass beside the
measured module time, at the pass's mean occupancy (the generated routing, not
uniform: its union stops short of 256).

usage: scripts/fit_moe_tokens.py [REAL_DATA_DIR] [--sim]   (default ../shared/real-data;
       ACCEPTMOE: the binary)
"""
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_data  # noqa: E402


E, K = 256, 8
HIDDEN, INTER, TP = 7168, 2048, 8
PARAMS = 3 * HIDDEN * (INTER // TP)          # one expert's slice on one rank
NVFP4_BYTES = 0.5 + 1.0 / 16                 # 4-bit values, an fp8 scale per 16
EXPERT_BYTES = PARAMS * NVFP4_BYTES
FLOPS_PER_TOKEN = 2 * PARAMS                 # one token through one expert slice
B200_HBM = 8.0e12                            # datasheet, bytes/s
B200_FP4_DENSE = 9.0e15                      # datasheet dense FP4, FLOP/s


def union(n):
    return E * (1 - (1 - K / E) ** n)


def expected_max(n, mem, pt):
    """E[max(mem, X pt)] over X ~ Binomial(n, K/E), counting only loaded experts
    (X >= 1), times E: the layer's expert time under uniform routing."""
    p = K / E
    total = 0.0
    logq = math.log1p(-p)
    for x in range(1, n + 1):
        lw = math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1) + x * math.log(p) + (n - x) * logq
        w = math.exp(lw)
        if w < 1e-15 and x > n * p:
            break
        total += w * max(mem, x * pt)
    return E * total


def model(n, t0, mem, pt):
    return t0 + expected_max(n, mem, pt)


def through_simulator(pts):
    """The spec's plain decoding at each measured token count: MoE time per layer and pass."""
    import subprocess
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = os.environ.get("ACCEPTMOE", os.path.join(root, "build", "acceptmoe"))
    spec = os.path.join(root, "workloads", "specs", "moe-tokens-b200.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([binary, "run", spec, "--quiet", "--out", tmp], check=True, stdout=subprocess.DEVNULL)
        rows = list(csv.DictReader(open(os.path.join(tmp, "summary.csv"))))
    sim = {}
    for r in rows:
        if r["policy"] != "autoregressive":
            continue
        per_pass = float(r["moe_s_per_token"]) * float(r["committed_tokens"]) / float(r["forward_passes"]) / 58
        sim[int(r["workload.batch"])] = (per_pass, float(r["batch_occupancy_mean"]), float(r["union_mean"]))
    print("num_tokens,simulated_tokens,simulated_union,measured_us,simulated_us,residual")
    for n, t in pts:
        if n in sim:
            s, occ, u = sim[n]
            print(f"{n},{occ:.1f},{u:.1f},{t * 1e6:.2f},{s * 1e6:.2f},{100 * (s - t) / t:+.1f}%")


def main():
    args = [a for a in sys.argv[1:] if a != "--sim"]
    path = real_data.path(args, "batch", "moe_module_vs_tokens.csv", "fit_moe_tokens")
    if path is None:
        return 2
    with open(path) as f:
        pts = [(int(r["num_tokens"]), float(r["trtllm_gen_grouped_us"]) * 1e-6) for r in csv.DictReader(f)]
    low = [(n, t) for n, t in pts if n <= 128]
    xs = [union(n) for n, _ in low]
    ys = [t for _, t in low]
    m = len(xs)
    mx, my = sum(xs) / m, sum(ys) / m
    mem = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    t0 = my - mem * mx
    def cost(c):
        return sum(((model(n, *c) - t) / t) ** 2 for n, t in pts)

    c = [t0, mem, mem / 10]
    step = [0.5 * t0, 0.5 * mem, 0.5 * mem / 10]
    best = cost(c)
    for _ in range(40):  # halve the steps until they are small against the values
        moved = True
        while moved:
            moved = False
            for i in range(3):
                for sgn in (1, -1):
                    trial = list(c)
                    trial[i] = max(trial[i] + sgn * step[i], 0.0)
                    v = cost(trial)
                    if v < best:
                        best, c, moved = v, trial, True
        step = [x / 2 for x in step]
    t0, mem, pt = c
    print("num_tokens,experts_loaded,measured_us,fitted_us,residual")
    worst = 0.0
    for n, t in pts:
        p = model(n, t0, mem, pt)
        worst = max(worst, abs(p - t) / t)
        print(f"{n},{union(n):.1f},{t * 1e6:.2f},{p * 1e6:.2f},{100 * (p - t) / t:+.1f}%")
    print(f"moe_t0_s: {t0:.3g}")
    print(f"mem_s: {mem:.3g} s per loaded expert = {EXPERT_BYTES / 1e6:.2f} MB at {EXPERT_BYTES / mem / 1e12:.2f} TB/s"
          f" (moe_eta {EXPERT_BYTES / mem / B200_HBM:.2f} of the B200's {B200_HBM / 1e12:.0f} TB/s)")
    print(f"per_token_s: {pt:.3g} s per token and expert = {FLOPS_PER_TOKEN / pt / 1e12:.0f} TFLOP/s effective"
          f" ({FLOPS_PER_TOKEN / pt / B200_FP4_DENSE:.3f} of dense FP4 peak); compute passes memory at"
          f" {mem / pt:.0f} tokens per expert")
    print(f"worst residual: {100 * worst:.1f}%")
    if "--sim" in sys.argv[1:]:
        through_simulator(pts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
