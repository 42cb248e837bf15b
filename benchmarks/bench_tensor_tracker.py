"""What the one tensor tracker (vramkit/torch/_tensors.py) costs its clients on real CPU tensors:
a small model's training step (an MLP, AdamW) bare, under LeakDetector (one det.step() per step) and
under simulated_memory_cap. Reports the median step time and each client's ratio to the bare step
(issue 27 asks LeakDetector to stay at or under 1.25x). CPU time (time.process_time), so a busy
neighbour on a shared machine moves the numbers less than wall time. No assertion: numbers to read.

    .venv/bin/python benchmarks/bench_tensor_tracker.py [--width 512] [--depth 4] [--batch 64] [--steps 60] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default in (("width", 512), ("depth", 4), ("batch", 64), ("steps", 60), ("runs", 5), ("threads", 1)):
        ap.add_argument(f"--{flag}", type=int, default=default)  # threads: torch's intra-op threads
    args = ap.parse_args()
    import torch

    from vramkit.torch import LeakDetector, simulated_memory_cap

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layers: list[Any] = []
    for _ in range(args.depth):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.GELU(), torch.nn.LayerNorm(args.width)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randn(args.batch, args.width), torch.randint(0, 10, (args.batch,))

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    def bare() -> float:
        started = time.process_time()
        for _ in range(args.steps):
            step()
        return (time.process_time() - started) / args.steps

    def leak() -> float:
        det = LeakDetector(model, warn=False)
        started = time.process_time()
        with det:
            for _ in range(args.steps):
                step()
                det.step()
        return (time.process_time() - started) / args.steps

    def cap() -> float:
        started = time.process_time()
        with simulated_memory_cap(64 * 1024**3, held=model):
            for _ in range(args.steps):
                step()
        return (time.process_time() - started) / args.steps

    runs: dict[str, list[float]] = {"bare": [], "LeakDetector": [], "simulated_memory_cap": []}
    fns: dict[str, Callable[[], float]] = {"bare": bare, "LeakDetector": leak, "simulated_memory_cap": cap}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn in fns.values():  # warm-up: imports, the optimizer's state, the first dispatch
            fn()
        for _ in range(args.runs):  # interleaved, so a noisy neighbour spreads over all three
            for name, fn in fns.items():
                runs[name].append(fn())
    print(f"bench_tensor_tracker: MLP {args.depth}x{args.width}, batch {args.batch}, AdamW, {args.steps} steps x "
          f"{args.runs} runs; python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"{args.threads} torch thread(s)")
    base = statistics.median(runs["bare"])
    for name, times in runs.items():
        med = statistics.median(times)
        print(f"  {name:<22} {med * 1e3:8.2f} ms/step  (min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f})"
              f"  {med / base:5.2f}x bare")


if __name__ == "__main__":
    main()
