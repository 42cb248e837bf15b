"""The collector: one reader of the Machine, many consumers, one idle clock."""

from __future__ import annotations

import threading
import time

import pytest

import vramkit
from vramkit.collector import Collector
from vramkit.errors import RequestError, VramkitError
from vramkit.gpu_state import Device, GpuProcess, Snapshot
from vramkit.idle import IdleClock


@pytest.fixture
def collector():
    c = Collector(vramkit.open_machine("demo"), interval=0.05, keep=3)
    yield c
    c.close()


def test_every_consumer_gets_the_same_sample(collector):
    seen_a, seen_b = [], []
    collector.subscribe(seen_a.append)
    stop_b = collector.subscribe(seen_b.append)
    first = collector.sample()
    stop_b()
    second = collector.snapshot()  # a Collector stands where a Machine does
    assert seen_a == [first, second] and seen_a[0] is first
    assert seen_b == [first]
    assert collector.latest is second


def test_the_ring_keeps_the_newest(collector):
    taken = [collector.sample() for _ in range(5)]
    assert list(collector.recent) == taken[-3:]


def test_the_idle_clock_runs_across_samples(collector):
    first = collector.sample()
    time.sleep(0.2)
    second = collector.sample()
    idle = {p.pid: p.idle_for for p in second.processes if p.idle}
    assert 38817 in idle  # the demo's idle notebook: no kernels of its own
    # On the monotonic clock, which does not jump with the wall clock: close to the time between.
    assert idle[38817] == pytest.approx(second.time - first.time, abs=0.05) and idle[38817] >= 0.2
    busy = [p for p in second.processes if p.pid == 41234]
    assert busy and all(p.idle_for is None for p in busy)


def test_a_one_shot_snapshot_has_seen_one_sample():
    snap = vramkit.snapshot("demo")
    assert {p.pid: p.idle_for for p in snap.processes if p.idle} == {38817: 0.0}


def test_the_background_loop_fans_out_and_survives_errors(collector):
    got: list[Snapshot] = []
    enough = threading.Event()
    errors: list[Exception] = []
    real = collector.machine.snapshot
    calls = {"n": 0}

    def flaky(extras: frozenset[str], usage_pids: set[int] | None) -> Snapshot:  # what the collector asks
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("the driver hiccuped")
        return real(extras, usage_pids)

    collector.machine.snapshot = flaky  # type: ignore[method-assign]
    collector.on_error = errors.append
    collector.subscribe(lambda s: (got.append(s), len(got) >= 3 and enough.set()))
    collector.start()
    assert enough.wait(10)
    collector.stop()
    assert len(got) >= 3 and collector.errors == 1
    assert [str(e) for e in errors] == ["the driver hiccuped"]
    assert not any(t.name == "vramkit-collector" for t in threading.enumerate())


def test_the_interval_is_checked_in_the_library():
    machine = vramkit.open_machine("demo")
    try:
        with pytest.raises(RequestError) as e:
            Collector(machine, interval=0)
        assert isinstance(e.value, VramkitError) and e.value.param == "interval"
        assert "--" not in str(e.value)
    finally:
        machine.close()


def _snap(t: float, ticks: int, sm: int) -> Snapshot:
    p = GpuProcess(pid=7, gpu=0, gpu_uuid=None, memory=1 << 30, sm_utilization=sm, start_ticks=ticks)
    dev = Device(index=0, utilization=50, processes=[p])
    p.idle = sm == 0  # idle.idle_now on this row
    return Snapshot(time=t, gpus=[dev])


def test_the_idle_clock_does_not_jump_with_the_wall_clock():
    clock = IdleClock()
    for wall, steady in ((1000.0, 5.0), (999_999.0, 6.0)):  # the wall clock stepped by days
        snap = _snap(wall, ticks=100, sm=0)
        clock.update(snap, steady)
    assert snap.processes[0].idle_for == 1.0


def test_a_failing_consumer_does_not_stop_the_others(collector):
    got: list[Snapshot] = []
    errors: list[Exception] = []
    collector.on_error = errors.append

    def broken(snap: Snapshot) -> None:
        raise RuntimeError("consumer bug")

    collector.subscribe(broken)
    collector.subscribe(got.append)
    snap = collector.sample()
    assert got == [snap] and [str(e) for e in errors] == ["consumer bug"]


