#!/usr/bin/env python3
"""Checks the one cost function against vLLM's own profiled step-cost table
(real-data serving/step_costs.csv: DeepSeek-V4-Flash-0731 on four B300s, TP4,
CUDA graphs captured up to 1,024 tokens, an 8,192-token KV context) and fits
the terms that table alone decides:
  1. hardware.layer_fixed_s of the b300 (a decoder layer's fixed device time;
     the h200's lead before): the captured steps of 1-16 tokens, where a
     step is its fixed costs;
  2. hardware.moe_peak_share of the b300 (the share of the format's peak an
     expert's tokens past moe_flops_tokens reach; the whole datasheet lead
     at 75% before): the steps past 12 tokens per expert whose bucket holds
     a grid point (1,024 tokens, captured; 16,384, eager, where the device
     leads);
  3. model.kernels_per_layer (an eager layer's host launches): the eager
     steps of 2,048-8,185 tokens, where the table is flat and the host leads;
  4. engine.draft_token_s (what each drafted token adds to a draft forward).
Terms 1-3 are scanned in that order on the relative error of their own
buckets, each with the others at their values so far, twice; the middle of
the captured range (streaming the experts: moe_eta, borrowed) is a check.

The simulator's verify step is `acceptmoe costtable` over the deepseek-v4-flash
preset in its own format, mxfp4 (the released checkpoint's FP4 experts; fp8
would need more than the 8 TB/s datasheet to grow as little as the table
does from 1 to 64 tokens, 3.0 ms, while 200 more experts are read), on four
b300s (attention TP4, experts split TP4) under the vllm preset with a
1,024-token capture.
Each measured bucket is compared at the grid point inside it (or the
nearest on its side of the capture): up to 2,048 requests of one token, past
that 2,048 requests of 2, 4 or 8 (a verify step alone: the draft and cycle
terms set to 0).

The draft table is compared with the preset's draft forward (its MTP-layer
bytes, the engine's draft step) in a pass of R requests drafting k = 7 in
one forward, 8 tokens each; draft_token_s is the least-squares slope over
R (the intercept, the engine's draft_step_s, fitted elsewhere, is kept).

An eager layer's host time is model.kernels_per_layer launches (the
engine's 14.5 us each) and one fused-MoE call from Python, and overlaps the
layer's device time (engine.host_overlap).

usage: scripts/fit_step_costs.py [REAL_DATA_DIR]   (ACCEPTMOE: the binary)
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_data  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
A = os.environ.get("ACCEPTMOE", os.path.join(ROOT, "build", "acceptmoe"))
DRAFTED = 8  # tokens a DSpark draft forward carries per request at k = 7: the block and the last committed
SPEC = """name: step-costs-v4-flash
model: deepseek-v4-flash
hardware: {{preset: b300, gpus: 4, interconnect: nvlink5}}
parallel: {{attention_tp: 4, moe_ep: 1, moe_tp: 4}}
engine: {{preset: vllm, graph_capture_max_tokens: 1024}}
workload:
  context_tokens: 8192
  batch: {batch}
  seed: 1
  tree: {{depth: {depth}, top_k: 1, nodes: {nodes}}}
  acceptance: {{al: [2.0]}}
policies: [natural]
"""
SETS = ["model.expert_bytes=0"]
# the verify step alone, as the table times it: no draft forward or cycle term
VERIFY_ONLY = ["model.draft_head_bytes=0", "engine.draft_step_s=0", "hardware.draft_step_fixed_s=0",
               "engine.cycle_host_s=0", "engine.draft_extend_s=0", "engine.sample_s=0", "engine.tree_node_s=0",
               "engine.draft_token_s=0"]


def steps(tmp, sets):
    """The simulator's verify step (seconds) keyed by its tokens: up to 2,048
    requests of one token, past that 2,048 requests of 2, 4 or 8."""
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(batch=2048, depth=7, nodes=8))
    out = os.path.join(tmp, "table.json")
    cmd = [A, "costtable", spec, "--quiet", "-o", out]
    for x in SETS + VERIFY_ONLY + sets:
        cmd += ["--set", x]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    t = json.load(open(out))
    by = {}
    for i, b in enumerate(t["batch"]):
        for j, n in enumerate(t["tokens_per_request"]):
            if n == 1 or b == 2048:
                by.setdefault(b * n, t["step_s"][i][j])
    return by


def probe(lo, hi, grid):
    """The grid point a bucket is compared at: inside [lo, hi], else the
    nearest, on the bucket's side of the 1,024-token capture."""
    inside = [t for t in grid if lo <= t <= hi]
    if inside:
        return inside[0]
    side = [t for t in grid if (t > 1024) == (lo > 1024)]
    return min(side, key=lambda t: min(abs(t - lo), abs(t - hi)))


def draft_forward_s(tmp, requests, sets):
    """The preset's draft forward in a pass of `requests` DSpark requests
    (k = 7, one draft forward), from a short run's summary."""
    spec = os.path.join(tmp, "d.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(batch=requests, depth=7, nodes=8))
    out = os.path.join(tmp, "d")
    cmd = [A, "run", spec, "--quiet", "--out", out, "--set", "workload.blocks=" + str(4 * requests),
           "--set", "workload.tree.draft_passes=1"]
    for x in SETS + sets:
        cmd += ["--set", x]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "summary.csv")) as f:
        r = next(csv.DictReader(f))
    per_tok = float(r["draft_s_per_token"]) + float(r["draft_extend_s_per_token"])
    return per_tok * float(r["committed_tokens"]) / float(r["forward_passes"])


