"""Alerts inside a container (vramkit.alerts): a row NVML lists under a host pid that no process
here could be told to be (pidmap.py: nvml_pid set, host_missing says why) is named as a host pid,
never as the pid here of that number, which may be another process."""

from __future__ import annotations

from vramkit.alerts import History, evaluate
from vramkit.gpu_state import Device, GpuProcess, Snapshot

GiB = 1024**3


def test_a_defunct_row_outside_the_container_is_named_by_its_host_pid():
    outside = GpuProcess(pid=4242, gpu=0, gpu_uuid=None, memory=9 * GiB, zombie=True, nvml_pid=4242,
                         host_missing="host pid 4242, of another PID namespace: no process of this container "
                                      "holds GPU 0 open, so it runs outside it")
    here = GpuProcess(pid=7, gpu=0, gpu_uuid=None, memory=2 * GiB, user="ann", zombie=True, start_ticks=100)
    history = History()
    history.add(Snapshot(time=0, gpus=[Device(index=0, memory_total=80 * GiB, memory_used=11 * GiB,
                                              memory_free=69 * GiB, utilization=0, processes=[outside, here])]))
    alerts = {a.message: a.pid for a in evaluate(history) if a.kind == "defunct"}
    assert alerts == {"host pid 4242, of another PID namespace is defunct and still holds 9.0GiB on GPU 0": None,
                      "pid 7 (ann) is defunct and still holds 2.0GiB on GPU 0": 7}, alerts


def test_a_process_here_and_an_outside_host_pid_of_its_number_keep_their_own_memory_history():
    """pid 7 here holds 2 GiB on GPU 0 and grows to 4; host pid 7 outside holds 9 GiB there: each
    row's series (the live view's detail) is its own, not one trace the other resets."""
    def rows(mine: int) -> list[GpuProcess]:
        outside = GpuProcess(pid=7, gpu=0, gpu_uuid=None, memory=9 * GiB, nvml_pid=7,
                             host_missing="host pid 7, of another PID namespace")
        here = GpuProcess(pid=7, gpu=0, gpu_uuid=None, memory=mine * GiB, user="ann", start_ticks=100)
        return [here, outside]

    history = History()
    for t, mine in ((0, 2), (10, 4)):
        history.add(Snapshot(time=t, gpus=[Device(index=0, memory_total=80 * GiB, memory_used=None,
                                                  memory_free=None, utilization=0, processes=rows(mine))]))
    here, outside = rows(0)
    assert history.process(here.pid_key, 0) == [(0, 2 * GiB), (10, 4 * GiB)]
    assert history.process(outside.pid_key, 0) == [(0, 9 * GiB), (10, 9 * GiB)]
