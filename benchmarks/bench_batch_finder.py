"""Trials needed to find the largest batch that fits: vramkit's find_batch_size (measure two small
batches, predict, confirm) against doubling + bisection, under simulated memory caps.

    .venv/bin/python benchmarks/bench_batch_finder.py

The step is simulated (no GPU needed): peak memory = fixed + per-sample x batch, rounded up to the
caching allocator's 2 MiB blocks, plus an optional quadratic term (attention-like); past the cap
it raises a real torch.cuda.OutOfMemoryError. Both searches must find the same largest batch.
"""

from __future__ import annotations

import argparse

import torch

from vramkit.torch import find_batch_size, find_batch_size_doubling

MiB = 1024**2


def make_step(cap: int, fixed: int, per: int, quad: float):
    state = {"peak": 0}

    def need(batch: int) -> int:
        raw = fixed + per * batch + int(quad * batch * batch)
        return -(-raw // (2 * MiB)) * 2 * MiB

    def step(batch: int) -> None:
        if need(batch) > cap:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB.")
        state["peak"] = need(batch)

    return step, state, need


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()
    print(f"{'model':<26} {'cap':>7} {'largest':>8} {'ours':>5} {'doubling+bisect':>16}  recommended (10% margin)")
    models = [("linear, 3.7 MiB/sample", 900 * MiB, 37 * MiB // 10, 0.0),
              ("linear, 150 MiB/sample", 6 * 1024 * MiB, 150 * MiB, 0.0),
              ("quadratic (attention)", 2 * 1024 * MiB, 20 * MiB, 0.02 * MiB)]
    total_ours = total_base = 0
    for name, fixed, per, quad in models:
        for cap_gib in (8, 16, 24, 40, 80, 141):
            cap = cap_gib * 1024**3
            step, state, need = make_step(cap, fixed, per, quad)
            ours = find_batch_size(step, memory_fn=lambda s=state: s["peak"], capacity=cap, before_trial=lambda: None)
            base = find_batch_size_doubling(step)
            assert ours.largest == base.largest, (name, cap_gib, ours.largest, base.largest)
            total_ours += ours.trial_count
            total_base += base.trial_count
            print(f"{name:<26} {cap_gib:>5}GiB {ours.largest:>8} {ours.trial_count:>5} {base.trial_count:>16}  "
                  f"{ours.recommended}")
    print(f"total trials: ours {total_ours}, doubling+bisection {total_base} "
          f"({total_base / total_ours:.1f}x as many)")


if __name__ == "__main__":
    main()
