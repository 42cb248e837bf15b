"""`vram report --by day` sums each local day in SQL (issue 36: a year had come back to Python as
1.75 M rows of an hour and a job). Its days are those a plain computation gives: every row of
every tier (raw, 1-minute, 15-minute) in the window, counted in the local day of its quarter hour
(datetime.fromtimestamp), in UTC, in zones a half hour off UTC, across a daylight-saving change
(one at a whole hour in UTC, one at half past, one of 30 minutes), with partial days at both edges
of the window."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from helpers import clean_env, run_vram

from vramkit.collector import Collector
from vramkit.history import query
from vramkit.history.recorder import Recorder
from vramkit.history.store import SCHEMA_VERSION, Retention, Store
from vramkit.machine import open_machine

EPOCH = 1772841600.0  # 2026-03-07 00:00 UTC; New York and St John's move their clocks on 2026-03-08
DAYS = 2.5
INTERVAL = 300.0
# Raw rows the last 6 hours, 1-minute rows the day before, 15-minute rows before that: the window
# reads every tier and the hour sums.
RETENTION = Retention(raw=6 * 3600, minute=24 * 3600, quarter=1e9, max_bytes=1 << 40)
ZONES = [
    "UTC0",
    "Asia/Kolkata",  # +5:30: local midnight cuts an hour in two
    "America/New_York",  # -5 -> -4 on 2026-03-08 07:00 UTC
    "America/St_Johns",  # -3:30 -> -2:30 on 2026-03-08 05:30 UTC: a change inside an hour
    "XST-10:30XDT-11,M3.2.0,M11.1.0",  # +10:30 -> +11 (a 30-minute change) on 2026-03-07 15:30 UTC
    "Asia/Shanghai",  # +8 all year: most of vram's users
]
# Europe/Berlin moves its clocks on 2026-03-29 01:00 UTC (+1 -> +2): a history of its own around it.
BERLIN_EPOCH = 1774656000.0  # 2026-03-28 00:00 UTC

SCENARIO = {
    "gpus": [{"memory_total": "80GiB", "utilization": 50}, {"memory_total": "80GiB"}],
    "processes": [
        {"pid": 301, "user": "ann", "command": "python train.py",
         "gpus": {"0": {"timeline": [[0, "10GiB"], [1800, "30GiB"], [2700, "20GiB"]], "interpolate": "step",
                        "repeat": "1h"}, "1": "5GiB"},
         "sm_util": {"timeline": [[0, 80], [900, 0]], "interpolate": "step", "repeat": "1h"}},
        {"pid": 302, "user": "ben", "command": "jupyter", "gpus": {"1": "12GiB"}, "sm_util": 0,
         "start_at": "9h7m", "exit_at": "41h53m"},
        {"pid": 303, "user": "cid", "command": "python eval.py",
         "gpus": {"0": {"timeline": [[0, "4GiB"], [5400, "9GiB"]], "interpolate": "step", "repeat": "3h"}},
         "start_at": "22h40m", "exit_at": "2d5h"},
    ],
}


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """Two and a half days recorded every 5 minutes on the stepped clock, rolled up as it went."""
    return record(tmp_path_factory.mktemp("days"), EPOCH)


@pytest.fixture(scope="module")
def berlin_history(tmp_path_factory) -> Path:
    """The same two and a half days from BERLIN_EPOCH on."""
    return record(tmp_path_factory.mktemp("berlin"), BERLIN_EPOCH)


def record(tmp: Path, epoch: float, zones: tuple[str, ...] = (), hours: tuple[float, ...] = (),
           scenario_json: dict | None = None, days: float = DAYS) -> Path:
    """The recording (of SCENARIO, or `scenario_json`, for `days`); with `zones`, the recorder runs
    in each zone in turn (TZ), an equal part of the time each (or `hours` each), restarted between
    them (its local days are its zone's). It says nothing (a write or a rollup that failed would be
    said)."""
    scenario = tmp / "scenario.json"
    scenario.write_text(json.dumps(scenario_json or SCENARIO))
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("VRAM_SIMULATE", raising=False)
        mp.setenv("VRAM_SIM_CLOCK", "stepped")
        mp.setenv("VRAM_SIM_EPOCH", f"{epoch:.0f}")
        mp.setenv("VRAM_SIM_TIME", "0")
        machine = open_machine(str(scenario))
    db = tmp / "history.db"
    collector = Collector(machine, interval=INTERVAL)
    samples = int(days * 86400 / INTERVAL) + 1
    parts = zones or (None,)
    counts = ([round(h * 3600 / INTERVAL) for h in hours] if hours else
              [samples * (i + 1) // len(parts) - samples * i // len(parts) for i in range(len(parts))])
    said: list[str] = []
    for zone, count in zip(parts, counts):
        with pytest.MonkeyPatch.context() as mp:
            if zone is not None:
                mp.setenv("TZ", zone)
                time.tzset()
            try:
                recorder = Recorder(Store.open(db, write=True), INTERVAL, retention=RETENTION, say=said.append)
                for _ in range(count):
                    recorder.record(collector.sample())
                    machine.backend.sleep(threading.Event(), INTERVAL)
                recorder.close(machine.backend.monotonic())
            finally:
                mp.undo()
                time.tzset()
    assert said == []
    tiers = dict(Store.open(db).conn.execute("SELECT tier, count(*) FROM proc_rollup GROUP BY tier").fetchall())
    assert tiers.get(60) and tiers.get(900)
    return db


def reference(db: Path, since: float, until: float) -> dict[str, tuple]:
    """Each row of the view proc_time (every tier) in [since, until), in the local day of its
    quarter hour, summed in Python."""
    days: dict[str, list] = {}
    store = Store.open(db)
    try:
        rows = store.conn.execute("SELECT t, job, seconds, memory * seconds, memory_max, idle_seconds "
                                  "FROM proc_time WHERE t >= ? AND t < ?", (since, until)).fetchall()
    finally:
        store.close()
    for t, job, seconds, mbs, peak, idle in rows:
        day = datetime.fromtimestamp(int(t // 900) * 900).strftime("%Y-%m-%d")
        d = days.setdefault(day, [0.0, 0.0, None, 0.0, set()])
        d[0] += seconds
        d[1] += mbs or 0.0
        d[2] = d[2] if peak is None else max(d[2] or 0, peak)
        d[3] += idle
        d[4].add(job)
    return {day: (s, mbs, peak, idle, len(jobs)) for day, (s, mbs, peak, idle, jobs) in days.items()}


def assert_same(got: dict[str, tuple], want: dict[str, tuple], where: object) -> None:
    assert list(got) == sorted(want), where
    for day, (s, mbs, peak, idle, jobs) in want.items():
        gs, gmbs, gpeak, gidle, gjobs = got[day]
        assert (gpeak, gjobs) == (peak, jobs), (where, day)
        assert gs == pytest.approx(s, rel=1e-9) and gidle == pytest.approx(idle, rel=1e-9, abs=1e-6), (where, day)
        assert gmbs == pytest.approx(mbs, rel=1e-9), (where, day)


def windows(epoch: float = EPOCH) -> list[tuple[float, float]]:
    end = epoch + DAYS * 86400
    return [
        (epoch - 86400, end + 86400),  # all of it
        (epoch + 13 * 3600 + 37 * 60 + 11, end - 3 * 3600 - 49 * 60 + 0.5),  # partial days at both edges
        (epoch + 86400, epoch + 2 * 86400),  # one UTC day: two local days elsewhere
        (epoch + 4.5 * 3600, epoch + 30 * 3600 + 7),  # across the changes of the first day
        (epoch + 29 * 3600 + 3, end),  # the raw tier, its hour sums and the last rows
    ]


@pytest.mark.parametrize("zone", ZONES)
def test_days_are_summed_as_rows_of_every_tier_fall_into_local_days(history, zone, monkeypatch):
    assert_days_and_held(history, zone, windows(), monkeypatch)


@pytest.mark.parametrize("zone", ["Europe/Berlin", "UTC0"])
def test_days_across_berlins_clock_change(berlin_history, zone, monkeypatch):
    assert_days_and_held(berlin_history, zone, windows(BERLIN_EPOCH), monkeypatch)


def assert_days_and_held(history: Path, zone: str, spans: list[tuple[float, float]], monkeypatch) -> None:
    """usage(by="day") is reference()'s days; held_and_days()'s sums per job and GPU are held()'s."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        store = Store.open(history)
        try:
            for since, until in spans:
                got = {u.key: (u.gpu_seconds, u.memory_byte_seconds, u.peak_memory, u.idle_seconds, u.lives)
                       for u in query.usage(store, since, until, "day")}
                assert_same(got, reference(history, since, until), (zone, since, until))
                # The sums per job and GPU read in the same pass (the report's idle holders) are held()'s.
                both = {(h.job, h.gpu): h for h in query.held_and_days(store, since, until)[0]}
                alone = {(h.job, h.gpu): h for h in query.held(store, since, until)}
                assert set(both) == set(alone), (zone, since, until)
                for key, h in alone.items():
                    assert (both[key].peak_memory, both[key].seconds) == (h.peak_memory, pytest.approx(h.seconds))
                    assert both[key].idle_memory_byte_seconds == pytest.approx(h.idle_memory_byte_seconds, rel=1e-9)
                    assert both[key].memory_byte_seconds == pytest.approx(h.memory_byte_seconds, rel=1e-9)
        finally:
            store.close()
    finally:
        monkeypatch.undo()
        time.tzset()



