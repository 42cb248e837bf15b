"""The history store and the recorder in this process, on real SQLite files and the simulated
machine on a stepped clock: rollups keep every total, tiers never overlap, the size bound drops
the oldest rows first, the wall clock jumping, a GPU lost mid-recording, and a driver that
fails and comes back (issue 11)."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path

import pytest

from vramkit.collector import Collector
from vramkit.history.recorder import Recorder
from vramkit.history.store import Retention, Store
from vramkit.machine import Machine, open_machine

EPOCH = 1767225600.0
FOREVER = Retention(raw=1e9, minute=1e9, quarter=1e9, max_bytes=1 << 40)  # no rollup while recording

SCENARIO = {
    "gpus": [
        {"memory_total": "80GiB", "utilization": {"timeline": [[0, 90], [600, 0], [1200, 90]], "repeat": "30m"}},
        {"memory_total": "80GiB", "utilization": 40},
        {"memory_total": "80GiB"},  # never used: its rows are GPU rows only
    ],
    "processes": [
        {"pid": 101, "user": "ann", "command": "python train.py",
         "gpus": {"0": {"timeline": [[0, "10GiB"], [3600, "30GiB"]], "repeat": "2h"}, "1": "5GiB"},
         "sm_util": {"timeline": [[0, 80], [900, 0], [1800, 80]], "interpolate": "step", "repeat": "45m"}},
        {"pid": 102, "user": "ben", "command": "jupyter", "gpus": {"1": "12GiB"}, "sm_util": 0},
        {"pid": 103, "user": "cid", "command": "python eval.py", "gpus": {"0": "4GiB"},
         "start_at": "40m", "exit_at": "2h10m"},
    ],
}


@pytest.fixture
def stepped(monkeypatch, tmp_path):
    """open(start) -> a simulated machine on a stepped clock at EPOCH + start."""
    for key in ("VRAM_SIMULATE", "VRAM_SIM_TIME", "VRAM_SIM_EPOCH", "VRAM_SIM_CLOCK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_CLOCK", "stepped")
    monkeypatch.setenv("VRAM_SIM_EPOCH", f"{EPOCH:.0f}")
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(SCENARIO))

    def open_at(start: float = 0.0, scenario: dict | None = None) -> Machine:
        if scenario is not None:
            path.write_text(json.dumps(scenario))
        monkeypatch.setenv("VRAM_SIM_TIME", f"{start:g}")
        return open_machine(str(path))
    return open_at


def record(recorder: Recorder, machine: Machine, samples: int, interval: float, shift=None) -> Collector:
    """Take `samples` samples `interval` apart on the stepped clock; shift(i) -> seconds added to
    the i-th snapshot's wall time (a wall clock that jumps)."""
    collector = Collector(machine, interval=interval)
    for i in range(samples):
        snap = collector.sample()
        recorder.record(snap if shift is None else dataclasses.replace(snap, time=snap.time + shift(i)))
        machine.backend.sleep(threading.Event(), interval)
    return collector


def totals(store: Store) -> dict[str, dict]:
    """Every total a report sums, per job and per GPU, over every tier."""
    c = store.conn
    return {
        "job": {r[0]: r[1:] for r in c.execute(
            "SELECT job, SUM(seconds), SUM(memory * seconds), SUM(idle_seconds) FROM proc_time GROUP BY job")},
        "proc_gpu": {r[0]: r[1:] for r in c.execute(
            "SELECT gpu, SUM(seconds), SUM(memory * seconds), SUM(idle_seconds) FROM proc_time GROUP BY gpu")},
        "gpu": {r[0]: r[1:] for r in c.execute(
            "SELECT gpu, SUM(seconds), SUM(occupied_seconds), SUM(lost_seconds), SUM(used * seconds) "
            "FROM gpu_time GROUP BY gpu")},
    }


def assert_same_totals(before: dict[str, dict], after: dict[str, dict]) -> None:
    for kind in before:
        assert set(before[kind]) == set(after[kind]), kind
        for key, values in before[kind].items():
            assert after[kind][key] == pytest.approx(values, rel=1e-9), (kind, key)


def assert_tiers_apart(store: Store) -> None:
    """Each GPU's 15-minute buckets end before its 1-minute ones start, which end before its raw samples."""
    c = store.conn
    for (gpu,) in c.execute("SELECT gpu FROM gpus").fetchall():
        q_end = c.execute("SELECT max(t) + 900 FROM gpu_rollup WHERE tier = 900 AND gpu = ?", (gpu,)).fetchone()[0]
        m_start, m_end = c.execute("SELECT min(t), max(t) + 60 FROM gpu_rollup WHERE tier = 60 AND gpu = ?",
                                   (gpu,)).fetchone()
        raw_start = c.execute("SELECT min(s.t) FROM samples s JOIN gpu_raw g ON g.sample = s.id WHERE g.gpu = ?",
                              (gpu,)).fetchone()[0]
        assert q_end is not None and m_start is not None and raw_start is not None
        assert q_end <= m_start and m_end <= raw_start, (gpu, q_end, m_start, m_end, raw_start)
        for table in ("gpu_rollup", "proc_rollup"):
            bad = c.execute(f"SELECT count(*) FROM {table} WHERE t % tier != 0").fetchone()[0]
            assert bad == 0


