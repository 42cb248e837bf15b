"""The backend seam: what a GPU vendor's backend gives the Machine, and nothing else.

A backend reads the devices and the processes holding their memory, and answers the host-side
questions about a pid (its /proc side, whether it is a real process here, whether this /proc
can see the pids the driver reports), the device nodes a process holds open to use a GPU, and
what an audit line says about the machine. Everything above (snapshot, kill, allocate,
holders, the views) asks the backend and never asks which backend it is.

Backends today: `nvidia.NvidiaBackend` (NVML through nvidia-ml-py), `simulated.SimulatedBackend`
(the same NVML reader on a scenario served through pynvml's interface, with the scenario's
made-up processes), `amd.AmdBackend` and `amd.SimulatedAmdBackend` (amdsmi, or the amdgpu
driver's files), and `combined.CombinedBackend` (a host with both vendors); `choose.py` picks
them. A third vendor is one new module here implementing `Backend`, chosen in choose.py, and its
visible-devices rule in visible.py.
"""

from __future__ import annotations

import threading

from ..gpu_state import Device
from ..procs import HostProcess

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from typing import Any, Protocol
else:
    Protocol = object  # a structural type for mypy; at run time nothing checks it

# Device fields a reader may go without: the views and the exporter show them, the recorder keeps
# none of them, and each is a driver call a GPU and reading. `read_devices(extras)` reads those named.
EXTRAS = frozenset({"power_limit", "fan", "encoder_utilization", "decoder_utilization"})


class Backend(Protocol):
    """One open machine of one vendor. `read_devices` is stateful where the driver is (NVML's
    per-process utilization samples are 'since the last call'): a Machine has one reader."""

    simulated: bool  # shown in every view's banner; nothing branches on it
    scenario: str | None  # the scenario's name on a simulated machine

    @property
    def driver_version(self) -> str | None: ...

    @property
    def cuda_version(self) -> str | None: ...

    def now(self) -> float:
        """Wall-clock time of a reading (unix seconds): time.time(), or a stepped scenario clock's."""

    def monotonic(self) -> float:
        """A clock that never jumps, for intervals (time.monotonic(), or the scenario clock)."""

    def sleep(self, stop: threading.Event, seconds: float) -> None:
        """Wait `seconds` between samples, or until `stop` is set. A stepped scenario clock
        does not wait: it moves forward by `seconds`."""

    def read_devices(self, extras: frozenset[str] = EXTRAS) -> list[Device]:
        """Every GPU with its processes (host side not filled in): N/A fields with reasons. Of
        EXTRAS, only those in `extras` need be read (one left out is None with the reason
        nvml.backend.NOT_READ); a backend may read them anyway where they cost nothing more."""

    def read_health(self, gpus: list[Device], settle: float) -> None:
        """Fill each GPU's `health` (made only when asked: some twenty driver calls a GPU). A
        first reading of link traffic waits `settle` seconds for a second one (rates need two)."""

    def host(self, pid: int, now: float, usage: bool = True) -> HostProcess | str:
        """The host side of a pid the driver listed, or one line saying why it is unknown.
        usage=False: only who the process is must be current, not its state, CPU and RSS (see
        ProcessTable.read; Machine.snapshot's usage_pids)."""

    def forget_all_but(self, pids: set[int]) -> None:
        """Drop what is cached about pids not in `pids` (the latest snapshot's)."""

    def is_real(self, pid: int) -> bool:
        """Whether pid is a process on this host (False for a scenario's made-up one): only a
        real process can be signalled or keep a lease alive."""

    def pids_visible(self) -> bool:
        """Whether this /proc sees the pids the driver reports (False inside a container's own
        PID namespace, where NVML's host pids name other processes or none)."""

    def device_nodes(self) -> tuple[tuple[str, ...], str]:
        """(globs of the device files a process holds open to use a GPU: NVIDIA's /dev/nvidia*,
        AMD's /dev/kfd and /dev/dri/renderD*; () when there are none, and then why)."""

    def node_gpus(self, paths: list[str], gpus: list[Device]) -> dict[str, int]:
        """The GPU (index) each of these device nodes stands for; a node of no one GPU (nvidiactl,
        kfd) is left out."""

    def audit_context(self) -> dict[str, Any]:
        """What every audit line says about the machine."""

    def close(self) -> None: ...
