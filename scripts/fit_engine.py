#!/usr/bin/env python3
"""Fits the engine-mode coefficients of the cost model (docs/design.md §9) to
the measured pairs in real-data/costs/engine_modes.csv:

  launch_s    host time per kernel launch. With CUDA graphs off every kernel
              is a host launch; a resident Qwen3-30B-A3B decodes at 116 tok/s
              eager against 287-311 with graphs (one engine, one RTX 5090, batch
              1, ~790 launches per token): launch_s = (1/116 - 1/mid) / 790.
              Checked against the same engine's expert-offload run, whose host
              issue time (~19 of ~40 ms per token, 3,091 launches) it should
              predict, under the two forms of docs/validation.md: launches
              added to the device time (the form the simulator uses) and the
              layer as max(host, device).
  readback_s  the routing's device-to-host copy plus synchronisation under
              offload, per MoE layer: measured directly (45.4 us).

step_host_s (host work between passes without an overlap scheduler) is not
isolated by any shared row; the presets state it as a lead.
Plain Python; prints the table and the preset lines.

usage: scripts/fit_engine.py [REAL_DATA_DIR]   (default ../shared/real-data)
"""
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_data  # noqa: E402



def num(text):
    """A value cell: a number, '~N', 'A of B' (A), or a range 'A-B' (its midpoint)."""
    t = text.replace("~", "").replace(",", "").strip()
    if " of " in t:  # "A of B": the part A
        t = t.split(" of ")[0]
    if "-" in t and not t.startswith("-"):
        a, b = t.split("-")
        return (float(a) + float(b)) / 2
    return float(t)


def main():
    path = real_data.path(sys.argv[1:], "costs", "engine_modes.csv", "fit_engine")
    if path is None:
        return 2
    rows = list(csv.DictReader(open(path)))

    def pick(quantity, setting_has, model_has="Qwen3-30B-A3B"):
        for r in rows:
            if r["quantity"] == quantity and setting_has in r["setting"] and model_has in r["model"]:
                return num(r["value"])
        raise SystemExit(f"fit_engine: no row '{quantity}' with '{setting_has}' in {path}")

    graphs = pick("decode throughput", "CUDA graphs on")
    eager = pick("decode throughput", "CUDA graphs off")
    launches = pick("kernel launches per token", "resident path")
    launches_off = pick("kernel launches per token", "expert-offload path")
    host_off = pick("host issue time per token", "offload run")
    readback = pick("device-to-host read-back plus synchronize", "single small D2H", model_has="-")
    launch_add = (1 / eager - 1 / graphs) / launches  # eager = device + launches * launch_s
    launch_max = (1 / eager) / launches              # eager = max(host, device), host-bound
    print("form,launch_s_us,predicted_offload_host_ms,measured_offload_host_ms,error")
    for name, ls in (("device + launches", launch_add), ("max(host, device)", launch_max)):
        pred = launches_off * ls * 1e3
        print(f"{name},{ls * 1e6:.2f},{pred:.1f},{host_off:.1f},{100 * (pred - host_off) / host_off:+.0f}%")
    print(f"# hw preset lines (the additive form):\nlaunch_s: {launch_add:.3g}\nreadback_s: {readback * 1e-6:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
