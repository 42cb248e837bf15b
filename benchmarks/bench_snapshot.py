"""In-process cost of one snapshot: `vramkit.open_machine(simulate=FILE).snapshot()`, repeated.

8 simulated GPUs with 50, 200, 1000 and 5000 processes: synthetic ones (host side from the
scenario) and real ones (spawned `sleep`s, host side read from /proc, as on a real server).
Prints ms per snapshot and µs per process, so that growth with the number of processes is
visible: it should be flat per process. For real processes, the floor is measured in the same
run: reading the same /proc files directly (stat, cmdline and cgroup of each pid, and a stat()
of its directory for the owner), with no parsing; the target is at most 50 µs per process.

    .venv/bin/python benchmarks/bench_snapshot.py [--sizes 50,200,1000,5000] [--seconds 1.0] [--no-real]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import Sleepers, environment, scenario, write_scenario  # noqa: E402

import vramkit  # noqa: E402

TARGET_US = 50.0  # snapshot cost per real process, at most


def measure(path: Path, seconds: float) -> tuple[float, float, int]:
    """(median ms per snapshot over batches, first snapshot ms, GPU processes seen)."""
    machine = vramkit.open_machine(simulate=str(path))
    try:
        start = time.perf_counter()
        snap = machine.snapshot()
        first = (time.perf_counter() - start) * 1000
        rows = sum(len(g.processes) for g in snap.gpus)
        batches: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(batches) < 5:
            start = time.perf_counter()
            for _ in range(5):
                machine.snapshot()
            batches.append((time.perf_counter() - start) * 1000 / 5)
        return statistics.median(batches), first, rows
    finally:
        machine.close()


def read_proc_directly(pids: list[int], seconds: float) -> float:
    """The floor: median ms to read every pid's /proc files vram reads, as bytes, nothing parsed."""
    def once() -> None:
        for pid in pids:
            base = f"/proc/{pid}"
            os.stat(base)
            for name in ("stat", "cmdline", "cgroup"):
                with open(f"{base}/{name}", "rb") as f:
                    f.read()

    once()
    batches: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(batches) < 5:
        start = time.perf_counter()
        once()
        batches.append((time.perf_counter() - start) * 1000)
    return statistics.median(batches)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50,200,1000,5000", help="process counts (default 50,200,1000,5000)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (default 8)")
    ap.add_argument("--seconds", type=float, default=1.0, help="time spent per measurement (default 1.0)")
    ap.add_argument("--no-real", action="store_true", help="synthetic processes only")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    print(f"bench_snapshot: {args.gpus} simulated GPUs; {environment()}")
    print(f"{'processes':>9} {'kind':<9} {'rows':>5} {'first':>9} {'per snapshot':>13} {'per process':>12}"
          f"  {'/proc floor':>11}  vs floor")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="vram-bench-") as tmp:
        for n in sizes:
            kinds = ["synthetic"] if args.no_real else ["synthetic", "real"]
            for kind in kinds:
                if kind == "real":
                    with Sleepers(n) as sleepers:
                        path = write_scenario(Path(tmp) / f"real{n}.json",
                                              scenario(sleepers.pids, real=True, gpus=args.gpus))
                        ms, first, rows = measure(path, args.seconds)
                        floor = read_proc_directly(sleepers.pids, args.seconds)
                else:
                    floor = None
                    path = write_scenario(Path(tmp) / f"synthetic{n}.json",
                                          scenario(list(range(100_000, 100_000 + n)), real=False, gpus=args.gpus))
                    ms, first, rows = measure(path, args.seconds)
                line = f"{n:>9} {kind:<9} {rows:>5} {first:7.2f}ms {ms:11.2f}ms {ms / n * 1000:9.1f}µs"
                if floor is not None:
                    line += f"  {floor / n * 1000:9.1f}µs  {ms / floor:6.2f}x"
                    worst = max(worst, ms / n * 1000)
                print(line)
    print("rows: (process, GPU) pairs listed; every 10th process is on two GPUs. first: the first "
          "snapshot of an open machine (caches handles and static facts). /proc floor: reading each "
          "real pid's stat, cmdline and cgroup and stat()ing its directory, nothing parsed.")
    if worst:
        print(f"target (at most {TARGET_US:.0f}µs per real process at every size): "
              f"{'MET' if worst <= TARGET_US else 'NOT MET'} (worst {worst:.1f}µs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
