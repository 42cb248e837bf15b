"""Hour sums (store schema 2: proc_hour, gpu_hour) change no number a report prints (issue 11:
`vram report --since 30d` in under a second). Reports read whole hours from the sums and the
rest row by row; here, over many random windows across the raw -> 1-minute -> 15-minute seams,
a clock that went back and the retention and size cuts, every sum equals a plain SQL sum over
the views proc_time and gpu_time (what reports summed before the hour sums), and a schema 1
database reads the same before and after its upgrade."""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from vramkit.collector import Collector
from vramkit.history import query
from vramkit.history.recorder import Recorder
from vramkit.history.store import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, Retention, Store
from vramkit.machine import Machine, open_machine

EPOCH = 1767225600.0  # 2026-01-01 00:00 UTC
FOREVER = Retention(raw=1e9, minute=1e9, quarter=1e9, max_bytes=1 << 40)
SEAMS = Retention(raw=3600, minute=2 * 3600, quarter=1e9, max_bytes=1 << 40)

# Everything changes on quarter hours and repeats every hour (a 15-minute rollup keeps the value
# of a quarter exactly, also memory x idle time and utilization, and so does a bucket that a
# clock gone back an hour fills twice); lives start and end anywhere.
SCENARIO = {
    "gpus": [
        {"memory_total": "80GiB", "utilization": {"timeline": [[0, 90], [900, 0], [2700, 55]],
                                                  "interpolate": "step", "repeat": "1h"}},
        {"memory_total": "80GiB", "utilization": 40},
        {"memory_total": "80GiB"},  # never used: GPU rows only
    ],
    "processes": [
        {"pid": 101, "user": "ann", "command": "python train.py",
         "gpus": {"0": {"timeline": [[0, "10GiB"], [1800, "30GiB"], [2700, "20GiB"]], "interpolate": "step",
                        "repeat": "1h"}, "1": "5GiB"},
         "sm_util": {"timeline": [[0, 80], [900, 0], [2700, 80]], "interpolate": "step", "repeat": "1h"}},
        {"pid": 102, "user": "ben", "command": "jupyter", "gpus": {"1": "12GiB"}, "sm_util": 0},
        {"pid": 103, "user": "cid", "command": "python eval.py", "gpus": {"0": "4GiB"},
         "start_at": "47m13s", "exit_at": "3h10m29s"},
        {"pid": 104, "user": "cid", "command": "python eval.py", "gpus": {"1": "7GiB"},
         "sm_util": {"timeline": [[0, 0], [1800, 30]], "interpolate": "step", "repeat": "1h"},
         "start_at": "2h20m", "exit_at": "5h43m"},
    ],
}


@pytest.fixture
def stepped(monkeypatch, tmp_path):
    """open(start) -> the simulated machine on a stepped clock at EPOCH + start."""
    for key in ("VRAM_SIMULATE", "VRAM_SIM_TIME", "VRAM_SIM_EPOCH", "VRAM_SIM_CLOCK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_CLOCK", "stepped")
    monkeypatch.setenv("VRAM_SIM_EPOCH", f"{EPOCH:.0f}")
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(SCENARIO))

    def open_at(start: float = 0.0) -> Machine:
        monkeypatch.setenv("VRAM_SIM_TIME", f"{start:g}")
        return open_machine(str(path))
    return open_at


# Memory the driver cannot give (MIG): ann's on GPU 1 is never known.
NO_MEMORY = "UPDATE proc_raw SET memory = NULL WHERE gpu = 1 AND job = (SELECT id FROM jobs WHERE pid = 101)"


def record(recorder: Recorder, collector: Collector, samples: int, interval: float, shift: float = 0.0,
           unknown: str = NO_MEMORY) -> None:
    """Record `samples` samples on the stepped clock (wall time shifted by `shift`), running the
    SQL `unknown` after each (values the driver did not give; before the recorder sums them)."""
    for _ in range(samples):
        snap = collector.sample()
        recorder.record(snap if not shift else dataclasses.replace(snap, time=snap.time + shift))
        recorder.store.conn.execute(unknown)
        collector.machine.backend.sleep(threading.Event(), interval)


