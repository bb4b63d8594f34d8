#!/usr/bin/env python3
"""Fits §9's MoE terms to AIConfigurator's measured MoE tables (imported by
scripts/aic-import.py): per (GPU, engine, version, dtype, kernel, shape,
moe_tp, moe_ep), one GPU's fused MoE call over `tokens` tokens is

    t = t0 + Σ over its experts with tokens of max(expert_s, token_s · n_e)

(docs/design.md §9: t0 the call's fixed cost (moe_t0_s), expert_s an
expert's weight stream (bytes / (moe_eta · hbm_bw)), token_s a token's
FLOPs at the kernel's rate (2·3·d·f / moe_flops)), where n_e are the tokens
the table's own routing puts on each of the GPU's experts (the collector's
balanced spread, rebuilt here; the GPU holds experts/moe_ep of them and
inter/moe_tp of each). The fit reads the balanced rows alone and holds back
every fourth token count, which it then predicts (held MAPE); the same terms
predict the power-law rows through the union as the simulator forms it
(the collector's power-law spread, defined at moe_ep 1; the mean over 10
seeded draws), which says how much of the balanced/power-law difference
the union of the experts and their tokens accounts for.

  .venv/bin/python scripts/fit_aic_moe.py [KERNELS_DIR] [--shapes preset|all] [--tables GPU/ENGINE/VERSION,...]

KERNELS_DIR (default build/kernels) holds the imported tables; --shapes
preset (the default) fits the shapes of workloads/models/*.yaml only;
--tables fits those tables' directories only (default: every one). Writes
KERNELS_DIR/<gpu>/<engine>/<version>/moe-terms.csv (columns below, seconds),
which `hardware.kernels` names, and prints a summary per (GPU, dtype).
Needs numpy.
"""
import csv
import glob
import json
import math
import os
import sys

import numpy as np

TERMS_COLS = ["dtype", "kernel", "hidden", "inter", "topk", "experts", "moe_tp", "moe_ep", "t0_s", "expert_s",
              "token_s", "points", "fit_mape", "held_mape", "power_law_mape", "power_law_points"]


def balanced_counts(tokens, experts, topk):
    """Tokens per expert under the collector's balanced routing: token i's
    j-th expert is (i + j·stride) mod E (with i·stride/tokens for i when
    there are fewer tokens than the stride), stride = ceil(E / topk)."""
    stride = math.ceil(experts / topk)
    i = np.arange(tokens)[:, None]
    j = np.arange(topk)[None, :]
    if tokens >= stride:
        ids = (i + j * stride) % experts
    else:
        ids = (np.floor(i * stride / tokens).astype(np.int64) + j * stride) % experts
    # (a token's topk offsets j·stride are distinct mod E, so its experts are)
    return np.bincount(ids.ravel(), minlength=experts)


