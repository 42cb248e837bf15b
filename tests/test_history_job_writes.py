"""The recorder's writes of `jobs` (issue 36): a life's peak and GPUs in the sample that changes
them (and a write that fails leaves memory as the file is, so a change made in the failed sample is
written with the next one); its totals and last_seen with each rollup (schema 8), which readers read
through the view job_totals, exact as of the newest sample, also after a kill."""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest
from helpers import clean_env, run_vram
from test_history_store import EPOCH, stepped  # noqa: F401 - the fixture

from vramkit.collector import Collector
from vramkit.history.recorder import Recorder
from vramkit.history.store import SCHEMA_VERSION, Retention, Store

FOREVER = Retention(raw=1e9, minute=1e9, quarter=1e9, max_bytes=1 << 40)
GiB = 1 << 30

# ann's job grows on GPU 0 at 60 s; ben's stays as it is.
ONE_GPU = {
    "gpus": [{"memory_total": "80GiB", "utilization": 50}, {"memory_total": "80GiB"}],
    "processes": [
        {"pid": 101, "user": "ann", "command": "python train.py", "sm_util": 50,
         "gpus": {"0": {"timeline": [[0, "10GiB"], [60, "30GiB"]], "interpolate": "step"}}},
        {"pid": 102, "user": "ben", "command": "jupyter", "gpus": {"0": "4GiB"}, "sm_util": 0},
    ],
}
# ... then ann's job takes GPU 1 too (and holds less on GPU 0: its peak stays 30 GiB).
TWO_GPUS = {**ONE_GPU, "processes": [
    {"pid": 101, "user": "ann", "command": "python train.py", "sm_util": 50, "gpus": {"0": "20GiB", "1": "5GiB"}},
    ONE_GPU["processes"][1]]}


@pytest.fixture
def machine_at(stepped):  # noqa: F811 - the fixture imported
    """open(start, scenario) -> a collector of the simulated machine on a stepped clock at EPOCH + start."""
    return lambda start, scenario: Collector(stepped(start, scenario), interval=10.0)


def take(recorder: Recorder, collector: Collector, samples: int) -> None:
    for _ in range(samples):
        recorder.record(collector.sample())
        collector.machine.backend.sleep(threading.Event(), 10.0)


def updates_of_peak(store: Store, recorder: Recorder, collector: Collector) -> list[str]:
    """The statements of one sample that write a life's peak or GPUs."""
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    try:
        take(recorder, collector, 1)
    finally:
        store.conn.set_trace_callback(None)
    return [s for s in seen if s.lstrip().upper().startswith("UPDATE JOBS") and "peak_memory" in s]


def test_peak_and_gpus_written_when_they_change_and_after_a_failed_write(machine_at, tmp_path):
    store = Store.open(tmp_path / "h.db", write=True)
    recorder = Recorder(store, 10.0, retention=FOREVER)
    one = machine_at(0, ONE_GPU)
    take(recorder, one, 3)
    # A sample where no life's peak or GPUs change writes neither.
    assert updates_of_peak(store, recorder, one) == []
    take(recorder, one, 4)  # ann's peak grows at 60 s
    assert store.conn.execute("SELECT peak_memory, gpus FROM jobs WHERE pid = 101").fetchone() == (30 * GiB, "0")

    # The sample where ann's job takes GPU 1 cannot be written (the disk is full, say) ...
    store.conn.executescript("CREATE TABLE fail_now (x); INSERT INTO fail_now VALUES (1);"
                             "CREATE TRIGGER fail_writes BEFORE INSERT ON proc_raw "
                             "WHEN (SELECT count(*) FROM fail_now) "
                             "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;")
    two = machine_at(70, TWO_GPUS)
    take(recorder, two, 1)
    assert recorder.dropped == 1
    store.conn.execute("DELETE FROM fail_now")
    # ... the next one writes the GPU it took, and later ones do not again.
    take(recorder, two, 1)
    assert store.conn.execute("SELECT peak_memory, gpus FROM jobs WHERE pid = 101").fetchone() == (30 * GiB, "0,1")
    assert updates_of_peak(store, recorder, two) == []
    take(recorder, two, 3)
    store.conn.executescript("DROP TRIGGER fail_writes; DROP TABLE fail_now")  # not vram's: a reader refuses them
    recorder.close(two.machine.backend.monotonic())

    store = Store.open(tmp_path / "h.db")
    c = store.conn
    for pid, gpus, peak in ((101, "0,1", 30 * GiB), (102, "0", 4 * GiB)):
        job = c.execute("SELECT id, gpus, peak_memory, gpu_seconds, memory_byte_seconds, idle_seconds, last_seen "
                        "FROM jobs WHERE pid = ?", (pid,)).fetchall()
        assert len(job) == 1 and job[0][1:3] == (gpus, peak)
        raw = c.execute("SELECT SUM(s.span), SUM(p.memory * s.span), SUM(p.idle * s.span), MAX(s.t), MAX(p.memory) "
                        "FROM proc_raw p JOIN samples s ON s.id = p.sample WHERE p.job = ?", (job[0][0],)).fetchone()
        assert job[0][3:] == pytest.approx(raw[:4], rel=1e-12)
        assert raw[4] == peak
    assert c.execute("SELECT count(*) FROM samples").fetchone()[0] == 13
    store.close()


# ---------------------------------------------------------------- totals written with each rollup (schema 8)
def _killed(store: Store) -> None:
    """The recorder's process killed: nothing more is written, the lock goes with it."""
    store.conn.close()
    assert store._lock_fd is not None
    os.close(store._lock_fd)


