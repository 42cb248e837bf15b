"""The idle clock inside a container (vramkit.idle.IdleClock): a row NVML lists under a host pid
no process here could be told to be (nvml_pid set, host_missing says why) has its own clock, not
the one of the process here numbered as that host pid."""

from __future__ import annotations

from vramkit.gpu_state import Device, GpuProcess, Snapshot
from vramkit.idle import IdleClock

GiB = 1024**3


def _snapshot(t: float, here_idle: bool, outside_first: bool = False) -> tuple[Snapshot, GpuProcess, GpuProcess]:
    # no start ticks on either (a process whose host side is unknown has none): the pid tells them apart
    here = GpuProcess(pid=7, gpu=0, gpu_uuid=None, memory=2 * GiB, idle=here_idle)
    outside = GpuProcess(pid=7, gpu=0, gpu_uuid=None, memory=9 * GiB, idle=True, nvml_pid=7,
                         host_missing="host pid 7, of another PID namespace")
    dev = Device(index=0, memory_total=80 * GiB, memory_used=11 * GiB, memory_free=69 * GiB, utilization=0,
                 processes=[outside, here] if outside_first else [here, outside])
    return Snapshot(time=t, gpus=[dev]), here, outside


def test_a_process_here_does_not_take_the_idle_time_of_an_outside_host_pid_of_its_number():
    clock = IdleClock()
    snap, here, outside = _snapshot(0, here_idle=False)
    clock.update(snap)
    assert here.idle_for is None and outside.idle_for == 0
    snap, here, outside = _snapshot(300, here_idle=True)  # pid 7 here goes idle now; outside idle since 0
    clock.update(snap)
    assert (here.idle_for, outside.idle_for) == (0, 300)
    snap, here, outside = _snapshot(400, here_idle=True)
    clock.update(snap)
    assert (here.idle_for, outside.idle_for) == (100, 400)


def test_recorded_idle_time_of_a_pid_here_is_not_given_to_an_outside_host_pid_of_its_number():
    """History's pids are this /proc's: its idle start for pid 7 here is pid 7's, which is busy."""
    clock = IdleClock()
    clock.seed({(7, None, 0): -500.0})
    snap, here, outside = _snapshot(0, here_idle=False, outside_first=True)  # NVML lists it first
    clock.update(snap)
    assert here.idle_for is None and outside.idle_for == 0
