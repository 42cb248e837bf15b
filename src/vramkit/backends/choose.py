"""Which backends a machine gets: each vendor whose driver is here (NVIDIA's NVML, AMD's KFD), or
each vendor a scenario describes. A host with both gets both, NVIDIA's GPUs numbered first."""

from __future__ import annotations

import os

from . import Backend

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from ..nvml.scenario import Scenario


def amd_present() -> bool:
    """Whether the amdgpu driver's compute interface is here: one stat on an NVIDIA host."""
    return os.path.exists("/dev/kfd")


def real() -> Backend:
    """The drivers of this host. Raises NvmlUnavailable (one line) when there is no GPU driver."""
    from ..nvml.backend import NvmlUnavailable
    from .nvidia import NvidiaBackend

    backends: list[Backend] = []
    try:
        backends.append(NvidiaBackend.open())
    except NvmlUnavailable:
        if not amd_present():
            raise
    if amd_present():
        from ..amd.sysfs import SysfsUnavailable
        from .amd import AmdBackend

        try:
            backends.append(AmdBackend.open())
        except SysfsUnavailable as e:
            if not backends:
                raise NvmlUnavailable(f"no NVIDIA driver, and the AMD one cannot be read: {e}") from None
    return backends[0] if len(backends) == 1 else _combined(backends)


def simulated(scenario: Scenario) -> Backend:
    """A scenario's machine: NVML's simulator for NVIDIA GPUs, amdsmi's or sysfs's for AMD ones."""
    backends: list[Backend] = []
    if scenario.for_vendor("nvidia") is not None:
        from .simulated import SimulatedBackend

        backends.append(SimulatedBackend.load(scenario))
    if scenario.for_vendor("amd") is not None:
        from .amd import SimulatedAmdBackend

        first = len(scenario.for_vendor("nvidia").gpus) if backends else 0  # type: ignore[union-attr]
        backends.append(SimulatedAmdBackend.load(scenario, first_index=first))
    return backends[0] if len(backends) == 1 else _combined(backends)


def _combined(backends: list[Backend]) -> Backend:
    from .combined import CombinedBackend

    return CombinedBackend(backends)