def _life(db, pid: int) -> dict:
    done = run_vram("life", str(pid), "--db", str(db), "--json", env=clean_env())
    assert done.rc == 0, done.err
    life, = done.json()["lives"]
    return life


def _report_last_seen(db, pid: int) -> float:
    done = run_vram("report", "--db", str(db), "--since", f"@{EPOCH:.0f}", "--until", f"@{EPOCH + 3600:.0f}",
                    "--by", "life", "--json", env=clean_env())
    assert done.rc == 0, done.err
    row, = [r for r in done.json()["rows"] if r["pid"] == pid]
    return float(row["last_seen"])


def test_readers_get_exact_totals_between_writes_and_after_a_kill(machine_at, tmp_path):
    """A life's totals in `jobs` are written with each rollup (every 60 s): `vram life` and reports
    read them as of the newest sample all the same, also from a recorder killed between two
    writes; the next recorder adds what the killed one left, and goes on."""
    db = tmp_path / "h.db"
    store = Store.open(db, write=True)
    recorder = Recorder(store, 10.0, retention=FOREVER)
    take(recorder, machine_at(0, ONE_GPU), 10)  # t = 0 .. 90 s: the totals written at 0 and 60 s
    _killed(store)
    with sqlite3.connect(db) as c:  # the file's own columns are behind: 60 s of the 90
        assert c.execute("SELECT gpu_seconds FROM jobs WHERE pid = 102").fetchone() == (60.0,)
    c.close()
    # ben (pid 102) holds 4 GiB idle all along: 9 intervals of 10 s so far, last seen at 90 s.
    life = _life(db, 102)
    assert (life["gpu_seconds"], life["idle_seconds"], life["memory_byte_seconds"]) == (90, 90, 90 * 4 * GiB)
    assert life["last_seen_timestamp"] == EPOCH + 90
    assert _report_last_seen(db, 102) == EPOCH + 90

    # Restarted at 100 s: what the killed recorder left is added to `jobs` with the first sample
    # (the killed one's newest sample counts to 100 s).
    store = Store.open(db, write=True)
    recorder = Recorder(store, 10.0, retention=FOREVER)
    c = store.conn
    killed_newest = c.execute("SELECT max(id) FROM samples").fetchone()[0]
    two = machine_at(100, ONE_GPU)
    take(recorder, two, 1)
    assert c.execute("SELECT gpu_seconds, last_seen FROM jobs WHERE pid = 102").fetchone() == (100.0, EPOCH + 100)
    assert store.meta("jobs_through") == str(killed_newest)
    take(recorder, two, 4)  # t = 110 .. 140
    life = _life(db, 102)
    assert (life["gpu_seconds"], life["last_seen_timestamp"]) == (140, EPOCH + 140)
    recorder.close(two.machine.backend.monotonic())
    life = _life(db, 102)
    assert (life["gpu_seconds"], life["idle_seconds"], life["memory_byte_seconds"]) == (150, 150, 150 * 4 * GiB)
    with sqlite3.connect(db) as c:  # closed: the file's own columns hold it all
        assert c.execute("SELECT gpu_seconds, idle_seconds FROM jobs WHERE pid = 102").fetchone() == (150.0, 150.0)
    c.close()


def test_raw_rows_rolled_up_are_in_the_totals_first(machine_at, tmp_path):
    """Raw samples kept one minute: every rollup moves rows out of proc_raw, and the totals read
    always equal every tier's rows."""
    store = Store.open(tmp_path / "h.db", write=True)
    recorder = Recorder(store, 10.0, retention=Retention(raw=60, minute=1e9, quarter=1e9, max_bytes=1 << 40))
    one = machine_at(0, ONE_GPU)
    for _ in range(4):
        take(recorder, one, 7)
        read = dict(store.conn.execute("SELECT id, gpu_seconds FROM job_totals").fetchall())
        tiers = dict(store.conn.execute("SELECT job, SUM(seconds) FROM proc_time GROUP BY job").fetchall())
        assert read == pytest.approx(tiers, rel=1e-12) and tiers
    assert store.conn.execute("SELECT count(*) FROM proc_rollup").fetchone()[0] > 0
    recorder.close(one.machine.backend.monotonic())


def test_a_schema_7_file_is_upgraded_with_its_totals_as_they_were(machine_at, tmp_path):
    """Schema 7's recorder wrote the totals with every sample: the upgrade marks them as holding
    every sample there is, and readers read the same totals before and after it."""
    db = tmp_path / "h.db"
    store = Store.open(db, write=True)
    recorder = Recorder(store, 10.0, retention=FOREVER)
    take(recorder, machine_at(0, ONE_GPU), 9)
    recorder.close()
    with sqlite3.connect(db) as c:  # what schema 7's recorder left
        c.executescript("DROP VIEW job_totals; DELETE FROM meta WHERE key = 'jobs_through'; PRAGMA user_version = 7;")
        jobs = c.execute("SELECT id, gpu_seconds, memory_byte_seconds, idle_seconds, last_seen FROM jobs").fetchall()
    c.close()
    old = Store.open(db)
    assert old.version() == 7 and not old.totals_behind
    before = _life(db, 101)
    old.close()
    store = Store.open(db, write=True)
    assert store.version() == SCHEMA_VERSION == 8
    assert store.meta("jobs_through") == str(store.conn.execute("SELECT max(id) FROM samples").fetchone()[0])
    assert store.conn.execute("SELECT id, gpu_seconds, memory_byte_seconds, idle_seconds, last_seen "
                              "FROM job_totals").fetchall() == jobs
    store.close()
    assert _life(db, 101) == before