def as_schema_5(db: Path, tmp: Path) -> Path:
    """A copy of `db` as a schema 5 recorder left it: no hour totals, no first and last hours."""
    old = tmp / f"schema5-{db.parent.name}.db"
    if not old.exists():
        shutil.copy(db, old)
        with sqlite3.connect(old) as c:
            c.executescript("DROP TABLE quarter_totals; DROP TABLE hour_totals; DROP VIEW job_totals; "
                            "DELETE FROM meta WHERE key = 'jobs_through'; ALTER TABLE proc_day DROP COLUMN first_hour; "
                            "ALTER TABLE proc_day DROP COLUMN last_hour; PRAGMA user_version = 5;")
        c.close()
    return old


def assert_totals_are_their_hours(db: Path) -> None:
    """hour_totals holds each hour's sums over every pair, and each UTC day's row of a pair its
    first and last hour there (schema 6), as the hour sums say."""
    with sqlite3.connect(db) as c:
        totals = c.execute("SELECT * FROM hour_totals ORDER BY t").fetchall()
        assert totals and totals == pytest.approx(c.execute(
            "SELECT t, SUM(seconds), SUM(memory_byte_seconds), MAX(memory_max), SUM(idle_seconds) FROM proc_hour "
            "GROUP BY t ORDER BY t").fetchall())
        ends = c.execute("SELECT t, job, gpu, first_hour, last_hour FROM proc_day ORDER BY t, job, gpu").fetchall()
        assert ends and ends == c.execute(
            "SELECT t / 86400 * 86400 AS d, job, gpu, MIN(t), MAX(t) FROM proc_hour "
            "GROUP BY d, job, gpu "
            "HAVING d >= coalesce((SELECT CAST(value AS REAL) FROM meta WHERE key = 'hour_since'), 0) "
            "ORDER BY d, job, gpu").fetchall()
    c.close()


def parts_per_call(monkeypatch, name: str) -> list[int]:
    """Spy on query.<name>(store, parts, days), which adds the days' parts: how many each call got."""
    seen: list[int] = []
    real = getattr(query, name)

    def spy(store, parts, days, *rest):
        seen.append(len(parts))
        return real(store, parts, days, *rest)

    monkeypatch.setattr(query, name, spy)
    return seen


