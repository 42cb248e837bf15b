"""A history database written by someone hostile, or damaged (issue 26 item 6, the readers; the
recorder's part is test_history_malformed.py).

A real database (`vram record` on the demo scenario, 26 hours on the stepped clock every 15 minutes:
raw samples, 1-minute rollups, hour and day sums and the local days, ending now) is corrupted in
every way a writer of the file could: any type in any column (SQLite's affinities let TEXT, BLOB,
REAL and NULL in where INTEGER belongs, with the schema's NOT NULLs loosened), numbers out of range
(1e308, -2**63, far future and past times, negative spans, GPU indexes no machine has), garbage meta
values and schema versions, missing tables and columns, tables replaced by views, a truncated file
and random bytes in pages.
Every reader then runs on it: `vram report` (each --by, --json, --csv, --plot), `vram life`,
`vram kill --idle` (recorded idle), `vram doctor` (its idle holders) and the live view's and
serve's history series. Each must answer with real output or one line and exit 2: never an
internal error or a traceback.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import sqlite3
import time
import types
from pathlib import Path

import pytest
from helpers import clean_env, run_vram

from vramkit.errors import VramkitError
from vramkit.history.series import gpu_series
from vramkit.history.store import Store

HOURS = 26
# A sample every 15 minutes: every table and tier holds rows (the fixture checks it), each row a
# reader reads, at a third of the rows of 5-minute samples (the readers' time grows with the rows;
# the hour and day tiers hold as many rows either way).
INTERVAL = 900
# report-elsewhere: `report --by day` in a zone neither UTC nor the recorder's (hour_totals, the
# day sums' first and last hours, schema 6); report-cut: the same in a zone half an hour off UTC
# (the hours local midnight cuts: quarter_totals, schema 7, and the rows of the lives in them).
READERS = ("report", "life", "kill", "doctor", "series", "report-elsewhere", "report-cut")
ELSEWHERE = ("report", "report-elsewhere")
# The readers that read each table (kill --idle and doctor: recorded idle; series: vram top, serve).
READ_BY = {
    "meta": ("report", "series", "report-elsewhere"), "gpus": ("report",), "samples": READERS,
    "gpu_raw": ("report", "series"),
    "jobs": ("report", "life", "kill", "doctor"), "proc_raw": ("report", "life", "report-elsewhere"),
    "holding": ("kill", "doctor"), "gpu_rollup": ("report", "series"),
    "proc_rollup": ("report", "life", "report-elsewhere"), "proc_hour": ELSEWHERE, "gpu_hour": ("report",),
    "proc_day": (*ELSEWHERE, "report-cut"), "gpu_day": ("report",), "local_days": ("report",),
    "proc_local_day": ("report",), "hour_totals": ELSEWHERE, "quarter_totals": ("report-cut",),
}
# The recorder and the readers run in a zone whose days are not UTC days: `report --by day` reads
# the recorder's local days (schema 5) there; report-elsewhere runs in OTHER_ZONE.
ZONE = "Asia/Shanghai"
OTHER_ZONE = "Europe/Berlin"
CUT_ZONE = "Asia/Kolkata"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("malformed") / "base.db"
    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(int(time.time() - HOURS * 3600)), VRAM_SIM_TIME=None,
                    TZ=ZONE)
    done = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", str(INTERVAL), "--duration",
                    f"{HOURS}h", "--quiet", env=env, timeout=120)
    assert done.rc == 0, done.err
    with sqlite3.connect(db) as c:  # every tier the readers read is there
        for table in ("samples", "gpu_rollup", "proc_rollup", "proc_hour", "gpu_hour", "proc_day", "gpu_day",
                      "holding", "jobs", "local_days", "proc_local_day", "hour_totals", "quarter_totals"):
            assert c.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
        assert c.execute("SELECT count(*) FROM local_days WHERE t % 86400 = 57600").fetchone()[0] > 0  # China's
    c.close()
    return db


@pytest.fixture(scope="module")
def loose_base(base, tmp_path_factory) -> Path:
    """`base` with its tables' NOT NULLs loosened (a writer may make its own schema), made once."""
    db = tmp_path_factory.mktemp("loose") / "loose.db"
    shutil.copy(base, db)
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("PRAGMA writable_schema = ON")
    c.execute("UPDATE sqlite_schema SET sql = replace(sql, 'NOT NULL', '') WHERE type = 'table'")
    c.close()
    with sqlite3.connect(db) as c:
        assert "NOT NULL" not in "".join(sql for (sql,) in c.execute("SELECT sql FROM sqlite_schema WHERE sql "
                                                                      "IS NOT NULL AND type = 'table'"))
    c.close()
    return db


