"""Database bytes per GPU-day (raw samples) and per GPU-year (after downsampling) of `vram record`.

The machine: 8 simulated A100-80GB GPUs with 3 processes per GPU (24 processes, every 10th also
on a second GPU: 26 (process, GPU) pairs, as on a shared server where a few jobs and notebooks
share each GPU). The real `vram record` writes a real SQLite file, with its default retention
(raw 24 h, 1-minute rollups 30 days, 15-minute rollups 365 days), on the stepped scenario clock
(VRAM_SIM_CLOCK=stepped), so a simulated day takes seconds instead of a day.

What is measured:
1. A day raw at the default interval (5 s): 24 h recorded in full, 17,281 samples; nothing is
   old enough to be rolled up. Bytes per GPU-day = the file / GPUs.
2. The same at a 1 s interval (86,401 samples).
3. A year after downsampling, in one file, recorded oldest first with the clock running on
   between the phases (each phase is a `vram record` started where the last stopped, as after a
   restart; the processes are the same lives throughout):
   - days 0-335 at a 900 s interval: one raw sample per 15-minute bucket. Raw samples become
     1-minute rows and those 15-minute rows exactly as from 5 s samples: a rollup row is one per
     bucket per GPU and per (job, GPU), whatever the raw interval. (A 900 s sample also makes one
     1-minute row per 15 minutes where 5 s samples make fifteen; those are rolled up into the
     same 15-minute row and deleted before the year ends.)
   - days 335-364 at 60 s: one raw sample per minute, so the 1-minute tier that is still kept
     (30 days) has every row that 5 s sampling gives it.
   - the last day at 5 s: the raw tier as it really is.
   During the first two phases the recorder rolls up once a recorded day instead of every 300
   recorded seconds (`vram record` with the recorder's ROLLUP_EVERY set; see _machine.py): each
   rollup moves whole buckets, so when it runs changes which pass moves a row, not the rows the
   file ends with, and at a 900 s interval the shipped cadence means a rollup per sample, ~40 min
   for the year here. The last day runs the shipped cadence. The file's free pages are given back
   by the recorder's own `PRAGMA incremental_vacuum`; nothing is vacuumed by this script.
Bytes are the file on disk after a WAL checkpoint (TRUNCATE), so the -wal file is empty; the
tables' share comes from SQLite's dbstat. Target: <= 5 MB (10^6 bytes) raw per GPU-day,
<= 50 MB per GPU-year.

    .venv/bin/python benchmarks/bench_history_size.py [--gpus 8] [--per-gpu 3] [--no-year] [--no-1s]
    .venv/bin/python benchmarks/bench_history_size.py --check-cadence 40     # the method's premise
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import environment, record_stepped, scenario, write_scenario  # noqa: E402

from vramkit.history.store import Retention, Store  # noqa: E402

DAY = 86400.0
EPOCH = 1767225600.0  # 2026-01-01 00:00 UTC: bucket boundaries fall on whole minutes and quarters
MB = 10**6


def file_bytes(db: Path) -> tuple[int, dict[str, int], dict[str, int]]:
    """The file's size after a WAL checkpoint, bytes per table (indexes counted with their table),
    and rows per table and tier."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        index_of = {name: table for name, table in conn.execute(
            "SELECT name, tbl_name FROM sqlite_schema WHERE type = 'index'")}
        per_table: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            table = index_of.get(name, name)
            per_table[table] = per_table.get(table, 0) + size
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("samples", "gpu_raw", "proc_raw", "jobs")}
        for table in ("gpu_rollup", "proc_rollup"):
            for tier, n in conn.execute(f"SELECT tier, count(*) FROM {table} GROUP BY tier"):
                rows[f"{table} {tier}s"] = n
    finally:
        conn.close()
    wal = db.with_name(db.name + "-wal")
    return db.stat().st_size + (wal.stat().st_size if wal.exists() else 0), per_table, rows


def describe(total: int, per_table: dict[str, int], rows: dict[str, int]) -> str:
    big = sorted(per_table.items(), key=lambda kv: -kv[1])
    return ("    tables: " + ", ".join(f"{t} {b / MB:.2f} MB" for t, b in big if b >= 0.005 * total) +
            "\n    rows: " + ", ".join(f"{t} {n:,}" for t, n in rows.items() if n))


def raw_day(tmp: Path, machine: Path, interval: float, gpus: int) -> tuple[float, str, float]:
    db = tmp / f"day-{interval:g}s.db"
    took = record_stepped(db, machine, epoch=EPOCH, start=0, interval=interval, duration=DAY)
    total, per_table, rows = file_bytes(db)
    db.unlink()
    return total / gpus, describe(total, per_table, rows), took


