"""Idle time from the recorder's history (issue 11 item 4): kill --idle answers at once when the
history watched the whole window, and says when it has to watch live instead; doctor's idle
holders are the processes idle for 10 minutes by the history, not merely idle now."""

from __future__ import annotations

import json
import os
import pwd
import time

from helpers import clean_env, run_vram

from vramkit.gpu_state import Device, GpuProcess, Snapshot
from vramkit.idle import IdleClock

ME = pwd.getpwuid(os.getuid()).pw_name
RECORDED = 3 * 3600  # seconds of history, ending now
SCENARIO = {
    "name": "idle-history",
    "gpus": [
        {"memory_total": "80GiB", "utilization": 0},
        # GPU 1 works until 2h30m into the recording, then idles.
        {"memory_total": "80GiB", "utilization": {"timeline": [[0, 60], [9000, 0]], "interpolate": "step"}},
    ],
    "processes": [
        # The runner's own (kill selects a user's own processes; root's are root's).
        {"pid": 101, "user": ME, "uid": os.getuid(), "command": "python notebook.py", "gpus": {"0": "10GiB"},
         "sm_util": 0},
        {"pid": 102, "user": ME, "uid": os.getuid(), "command": "python train.py", "gpus": {"1": "20GiB"}},
    ],
}


def _record(path, db, ended_ago: float = 0.0, seconds: float = RECORDED) -> None:
    epoch = int(time.time() - seconds - ended_ago)
    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(epoch), VRAM_SIM_TIME=None)
    done = run_vram("record", "--simulate", str(path), "--db", str(db), "--interval", "60",
                    "--duration", str(seconds), "--quiet", env=env)
    assert done.rc == 0, done.err


def _kill_idle(path, db, idle: str, *pids: str) -> dict:
    # The live machine is where the recording ended.
    env = clean_env(VRAM_SIM_TIME=str(RECORDED), VRAM_AUDIT_LOG=str(db.parent / "audit.log"))
    result = run_vram("kill", *pids, "--simulate", str(path), "--idle", idle, "--db", str(db), "--dry-run",
                      "--json", env=env, timeout=60)
    assert result.rc in (0, 1), result.err
    return json.loads(result.out)  # exit 1: every selected process refused (simulated ones are)


def test_idle_for_the_whole_window_is_answered_from_history(write_scenario, tmp_path):
    path, db = write_scenario(SCENARIO), tmp_path / "history.db"
    _record(path, db)
    # Watching live for 2 h would time the test out: the answer comes from history.
    plan = _kill_idle(path, db, "2h")
    assert [t["pid"] for t in plan["targets"]] == [101]  # ben's job idles for 30 minutes only
    assert any("idle times from the history in" in n and "3h00m" in n for n in plan["notes"])
    plan = _kill_idle(path, db, "20m")
    assert sorted(t["pid"] for t in plan["targets"]) == [101, 102]


def test_a_named_process_busy_within_the_window_is_not_selected(write_scenario, tmp_path):
    path, db = write_scenario(SCENARIO), tmp_path / "history.db"
    _record(path, db)
    plan = _kill_idle(path, db, "1h", "102")
    assert plan["targets"] == []
    assert "pid 102 was not idle for 3600s: not selected" in plan["notes"]


def test_history_that_ended_is_not_used_and_vram_watches(write_scenario, tmp_path):
    path, db = write_scenario(SCENARIO), tmp_path / "history.db"
    _record(path, db, ended_ago=2 * 3600)
    plan = _kill_idle(path, db, "1s")
    assert any("ends 2h00m ago ('vram record' is not running): watching from now for up to 1s" in n
               for n in plan["notes"]), plan["notes"]
    assert [t["pid"] for t in plan["targets"]] == [101, 102]  # both idle for the second watched


def test_history_shorter_than_the_window_says_so(write_scenario, tmp_path):
    path, db = write_scenario(SCENARIO), tmp_path / "history.db"
    _record(path, db)
    from vramkit.history.recorded_idle import read_recorded_idle

    recorded = read_recorded_idle(time.time(), db)
    assert recorded.covers(time.time(), 2 * 3600) and not recorded.covers(time.time(), 4 * 3600)
    assert recorded.since  # ann's notebook, idle since the recording began
    (key, since), = [(k, v) for k, v in recorded.since.items() if k[0] == 101]
    assert key == (101, None, 0) and abs(since - (time.time() - RECORDED)) < 120


def test_no_history_database_says_so(write_scenario, tmp_path):
    path = write_scenario(SCENARIO)
    plan = _kill_idle(path, tmp_path / "none.db", "1s")
    assert any("no recorded history at" in n and "watching from now for up to 1s" in n for n in plan["notes"])


def _snap(t: float, util: int) -> Snapshot:
    proc = GpuProcess(pid=7, gpu=0, gpu_uuid=None, memory=1 << 30, start_ticks=99, sm_utilization=util)
    proc.idle = util == 0
    return Snapshot(time=t, gpus=[Device(index=0, utilization=util, processes=[proc])])


def test_the_seed_counts_from_the_recorded_time_for_the_first_sighting_only():
    clock = IdleClock()
    clock.seed({(7, 99, 0): 1000.0})
    first = _snap(4600.0, 0)
    clock.update(first, now=50.0)
    assert first.processes[0].idle_for == 3600.0  # idle since 1000, seen at 4600
    busy = _snap(4660.0, 40)
    clock.update(busy, now=110.0)
    again = _snap(4720.0, 0)
    clock.update(again, now=170.0)
    assert again.processes[0].idle_for == 0.0  # busy since: history no longer speaks for it


def _doctor(path, db, at: float = RECORDED) -> dict:
    env = clean_env(VRAM_SIM_TIME=str(at))
    result = run_vram("doctor", "--simulate", str(path), "--db", str(db), "--json", env=env)
    assert result.rc == 0, result.err
    return result.json()


def _idle_holders(report: dict) -> list[int]:
    return sorted(f["pid"] for f in report["findings"] if f["code"] == "idle_holder")


def test_doctor_judges_idle_holders_by_recorded_idle_time(write_scenario, tmp_path):
    # ben's job stops running kernels 5 minutes before the end of the recording: idle now, and it
    # has run for an hour, but 5 idle minutes is no idle holder yet. ann's notebook idled 3 h.
    data = json.loads(json.dumps(SCENARIO))
    data["gpus"][1]["utilization"] = {"timeline": [[0, 60], [RECORDED - 300, 0]], "interpolate": "step"}
    path, db = write_scenario(data), tmp_path / "history.db"
    _record(path, db)
    report = _doctor(path, db)
    assert _idle_holders(report) == [101]
    finding, = [f for f in report["findings"] if f["code"] == "idle_holder"]
    assert "idle for 3h00m by the recorded history" in finding["detail"]
    assert any("idle times from the history in" in n for n in report["notes"])
    # Without history doctor can only say both are idle now and have run a while.
    assert _idle_holders(_doctor(path, tmp_path / "none.db")) == [101, 102]


def test_doctor_with_history_shorter_than_ten_minutes_falls_back(write_scenario, tmp_path):
    path, db = write_scenario(SCENARIO), tmp_path / "history.db"
    _record(path, db, seconds=240)
    report = _doctor(path, db, at=240)
    assert _idle_holders(report) == [101]  # ben is busy at t=240 either way
    assert not any("idle times from the history" in n for n in report["notes"])