@pytest.fixture
def readers(cli, monkeypatch, tmp_path, request):
    """readers(db, case) -> the problems (case, command, what went wrong) of every reader on db."""
    import vramkit.killing.idle as kill_idle

    # kill --idle watches live when the history cannot be used: its clock runs an hour per look.
    ticks = itertools.count(0, 4000)
    monkeypatch.setattr(kill_idle, "time", types.SimpleNamespace(monotonic=lambda: float(next(ticks)),
                                                                 sleep=lambda s: None))
    monkeypatch.setenv("TZ", ZONE)
    time.tzset()
    request.addfinalizer(time.tzset)  # after monkeypatch's undo (finalizers run last in, first out)
    plot = str(tmp_path / "plot.svg")
    commands = [
        ["report", "--since", "30d"],
        ["report", "--since", "30d", "--by", "gpu", "--json"],
        ["report", "--since", "30d", "--by", "day", "--csv"],
        ["report", "--since", "30d", "--by", "day", "--json"],
        ["report", "--since", "3h", "--by", "life", "--plot", plot],
        ["life", "41234"],
        ["life", "38817", "--every-life", "--json"],
        ["kill", "--idle", "1h", "--simulate", "demo", "--dry-run", "--json", "--all-users"],
        ["doctor", "--simulate", "demo", "--json"],
        ["report-elsewhere", "--since", "30d", "--by", "day", "--json"],
        ["report-cut", "--since", "30d", "--by", "day", "--json"],
    ]

    def run(db: Path, case: str, only: tuple[str, ...] = READERS) -> list[str]:
        problems = []
        for argv in commands:
            if argv[0] not in only:
                continue
            if argv[0] in ("report-elsewhere", "report-cut"):
                monkeypatch.setenv("TZ", OTHER_ZONE if argv[0] == "report-elsewhere" else CUT_ZONE)
                time.tzset()
                try:
                    rc, out, err = cli("report", *argv[1:], "--db", str(db))
                finally:
                    monkeypatch.setenv("TZ", ZONE)
                    time.tzset()
            else:
                rc, out, err = cli(*argv, "--db", str(db))
            what = f"{case}: vram {' '.join(argv[:3])}"
            if "internal error" in err or "Traceback" in err:
                problems.append(f"{what}: {err.strip()[:300]}")
            elif rc == 2 and len(err.strip().splitlines()) != 1:
                problems.append(f"{what}: exit 2 without one line: {err!r}")
            elif rc not in (0, 1, 2) or (rc != 0 and argv[0] in ("report", "report-elsewhere", "report-cut", "doctor")
                                         and rc != 2):
                problems.append(f"{what}: exit {rc}: {err.strip()[:300]}")
        for span in (300, 86400, 7 * 86400) if "series" in only else ():  # vram top's, serve's history
            try:
                store = Store.open(db)
            except VramkitError:
                continue
            try:
                gpu_series(store, time.time(), span, 120)
            except VramkitError:
                pass
            except Exception as e:  # noqa: BLE001  what the test is for
                problems.append(f"{case}: gpu_series({span}): {type(e).__name__}: {e}")
            finally:
                store.close()
        return problems
    return run


def _copy(base: Path, tmp_path: Path) -> Path:
    db = tmp_path / "case.db"
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copy(base, db)
    return db


