"""The NVIDIA backend: NVML (nvidia-ml-py) for devices and processes, /proc for the host side,
/dev/nvidia* and /proc/driver/nvidia for the device nodes."""

from __future__ import annotations

import threading
import time

from ..gpu_state import Device
from ..nvml.backend import Nvml, open_real
from ..procs import INITIAL_PID_NS_INODE, OTHER_NAMESPACE, HostProcess, ProcessTable, in_pid_namespace, shows_pids_of
from . import EXTRAS

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from typing import Any

DEVICE_NODES = "/dev/nvidia*"


def _minor(path: str) -> int | None:
    """N of a GPU's own node, nvidiaN (not nvidiactl, nvidia-uvm, nvidia-caps)."""
    name = path.rsplit("/", 1)[-1]
    return int(name[6:]) if name.startswith("nvidia") and name[6:].isdigit() else None


class NvidiaBackend:
    simulated = False
    scenario: str | None = None
    # The PID namespace the driver numbers processes in (an inode number): the host's, whatever
    # namespace asks. None: this /proc's (a scenario that names none).
    driver_pid_namespace: int | None = INITIAL_PID_NS_INODE
    # Where the driver writes its XID errors: vram serve reads them there for a GPU whose driver
    # refuses NVML's XID events (serve/kernel_xids.py).
    kernel_log: str | None = "/dev/kmsg"

    def __init__(self, nvml: Nvml):
        self.nvml = nvml
        self.table = ProcessTable()
        self._pids_here: bool | None = None  # this /proc numbers processes as the driver does (read once)

    @classmethod
    def open(cls) -> NvidiaBackend:
        """The real driver. Raises NvmlUnavailable with one clear line."""
        return cls(open_real())

    @property
    def driver_version(self) -> str | None:
        return self.nvml.driver_version

    @property
    def cuda_version(self) -> str | None:
        return self.nvml.cuda_version

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, stop: threading.Event, seconds: float) -> None:
        stop.wait(seconds)

    def read_devices(self, extras: frozenset[str] = EXTRAS) -> list[Device]:
        return self.nvml.read(extras)

    def read_health(self, gpus: list[Device], settle: float) -> None:
        self.nvml.read_health(gpus, settle)

    def host(self, pid: int, now: float, usage: bool = True) -> HostProcess | str:
        if not self.proc_shows_driver_pids():
            return OTHER_NAMESPACE  # /proc/PID here is another process, or none: never read as this one
        return self.table.read(pid, usage)

    def proc_shows_driver_pids(self) -> bool:
        """Whether this /proc numbers processes as the driver does (not a container's own /proc)."""
        if self._pids_here is None:
            ns = self.driver_pid_namespace
            self._pids_here = ns is None or in_pid_namespace(ns) is not False or shows_pids_of(ns)
        return self._pids_here

    def forget_all_but(self, pids: set[int]) -> None:
        self.table.forget_all_but(pids)

    def is_real(self, pid: int) -> bool:
        return True

    def pids_visible(self) -> bool:
        ns = self.driver_pid_namespace
        return ns is None or in_pid_namespace(ns) is not False

    def device_nodes(self) -> tuple[tuple[str, ...], str]:
        return (DEVICE_NODES,), ""

    def node_gpus(self, paths: list[str], gpus: list[Device]) -> dict[str, int]:
        """/dev/nvidiaN is the GPU of minor N (nvidiactl, nvidia-uvm serve them all)."""
        minors = self.gpu_minors(gpus)
        return {p: minors[n] for p, n in ((p, _minor(p)) for p in paths) if n is not None and n in minors}

    def gpu_minors(self, gpus: list[Device]) -> dict[int, int]:
        """The driver numbers minors its own way; /proc/driver/nvidia/gpus/BUS/information says
        which minor each PCI bus id has."""
        import glob  # here: only the holders scan (kill, ps --holders) asks; glob compiles regexes at import

        by_bus = {g.pci_bus_id.lower()[-12:]: g.index for g in gpus if g.pci_bus_id}
        out = {}
        for info in glob.glob("/proc/driver/nvidia/gpus/*/information"):
            bus = info.split("/")[-2].lower()[-12:]
            try:
                with open(info) as f:
                    for line in f:
                        if line.startswith("Device Minor:") and bus in by_bus:
                            out[int(line.split(":", 1)[1])] = by_bus[bus]
            except (OSError, ValueError):
                continue
        return out

    def audit_context(self) -> dict[str, Any]:
        return {"simulated": False, "scenario": None}

    def close(self) -> None:
        self.table.close()
        self.nvml.close()
