#!/usr/bin/env python3
"""Writes a hand-made capture in the format of SGLang's expert-activation
tracker (scripts/capture/sglang_tree.py) and the blocks-jsonl it stands for,
built first: trees numbered root first by depth, then scattered over the
capture's token order (a depth-2 node before a depth-1 one, each depth in
order); logical expert ids written as physical ones through a map with
replicas; the accepted path as accept_index in the capture's numbering.
OLMoE's shape: 16 MoE layers, 64 experts, top-8.
    sglang_tree_capture.py CAPTURE.json MAP.json TRUTH.jsonl [--batch2]
"""
import json
import math
import sys

L, E, K = 16, 64, 8
P = E + 8  # physical experts: a permutation of the 64, then replicas of logical 0..7
P2L = [(5 * p + 3) % E for p in range(E)] + list(range(8))
INV = {P2L[p]: p for p in range(E)}

# (truth parents, root first by depth; capture index of each truth node; accepted truth nodes)
TREES = [
    ([-1, 0, 0, 1, 1, 2], [0, 2, 4, 1, 3, 5], [0, 1, 4]),
    ([-1, 0, 1, 1], [0, 3, 1, 2], [0]),
    ([-1, 0, 0, 0, 3], [0, 1, 2, 4, 3], [0, 3, 4]),
]
SAMPLES = [[0, 1], [2]]  # which trees each request verifies, in order


def experts(tree, layer, node):
    """k distinct logical ids and their weights (summing to 1), deterministic."""
    ids, x = [], (tree * 131 + layer * 17 + node * 29) % E
    while len(ids) < K:
        if x not in ids:
            ids.append(x)
        x = (x * 7 + 11) % E
    raw = [1.0 / (j + 1 + (layer + node) % 3) for j in range(K)]
    s = sum(raw)
    return ids, [r / s for r in raw]


def physical(x, layer, node):
    return 64 + x if x < 8 and (layer + node) % 2 else INV[x]


def main(argv):
    cap_path, map_path, truth_path = argv[:3]
    batch2 = "--batch2" in argv
    samples, truth = [], []
    for ri, trees in enumerate(SAMPLES):
        history = []
        for si, ti in enumerate(trees):
            par, cap, acc = TREES[ti]
            n = len(par)
            cpar = [-1] * n  # parents in the capture's numbering
            for t in range(1, n):
                cpar[cap[t]] = cap[par[t]]
            nxt, sib = [-1] * n, [-1] * n
            for p in range(n):
                kids = sorted(d for d in range(1, n) if cpar[d] == p)
                if kids:
                    nxt[p] = kids[0]
                    for a, b in zip(kids, kids[1:]):
                        sib[a] = b
            layers, tl = {}, []
            for l in range(L):
                ids, ws = [None] * n, [None] * n
                per = []
                for t in range(n):
                    lid, w = experts(ti, l, t)
                    ids[cap[t]] = [physical(x, l, t) for x in lid]
                    ws[cap[t]] = w
                    per.append([[x, round(math.log(v), 6)] for x, v in zip(lid, w)])
                layers[str(l)] = {"topk_ids": ids, "topk_weights": ws}
                tl.append(per)
            rows = 2 if batch2 else 1
            tree = {"draft_token_num": n, "spec_steps": 4,
                    "retrive_next_token": [nxt] * rows, "retrive_next_sibling": [sib] * rows,
                    "retrive_index": [list(range(n))] * rows, "positions": [[7 + 0] * n] * rows,
                    "accept_index": [[cap[t] for t in acc] + [-1] * (5 - len(acc))]}
            history.append({"tree_structure": tree, "layers": layers})
            truth.append({"request": ri, "step": si, "parent": par, "logp": [0.0] * n,
                          "accepted": [1 if t in acc else 0 for t in range(n)], "topk": tl})
        samples.append({"question_id": 81 + ri, "expert_layer_history": history})
    json.dump(samples, open(cap_path, "w"))
    json.dump(P2L, open(map_path, "w"))
    with open(truth_path, "w") as f:
        for b in truth:
            f.write(json.dumps(b, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
