"""Recorded idle time is never trusted beyond the life of the process it is about (issue 26 item 3):
a history that says a process started seconds ago has been idle for hours (forged, or recorded on
a clock that is not the host's) must not make `vram kill --idle 2h` select it."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from helpers import clean_env, run_vram, start_sleeper

from vramkit import procs
from vramkit.history.recorded_idle import within_lives

pytestmark = pytest.mark.usefixtures("kill_sandbox")
RECORDED = 3 * 3600


def _scenario(pid: int) -> dict:
    return {"name": "forged-idle",
            "gpus": [{"uuid": "GPU-00000000-0000-4000-8000-000000000000", "memory_total": "80GiB", "utilization": 0}],
            "processes": [{"pid": pid, "source": "real", "gpus": {"0": "12GiB"}, "sm_util": 0}]}


def _history(path, db, ticks: int, idle_since: float) -> None:
    """Three hours of recording ending now (the simulated clock runs from 3 h ago, so the recorder
    itself saw the seconds-old process idle for 3 h), then idle_since forged as given."""
    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(int(time.time() - RECORDED)), VRAM_SIM_TIME=None)
    done = run_vram("record", "--simulate", str(path), "--db", str(db), "--interval", "60", "--duration",
                    str(RECORDED), "--quiet", env=env, timeout=120)
    assert done.rc == 0, done.err
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT j.start_ticks FROM holding h JOIN jobs j ON j.id = h.job").fetchall()
        assert rows == [(ticks,)]  # the recorder knew the process by its identity
        c.execute("UPDATE holding SET idle_since = ?", (idle_since,))


def _kill_idle(path, db, idle: str) -> dict:
    env = clean_env(VRAM_AUDIT_LOG=str(db.parent / "audit.log"))  # the live machine's clock is the host's
    result = run_vram("kill", "--simulate", str(path), "--idle", idle, "--db", str(db), "--dry-run", "--json",
                      env=env, timeout=60)
    assert result.rc in (0, 1), result.err
    return json.loads(result.out)


def test_a_seconds_old_process_with_a_forged_idle_since_hours_ago_is_not_selected(children, write_scenario,
                                                                                  tmp_path):
    child = start_sleeper(children)
    ticks = procs.identity(child.pid).start_ticks
    path, db = write_scenario(_scenario(child.pid)), tmp_path / "history.db"
    _history(path, db, ticks, time.time() - 5 * 3600)  # before the process started
    plan = _kill_idle(path, db, "2h")
    assert any("idle times from the history in" in n for n in plan["notes"]), plan["notes"]  # history was used
    assert child.pid not in [t["pid"] for t in plan["targets"]], plan
    assert child.poll() is None


def test_an_idle_since_in_the_future_is_not_trusted(children, write_scenario, tmp_path):
    child = start_sleeper(children)
    ticks = procs.identity(child.pid).start_ticks
    path, db = write_scenario(_scenario(child.pid)), tmp_path / "history.db"
    _history(path, db, ticks, time.time() + 10 * 86400)
    plan = _kill_idle(path, db, "2h")
    assert child.pid not in [t["pid"] for t in plan["targets"]], plan


def test_within_lives_caps_at_the_live_process_start_and_drops_what_cannot_be_true():
    now = 1_000_000.0
    lives = {10: (500, now - 30.0), 11: (600, now - 7200.0)}

    def started(pid: int):
        return lives.get(pid)

    recorded = {
        (10, 500, 0): now - 5 * 3600,  # before its process started: from its start
        (11, 600, 0): now - 3600,  # within its life: as recorded
        (11, 601, 1): now - 3600,  # the pid is another process now
        (12, 700, 0): now - 3600,  # gone
        (10, 500, 1): now + 60,  # in the future
    }
    assert within_lives(recorded, now, started) == {(10, 500, 0): now - 30.0, (11, 600, 0): now - 3600}


def test_within_lives_reads_this_hosts_processes_by_default(children):
    child = start_sleeper(children)
    me = procs.identity(child.pid)
    now = time.time()
    got = within_lives({(child.pid, me.start_ticks, 0): now - 86400, (child.pid, me.start_ticks + 1, 1): now - 60},
                       now)
    assert got == {(child.pid, me.start_ticks, 0): pytest.approx(me.start_time)}