def _columns(db: Path) -> dict[str, list[str]]:
    with sqlite3.connect(db) as c:
        tables = [r[0] for r in c.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        return {t: [r[1] for r in c.execute(f"PRAGMA table_info({t})")] for t in tables}


TABLES = ("meta", "gpus", "samples", "gpu_raw", "jobs", "proc_raw", "holding", "gpu_rollup", "proc_rollup",
          "proc_hour", "gpu_hour", "proc_day", "gpu_day", "local_days", "proc_local_day", "hour_totals",
          "quarter_totals")
# What a hostile writer can store where a number belongs (NaN is stored as NULL by SQLite).
BAD = [None, "abc", b"\x00\xff", 1e308, float("-inf"), -9223372036854775808, -1, 1.5, 1e12]
BAD_ONE_ROW = ["abc", b"\x00", 1e308]  # in the newest row only (what max() and ORDER BY find first)
ONE_ROW_TABLES = ("meta", "samples", "jobs", "holding")


def test_the_pristine_database_reads(base, readers, tmp_path, cli):
    db = _copy(base, tmp_path)
    assert readers(db, "pristine") == []
    rc, out, err = cli("report", "--since", "30d", "--db", str(db))
    assert rc == 0 and "usage by user" in out and "bob" in out


@pytest.mark.parametrize("table", TABLES)
def test_any_value_in_any_column(loose_base, readers, tmp_path, table):
    """Every column of `table` set to each bad value in every row (and, where the newest row is
    the one read first, in that row only)."""
    problems = []
    columns = _columns(loose_base)[table]
    for column in columns:
        for rows, values in (("every row", BAD), ("one row", BAD_ONE_ROW if table in ONE_ROW_TABLES else [])):
            where = "" if rows == "every row" else f" WHERE rowid = (SELECT max(rowid) FROM {table})" \
                if table in ("samples", "jobs", "meta", "gpus") else \
                f" WHERE {columns[0]} = (SELECT max({columns[0]}) FROM {table})"
            for value in values:
                db = _copy(loose_base, tmp_path)
                c = sqlite3.connect(db, isolation_level=None)
                c.execute("PRAGMA synchronous = OFF")  # a scratch copy: no fsync per case
                try:
                    c.execute(f"UPDATE OR IGNORE {table} SET {column} = ?{where}", (value,))
                except sqlite3.IntegrityError:  # an INTEGER PRIMARY KEY (a rowid) holds integers only
                    continue
                finally:
                    c.close()
                problems += readers(db, f"{table}.{column} = {value!r} ({rows})", READ_BY[table])
    assert problems == [], "\n".join(problems[:20]) + f"\n... {len(problems)} in all"


def test_meta_values_and_schema_garbage(base, readers, tmp_path):
    problems = []
    for key in ("hour_sample", "hour_since", "hour_t_last"):
        for value in ["abc", "", "nan", "inf", "-inf", "1e999", "9223372036854775808", "-5", "1e300", "0x10"]:
            db = _copy(base, tmp_path)
            with sqlite3.connect(db) as c:
                c.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key))
            problems += readers(db, f"meta {key} = {value!r}")
        db = _copy(base, tmp_path)
        with sqlite3.connect(db) as c:
            c.execute("DELETE FROM meta WHERE key = ?", (key,))
        problems += readers(db, f"meta {key} missing")
    for pragma, values in (("user_version", (-1, 0, 1, 3, 2**31 - 1)), ("application_id", (0, -1))):
        for value in values:
            db = _copy(base, tmp_path)
            c = sqlite3.connect(db)
            c.execute(f"PRAGMA {pragma} = {value}")
            c.close()
            problems += readers(db, f"{pragma} = {value}")
    assert problems == [], "\n".join(problems[:20])


