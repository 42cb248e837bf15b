"""One consistent picture of the machine: NVML devices and processes joined with /proc.

`open_machine()` chooses the real driver or a simulated scenario (--simulate / VRAM_SIMULATE);
`Machine.snapshot()` reads it. `vramkit.snapshot()` is the one-call Python API.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .model import Device, GpuProcess, Snapshot
from .nvml.backend import Nvml, NvmlUnavailable, open_real
from .procs import NOT_VISIBLE, HostProcess, ProcessTable, sanitize

__all__ = ["Machine", "NvmlUnavailable", "open_machine", "snapshot"]


class Machine:
    """An open NVML (real or simulated) plus the process table; reuse it for repeated snapshots."""

    def __init__(self, nvml: Nvml, simulated: Any = None):
        self.nvml = nvml
        self.sim = simulated  # the SimulatedNvml, or None on a real machine
        self.procs = ProcessTable()
        self._scenario_text: dict[int, tuple[str, str]] = {}  # synthetic pid -> (command, user)

    @property
    def simulated(self) -> bool:
        return self.sim is not None

    def snapshot(self) -> Snapshot:
        gpus = self.nvml.read()
        now = time.time()
        host_cache: dict[int, HostProcess | str] = {}
        for dev in gpus:
            for proc in dev.processes:
                self._join_host(proc, dev, host_cache, now)
        self.procs.forget_all_but(set(host_cache))
        return Snapshot(time=now, gpus=gpus, simulated=self.simulated,
                        scenario=self.sim.scenario.name if self.sim else None,
                        driver_version=self.nvml.driver_version, cuda_version=self.nvml.cuda_version)

    def _host(self, pid: int, cache: dict[int, HostProcess | str], now: float) -> HostProcess | str:
        if pid in cache:
            return cache[pid]
        found: HostProcess | str
        described = self.sim.host_process(pid) if self.sim else None
        if described is not None and described["source"] == "synthetic":
            text = self._scenario_text.get(pid)
            if text is None:  # scenario text is as untrusted as /proc's; sanitized once per pid
                text = self._scenario_text[pid] = (sanitize(described["command"]), sanitize(described["user"]))
            command, user = text
            # `age` is how long it had run when it appeared (t=0, or its start_at); it keeps
            # running on the scenario clock, so --watch sees it age and one started at t=20 has
            # run 10 s at t=30 (not 0 s at 0% CPU).
            age = described["age"] + max(0.0, self.sim.now() - described.get("start_at", 0))
            found = HostProcess(
                pid=pid, user=user, uid=described["uid"], command=command,
                name=command.split()[0].rsplit("/", 1)[-1], state=described["state"],
                start_time=now - age, cpu_time=described["cpu_percent"] / 100 * age,
                rss=described["rss"], ppid=described["ppid"], container=described.get("container"))
        elif described is not None and described["source"] == "missing":
            found = NOT_VISIBLE
        else:
            found = self.procs.read(pid)
        cache[pid] = found
        return found

    def _join_host(self, proc: GpuProcess, dev: Device, cache: dict, now: float) -> None:
        host = self._host(proc.pid, cache, now)
        if isinstance(host, str):
            proc.host_missing = host
            return
        proc.user, proc.uid, proc.command, proc.name = host.user, host.uid, host.command, host.name
        proc.state, proc.start_time, proc.rss, proc.ppid = host.state, host.start_time, host.rss, host.ppid
        proc.container = host.container
        proc.elapsed = max(0.0, now - host.start_time)
        proc.cpu_percent = self.procs.cpu_percent(host, now)
        proc.zombie = host.state == "zombie"
        proc.orphaned = host.ppid == 1 and host.pid != 1
        # Idle: no kernels of its own when the driver samples processes, else its GPU at 0% now.
        busy = proc.sm_utilization if proc.sm_utilization is not None else dev.utilization
        proc.idle = busy == 0 and bool(proc.memory) and not proc.zombie  # a zombie is flagged as such

    def close(self) -> None:
        self.nvml.close()


def open_machine(simulate: str | None = None) -> Machine:
    """The simulated scenario named by `simulate` or $VRAM_SIMULATE, else the real driver.

    Raises NvmlUnavailable (no driver) or ScenarioError (a bad scenario), each with one line.
    """
    simulate = simulate or os.environ.get("VRAM_SIMULATE") or None
    if simulate:
        from .nvml import scenario as scenarios
        from .nvml.sim import SimulatedNvml

        sim = SimulatedNvml(scenarios.load(simulate))
        return Machine(Nvml(sim).open(), simulated=sim)
    return Machine(open_real())


def snapshot(simulate: str | None = None) -> Snapshot:
    """Read every GPU and every process holding GPU memory, once.

    >>> snap = vramkit.snapshot(simulate="demo")
    >>> [(g.index, g.memory_used, [p.pid for p in g.processes]) for g in snap.gpus]
    """
    machine = open_machine(simulate)
    try:
        return machine.snapshot()
    finally:
        machine.close()
