#!/usr/bin/env python3
"""Copies Qwen3-30B-A3B's fitted routing section into the presets that borrow it.

The scalar fields are copied as they are; the per-layer lists (skew,
score_scale, tree_sibling, tree_repeat) are resampled by fraction of depth (linear between the fitted
model's layers) to the borrowing model's MoE layers, as the locality profile
is. Each borrowing preset's comment above its `routing:` says what it borrows
and why; this script rewrites only the section itself.
    scripts/borrow_routing.py [PRESET ...]   (default: every preset that says it borrows)
"""
import pathlib
import re
import sys

MODELS = pathlib.Path(__file__).resolve().parent.parent / "workloads" / "models"
SOURCE = "qwen3-30b-a3b"
LISTS = ("skew", "score_scale", "tree_sibling", "tree_repeat")


def routing_section(text):
    """(fields in order, the section's first and last line index) of a preset's routing: block."""
    lines = text.split("\n")
    start = lines.index("routing:")
    end = start + 1
    while end < len(lines) and (lines[end].startswith("  ") or not lines[end].strip()):
        end += 1
    while not lines[end - 1].strip():
        end -= 1
    body = " ".join(l.strip() for l in lines[start + 1:end])
    fields = {}
    for m in re.finditer(r"([a-z_]+): (\[[^\]]*\]|[^ \[]+)", body):
        v = m.group(2)
        fields[m.group(1)] = [float(x) for x in v.strip("[]").split(",")] if v.startswith("[") else v
    return fields, start, end


def resample(values, n):
    if len(values) == 1 or n == len(values):
        return values[:] if n == len(values) else values * n
    out = []
    for l in range(n):
        x = l * (len(values) - 1) / (n - 1) if n > 1 else 0
        i = min(int(x), len(values) - 2)
        out.append(values[i] + (values[i + 1] - values[i]) * (x - i))
    return out


def fmt_list(name, values):
    parts = [f"{v:.4f}" for v in values]
    rows = [", ".join(parts[i:i + 12]) for i in range(0, len(parts), 12)]
    return f"  {name}: [" + ",\n    ".join(rows) + "]"


def main(argv):
    src_fields, _, _ = routing_section((MODELS / f"{SOURCE}.yaml").read_text())
    targets = argv or [p.stem for p in sorted(MODELS.glob("*.yaml"))
                       if p.stem != SOURCE and f"borrowed from {SOURCE}'s fit" in p.read_text()]
    for name in targets:
        path = MODELS / f"{name}.yaml"
        text = path.read_text()
        layers = int(re.search(r"^moe_layers: (\d+)", text, re.M).group(1))
        _, start, end = routing_section(text)
        out = ["routing:"]
        for k, v in src_fields.items():
            out.append(fmt_list(k, resample(v, layers)) if k in LISTS else f"  {k}: {v}")
        lines = text.split("\n")
        path.write_text("\n".join(lines[:start] + out + lines[end:]))
        print(f"{name}: {layers} MoE layers")


if __name__ == "__main__":
    main(sys.argv[1:])