@pytest.mark.parametrize("zone", ["Asia/Kathmandu", "Asia/Kolkata", "Europe/Berlin", "America/New_York"])
def test_other_zones_days_from_hour_totals_and_the_days_first_and_last_hours(history, berlin_history, zone,
                                                                            monkeypatch):
    """In a zone that is neither UTC nor the recorder's (schema 6), each local day's sums and peak
    are its hours' totals (a row an hour), its lives the UTC days' rows whose first hour is before
    the part of the day it holds ends, or whose last is in it (+5:45, +5:30 where local midnight
    cuts an hour, Berlin across its clock change, New York behind UTC): still the rows' days."""
    db, epoch = (berlin_history, BERLIN_EPOCH) if zone == "Europe/Berlin" else (history, EPOCH)
    assert_totals_are_their_hours(db)
    totals = parts_per_call(monkeypatch, "_add_totals")
    monkeypatch.setattr(query, "_derive", None)  # not the schema 5 way
    assert_days_and_held(db, zone, windows(epoch), monkeypatch)
    assert len(totals) == 2 * len(windows(epoch))  # usage() and held_and_days() each window


@pytest.mark.parametrize("zone", ["Asia/Kathmandu", "Asia/Kolkata", "Europe/Berlin", "America/New_York"])
def test_other_zones_days_are_stored_days_less_their_other_hours(history, berlin_history, zone, monkeypatch,
                                                                 tmp_path):
    """Read from a schema 5 file (its recorder not restarted yet), each whole UTC day's longest part
    is its day sums less its other hours (a year read 1.9 M hour sums before): the days are still
    the rows' (+5:45, +5:30 where local midnight cuts an hour, Berlin across its clock change)."""
    db, epoch = (berlin_history, BERLIN_EPOCH) if zone == "Europe/Berlin" else (history, EPOCH)
    db = as_schema_5(db, tmp_path)
    derived = parts_per_call(monkeypatch, "_add_derived")
    assert_days_and_held(db, zone, windows(epoch), monkeypatch)
    assert max(derived) == 2  # the two whole UTC days of the widest window


# From 2026-01-05 00:00 UTC (Berlin +1: its days begin at 23:00 UTC): ann's peak is in the last hour
# of a UTC day only (the part of it that is the next Berlin day's), ben holds less all day; from
# day 3 on nothing runs but cid, from 23:00 UTC (a UTC day whose rows are all in its last hour).
WINTER_EPOCH = 1767571200.0
EDGES = {
    "gpus": [{"memory_total": "80GiB", "utilization": 50}, {"memory_total": "80GiB"}],
    "processes": [
        {"pid": 401, "user": "ann", "command": "python train.py",
         "gpus": {"0": {"timeline": [[0, "10GiB"], [47 * 3600, "30GiB"], [48 * 3600, "10GiB"]],
                        "interpolate": "step"}}, "sm_util": 0, "exit_at": "3d"},
        {"pid": 402, "user": "ben", "command": "jupyter", "gpus": {"1": "20GiB"}, "sm_util": 50, "exit_at": "3d"},
        {"pid": 403, "user": "cid", "command": "python eval.py", "gpus": {"0": "4GiB"},
         "start_at": "3d23h", "exit_at": "4d2h"},
    ],
}


@pytest.fixture(scope="module")
def edges_history(tmp_path_factory) -> Path:
    """EDGES, four and a half days from WINTER_EPOCH on."""
    return record(tmp_path_factory.mktemp("edges"), WINTER_EPOCH, scenario_json=EDGES, days=4.5)


@pytest.mark.parametrize("schema", [5, 6])
@pytest.mark.parametrize("zone", ["Europe/Berlin", "Asia/Kathmandu"])
def test_a_days_peak_or_rows_only_in_its_other_parts(edges_history, zone, schema, monkeypatch, tmp_path):
    """A part's peak where its stored day's is only in the other parts (schema 5: the pair that
    holds it is not the part's: its own is read), and a UTC day whose rows are all in its other
    part: the days are still the rows'."""
    db = edges_history if schema == 6 else as_schema_5(edges_history, tmp_path)
    calls: list[str] = []
    hours_max = query._hours_max

    def spy(store, d, job=None, gpu=None):
        calls.append("pair" if job is not None else "part")
        return hours_max(store, d, job, gpu)

    monkeypatch.setattr(query, "_hours_max", spy)
    spans = [(WINTER_EPOCH - 86400, WINTER_EPOCH + 6 * 86400), (WINTER_EPOCH + 3600, WINTER_EPOCH + 4 * 86400 + 7)]
    assert_days_and_held(db, zone, spans, monkeypatch)
    if zone == "Europe/Berlin" and schema == 5:
        assert "part" in calls

@pytest.mark.parametrize("zone", ["America/St_Johns", "XST-10:30XDT-11,M3.2.0,M11.1.0", "Asia/Shanghai",
                                  "Europe/Berlin"])
def test_vram_report_by_day_prints_the_same_days(history, berlin_history, zone, monkeypatch):
    if zone == "Europe/Berlin":  # across its clock change
        history = berlin_history
    since, until = windows(BERLIN_EPOCH if zone == "Europe/Berlin" else EPOCH)[1]
    result = run_vram("report", "--db", str(history), "--since", f"@{since!r}", "--until", f"@{until!r}",
                      "--by", "day", "--json", env=clean_env(TZ=zone))
    rows = result.json()["rows"]
    got = {r["day"]: (r["gpu_seconds"], r["memory_byte_seconds"], r["peak_memory"], r["idle_seconds"], r["jobs"])
           for r in rows}
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        want = reference(history, since, until)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert len(want) >= 2  # a partial day at each edge
    assert_same(got, want, zone)


