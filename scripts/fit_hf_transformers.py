#!/usr/bin/env python3
"""Fits the Hugging Face transformers engine preset (docs/design.md §9, "a
research engine is an engine too") to real-data/costs/hf_transformers_speed.csv:
batch-1 decode speed of Qwen3 models on one H20 in transformers 4.51.3 (eager,
no CUDA graphs), 2,048 tokens after a 1-token prompt.

The form is the simulator's (sim/cost/cost.c, engine.moe_kernels: loop and
engine.host_overlap: true). Kernel counts are read from the transformers
4.51.3 source (models/qwen3/modeling_qwen3.py, models/qwen3_moe/...):
  a decoder layer's attention side: two RMSNorms of 8 kernels each (to fp32,
  pow, mean, add, rsqrt, mul, to bf16, weight), q/k/v projections with an
  RMSNorm on q and on k, RoPE on q and k (5 each), the cache's two cats,
  flash-attention, o_proj and two residual adds: 51 kernels; a dense MLP 5
  more (56); the MoE router 8 more (gate, softmax, topk, sum, div, cast,
  zeros, one_hot: 59). Without a synchronisation the host runs ahead, so a
  layer takes max(its launches, its device time); at batch 1 every row here
  is host-bound (the script checks).
  Qwen3MoeSparseMoeBlock in 4.51.3 loops over all 128 experts and runs each
  one's ten kernels (where, gather, gate, act, up, mul, down, weight gather,
  mul, index_add), empty or not; the where synchronises.

Unknowns, each pinned by one row:
  launch_s       host time per eager kernel (Python, dispatch, launch),
  step_host_s    the generate step's host work outside the layers,
                 (both from the two dense rows, Qwen3-8B and Qwen3-32B),
  expert_host_s  a visited expert's host time, its synchronisation included
                 (from the Qwen3-30B-A3B row, given the other two).
Three rows for three unknowns: the fit has no residual of its own. The
longer-prompt rows of the same model are out of sample (--sim runs them
through the whole simulator, prefill included).

usage: scripts/fit_hf_transformers.py [REAL_DATA_DIR] [--sim build/acceptmoe]
"""
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_data  # noqa: E402

# the hardware preset's numbers (workloads/hw/h20.yaml) and the simulator's fixed costs
HBM, PEAK, STEP_S, LAYER_FIXED = 3.58e12, 1.48e14, 2.0e-4, 2.0e-5
ATTN_SIDE, DENSE_MLP, ROUTER = 51, 5, 8
# dense Qwen3 shapes (config.json): layers, hidden, intermediate, q heads, kv heads (head_dim 128), vocab
DENSE = {"Qwen3-8B": (36, 4096, 12288, 32, 8), "Qwen3-32B": (64, 5120, 25600, 64, 8)}
VOCAB = 151936


def dense_layer_bytes(d, f, qh, kvh):
    return 2.0 * (d * (qh * 128) * 2 + d * (kvh * 128) * 2 + 3 * d * f)


def dense_row(name, launch):
    L, d, f, qh, kvh = DENSE[name]
    dev = dense_layer_bytes(d, f, qh, kvh) / HBM + LAYER_FIXED
    host = (ATTN_SIDE + DENSE_MLP) * launch
    head = VOCAB * d * 2.0 / HBM
    return L, dev, host, head


def main():
    args = sys.argv[1:]
    sim = None
    if "--sim" in args:
        i = args.index("--sim")
        sim = args[i + 1]
        del args[i:i + 2]
    path = real_data.path(args, "costs", "hf_transformers_speed.csv", "fit_hf_transformers")
    if path is None:
        return 2
    rows = [r for r in csv.DictReader(open(path)) if r["engine"] == "Hugging Face transformers"]

    def tpt(model, prompt="1"):
        r = next(r for r in rows if r["model"] == model and r["input_tokens"] == prompt)
        return 1.0 / float(r["speed_tok_s"])

    # two dense rows, host-bound: t = STEP_S + step_host + head + launch + L * 56 * launch
    t8, t32 = tpt("Qwen3-8B"), tpt("Qwen3-32B")
    L8, _, _, h8 = dense_row("Qwen3-8B", 0)
    L32, _, _, h32 = dense_row("Qwen3-32B", 0)
    k = ATTN_SIDE + DENSE_MLP
    # (t32 - h32) - (t8 - h8) = (L32 - L8) * k * launch
    launch = ((t32 - h32) - (t8 - h8)) / ((L32 - L8) * k)
    step_host = t8 - STEP_S - h8 - launch - L8 * k * launch
    print("row,measured_ms,layer_host_us,layer_device_us,bound")
    for name, t in (("Qwen3-8B", t8), ("Qwen3-32B", t32)):
        L, dev, host, _ = dense_row(name, launch)
        print(f"{name},{t * 1e3:.2f},{host * 1e6:.0f},{dev * 1e6:.0f},{'host' if host > dev else 'DEVICE (form invalid)'}")
    # the MoE row: 48 layers of 59 kernels plus 128 visited experts each
    t30 = tpt("Qwen3-30B-A3B")
    moe_layer_dev = 38273024 / HBM + LAYER_FIXED  # workloads/models/qwen3-30b-a3b.yaml attn_bytes_per_layer
    layer_host = (ATTN_SIDE + ROUTER) * launch
    head30 = 622329856 / HBM
    rest = STEP_S + step_host + head30 + launch + 48 * max(layer_host, moe_layer_dev)
    expert_host = (t30 - rest) / (48 * 128)
    print(f"Qwen3-30B-A3B,{t30 * 1e3:.2f},{layer_host * 1e6:.0f} + 128 x {expert_host * 1e6:.1f},"
          f"{moe_layer_dev * 1e6:.0f},host")
    print(f"# engine preset lines (workloads/engines/hf-transformers-*.yaml):\n"
          f"launch_s: {launch:.3g}\nstep_host_s: {step_host:.3g}\nexpert_host_s: {expert_host:.3g}")
    if sim:
        check(sim, rows)
    return 0


def check(sim, rows):
    """The Qwen3-30B-A3B rows through the whole simulator: a prompt's prefill,
    then 2,048 autoregressive tokens at the mean context they decode at."""
    spec = os.path.join(os.path.dirname(__file__), "..", "workloads", "specs", "hf-transformers-h20.yaml")
    print("prompt_tokens,measured_s,simulated_s (decode + prefill),error")
    for r in rows:
        if r["model"] != "Qwen3-30B-A3B":
            continue
        p, g = int(r["input_tokens"]), int(r["generated_tokens"])
        meas = (p + g) / float(r["speed_tok_s"])
        with tempfile.TemporaryDirectory() as d:
            sets = [f"workload.prompt_tokens={p if p > 1 else 0}", f"workload.context_tokens={p + g // 2}"]
            cmd = [sim, "run", spec, "--out", d, "--quiet"]
            for s_ in sets:
                cmd += ["--set", s_]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(d, "summary.csv")) as f:
                row = next(x for x in csv.DictReader(f) if x["policy"] == "autoregressive")
        pre = float(row["prefill_s_per_request"] or 0)
        sim_s = float(row["time_per_token_s"]) * g + pre
        print(f"{p},{meas:.1f},{sim_s:.1f} ({sim_s - pre:.1f} + {pre:.1f}),{100 * (sim_s - meas) / meas:+.1f}%")


if __name__ == "__main__":
    sys.exit(main())
