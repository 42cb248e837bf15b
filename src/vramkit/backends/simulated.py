"""The simulated backend: the NVIDIA backend's own NVML reader on a scenario (nvml/sim.py), plus
the scenario's made-up processes, which have a host side but are not processes here."""

from __future__ import annotations

import threading

from ..gpu_state import Device, Workload
from ..nvml.backend import Nvml
from ..nvml.scenario import Scenario
from ..nvml.sim import SimulatedNvml
from ..procs import NOT_VISIBLE, HostProcess, namespace_inode, sanitize, workload
from .nvidia import NvidiaBackend

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from typing import Any

    from ..kubelet import PodContainer


class SimulatedBackend(NvidiaBackend):
    simulated = True
    kernel_log = None  # the scenario's GPUs write to no kernel log

    def __init__(self, sim: SimulatedNvml):
        super().__init__(Nvml(sim).open())
        self.sim = sim
        self.scenario = sim.scenario.name
        # The namespace the scenario's pids are numbered in (a container test's host); none: this /proc's
        self.driver_pid_namespace = namespace_inode(sim.scenario.data.get("pid_namespace"))
        self._text: dict[int, tuple[str, str]] = {}  # synthetic pid -> (command, user), sanitized

    @classmethod
    def load(cls, scenario: Scenario) -> SimulatedBackend:
        return cls(SimulatedNvml(scenario))

    def now(self) -> float:
        return self.sim.wall_time()

    def monotonic(self) -> float:
        return self.sim.now() if self.sim.stepped else super().monotonic()

    def sleep(self, stop: threading.Event, seconds: float) -> None:
        if self.sim.stepped:  # no waiting: the scenario's time moves on by `seconds`
            self.sim.advance(seconds)
        else:
            super().sleep(stop, seconds)

    def host(self, pid: int, now: float, usage: bool = True) -> HostProcess | str:
        described = self.sim.host_process(pid)
        if described is None or described["source"] == "real" or not self.proc_shows_driver_pids():
            return super().host(pid, now, usage)
        if described["source"] == "missing":
            return NOT_VISIBLE
        text = self._text.get(pid)
        if text is None:  # scenario text is as untrusted as /proc's; sanitized once per pid
            text = self._text[pid] = (sanitize(described["command"]), sanitize(described["user"]))
        command, user = text
        # `age` is how long it had run when it appeared (t=0, or its start_at); it keeps running
        # on the scenario clock, so --watch sees it age and one started at t=20 has run 10 s at
        # t=30 (not 0 s at 0% CPU).
        age = described["age"] + max(0.0, self.sim.now() - described.get("start_at", 0))
        owner = self._workload(pid, described)
        return HostProcess(
            pid=pid, user=user, uid=described["uid"], command=command,
            name=command.split()[0].rsplit("/", 1)[-1] if command.split() else "", state=described["state"],
            start_time=now - age, cpu_time=described["cpu_percent"] / 100 * age,
            rss=described["rss"], ppid=described["ppid"],
            container=described.get("container") or (workload.short_id(owner) if owner else None),
            start_ticks=None, real=False, workload=owner)

    def _workload(self, pid: int, described: dict[str, Any]) -> Workload | None:
        """A made-up process's workload: its scenario cgroup, read as /proc/PID/cgroup is, its
        container named from the scenario's "containers" as the runtime's state would (without
        any, from the runtimes' own state files)."""
        if "cgroup" not in described:
            return None
        containers = self.sim.scenario.data.get("containers")  # without them, the runtimes' own state
        names = self.table.runtime_names if containers is None else _ScenarioNames(containers)
        found = workload.from_text(described["cgroup"], names)
        return Workload(note=workload.PID_NOTE.format(pid=pid, why=found)) if isinstance(found, str) else found

    def list_pods(self) -> list[PodContainer]:
        """The scenario's "pods", as the kubelet's List would give them; without any, the real
        kubelet's (a test's pod-resources server)."""
        from ..kubelet import PodContainer, list_pods

        pods = self.sim.scenario.data.get("pods")
        if pods is None:
            return list_pods()
        return [PodContainer(sanitize(p["namespace"]), sanitize(p["name"]), sanitize(c["name"]),
                             tuple(c.get("devices", ()))) for p in pods for c in p["containers"]]

    def is_real(self, pid: int) -> bool:
        described = self.sim.host_process(pid)
        return described is None or described["source"] != "synthetic"

    def device_nodes(self) -> tuple[tuple[str, ...], str]:
        pattern = self.sim.scenario.data.get("device_nodes")
        why = "" if pattern else "the simulated machine has no device nodes (the scenario sets no device_nodes)"
        return ((pattern,) if pattern else ()), why

    def gpu_minors(self, gpus: list[Device]) -> dict[int, int]:
        return {g.index: g.index for g in gpus}  # a scenario's file nvidiaN stands for GPU N

    def audit_context(self) -> dict[str, Any]:
        return {"simulated": True, "scenario": self.scenario}


class _ScenarioNames(workload.RuntimeNames):
    """Container names from a scenario's "containers" (what the runtime's state files would say)."""

    def __init__(self, containers: dict[str, dict[str, str]]):
        super().__init__("/")
        self.containers = containers

    def name(self, runtime: str | None, container_id: str) -> tuple[str | None, str | None, str | None]:
        facts = self.containers.get(container_id, {})
        name, image = facts.get("name"), facts.get("image")
        return (sanitize(name) if name else None), (sanitize(image) if image else None), None
