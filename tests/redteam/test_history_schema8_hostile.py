"""Red team of history schema 8 (442fe49, 84c074c, cffc2e4): a life's totals and last_seen are
written to `jobs` with each rollup, and readers add the raw rows after meta `jobs_through` through
the view job_totals. What must hold: a reader's totals and last_seen at any moment are those the
schema 7 recorder wrote with every sample (its last_seen: the time of the newest sample the life
was seen in); a SIGKILL anywhere, a restart, rollups that move raw rows, never lose or double a
second; a file whose jobs_through or job_totals is not what vram wrote is refused with one line
(exit 2) or read right, by readers and by the recorder, and never makes the recorder write wrong
totals into `jobs` for good."""

from __future__ import annotations

import dataclasses
import os
import random
import resource
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from helpers import clean_env, run_sql, run_vram
from test_history_job_writes import FOREVER, ONE_GPU, GiB
from test_history_store import EPOCH, stepped  # noqa: F401 - the fixture
from test_record_cli import _no_recorder_left, sample_count, start_record, stepped_env, stop, wait_until  # noqa: F401

from vramkit.collector import Collector
from vramkit.history.recorder import Recorder
from vramkit.history.store import Store

INTERVAL = 10.0


@pytest.fixture
def machine_at(stepped):  # noqa: F811 - the fixture imported
    """open(start, scenario) -> a collector of the simulated machine on a stepped clock at EPOCH + start."""
    return lambda start, scenario: Collector(stepped(start, scenario), interval=INTERVAL)


def take(recorder: Recorder, collector, samples: int, shift: float = 0.0) -> None:
    """`samples` samples INTERVAL apart on the stepped clock, each one's wall time moved by `shift`."""
    for _ in range(samples):
        snap = collector.sample()
        recorder.record(dataclasses.replace(snap, time=snap.time + shift) if shift else snap)
        collector.machine.backend.sleep(threading.Event(), INTERVAL)


def killed(store: Store) -> None:
    """The recorder's process gone (SIGKILL): nothing more is written, the lock goes with it."""
    store.conn.close()
    assert store._lock_fd is not None
    os.close(store._lock_fd)


def life(db: Path, pid: int) -> dict:
    done = run_vram("life", str(pid), "--db", str(db), "--json", env=clean_env())
    assert done.rc == 0, done.err
    one, = done.json()["lives"]
    return one


def report_last_seen(db: Path, pid: int) -> float:
    done = run_vram("report", "--db", str(db), "--since", f"@{EPOCH:.0f}", "--until", f"@{EPOCH + 3600:.0f}",
                    "--by", "life", "--json", env=clean_env())
    assert done.rc == 0, done.err
    row, = [r for r in done.json()["rows"] if r["pid"] == pid]
    return float(row["last_seen"])


def per_life(db: Path) -> tuple[dict[int, tuple], dict[int, tuple], dict[int, tuple]]:
    """(job_totals, jobs' own columns, every tier's rows): each life's gpu_seconds,
    memory_byte_seconds and idle_seconds, read as a reader reads them (read-only)."""
    c = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True, timeout=5)
    try:
        view = {r[0]: r[1:] for r in c.execute(
            "SELECT id, gpu_seconds, memory_byte_seconds, idle_seconds FROM job_totals")}
        own = {r[0]: r[1:] for r in c.execute("SELECT id, gpu_seconds, memory_byte_seconds, idle_seconds FROM jobs")}
        tiers = {r[0]: r[1:] for r in c.execute(
            "SELECT job, SUM(seconds), SUM(coalesce(memory, 0) * seconds), SUM(idle_seconds) FROM proc_time "
            "GROUP BY job")}
    finally:
        c.close()
    for job in view.keys() - tiers.keys():  # a life seen only in its newest sample: nothing yet
        tiers[job] = (0.0, 0.0, 0.0)
    return view, own, tiers


def assert_same(got: dict[int, tuple], want: dict[int, tuple], what: str) -> None:
    assert got.keys() == want.keys(), what
    for job in want:
        assert got[job] == pytest.approx(want[job], rel=1e-9, abs=1e-6), (what, job)


