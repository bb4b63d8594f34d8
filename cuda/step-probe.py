#!/usr/bin/env python3
"""Host-side costs of a step on this GPU, measured with PyTorch (the GPU
image's own), beside what cuda/device-check.sh measures with the harness:
  launch_eager_s   wall time per launch of a tiny kernel, launched back to
                   back eagerly (dispatch + launch; the GPU work is ~1 us)
  launch_graph_s   the same kernels replayed from one captured CUDA graph
  readback_s       one small device-to-host copy with its synchronize (the
                   routing read-back of a verify step: 64 tokens x 8 ids)
  sync_s           one bare torch.cuda.synchronize() on an idle stream
Medians of 7 rounds. These are leads for an engine preset's launch_s and
readback_s (docs/gpu.md): PyTorch's dispatch is in them, as in an engine.
Usage: python3 cuda/step-probe.py [OUT.csv]
"""
import statistics
import sys
import time

import torch


def median_per_call(fn, calls, rounds=7):
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn(calls)
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / calls)
    return statistics.median(out)


def main():
    dev = torch.device("cuda")
    x = torch.zeros(256, device=dev)
    routes = torch.zeros(64, 8, dtype=torch.int32, device=dev)
    host = torch.empty(64, 8, dtype=torch.int32).pin_memory()
    n = 200

    def eager(calls):
        for _ in range(calls):
            x.add_(1.0)

    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        eager(3)  # warm-up on the side stream before capture
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        eager(n)

    def graph(calls):
        for _ in range(calls // n):
            g.replay()

    def readback(calls):
        for _ in range(calls):
            host.copy_(routes, non_blocking=True)
            torch.cuda.synchronize()

    def sync(calls):
        for _ in range(calls):
            torch.cuda.synchronize()

    eager(100)
    rows = [
        ("launch_eager_s", median_per_call(eager, 2000)),
        ("launch_graph_s", median_per_call(graph, 20 * n)),
        ("readback_s", median_per_call(readback, 500)),
        ("sync_s", median_per_call(sync, 500)),
    ]
    lines = ["name,seconds"] + [f"{k},{v:.4e}" for k, v in rows]
    print(f"   gpu: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    for k, v in rows:
        print(f"   {k:16s} {v * 1e6:8.2f} us")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