# ---------------------------------------------------------------- the recorder's local days (schema 5)
@pytest.fixture(scope="module")
def recorded_in(tmp_path_factory) -> dict[str, Path]:
    """The history recorded by a recorder in each zone: Berlin across its clock change, India
    (half an hour off UTC), China; and one whose recorder moved from Berlin to China."""
    return {"Europe/Berlin": record(tmp_path_factory.mktemp("in-berlin"), BERLIN_EPOCH, ("Europe/Berlin",)),
            "Asia/Kolkata": record(tmp_path_factory.mktemp("in-kolkata"), EPOCH, ("Asia/Kolkata",)),
            "Asia/Shanghai": record(tmp_path_factory.mktemp("in-shanghai"), EPOCH, ("Asia/Shanghai",)),
            "moved": record(tmp_path_factory.mktemp("moved"), BERLIN_EPOCH, ("Europe/Berlin", "Asia/Shanghai"))}


def assert_local_days_are_their_hours(db: Path) -> None:
    """Every local day stored is the sum of the hour sums in its hours [t, hi), and no two overlap
    (after a change of zone, the days of the one before that the new one's overlap are gone)."""
    with sqlite3.connect(db) as c:
        spans = c.execute("SELECT t, hi FROM local_days ORDER BY t").fetchall()
        assert spans
        assert all(hi <= t for (_t, hi), (t, _hi) in zip(spans, spans[1:])), spans
        for t, hi in spans:
            assert t % 3600 == 0 and hi % 3600 == 0 and 22 * 3600 <= hi - t <= 25 * 3600, (t, hi)
            day = c.execute("SELECT job, gpu, seconds, memory_byte_seconds, memory_max, idle_seconds, "
                            "idle_memory_byte_seconds FROM proc_local_day WHERE t = ? ORDER BY job, gpu",
                            (t,)).fetchall()
            hours = c.execute("SELECT job, gpu, SUM(seconds), SUM(memory_byte_seconds), MAX(memory_max), "
                              "SUM(idle_seconds), SUM(idle_memory_byte_seconds) FROM proc_hour WHERE t >= ? AND t < ? "
                              "GROUP BY job, gpu ORDER BY job, gpu", (t, hi)).fetchall()
            assert day == pytest.approx(hours), (t, hi)
        assert c.execute("SELECT count(*) FROM proc_local_day WHERE t NOT IN (SELECT t FROM local_days)").fetchone() \
            == (0,)
    c.close()


@pytest.mark.parametrize("recorder", ["Europe/Berlin", "Asia/Kolkata", "Asia/Shanghai", "moved"])
@pytest.mark.parametrize("reader", ["Europe/Berlin", "Asia/Kolkata", "Asia/Shanghai", "America/New_York", "UTC0"])
def test_in_the_recorders_zone_the_days_are_its_local_days(recorded_in, recorder, reader, monkeypatch):
    """A reader in the recorder's zone reads its local days (a row per day and pair, not 24), and
    every reader's days are still the rows' (reference()), in its own zone, whoever recorded them."""
    db = recorded_in[recorder]
    assert_local_days_are_their_hours(db)
    epoch = BERLIN_EPOCH if recorder in ("Europe/Berlin", "moved") else EPOCH
    assert_days_and_held(db, reader, windows(epoch), monkeypatch)
    monkeypatch.setenv("TZ", reader)
    time.tzset()
    try:
        store = Store.open(db)
        try:
            since, until = epoch - 86400, epoch + (DAYS + 1) * 86400
            plan = query._plan(store, since, until, query._local_offsets(store, since, until))
        finally:
            store.close()
    finally:
        monkeypatch.undo()
        time.tzset()
    # The reader's whole days the recorder stored as its own: all of its zone's but the edges
    # (and, after a move, the days of the zone it moved to); none elsewhere (New York's, UTC's).
    if reader == recorder or (recorder == "moved" and reader == "Asia/Shanghai"):
        assert plan.local and len(plan.days) == 1
        assert plan.days[0][1] - plan.days[0][0] >= 23 * 3600  # (India's: without the hour midnight cuts)
    else:
        assert not plan.local and not (reader != "UTC0" and plan.days)


# A recorder whose zone changes (TZ, the machine's zone, tzdata): its rollups sum the new zone's
# days over the old zone's. (zones, hours in each), from EPOCH_29 = 2026-03-29 00:00 UTC: Berlin
# (+1 -> +2 at 01:00 UTC) has a 23-hour day from 2026-03-28 23:00 UTC, Lagos (+1) a 24-hour one from
# the same instant, London's (+0 -> +1) is 23 hours from 00:00 UTC, as long as UTC's and as early.
EPOCH_29 = 1774742400.0
MOVES = {
    "a longer day from the same hour": (("Europe/Berlin", "Africa/Lagos"), (22.5, 9.0)),
    "London then UTC": (("Europe/London", "UTC0"), (23.5, 8.0)),
    "UTC then London": (("UTC0", "Europe/London"), (23.5, 8.0)),
    "a shorter day from the same hour": (("Africa/Lagos", "Europe/Berlin"), (22.5, 9.0)),
    "there and back": (("Europe/Berlin", "Africa/Lagos", "Europe/Berlin"), (22.5, 1.5, 8.0)),
    "a day starting before the old one's": (("America/New_York", "Asia/Shanghai"), (22.0, 10.0)),
    "a zone moving back (west)": (("Asia/Shanghai", "America/New_York"), (22.0, 10.0)),
    "half an hour off UTC, then whole hours": (("Asia/Kolkata", "Europe/Berlin"), (18.75, 13.0)),
    "whole hours, then half an hour off": (("Europe/Berlin", "Asia/Kolkata"), (22.5, 9.0)),
    "a change of rules (tzdata)": (("CET-1CEST,M3.5.0,M10.5.0/3", "CET-1CEST,M4.1.0,M10.5.0/3"), (22.5, 9.0)),
}