def test_missing_tables_columns_and_tables_that_are_views(base, readers, tmp_path):
    problems = []
    with sqlite3.connect(base) as c:
        objects = list(c.execute("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' "
                                 "AND type IN ('table', 'view')"))
    for kind, name in objects:
        db = _copy(base, tmp_path)
        with sqlite3.connect(db) as c:
            c.execute(f"DROP {kind.upper()} {name}")
        problems += readers(db, f"no {kind} {name}")
    for table, columns in _columns(base).items():
        db = _copy(base, tmp_path)
        with sqlite3.connect(db) as c:
            c.execute(f"DELETE FROM {table}")
        problems += readers(db, f"{table} empty")
        db = _copy(base, tmp_path)
        with sqlite3.connect(db) as c:  # the same names, every value text
            c.execute(f"ALTER TABLE {table} RENAME TO old_{table}")
            c.execute(f"CREATE VIEW {table} AS SELECT " + ", ".join(f"'x' AS {col}" for col in columns))
        problems += readers(db, f"{table} a view of text")
        for column in columns:
            db = _copy(base, tmp_path)
            try:
                with sqlite3.connect(db) as c:
                    c.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
            except sqlite3.Error:  # a key column: SQLite will not drop it
                continue
            problems += readers(db, f"{table} without {column}")
    assert problems == [], "\n".join(problems[:20])


def test_holding_and_jobs_that_do_not_fit_together(base, readers, tmp_path):
    problems = []
    for case, sql in [
        ("holding of a job that is not there", "UPDATE OR IGNORE holding SET job = 999999"),
        ("a job's first seen after its last", "UPDATE jobs SET first_seen = last_seen + 86400"),
        ("GPU indexes no machine has", "UPDATE proc_raw SET gpu = gpu + 100000"),
        ("memory totals 0", "UPDATE gpus SET memory_total = 0"),
        ("negative spans", "UPDATE samples SET span = -span"),
        ("samples in the far future", "UPDATE samples SET t = t + 1e11 WHERE id % 2 = 0"),
        ("idle since before 1970", "UPDATE holding SET idle_since = -1e9"),
        ("a job's pid used twice", "UPDATE jobs SET pid = 41234"),
        ("every life outside this PID namespace", "UPDATE jobs SET pid = 0, nvml_pid = pid"),
        ("lives outside without a host pid", "UPDATE jobs SET pid = 0"),
        ("local days overlapping, backwards and of no hours",
         "INSERT OR IGNORE INTO local_days SELECT t + 3600, hi - 7200 FROM local_days; "
         "INSERT OR IGNORE INTO local_days SELECT t + 7200, t FROM local_days; "
         "INSERT OR IGNORE INTO local_days SELECT t - 1, t - 1 FROM local_days"),
    ]:
        db = _copy(base, tmp_path)
        with sqlite3.connect(db) as c:
            c.executescript(sql)
        c.close()
        problems += readers(db, case)
    assert problems == [], "\n".join(problems[:20])


def test_a_truncated_or_damaged_file(base, readers, tmp_path):
    problems = []
    size = os.path.getsize(base)
    for cut in (100, 4096, size // 2, size - 4096, size - 1):
        for fixed in (False, True):  # the header's page count as it was, or made to match
            db = _copy(base, tmp_path)
            with open(db, "r+b") as f:
                f.truncate(cut)
                if fixed and cut >= 100:
                    f.seek(28)
                    f.write(max(1, cut // 4096).to_bytes(4, "big"))
            problems += readers(db, f"cut at {cut}{' (header fixed)' if fixed else ''}")
    rnd = random.Random(26)
    for seed in range(40):
        db = _copy(base, tmp_path)
        data = bytearray(db.read_bytes())
        for _ in range(rnd.randint(1, 4)):
            offset = rnd.randrange(1, len(data) // 4096) * 4096 + rnd.randrange(0, 4096 - 64)
            n = rnd.choice([1, 8, 64])
            data[offset:offset + n] = bytes(rnd.randrange(256) for _ in range(n))
        db.write_bytes(bytes(data))
        problems += readers(db, f"random bytes (seed {seed})")
    assert problems == [], "\n".join(problems[:20])
