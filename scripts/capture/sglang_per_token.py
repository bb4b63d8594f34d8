#!/usr/bin/env python3
"""Converts SGLang's per_token expert distribution dumps to chain blocks-jsonl
(docs/capture.md).

SGLang, launched with --expert-distribution-recorder-mode per_token, records
every forward pass between /start_expert_distribution_record and
/dump_expert_distribution_record into expert_distribution_recorder_*.pt
(torch.save of {"records": [...], "last_physical_to_logical_map": [L, P]});
each record holds the pass's forward_mode, input_ids, positions and
topk_ids_of_layer [layers, tokens, 8] of physical expert ids (-1 unused).

A TARGET_VERIFY pass of chain EAGLE (--speculative-eagle-topk 1) at batch 1
verifies n tokens at positions p .. p+n-1: the last committed token and the
n-1 drafts. The dump has no accept flags; the next verify pass of the same
request starts at p' = p + (accepted drafts) + 1, so the first p' - p nodes
were committed. Each verify pass becomes one chain block: parent i-1,
accepted for i < p' - p, every node's experts (logical ids, the recorded
order). The last verify pass of a request has no successor and is left out
(counted). EXTEND passes start a request. Dense layers (no expert ids in any
record) are dropped.

What the dump does not carry: draft probabilities (logp 0, as the
routing-jsonl importer writes) and router weights (every stored logit 0:
equal weights, rank unknown). Trees (topk > 1) and batches > 1 are refused:
without parents or request ids their nodes cannot be told apart.

Reads .pt with torch when it is installed, else with the small reader below
(the zip archive and pickle that torch.save writes; only plain containers,
numbers and tensors are accepted).

usage: sglang_per_token.py DUMP.pt [DUMP.pt ...] OUT.jsonl --experts E [--top-k K]
"""
import argparse
import collections
import io
import json
import os
import pickle
import struct
import sys
import zipfile

TARGET_VERIFY, EXTEND, MIXED = 5, 1, 3  # sglang ForwardMode values (IntEnum, auto() from 1)


class Tensor:
    """A CPU tensor read without torch: dtype, shape, flat values."""

    def __init__(self, values, shape):
        self.values, self.shape = values, tuple(shape)

    def tolist(self):
        def build(off, dims):
            if not dims:
                return self.values[off]
            step = 1
            for d in dims[1:]:
                step *= d
            return [build(off + i * step, dims[1:]) for i in range(dims[0])]

        return build(0, list(self.shape)) if self.shape else self.values[0]


_STORAGES = {  # torch storage class -> struct code, bytes
    "IntStorage": ("i", 4), "LongStorage": ("q", 8), "ShortStorage": ("h", 2), "CharStorage": ("b", 1),
    "ByteStorage": ("B", 1), "FloatStorage": ("f", 4), "DoubleStorage": ("d", 8), "BoolStorage": ("?", 1),
}


class _StorageType:
    def __init__(self, name):
        self.name = name


def _rebuild_tensor_v2(storage, offset, size, stride, *_):
    code, width, data = storage
    n = 1
    for d in size:
        n *= d
    if n == 0:
        return Tensor([], size)
    # any strides: gather element by element (the dumps are contiguous)
    flat = []
    idx = [0] * len(size)
    for _k in range(n):
        pos = offset + sum(i * s for i, s in zip(idx, stride))
        flat.append(struct.unpack_from("<" + code, data, pos * width)[0])
        for d in range(len(size) - 1, -1, -1):
            idx[d] += 1
            if idx[d] < size[d]:
                break
            idx[d] = 0
    return Tensor(flat, size)


def _load_without_torch(path):
    zf = zipfile.ZipFile(path)
    names = zf.namelist()
    pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
    if not pkl:
        raise ValueError("%s: not a torch.save archive (no data.pkl)" % path)
    prefix = pkl[0][: -len("data.pkl")]

    class Reader(pickle.Unpickler):
        def find_class(self, module, name):
            if module == "torch._utils" and name == "_rebuild_tensor_v2":
                return _rebuild_tensor_v2
            if module == "torch" and name in _STORAGES:
                return _StorageType(name)
            if module == "collections" and name == "OrderedDict":
                return collections.OrderedDict
            raise pickle.UnpicklingError("%s: %s.%s is not a tensor or a plain container" % (path, module, name))

        def persistent_load(self, pid):
            # ('storage', storage type, key, location, numel)
            if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
                raise pickle.UnpicklingError("%s: unknown persistent id %r" % (path, pid))
            kind, key = pid[1], pid[2]
            if not isinstance(kind, _StorageType):
                raise pickle.UnpicklingError("%s: unsupported storage %r" % (path, kind))
            code, width = _STORAGES[kind.name]
            return (code, width, zf.read(prefix + "data/" + str(key)))

    return Reader(io.BytesIO(zf.read(pkl[0]))).load()


