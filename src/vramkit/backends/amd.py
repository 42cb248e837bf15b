"""The AMD backend: amdsmi (ROCm's library) when it loads, else what the amdgpu driver exposes
(KFD topology and per-process VRAM, the DRM device's files, fdinfo); /proc for the host side;
/dev/kfd as the device node every ROCm process holds open.

`SimulatedAmdBackend` plays a scenario with "vendor": "amd" through the same readers, at their own
interface: the fake amdsmi module, or the fake sysfs tree (VRAM_SIM_AMD=sysfs picks it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

from ..amd.sim import SimulatedAmd
from ..gpu_state import Device, Health
from ..i18n import N_
from ..nvml.scenario import Scenario
from ..procs import NOT_VISIBLE, HostProcess, ProcessTable, in_initial_pid_namespace, sanitize
from . import EXTRAS

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from typing import Any, Protocol


    class Reader(Protocol):
        driver_version: str | None

        render_minors: dict[int, int]  # /dev/dri/renderD<minor> -> GPU index, from the last reading

        def read_health(self, gpus: list[Device]) -> None: ...

        def read(self, t: float, first_index: int = 0) -> list[Device]: ...

        def close(self) -> None: ...

# every ROCm (HIP, OpenCL on ROCm) process holds /dev/kfd open; the render node of each GPU it uses
# (or partition: one each) too, and a graphics-only client only that
DEVICE_NODES = ("/dev/kfd", "/dev/dri/renderD*")
NO_HEALTH = N_("vramkit does not read it on AMD GPUs yet")
# NVIDIA's own features: an AMD GPU has none of them (N/A with the reason, never a made-up 0)
LACKS = {
    **dict.fromkeys(("nvlink_links", "nvlink_links_up", "nvlink_tx", "nvlink_rx"),
                    N_("an NVIDIA link: AMD GPUs connect by xGMI (Infinity Fabric), not read by vramkit yet")),
    **dict.fromkeys(("remapped_rows_correctable", "remapped_rows_uncorrectable", "remap_pending", "remap_failed"),
                    N_("NVIDIA's row remapping: AMD GPUs retire bad pages instead")),
    "persistence_mode": N_("an NVIDIA driver mode: the amdgpu driver has none"),
    "compute_mode": N_("an NVIDIA driver setting: AMD GPUs have none"),
    "performance_state": N_("NVIDIA's P-states: AMD GPUs have DPM levels instead"),
}
NO_VIDEO = N_("vramkit does not read AMD GPUs' video engines (VCN) yet")


def _video_unread(gpus: list[Device]) -> list[Device]:
    """Say why their encoder and decoder use are N/A (NVML's GPUs report them)."""
    for g in gpus:
        if not g.lost:
            g.na.update(encoder_utilization=NO_VIDEO, decoder_utilization=NO_VIDEO)
    return gpus


def amd_present(root: str = "/") -> bool:
    """Whether this host has the amdgpu driver's compute interface (one stat: the NVIDIA path
    pays nothing more)."""
    return os.path.exists(os.path.join(root, "dev/kfd")) or os.path.isdir(
        os.path.join(root, "sys/class/kfd/kfd/topology/nodes"))


def open_reader() -> Reader:
    """amdsmi where its library loads, else the driver's own files. Raises the sysfs reader's
    SysfsUnavailable (one line) when neither works."""
    from ..amd.smi import AmdSmi, AmdSmiUnavailable, load_module
    from ..amd.sysfs import Sysfs

    try:
        reader: Reader = AmdSmi(load_module()).open()
        return reader
    except AmdSmiUnavailable:
        return Sysfs("/").open()


class AmdBackend:
    simulated = False
    scenario: str | None = None
    vendor = "amd"

    def __init__(self, reader: Reader, first_index: int = 0):
        self.reader = reader
        self.first_index = first_index  # GPUs are numbered after another vendor's on a mixed host
        self.table = ProcessTable()

    @classmethod
    def open(cls, first_index: int = 0) -> AmdBackend:
        return cls(open_reader(), first_index)

    @property
    def driver_version(self) -> str | None:
        return self.reader.driver_version

    @property
    def cuda_version(self) -> str | None:
        return None  # not a CUDA machine: the ROCm runtime's version is not the driver's to say

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, stop: threading.Event, seconds: float) -> None:
        stop.wait(seconds)

    def read_devices(self, extras: frozenset[str] = EXTRAS) -> list[Device]:
        # The readers (amd/) read every field: `extras` is not passed on, the contract allows more.
        return _video_unread(self.reader.read(self.monotonic(), self.first_index))

    def read_health(self, gpus: list[Device], settle: float) -> None:
        """ECC counts and the PCIe link, as the reader has them; the rest N/A with why."""
        mine = [g for g in gpus if g.vendor == "amd" and not g.lost]
        for g in mine:
            health = Health()
            health.na = {name: LACKS.get(name, NO_HEALTH) for name in Health.__dataclass_fields__ if name != "na"}
            g.health = health
        self.reader.read_health(mine)

    def host(self, pid: int, now: float, usage: bool = True) -> HostProcess | str:
        return self.table.read(pid, usage)

    def forget_all_but(self, pids: set[int]) -> None:
        self.table.forget_all_but(pids)

    def is_real(self, pid: int) -> bool:
        return True

    def pids_visible(self) -> bool:
        return in_initial_pid_namespace() is not False

    def device_nodes(self) -> tuple[tuple[str, ...], str]:
        return DEVICE_NODES, ""

    def node_gpus(self, paths: list[str], gpus: list[Device]) -> dict[str, int]:
        """renderD<minor> is the GPU whose KFD node (or amdsmi) names that minor; /dev/kfd serves
        every GPU, so holding it names none."""
        out = {}
        for p in paths:
            name = p.rsplit("/", 1)[-1]
            if name.startswith("renderD") and name[7:].isdigit() and int(name[7:]) in self.reader.render_minors:
                out[p] = self.reader.render_minors[int(name[7:])]
        return out

    def audit_context(self) -> dict[str, Any]:
        return {"simulated": False, "scenario": None}

    def close(self) -> None:
        self.table.close()
        self.reader.close()


