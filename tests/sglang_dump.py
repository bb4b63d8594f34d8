#!/usr/bin/env python3
"""Writes a synthetic SGLang per_token expert distribution dump in the
engine's layout (tests/cli.sh), and the chain blocks-jsonl it stands for.

The dump is what torch.save writes for SGLang's _DetailAccumulator: a zip
archive holding data.pkl (pickle protocol 2; tensors as
torch._utils._rebuild_tensor_v2 of persistent 'storage' ids) and one file per
storage. With torch installed it is torch.save itself; without, the same
archive is written here by pickling against stand-in torch names.

Three requests at batch 1, chain EAGLE with 4 tokens per verify pass:
an EXTEND pass (the prompt), then verify passes whose next start position
says how many tokens were committed; draft-extend passes in between (which
the converter skips); 17 layers, layer 0 dense (-1 everywhere), 64 logical
experts behind a physical-to-logical permutation.

usage: sglang_dump.py DUMP.pt TRUTH.jsonl [--tree]   (--tree: a tree draft,
       which the converter must refuse)
"""
import collections
import io
import json
import pickle
import random
import sys
import types
import zipfile

LAYERS, DENSE, E, K, N = 17, 1, 64, 8, 4


def build(tree):
    rng = random.Random(7)
    perm = list(range(E))
    rng.shuffle(perm)  # physical p holds logical perm[p]
    phys_of = {lg: p for p, lg in enumerate(perm)}
    p2l = [perm[:] for _ in range(LAYERS)]
    records, truth, fid = [], [], 0

    def route():
        return rng.sample(range(E), K)  # logical ids, in the router's order

    def ids_tensor(routes):  # routes: [tokens][moe layers][K] logical -> [LAYERS, tokens, 8] physical
        return [[[-1] * K for _ in routes] if l < DENSE else [[phys_of[x] for x in r[l - DENSE]] for r in routes]
                for l in range(LAYERS)]

    for req in range(3):
        prompt = 5 + req
        routes = [[route() for _ in range(LAYERS - DENSE)] for _ in range(prompt)]
        records.append(dict(forward_pass_id=fid, rank=0, gatherer_key="primary", input_ids=list(range(prompt)),
                            positions=list(range(prompt)), extend_seq_lens=[prompt], forward_mode=1,
                            topk_ids_of_layer=("T", ids_tensor(routes)), misc_objects=[],
                            global_physical_count=("T", [[0] * E for _ in range(LAYERS)])))
        fid += 1
        p, passes = prompt, 4 + req
        for s in range(passes):
            jump = rng.randint(1, N)
            routes = [[route() for _ in range(LAYERS - DENSE)] for _ in range(N)]
            pos = list(range(p, p + N)) if not (tree and s == 1) else [p, p + 1, p + 1, p + 2]
            records.append(dict(forward_pass_id=fid, rank=0, gatherer_key="primary", input_ids=[1] * N,
                                positions=pos, extend_seq_lens=None, forward_mode=5,
                                topk_ids_of_layer=("T", ids_tensor(routes)), misc_objects=[],
                                global_physical_count=("T", [[0] * E for _ in range(LAYERS)])))
            fid += 1
            records.append(dict(forward_pass_id=fid, rank=0, gatherer_key="primary", input_ids=[1] * jump,
                                positions=list(range(p, p + jump)), extend_seq_lens=None, forward_mode=6,
                                topk_ids_of_layer=("T", [[[-1] * K] * jump for _ in range(LAYERS)]), misc_objects=[],
                                global_physical_count=("T", [[0] * E for _ in range(LAYERS)])))
            fid += 1
            if s + 1 < passes:  # the last pass has no successor: not in the truth
                truth.append({"request": req, "step": s, "parent": [t - 1 for t in range(N)], "logp": [0.0] * N,
                              "accepted": [1 if t < jump else 0 for t in range(N)],
                              "topk": [[[[x, 0.0] for x in routes[t][l]] for t in range(N)]
                                       for l in range(LAYERS - DENSE)]})
            p += jump
    rng.shuffle(records)  # the converter orders by forward_pass_id
    return dict(records=records, last_physical_to_logical_map=("T", p2l)), truth


def _shape(x):
    return [len(x)] + _shape(x[0]) if isinstance(x, list) and x else ([0] if isinstance(x, list) else [])


def _flat(x):
    return [v for y in x for v in _flat(y)] if isinstance(x, list) else [x]


def save_with_torch(obj, path, torch):
    def conv(o):
        if isinstance(o, tuple) and o and o[0] == "T":
            return torch.tensor(o[1], dtype=torch.int32)
        if isinstance(o, dict):
            return {k: conv(v) for k, v in o.items()}
        if isinstance(o, list):
            return [conv(v) for v in o]
        return o

    torch.save(conv(obj), path)


def save_without_torch(obj, path):
    """torch.save's archive for a structure of plain containers and int32 tensors."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):
        raise AssertionError("a stand-in: never called")

    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    IntStorage = type("IntStorage", (), {"__module__": "torch"})
    torch.IntStorage, torch._utils = IntStorage, utils
    saved = {k: sys.modules.get(k) for k in ("torch", "torch._utils")}
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
    storages = []

    class Storage:
        def __init__(self, values):
            self.key, self.values = str(len(storages)), values
            storages.append(self)

    class Tensor:
        def __init__(self, nested):
            self.shape = _shape(nested)
            self.storage = Storage(_flat(nested))

        def __reduce__(self):
            stride, acc = [], 1
            for d in reversed(self.shape):
                stride.insert(0, acc)
                acc *= d
            return (_rebuild_tensor_v2,
                    (self.storage, 0, tuple(self.shape), tuple(stride), False, collections.OrderedDict()))

    def conv(o):
        if isinstance(o, tuple) and o and o[0] == "T":
            return Tensor(o[1])
        if isinstance(o, dict):
            return {k: conv(v) for k, v in o.items()}
        if isinstance(o, list):
            return [conv(v) for v in o]
        return o

    class P(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, Storage):
                return ("storage", IntStorage, o.key, "cpu", len(o.values))
            return None

    try:
        buf = io.BytesIO()
        P(buf, protocol=2).dump(conv(obj))
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", "little")
        for s in storages:
            z.writestr("archive/data/" + s.key, b"".join(v.to_bytes(4, "little", signed=True) for v in s.values))
        z.writestr("archive/version", "3\n")


def main(argv):
    tree = "--tree" in argv
    dump, truth_path = [a for a in argv if a != "--tree"]
    obj, truth = build(tree)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        save_with_torch(obj, dump, torch)
    else:
        save_without_torch(obj, dump)
    with open(truth_path, "w") as f:
        for b in truth:
            f.write(json.dumps(b, separators=(",", ":")) + "\n")
    sys.stderr.write("wrote %s with %s\n" % (dump, "torch.save" if torch else "the stand-in writer (no torch here)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
