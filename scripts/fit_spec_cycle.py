#!/usr/bin/env python3
"""Fits the speculative cycle's terms of the cost function (docs/design.md §9)
to engines' own measurements on DENSE targets (real-data costs/spec_cycle.csv),
through the whole simulator, and prints the residuals (docs/validation.md).

A row of the file becomes a spec: the dense target's preset (workloads/models/),
the GPU's preset, tensor parallelism, the tree (steps = depth, top-k, tokens)
and its accept length as workload.acceptance.tau. The simulator runs the
`natural` row (one cycle a pass) and the `autoregressive` row (one plain step a
token); a cycle's time is time_per_token x committed / forward passes.

The cycle is linear in the fitted coefficients (draft_step_s per draft forward,
tree_node_s per verified node, cycle_host_s per cycle), so each group's rows
are run once with them at 0 and solved by least squares on relative
residuals; then every row is run again under the fitted engine and compared.

Groups (one engine preset each):
  sglang        SGLang, CUDA graphs on (PR #4247, #4716, issue #11948)
  sglang-eager  SGLang, CUDA graphs off: launch_s and the fused-MoE call's host
                time from #1401's eager/graph pairs, the cycle from #4247's
                graphs-off rows and #3466/#3500's ratio
  vllm          vLLM V1, graphs on (issue #20780): the plain step's host work
                (no overlap at batch 1 then) from its plain row; chains: a
                draft forward and a verified node rise together, so tree_node_s
                is not separable and stays 0
Rows whose GPU the source does not state are compared as ratios to the same
source's plain step (the file's README says so).

usage: scripts/fit_spec_cycle.py [--sim build/acceptmoe] [REAL_DATA_DIR]
(the fitted values go into workloads/engines/{sglang,sglang-eager,vllm}.yaml by hand, with their sources)
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_data  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# EAGLE-1/2 drafts for Llama-3-8B-class targets: one decoder layer (fc 2d->d,
# attention, MLP) plus the target's own 128k head read again (our arithmetic)
EAGLE2_LLAMA3_8B = 503316480 + 1050673152

LAYERS = {"llama-3.1-8b": 32, "llama-3.3-70b": 80, "llama-2-7b": 32, "qwen3-8b": 36}
# SGLang PR #1401 states a 4x CUDA-graph gain on DeepSeek-Coder-V2-Lite (Triton fused
# MoE) in plain decoding, in its text rather than as a row (costs/README.md)
MOE_EAGER_RATIO = 4.0
FITTED = ("draft_step_s", "tree_node_s", "cycle_host_s")


def rows_of(path):
    return list(csv.DictReader(open(path)))


def value(rows, source, quantity, **match):
    """The value of the one row whose version_or_pr contains `source`, with
    that quantity and the given columns."""
    hit = [r for r in rows if source in r["version_or_pr"] and r["quantity"] == quantity and
           all(r[k] == str(v) for k, v in match.items())]
    if len(hit) != 1:
        raise SystemExit(f"fit_spec_cycle: {len(hit)} rows for {source} {quantity} {match}")
    return float(hit[0]["value"])


def cases(rows):
    """The rows to compare, each: name, group, what to run, what was measured
    (cycle and plain in ms; absolute or as a ratio to the plain step)."""
    c = []

    def sg(source, draft, steps, graphs, **kw):
        acc = value(rows, source, "accept_length", draft=draft, steps=steps, cuda_graphs=graphs)
        tps = value(rows, source, "spec_tok_s", draft=draft, steps=steps, cuda_graphs=graphs)
        return acc, 1000 * acc / tps

    plain_docs = 1000 / value(rows, "docs", "plain_tok_s")
    for steps in (5, 8):
        acc, cyc = sg("#4247", "EAGLE-3", steps, "on")
        c.append(dict(name=f"SGLang #4247 Llama-3.1-8B EAGLE-3 {steps}/8/64", group="sglang", model="llama-3.1-8b",
                      hw="h100", tp=1, steps=steps, topk=8, tokens=64, tau=acc, cycle=cyc, plain=plain_docs))
    acc, cyc = sg("#4247", "EAGLE-2", 8, "on")
    c.append(dict(name="SGLang #4247 Llama-3.1-8B EAGLE-2 8/8/64", group="sglang", model="llama-3.1-8b", hw="h100",
                  tp=1, steps=8, topk=8, tokens=64, tau=acc, cycle=cyc, plain=plain_docs, draft=EAGLE2_LLAMA3_8B))
    acc, cyc = sg("#4716", "EAGLE-3", 8, "on")
    c.append(dict(name="SGLang #4716 Llama-3.3-70B TP8 EAGLE-3 8/8/64", group="sglang", model="llama-3.3-70b",
                  hw="h100", tp=8, steps=8, topk=8, tokens=64, tau=acc, cycle=cyc,
                  plain=1000 / value(rows, "#4716", "plain_tok_s")))
    a = [value(rows, f"#11948 (v0.5.3.post3; 2025-10-22; {w}", "accept_length") for w in ("one", "next")]
    t = [value(rows, f"#11948 (v0.5.3.post3; 2025-10-22; {w}", "spec_tok_s") for w in ("one", "next")]
    c.append(dict(name="SGLang #11948 Qwen3-8B TP2 A800 EAGLE-3 3/1/4", group="sglang", model="qwen3-8b", hw="a100",
                  tp=2, steps=3, topk=1, tokens=4, tau=sum(a) / 2, cycle=sum(1000 * x / y for x, y in zip(a, t)) / 2,
                  plain=None))
    # graphs off
    for draft, db in (("EAGLE-3", None), ("EAGLE-2", EAGLE2_LLAMA3_8B)):
        acc, cyc = sg("#4247", draft, 8, "off")
        c.append(dict(name=f"SGLang #4247 Llama-3.1-8B {draft} 8/8/64, graphs off",
                      group="sglang-eager" if draft == "EAGLE-3" else "sglang-eager (not fitted)",
                      model="llama-3.1-8b", hw="h100", tp=1, steps=8, topk=8, tokens=64, tau=acc, cycle=cyc,
                      plain=None, draft=db))
    # #3466 (eager) against #3500 (graphs): the same prompt, greedy: one accept length
    r = value(rows, "#3500", "spec_tok_s") / value(rows, "#3466", "spec_tok_s")
    c.append(dict(name="SGLang #3466/#3500 Llama-2-7B EAGLE-2 5/8/64, eager cycle / graphed cycle",
                  group="sglang-eager (not fitted)", model="llama-2-7b", hw="h100", tp=1, steps=5, topk=8, tokens=64, tau=3.5,
                  ratio_of="sglang", ratio=r))
    # vLLM V1 chains
    plain_v = value(rows, "#20780", "tpot_ms", draft="none")
    for draft, ks, db in (("EAGLE-3", range(2, 8), None), ("EAGLE-1", (2, 7), EAGLE2_LLAMA3_8B)):
        g = "vllm" if draft == "EAGLE-3" else "vllm (not fitted)"
        for k in ks:
            acc = value(rows, "#20780", "accept_length", draft=draft, steps=k)
            tpot = value(rows, "#20780", "tpot_ms", draft=draft, steps=k)
            c.append(dict(name=f"vLLM #20780 Llama-3.1-8B {draft} K={k}", group=g, model="llama-3.1-8b",
                          hw="h100", tp=1, steps=k, topk=1, tokens=k + 1, tau=acc, cycle=acc * tpot, plain=plain_v,
                          draft=db))
    # out of sample: plain steps and ratios of sources that state no GPU
    c.append(dict(name="SGLang #2150 Llama-2-7B plain step (H100)", group="sglang (not fitted)", model="llama-2-7b",
                  hw="h100", tp=1, steps=1, topk=1, tokens=2, tau=1.5,
                  plain=1000 / value(rows, "#2150", "plain_tok_s")))
    tri = value(rows, "#1401 (2024-09-12; triton", "decode_step_ms", cuda_graphs="off") / \
        value(rows, "#1401 (2024-09-12; triton", "decode_step_ms", cuda_graphs="on")
    c.append(dict(name="SGLang #1401 Llama-3-8B plain, eager / graphs, Triton attention", model="llama-3.1-8b",
                  group="sglang-eager (not fitted)", hw="h100", tp=1, steps=1, topk=1, tokens=2, tau=1.5,
                  plain_ratio_of="sglang", ratio=tri))
    for m in ("Qwen3-1.7B", "Qwen3-8B", "Qwen3-32B"):
        acc = value(rows, "AngelSlim", "accept_length", model=m)
        r = value(rows, "AngelSlim", "plain_tok_s", model=m) * acc / value(rows, "AngelSlim", "spec_tok_s", model=m)
        c.append(dict(name=f"vLLM AngelSlim {m} EAGLE-3 K=2, cycle / plain step (GPU not stated: H100)",
                      group="vllm (not fitted)", model=m.lower(), hw="h100", tp=1, steps=2, topk=1, tokens=3,
                      tau=acc, cycle_over_plain=r))
    p16 = 1000 / value(rows, "#16035", "plain_tok_s")
    for k in (2, 4):
        acc = value(rows, "#16035", "accept_length", steps=k)
        cyc = 1000 * acc / value(rows, "#16035", "spec_tok_s", steps=k)
        c.append(dict(name=f"vLLM #16035 Llama-3-8B EAGLE-1 K={k}, draft eager, cycle / plain step",
                      group="vllm (not fitted)", model="llama-3.1-8b", hw="h100", tp=1, steps=k, topk=1,
                      tokens=k + 1, tau=acc, cycle_over_plain=cyc / p16, draft=EAGLE2_LLAMA3_8B))
    return c


def spec_text(cs, engine, blocks):
    # several GPUs: SGLang's per-peer sync of a tensor-parallel layer (scripts/fit_layer_sync.sh)
    hw = cs["hw"] if cs["tp"] == 1 else \
        f"{{preset: {cs['hw']}, gpus: {cs['tp']}, interconnect: nvlink4, interconnect.layer_sync_per_peer_s: 6.08e-6}}"
    model = cs["model"] if "draft" not in cs or cs["draft"] is None else \
        f"{{preset: {cs['model']}, draft_head_bytes: {cs['draft']}}}"
    eng = "{" + ", ".join(f"{k}: {v}" for k, v in engine.items()) + "}" if isinstance(engine, dict) else engine
    par = "" if cs["tp"] == 1 else f"parallel: {{moe_ep: 1, moe_tp: {cs['tp']}}}\n"
    return (f"name: cycle\nmodel: {model}\nhardware: {hw}\n{par}engine: {eng}\n"
            f"workload:\n  blocks: {blocks}\n  seed: 1\n"
            f"  tree: {{depth: {cs['steps']}, top_k: {cs['topk']}, nodes: {cs['tokens']}}}\n"
            f"  acceptance: {{tau: {cs['tau']:.3f}}}\n"
            "policies:\n  - natural\n  - {draft: autoregressive}\n")


def simulate(sim, cs, engine, blocks=60):
    """(cycle ms, plain ms) of one case under `engine` (a preset name or keys)."""
    with tempfile.TemporaryDirectory() as d:
        spec = os.path.join(d, "s.yaml")
        open(spec, "w").write(spec_text(cs, engine, blocks))
        out = os.path.join(d, "out")
        p = subprocess.run([sim, "run", spec, "--out", out, "--quiet"], capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"fit_spec_cycle: {sim} failed on {cs['name']}:\n{p.stderr}")
        rows = {r["policy"]: r for r in csv.DictReader(open(os.path.join(out, "summary.csv")))}
    n, a = rows["natural"], rows["autoregressive"]
    cyc = 1000 * float(n["time_per_token_s"]) * float(n["committed_tokens"]) / float(n["forward_passes"])
    return cyc, 1000 * float(a["time_per_token_s"])


def bisect(f, lo, hi):
    """The root of an increasing f between lo and hi (geometric steps)."""
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        if f(mid) > 0:
            hi = mid
        else:
            lo = mid
    return (lo * hi) ** 0.5


def lstsq(X, y):
    """Least squares for a few columns (normal equations, Gauss-Jordan)."""
    n = len(X[0])
    A = [[sum(r[i] * r[j] for r in X) for j in range(n)] + [sum(r[i] * v for r, v in zip(X, y))] for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(A[r][i]))
        A[i], A[p] = A[p], A[i]
        for r in range(n):
            if r != i and A[i][i]:
                f = A[r][i] / A[i][i]
                A[r] = [a - f * b for a, b in zip(A[r], A[i])]
    return [A[i][n] / A[i][i] if A[i][i] else 0 for i in range(n)]


def fit_group(sim, cs_all, group, base_engine, free):
    """Fits the `free` coefficients of a group's absolute cycles; returns them
    (seconds) in FITTED order, the others 0."""
    X, y = [], []
    for cs in cs_all:
        if cs["group"] != group or "cycle" not in cs:
            continue
        zero = {k: 0 for k in free if k != "draft_step_s"}  # (draft_step_s 0 is the hardware's: a tiny value)
        if "draft_step_s" in free:
            zero["draft_step_s"] = 1e-12
        cyc0, _ = simulate(sim, cs, dict(base_engine, **zero))
        # d cycle / d coefficient (ms per second of coefficient): forwards, nodes, one
        grad = {"draft_step_s": cs["steps"], "tree_node_s": cs["tokens"] * LAYERS[cs["model"]], "cycle_host_s": 1}
        X.append([grad[k] * 1000 / cs["cycle"] for k in free])
        y.append((cs["cycle"] - cyc0) / cs["cycle"])
    theta = lstsq(X, y)
    got = dict(zip(free, theta))
    return {k: got.get(k, 0.0) for k in FITTED}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", default=os.path.join(ROOT, "build", "acceptmoe"))
    ap.add_argument("data", nargs="*")
    a = ap.parse_args()
    path = real_data.path(a.data, "costs", "spec_cycle.csv", "fit_spec_cycle")
    if path is None:
        return 2
    rows = rows_of(path)
    cs_all = cases(rows)

    # SGLang eager (CUDA graphs off): PyTorch's launches run ahead of the device
    # (max(host, device) a layer, host_overlap); kernels per layer is a count, not a fit.
    # launch_s from #1401's FlashInfer pair, the fused-MoE call's host time from the same
    # PR's 4x on DeepSeek-Coder-V2-Lite (Triton fused MoE); the GPU is not stated, so both
    # are fitted as ratios of eager to graphed plain decoding
    k_layer = 12
    fi_ratio = value(rows, "#1401 (2024-09-12; flashinfer", "decode_step_ms", cuda_graphs="off") / \
        value(rows, "#1401 (2024-09-12; flashinfer", "decode_step_ms", cuda_graphs="on")
    dense = dict(name="plain", model="llama-3.1-8b", hw="h100", tp=1, steps=1, topk=1, tokens=2, tau=1.5)
    moe = dict(dense, model="deepseek-v2-lite")
    eager = {"cuda_graphs": "false", "host_overlap": "true", "kernels_per_layer": k_layer}
    _, dense_on = simulate(a.sim, dense, {})
    launch = bisect(lambda x: simulate(a.sim, dense, dict(eager, launch_s=x))[1] / dense_on - fi_ratio, 1e-7, 1e-3)
    eager["launch_s"] = f"{launch:.4g}"
    _, moe_on = simulate(a.sim, moe, {})
    call = bisect(lambda x: simulate(a.sim, moe, dict(eager, moe_call_host_s=x))[1] / moe_on - MOE_EAGER_RATIO,
                  1e-7, 1e-2)
    eager["moe_call_host_s"] = f"{call:.4g}"
    fits = {"sglang": fit_group(a.sim, cs_all, "sglang", {}, FITTED)}
    # vLLM: the plain step's host work first (overlap off), then the cycle
    vplain = next(cs for cs in cs_all if cs["group"] == "vllm")
    _, p0 = simulate(a.sim, vplain, {"overlap_scheduler": "false", "step_host_s": 1e-12})
    vhost = max(vplain["plain"] - p0, 0) / 1000
    vbase = {"overlap_scheduler": "false", "step_host_s": f"{vhost:.4g}"}
    fits["vllm"] = fit_group(a.sim, cs_all, "vllm", vbase, ("draft_step_s", "cycle_host_s"))
    # graphs off changes launches, not the cycle's device terms: sglang's, and the host per cycle refitted
    ebase = dict(eager, draft_step_s=f"{fits['sglang']['draft_step_s']:.4g}",
                 tree_node_s=f"{fits['sglang']['tree_node_s']:.4g}")
    fits["sglang-eager"] = fit_group(a.sim, cs_all, "sglang-eager", ebase, ("cycle_host_s",))
    engines = {"sglang": {}, "vllm": vbase, "sglang-eager": ebase}
    for g in engines:
        engines[g] = dict(engines[g], **{k: f"{v:.4g}" for k, v in fits[g].items() if v > 0})
    print("# fitted (s):")
    for g, e in engines.items():
        print(f"{g}: " + ", ".join(f"{k} {v}" for k, v in e.items()))
    print("\n| row | engine | measured cycle | simulated | miss | measured plain | simulated | miss |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0
    for cs in cs_all:
        g = cs["group"]
        fitted = "not fitted" not in g
        cyc, plain = simulate(a.sim, cs, engines[g.split(" ")[0]])
        if "ratio_of" in cs or "plain_ratio_of" in cs:  # against the same rows on another engine
            on, plain_on = simulate(a.sim, cs, engines[cs.get("ratio_of") or cs["plain_ratio_of"]])
            got = cyc / on if "ratio_of" in cs else plain / plain_on
            miss = got / cs["ratio"] - 1
            what = "cycle" if "ratio_of" in cs else "plain step"
            print(f"| {cs['name']} | {g} | {what} x{cs['ratio']:.2f} | x{got:.2f} | {100 * miss:+.1f}% | | | |")
        elif "cycle_over_plain" in cs:
            miss = cyc / plain / cs["cycle_over_plain"] - 1
            print(f"| {cs['name']} | {g} | {cs['cycle_over_plain']:.2f} plain steps | {cyc / plain:.2f} | "
                  f"{100 * miss:+.1f}% | | | |")
        else:
            miss, pm = 0, ""
            if "cycle" in cs:
                miss = cyc / cs["cycle"] - 1
                cm = f"{cs['cycle']:.2f} ms | {cyc:.2f} ms | {100 * miss:+.1f}%"
            else:
                cm = " | | "
            if cs["plain"]:
                m2 = plain / cs["plain"] - 1
                if fitted:
                    worst = max(worst, abs(m2))
                pm = f"{cs['plain']:.2f} ms | {plain:.2f} ms | {100 * m2:+.1f}%"
            else:
                pm = f"(not given) | {plain:.2f} ms | "
            print(f"| {cs['name']} | {g} | {cm} | {pm} |")
        if fitted:
            worst = max(worst, abs(miss))
    print(f"\nworst miss over the fitted rows: {100 * worst:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