# ------------------------------------------------------------------ 7. retention and the size bound

def test_rollups_move_raw_to_minutes_to_quarters_without_changing_totals(stepped, tmp_path):
    store = Store.open(tmp_path / "h.db", write=True)
    recorder = Recorder(store, 7.0, retention=FOREVER)  # 7 s: samples straddle minute edges
    record(recorder, stepped(), 6 * 3600 // 7, 7.0).close()
    # Memory the driver could not give (MIG, some drivers) is unknown in a third of the rows:
    # rolling up must not credit the known memory to the unknown time.
    store.conn.execute("UPDATE proc_raw SET memory = NULL WHERE sample % 3 = 0")
    store.conn.execute("UPDATE gpu_raw SET used = NULL WHERE sample % 5 = 0")
    before = totals(store)
    assert before["job"] and before["gpu"][2][1] == 0  # GPU 2: recorded, never occupied
    now = store.conn.execute("SELECT max(t) FROM samples").fetchone()[0]
    store.roll_up(now, Retention(raw=3600, minute=2 * 3600, quarter=1e9))
    tiers = dict(store.conn.execute("SELECT tier, count(*) FROM proc_rollup GROUP BY tier").fetchall())
    assert tiers[60] > 0 and tiers[900] > 0
    assert_same_totals(before, totals(store))
    assert_tiers_apart(store)
    # Rolled again a little later: more raw rows go to minutes, minutes to quarters; still the same.
    store.roll_up(now + 1800, Retention(raw=3600, minute=2 * 3600, quarter=1e9))
    assert_same_totals(before, totals(store))
    assert_tiers_apart(store)
    # Jobs' own totals (kept as they were credited, read as readers do) agree with the tiers.
    jobs = dict(store.conn.execute("SELECT id, gpu_seconds FROM job_totals").fetchall())
    assert {j: v[0] for j, v in totals(store)["job"].items()} == pytest.approx(jobs, rel=1e-9)
    store.close()


def test_a_clock_that_went_back_merges_into_rolled_buckets(stepped, tmp_path):
    store = Store.open(tmp_path / "h.db", write=True)
    recorder = Recorder(store, 10.0, retention=FOREVER)
    collector = record(recorder, stepped(), 360, 10.0)  # an hour
    now = store.conn.execute("SELECT max(t) FROM samples").fetchone()[0]
    store.roll_up(now, Retention(raw=60, minute=1e9, quarter=1e9))
    # The wall clock goes back 50 minutes: the next samples land in buckets already rolled up.
    machine = collector.machine
    for _ in range(120):
        snap = collector.sample()
        recorder.record(dataclasses.replace(snap, time=snap.time - 3000))
        machine.backend.sleep(threading.Event(), 10.0)
    before = totals(store)
    store.roll_up(now + 1200, Retention(raw=60, minute=1e9, quarter=1e9))
    assert_same_totals(before, totals(store))
    # One row per bucket, GPU (and job): merged, never two.
    dup = store.conn.execute("SELECT count(*) FROM (SELECT tier, t, gpu FROM gpu_rollup GROUP BY tier, t, gpu "
                             "HAVING count(*) > 1)").fetchone()[0]
    assert dup == 0
    store.close()


def test_the_size_bound_drops_the_oldest_rows_first(stepped, tmp_path):
    """Two days of an idle machine (GPU rows only, no process rows): the bound still holds."""
    idle = {"gpus": [{"memory_total": "80GiB"} for _ in range(4)]}
    store = Store.open(tmp_path / "h.db", write=True)
    recorder = Recorder(store, 60.0, retention=FOREVER)
    record(recorder, stepped(0, idle), 2 * 1440, 60.0)
    now = store.conn.execute("SELECT max(t) FROM samples").fetchone()[0]
    keep = Retention(raw=6 * 3600, minute=24 * 3600, quarter=1e9)
    store.roll_up(now, keep)
    full = store.size()
    newest = store.conn.execute("SELECT max(t) FROM samples").fetchone()[0]
    oldest = store.conn.execute("SELECT min(t) FROM gpu_time").fetchone()[0]
    bound = full // 2
    store.roll_up(now, dataclasses.replace(keep, max_bytes=bound))
    assert store.size() <= bound
    # The oldest went; the newest sample is still there.
    assert store.conn.execute("SELECT min(t) FROM gpu_time").fetchone()[0] > oldest
    assert store.conn.execute("SELECT max(t) FROM samples").fetchone()[0] == newest
    store.close()
    # The file itself shrinks (incremental vacuum), once the store settles on close.
    assert (tmp_path / "h.db").stat().st_size <= bound + 64 * 1024


def test_a_rollup_step_that_fails_is_said_once_and_the_others_still_run(stepped, tmp_path):
    """A step of retention that fails (a trigger refuses 15-minute rows) is said once as the
    rollup's failure, not as samples lost; raw rows still go into minutes; once it works again,
    that is said too."""
    said: list[str] = []
    store = Store.open(tmp_path / "h.db", write=True)
    store.conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON gpu_rollup WHEN new.tier = 900 "
                       "BEGIN SELECT RAISE(ABORT, 'no quarters here'); END")
    recorder = Recorder(store, 60.0, retention=Retention(raw=3600, minute=3600, quarter=1e9), say=said.append)
    machine = stepped()
    record(recorder, machine, 4 * 60, 60.0)
    assert len(said) == 1 and "no quarters here" in said[0], said
    assert "the history could not be rolled up; samples are still recorded" in said[0]
    assert recorder.dropped == 0
    newest, oldest = store.conn.execute("SELECT max(t), min(t) FROM samples").fetchone()
    assert oldest >= newest - 3600 - 300 - 60  # raw rows past their hour went into minutes all the same
    store.conn.execute("DROP TRIGGER refuse")
    record(recorder, machine, 10, 60.0)
    assert said[1:] == ["the history is rolled up again"]
    assert store.conn.execute("SELECT count(*) FROM gpu_rollup WHERE tier = 900").fetchone()[0]
    store.close()