@pytest.mark.parametrize("move", MOVES)
def test_a_recorder_whose_zone_changes_keeps_rolling_up(move, tmp_path, monkeypatch):
    """Each rollup after the change sums the new zone's days: an old day that starts at the same
    hour and ends at another (Berlin's 23-hour day, then Lagos's 24) failed every rollup with
    "UNIQUE constraint failed: local_days.t", raw samples were kept past retention and nothing was
    rolled up again. Now record() says nothing, the days stored are disjoint and their hours', the
    raw tier holds only its hours, and every reader's days are still the rows'."""
    zones, hours = MOVES[move]
    db = record(tmp_path, EPOCH_29, zones, hours)
    assert_local_days_are_their_hours(db)
    end = EPOCH_29 + sum(hours) * 3600
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT min(t) FROM samples").fetchone()[0] >= end - RETENTION.raw - 2 * 3600
    c.close()
    spans = [(EPOCH_29 - 86400, end + 86400), (EPOCH_29 + 7 * 3600 + 11, end - 5 * 3600 - 0.5)]
    for reader in sorted(set(zones)):
        assert_days_and_held(db, reader, spans, monkeypatch)


# Written by vramkit at 66ef291 (schema 4, before local days): SCENARIO recorded as record() does
# from BERLIN_EPOCH, by a recorder in Europe/Berlin (TZ), the file as its recorder left it.
SCHEMA_4 = Path(__file__).parent / "fixtures" / "history_schema4_berlin.db"


