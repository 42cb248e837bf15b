"""vramkit: see, free, share and plan NVIDIA GPU memory on shared Linux servers.

Public API (documented in docs/api.md):
    snapshot(simulate=None) -> Snapshot   read every GPU and who holds its memory
    open_machine(simulate=None) -> Machine   for repeated snapshots (watch loops)
    Snapshot, Device, GpuProcess, MigDevice   the data
    NvmlUnavailable, ScenarioError   the two errors a caller should expect
    kill(...)   signal GPU processes with every safety check (docs/safety.md)
    estimate(model, **setup) -> Estimate, plan(model, gpu, **setup) -> Plan   will it fit
    trace_memory(model, step_fn, ...)   the measured peak of real steps on fake tensors (torch)
    select_gpus(count=1, **policy) -> Selection   choose GPUs now
    use_gpus(count=1, wait=None, **policy) -> Selection   reserve GPUs and set CUDA_VISIBLE_DEVICES

`vramkit.kill` and `vramkit.estimate` are modules that can be called: `vramkit.kill(...)` runs
`vramkit.kill.kill(...)`, and `from vramkit.kill import Criteria, make_plan, execute` works too.
Both load on first use, so `import vramkit` stays light.
"""

from __future__ import annotations

from ._version import __version__

TYPE_CHECKING = False  # typing itself is not imported: `vram --help` loads nothing it does not need
if TYPE_CHECKING:
    from typing import Any

    from .machine import Machine
    from .model import Device, GpuProcess, MigDevice, Snapshot
    from .nvml.backend import NvmlUnavailable
    from .nvml.scenario import ScenarioError

# name -> the submodule that defines it, imported on first use so `import vramkit` stays light
_LAZY = {"Device": "model", "GpuProcess": "model", "MigDevice": "model", "Snapshot": "model",
         "NvmlUnavailable": "nvml.backend", "ScenarioError": "nvml.scenario",
         "Machine": "machine",
         **{n: "allocate" for n in ("CudaAlreadyInitialized", "NoGpusAvailable", "Selection", "WaitTimedOut",
                                    "select_gpus", "use_gpus")},
         "plan": "estimate", "trace_memory": "estimate"}
# callable modules (_callable.py): vramkit.kill(...), vramkit.estimate(...)
_CALLABLE_MODULES = ("kill", "estimate")


def snapshot(simulate: str | None = None) -> Snapshot:
    """Read every GPU and every process holding GPU memory, once (docs/api.md).

    `simulate`: a bundled scenario name or a scenario file (default: $VRAM_SIMULATE, else the real
    driver). Raises NvmlUnavailable or ScenarioError, each with a one-line message.
    """
    from .machine import snapshot as read_once

    return read_once(simulate)


def open_machine(simulate: str | None = None) -> Machine:
    """An open machine for repeated snapshots (`machine.snapshot()`, `machine.close()`)."""
    from .machine import open_machine as open_

    return open_(simulate)


def __getattr__(name: str) -> Any:
    from importlib import import_module

    if name in _CALLABLE_MODULES:
        return import_module(f".{name}", __name__)
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vramkit' has no attribute {name!r}")


__all__ = ["CudaAlreadyInitialized", "NoGpusAvailable", "Selection", "WaitTimedOut", "select_gpus", "use_gpus",
           "Device", "GpuProcess", "Machine", "MigDevice", "NvmlUnavailable", "ScenarioError",
           "Snapshot", "estimate", "kill", "open_machine", "plan", "snapshot", "trace_memory",
           "__version__"]


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
