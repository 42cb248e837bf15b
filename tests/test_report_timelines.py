"""vram report's numbers equal what a simulated timeline implies, field by field (issue 11, "Must show").

Each scenario (tests/fixtures/history_*.json) has lives that start and end at known times and
memory and SM utilization that change in steps. It is recorded with `vram record` on the stepped
scenario clock (a sample every 20 or 30 seconds, exactly), then `vram report --json` is compared with
totals integrated here from the scenario text alone: a process holds its memory from start_at
(inclusive) to exit_at (exclusive); it is idle while its own SM utilization (else its GPU's) is 0;
a GPU's memory used is what its live processes hold. The recording covers [0, END): the sample
at END stands for no time.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import clean_env, run_vram

FIXTURES = Path(__file__).parent / "fixtures"
EPOCH = 1767225600  # 2026-01-01 00:00 UTC, a whole day, hour and quarter hour
INTERVALS = {"history_shared_day.json": 20, "history_two_days.json": 30}  # not 60: a span is not a bucket
GIB = 1024**3


# ---------------------------------------------------------------- the scenario, integrated here
def _bytes(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    assert value.endswith("GiB"), value
    return int(value[:-3]) * GIB


def _points(value: Any) -> list[tuple[float, Any]]:
    """A step timeline (or a plain value) as [(from, value), ...]."""
    if isinstance(value, dict):
        assert value.get("interpolate") == "step" and "repeat" not in value
        return [(float(t), v) for t, v in value["timeline"]]
    return [(0.0, value)]


def _at(value: Any, t: float) -> Any:
    """The value at t. A step takes effect at its point's time (as start_at does, and as
    nvml/scenario.py's value_at reads step timelines)."""
    points = _points(value)
    current = points[0][1]
    for start, v in points:
        if t >= start:
            current = v
    return current


def _edges(data: dict[str, Any], end: float) -> list[float]:
    """Every time anything changes, within [0, end]."""
    times = {0.0, float(end)}
    for g in data["gpus"]:
        times.update(t for t, _ in _points(g.get("utilization", 0)))
    for p in data["processes"]:
        times.update(float(p[k]) for k in ("start_at", "exit_at") if k in p)
        times.update(t for t, _ in _points(p.get("sm_util", 0)))
        for mem in p["gpus"].values():
            times.update(t for t, _ in _points(mem))
    return sorted(t for t in times if 0 <= t <= end)


def _alive(p: dict[str, Any], t: float) -> bool:
    return p.get("start_at", 0) <= t < p.get("exit_at", float("inf"))


def expected(data: dict[str, Any], since: float, until: float, interval: int) -> dict[str, dict[Any, dict[str, float]]]:
    """Totals over [since, until) (scenario seconds) per user, per GPU and per pid: what the
    scenario says at each sample instant, held until the next one. Every change point falls on a
    sample (record() checks), so with a step that takes effect at its point this is the exact
    integral; with value_at's reading (see _at) a timeline change counts from the next sample."""
    users: dict[str, dict[str, Any]] = {}
    gpus: dict[int, dict[str, Any]] = {}
    jobs: dict[int, dict[str, Any]] = {}
    util_seconds: dict[int, float] = {}
    length = interval
    for a in range(int(since), int(until), interval):
        held_on: dict[int, int] = {}
        for p in data["processes"]:
            if not _alive(p, a):
                continue
            for gpu_text, mem in p["gpus"].items():
                gpu = int(gpu_text)
                memory = _bytes(_at(mem, a))
                busy = _at(p["sm_util"], a) if "sm_util" in p else _at(data["gpus"][gpu].get("utilization", 0), a)
                idle = length if busy == 0 and memory > 0 else 0.0
                for table, key in ((users, p["user"]), (jobs, p["pid"])):
                    row = table.setdefault(key, {"gpu_seconds": 0.0, "memory_byte_seconds": 0.0,
                                                 "idle_seconds": 0.0, "peak_memory": 0, "jobs": set()})
                    row["gpu_seconds"] += length
                    row["memory_byte_seconds"] += memory * length
                    row["idle_seconds"] += idle
                    row["peak_memory"] = max(row["peak_memory"], memory)
                    row["jobs"].add(p["pid"])
                g = gpus.setdefault(gpu, {"gpu_seconds": 0.0, "memory_byte_seconds": 0.0, "idle_seconds": 0.0,
                                          "peak_memory": 0, "jobs": set()})
                g["memory_byte_seconds"] += memory * length
                g["idle_seconds"] += idle
                g["jobs"].add(p["pid"])
                held_on[gpu] = held_on.get(gpu, 0) + memory
        for gpu, used in held_on.items():
            gpus[gpu]["gpu_seconds"] += length  # the time any process held memory there
            gpus[gpu]["peak_memory"] = max(gpus[gpu]["peak_memory"], used)
        for gpu, g in enumerate(data["gpus"]):
            util_seconds[gpu] = util_seconds.get(gpu, 0.0) + _at(g.get("utilization", 0), a) * length
    for table in (users, gpus, jobs):
        for row in table.values():
            row["jobs"] = len(row["jobs"])
    for gpu, g in gpus.items():
        g["utilization"] = util_seconds[gpu] / (until - since)
    return {"user": users, "gpu": gpus, "job": jobs}