# ------------------------------------------------------------------ 6. clock jumps, a lost GPU, the driver

def test_wall_clock_jumps_neither_inflate_time_nor_split_jobs(stepped, tmp_path):
    said: list[str] = []
    store = Store.open(tmp_path / "h.db", write=True)
    recorder = Recorder(store, 10.0, say=said.append)

    def shift(i: int) -> float:  # a day ahead after 100 samples, back 2 days after 200, then steady
        return 0.0 if i < 100 else 86400.0 if i < 200 else -86400.0

    record(recorder, stepped(), 300, 10.0, shift)
    c = store.conn
    # 299 intervals of 10 s were recorded, whatever the wall clock said.
    assert c.execute("SELECT SUM(seconds) FROM gpu_time WHERE gpu = 0").fetchone()[0] == 2990
    jobs = c.execute("SELECT pid, count(*), SUM(t.gpu_seconds) FROM jobs JOIN job_totals t ON t.id = jobs.id "
                     "GROUP BY pid").fetchall()
    assert [(pid, n) for pid, n, _ in jobs] == [(101, 1), (102, 1), (103, 1)]
    assert dict((pid, s) for pid, _, s in jobs)[101] == 2 * 2990  # two GPUs, every interval
    assert [line for line in said if "clock" in line] == [
        "the system clock jumped ahead by 1d00h; recorded time is measured on the monotonic clock, "
        "so nothing is counted twice or lost",
        "the system clock jumped back by 2d00h; recorded time is measured on the monotonic clock, "
        "so nothing is counted twice or lost"]
    # A year ahead: rollups and retention follow the monotonic clock, so no history expires.
    before = totals(store)
    record(recorder, stepped(3000), 40, 10.0, lambda i: 400 * 86400.0)
    assert all(before["job"][j][0] <= totals(store)["job"][j][0] for j in before["job"])
    store.close()


def test_a_gpu_lost_mid_recording_and_back(stepped, tmp_path):
    said: list[str] = []
    store = Store.open(tmp_path / "h.db", write=True)
    recorder = Recorder(store, 60.0, say=said.append)
    record(recorder, stepped(), 10, 60.0)
    lost = json.loads(json.dumps(SCENARIO))
    lost["gpus"][1]["lost"] = True
    # What a driver reload does: the recorder reads a freshly opened machine from then on.
    record(recorder, stepped(600, lost), 10, 60.0)
    record(recorder, stepped(1200, SCENARIO), 10, 60.0)
    c = store.conn
    assert c.execute("SELECT count(*) FROM gpu_raw WHERE gpu = 1 AND lost").fetchone()[0] == 10
    assert c.execute("SELECT SUM(span) FROM samples").fetchone()[0] == 29 * 60  # nothing skipped
    # ben's job on GPU 1 is one life, not credited while its GPU was lost.
    assert c.execute("SELECT count(*), SUM(t.gpu_seconds) FROM jobs JOIN job_totals t ON t.id = jobs.id "
                     "WHERE pid = 102").fetchone() == (1, 19 * 60)
    assert said == ["GPU 1 is lost (GPU is lost (fell off the bus or needs a reset)); recording it as lost "
                    "until it is back", "GPU 1 is back; recording it again"]
    store.close()