# ---------------------------------------------------------------- the reference: sums over the views
def reference(store: Store, since: float, until: float) -> dict[str, object]:
    c, w = store.conn, (since, until)
    held = {(job, gpu): (s, mbs or 0.0, peak, idle, imbs or 0.0) for job, gpu, s, mbs, peak, idle, imbs in c.execute(
        "SELECT job, gpu, SUM(seconds), SUM(memory * seconds), MAX(memory_max), SUM(idle_seconds), "
        "SUM(memory * idle_seconds) FROM proc_time WHERE t >= ? AND t < ? GROUP BY job, gpu", w)}
    gpus = {f"GPU {gpu}": (occ, peak, util) for gpu, occ, peak, util in c.execute(
        "SELECT gpu, SUM(occupied_seconds), MAX(used_max), SUM(util * seconds) / "
        "NULLIF(SUM(CASE WHEN util IS NOT NULL THEN seconds END), 0) FROM gpu_time WHERE t >= ? AND t < ? "
        "GROUP BY gpu", w)}
    recorded = max((s for (s,) in c.execute("SELECT SUM(seconds) FROM gpu_time WHERE t >= ? AND t < ? GROUP BY gpu",
                                            w)), default=0.0)
    days: dict[str, list] = {}
    for q, job, s, mbs, peak, idle in c.execute(
            "SELECT CAST(t / 900 AS INTEGER) AS q, job, SUM(seconds), SUM(memory * seconds), MAX(memory_max), "
            "SUM(idle_seconds) FROM proc_time WHERE t >= ? AND t < ? GROUP BY q, job", w):
        d = days.setdefault(datetime.fromtimestamp(q * 900).strftime("%Y-%m-%d"), [0.0, 0.0, None, 0.0, set()])
        d[0] += s
        d[1] += mbs or 0.0
        d[2] = d[2] if peak is None else max(d[2] or 0, peak)
        d[3] += idle
        d[4].add(job)
    return {"held": held, "gpus": gpus, "recorded": recorded,
            "days": {k: (v[0], v[1], v[2], v[3], len(v[4])) for k, v in days.items()}}


def summed(store: Store, since: float, until: float) -> dict[str, object]:
    """The same, through query.py."""
    held = {(h.job, h.gpu): (h.seconds, h.memory_byte_seconds, h.peak_memory, h.idle_seconds,
                             h.idle_memory_byte_seconds) for h in query.held(store, since, until)}
    gpus = {u.key: (u.gpu_seconds, u.peak_memory, u.utilization) for u in query.usage(store, since, until, "gpu")}
    days = {u.key: (u.gpu_seconds, u.memory_byte_seconds, u.peak_memory, u.idle_seconds, u.lives)
            for u in query.usage(store, since, until, "day")}
    return {"held": held, "gpus": gpus, "recorded": query.coverage(store, since, until).recorded_seconds,
            "days": days}


def assert_equal(got: object, want: object, where: object) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (where, sorted(set(got) ^ set(want)))
        for key in want:
            assert_equal(got[key], want[key], (where, key))
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_equal(g, w, (where, i))
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-6), where
    else:
        assert got == want, where


def windows(store: Store, rng: random.Random, n: int) -> list[tuple[float, float]]:
    """Random windows over the recording and an hour around it: ragged, whole-hour, ending after
    the last sample (a report until now) and at a sample's own time."""
    first, last = (float(x) for x in store.conn.execute("SELECT min(t), max(t) FROM gpu_time").fetchone())
    lo, hi = first - 3600, last + 3600
    out = [(lo, hi), (first, last), (first + 3600, hi)]
    stamps = [t for (t,) in store.conn.execute("SELECT t FROM samples")]
    for _ in range(n):
        a, b = sorted(rng.uniform(lo, hi) for _ in range(2))
        kind = rng.randrange(4)
        if kind == 1:  # whole hours
            a, b = a // 3600 * 3600, -(-b // 3600) * 3600
        elif kind == 2:
            b = hi
        elif kind == 3 and stamps:
            b = rng.choice(stamps)
        out.append((a, b))
    return out


