#!/usr/bin/env python3
"""Converts per-pass tree captures from SGLang's expert-activation tracker to
tree blocks-jsonl (docs/capture.md).

The tracker (an SGLang research fork, enabled with
SGLANG_TRACK_EXPERT_ACTIVATIONS=1; its MT-bench script writes
expert_activations.json) keeps, per request, "expert_layer_history": one
snapshot per target verification pass:

  {"tree_structure": {"draft_token_num": N, "spec_steps": S,
                      "retrive_next_token": [[...N]], "retrive_next_sibling": [[...N]],
                      "retrive_index": [[...N]], "positions": [[...N]],
                      "accept_index": [...] or [[...]],     (-1 padded)
                      "parents": [...N]                     (optional: used when present)},
   "layers": {"0": {"topk_ids": [[k ids]..N], "topk_weights": [[k]..N]}, ...}}

Node 0 is the last committed token (the root). A node's first child is
retrive_next_token[i] and the next of its siblings retrive_next_sibling[c]
(-1: none), so the parents come from those two lists unless the snapshot
gives them. The nodes are renumbered root first, by depth, then by the
capture's order, so that every parent comes before its children (blocks-
jsonl's rule); accept_index (into the pass's N tokens, or into a batch's
flattened rows: row 0's are 0..N-1) marks the accepted path. Expert ids are
mapped from physical to logical with --physical-to-logical (JSON: one list
of P logical ids for every layer, or one such list per capture layer), as
SGLang's expert-parallel load balancer numbers physical replicas (a list
per layer is indexed by the capture's layer ids). Each
node's k experts are written as [expert, ln(weight)]: under a softmax
router the top-k weights are a softmax of the logits, so ln(weight) is the
logit up to a constant per node; without weights, or with --weights ignore
(a sigmoid router such as DeepSeek-V3's), every logit is 0 (equal weights,
rank unknown). Draft probabilities are not captured: logp 0.

One request per sample, one block per verification pass. Batches of several
requests (more than one row) are refused: their rows interleave requests.

usage: sglang_tree.py expert_activations.json OUT.jsonl --experts E [--top-k K]
                      [--physical-to-logical MAP.json] [--weights log|ignore]
"""
import argparse
import json
import math
import os
import sys


def _row(v, what, where):
    """A per-row list of a batch-1 pass: [[...]] or [...]."""
    if isinstance(v, list) and v and isinstance(v[0], list):
        if len(v) != 1:
            raise ValueError("%s: %s has %d rows: a batch of several requests (capture at batch 1)"
                             % (where, what, len(v)))
        return v[0]
    return v


def parents_of(tree, n, where):
    """Each node's parent (-1 for the root), in the capture's numbering."""
    if tree.get("parents") is not None:
        par = [int(p) for p in _row(tree["parents"], "parents", where)]
        if len(par) != n:
            raise ValueError("%s: parents has %d entries for %d tokens" % (where, len(par), n))
        return par
    nxt = [int(x) for x in _row(tree.get("retrive_next_token"), "retrive_next_token", where) or []]
    sib = [int(x) for x in _row(tree.get("retrive_next_sibling"), "retrive_next_sibling", where) or []]
    if len(nxt) != n or len(sib) != n:
        raise ValueError("%s: retrive_next_token / retrive_next_sibling need %d entries (got %d / %d)"
                         % (where, n, len(nxt), len(sib)))
    par = [None] * n
    par[0] = -1
    for i in range(n):
        c, seen = nxt[i], 0
        while c != -1:
            if not 0 < c < n or par[c] is not None or seen > n:
                raise ValueError("%s: node %d's children are not a tree (child %d)" % (where, i, c))
            par[c] = i
            c, seen = sib[c], seen + 1
    missing = [i for i in range(n) if par[i] is None]
    if missing:
        raise ValueError("%s: nodes %s are in no parent's children" % (where, missing))
    return par