def power_law_counts(tokens, experts, topk, ep, alpha, rng):
    """Tokens per expert under the collector's power-law routing: E draws
    of a power law (x in [1, 0.8·tokens], or [0.01, 2] when tokens·topk <=
    E) scaled to tokens·topk and rounded, the remainder put on the largest;
    the heaviest group of E/ep experts is the measured GPU's."""
    lo, hi = (1.0, tokens * 0.8) if tokens * topk > experts else (0.01, 2.0)
    if hi <= lo:
        hi = lo * 1.0001
    u = rng.random(experts)
    x = ((hi ** (1 - alpha) - lo ** (1 - alpha)) * u + lo ** (1 - alpha)) ** (1 / (1 - alpha))
    target = tokens * topk
    cnt = np.rint(x / x.sum() * target).astype(np.int64)
    delta = target - cnt.sum()
    order = np.argsort(-cnt, kind="stable")
    k = 0
    while delta != 0:
        e = order[k % experts] if delta > 0 else order[-(k % experts) - 1]
        if delta > 0:
            cnt[e] += 1
            delta -= 1
        elif cnt[e] > 0:
            cnt[e] -= 1
            delta += 1
        k += 1
    groups = cnt.reshape(ep, experts // ep)
    return groups[np.argmax(groups.sum(1))]


class Row:
    """One measured call: its per-expert tokens on the GPU, sorted
    descending, with prefix sums, and the latency (s)."""

    def __init__(self, counts, latency_s, tokens):
        n = np.sort(counts[counts > 0])[::-1].astype(float)
        self.n = n
        self.prefix = np.concatenate([[0.0], np.cumsum(n)])
        self.active = len(n)
        self.y = latency_s
        self.tokens = tokens

    def g(self, expert_s, token_s):
        """Σ max(expert_s, token_s · n_e) over the active experts (arrays of
        terms alike: one sum per pair)."""
        es, ts = np.asarray(expert_s, float), np.asarray(token_s, float)
        k = np.searchsorted(-self.n, -(es / ts), side="left")  # experts with n_e > expert_s / token_s
        return ts * self.prefix[k] + es * (self.active - k)


def predict(rows, t0, expert_s, token_s):
    return np.array([t0 + float(r.g(expert_s, token_s)) for r in rows])


def fit(rows):
    """(t0, expert_s, token_s) minimising the squared relative error: a
    grid over (log expert_s, log token_s) zoomed in five rounds, t0 in
    closed form at each point (clamped at 0)."""
    y = np.array([r.y for r in rows])
    w = 1 / y ** 2
    ymin = y.min()
    nmax = max(r.n[0] for r in rows)
    lo_e, hi_e = math.log(ymin * 1e-4), math.log(ymin)
    lo_t, hi_t = math.log(ymin * 1e-5 / nmax), math.log(y.max())
    best = (math.inf, 0, 0, 0)
    for _ in range(8):
        le, lt = np.meshgrid(np.linspace(lo_e, hi_e, 41), np.linspace(lo_t, hi_t, 41))
        es, ts = np.exp(le.ravel()), np.exp(lt.ravel())
        g = np.array([r.g(es, ts) for r in rows])  # [rows][grid]
        t0 = np.maximum(0.0, (w @ (y[:, None] - g)) / w.sum())
        err = w @ (t0[None, :] + g - y[:, None]) ** 2
        i = int(np.argmin(err))
        if err[i] < best[0]:
            best = (float(err[i]), float(t0[i]), float(es[i]), float(ts[i]))
        _, _, es, ts = best
        se, st = (hi_e - lo_e) / 8, (hi_t - lo_t) / 8
        lo_e, hi_e = math.log(es) - se, math.log(es) + se
        lo_t, hi_t = math.log(ts) - st, math.log(ts) + st
    return best[1:]


def mape(pred, rows):
    y = np.array([r.y for r in rows])
    return float(np.mean(np.abs(pred - y) / y)) if len(rows) else float("nan")


def model_shapes(repo):
    """(hidden, inter, topk, experts) of every model preset with experts."""
    shapes = set()
    for p in glob.glob(os.path.join(repo, "workloads", "models", "*.yaml")):
        kv = {}
        for line in open(p):
            line = line.split("#")[0]
            if ":" in line and not line.startswith(" "):
                k, v = line.split(":", 1)
                kv[k.strip()] = v.strip()
        try:
            shapes.add((int(kv["hidden"]), int(kv["moe_intermediate"]), int(kv["top_k"]), int(kv["experts"])))
        except (KeyError, ValueError):
            pass
    return shapes


def fit_table(path, kernels, shapes, seed=1):
    """The terms of every group of one imported table (path: its moe-DTYPE.csv)."""
    groups = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            key = (int(r["kernel"]), int(r["hidden"]), int(r["inter"]), int(r["topk"]), int(r["experts"]),
                   int(r["moe_tp"]), int(r["moe_ep"]))
            if shapes is not None and key[1:5] not in shapes:
                continue
            groups.setdefault(key, []).append((int(r["tokens"]), r["distribution"], float(r["latency_ms"]) / 1e3))
    dtype = os.path.basename(path)[len("moe-"):-len(".csv")]
    out = []
    for key, pts in sorted(groups.items()):
        kernel, d, f, k, E, tp, ep = key
        if E % ep:
            continue
        El = E // ep
        bal = sorted((t, y) for t, dist, y in pts if dist == "balanced")
        if len(bal) < 6:
            continue
        rows = []
        for t, y in bal:
            cnt = balanced_counts(t, E, k)[:El]
            if cnt.sum() > 0:
                rows.append(Row(cnt, y, t))
        if len(rows) < 6:
            continue
        held = rows[3::4]
        train = [r for i, r in enumerate(rows) if i % 4 != 3]
        t0, es, ts = fit(train)
        rng = np.random.default_rng(seed)
        plaw, plaw_pred = [], []
        for t, dist, y in sorted(pts):  # (the collector's power law is defined at moe_ep 1)
            if not dist.startswith("power_law_") or ep != 1:
                continue
            alpha = float(dist[len("power_law_"):])
            gs = [float(Row(power_law_counts(t, E, k, ep, alpha, rng), y, t).g(es, ts)) for _ in range(10)]
            plaw.append(y)
            plaw_pred.append(t0 + float(np.mean(gs)))
        pl = float(np.mean(np.abs(np.array(plaw_pred) - plaw) / plaw)) if plaw else float("nan")
        out.append({"dtype": dtype, "kernel": kernels[kernel] if kernels else kernel, "hidden": d, "inter": f,
                    "topk": k, "experts": E, "moe_tp": tp, "moe_ep": ep, "t0_s": t0, "expert_s": es,
                    "token_s": ts, "points": len(train), "fit_mape": mape(predict(train, t0, es, ts), train),
                    "held_mape": mape(predict(held, t0, es, ts), held), "power_law_mape": pl,
                    "power_law_points": len(plaw)})
    return out


def write_terms(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(TERMS_COLS)
        for r in rows:
            w.writerow([("%.6g" % r[c]) if isinstance(r[c], float) else r[c] for c in TERMS_COLS])
    os.replace(tmp, path)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels", nargs="?", default="build/kernels")
    ap.add_argument("--shapes", choices=["preset", "all"], default="preset")
    ap.add_argument("--tables", default="", help="GPU/ENGINE/VERSION,... (default: every table)")
    a = ap.parse_args(argv)
    kdir, shapes_all = a.kernels, a.shapes == "all"
    only = set(t for t in a.tables.split(",") if t)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    meta_path = os.path.join(kdir, "meta.json")
    if not os.path.isfile(meta_path):
        print("fit_aic_moe: %s: no imported tables (run scripts/aic-import.py first)" % meta_path, file=sys.stderr)
        return 2
    meta = json.load(open(meta_path))
    shapes = None if shapes_all else model_shapes(repo)
    by_dir = {}
    for rel, t in sorted(meta["tables"].items()):
        if not os.path.basename(rel).startswith("moe-") or (only and os.path.dirname(rel) not in only):
            continue
        by_dir.setdefault(os.path.dirname(rel), []).extend(fit_table(os.path.join(kdir, rel), t.get("kernels"), shapes))
    if only - set(by_dir):
        print("fit_aic_moe: no moe table in %s for %s" % (kdir, ", ".join(sorted(only - set(by_dir)))), file=sys.stderr)
        return 2
    print("| table | dtype | groups | fit MAPE | held MAPE | power-law MAPE |")
    print("|---|---|---|---|---|---|")
    for d, rows in sorted(by_dir.items()):
        write_terms(os.path.join(kdir, d, "moe-terms.csv"), rows)
        for dt in sorted({r["dtype"] for r in rows}):
            rr = [r for r in rows if r["dtype"] == dt]
            pl = [r["power_law_mape"] for r in rr if not math.isnan(r["power_law_mape"])]
            print("| %s | %s | %d | %.1f%% | %.1f%% | %s |" % (d, dt, len(rr), 100 * np.mean([r["fit_mape"] for r in rr]),
                  100 * np.mean([r["held_mape"] for r in rr]), "%.1f%%" % (100 * np.mean(pl)) if pl else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
