"""Alerts from snapshot history (vramkit.alerts), with hand-built snapshots: no Textual, no NVML."""

from __future__ import annotations

import pytest

from vramkit.alerts import History, Thresholds, evaluate, growth, trend
from vramkit.gpu_state import Device, GpuProcess, Snapshot
from vramkit.idle import IdleClock

GiB = 1024**3
TOTAL = 80 * GiB


def dev(index=0, used=10 * GiB, util=50, procs=(), lost=False) -> Device:
    if lost:
        return Device(index=index, lost=True, error="GPU is lost")
    return Device(index=index, memory_total=TOTAL, memory_used=used, memory_free=TOTAL - used,
                  utilization=util, processes=list(procs))


def proc(pid=100, gpu=0, memory=10 * GiB, user="ann", zombie=False, start=1000.0, idle=False) -> GpuProcess:
    return GpuProcess(pid=pid, gpu=gpu, gpu_uuid=None, memory=memory, user=user, zombie=zombie,
                      start_time=start, start_ticks=int(start * 100), state="zombie" if zombie else "running",
                      idle=idle)


def feed(history: History, t: float, *gpus: Device) -> None:
    """As the collector does: the idle clock stamps each snapshot, then the history takes it."""
    snap = Snapshot(time=t, gpus=list(gpus))
    clock = history.__dict__.setdefault("test_idle_clock", IdleClock())  # one clock per history
    clock.update(snap)
    history.add(snap)


def kinds(history: History, th: Thresholds | None = None) -> list[str]:
    return [a.kind for a in evaluate(history, th)]


def test_trend_is_the_least_squares_slope():
    assert trend([(0, 0), (1, 2), (2, 4)]) == pytest.approx(2)
    assert trend([(0, 5)]) is None
    assert trend([(3, 1), (3, 2)]) is None  # no spread in time


def test_nearly_full_counts_reserved_memory_as_unusable():
    h = History()
    d = dev(used=76 * GiB)
    d.memory_free = 1 * GiB  # 3 GiB reserved by the driver
    feed(h, 0, d)
    alerts = evaluate(h)
    assert [a.kind for a in alerts] == ["nearly_full"]
    assert alerts[0].severity == "critical" and alerts[0].gpu == 0
    assert "1.0GiB free of 80.0GiB" in alerts[0].message
    h2 = History()
    feed(h2, 0, dev(used=70 * GiB))
    assert kinds(h2) == []


def test_growing_memory_gives_an_estimated_time_until_full():
    h = History()
    for t in range(0, 11):  # +1 GiB/s, from 40 GiB: 30 GiB free at t=10
        feed(h, 1000 + t, dev(used=(30 + t) * GiB))
    rate, eta = growth(h, 0, Thresholds())
    assert rate == pytest.approx(GiB)
    assert eta == pytest.approx(40)  # 40 GiB free at 1 GiB/s
    alerts = evaluate(h)
    assert [a.kind for a in alerts] == ["growing"]
    assert alerts[0].eta == pytest.approx(40)
    assert "full in ~40s" in alerts[0].message and "estimate" in alerts[0].message


def test_no_growing_alert_without_enough_history_or_after_a_plateau():
    h = History()
    feed(h, 0, dev(used=10 * GiB))
    feed(h, 1, dev(used=20 * GiB))
    assert kinds(h) == []  # two samples over one second is not a trend
    h = History()
    for t in range(0, 10):
        feed(h, t, dev(used=(20 + t) * GiB))
    for t in range(10, 40):  # then flat for 30 s
        feed(h, t, dev(used=29 * GiB))
    assert kinds(h) == []


def test_slow_growth_far_from_full_is_not_an_alert():
    h = History()
    for t in range(0, 60, 5):  # 1 MiB/s with 70 GiB free: full in ~20 h
        feed(h, t, dev(used=10 * GiB + t * 2**20))
    assert kinds(h) == []


def test_idle_holder_only_after_it_was_seen_idle_long_enough():
    th = Thresholds(idle_after=60)
    h = History()
    holder = proc(pid=38817, memory=18 * GiB, user="alice", idle=True)
    for t in range(0, 60, 10):
        feed(h, t, dev(util=0, procs=[holder]))
    assert kinds(h, th) == []  # seen idle for 50 s
    feed(h, 60, dev(util=0, procs=[holder]))
    alerts = evaluate(h, th)
    assert [a.kind for a in alerts] == ["idle_holder"]
    assert alerts[0].pid == 38817 and "alice" in alerts[0].message and "idle for 1m00s+" in alerts[0].message
    feed(h, 70, dev(util=30, procs=[proc(pid=38817, memory=18 * GiB, user="alice")]))  # busy again
    assert kinds(h, th) == []