# ---------------------------------------------------------------- recording and reporting
def record(tmp_path: Path, scenario: str, seconds: int) -> tuple[Path, dict[str, Any], int]:
    data = json.loads((FIXTURES / scenario).read_text())
    interval = INTERVALS[scenario]
    # The stepped clock samples at 0, interval, 2 x interval, ...: every change must fall on one,
    # and on a minute (a 1-minute rollup then averages one value).
    assert all(t % 60 == 0 and t % interval == 0 for t in _edges(data, seconds)), "a change between samples"
    db = tmp_path / "history.db"
    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME=None, TZ="UTC")
    result = run_vram("record", "--simulate", str(FIXTURES / scenario), "--db", str(db), "--interval",
                      str(interval), "--duration", str(seconds), "--quiet", env=env, timeout=120)
    assert result.rc == 0, result.err
    return db, data, interval


def report(db: Path, since: float, until: float, *args: str) -> dict[str, Any]:
    result = run_vram("report", "--db", str(db), "--since", f"@{EPOCH + since}", "--until",
                      f"@{EPOCH + until}", "--json", "--top", "1000", *args, env=clean_env(TZ="UTC"))
    doc: dict[str, Any] = result.json()
    return doc


FIELDS = ("gpu_seconds", "memory_byte_seconds", "idle_seconds", "peak_memory", "jobs")


def assert_rows_equal(rows: list[dict[str, Any]], key: str, want: dict[Any, dict[str, float]]) -> None:
    got = {row[key]: row for row in rows}
    assert sorted(got) == sorted(want), f"{key}s: got {sorted(got)}, want {sorted(want)}"
    for k, w in want.items():
        for name in FIELDS:
            assert got[k][name] == w[name], f"{key} {k}: {name} is {got[k][name]}, the scenario implies {w[name]}"


@pytest.fixture(scope="module")
def shared_day(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], int]:
    return record(tmp_path_factory.mktemp("day"), "history_shared_day.json", 6 * 3600)


@pytest.fixture(scope="module")
def two_days(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], int]:
    return record(tmp_path_factory.mktemp("two"), "history_two_days.json", 26 * 3600)


WINDOWS = [(0, 6 * 3600), (5400, 16200), (3600, 3660)]


@pytest.mark.parametrize("since,until", WINDOWS)
def test_per_user_equals_the_scenario(shared_day, since, until):
    db, data, interval = shared_day
    doc = report(db, since, until)
    assert doc["window"] == {"since": EPOCH + since, "until": EPOCH + until, "seconds": until - since,
                             "since_time": doc["window"]["since_time"], "until_time": doc["window"]["until_time"]}
    assert doc["coverage"]["recorded_seconds"] == until - since
    assert_rows_equal(doc["rows"], "user", expected(data, since, until, interval)["user"])


@pytest.mark.parametrize("since,until", WINDOWS)
def test_per_gpu_equals_the_scenario(shared_day, since, until):
    db, data, interval = shared_day
    doc = report(db, since, until, "--by", "gpu")
    want = expected(data, since, until, interval)["gpu"]
    assert_rows_equal(doc["rows"], "gpu", want)
    for row in doc["rows"]:
        assert row["utilization"] == round(want[row["gpu"]]["utilization"], 2)


