#!/usr/bin/env python3
"""Writes routing-safetensors (docs/design.md §5), the bulk form of
routing-jsonl, in plain Python (no torch or numpy needed), and converts a
routing-jsonl file to it.

    scripts/capture/routing_safetensors.py IN.jsonl OUT.safetensors --layers L --top-k K --experts E

Records of one problem_id become one request (token order by token_idx);
`phase: prompt` rows count into prompt_len (they must come first); a
token-layer missing from the file is written as -1 (no experts); weights
are written when every record has gating_probs. Other capture scripts can
import `write(path, experts, req_offsets, ...)`.
"""
import argparse
import json
import struct
import sys


def write(path, experts, req_offsets, weights=None, prompt_len=None, metadata=None):
    """experts: rows [tokens][layers][k] of ints (-1 = none); weights: the
    same shape of floats or None; req_offsets: R+1 ints; prompt_len: R ints."""
    T = len(experts)
    L = len(experts[0]) if T else 0
    K = len(experts[0][0]) if T and L else 0
    tensors = []  # (name, dtype, shape, bytes)
    flat = [e for tok in experts for lay in tok for e in lay]
    tensors.append(("experts", "I32", [T, L, K], struct.pack("<%di" % len(flat), *flat)))
    if weights is not None:
        fw = [w for tok in weights for lay in tok for w in lay]
        tensors.append(("weights", "F32", [T, L, K], struct.pack("<%df" % len(fw), *fw)))
    tensors.append(("req_offsets", "I64", [len(req_offsets)], struct.pack("<%dq" % len(req_offsets), *req_offsets)))
    if prompt_len is not None:
        tensors.append(("prompt_len", "I32", [len(prompt_len)], struct.pack("<%di" % len(prompt_len), *prompt_len)))
    header, at = {}, 0
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
    meta = {"format": "acceptmoe-routing/1"}
    meta.update({k: str(v) for k, v in (metadata or {}).items()})
    header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data 8-byte aligned, as safetensors writers do
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)


def from_jsonl(path, layers, top_k):
    probs = {}
    for n, line in enumerate(open(path), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        p = probs.setdefault(r["problem_id"], {})
        p.setdefault(r["token_idx"], {})[r["layer"]] = r
    experts, weights, offs, plens, have_w = [], [], [0], [], True
    for pid in sorted(probs):
        toks = probs[pid]
        plen = 0
        for t in sorted(toks):
            row, wrow = [], []
            for l in range(layers):
                r = toks[t].get(l)
                if r is None:
                    row.append([-1] * top_k)
                    wrow.append([0.0] * top_k)
                    continue
                row.append(list(r["experts"]))
                g = r.get("gating_probs")
                have_w &= g is not None
                wrow.append(list(g) if g else [1.0 / top_k] * top_k)
            if any(toks[t].get(l, {}).get("phase") == "prompt" for l in range(layers)):
                plen += 1
            experts.append(row)
            weights.append(wrow)
        offs.append(len(experts))
        plens.append(plen)
    return experts, (weights if have_w else None), offs, plens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--top-k", type=int, required=True)
    ap.add_argument("--experts", type=int, required=True)
    ap.add_argument("--model", default="")
    a = ap.parse_args()
    ex, w, offs, plens = from_jsonl(a.input, a.layers, a.top_k)
    write(a.output, ex, offs, w, plens, {"model": a.model, "num_experts": a.experts, "top_k": a.top_k,
                                         "source": "routing-jsonl " + a.input})
    print("wrote %d tokens of %d requests to %s" % (len(ex), len(offs) - 1, a.output), file=sys.stderr)


if __name__ == "__main__":
    main()