def convert_pass(snap, n_layers, experts, top_k, p2l, weights, where):
    tree = snap.get("tree_structure") or {}
    n = int(tree.get("draft_token_num", 0))
    if n < 1:
        raise ValueError("%s: no draft_token_num" % where)
    par = parents_of(tree, n, where)
    depth = [0] * n
    for i in range(n):  # parents may come after their children in the capture
        d, j = 0, i
        while par[j] != -1:
            j, d = par[j], d + 1
            if d > n:
                raise ValueError("%s: the parents make a cycle at node %d" % (where, i))
        if j != 0:
            raise ValueError("%s: node %d does not descend from node 0" % (where, i))
        depth[i] = d
    order = sorted(range(n), key=lambda i: (depth[i], i))  # new index -> capture index
    new = {c: k for k, c in enumerate(order)}
    acc = [int(x) for x in _row(tree.get("accept_index", []), "accept_index", where) if int(x) >= 0]
    if any(not 0 <= x < n for x in acc):
        raise ValueError("%s: accept_index %s outside the pass's %d tokens" % (where, acc, n))
    accepted = [0] * n
    for x in acc:
        accepted[new[x]] = 1
    if acc and not accepted[0]:
        raise ValueError("%s: accept_index %s leaves out the root (node 0)" % (where, acc))
    if not acc:
        accepted[0] = 1  # nothing recorded: the root alone (committed by the last pass)
    for k in range(1, n):
        if accepted[k] and not accepted[new[par[order[k]]]]:
            raise ValueError("%s: accepted node %d's parent is not accepted" % (where, order[k]))
    layers = snap.get("layers") or {}
    keys = sorted(layers, key=int)
    if len(keys) != n_layers:
        raise ValueError("%s: %d layers, the first pass had %d" % (where, len(keys), n_layers))
    topk = []
    for key in keys:
        ids = layers[key].get("topk_ids") or []
        ws = layers[key].get("topk_weights") if weights == "log" else None
        if len(ids) < n:
            raise ValueError("%s, layer %s: %d tokens of topk_ids for %d" % (where, key, len(ids), n))
        per_node = []
        for k in range(n):
            t = order[k]
            row = [int(x) for x in ids[t]]
            keep = [j for j, x in enumerate(row) if x >= 0]
            if p2l is not None:  # one list for every layer, or one per layer id
                if isinstance(p2l[0], list) and int(key) >= len(p2l):
                    raise ValueError("%s: the map has no layer %s" % (where, key))
                m = p2l[int(key)] if isinstance(p2l[0], list) else p2l
                if any(row[j] >= len(m) for j in keep):
                    raise ValueError("%s, layer %s, token %d: physical id beyond the map's %d" % (where, key, t, len(m)))
                row = [int(m[x]) if x >= 0 else x for x in row]
            kk = top_k or len(keep)
            keep = keep[:kk]
            if len(keep) < kk or any(not 0 <= row[j] < experts for j in keep):
                raise ValueError("%s, layer %s, token %d: expert ids %s (need %d in 0..%d)"
                                 % (where, key, t, [row[j] for j in keep], kk, experts - 1))
            if ws is not None:
                w = [float(x) for x in ws[t]]
                if any(w[j] <= 0 for j in keep):
                    raise ValueError("%s, layer %s, token %d: weights %s must be > 0" % (where, key, t, w))
                per_node.append([[row[j], round(math.log(w[j]), 6)] for j in keep])
            else:
                per_node.append([[row[j], 0.0] for j in keep])
        topk.append(per_node)
    parent = [-1] + [new[par[order[k]]] for k in range(1, n)]
    return {"parent": parent, "logp": [0.0] * n, "accepted": accepted, "topk": topk}


def convert(data, experts, top_k, p2l, weights, out, err=sys.stderr):
    samples = data if isinstance(data, list) else [data]
    blocks = 0
    n_layers = None
    for ri, sample in enumerate(samples):
        history = sample.get("expert_layer_history")
        if history is None:
            raise ValueError("sample %d: no expert_layer_history (was SGLANG_TRACK_EXPERT_ACTIVATIONS=1 set?)" % ri)
        for si, snap in enumerate(history):
            where = "sample %d, pass %d" % (ri, si)
            if n_layers is None:
                n_layers = len(snap.get("layers") or {})
                if not n_layers:
                    raise ValueError("%s: no layers" % where)
            b = convert_pass(snap, n_layers, experts, top_k, p2l, weights, where)
            out.write(json.dumps(dict({"request": ri, "step": si}, **b), separators=(",", ":")) + "\n")
            blocks += 1
    err.write("%d blocks from %d requests (%d MoE layers)\n" % (blocks, len(samples), n_layers or 0))
    return blocks


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture", help="expert_activations.json (a list of samples, or one)")
    ap.add_argument("out", help="OUT.jsonl (blocks-jsonl)")
    ap.add_argument("--experts", type=int, required=True, help="the model's routed experts")
    ap.add_argument("--top-k", type=int, default=0, help="experts per token (default: as captured)")
    ap.add_argument("--physical-to-logical", help="JSON: logical id of each physical expert (one list, or one per layer)")
    ap.add_argument("--weights", choices=("log", "ignore"), default="log",
                    help="log: ln(weight) as the logit (softmax routers); ignore: equal logits")
    a = ap.parse_args(argv)
    tmp = a.out + ".tmp"
    try:
        p2l = json.load(open(a.physical_to_logical)) if a.physical_to_logical else None
        if p2l is not None and (not isinstance(p2l, list) or not p2l):
            raise ValueError("%s: a list of logical ids (or one list per layer)" % a.physical_to_logical)
        data = json.load(open(a.capture))
        with open(tmp, "w") as f:
            convert(data, a.experts, a.top_k, p2l, a.weights, f)
    except (ValueError, OSError, KeyError, TypeError) as e:
        sys.stderr.write("sglang_tree: %s\n" % e)
        try:
            os.remove(tmp)
        except OSError:
            pass
        return 2
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
