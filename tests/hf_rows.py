#!/usr/bin/env python3
"""scripts/capture/engines.py's Hugging Face conversion (hf_rows) on router
logits in the library's layout (a tuple of [tokens, E] tensors, one per MoE
layer), against the same rule computed here in plain Python: softmax, the
k largest (ties: the lower id, as torch.topk keeps them on these distinct
draws), renormalised. Needs torch; tests/cli.sh runs it where a python3
has it. Prints 'ok' or the first difference, exit 1."""
import math
import os
import random
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "capture"))
import engines  # noqa: E402

rng = random.Random(3)
T, E, L, K = 9, 16, 3, 4
logits = [[[rng.gauss(0, 2) for _ in range(E)] for _ in range(T)] for _ in range(L)]
experts, weights = engines.hf_rows(tuple(torch.tensor(x, dtype=torch.bfloat16) for x in logits), K)
for t in range(T):
    for l in range(L):
        z = [float(torch.tensor(v, dtype=torch.bfloat16)) for v in logits[l][t]]  # what the model's bf16 holds
        m = max(z)
        p = [math.exp(v - m) for v in z]
        s = sum(p)
        p = [v / s for v in p]
        top = sorted(range(E), key=lambda e: (-p[e], e))[:K]
        w = [p[e] / sum(p[x] for x in top) for e in top]
        if experts[t][l] != top or any(abs(a - b) > 1e-6 for a, b in zip(weights[t][l], w)):
            print("token %d layer %d: %s %s, want %s %s" % (t, l, experts[t][l], weights[t][l], top, w))
            sys.exit(1)
if len(experts) != T or any(len(r) != L for r in experts):
    print("shape: %d rows" % len(experts))
    sys.exit(1)
print("ok")
