"""Whole-process wall time of `vram report --since 30d` over 30 days of 8 GPUs and 50 processes.

The database is what the recorder leaves after 30 days at its defaults: raw samples at 5 s for
the last 24 h, 1-minute rollups before. It is built by the real `vram record` on the stepped
scenario clock (VRAM_SIM_CLOCK=stepped), oldest first, in two phases (the second started where
the first stopped, as after a restart, continuing the same process lives):
- days 0-29 at a 60 s interval: one raw sample per minute, which the recorder rolls up into
  exactly the 1-minute rows 5 s samples give (one per minute per GPU and per (job, GPU)). In this
  phase it rolls up once per recorded day instead of every 300 recorded seconds (the recorder's
  ROLLUP_EVERY; see _machine.py): a rollup moves whole minutes, so that changes when rows move,
  not the rows; with the shipped cadence the build takes about 15 minutes here.
- the last day at 5 s with the shipped cadence: 17,281 raw samples.
The machine: 8 simulated A100-80GB GPUs, 50 synthetic processes of 7 users (every 10th also on
a second GPU: 55 (process, GPU) pairs), the same lives all month. The data ends when the build
ends, so `--since 30d` covers all of it but the minutes the build took.

Each program's stdout is a pipe; one warm-up run each, then --runs rounds, the order rotating.
Printed: the median and range of `vram report --since 30d` (the target: under 1 s) and of
`--by gpu`, `--by job` and `--by day`; as the floor, the `sqlite3` command-line shell summing
the same rows once (per job over the view proc_time, then per user: the heart of the default
report, which also reads coverage and the idle holders); and, in process, how long each query
of the report takes.

    .venv/bin/python benchmarks/bench_report.py [--runs 5] [--days 30] [--gpus 8] [--processes 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import (  # noqa: E402
    BIN,
    environment,
    median_ms,
    record_stepped,
    scenario,
    wall_seconds,
    write_scenario,
)

DAY = 86400.0


def floor_sql(since: float) -> str:
    """GPU-seconds, memory byte-seconds, peak and idle seconds per user since `since`."""
    return ("WITH per_job AS (SELECT job, SUM(seconds) AS gs, SUM(memory * seconds) AS mbs, "
            "MAX(memory_max) AS peak, SUM(idle_seconds) AS idle FROM proc_time "
            f"WHERE t >= {since!r} GROUP BY job) "
            "SELECT j.user, SUM(p.gs), SUM(p.mbs), MAX(p.peak), SUM(p.idle), COUNT(*) "
            "FROM per_job p JOIN jobs j ON j.id = p.job GROUP BY j.user;")


def in_process(db: Path, since: float, until: float) -> list[tuple[str, float]]:
    """Milliseconds of each step of the default report, through the library."""
    from vramkit.history import query
    from vramkit.history.store import Store

    steps: list[tuple[str, float]] = []
    began = time.perf_counter()
    store = Store.open(db)
    steps.append(("open", time.perf_counter() - began))
    try:
        for name, call in (("usage by user", lambda: query.usage(store, since, until, "user")),
                           ("idle_holders", lambda: query.idle_holders(store, since, until, limit=10)),
                           ("coverage", lambda: query.coverage(store, since, until))):
            began = time.perf_counter()
            call()
            steps.append((name, time.perf_counter() - began))
    finally:
        store.close()
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each command (5)")
    ap.add_argument("--days", type=int, default=30, help="days of history (30; the last one raw)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    ap.add_argument("--processes", type=int, default=50, help="processes holding memory (50)")
    args = ap.parse_args(argv)
    if args.days < 2:
        raise SystemExit("bench_report: --days must be at least 2")

    data = scenario(list(range(100_000, 100_000 + args.processes)), real=False, gpus=args.gpus)
    with tempfile.TemporaryDirectory(prefix="vram-bench-report-") as tmp:
        tmp_path = Path(tmp)
        machine = write_scenario(tmp_path / "machine.json", data)
        db = tmp_path / "history.db"
        epoch = (time.time() - args.days * DAY) // 60 * 60
        print(f"bench_report: {args.gpus} simulated GPUs, {args.processes} processes, {args.days} days "
              f"(raw at 5 s for the last day, 1-minute rows before); {environment()}; "
              f"SQLite {sqlite3.sqlite_version}")
        took = record_stepped(db, machine, epoch=epoch, start=0, interval=60, duration=(args.days - 1) * DAY,
                              rollup_every=DAY)
        took += record_stepped(db, machine, epoch=epoch, start=(args.days - 1) * DAY, interval=5, duration=DAY)
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = conn.execute("SELECT (SELECT count(*) FROM proc_raw), (SELECT count(*) FROM proc_rollup), "
                            "(SELECT count(*) FROM gpu_raw), (SELECT count(*) FROM gpu_rollup)").fetchone()
        conn.close()
        print(f"built in {took:.0f} s: {db.stat().st_size / 2**20:.0f} MiB; process rows {rows[0]:,} raw + "
              f"{rows[1]:,} 1-minute, GPU rows {rows[2]:,} raw + {rows[3]:,} 1-minute")

        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VRAM_SIMULATE", "VRAM_DB",
                                                                 "PYTHONDONTWRITEBYTECODE")}
        vram = [str(BIN / "vram")] if (BIN / "vram").exists() else [sys.executable, "-m", "vramkit"]
        base = [*vram, "report", "--db", str(db), "--since", f"{args.days}d"]
        commands = {
            f"vram report --since {args.days}d": base,
            "  --by gpu": [*base, "--by", "gpu"],
            "  --by job": [*base, "--by", "job"],
            "  --by day": [*base, "--by", "day"],
        }
        sqlite_cli = shutil.which("sqlite3")
        since = time.time() - args.days * DAY
        if sqlite_cli:
            commands["sqlite3 one-liner (floor)"] = [sqlite_cli, "-readonly", str(db), floor_sql(since)]
        for cmd in commands.values():  # warm-up: page cache, .pyc files
            wall_seconds(cmd, env)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for r in range(args.runs):
            for name in names[r % len(names):] + names[:r % len(names)]:
                samples[name].append(wall_seconds(commands[name], env))
        steps = in_process(db, time.time() - args.days * DAY, time.time())

    medians = {name: median_ms(s) for name, s in samples.items()}
    floor = "sqlite3 one-liner (floor)"
    print(f"\n{'command':<28} {'median':>9} {'min':>9} {'max':>9}" + ("  vs floor" if floor in medians else ""))
    for name, s in samples.items():
        ratio = f"  {medians[name] / medians[floor]:6.2f}x" if floor in medians else ""
        print(f"{name:<28} {medians[name]:7.1f}ms {min(s) * 1000:7.1f}ms {max(s) * 1000:7.1f}ms{ratio}")
    if not sqlite_cli:
        print("(no sqlite3 command-line shell here: no floor)")
    print("\nin process (library, one run): " + ", ".join(f"{n} {t * 1000:.1f}ms" for n, t in steps) +
          f"; sum {sum(t for _, t in steps) * 1000:.1f}ms")
    headline = medians[f"vram report --since {args.days}d"]
    print(f"target (vram report --since {args.days}d under 1 s): {'MET' if headline < 1000 else 'NOT MET'} "
          f"({headline:.0f} ms, median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