def load_dump(path):
    try:
        import torch  # noqa: F401
    except ImportError:
        return _load_without_torch(path)
    return torch.load(path, map_location="cpu", weights_only=False)


def _list(x):
    return x.tolist() if hasattr(x, "tolist") else list(x)


def convert(paths, experts, top_k, out, err=sys.stderr):
    """Returns (blocks written, verify passes left out)."""
    records, p2l = [], None
    for p in paths:
        d = load_dump(p)
        if not isinstance(d, dict) or "records" not in d:
            raise ValueError("%s: not a per_token dump (no 'records')" % p)
        records.extend(d["records"])
        if d.get("last_physical_to_logical_map") is not None:
            p2l = _list(d["last_physical_to_logical_map"])
    records.sort(key=lambda r: r["forward_pass_id"])
    if any(r.get("rank", 0) != records[0].get("rank", 0) for r in records):
        raise ValueError("dumps of several ranks: convert one rank's file")
    # the requests: runs of verify passes between EXTEND passes
    requests, cur = [], []
    for r in records:
        mode = int(r["forward_mode"])
        if mode in (EXTEND, MIXED):
            if cur:
                requests.append(cur)
            cur = []
        elif mode == TARGET_VERIFY:
            cur.append(r)
    if cur:
        requests.append(cur)
    # which layers have experts anywhere (the others are dense)
    moe = None
    for req in requests:
        for r in req:
            ids = _list(r["topk_ids_of_layer"])
            used = [any(x >= 0 for row in layer for x in row) for layer in ids]
            moe = used if moe is None else [a or b for a, b in zip(moe, used)]
    if moe is None:
        raise ValueError("no TARGET_VERIFY passes in the dump (was speculative decoding on while recording?)")
    layers = [l for l, u in enumerate(moe) if u]
    blocks = dropped = 0
    for ri, req in enumerate(requests):
        for si, r in enumerate(req):
            pos = [int(x) for x in _list(r["positions"])]
            n = len(pos)
            if pos != list(range(pos[0], pos[0] + n)):
                raise ValueError("forward pass %d: positions %s are not one chain (a tree draft, or a batch of "
                                 "several requests: record with --speculative-eagle-topk 1 at batch 1)"
                                 % (r["forward_pass_id"], pos))
            if si + 1 == len(req):
                dropped += 1  # no successor: its accepted count is unknown
                continue
            jump = int(_list(req[si + 1]["positions"])[0]) - pos[0]
            if not 1 <= jump <= n:
                raise ValueError("forward pass %d: the next verify pass starts %d positions later (1..%d expected)"
                                 % (r["forward_pass_id"], jump, n))
            ids = _list(r["topk_ids_of_layer"])
            topk = []
            for l in layers:
                per_node = []
                for t in range(n):
                    row = [int(x) for x in ids[l][t] if int(x) >= 0]
                    if p2l is not None:
                        row = [int(p2l[l][x]) for x in row]
                    k = top_k or len(row)
                    if len(row) < k or any(not 0 <= x < experts for x in row[:k]):
                        raise ValueError("forward pass %d, layer %d, token %d: expert ids %s (need %d in 0..%d)"
                                         % (r["forward_pass_id"], l, t, row, k, experts - 1))
                    per_node.append([[x, 0.0] for x in row[:k]])
                topk.append(per_node)
            out.write(json.dumps({"request": ri, "step": si, "parent": [t - 1 for t in range(n)],
                                  "logp": [0.0] * n, "accepted": [1 if t < jump else 0 for t in range(n)],
                                  "topk": topk}, separators=(",", ":")) + "\n")
            blocks += 1
    err.write("%d blocks from %d requests (%d MoE layers of %d); %d last verify passes left out (no successor)\n"
              % (blocks, len(requests), len(layers), len(moe), dropped))
    return blocks, dropped


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="expert_distribution_recorder_*.pt, then OUT.jsonl")
    ap.add_argument("--experts", type=int, required=True, help="the model's routed experts")
    ap.add_argument("--top-k", type=int, default=0, help="experts per token (default: as recorded)")
    a = ap.parse_args(argv)
    if len(a.inputs) < 2:
        ap.error("give at least one dump and the output file")
    *dumps, out_path = a.inputs
    tmp = out_path + ".tmp"
    try:
        with open(tmp, "w") as f:
            convert(dumps, a.experts, a.top_k, f)
    except (ValueError, OSError, pickle.UnpicklingError, zipfile.BadZipFile, KeyError) as e:
        sys.stderr.write("sglang_per_token: %s\n" % e)
        try:
            os.remove(tmp)
        except OSError:
            pass
        return 2
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