# ---------------------------------------------------------------- 1. a wall clock that went back
def test_last_seen_after_the_wall_clock_went_back_is_the_newest_samples(machine_at, tmp_path):
    """Schema 7 wrote last_seen = the sample's time with every sample, so after the wall clock
    went back 25 s a life's last_seen was the newest sample's time. The view takes the larger of
    `jobs`' (written before the jump) and the raw rows', so a reader between two rollups says the
    life was last seen at a time no sample after it has, and the same reader after close() (which
    writes the recorder's own last_seen: no new sample) says another time. FAILS on 442fe49."""
    db = tmp_path / "h.db"
    store = Store.open(db, write=True)
    recorder = Recorder(store, INTERVAL, retention=FOREVER)
    one = machine_at(0, ONE_GPU)
    take(recorder, one, 3)  # t = 0, 10, 20 (the totals written at 0)
    take(recorder, one, 2, shift=-25.0)  # t = 5, 15: the wall clock went back 25 s
    newest = store.conn.execute("SELECT t FROM samples ORDER BY id DESC LIMIT 1").fetchone()[0]
    assert newest == EPOCH + 15
    between = (life(db, 102)["last_seen_timestamp"], report_last_seen(db, 102))
    recorder.close(one.machine.backend.monotonic())
    after = (life(db, 102)["last_seen_timestamp"], report_last_seen(db, 102))
    assert after == (newest, newest)  # what the recorder itself writes
    assert between == after, "a reader's last_seen moved with no sample taken"


def test_last_seen_after_a_kill_and_a_clock_that_went_back(machine_at, tmp_path):
    """The same after a SIGKILL: the restart's fold takes max(last_seen, newest row) into `jobs`
    for good, where a recorder that had not been killed writes the newest sample's time.
    FAILS on 442fe49."""
    db = tmp_path / "h.db"
    store = Store.open(db, write=True)
    recorder = Recorder(store, INTERVAL, retention=FOREVER)
    one = machine_at(0, ONE_GPU)
    take(recorder, one, 3)
    take(recorder, one, 2, shift=-25.0)
    killed(store)
    store = Store.open(db, write=True)
    Recorder(store, INTERVAL, retention=FOREVER).close()
    assert life(db, 102)["last_seen_timestamp"] == EPOCH + 15


# ---------------------------------------------------------------- 2. jobs_through not a sample id
BAD_THROUGH = {
    "text": "UPDATE meta SET value = 'seven' WHERE key = 'jobs_through'",
    "negative": "UPDATE meta SET value = '-5' WHERE key = 'jobs_through'",
    "blob": "UPDATE meta SET value = x'00ff' WHERE key = 'jobs_through'",
    "fraction": "UPDATE meta SET value = '3.9' WHERE key = 'jobs_through'",
    "missing": "DELETE FROM meta WHERE key = 'jobs_through'",
    "beyond_the_newest_sample": "UPDATE meta SET value = '1000' WHERE key = 'jobs_through'",
    "huge": "UPDATE meta SET value = '99999999999999999999999' WHERE key = 'jobs_through'",
}


@pytest.fixture
def killed_at_80(machine_at, tmp_path) -> Path:
    """A recorder killed at 80 s (the totals written at 0 and 60 s): ben (pid 102) held 4 GiB
    idle for 80 s, 20 of them only in raw rows after jobs_through."""
    db = tmp_path / "h.db"
    store = Store.open(db, write=True)
    take(Recorder(store, INTERVAL, retention=FOREVER), machine_at(0, ONE_GPU), 9)
    killed(store)
    assert life(db, 102)["gpu_seconds"] == 80
    return db


def _one_line_exit_2(done, *words: str) -> None:
    assert done.rc == 2, (done.rc, done.out[-300:], done.err)
    lines = done.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.err, done.err
    assert all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize("bad", sorted(BAD_THROUGH))
