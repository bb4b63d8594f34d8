#!/usr/bin/env python3
"""Writes the measured kernel tables of NVIDIA's AIConfigurator
(`aiconfigurator-core`, PyPI, Apache-2.0; pinned 0.12.0, which
scripts/install-deps.sh installs into .venv) as compact CSV tables that
acceptmoe and its fit scripts read: one file per (GPU, engine, version, op,
dtype), under OUT/<gpu>/<engine>/<version>/<op>-<dtype>.csv, and
OUT/meta.json with the package's version and each table's SHA-256. acceptmoe
never reads parquet; the repository keeps no copy of the data (OUT is under
build/ by default).

  .venv/bin/python scripts/aic-import.py [-o build/kernels] [--gpus h200_sxm,...] [--ops moe,gemm]
  .venv/bin/python scripts/aic-import.py --data ROOT --data-version V ...   (a tree laid out as the
      package's systems/data/, e.g. a small table written by hand for a test)

Tables (latency in milliseconds, as the package gives it, to 6 significant digits):
  moe   kernel,tokens,hidden,inter,topk,experts,moe_tp,moe_ep,distribution,latency_ms
        (distribution: balanced, or power_law_ALPHA; moe_perf.parquet only: one GPU's fused
        MoE call at the given tensor and expert parallelism)
  gemm  kernel,m,n,k,latency_ms
kernel: an index into the table's "kernels" list in meta.json (the package's kernel_source).

Refuses, with a message and exit status 2 and nothing written, a missing
package, a version other than the pin, a GPU or op the data lacks, or a
table without the columns above. The output appears whole or not at all
(written beside it, then renamed into place).
"""
import argparse
import csv
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile

PIN = "0.12.0"
GPUS = ["b200_sxm", "b300_sxm", "gb300", "h100_sxm", "h200_sxm", "rtx_pro_6000_server"]
# per op: the parquet file, the dtype column, and (output column, parquet column) pairs
OPS = {
    "moe": ("moe_perf.parquet", "moe_dtype",
            [("kernel", "kernel_source"), ("tokens", "num_tokens"), ("hidden", "hidden_size"),
             ("inter", "inter_size"), ("topk", "topk"), ("experts", "num_experts"),
             ("moe_tp", "moe_tp_size"), ("moe_ep", "moe_ep_size"), ("distribution", "distribution"),
             ("latency_ms", "latency")]),
    "gemm": ("gemm_perf.parquet", "gemm_dtype",
             [("kernel", "kernel_source"), ("m", "m"), ("n", "n"), ("k", "k"), ("latency_ms", "latency")]),
}


class Refused(Exception):
    pass


def package_data():
    """The installed package's data root and version; Refused if absent."""
    try:
        from importlib import metadata
        version = metadata.version("aiconfigurator-core")
    except Exception:
        raise Refused("aiconfigurator-core is not installed in this Python (%s); scripts/install-deps.sh "
                      "installs %s into .venv: run this script with .venv/bin/python" % (sys.executable, PIN))
    if version != PIN:
        raise Refused("aiconfigurator-core %s is installed, but the tables are pinned to %s "
                      "(pip install aiconfigurator-core==%s)" % (version, PIN, PIN))
    import aiconfigurator_core
    return os.path.join(os.path.dirname(aiconfigurator_core.__file__), "systems", "data"), version


def import_table(path, op):
    """{dtype: (CSV text, [kernel names])} of one parquet table, rows sorted
    for stable bytes."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise Refused("pyarrow is not installed in this Python (scripts/install-deps.sh installs it into .venv)")
    fname, dcol, cols = OPS[op]
    want = [dcol] + [c for _, c in cols]
    table = pq.read_table(path)
    missing = [c for c in want if c not in table.schema.names]
    if missing:
        raise Refused("%s: no column %s (a %s table needs %s)" % (path, ", ".join(missing), op, ", ".join(want)))
    d = table.select(want).to_pydict()
    by = {}
    for row in zip(*(d[c] for c in want)):
        by.setdefault(row[0], []).append(row[1:])
    out = {}
    for dtype, rows in by.items():
        kernels = sorted({r[0] for r in rows})
        ids = {k: i for i, k in enumerate(kernels)}
        rows = sorted((ids[r[0]],) + r[1:-1] + ("%.6g" % r[-1],) for r in rows)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([o for o, _ in cols])
        w.writerows(rows)
        out[dtype] = (buf.getvalue(), kernels)
    return out


def run(root, version, gpus, ops, out):
    if version != PIN:
        raise Refused("the data is aiconfigurator-core %s; the tables are pinned to %s" % (version, PIN))
    for g in gpus:
        if not os.path.isdir(os.path.join(root, g)):
            raise Refused("%s: no GPU %s in the data (it has %s)" % (root, g, ", ".join(sorted(os.listdir(root)))))
    for op in ops:
        if op not in OPS:
            raise Refused("no op %s (known: %s)" % (op, ", ".join(OPS)))
    parent = os.path.dirname(os.path.abspath(out)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".aic-import-", dir=parent)
    try:
        tables = {}
        for g in gpus:
            for op in ops:
                opdir = os.path.join(root, g, op)
                if not os.path.isdir(opdir):
                    continue
                for engine in sorted(os.listdir(opdir)):
                    for ver in sorted(os.listdir(os.path.join(opdir, engine))):
                        src = os.path.join(opdir, engine, ver, OPS[op][0])
                        if not os.path.isfile(src):
                            continue
                        for dtype, (text, kernels) in sorted(import_table(src, op).items()):
                            rel = os.path.join(g, engine, ver, "%s-%s.csv" % (op, dtype))
                            os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
                            with open(os.path.join(tmp, rel), "w") as f:
                                f.write(text)
                            tables[rel] = {"sha256": hashlib.sha256(text.encode()).hexdigest(),
                                           "rows": text.count("\n") - 1, "kernels": kernels}
        if not tables:
            raise Refused("%s: no %s table for %s" % (root, "/".join(ops), ", ".join(gpus)))
        meta = {"package": "aiconfigurator-core", "version": version, "ops": ops, "gpus": gpus,
                "tables": tables,
                "checksum": hashlib.sha256("".join(k + v["sha256"] for k, v in sorted(tables.items())).encode()).hexdigest()}
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")
        if os.path.exists(out):  # replace the old tables whole
            old = out + ".old"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
        return meta
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", default="build/kernels", help="the tables' directory (default build/kernels)")
    ap.add_argument("--gpus", default=",".join(GPUS), help="the package's GPU names (default: the presets' six)")
    ap.add_argument("--ops", default="moe,gemm", help="ops to import (moe, gemm)")
    ap.add_argument("--data", help="a data root laid out as the package's systems/data/ (default: the installed package's)")
    ap.add_argument("--data-version", help="with --data: the package version the data comes from")
    a = ap.parse_args(argv)
    try:
        if a.data:
            if not a.data_version:
                raise Refused("--data needs --data-version (the package version the data comes from)")
            root, version = a.data, a.data_version
        else:
            root, version = package_data()
        meta = run(root, version, a.gpus.split(","), a.ops.split(","), a.out)
    except Refused as e:
        print("aic-import: %s" % e, file=sys.stderr)
        return 2
    rows = sum(t["rows"] for t in meta["tables"].values())
    print("aic-import: %d tables, %d rows, aiconfigurator-core %s -> %s" % (len(meta["tables"]), rows, meta["version"], a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
