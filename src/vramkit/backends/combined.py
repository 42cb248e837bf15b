"""A host with GPUs of more than one vendor: each vendor's backend reads its own GPUs (numbered
one after the other: NVIDIA's first), and each pid's host side is asked of the backend that listed
it. The first backend keeps the clock."""

from __future__ import annotations

import threading

from ..gpu_state import Device
from ..procs import HostProcess
from . import EXTRAS, Backend

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from typing import Any


class CombinedBackend:
    simulated = False  # set per instance: simulated when any part is
    scenario: str | None = None

    def __init__(self, backends: list[Backend]):
        self.backends = backends
        self.first = backends[0]
        self.simulated = any(b.simulated for b in backends)
        self.scenario = self.first.scenario
        self._owner: dict[int, Backend] = {}  # pid -> the backend that listed it

    @property
    def driver_version(self) -> str | None:
        return self.first.driver_version

    @property
    def cuda_version(self) -> str | None:
        return self.first.cuda_version

    def now(self) -> float:
        return self.first.now()

    def monotonic(self) -> float:
        return self.first.monotonic()

    def sleep(self, stop: threading.Event, seconds: float) -> None:
        self.first.sleep(stop, seconds)
        for b in self.backends[1:]:
            sim = getattr(b, "sim", None)
            if sim is not None and sim.stepped:  # a stepped scenario clock moves with the first's
                sim.advance(seconds)

    def read_devices(self, extras: frozenset[str] = EXTRAS) -> list[Device]:
        gpus: list[Device] = []
        self._owner = {}
        for b in self.backends:
            first_index = len(gpus)
            if hasattr(b, "first_index"):
                b.first_index = first_index  # (AMD's readers number their GPUs from it)
            devices = b.read_devices(extras)
            for offset, dev in enumerate(devices):  # each vendor counts from 0: number them after the others
                dev.index = first_index + offset
                for p in dev.processes:
                    p.gpu = dev.index
                    self._owner.setdefault(p.pid, b)
            gpus.extend(devices)
        return gpus

    def read_health(self, gpus: list[Device], settle: float) -> None:
        for b in self.backends:
            vendor = getattr(b, "vendor", "nvidia")
            mine = [g for g in gpus if g.vendor == vendor]
            if mine:
                b.read_health(mine, settle)

    def host(self, pid: int, now: float, usage: bool = True) -> HostProcess | str:
        return self._owner.get(pid, self.first).host(pid, now, usage)

    def forget_all_but(self, pids: set[int]) -> None:
        for b in self.backends:
            b.forget_all_but(pids)

    def is_real(self, pid: int) -> bool:
        return self._owner.get(pid, self.first).is_real(pid)

    def pids_visible(self) -> bool:
        return all(b.pids_visible() for b in self.backends)

    def device_nodes(self) -> tuple[tuple[str, ...], str]:
        found = [b.device_nodes() for b in self.backends]
        patterns = tuple(dict.fromkeys(p for nodes, _ in found for p in nodes))
        return patterns, "" if patterns else "; ".join(dict.fromkeys(why for _, why in found))

    def node_gpus(self, paths: list[str], gpus: list[Device]) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.backends:
            out.update(b.node_gpus(paths, [g for g in gpus if g.vendor == getattr(b, "vendor", "nvidia")]))
        return out

    def audit_context(self) -> dict[str, Any]:
        return self.first.audit_context()

    def close(self) -> None:
        for b in self.backends:
            b.close()