def scan(tmp, base, key, values, buckets, grid):
    """The value of `key` among `values` with the least squared relative
    error over `buckets`, the others at `base`; and its table."""
    best = None
    for v in values:
        table = steps(tmp, base + [f"{key}={v}"])
        err = sum((table[probe(lo, hi, grid)] * 1e3 / ms - 1) ** 2 for lo, hi, ms in buckets)
        if best is None or err < best[1]:
            best = (v, err, table)
    return best[0], best[2]


def refine(tmp, base, key, coarse, step, buckets, grid, lo_bound, hi_bound, fmt):
    """A coarse scan, then a fine one of `step` around its best."""
    v, _ = scan(tmp, base, key, coarse, buckets, grid)
    fine = [float(fmt % (v + i * step)) for i in range(-5, 6) if lo_bound <= v + i * step <= hi_bound]
    return scan(tmp, base, key, fine, buckets, grid)


def main():
    p = real_data.path(sys.argv[1:], "serving", "step_costs.csv", "fit_step_costs")
    if not p:
        return 0
    rows = list(csv.DictReader(open(p)))
    verify = [(int(r["x_lo"]), int(r["x_hi"]), float(r["ms"])) for r in rows if r["table"] == "verify"]
    draft = [(int(r["x_lo"]), int(r["x_hi"]), float(r["ms"])) for r in rows if r["table"] == "draft"]
    with tempfile.TemporaryDirectory() as tmp:
        preset = steps(tmp, [])
        grid = sorted(preset)
        inside = [(lo, hi, ms) for lo, hi, ms in verify if any(lo <= t <= hi for t in grid)]
        fixed = [b for b in inside if b[1] <= 16]
        per_expert = 12 * 256 / 6  # tokens in a step past moe_flops_tokens per expert, on average
        past = [b for b in inside if b[0] > per_expert and (b[1] <= 1025 or b[0] >= 16384)]
        eager = [(lo, hi, ms) for lo, hi, ms in verify if lo > 1024 and hi <= 8192]
        # each term: its coarse scan, fine step, buckets, bounds and format; scanned in turn, twice
        plan = [("hardware.layer_fixed_s", [i * 4e-6 for i in range(11)], 4e-7, fixed, 0, 1, "%.3g"),
                ("hardware.moe_peak_share", [i / 20 for i in range(1, 21)], 0.005, past, 0.005, 1, "%.3f"),
                ("model.kernels_per_layer", list(range(20, 401, 20)), 2, eager, 2, 400, "%g")]
        fit = {"hardware.layer_fixed_s": 2e-5, "hardware.moe_peak_share": 1.0, "model.kernels_per_layer": 118}
        for _ in range(2):
            for key, coarse, step, buckets, lo_bound, hi_bound, fmt in plan:
                others = [f"{x}={v}" for x, v in fit.items() if x != key]
                fit[key], table = refine(tmp, others, key, coarse, step, buckets, grid, lo_bound, hi_bound, fmt)
        lf, share, k = fit["hardware.layer_fixed_s"], fit["hardware.moe_peak_share"], fit["model.kernels_per_layer"]
        # the draft: the preset's forward at x = 0, and the per-token slope by least squares
        d0 = {lo: draft_forward_s(tmp, lo, ["engine.draft_token_s=0"]) for lo, _, _ in draft}
        sxy = sum((ms / 1e3 - d0[lo]) * DRAFTED * lo for lo, _, ms in draft)
        sxx = sum((DRAFTED * lo) ** 2 for lo, _, _ in draft)
        x = sxy / sxx
        print(f"fitted: hardware.layer_fixed_s {lf:.3g} s and hardware.moe_peak_share {share:.3g} (the b300), "
              f"model.kernels_per_layer {k:g} (an eager DeepSeek-V4-Flash layer under vLLM; the engine's "
              f"ordinary layer is 12), engine.draft_token_s {x:.3g} s (a DSpark draft forward at {DRAFTED} tokens "
              f"a request)")
        print("table,x_lo,x_hi,probe,measured_ms,predicted_ms,error,before_fit_ms,in_fit")
        for lo, hi, ms in verify:
            t = probe(lo, hi, grid)
            b = (lo, hi, ms)
            use = ("layer_fixed_s" if b in fixed else "moe_peak_share" if b in past
                   else "kernels_per_layer" if b in eager else "no")
            print(f"verify,{lo},{hi},{t},{ms:.2f},{table[t] * 1e3:.2f},{100 * (table[t] * 1e3 / ms - 1):+.1f}%,"
                  f"{preset[t] * 1e3:.2f},{use}")
        for lo, hi, ms in draft:
            d = (d0[lo] + x * DRAFTED * lo) * 1e3
            print(f"draft,{lo},{hi},{lo},{ms:.2f},{d:.2f},{100 * (d / ms - 1):+.1f}%,{d0[lo] * 1e3:.2f},yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
