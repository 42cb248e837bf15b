"""A scenario of AMD GPUs played over time: what each GPU, partition and process holds and does at
the scenario clock's t. fake_amdsmi.py and fake_sysfs.py serve it at their own library's interface.

The scenario schema is the NVIDIA one's (docs/scenarios.md) with "vendor": "amd": a GPU may have
compute_partition / memory_partition and, when partitioned, `partitions` (the MIG instances'
schema, keyed "GPU/partition" in a process's gpus). The clock follows VRAM_SIM_TIME, VRAM_SIM_EPOCH
and VRAM_SIM_CLOCK=stepped exactly as the NVML simulator's (nvml/sim.py).
"""

from __future__ import annotations

from ..nvml.scenario import Scenario, ScenarioError, integral, value_at
from ..nvml.sim import ScenarioClock, scenario_clock
from ..procs import comm, is_defunct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Unit = tuple[int, "int | None"]  # (GPU index, partition id or None for the whole GPU)


class SimulatedAmd(ScenarioClock):
    """The AMD part of a scenario, on the scenario clock."""

    def __init__(self, scenario: Scenario):
        amd = scenario.for_vendor("amd")
        if amd is None:
            raise ScenarioError(f"{scenario.source}: a scenario of {scenario.vendor} GPUs has no AMD GPU")
        self.scenario = amd
        self._t0, self._fixed_t, self.stepped = scenario_clock()
        self._by_unit: dict[Unit, list[tuple[dict[str, Any], Any]]] = {}
        for p in amd.processes:
            for unit, mem in p["gpus"].items():
                self._by_unit.setdefault(unit, []).append((p, mem))
        self._by_pid = {p["pid"]: p for p in amd.processes}

    @property
    def gpus(self) -> list[dict[str, Any]]:
        return self.scenario.gpus

    # ------------------------------------------------------------ units and processes at t
    def units(self, index: int) -> list[Unit]:
        """The whole GPU, or each of its partitions (a partitioned GPU's processes run in one)."""
        parts = self.gpus[index]["mig"]
        return [(index, m["gi"]) for m in parts] if parts else [(index, None)]

    def live(self, unit: Unit, t: float) -> list[tuple[dict[str, Any], int]]:
        """(process, bytes it holds) for each process on `unit` that runs at t (a real process: while
        it runs on this host and is not a zombie, for the driver frees what a process held)."""
        out = []
        for p, mem in self._by_unit.get(unit, ()):
            if t < p.get("start_at", 0) or ("exit_at" in p and t >= p["exit_at"]):
                continue
            if p["source"] == "real" and (comm(p["pid"]) is None or is_defunct(p["pid"])):
                continue
            out.append((p, int(value_at(mem, t))))
        return out

    def used(self, unit: Unit, t: float) -> int:
        """Bytes in use on a GPU or partition: what the scenario says (less what exited processes
        held), never less than its live processes hold."""
        index, part = unit
        spec = self.gpus[index] if part is None else next(m for m in self.gpus[index]["mig"] if m["gi"] == part)
        live = sum(mem for _, mem in self.live(unit, t))
        if "memory_used" not in spec:
            return live
        listed = sum(int(value_at(mem, t)) for _, mem in self._by_unit.get(unit, ()))
        return max(live, int(value_at(spec["memory_used"], t)) - (listed - live))

    def gpu_used(self, index: int, t: float) -> int:
        return sum(self.used(u, t) for u in self.units(index))

    def busy_ns(self, p: dict[str, Any], index: int, t: float) -> int:
        """A process's graphics/compute engine time on a GPU since t=0, in ns (fdinfo's
        drm-engine-gfx, amdsmi's engine_usage.gfx): its sm_util over time, else its GPU's."""
        util = p.get("sm_util", self.gpus[index]["utilization"])
        start = p.get("start_at", 0)
        return int((integral(util, t) - integral(util, min(t, start))) / 100 * 1e9)

    def host_process(self, pid: int) -> dict[str, Any] | None:
        return self._by_pid.get(pid)

    def pids(self) -> list[int]:
        return list(self._by_pid)

    @staticmethod
    def value(value: Any, t: float) -> Any:
        return value_at(value, t)