def test_an_idle_process_on_a_busy_gpu_is_an_idle_holder():
    # The GPU is at 80% from another job; the notebook's own samples say it runs nothing.
    th = Thresholds(idle_after=30)
    h = History()
    job, notebook = proc(pid=1, memory=40 * GiB), proc(pid=2, memory=20 * GiB, user="ben", idle=True)
    for t in range(0, 40, 10):
        feed(h, t, dev(util=80, procs=[job, notebook]))
    alerts = evaluate(h, th)
    assert [(a.kind, a.pid) for a in alerts] == [("idle_holder", 2)]


def test_hundreds_of_idle_holders_are_worded_only_as_their_lines_are_shown(monkeypatch):
    """A busy server after idle_after: every holder is an alert, the view shows a few lines and
    counts the rest. Each line is worded when shown, not every holder's on every refresh."""
    from vramkit import alerts as alerts_module
    from vramkit.tui.panels import alerts_text

    worded = []
    word = alerts_module._process_message
    monkeypatch.setattr(alerts_module, "_process_message", lambda alert: worded.append(alert.pid) or word(alert))
    th = Thresholds(idle_after=60)
    h = History()
    holders = [proc(pid=1000 + i, memory=2 * GiB, user="ann", idle=True) for i in range(500)]
    for t in range(0, 70, 10):
        feed(h, t, dev(util=0, used=79 * GiB // 2, procs=holders))
    alerts = evaluate(h, th)
    assert len(alerts) == 500 and worded == []
    text = alerts_text(alerts, 120, 3).plain
    assert worded == [1000, 1001]  # two lines, then "+498 more alerts"
    assert "pid 1000 (ann) holds 2.0GiB on GPU 0, idle for 1m00s+" in text and "+498 more alerts" in text
    assert alerts[0].message is alerts[0].message  # worded once


def test_defunct_holder_and_lost_gpu():
    h = History()
    feed(h, 0, dev(index=0, procs=[proc(pid=29044, zombie=True, memory=9 * GiB)]), dev(index=1, lost=True))
    alerts = evaluate(h)
    assert [a.kind for a in alerts] == ["lost", "defunct"]  # critical first
    assert "GPU 1 lost" in alerts[0].message
    assert alerts[1].pid == 29044 and "defunct" in alerts[1].message and "9.0GiB" in alerts[1].message


def test_history_traces_processes_and_forgets_old_ones():
    h = History(keep_seconds=100)
    p = proc(pid=7, memory=1 * GiB)
    for t in range(0, 50, 10):
        feed(h, t, dev(procs=[p]))
    assert h.process(7, 0) == [(0, GiB), (40, GiB)]  # change points, plus the last time seen
    feed(h, 50, dev(procs=[proc(pid=7, memory=2 * GiB)]))
    assert h.process(7, 0)[-1] == (50, 2 * GiB)
    feed(h, 200, dev(procs=[]))
    assert h.process(7, 0) == []
    assert [s.time for s in h.gpu(0)] == [200]


def test_a_reused_pid_starts_a_new_trace():
    h = History()
    feed(h, 0, dev(procs=[proc(pid=7, memory=GiB, start=100.0)]))
    feed(h, 10, dev(procs=[proc(pid=7, memory=2 * GiB, start=500.0)]))
    assert h.process(7, 0) == [(10, 2 * GiB)]


def test_a_flat_holder_keeps_its_one_point_in_its_trace_not_in_a_tuple():
    # 1,600 processes a reading are traced for the whole window, most of them flat: the one point
    # is two fields of the trace (a tuple a process was ~56 bytes more); the series is the same.
    import gc

    history = History()
    for t in (1.0, 2.0, 3.0):
        feed(history, t, dev(procs=[proc(pid=100, memory=GiB), proc(pid=101, memory=GiB * int(t))]))
    flat, growing = history.procs[(100, 0, None)], history.procs[(101, 0, None)]
    assert not [o for o in gc.get_referents(flat) if isinstance(o, tuple)]
    assert history.process(100, 0) == [(1.0, GiB), (3.0, GiB)]
    assert history.process(101, 0) == [(1.0, GiB), (2.0, 2 * GiB), (3.0, 3 * GiB)]
    assert growing.points == [(1.0, GiB), (2.0, 2 * GiB), (3.0, 3 * GiB)]
