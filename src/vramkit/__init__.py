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

`vramkit.estimate` is a module that can be called: `vramkit.estimate(...)` runs
`vramkit.estimate.estimate(...)`. The functions here import their modules when called, so
`import vramkit` stays light.
"""

from __future__ import annotations

from ._version import __version__

TYPE_CHECKING = False  # typing itself is not imported: `vram --help` loads nothing it does not need
if TYPE_CHECKING:
    import os
    from collections.abc import Iterable
    from typing import Any

    from .killing import KillReport, KillRequestError
    from .machine import Machine
    from .model import Device, GpuProcess, MigDevice, Snapshot
    from .nvml.backend import NvmlUnavailable
    from .nvml.scenario import ScenarioError

# name -> the submodule that defines it, imported on first use so `import vramkit` stays light
_LAZY = {"Device": "model", "GpuProcess": "model", "MigDevice": "model", "Snapshot": "model",
         "NvmlUnavailable": "nvml.backend", "ScenarioError": "nvml.scenario",
         "Machine": "machine", "KillReport": "killing", "KillRequestError": "killing",
         **{n: "allocate" for n in ("CudaAlreadyInitialized", "NoGpusAvailable", "Selection", "WaitTimedOut",
                                    "select_gpus", "use_gpus")},
         "plan": "estimate", "trace_memory": "estimate"}
# callable modules (_callable.py): vramkit.estimate(...)
_CALLABLE_MODULES = ("estimate",)


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


def kill(pids: Iterable[int] = (), *, gpu: int | Iterable[int] | None = None, user: str | Iterable[str] | None = None,
         idle: float | str | None = None, zombie: bool = False, holders: bool = False, signal: str | int = "TERM",
         timeout: float = 10.0, force: bool = False, all_users: bool = False, dry_run: bool = False,
         simulate: str | None = None, audit_log: str | os.PathLike[str] | None = None) -> KillReport:
    """Signal GPU processes with every safety check of `vram kill`, without asking (docs/api.md,
    docs/safety.md). Raises KillRequestError for a request that makes no sense."""
    from .killing import kill as kill_checked

    return kill_checked(pids, gpu=gpu, user=user, idle=idle, zombie=zombie, holders=holders, signal=signal,
                        timeout=timeout, force=force, all_users=all_users, dry_run=dry_run, simulate=simulate,
                        audit_log=audit_log)


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
           "Device", "GpuProcess", "KillReport", "KillRequestError", "Machine", "MigDevice", "NvmlUnavailable",
           "ScenarioError", "Snapshot", "estimate", "kill", "open_machine", "plan", "snapshot", "trace_memory",
           "__version__"]


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
