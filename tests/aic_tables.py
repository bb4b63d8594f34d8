#!/usr/bin/env python3
"""scripts/aic-import.py and scripts/fit_aic_moe.py on tables written here
by hand: the import's bytes and checksums, its refusals (a version other
than the pin, no package, a table without a column) with nothing written,
and the MoE fit's recovery of terms a synthetic table was made from.

  .venv/bin/python tests/aic_tables.py   (exit 77: no pyarrow or numpy here)
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPORT = os.path.join(ROOT, "scripts", "aic-import.py")
try:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError as e:
    print("aic_tables: %s: skipped (scripts/install-deps.sh puts pyarrow and numpy in .venv)" % e)
    sys.exit(77)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fit_aic_moe  # noqa: E402

failed = 0


def check(ok, what):
    global failed
    print("%s: %s" % ("ok" if ok else "FAILED", what))
    failed += not ok


def moe_table(path, rows):
    cols = ["framework", "version", "device", "op_name", "kernel_source", "moe_dtype", "num_tokens", "hidden_size",
            "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"]
    data = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(data), path)


def run(args, py=sys.executable):
    p = subprocess.run([py, IMPORT] + args, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def hand_import(tmp):
    data = os.path.join(tmp, "data")
    v = ("vLLM", "0.24.0", "NVIDIA H200", "moe")
    # two dtypes, two kernels of one, rows out of order: the import sorts them
    moe_table(os.path.join(data, "h200_sxm", "moe", "vllm", "0.24.0", "moe_perf.parquet"), [
        v + ("kb", "fp8", 2, 2048, 768, 8, 128, 1, 1, "balanced", 0.125),
        v + ("ka", "fp8", 1, 2048, 768, 8, 128, 1, 1, "balanced", 0.1),
        v + ("ka", "fp8", 1, 2048, 768, 8, 128, 1, 1, "power_law_1.2", 0.0999999),
        v + ("ka", "bfloat16", 4, 2048, 768, 8, 128, 2, 1, "balanced", 1.0 / 3),
    ])
    out = os.path.join(tmp, "kernels")
    rc, msg = run(["--data", data, "--data-version", "0.12.0", "--gpus", "h200_sxm", "--ops", "moe", "-o", out])
    check(rc == 0, "a hand-written table imports (%s)" % msg.strip())
    fp8 = os.path.join(out, "h200_sxm", "vllm", "0.24.0", "moe-fp8.csv")
    want = ("kernel,tokens,hidden,inter,topk,experts,moe_tp,moe_ep,distribution,latency_ms\n"
            "0,1,2048,768,8,128,1,1,balanced,0.1\n"
            "0,1,2048,768,8,128,1,1,power_law_1.2,0.0999999\n"
            "1,2,2048,768,8,128,1,1,balanced,0.125\n")
    got = open(fp8).read() if os.path.isfile(fp8) else ""
    check(got == want, "moe-fp8.csv is the rows sorted, kernels indexed, latency to 6 digits:\n" + got)
    bf = os.path.join(out, "h200_sxm", "vllm", "0.24.0", "moe-bfloat16.csv")
    check(os.path.isfile(bf) and open(bf).read().splitlines()[1] == "0,4,2048,768,8,128,2,1,balanced,0.333333",
          "moe-bfloat16.csv holds its one row")
    meta = json.load(open(os.path.join(out, "meta.json"))) if os.path.isfile(os.path.join(out, "meta.json")) else {}
    t = meta.get("tables", {}).get("h200_sxm/vllm/0.24.0/moe-fp8.csv", {})
    check(meta.get("version") == "0.12.0" and t.get("sha256") == hashlib.sha256(want.encode()).hexdigest() and
          t.get("rows") == 3 and t.get("kernels") == ["ka", "kb"],
          "meta.json: the package version, each table's SHA-256, rows and kernel names")
    before = {f: open(os.path.join(dp, f), "rb").read() for dp, _, fs in os.walk(out) for f in fs}

    rc, msg = run(["--data", data, "--data-version", "0.11.0", "--gpus", "h200_sxm", "-o", os.path.join(tmp, "k2")])
    check(rc == 2 and "pinned to 0.12.0" in msg and not os.path.exists(os.path.join(tmp, "k2")),
          "another version is refused, nothing written: " + msg.strip())
    rc, msg = run(["-o", os.path.join(tmp, "k3")], py="/usr/bin/python3")
    check(rc == 2 and "not installed" in msg and not os.path.exists(os.path.join(tmp, "k3")),
          "no package: refused, nothing written: " + msg.strip())
    # a second table without its latency: refused, the earlier tables untouched
    gemm = os.path.join(data, "h200_sxm", "gemm", "vllm", "0.24.0")
    os.makedirs(gemm, exist_ok=True)
    pq.write_table(pa.table({"kernel_source": ["x"], "gemm_dtype": ["fp8"], "m": [1], "n": [2], "k": [3]}),
                   os.path.join(gemm, "gemm_perf.parquet"))
    rc, msg = run(["--data", data, "--data-version", "0.12.0", "--gpus", "h200_sxm", "-o", out])
    after = {f: open(os.path.join(dp, f), "rb").read() for dp, _, fs in os.walk(out) for f in fs}
    check(rc == 2 and "no column latency" in msg and after == before and
          not [f for f in os.listdir(tmp) if f.startswith(".aic-import-")],
          "a table without a column is refused, the tables there before unchanged: " + msg.strip())
    rc, msg = run(["--data", data, "--data-version", "0.12.0", "--gpus", "b999", "-o", os.path.join(tmp, "k4")])
    check(rc == 2 and "no GPU b999" in msg, "an unknown GPU is refused: " + msg.strip())


def synthetic_fit():
    """Terms known by construction come back within 1%, and predict the
    held token counts and the power-law rows as well."""
    t0, es, ts = 21e-6, 3.1e-6, 4.7e-8
    E, k, tokens = 128, 8, [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096, 8192]
    rows = [fit_aic_moe.Row(fit_aic_moe.balanced_counts(t, E, k), 0.0, t) for t in tokens]
    for r in rows:
        r.y = t0 + float(r.g(es, ts))
    got = fit_aic_moe.fit(rows)
    err = [abs(a / b - 1) for a, b in zip(got, (t0, es, ts))]
    check(max(err) < 0.01, "synthetic terms t0 %.4g expert_s %.4g token_s %.4g come back as %.4g %.4g %.4g" %
          (t0, es, ts, *got))
    # the balanced spread as the collector builds it: n tokens, topk each, E experts
    c = fit_aic_moe.balanced_counts(4, E, k)
    check(c.sum() == 32 and (c > 0).sum() == 32, "4 tokens of top-8 over 128 experts touch 32 experts once each")
    c = fit_aic_moe.balanced_counts(1024, E, k)
    check(c.sum() == 8192 and c.min() == c.max() == 64, "1,024 tokens: every expert 64 tokens")
    rng = np.random.default_rng(1)
    p = fit_aic_moe.power_law_counts(256, E, k, 1, 1.2, rng)
    check(p.sum() == 256 * k and p.max() > 3 * 16, "a power-law spread keeps the tokens and is skewed (max %d)" % p.max())


def main():
    tmp = tempfile.mkdtemp(prefix="aic-tables-")
    try:
        hand_import(tmp)
        synthetic_fit()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s" % ("aic_tables: all passed" if not failed else "aic_tables: %d failed" % failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