def test_readers_refuse_a_jobs_through_that_is_no_sample_id_or_read_right(killed_at_80, bad):
    """`vram life` and `vram report --by life` on a file whose jobs_through is not a sample id
    vram could have written: one line naming it (exit 2), or the true totals (80 s). On 442fe49
    the view reads text, a blob, a negative or a missing mark as 0 (every raw row counted again:
    140 s, said nowhere), a fraction as its integer part, and a mark beyond the newest sample as
    'nothing after it' (60 s and last seen at 60 s). FAILS on 442fe49 for each."""
    db = killed_at_80
    run_sql(db, BAD_THROUGH[bad])
    done = run_vram("life", "102", "--db", str(db), "--json", env=clean_env())
    if done.rc == 0:
        one, = done.json()["lives"]
        assert (one["gpu_seconds"], one["idle_seconds"], one["memory_byte_seconds"], one["last_seen_timestamp"]) == (
            80, 80, 80 * 4 * GiB, EPOCH + 80), bad
    else:
        _one_line_exit_2(done, "jobs_through")
    done = run_vram("report", "--db", str(db), "--since", f"@{EPOCH:.0f}", "--until", f"@{EPOCH + 3600:.0f}",
                    "--by", "life", "--json", env=clean_env())
    if done.rc == 0:
        assert {r["pid"]: float(r["last_seen"]) for r in done.json()["rows"]} == {101: EPOCH + 80, 102: EPOCH + 80}
    else:
        _one_line_exit_2(done, "jobs_through")


@pytest.mark.parametrize("bad", sorted(BAD_THROUGH))
def test_the_recorder_never_folds_a_jobs_through_that_is_no_sample_id(killed_at_80, bad):
    """The recorder restarted on such a file (its own file, spoiled by a crash, a bad copy or a
    hand edit): it refuses it with one line (exit 2, as it refuses meta hour_* that is not a
    number) or its fold leaves each life's totals those of its rows. On 442fe49 _validate does
    not look at jobs_through, and Store.fold_job_totals adds every raw row into `jobs` again
    (or none of the 20 s after the mark), then moves the mark to the newest sample: the wrong
    totals are in `jobs` for good. FAILS on 442fe49 for each."""
    db = killed_at_80
    run_sql(db, BAD_THROUGH[bad])
    scenario = db.parent / "scenario.json"  # the fixture's (ONE_GPU)
    done = run_vram("record", "--simulate", str(scenario), "--db", str(db), "--interval", "10s", "--samples", "2",
                    "--quiet", env=stepped_env(90))
    if done.rc != 0:
        _one_line_exit_2(done, "jobs_through")
        return
    view, own, tiers = per_life(db)
    assert_same(view, tiers, "job_totals")
    assert_same(own, tiers, "jobs after a clean stop")


# ---------------------------------------------------------------- 3. job_totals not vram's view
@pytest.mark.parametrize("spoil", [
    "DROP VIEW job_totals; CREATE TABLE job_totals (x)", "DROP VIEW job_totals",
    # another view under the name: totals of its own making (here doubled), or one that never ends
    "DROP VIEW job_totals; CREATE VIEW job_totals AS SELECT id, last_seen, 2 * gpu_seconds AS gpu_seconds, "
    "memory_byte_seconds, idle_seconds FROM jobs",
    "DROP VIEW job_totals; CREATE VIEW job_totals AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
    "FROM n) SELECT j.id, j.last_seen, j.gpu_seconds, j.memory_byte_seconds, j.idle_seconds FROM jobs j, n"])
def test_a_file_without_the_view_is_one_line_exit_2(killed_at_80, spoil):
    """Another user's file (read with --db) whose job_totals is a table, is not there, or is a view
    other than vram's: one line, exit 2, no traceback, no reader that never answers. The first two
    hold on 442fe49; the other views were read as the totals (doubled) or hung (7f197b0)."""
    run_sql(killed_at_80, spoil)
    for args in (("life", "102"), ("report", "--since", f"@{EPOCH:.0f}", "--until", f"@{EPOCH + 3600:.0f}",
                                   "--by", "life")):
        for json_flag in ((), ("--json",)):
            done = run_vram(*args, *json_flag, "--db", str(killed_at_80), env=clean_env())
            _one_line_exit_2(done, str(killed_at_80))