def _contents(db: Path) -> dict[str, list[tuple]]:
    with sqlite3.connect(db) as c:
        tables = [name for (name,) in c.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        out = {name: sorted(c.execute(f"SELECT * FROM {name}").fetchall(), key=repr) for name in tables}
    c.close()
    # (schema 8's mark of the samples `jobs` holds is added by any upgrade: not a row of the history)
    out["meta"] = [row for row in out.get("meta", []) if row[0] != "jobs_through"]
    return out


def test_a_schema_4_file_is_upgraded_to_local_days_with_nothing_lost(tmp_path, monkeypatch):
    db = tmp_path / "history.db"
    shutil.copy(SCHEMA_4, db)
    db.chmod(0o600)
    before = _contents(db)
    assert before["meta"] and "local_days" not in before
    since, until = windows(BERLIN_EPOCH)[0]
    args = ("report", "--db", str(db), "--since", f"@{since!r}", "--until", f"@{until!r}", "--by", "day", "--json")
    old = run_vram(*args, env=clean_env(TZ="Europe/Berlin"))
    assert old.rc == 0, old.err
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        Store.open(db, write=True).close()  # what `vram record` does first: the migration, in its zone
    finally:
        monkeypatch.undo()
        time.tzset()
    after = _contents(db)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    c.close()
    for table, rows in before.items():  # every row kept; the lives of this /proc have no host pid
        assert [row[:-1] if table == "jobs" else row[:-2] if table == "proc_day" else row
                for row in after[table]] == rows, table
    assert all(row[-1] is None for row in after["jobs"])
    assert_local_days_are_their_hours(db)
    assert_totals_are_their_hours(db)
    new = run_vram(*args, env=clean_env(TZ="Europe/Berlin"))
    assert new.rc == 0 and new.json() == old.json()
    assert_days_and_held(db, "Europe/Berlin", windows(BERLIN_EPOCH), monkeypatch)
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        store = Store.open(db)
        try:
            assert query._plan(store, since, until, query._local_offsets(store, since, until)).local
        finally:
            store.close()
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_schema_5_file_is_upgraded_to_hour_totals_with_the_same_days(history, tmp_path, monkeypatch):
    """A schema 5 file (read as it is until its recorder restarts) gets its hour totals and the
    day sums' first and last hours from the hour sums when `vram record` opens it: every row
    kept, and the days the same, the rows' (Berlin: from the totals now)."""
    db = tmp_path / "history.db"
    shutil.copy(as_schema_5(history, tmp_path), db)
    db.chmod(0o600)
    before = _contents(db)
    args = ("report", "--db", str(db), "--since", f"@{EPOCH - 86400!r}", "--until", f"@{EPOCH + 4 * 86400!r}",
            "--by", "day", "--json")
    old = run_vram(*args, env=clean_env(TZ="Europe/Berlin"))
    assert old.rc == 0, old.err
    Store.open(db, write=True).close()  # what `vram record` does first
    after = _contents(db)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    c.close()
    for table, rows in before.items():
        assert [row[:-2] if table == "proc_day" else row for row in after[table]] == rows, table
    assert_totals_are_their_hours(db)
    new = run_vram(*args, env=clean_env(TZ="Europe/Berlin"))
    assert new.rc == 0 and new.json() == old.json()
    assert_days_and_held(db, "Europe/Berlin", windows(), monkeypatch)


def test_hours_forgotten_go_from_the_totals_and_a_day_they_leave_partial_is_read_from_its_hours(
        history, tmp_path, monkeypatch):
    """Retention that forgets the hour sums before a time inside a UTC day takes their totals with
    them, and that day's sums (its first and last hours with it): its part in a local day is read
    from its remaining hours, and the days are still the rows'."""
    db = tmp_path / "history.db"
    shutil.copy(history, db)
    db.chmod(0o600)
    now = EPOCH + DAYS * 86400
    store = Store.open(db, write=True)
    try:
        store.roll_up(now, Retention(raw=6 * 3600, minute=24 * 3600, quarter=now - EPOCH - 29 * 3600,
                                     max_bytes=1 << 40))
    finally:
        store.close()
    with sqlite3.connect(db) as c:
        since = float(c.execute("SELECT value FROM meta WHERE key = 'hour_since'").fetchone()[0])
        assert since == EPOCH + 29 * 3600
        assert c.execute("SELECT min(t) FROM hour_totals").fetchone() == (since,)
        assert c.execute("SELECT min(t) FROM proc_day").fetchone() == (EPOCH + 2 * 86400,)
    c.close()
    assert_totals_are_their_hours(db)
    # New York's 8 March begins at 05:00 UTC, where the sums begin: most of it is the suffix of a
    # UTC day without its day sums, and ben's last hours are in no other part of it.
    for zone in ("Europe/Berlin", "Asia/Kolkata", "America/New_York"):
        assert_days_and_held(db, zone, [(EPOCH - 86400, now + 86400), (EPOCH + 25 * 3600 + 7, now)], monkeypatch)


# ---------------------------------------------------------------- the hours local midnight cuts (schema 7)
# Lives that begin or end inside an hour local midnight cuts, on either side of it: 18:00-19:00 UTC
# in India (midnight at 18:30) and Nepal (18:15), 03:00-04:00 in Newfoundland (03:30) on 7 and 8
# March, 02:00-03:00 (02:30) after its clock change (8 March, 05:30 UTC). Each of the three days' cut hour is in
# another tier: the 15-minute rows, the 1-minute rows, the raw samples (the recording ends at
# 20:00 UTC of the third day, 6 hours of raw samples kept).
CUT_DAYS = 2 + 20 / 24
# (from, to) in minutes from the cut hour's start: only before India's midnight; only after it;
# a life that ends before it; one that ends after it; one that begins after it.
CUT_LIVES = ((5, 20), (35, 55), (-120, 20), (-120, 50), (40, 180))


def _cut_scenario() -> dict:
    processes = [{"pid": 500, "user": "ann", "command": "python train.py", "gpus": {"0": "6GiB"}}]
    for day in range(3):
        for hour in (18, 3 if day < 2 else 2):
            for i, (start, end) in enumerate(CUT_LIVES):
                base = (day * 24 + hour) * 60
                processes.append({"pid": 501 + len(processes), "user": "ben", "command": f"job {i}",
                                  "gpus": {str(i % 2): f"{i + 1}GiB"}, "sm_util": 40 * (i % 2),
                                  "start_at": f"{(base + start) // 60}h{(base + start) % 60}m",
                                  "exit_at": f"{(base + end) // 60}h{(base + end) % 60}m"})
    return {"gpus": SCENARIO["gpus"], "processes": processes}


@pytest.fixture(scope="module")
def cut_history(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("cut"), EPOCH, scenario_json=_cut_scenario(), days=CUT_DAYS)


def cut_windows() -> list[tuple[float, float]]:
    end = EPOCH + CUT_DAYS * 86400
    return [(EPOCH - 86400, end + 86400), (EPOCH + 2 * 3600 + 7, end - 3600 - 0.5),
            (EPOCH + 18 * 3600 + 1, EPOCH + 2 * 86400 + 18 * 3600 + 1800),
            # from a cut hour on: the lives before it in its UTC day are not in the window
            (EPOCH + 86400 + 18 * 3600, EPOCH + 2 * 86400 + 19 * 3600)]


def assert_quarter_totals_are_their_rows(db: Path) -> None:
    """quarter_totals holds each quarter hour's sums and peak over every row summed into the hour
    sums (schema 7), and each hour's quarters add up to its hour totals."""
    with sqlite3.connect(db) as c:
        since = c.execute("SELECT coalesce((SELECT CAST(value AS REAL) FROM meta WHERE key = 'hour_since'), 0)"
                          ).fetchone()[0]
        summed = c.execute("SELECT value FROM meta WHERE key = 'hour_sample'").fetchone()[0]
        quarters = c.execute("SELECT * FROM quarter_totals ORDER BY t").fetchall()
        assert quarters and quarters == pytest.approx(c.execute(
            "SELECT CAST(t / 900 AS INTEGER) * 900 AS q, SUM(seconds), SUM(memory * seconds), MAX(memory_max), "
            "SUM(idle_seconds) FROM (SELECT t, seconds, memory, memory_max, idle_seconds FROM proc_rollup "
            "UNION ALL SELECT s.t, s.span, p.memory, p.memory, p.idle * s.span FROM samples s "
            "JOIN proc_raw p ON p.sample = s.id WHERE s.id <= ?) WHERE t >= ? GROUP BY q ORDER BY q",
            (int(summed), since)).fetchall())
        assert c.execute("SELECT h.t, h.seconds, h.memory_byte_seconds, h.memory_max, h.idle_seconds "
                         "FROM hour_totals h ORDER BY h.t").fetchall() == pytest.approx(c.execute(
            "SELECT t / 3600 * 3600 AS h, SUM(seconds), SUM(memory_byte_seconds), MAX(memory_max), SUM(idle_seconds) "
            "FROM quarter_totals GROUP BY h ORDER BY h").fetchall())
    c.close()


def settled_per_call(monkeypatch) -> list[tuple[int, int]]:
    """Spy on query._add_quarters: (cut hours settled from their quarters, pairs whose rows were read)."""
    seen: list[tuple[int, int]] = []
    real = query._add_quarters

    def spy(store, cuts, unsure, days, offsets):
        seen.append((len(cuts), len(unsure)))
        return real(store, cuts, unsure, days, offsets)

    monkeypatch.setattr(query, "_add_quarters", spy)
    return seen


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "Asia/Kathmandu", "America/St_Johns"])
def test_an_hour_local_midnight_cuts_is_summed_from_its_quarters(cut_history, zone, monkeypatch):
    """+5:30, +5:45 and -3:30 (across its clock change): the hour local midnight cuts is summed per
    local day from its quarter hours' totals, and only the lives whose first or last hour of the
    UTC day it is are read, from their rows in it (every tier): the days are still the rows'."""
    assert_totals_are_their_hours(cut_history)
    assert_quarter_totals_are_their_rows(cut_history)
    settled = settled_per_call(monkeypatch)
    left = []  # the cut hours each call left to read row by row
    add_totals = query._add_totals

    def spy(store, spans, days, plan, offsets):
        add_totals(store, spans, days, plan, offsets)
        left.append(plan.cuts)

    monkeypatch.setattr(query, "_add_totals", spy)
    assert_days_and_held(cut_history, zone, cut_windows(), monkeypatch)
    # The widest window: every cut hour of the three days from its quarters (none row by row), and
    # of the lives only those beginning or ending in one (the 5 of each), never ann's.
    assert settled[0] == (3, 15) and left[0] == []
    assert all(cuts >= 1 for cuts, _pairs in settled)