def year(tmp: Path, machine: Path, gpus: int) -> tuple[float, str, float]:
    db = tmp / "year.db"
    took = 0.0
    start = 0.0
    for interval, days, cadence in ((900.0, 335, DAY), (60.0, 29, DAY), (5.0, 1, None)):
        took += record_stepped(db, machine, epoch=EPOCH, start=start, interval=interval, duration=days * DAY,
                               rollup_every=cadence)
        start += days * DAY
    total, per_table, rows = file_bytes(db)
    return total / gpus, describe(total, per_table, rows), took


def check_cadence(tmp: Path, machine: Path, days: int) -> bool:
    """The method's premise: recording `days` at 900 s with the shipped rollup cadence and with a
    rollup once a recorded day ends in the same rows (and nearly the same bytes)."""
    ends = []
    for cadence in (None, DAY):
        db = tmp / f"cadence-{cadence}.db"
        took = record_stepped(db, machine, epoch=EPOCH, start=0, interval=900, duration=days * DAY,
                              rollup_every=cadence)
        # Both end with the rollup the recorder would run at the last sample, so that the check
        # compares where the cadences lead, not where one of them last stopped.
        store = Store.open(db, write=True)
        try:
            store.roll_up(EPOCH + days * DAY, Retention())
        finally:
            store.close()
        total, _, rows = file_bytes(db)
        conn = sqlite3.connect(db)
        try:
            digest = conn.execute("SELECT count(*), total(seconds), total(memory * seconds), total(idle_seconds), "
                                  "total(t) FROM proc_rollup").fetchone()
        finally:
            conn.close()
        name = "shipped cadence (every 300 s)" if cadence is None else "once a recorded day"
        print(f"  {days} days at 900 s, rollups {name}: {total / MB:.2f} MB in {took:.0f} s; rows {rows}")
        ends.append((rows, digest))
    same = ends[0] == ends[1]
    print(f"  same rows and sums: {'yes' if same else 'NO'}")
    return same


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    ap.add_argument("--per-gpu", type=int, default=3, help="processes per GPU (3)")
    ap.add_argument("--no-year", action="store_true", help="skip the year (about 3 minutes)")
    ap.add_argument("--no-1s", action="store_true", help="skip the day at a 1 s interval (about 2 minutes)")
    ap.add_argument("--check-cadence", metavar="DAYS", type=int,
                    help="only check the method: DAYS at 900 s with both rollup cadences give the same rows")
    args = ap.parse_args(argv)

    processes = args.gpus * args.per_gpu
    data = scenario(list(range(100_000, 100_000 + processes)), real=False, gpus=args.gpus)
    pairs = sum(len(p["gpus"]) for p in data["processes"])
    print(f"bench_history_size: {args.gpus} simulated GPUs, {processes} processes ({pairs} (process, GPU) "
          f"pairs), default retention, stepped clock; {environment()}; SQLite {sqlite3.sqlite_version}")
    results = []
    with tempfile.TemporaryDirectory(prefix="vram-bench-size-") as tmp:
        tmp_path = Path(tmp)
        machine = write_scenario(tmp_path / "machine.json", data)
        if args.check_cadence:
            return 0 if check_cadence(tmp_path, machine, args.check_cadence) else 1
        began = time.perf_counter()
        per_gpu, detail, took = raw_day(tmp_path, machine, 5.0, args.gpus)
        print(f"\nraw, 5 s interval (default): {per_gpu / MB:.2f} MB per GPU-day (built in {took:.0f} s)\n{detail}")
        results.append(("raw per GPU-day at 5 s", per_gpu, 5 * MB))
        if not args.no_1s:
            per_gpu, detail, took = raw_day(tmp_path, machine, 1.0, args.gpus)
            print(f"\nraw, 1 s interval: {per_gpu / MB:.2f} MB per GPU-day (built in {took:.0f} s)\n{detail}")
            results.append(("raw per GPU-day at 1 s", per_gpu, None))
        if not args.no_year:
            per_gpu, detail, took = year(tmp_path, machine, args.gpus)
            print(f"\na year, downsampled (15-minute rows 335 days, 1-minute rows 29 days, raw 1 day at 5 s): "
                  f"{per_gpu / MB:.2f} MB per GPU-year (built in {took:.0f} s)\n{detail}")
            results.append(("per GPU-year after downsampling", per_gpu, 50 * MB))
        print(f"\n(all built in {time.perf_counter() - began:.0f} s)")

    print(f"\n{'measure':<34} {'MB':>8}  target")
    for name, value, target in results:
        verdict = "" if target is None else f"<= {target / MB:g} MB: {'MET' if value <= target else 'NOT MET'}"
        print(f"{name:<34} {value / MB:8.2f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