def check(store: Store, rng: random.Random, n: int = 40) -> None:
    for since, until in windows(store, rng, n):
        assert_equal(summed(store, since, until), reference(store, since, until), (since, until))


# ---------------------------------------------------------------- tests
def test_hour_sums_equal_the_rows_across_every_seam(stepped, tmp_path, monkeypatch):
    # Newfoundland, three and a half hours behind UTC: local midnight (03:30 UTC) cuts an hour.
    monkeypatch.setenv("TZ", "America/St_Johns")
    time.tzset()
    rng = random.Random(11)
    store = Store.open(tmp_path / "h.db", write=True)
    try:
        # 7 s: samples straddle minute and hour edges; rolled up every 300 s of recording, with
        # raw rows kept an hour and 1-minute rows two: all three tiers and the hour sums.
        recorder = Recorder(store, 7.0, retention=SEAMS)
        collector = Collector(stepped(), interval=7.0)
        record(recorder, collector, 6 * 3600 // 7, 7.0)
        tiers = dict(store.conn.execute("SELECT tier, count(*) FROM proc_rollup GROUP BY tier").fetchall())
        assert tiers[60] and tiers[900] and store.conn.execute("SELECT count(*) FROM proc_raw").fetchone()[0]
        summed_upto = int(store.meta("hour_sample") or 0)
        assert 0 < summed_upto < store.conn.execute("SELECT max(id) FROM samples").fetchone()[0] - 1
        check(store, rng)
        # The wall clock goes back an hour: samples land in hours already summed.
        record(recorder, collector, 400, 7.0, shift=-3600.0)
        check(store, rng)
        now = store.conn.execute("SELECT max(t) FROM samples").fetchone()[0]
        store.roll_up(now + 600, SEAMS)
        check(store, rng)
        # Retention cuts the 15-minute tier in the middle of an hour; then the size bound drops
        # the oldest rows.
        store.roll_up(now + 600, dataclasses.replace(SEAMS, quarter=4 * 3600 + 1234))
        cut = float(store.meta("hour_since") or 0)
        assert cut > EPOCH
        check(store, rng)
        assert store._drop_oldest()  # what the size bound does, one step: a tenth of the oldest tier
        assert float(store.meta("hour_since") or 0) > cut
        check(store, rng)
        # The sums of hours the tiers no longer hold in full are gone too (the file stays bounded).
        cut = float(store.meta("hour_since") or 0)
        assert store.conn.execute("SELECT count(*) FROM proc_hour WHERE t < ?", (cut,)).fetchone()[0] == 0
        assert store.conn.execute("SELECT count(*) FROM gpu_hour WHERE t < ?", (cut,)).fetchone()[0] == 0
        assert store.conn.execute("SELECT count(*) FROM proc_hour").fetchone()[0] > 0
    finally:
        store.close()
        monkeypatch.undo()
        time.tzset()


def test_hour_sums_keep_what_raw_rows_said(stepped, tmp_path):
    """Memory held idle (memory x idle time) and utilization where part of a bucket was unknown are
    what the raw rows say, also after the rows are rolled up (a rollup keeps their averages
    only): a report over past hours prints what it printed while they were raw."""
    scenario = dict(SCENARIO, processes=[
        {"pid": 201, "user": "dee", "command": "python loop.py",
         "gpus": {"0": {"timeline": [[0, "2GiB"], [20, "40GiB"]], "interpolate": "step", "repeat": "40s"}},
         "sm_util": {"timeline": [[0, 0], [20, 90]], "interpolate": "step", "repeat": "40s"}}])
    (tmp_path / "scenario.json").write_text(json.dumps(scenario))
    store = Store.open(tmp_path / "h.db", write=True)
    try:
        recorder = Recorder(store, 10.0, retention=FOREVER)
        # GPU 0's utilization is unknown in a third of the samples while it is 90 % (the first
        # quarter of each hour): its average over the known time is not that of the minutes.
        record(recorder, Collector(stepped(), interval=10.0), 2 * 360 + 2, 10.0,
               unknown="UPDATE gpu_raw SET util = NULL WHERE sample % 3 = 0 AND sample IN "
                       "(SELECT id FROM samples WHERE CAST(t AS INTEGER) % 3600 < 900)")
        since, until = EPOCH, EPOCH + 7200
        raw = summed(store, since, until)
        store.roll_up(EPOCH + 7220, Retention(raw=1, minute=1e9, quarter=1e9))
        assert store.conn.execute("SELECT count(*) FROM samples").fetchone()[0] <= 3
        assert_equal(summed(store, since, until), raw, "after rollup")
        # The rolled-up rows alone say otherwise: this test compares something.
        rolled = reference(store, since, until)
        job = next(iter(raw["held"]))
        assert rolled["held"][job][4] != pytest.approx(raw["held"][job][4], rel=1e-6)
        assert rolled["gpus"]["GPU 0"][2] != pytest.approx(raw["gpus"]["GPU 0"][2], rel=1e-6)
    finally:
        store.close()


def _downgrade(path: Path) -> None:
    """What a schema 1 recorder would have left: no hour sums (nor day sums, nor workloads)."""
    with sqlite3.connect(path) as c:
        c.executescript("DROP VIEW job_totals; DELETE FROM meta WHERE key = 'jobs_through'; "
                        "DROP TABLE local_days; DROP TABLE proc_local_day; ALTER TABLE jobs DROP COLUMN nvml_pid; "
                        "DROP TABLE hour_totals; DROP TABLE quarter_totals; "
                        "DROP TABLE workloads; DROP TABLE proc_day; DROP TABLE gpu_day; DROP TABLE proc_hour; "
                        "DROP TABLE gpu_hour; DELETE FROM meta WHERE key LIKE 'hour_%'; PRAGMA user_version = 1;")
    c.close()


def test_a_schema_1_database_reads_the_same_before_and_after_its_upgrade(stepped, tmp_path):
    path = tmp_path / "h.db"
    store = Store.open(path, write=True)
    recorder = Recorder(store, 7.0, retention=SEAMS)
    record(recorder, Collector(stepped(), interval=7.0), 4 * 3600 // 7, 7.0)
    store.close()
    _downgrade(path)
    rng = random.Random(2)
    old = Store.open(path)  # a reader reads schema 1 as it is (an older recorder may still write it)
    try:
        assert old.version() == 1 and not old.hour_sums
        spans = windows(old, rng, 25)
        before = {w: reference(old, *w) for w in spans}
        for w in spans:
            assert_equal(summed(old, *w), before[w], w)
    finally:
        old.close()
    upgraded = Store.open(path, write=True)  # the recorder upgrades it: sums from every tier
    try:
        assert upgraded.version() == SCHEMA_VERSION and upgraded.hour_sums and upgraded.day_sums
        assert upgraded.conn.execute("SELECT count(*) FROM proc_hour").fetchone()[0] > 0
        for w in spans:
            assert_equal(summed(upgraded, *w), before[w], w)
    finally:
        upgraded.close()


def test_the_migrations_from_nothing_and_from_1_give_one_schema(tmp_path):
    fresh = Store.open(tmp_path / "a.db", write=True)
    step = tmp_path / "b.db"
    with sqlite3.connect(step) as c:
        c.executescript(f"{MIGRATIONS[0]}; PRAGMA user_version = 1; PRAGMA application_id = {APPLICATION_ID};")
    c.close()
    upgraded = Store.open(step, write=True)
    try:
        schema = "SELECT type, name, sql FROM sqlite_schema ORDER BY name"
        assert fresh.conn.execute(schema).fetchall() == upgraded.conn.execute(schema).fetchall()
        assert fresh.meta("hour_sample") == upgraded.meta("hour_sample") == "0"
    finally:
        fresh.close()
        upgraded.close()