@pytest.fixture(scope="module")
def cut_history_in_india(tmp_path_factory) -> Path:
    """The same, recorded by a recorder in India: its local days hold none of the cut hours."""
    return record(tmp_path_factory.mktemp("cut-in-india"), EPOCH, ("Asia/Kolkata",), scenario_json=_cut_scenario(),
                  days=CUT_DAYS)


def test_in_the_recorders_zone_half_an_hour_off_utc_the_cut_hours_come_from_their_quarters(
        cut_history_in_india, monkeypatch):
    """A reader in India of a recorder in India reads its stored local days, and the hour between
    two of them from its quarters' totals and the rows of the lives whose first or last hour of
    the UTC day it is (it was read row by row: 2.1x the default report's CPU over a year)."""
    settled = settled_per_call(monkeypatch)
    monkeypatch.setattr(query, "_local_days", None)  # the recorder's days, not another zone's way
    assert_days_and_held(cut_history_in_india, "Asia/Kolkata", cut_windows(), monkeypatch)
    assert settled[0] == (3, 15)


# Written by vramkit at 7ccb8dc (schema 6, before quarter totals): _cut_scenario() recorded as
# cut_history is (record(), the recorder in UTC), then VACUUMed. The same rows as cut_history's but
# quarter_totals.
SCHEMA_6 = Path(__file__).parent / "fixtures" / "history_schema6_cut.db"


def test_a_schema_6_file_is_upgraded_to_quarter_totals_with_the_same_days(cut_history, tmp_path, monkeypatch):
    """A schema 6 file (read as it is until its recorder restarts: the cut hours row by row) gets
    its quarter totals from the rows the hour sums are of when `vram record` opens it: every row
    kept, the totals those the recorder writes as it goes, and the days the same, the rows'."""
    db = tmp_path / "history.db"
    shutil.copy(SCHEMA_6, db)
    db.chmod(0o600)
    with sqlite3.connect(cut_history) as c:
        recorded = c.execute("SELECT * FROM quarter_totals ORDER BY t").fetchall()
    c.close()
    before = _contents(db)
    assert "quarter_totals" not in before
    settled = settled_per_call(monkeypatch)
    assert_days_and_held(db, "Asia/Kolkata", cut_windows(), monkeypatch)
    assert settled == []
    Store.open(db, write=True).close()  # what `vram record` does first
    after = _contents(db)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    c.close()
    assert {table: rows for table, rows in after.items() if table != "quarter_totals"} == before
    assert after["quarter_totals"] == pytest.approx(sorted(recorded, key=repr))
    assert_quarter_totals_are_their_rows(db)
    settled = settled_per_call(monkeypatch)  # (assert_days_and_held undoes the monkeypatch)
    assert_days_and_held(db, "Asia/Kolkata", cut_windows(), monkeypatch)
    assert settled[0] == (3, 15)
    assert_days_and_held(db, "Asia/Kathmandu", cut_windows(), monkeypatch)


def test_retention_inside_a_quarter_of_a_cut_hour_takes_its_hours_quarters_with_it(cut_history, tmp_path,
                                                                                    monkeypatch):
    """Retention whose cut is inside a quarter of the hour India's and Nepal's midnight cuts (at
    18:20 UTC of the second day) forgets that hour's sums and quarters, and the UTC day's sums: the
    quarters of it still kept are read row by row, and the days are still the rows'."""
    db = tmp_path / "history.db"
    shutil.copy(cut_history, db)
    db.chmod(0o600)
    now = EPOCH + CUT_DAYS * 86400
    cut = EPOCH + 86400 + 18 * 3600 + 20 * 60
    store = Store.open(db, write=True)
    try:
        store.roll_up(now, Retention(raw=6 * 3600, minute=24 * 3600, quarter=now - cut, max_bytes=1 << 40))
    finally:
        store.close()
    hour = EPOCH + 86400 + 19 * 3600
    with sqlite3.connect(db) as c:
        assert float(c.execute("SELECT value FROM meta WHERE key = 'hour_since'").fetchone()[0]) == hour
        assert c.execute("SELECT min(t) FROM quarter_totals").fetchone() == (hour,)
        assert c.execute("SELECT DISTINCT t FROM proc_rollup WHERE t < ? ORDER BY t", (hour,)).fetchall() \
            == [(hour - 1800,), (hour - 900,)]  # the hour's last two quarters, kept
    c.close()
    assert_totals_are_their_hours(db)
    assert_quarter_totals_are_their_rows(db)
    for zone in ("Asia/Kolkata", "Asia/Kathmandu", "America/St_Johns"):
        assert_days_and_held(db, zone, [(EPOCH - 86400, now + 86400), (EPOCH + 86400 + 18 * 3600 + 7, now)],
                             monkeypatch)


