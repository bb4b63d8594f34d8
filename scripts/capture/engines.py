#!/usr/bin/env python3
"""Converts what serving engines capture into routing-safetensors
(docs/capture.md). Each converter runs where the capture is (plain Python;
`hf` needs torch and transformers, in the model's own environment).

  vllm    JSONL, one request per line, as dumped from vLLM's
          --enable-return-routed-experts: {"prompt_routed_experts":
          [[[e..k]..layers]..tokens] or null, "routed_experts": [...]}
          (nested lists, e.g. numpy's .tolist(); -1 where a prefix-cache
          hit computed nothing), at the top of the line (LLM.generate's
          outputs) or in its first choice (an HTTP response). Ids only.
  sglang  JSONL, one HTTP response per line, from SGLang's
          --enable-return-routed-experts with return_routed_experts: true:
          meta_info.routed_experts is base64 of int32 (or of
          meta_info.routed_experts_dtype) shaped [tokens,
          num_hidden_layers, k] over prompt and output; dense layers are
          zero rows and are dropped (--dense-layers); meta_info.prompt_tokens
          marks the prompt. Ids only.
  hf      a Hugging Face model with output_router_logits=True, teacher-
          forced over prompt + output text (JSONL of {"prompt", "output"}):
          full router logits per MoE layer; ids and weights by softmax top-k
          (the model's own rule for softmax routers).

usage: engines.py {vllm|sglang} IN.jsonl OUT.safetensors --experts E --top-k K [--layers L] [--dense-layers D]
       engines.py hf MODEL IN.jsonl OUT.safetensors [--top-k K]
"""
import argparse
import base64
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import routing_safetensors as rs  # noqa: E402


def _requests(path):
    for line in open(path):
        if line.strip():
            yield json.loads(line)


def _field(r, key):
    """key at the top of a line (LLM.generate's RequestOutput dumped), or in
    its first choice (an HTTP completion response)."""
    if r.get(key) is not None:
        return r[key]
    choices = r.get("choices") or [{}]
    return choices[0].get(key) if isinstance(choices[0], dict) else None


def vllm(path):
    experts, offs, plens = [], [0], []
    for r in _requests(path):
        prompt = _field(r, "prompt_routed_experts") or []
        out = _field(r, "routed_experts") or []
        experts.extend(prompt)
        experts.extend(out)
        offs.append(len(experts))
        plens.append(len(prompt))
    return experts, offs, plens


_DT = {"int32": ("<i", 4), "int16": ("<h", 2), "int64": ("<q", 8), "uint8": ("<B", 1)}


def sglang(path, layers_total, top_k, dense):
    experts, offs, plens = [], [0], []
    for r in _requests(path):
        meta = r.get("meta_info", r)
        raw = base64.b64decode(meta["routed_experts"])
        fmt, size = _DT[meta.get("routed_experts_dtype", "int32")]
        vals = [v[0] for v in struct.iter_unpack(fmt, raw)]
        per_tok = layers_total * top_k
        if len(vals) % per_tok:
            raise SystemExit("engines.py: routed_experts has %d values, not a multiple of layers x k = %d"
                             % (len(vals), per_tok))
        for t in range(len(vals) // per_tok):
            tok = vals[t * per_tok:(t + 1) * per_tok]
            rows = [tok[l * top_k:(l + 1) * top_k] for l in range(layers_total)]
            experts.append([row for l, row in enumerate(rows) if l not in dense])
        offs.append(len(experts))
        plens.append(int(meta.get("prompt_tokens", 0)))
    return experts, offs, plens


def hf_rows(router_logits, k):
    """Hugging Face's output_router_logits (a tuple, one [tokens, E] tensor
    per MoE layer, batch 1) as rows of token x layer: the k experts of
    highest softmax probability, highest first, and their probabilities
    renormalised over the k (softmax-top-k routers: Mixtral, Qwen-MoE,
    OLMoE)."""
    layers = [lg.float().softmax(-1) for lg in router_logits]
    experts, weights = [], []
    for t in range(layers[0].shape[0]):
        row, wrow = [], []
        for pr in layers:
            w, e = pr[t].topk(k)
            row.append([int(x) for x in e])
            wrow.append([float(x) for x in w / w.sum()])
        experts.append(row)
        weights.append(wrow)
    return experts, weights


def hf(model_name, path, top_k):
    import torch  # noqa: F401  (the model's environment)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_name)
    model = AutoModelForCausalLM.from_pretrained(model_name, torch_dtype="auto")
    k = top_k or getattr(model.config, "num_experts_per_tok", 8)
    experts, weights, offs, plens = [], [], [0], []
    for r in _requests(path):
        p = tok(r["prompt"], return_tensors="pt").input_ids
        ids = tok(r["prompt"] + r["output"], return_tensors="pt").input_ids
        with torch.no_grad():
            out = model(ids, output_router_logits=True)
        e, w = hf_rows(out.router_logits, k)
        experts.extend(e)
        weights.extend(w)
        offs.append(len(experts))
        plens.append(int(p.shape[1]))
    return experts, weights, offs, plens, model.config


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=["vllm", "sglang", "hf"])
    ap.add_argument("args", nargs="+")
    ap.add_argument("--experts", type=int)
    ap.add_argument("--top-k", type=int)
    ap.add_argument("--layers", type=int, help="sglang: num_hidden_layers in the capture")
    ap.add_argument("--dense-layers", default="", help="sglang: comma-separated dense layer indices to drop")
    ap.add_argument("--model", default="")
    a = ap.parse_args()
    weights = None
    if a.engine == "hf":
        model_name, inp, outp = a.args
        experts, weights, offs, plens, cfg = hf(model_name, inp, a.top_k)
        meta = {"model": model_name, "num_experts": getattr(cfg, "num_experts", a.experts or 0), "source": "hf"}
    else:
        inp, outp = a.args
        if a.engine == "vllm":
            experts, offs, plens = vllm(inp)
        else:
            dense = {int(x) for x in a.dense_layers.split(",") if x.strip()}
            experts, offs, plens = sglang(inp, a.layers, a.top_k, dense)
        meta = {"model": a.model, "num_experts": a.experts, "top_k": a.top_k, "source": a.engine}
    rs.write(outp, experts, offs, weights, plens, {k: v for k, v in meta.items() if v})
    print("wrote %d tokens of %d requests to %s" % (len(experts), len(offs) - 1, outp), file=sys.stderr)


if __name__ == "__main__":
    main()