def test_a_driver_that_fails_and_comes_back(cli, monkeypatch, tmp_path):
    """vram record itself: NVML starts failing mid-recording (the library shut down under it, as in
    a driver reload), cannot be opened again for a while, then can: one line each way, exit 0."""
    scenario = tmp_path / "machine.json"
    scenario.write_text(json.dumps(SCENARIO))
    broken = dict(SCENARIO, faults={"driver": "not_loaded"})
    monkeypatch.setenv("VRAM_SIM_CLOCK", "stepped")
    monkeypatch.setenv("VRAM_SIM_EPOCH", f"{EPOCH:.0f}")
    calls = {"n": 0}
    real_sample = Collector.sample

    def sample(self: Collector):
        calls["n"] += 1
        if calls["n"] == 5:  # the driver goes away under a running recorder
            self.machine.backend.sim.nvmlShutdown()
            scenario.write_text(json.dumps(broken))
        if calls["n"] == 9:  # ... and is back
            scenario.write_text(json.dumps(SCENARIO))
        return real_sample(self)

    monkeypatch.setattr(Collector, "sample", sample)
    db = tmp_path / "h.db"
    rc, out, err = cli("record", "--simulate", str(scenario), "--db", str(db), "--interval", "60s", "--samples", "12")
    assert rc == 0, err
    lines = err.splitlines()
    assert len([ln for ln in lines if "cannot read the GPUs" in ln]) == 1, lines
    assert len([ln for ln in lines if "reading the GPUs again" in ln]) == 1, lines
    assert "Traceback" not in err and "internal error" not in err
    store = Store.open(db)
    try:
        # Readings 5 to 9 failed (9: the driver is back, but the old handles are dead: reopened);
        # --samples counts attempts, so 12 readings were made and 7 of them recorded.
        assert store.conn.execute("SELECT count(*) FROM samples").fetchone()[0] == 7
        assert calls["n"] == 12
        assert store.conn.execute("SELECT count(*) FROM jobs WHERE pid = 102").fetchone()[0] == 1
    finally:
        store.close()


def test_holding_keeps_idle_since_across_samples_and_a_killed_restart(stepped, tmp_path):
    """ben (pid 102) holds memory idle from the first sample: idle_since stays that first time
    while recording is unbroken, also across a recorder that was killed and restarted at once."""
    path = tmp_path / "h.db"
    store = Store.open(path, write=True)
    recorder = Recorder(store, 60.0)
    record(recorder, stepped(), 5, 60.0)
    # Killed: nothing more is written (no close, no final credit); the lock goes with the process.
    store.conn.close()
    assert store._lock_fd is not None
    os.close(store._lock_fd)
    store = Store.open(path, write=True)
    recorder = Recorder(store, 60.0)
    record(recorder, stepped(300), 5, 60.0)
    since = store.conn.execute("SELECT h.idle_since FROM holding h JOIN jobs j ON j.id = h.job "
                               "WHERE j.pid = 102").fetchall()
    assert since == [(EPOCH,)]
    assert store.conn.execute("SELECT count(*) FROM jobs WHERE pid = 102").fetchone()[0] == 1
    assert store.conn.execute("SELECT SUM(span) FROM samples").fetchone()[0] == 9 * 60
    store.close()


def test_store_open_refuses_without_changing_anything(tmp_path):
    missing = tmp_path / "none.db"
    with pytest.raises(Exception, match="no history at"):
        Store.open(missing)
    assert not missing.exists()
    assert not Path(f"{missing}-wal").exists()


def test_a_recorder_failing_every_sample_says_so_once(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("VRAM_SIM_CLOCK", "stepped")

    def broken(self, snap):
        raise ValueError("broken on purpose")

    monkeypatch.setattr(Recorder, "record", broken)
    monkeypatch.setattr(Recorder, "__call__", broken)
    rc, _, err = cli("record", "--simulate", "demo", "--db", str(tmp_path / "h.db"), "--duration", "10m")
    assert rc == 0
    assert [ln for ln in err.splitlines() if "internal error" in ln] == [
        "vram record: internal error in the recorder: ValueError: broken on purpose"]


def test_idle_since_the_epoch_itself_is_kept(stepped, monkeypatch, tmp_path):
    """An idle time that began at t=0 (a clock at the unix epoch) is a time, not 'no time'."""
    monkeypatch.setenv("VRAM_SIM_EPOCH", "0")
    store = Store.open(tmp_path / "h.db", write=True)
    record(Recorder(store, 60.0), stepped(), 3, 60.0)
    since = store.conn.execute("SELECT h.idle_since FROM holding h JOIN jobs j ON j.id = h.job "
                               "WHERE j.pid = 102").fetchall()
    assert since == [(0.0,)]
    store.close()