class SimulatedAmdBackend(AmdBackend):
    """A scenario's AMD GPUs through the amdsmi reader on the fake amdsmi module ("amdsmi"), or
    through the sysfs reader on a fake tree written at each reading ("sysfs")."""

    simulated = True

    def __init__(self, sim: SimulatedAmd, path: str = "amdsmi", first_index: int = 0):
        self.sim = sim
        self.path = path
        self._root: str | None = None
        self._tree: Any = None
        reader: Reader
        if path == "sysfs":
            from ..amd.fake_sysfs import FakeSysfs
            from ..amd.sysfs import Sysfs

            self._root = tempfile.mkdtemp(prefix="vram-amd-sysfs-")
            self._tree = FakeSysfs(sim, self._root)
            self._tree.write(sim.now())
            reader = Sysfs(self._root).open()
        else:
            from ..amd.fake_amdsmi import FakeAmdSmi
            from ..amd.smi import AmdSmi

            reader = AmdSmi(FakeAmdSmi(sim)).open()
        super().__init__(reader, first_index)
        self.scenario = sim.scenario.name
        self._text: dict[int, tuple[str, str]] = {}

    @classmethod
    def load(cls, scenario: Scenario, path: str | None = None, first_index: int = 0) -> SimulatedAmdBackend:
        chosen = path or os.environ.get("VRAM_SIM_AMD", "").strip() or "amdsmi"
        if chosen not in ("amdsmi", "sysfs"):
            from ..errors import RequestError

            shown = chosen if len(chosen) <= 40 else chosen[:37] + "..."
            raise RequestError(f"VRAM_SIM_AMD must be 'amdsmi' or 'sysfs', got {shown!r}")
        return cls(SimulatedAmd(scenario), chosen, first_index)

    def now(self) -> float:
        return self.sim.wall_time()

    def monotonic(self) -> float:
        return self.sim.now() if self.sim.stepped else super().monotonic()

    def sleep(self, stop: threading.Event, seconds: float) -> None:
        if self.sim.stepped:
            self.sim.advance(seconds)
        else:
            super().sleep(stop, seconds)

    def read_devices(self, extras: frozenset[str] = EXTRAS) -> list[Device]:
        t = self.sim.now()  # the files and the reader's engine counters on one scenario time
        if self._tree is not None:
            self._tree.write(t)
        return _video_unread(self.reader.read(t, self.first_index))

    def host(self, pid: int, now: float, usage: bool = True) -> HostProcess | str:
        described = self.sim.host_process(pid)
        if described is None or described["source"] == "real":
            return self.table.read(pid, usage)
        if described["source"] == "missing":
            return NOT_VISIBLE
        text = self._text.get(pid)
        if text is None:
            text = self._text[pid] = (sanitize(described["command"]), sanitize(described["user"]))
        command, user = text
        age = described["age"] + max(0.0, self.sim.now() - described.get("start_at", 0))
        return HostProcess(
            pid=pid, user=user, uid=described["uid"], command=command,
            name=command.split()[0].rsplit("/", 1)[-1] if command.split() else "", state=described["state"],
            start_time=now - age, cpu_time=described["cpu_percent"] / 100 * age,
            rss=described["rss"], ppid=described["ppid"], container=described.get("container"),
            start_ticks=None, real=False)

    def is_real(self, pid: int) -> bool:
        described = self.sim.host_process(pid)
        return described is None or described["source"] != "synthetic"

    def pids_visible(self) -> bool:
        return True

    def device_nodes(self) -> tuple[tuple[str, ...], str]:
        pattern = self.sim.scenario.data.get("device_nodes")
        why = "" if pattern else "the simulated machine has no device nodes (the scenario sets no device_nodes)"
        return ((pattern,) if pattern else ()), why

    def audit_context(self) -> dict[str, Any]:
        return {"simulated": True, "scenario": self.scenario}

    def close(self) -> None:
        super().close()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
