"""One consistent picture of the machine: the backend's devices and processes joined with the
host side of each pid.

`open_machine()` chooses the backend: the real driver, or a simulated scenario (--simulate /
VRAM_SIMULATE); `Machine.snapshot()` reads it. `snapshot()` reads once: `vramkit.snapshot()`, the
one-call Python API, calls it.
Repeated readers (the live view, watch loops, kill --idle) read through a `collector.Collector`.
"""

from __future__ import annotations

import dataclasses
import os

from .backends import EXTRAS, Backend
from .gpu_state import Device, GpuProcess, Snapshot, Topology
from .i18n import N_
from .idle import idle_now
from .nvml.backend import NvmlUnavailable
from .procs import OTHER_NAMESPACE, HostProcess, cpu_percent_since
from .procs.namespaces import orphaned

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from typing import Any

    from .kubelet import PodNames

__all__ = ["Machine", "NvmlUnavailable", "open_machine", "snapshot"]


class Machine:
    """An open backend; reuse it for repeated snapshots. It has one reader (see Backend)."""

    def __init__(self, backend: Backend):
        self.backend = backend
        # Topology (NVLink, PCIe, NUMA) rides on every snapshot once wanted: pick and run choosing
        # several GPUs want it; read once by the driver's reader, so later snapshots cost nothing.
        self.want_topology = False
        # pid -> (start ticks, CPU seconds, when): CPU % over the interval since the last snapshot.
        self._previous_cpu: dict[int, tuple[int | None, float, float]] = {}
        self._pod_names: PodNames | None = None  # made when a process is first seen in a pod
        # pid -> what the last snapshot's rows of it were joined with (its HostProcess, or why none;
        # _USAGE_READ: joined with its usage). A new pid's usage is always read, and a row the backend
        # hands back from the last reading (the driver says the same) is kept while this says the same.
        self._joined: dict[int, HostProcess | str] = {}

    @property
    def simulated(self) -> bool:
        return self.backend.simulated

    def snapshot(self, extras: frozenset[str] = EXTRAS, usage_pids: set[int] | None = None) -> Snapshot:
        """Every GPU and process, joined with the host side; of backends.EXTRAS only those in
        `extras` are read (the recorder reads none). Each process's state, CPU % and RSS are read
        for the pids in `usage_pids` (None: all; the live view names the rows near the screen, the
        recorder none) and for a process the last snapshot did not list; the others' are None
        (a zombie's state is said: an ended process is read whole), and they cost no /proc read
        while they run (ProcessTable.read)."""
        gpus = self.backend.read_devices(extras)
        now = self.backend.now()
        last = self._joined
        hosts: dict[int, HostProcess | str] = {}
        joined: dict[int, HostProcess | str] = {}
        outside = False  # a pid of another PID namespace: inside a container
        for dev in gpus:
            procs = dev.processes
            for i, proc in enumerate(procs):
                wanted = usage_pids is None or proc.pid in usage_pids or proc.pid not in last
                host = hosts.get(proc.pid)
                if host is None:
                    host = hosts[proc.pid] = self.backend.host(proc.pid, now, wanted)
                    outside = outside or (isinstance(host, str) and host == OTHER_NAMESPACE)
                joined[proc.pid] = _USAGE_READ if wanted else host
                if _joined_before(proc):  # the last snapshot's row: the driver says the same of it
                    if not wanted and last.get(proc.pid) is host:  # and so does the host: kept, its clock on
                        if not isinstance(host, str):
                            proc.elapsed = max(0.0, now - host.start_time)
                        continue
                    proc = procs[i] = _driver_side(proc)  # the last snapshot's row stays as it was
                _join_host(proc, dev, host, now, self._previous_cpu if wanted else None)
        self._name_pods(gpus)
        self._joined = joined
        self.backend.forget_all_but(set(hosts))
        if any(pid not in hosts for pid in self._previous_cpu):
            self._previous_cpu = {pid: v for pid, v in self._previous_cpu.items() if pid in hosts}
        snap = Snapshot(time=now, gpus=gpus, simulated=self.backend.simulated, scenario=self.backend.scenario,
                        driver_version=self.backend.driver_version, cuda_version=self.backend.cuda_version,
                        monotonic=self.backend.monotonic(), topology=self._topology())
        if outside:  # inside a container: NVML's pids are the host's
            from .pidmap import map_to_this_namespace

            map_to_this_namespace(snap, self.backend,
                                  lambda proc, dev, host: _join_host(proc, dev, host, now, self._previous_cpu if (
                                      usage_pids is None or proc.pid in usage_pids) else None))
        return snap

    def read_usage(self, procs: list[GpuProcess]) -> list[GpuProcess]:
        """Copies of `procs` with their state, CPU % and RSS read now (for rows a reading left
        unread, as the live view draws them); one whose host side cannot be read, as it was."""
        now = self.backend.now()
        out = []
        for proc in procs:
            host = self.backend.host(proc.pid, now, True)
            if isinstance(host, str) or host.start_ticks != proc.start_ticks:  # gone, or another process
                out.append(proc)
                continue
            copy = dataclasses.replace(proc)
            _usage(copy, host, now, self._previous_cpu)
            out.append(copy)
        return out

    def _name_pods(self, gpus: list[Device]) -> None:
        """Pod names from the kubelet for processes whose cgroup names a pod (kubelet.py); a host
        without pods never loads it."""
        if self._pod_names is None:
            if not any(p.workload is not None and p.workload.pod_uid for g in gpus for p in g.processes):
                return
            from .kubelet import PodNames

            self._pod_names = PodNames()
        self._pod_names.name(gpus, self.backend.monotonic(), getattr(self.backend, "list_pods", None))

    def _topology(self) -> Topology | None:
        if not self.want_topology:
            return None
        nvml = getattr(self.backend, "nvml", None)  # the NVIDIA backends' NVML reader
        if nvml is None:
            return Topology(na={"pcie": N_("this backend reads no topology")})
        topology: Topology = nvml.read_topology()
        return topology

    def read_health(self, snap: Snapshot, settle: float = 0.2) -> None:
        """Fill each GPU's `health` (ECC, remaps, throttling, clocks, PCIe, NVLink...): some twenty
        driver calls a GPU, made only when asked (`vram status --all`). A first reading of NVLink
        traffic waits `settle` seconds for a second one (NVML counts bytes; a rate needs two)."""
        self.backend.read_health(snap.gpus, settle)

    def audit_context(self, via: str) -> dict[str, Any]:
        """What every audit line of an action taken through `via` says about this machine."""
        return {**self.backend.audit_context(), "via": via}

    def close(self) -> None:
        self.backend.close()


