#!/usr/bin/env python3
"""The hf capture converter (scripts/capture/engines.py hf) against the real
transformers library: a tiny Mixtral built from a config with random weights
(nothing downloaded; 32 MoE layers of 8 experts, top-2, as the mixtral-8x7b
preset, at hidden size 32), a character tokenizer, two requests. The capture
goes through `acceptmoe import` to an .amt trace and `acceptmoe gen` to
blocks-jsonl; every output token's experts, layer by layer, must be the
model's own top-2 router choice, and the softmax of the stored logits its
renormalised top-2 weights.

usage: hf_capture.py ACCEPTMOE_BINARY   (exit 77: torch or transformers missing)
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REQUESTS = [{"prompt": "hello there", "output": " general kenobi, you are a bold one."},
            {"prompt": "abc", "output": "defgh ijk lmnop qrs tuv wxyz!"}]
WINDOW = 8  # workload.window's default: chain blocks of 8 tokens


def skip(why):
    print(f"hf_capture: skipped: {why}")
    sys.exit(77)


def main():
    try:
        import torch
        import transformers
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import MixtralConfig, MixtralForCausalLM, PreTrainedTokenizerFast
    except ImportError as e:
        skip(f"{e} (scripts/install-deps.sh installs transformers into .venv)")
    sim = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        torch.manual_seed(0)
        cfg = MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=32,
                            num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
                            max_position_embeddings=256)
        model = MixtralForCausalLM(cfg).eval()
        mdir = os.path.join(d, "tiny-mixtral")
        model.save_pretrained(mdir)
        vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,!?")}
        vocab["[UNK]"] = len(vocab)
        tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
        tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
        PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(mdir)
        tok = PreTrainedTokenizerFast.from_pretrained(mdir)
        inp = os.path.join(d, "requests.jsonl")
        with open(inp, "w") as f:
            for r in REQUESTS:
                f.write(json.dumps(r) + "\n")
        cap, amt, blocks = (os.path.join(d, n) for n in ("cap.safetensors", "cap.amt", "blocks.jsonl"))
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "capture", "engines.py"), "hf", mdir, inp, cap],
                       check=True)
        subprocess.run([sim, "import", "--format", "routing-safetensors", cap, "--model", "mixtral-8x7b", "-o", amt,
                        "--quiet"], check=True)
        spec = os.path.join(d, "spec.yaml")
        with open(spec, "w") as f:
            f.write(f"name: hf-capture\nmodel: mixtral-8x7b\nhardware: h200\n"
                    f"workload: {{source: trace, path: {amt}}}\npolicies: [natural]\n")
        subprocess.run([sim, "gen", spec, "-o", blocks, "--quiet"], check=True)

        # the model's own routing of each request's output tokens
        want = []
        for r in REQUESTS:
            plen = tok(r["prompt"], return_tensors="pt").input_ids.shape[1]
            ids = tok(r["prompt"] + r["output"], return_tensors="pt").input_ids
            with torch.no_grad():
                logits = model(ids, output_router_logits=True).router_logits
            per_tok = []
            for t in range(plen, ids.shape[1]):
                row = []
                for lg in logits:
                    w, e = lg[t].float().softmax(-1).topk(2)
                    row.append(([int(x) for x in e], [float(x) for x in w / w.sum()]))
                per_tok.append(row)
            want.append(per_tok)

        checked, worst = 0, 0.0
        with open(blocks) as f:
            for line in f:
                b = json.loads(line)
                base = want[b["request"]][b["step"] * WINDOW:]
                topk = b["topk"]  # [layer][node][entry] = [expert, logit]
                assert len(topk) == cfg.num_hidden_layers, f"block {b['block']}: {len(topk)} layers"
                for node in range(len(b["parent"])):
                    for layer, entries in enumerate(topk):
                        ids, w = base[node][layer]
                        got = [int(x) for x, _ in entries[node]]
                        assert got == ids, (f"block {b['block']} node {node} layer {layer}: experts {got}, "
                                            f"the model's {ids}")
                        z = [float(v) for _, v in entries[node]]
                        m = max(z)
                        p = [pow(2.718281828459045, v - m) for v in z]
                        p = [v / sum(p) for v in p]
                        worst = max(worst, max(abs(a - c) for a, c in zip(p, w)))
                        checked += 1
        total = sum(len(t) for t in want)
        assert checked == total * cfg.num_hidden_layers, f"checked {checked} token-layers of {total * 32}"
        # binary16 logits: a weight near 0.5 is kept to about 2^-11 relative
        assert worst < 2e-3, f"weights differ from the model's by up to {worst:.2e}"
        print(f"hf_capture: transformers {transformers.__version__}, torch {torch.__version__}: {checked} "
              f"token-layers, experts equal, weights within {worst:.1e}")


if __name__ == "__main__":
    main()