def test_per_job_and_idle_holders_equal_the_scenario(shared_day):
    db, data, interval = shared_day
    doc = report(db, 0, 6 * 3600, "--by", "life")
    want = expected(data, 0, 6 * 3600, interval)["job"]
    assert_rows_equal(doc["rows"], "pid", want)
    by_pid = {p["pid"]: p for p in data["processes"]}
    for row in doc["rows"]:
        assert row["user"] == by_pid[row["pid"]]["user"]
        assert row["gpus"] == sorted(int(g) for g in by_pid[row["pid"]]["gpus"])
        assert row["first_seen"] == EPOCH + by_pid[row["pid"]].get("start_at", 0)
    # Idle holders: every job with idle time, longest first.
    holders = [(h["pid"], h["idle_seconds"]) for h in doc["idle_holders"]]
    idle = sorted(((pid, w["idle_seconds"]) for pid, w in want.items() if w["idle_seconds"]),
                  key=lambda x: (-x[1], x[0]))
    assert holders == idle
    for h in doc["idle_holders"]:  # memory x idle time: these hold one size while idle
        pid = h["pid"]
        if pid in (1003, 1004):
            assert h["idle_memory_byte_seconds"] == want[pid]["memory_byte_seconds"]


def test_a_window_with_nothing_recorded(shared_day):
    db, _, _ = shared_day
    doc = report(db, 7 * 3600, 8 * 3600)
    assert doc["rows"] == [] and doc["idle_holders"] == []
    assert doc["coverage"]["recorded_seconds"] == 0
    assert doc["coverage"]["first_sample"] == EPOCH and doc["coverage"]["last_sample"] == EPOCH + 6 * 3600
    text = run_vram("report", "--db", str(db), "--since", f"@{EPOCH + 7 * 3600}", "--until",
                    f"@{EPOCH + 8 * 3600}", env=clean_env(TZ="UTC"))
    assert text.rc == 0
    assert "no data recorded in this window (the database holds 2026-01-01 00:00 to 2026-01-01 06:00)" in text.out


def _tiers(db: Path) -> tuple[float, int]:
    with sqlite3.connect(db) as c:
        first_raw = c.execute("SELECT min(t) FROM samples").fetchone()[0]
        rolled = c.execute("SELECT count(*) FROM proc_rollup WHERE tier = 60").fetchone()[0]
    return first_raw, rolled


@pytest.mark.parametrize("since,until", [(0, 26 * 3600), (1800, 25 * 3600), (0, 3 * 3600), (7200, 26 * 3600)])
def test_totals_survive_the_rollup(two_days, since, until):
    """Recorded for 26 hours: the first two are 1-minute rollups now, the rest raw samples. Any
    window, across the seam or not, still sums to what the scenario implies."""
    db, data, interval = two_days
    first_raw, rolled = _tiers(db)
    assert rolled > 0 and first_raw >= EPOCH + 3600, "the recording did not cross the raw tier's 24 hours"
    want = expected(data, since, until, interval)
    assert_rows_equal(report(db, since, until)["rows"], "user", want["user"])
    doc = report(db, since, until, "--by", "gpu")
    assert_rows_equal(doc["rows"], "gpu", want["gpu"])
    assert doc["coverage"]["recorded_seconds"] == until - since


def test_days_split_at_local_midnight(two_days):
    db, data, interval = two_days
    doc = report(db, 0, 26 * 3600, "--by", "day")
    first = expected(data, 0, 24 * 3600, interval)["user"]
    second = expected(data, 24 * 3600, 26 * 3600, interval)["user"]
    want = {}
    for day, per_user in (("2026-01-01", first), ("2026-01-02", second)):
        want[day] = {name: sum(u[name] for u in per_user.values()) for name in FIELDS if name != "peak_memory"}
        want[day]["peak_memory"] = max(u["peak_memory"] for u in per_user.values())
        want[day]["jobs"] = sum(1 for p in data["processes"] if any(
            _alive(p, t) for t in range(24 * 3600 * (day == "2026-01-02"), 26 * 3600, interval)
            if (t < 24 * 3600) == (day == "2026-01-01")))
    assert_rows_equal(doc["rows"], "day", want)