_USAGE_READ = "usage read"  # Machine._joined: a row joined with its state, CPU and RSS read then


def _joined_before(proc: GpuProcess) -> bool:
    """Whether a row was joined with its host side (_join_host): a row the backend kept from the
    last reading, not one it made now (a joined row has its age, or why its host side is missing)."""
    return proc.elapsed is not None or proc.host_missing is not None


def _driver_side(proc: GpuProcess) -> GpuProcess:
    """A new row with what the driver said of `proc` (to join with a host side that changed: the
    last snapshot's row is not changed under whoever still holds it)."""
    return GpuProcess(pid=proc.pid, gpu=proc.gpu, gpu_uuid=proc.gpu_uuid, memory=proc.memory, types=proc.types,
                      mig_gi=proc.mig_gi, sm_utilization=proc.sm_utilization,
                      memory_utilization=proc.memory_utilization, encoder_utilization=proc.encoder_utilization,
                      decoder_utilization=proc.decoder_utilization, utilization_na=proc.utilization_na)


def _join_host(proc: GpuProcess, dev: Device, host: HostProcess | str, now: float,
               previous_cpu: dict[int, tuple[int | None, float, float]] | None) -> None:
    """Fill proc's host side; previous_cpu None: its usage not read (state, CPU %, RSS None; a
    zombie's state is said)."""
    if isinstance(host, str):
        proc.host_missing = host
        return
    proc.user, proc.uid, proc.command, proc.name = host.user, host.uid, host.command, host.name
    proc.start_time, proc.ppid = host.start_time, host.ppid
    proc.start_ticks, proc.real, proc.container = host.start_ticks, host.real, host.container
    proc.workload = host.workload
    proc.elapsed = max(0.0, now - host.start_time)
    proc.zombie = host.state == "zombie"
    if previous_cpu is not None:
        _usage(proc, host, now, previous_cpu)
    elif proc.zombie:
        proc.state = host.state
    proc.orphaned = orphaned(host.pid, host.ppid, host.real)  # a container's pid 1 is its own init
    proc.idle = idle_now(proc, dev)
    proc.idle_for = 0.0 if proc.idle else None  # one sample; a Collector's IdleClock knows longer


def open_machine(simulate: str | None = None) -> Machine:
    """The simulated scenario named by `simulate` or $VRAM_SIMULATE, else the real driver.

    Raises NvmlUnavailable (no driver) or ScenarioError (a bad scenario), each with one line.
    """
    simulate = simulate or os.environ.get("VRAM_SIMULATE") or None
    if simulate:
        from .backends import choose
        from .nvml import scenario as scenarios

        return Machine(choose.simulated(scenarios.load(simulate)))
    from .backends import choose

    return Machine(choose.real())


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


def _usage(proc: GpuProcess, host: HostProcess, now: float,
           previous_cpu: dict[int, tuple[int | None, float, float]]) -> None:
    """A row's state, RSS and CPU % (since the process's previous reading in previous_cpu)."""
    proc.state, proc.rss = host.state, host.rss
    proc.cpu_percent = cpu_percent_since(host, now, previous_cpu)
