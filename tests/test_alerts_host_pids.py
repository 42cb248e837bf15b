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