def reference_held(db: Path, since: float, until: float) -> dict[tuple[int, int], tuple]:
    """Per job and GPU, the rows of the view proc_time in [since, until) summed."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT job, gpu, SUM(seconds), SUM(memory * seconds), MAX(memory_max), SUM(idle_seconds), "
                         "SUM(memory * idle_seconds) FROM proc_time WHERE t >= ? AND t < ? GROUP BY job, gpu",
                         (since, until)).fetchall()
    return {(job, gpu): (s, mbs or 0.0, peak, idle, imbs or 0.0) for job, gpu, s, mbs, peak, idle, imbs in rows}


def reference_gpus(db: Path, since: float, until: float) -> tuple[dict[int, tuple], float]:
    """Per GPU, occupied seconds, peak and average utilization; and the seconds recorded."""
    with sqlite3.connect(db) as c:
        gpus = {gpu: (occ, peak, util) for gpu, occ, peak, util in c.execute(
            "SELECT gpu, SUM(occupied_seconds), MAX(used_max), SUM(util * seconds) / "
            "NULLIF(SUM(CASE WHEN util IS NOT NULL THEN seconds END), 0) FROM gpu_time WHERE t >= ? AND t < ? "
            "GROUP BY gpu", (since, until))}
        recorded = max((s for (s,) in c.execute(
            "SELECT SUM(seconds) FROM gpu_time WHERE t >= ? AND t < ? GROUP BY gpu", (since, until))), default=0.0)
    return gpus, recorded


def assert_held_and_gpus(store: Store, db: Path, since: float, until: float, where: object) -> None:
    held = {(h.job, h.gpu): (h.seconds, h.memory_byte_seconds, h.peak_memory, h.idle_seconds,
                             h.idle_memory_byte_seconds) for h in query.held(store, since, until)}
    want = reference_held(db, since, until)
    assert set(held) == set(want), where
    for key, values in want.items():
        assert held[key] == pytest.approx(values, rel=1e-9, abs=1e-6), (where, key)
    gpus, recorded = reference_gpus(db, since, until)
    got = {int(u.key.split()[1]): (u.gpu_seconds, u.peak_memory, u.utilization)
           for u in query.usage(store, since, until, "gpu")}
    assert set(got) == set(gpus), where
    for gpu, values in gpus.items():
        assert got[gpu] == pytest.approx(values, rel=1e-9, abs=1e-6), (where, gpu)
    assert query.coverage(store, since, until).recorded_seconds == pytest.approx(recorded, rel=1e-9), where


def test_whole_utc_days_are_read_from_the_day_sums_with_the_same_totals(history):
    store = Store.open(history)
    try:
        assert store.day_sums and store.conn.execute("SELECT count(*) FROM proc_day").fetchone()[0]
        assert query._plan(store, *windows()[0]).days  # the whole days of the window come from them
        for since, until in windows():
            assert_held_and_gpus(store, history, since, until, (since, until))
    finally:
        store.close()


def test_a_schema_2_file_reads_the_same_before_and_after_its_upgrade(history, tmp_path):
    db = tmp_path / "old.db"
    shutil.copy(history, db)
    with sqlite3.connect(db) as c:  # what a schema 2 recorder leaves: no day sums (nor workloads, local days)
        c.executescript("DROP TABLE local_days; DROP TABLE proc_local_day; ALTER TABLE jobs DROP COLUMN nvml_pid; "
                        "DROP TABLE workloads; DROP TABLE proc_day; DROP TABLE gpu_day; DROP TABLE hour_totals; "
                        "DROP TABLE quarter_totals; DROP VIEW job_totals; DELETE FROM meta WHERE key = 'jobs_through'; "
                        "PRAGMA user_version = 2;")
    c.close()
    for write in (False, True):  # as it is (a reader), then upgraded (by the recorder) to day sums
        store = Store.open(db, write=write)
        try:
            assert store.day_sums == write and bool(query._plan(store, *windows()[0]).days) == write
            for since, until in windows():
                assert_held_and_gpus(store, db, since, until, (write, since, until))
        finally:
            store.close()


@pytest.mark.slow
def test_half_an_hour_off_utc_a_long_window_is_still_one_statement(tmp_path, monkeypatch):
    """Where local midnight cuts an hour (India, Iran, Newfoundland), each such hour is read row by
    row. 200 days of them were 800 terms of one compound SELECT, past SQLite's 500: --by day over
    more than about four months failed there ("too many terms in compound SELECT")."""
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"gpus": [{"memory_total": "80GiB"}], "processes": [
        {"pid": 401, "user": "dee", "command": "python serve.py",
         "gpus": {"0": {"timeline": [[0, "3GiB"], [1800, "9GiB"]], "interpolate": "step", "repeat": "5h"}}}]}))
    monkeypatch.delenv("VRAM_SIMULATE", raising=False)
    monkeypatch.setenv("VRAM_SIM_CLOCK", "stepped")
    monkeypatch.setenv("VRAM_SIM_EPOCH", f"{EPOCH:.0f}")
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    monkeypatch.setattr("vramkit.history.recorder.ROLLUP_EVERY", 86400.0)  # a rollup a recorded day
    machine = open_machine(str(scenario))
    db = tmp_path / "history.db"
    recorder = Recorder(Store.open(db, write=True), 1800.0)
    collector = Collector(machine, interval=1800.0)
    for _ in range(200 * 48):
        recorder.record(collector.sample())
        machine.backend.sleep(threading.Event(), 1800.0)
    recorder.close(machine.backend.monotonic())
    since, until = EPOCH - 3600, EPOCH + 201 * 86400
    result = run_vram("report", "--db", str(db), "--since", f"@{since!r}", "--until", f"@{until!r}", "--by", "day",
                      "--json", env=clean_env(TZ="Asia/Kolkata"))
    got = {r["day"]: (r["gpu_seconds"], r["memory_byte_seconds"], r["peak_memory"], r["idle_seconds"], r["jobs"])
           for r in result.json()["rows"]}
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        want = reference(db, since, until)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert len(want) == 201
    assert_same(got, want, "Asia/Kolkata")
