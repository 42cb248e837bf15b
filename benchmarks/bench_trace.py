"""Time the traced estimator: one BERT-Large (seq 512, batch 8) AdamW fp32 training step, traced
on fake tensors (two steps are run: the first creates the optimizer state; the second is the
steady state). Target: under 10 s for the step. Prints the analytic estimate beside it.

    .venv/bin/python benchmarks/bench_trace.py [--model bert-large-uncased] [--batch 8] [--seq 512] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from vramkit.estimator.analytic import estimate
from vramkit.estimator.trace import trace_estimate
from vramkit.units import format_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-large-uncased")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    opts = dict(batch=args.batch, seq=args.seq, precision=args.precision, optimizer="adamw")
    trace_estimate(args.model, steps=1, **{**opts, "batch": 1, "seq": 16})  # warm-up: imports, first dispatch
    per_step, totals, result = [], [], None
    for _ in range(args.runs):
        started = time.perf_counter()
        result = trace_estimate(args.model, steps=2, **opts)
        total = time.perf_counter() - started
        totals.append(total)
        per_step.append(total / 2)
    a = estimate(args.model, **opts)
    import torch
    print(f"bench_trace: {args.model}, batch {args.batch}, seq {args.seq}, {args.precision}, AdamW; "
          f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs")
    print(f"traced 2 steps (incl. building the model): median {statistics.median(totals):.2f}s "
          f"(min {min(totals):.2f}s, max {max(totals):.2f}s, {args.runs} runs)")
    step = statistics.median(per_step)
    print(f"per training step: {step:.2f}s  target < 10 s: {'MET' if step < 10 else 'NOT MET'}")
    print(f"traced peak {format_size(result.peak_bytes)} (step {result.peak_step}, {result.peak_phase}); "
          f"analytic peak {format_size(a.peak_bytes)} ({a.peak_moment}); "
          f"difference {a.peak_bytes / result.peak_bytes - 1:+.1%}")


if __name__ == "__main__":
    main()