def test_a_schema_7_file_whose_upgrade_fails_is_left_as_it_was(machine_at, tmp_path):
    """The migration 7 -> 8 fails half way (here: an object already named job_totals, so CREATE
    VIEW fails after jobs_through is written): one line, exit 2, and the file still schema 7
    with no jobs_through (a 035a53a recorder can go on with it). Holds on 442fe49."""
    db = tmp_path / "h.db"
    store = Store.open(db, write=True)
    recorder = Recorder(store, INTERVAL, retention=FOREVER)
    take(recorder, machine_at(0, ONE_GPU), 9)
    recorder.close()
    run_sql(db, "DROP VIEW job_totals; DELETE FROM meta WHERE key = 'jobs_through'; PRAGMA user_version = 7; "
               "CREATE TABLE job_totals (x);")
    scenario = tmp_path / "scenario.json"
    done = run_vram("record", "--simulate", str(scenario), "--db", str(db), "--samples", "1", "--quiet",
                    env=stepped_env(90))
    _one_line_exit_2(done, str(db))
    c = sqlite3.connect(db)
    try:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 7
        assert c.execute("SELECT count(*) FROM meta WHERE key = 'jobs_through'").fetchone()[0] == 0
    finally:
        c.close()


# ---------------------------------------------------------------- 4. SIGKILL anywhere, real processes
@pytest.mark.any_user  # a recorder on its own file in tmp_path: the same whoever runs it
def test_sigkill_anywhere_each_lifes_totals_stay_its_rows(tmp_path):
    """A real `vram record` on the stepped clock (10 s samples: a rollup every 6, raw rows kept
    a minute, so every rollup moves rows out of proc_raw), SIGKILLed at random moments (in a
    sample, in a rollup, just after one), read with no restart, restarted where it stopped:
    each life's gpu_seconds, memory byte-seconds and idle seconds, as job_totals gives them,
    are always those of its rows in every tier; after a clean stop `jobs` itself holds them.
    Holds on 442fe49."""
    db = tmp_path / "h.db"
    rng = random.Random(36)
    start = 0.0
    for round_ in range(8):
        proc = start_record(db, "--interval", "10s", "--keep-raw", "60s", "--duration", "365d", "--quiet",
                            env=stepped_env(start))
        goal = sample_count(db) + rng.randrange(1, 400)
        wait_until(lambda goal=goal: sample_count(db) >= goal, proc)
        time.sleep(rng.uniform(0, 0.05))  # land anywhere: in a sample, in a rollup, just after one
        stop(proc, signal.SIGKILL)
        view, _own, tiers = per_life(db)  # read with no restart
        assert_same(view, tiers, f"job_totals after kill {round_}")
        c = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
        start = c.execute("SELECT max(t) FROM samples").fetchone()[0] - EPOCH + 10
        c.close()
    done = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "10s", "--keep-raw", "60s",
                    "--samples", "3", "--quiet", env=stepped_env(start))
    assert done.rc == 0, done.err
    view, own, tiers = per_life(db)
    assert_same(view, tiers, "job_totals after a clean stop")
    assert_same(own, tiers, "jobs after a clean stop")