def test_idle_clock_restarts_for_a_reused_pid_and_after_work():
    clock = IdleClock()
    for t in (0, 10, 20):
        snap = _snap(t, ticks=100, sm=0)
        clock.update(snap)
    assert snap.processes[0].idle_for == 20
    reused = _snap(30, ticks=999, sm=0)  # same pid, another process
    clock.update(reused)
    assert reused.processes[0].idle_for == 0
    busy = _snap(40, ticks=999, sm=12)
    clock.update(busy)
    assert busy.processes[0].idle_for is None
    again = _snap(50, ticks=999, sm=0)
    clock.update(again)
    assert again.processes[0].idle_for == 0


def test_kill_idle_judges_by_the_collectors_clock(children, write_scenario):
    """kill --idle T through a collector that has already seen a process idle for T selects it
    from the next sample; a fresh one samples on until T has passed. GPU 1 is at 0% (idle),
    GPU 0 at 30% (busy)."""
    from helpers import real_gpu_scenario, start_sleeper

    from vramkit.killing import Criteria, make_plan

    idle, busy = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({idle.pid: {"1": "2GiB"}, busy.pid: {"0": "2GiB"}}))
    for warm in (True, False):
        collector = Collector(vramkit.open_machine(str(path)), interval=0.05)
        samples: list[Snapshot] = []
        try:
            if warm:  # as the live view's collector would have, before its kill action
                collector.sample()
                time.sleep(0.4)
                collector.sample()
            collector.subscribe(samples.append)
            plan = make_plan(collector, Criteria(pids=(idle.pid, busy.pid), idle=0.3))
        finally:
            collector.close()
        chosen = [t.pid for t in plan.targets if t.pid == idle.pid or t.pid == busy.pid]
        assert chosen == [idle.pid], warm
        assert any(f"pid {busy.pid} was not idle" in n for n in plan.notes)
        if warm:
            assert len(samples) == 1  # the plan's own sample: the clock already said 0.4 s
        else:
            assert len(samples) > 1  # it had to watch for 0.3 s


def test_kill_idle_drops_a_process_that_works_again_while_others_are_watched(children, write_scenario):
    """A was idle long enough at the first sample; B appears later and is watched for the whole
    time. When A starts working meanwhile (its GPU goes from 0% to 80% at t=1.5 s on the scenario
    clock), it is not selected: every idle target is judged at every sample."""
    from helpers import real_gpu_scenario, start_sleeper

    from vramkit.killing import Criteria, make_plan

    a, b = start_sleeper(children), start_sleeper(children)
    data = real_gpu_scenario({a.pid: {"1": "2GiB"}, b.pid: {"0": "2GiB"}}, utilization=(0, 0))
    data["gpus"][1]["utilization"] = {"timeline": [[0, 0], [1.5, 80]], "interpolate": "step"}
    data["processes"][1]["start_at"] = "1s"
    collector = Collector(vramkit.open_machine(str(write_scenario(data))), interval=0.05)
    try:
        collector.sample()
        time.sleep(1.1)
        plan = make_plan(collector, Criteria(pids=(a.pid, b.pid), idle=1.0))
    finally:
        collector.close()
    assert [t.pid for t in plan.targets] == [b.pid]


def test_a_reading_keeps_an_unchanged_row_and_makes_a_new_one_for_what_changed(children, write_scenario):
    """The live view reads each process's usage only for the rows near the screen: a row neither
    the driver nor /proc says anything new of is the last snapshot's object (its age moves on); a
    row read with its usage, or one read so last time, is a new one, and the last snapshot's row is
    left as it was."""
    from helpers import real_gpu_scenario, start_sleeper

    kept, shown = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({kept.pid: {"1": "2GiB"}, shown.pid: {"0": "2GiB"}}))
    machine = vramkit.open_machine(str(path))
    try:
        rows = []
        for usage in ({shown.pid}, {shown.pid}, {shown.pid}, {kept.pid}):  # a new pid's usage is read once
            rows.append({p.pid: p for p in machine.snapshot(usage_pids=usage).processes})
            time.sleep(0.02)
        assert rows[2][kept.pid] is rows[1][kept.pid]  # the same object: nothing about it changed
        assert rows[2][kept.pid].cpu_percent is None
        assert rows[1][kept.pid] is not rows[0][kept.pid]  # the first was read with its usage
        assert all(rows[i][shown.pid] is not rows[i - 1][shown.pid] for i in (1, 2, 3))
        assert rows[3][kept.pid] is not rows[2][kept.pid] and rows[3][kept.pid].cpu_percent is not None
        assert rows[2][kept.pid].cpu_percent is None and rows[2][shown.pid].cpu_percent is not None  # as they were
        assert rows[3][shown.pid].cpu_percent is None and rows[3][shown.pid].user == rows[2][shown.pid].user
        assert rows[3][kept.pid].elapsed > rows[1][kept.pid].elapsed > 0  # its clock ran on
    finally:
        machine.close()
