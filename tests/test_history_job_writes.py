"""The recorder's writes of `jobs` (issue 36): each sample updates every life it saw, but writes a
life's peak and GPUs only when they changed, and a write that fails leaves memory as the file is,
so a change made in the failed sample is written with the next one. Each life's totals in `jobs`
stay exactly those of its raw rows."""

from __future__ import annotations

import json
import threading

import pytest

from vramkit.collector import Collector
from vramkit.history.recorder import Recorder
from vramkit.history.store import Retention, Store
from vramkit.machine import open_machine

EPOCH = 1767225600.0
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
def machine_at(monkeypatch, tmp_path):
    for key in ("VRAM_SIMULATE", "VRAM_SIM_TIME", "VRAM_SIM_EPOCH", "VRAM_SIM_CLOCK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_CLOCK", "stepped")
    monkeypatch.setenv("VRAM_SIM_EPOCH", f"{EPOCH:.0f}")

    def open_at(start: float, scenario: dict) -> Collector:
        path = tmp_path / f"scenario-{start:g}.json"
        path.write_text(json.dumps(scenario))
        monkeypatch.setenv("VRAM_SIM_TIME", f"{start:g}")
        return Collector(open_machine(str(path)), interval=10.0)
    return open_at


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