# ---------------------------------------------------------------- 5. a restart on a full disk
@pytest.mark.any_user
def test_a_killed_recorder_restarted_on_a_full_disk_keeps_running_and_resumes(tmp_path):
    """A recorder fills the disk (a file size limit: 400 KiB), is SIGKILLed, and is started
    again while the disk is still full (a service restarted by systemd, a reboot). 035a53a
    started, said once that samples are not being recorded, retried every interval and recorded
    again once there was room. On 442fe49 the new recorder's Store.fold_job_totals must write
    before the first sample (even when the rows after jobs_through are only the killed
    recorder's newest sample, whose span is 0: it adds nothing), fails, and `vram record`
    exits 2 at start: it never records again by itself. FAILS on 442fe49."""
    db, errors = tmp_path / "history.db", tmp_path / "stderr"
    limit = 400 * 1024

    def limited() -> None:  # in the child: files may not grow past `limit`, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    def said(words: str) -> bool:
        return words in errors.read_text()

    proc = start_record(db, "--interval", "10s", "--duration", "365d", env=stepped_env(), stderr=errors,
                        preexec_fn=limited)
    wait_until(lambda: said("samples are not being recorded"), proc)
    stop(proc, signal.SIGKILL)
    c = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    newest = c.execute("SELECT max(t) FROM samples").fetchone()[0]
    c.close()
    assert newest is not None  # samples were written before the disk filled

    proc = start_record(db, "--interval", "10s", "--duration", "365d", env=stepped_env(newest - EPOCH + 10),
                        stderr=errors, preexec_fn=limited)
    try:
        wait_until(lambda: said("samples are not being recorded") or proc.poll() is not None)
        assert proc.poll() is None, errors.read_text()
        n_full = sample_count(db)
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        wait_until(lambda: said("recording again"), proc)
        wait_until(lambda: sample_count(db) >= n_full + 20, proc)
    finally:
        stop(proc, signal.SIGTERM)
    assert proc.returncode == 0, errors.read_text()
    view, own, tiers = per_life(db)
    assert_same(view, tiers, "job_totals")
    assert_same(own, tiers, "jobs after a clean stop")


# ---------------------------------------------------------------- 6. the view's cost in a report
def _steps(store: Store, ids: set[int]) -> int:
    """SQLite's virtual machine steps (in thousands) of query._lives over these lives: the work
    a report does to read their rows of `jobs` (and, from schema 8, their last_seen through
    job_totals). A count, not a time: the same on any machine and load."""
    from vramkit.history import query

    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0
    store.conn.set_progress_handler(tick, 1000)
    try:
        assert len(query._lives(store, ids)) == len(ids)
    finally:
        store.conn.set_progress_handler(None, 0)
    return steps[0]


def test_a_report_reads_the_rows_after_jobs_through_once_not_once_per_500_lives(stepped, tmp_path):  # noqa: F811
    """2,000 lives (each a process on one GPU) in 6 samples, none of them in `jobs`' totals yet
    (written at the first sample, the next write 60 s on): reports read each life's last_seen
    through job_totals, 500 lives a statement (SQLite's parameter bound), and on 442fe49 each
    statement aggregates every raw row after jobs_through again (MATERIALIZE of the whole
    GROUP BY, then an automatic index): the work above the same read of the closed file (nothing
    after the mark) grows with the number of chunks. Measured ad hoc on bench_report's year file
    (8 GPUs, 200 lives, raw rows at 60 s) with 20,200 lives in `jobs`: query._lives 130 ms (v7:
    jobs' own columns) -> 134 (nothing after the mark) / 175 (12 samples after it) / 316 ms
    (60 samples after it: a recorder at 1 s). Here: the extra work of 4 chunks is at most 1.5x
    that of 1. FAILS on 442fe49 (about 4x)."""
    many = {"gpus": [{"memory_total": "80GiB"}],
            "processes": [{"pid": 20000 + i, "user": f"u{i % 7}", "command": "python", "gpus": {"0": "10MiB"}}
                          for i in range(2000)]}
    db = tmp_path / "h.db"
    store = Store.open(db, write=True)
    recorder = Recorder(store, INTERVAL, retention=FOREVER)
    collector = Collector(stepped(0, many), interval=INTERVAL)
    take(recorder, collector, 6)
    assert store.meta("jobs_through") == "0"
    ids = sorted(r[0] for r in store.conn.execute("SELECT id FROM jobs"))
    assert len(ids) == 2000
    behind = {n: _steps(store, set(ids[:n])) for n in (500, 2000)}
    recorder.close(collector.machine.backend.monotonic())
    store = Store.open(db)
    assert store.meta("jobs_through") == str(store.conn.execute("SELECT max(id) FROM samples").fetchone()[0])
    written = {n: _steps(store, set(ids[:n])) for n in (500, 2000)}
    store.close()
    extra = {n: behind[n] - written[n] for n in (500, 2000)}
    assert extra[2000] <= 1.5 * extra[500], (behind, written)
