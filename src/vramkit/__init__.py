"""vramkit: see, free, share and plan NVIDIA GPU memory on shared Linux servers.

Public API (documented in docs/api.md), plain typed functions:
    snapshot(simulate=None) -> Snapshot   read every GPU and who holds its memory
    open_machine(simulate=None) -> Machine   for repeated snapshots (watch loops)
    kill(pids, ...) -> KillReport   signal GPU processes with every safety check (docs/safety.md)
    estimate(model, setup=None, **options) -> Estimate, plan(model, gpu, ...) -> Plan   will it fit
    trace_memory(model, step_fn, ...)   the measured peak of real steps on fake tensors (torch)
    select_gpus(count=1, **policy) -> Selection   choose GPUs now
    use_gpus(count=1, wait=None, **policy) -> Selection   reserve GPUs and set CUDA_VISIBLE_DEVICES
The data: Snapshot, Device, GpuProcess, MigDevice, Machine, KillReport, Estimate, Selection.
The errors: VramkitError (the base of every one), RequestError (bad input) and the documented kinds.

Each function imports the module that does the work when it is called, and the classes load on
first use, so `import vramkit` stays light. The modules behind them are named for what they are
(machine, killing, estimator, allocate), not for the functions, so importing one never hides one.
"""

from __future__ import annotations

from ._version import __version__

TYPE_CHECKING = False  # typing itself is not imported: `vram --help` loads nothing it does not need
if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable
    from typing import Any

    from .allocate import (
        CudaAlreadyInitialized,
        NoGpusAvailable,
        Selection,
        Selectors,
        WaitTimedOut,
    )
    from .audit import AuditError
    from .errors import RequestError, VramkitError
    from .estimator.analytic import Estimate, Setup
    from .estimator.planner import Plan
    from .estimator.specs import EstimateError
    from .estimator.trace import TraceResult
    from .gpu_state import Device, GpuProcess, MigDevice, Snapshot
    from .killing import KillReport, KillRequestError
    from .machine import Machine
    from .nvml.backend import NvmlUnavailable
    from .nvml.scenario import ScenarioError
    from .protect import ProtectConfigError

# class name -> the submodule that defines it, imported on first use so `import vramkit` stays light
_LAZY = {"Device": "gpu_state", "GpuProcess": "gpu_state", "MigDevice": "gpu_state", "Snapshot": "gpu_state",
         "Machine": "machine", "KillReport": "killing", "Estimate": "estimator.analytic", "Selection": "allocate",
         "VramkitError": "errors", "RequestError": "errors", "NvmlUnavailable": "nvml.backend",
         "ScenarioError": "nvml.scenario", "KillRequestError": "killing", "EstimateError": "estimator.specs",
         "AuditError": "audit", "ProtectConfigError": "protect",
         **{n: "allocate" for n in ("CudaAlreadyInitialized", "NoGpusAvailable", "WaitTimedOut")}}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vramkit' has no attribute {name!r}")


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


def estimate(model: object, setup: Setup | None = None, **options: Any) -> Estimate:
    """Estimate the memory one GPU needs (analytic: no torch, no GPU, no weights; docs/api.md).

    `model`: a catalog name, a config.json file or folder, a bare count such as "7b", or a
    ModelSpec; `options`: the fields of `vramkit.estimator.Setup` (mode, batch, seq, precision,
    optimizer, ...). Raises EstimateError (one line) for bad input.
    """
    from .estimator.analytic import estimate as estimate_

    return estimate_(model, setup, **options)


def plan(model: object, gpu: str | int = "a100-80gb", setup: Setup | None = None,
         gpu_label: str | None = None, **options: Any) -> Plan:
    """Plan a setup on a GPU (a catalog name or a capacity in bytes): `fits`, `max_batch` and the
    `changes` that make it fit, cheapest first (docs/api.md)."""
    from .estimator.planner import plan as plan_

    return plan_(model, gpu, setup, gpu_label, **options)


def trace_memory(model: Any, step_fn: Callable[[int], object], steps: int = 2, optimizer: Any = None,
                 fake_mode: Any = None) -> TraceResult:
    """Run `step_fn(step_index)` `steps` times on fake tensors and measure the live-tensor peak and
    what it is made of (needs torch; docs/estimation.md#the-traced-estimator)."""
    from .estimator.trace import trace_memory as trace_memory_

    return trace_memory_(model, step_fn, steps, optimizer, fake_mode)


def select_gpus(count: int = 1, *, min_free: str | int | None = None, max_util: str | float | None = None,
                exclude: Selectors = None, only: Selectors = None, prefer: str = "spread",
                exclusive: bool = False, simulate: str | None = None) -> Selection:
    """Choose GPUs now, as `vram pick` does, without reserving them (docs/api.md). Raises
    NoGpusAvailable when none fits and ValueError for a bad policy."""
    from .allocate import select_gpus as select_gpus_

    return select_gpus_(count, min_free=min_free, max_util=max_util, exclude=exclude, only=only, prefer=prefer,
                        exclusive=exclusive, simulate=simulate)


def use_gpus(count: int = 1, *, min_free: str | int | None = None, max_util: str | float | None = None,
             exclude: Selectors = None, only: Selectors = None, prefer: str = "spread",
             exclusive: bool = False, wait: float | bool | None = None, lease_timeout: float | None = None,
             simulate: str | None = None) -> Selection:
    """Choose and reserve GPUs for this process and set CUDA_VISIBLE_DEVICES before CUDA starts
    (docs/api.md). Raises CudaAlreadyInitialized, NoGpusAvailable (WaitTimedOut), ValueError."""
    from .allocate import use_gpus as use_gpus_

    return use_gpus_(count, min_free=min_free, max_util=max_util, exclude=exclude, only=only, prefer=prefer,
                     exclusive=exclusive, wait=wait, lease_timeout=lease_timeout, simulate=simulate)


__all__ = ["snapshot", "open_machine", "kill", "estimate", "plan", "trace_memory", "select_gpus", "use_gpus",
           "Snapshot", "Device", "GpuProcess", "MigDevice", "Machine", "KillReport", "Estimate", "Selection",
           "VramkitError", "RequestError", "NvmlUnavailable", "ScenarioError", "KillRequestError", "EstimateError",
           "AuditError", "ProtectConfigError", "NoGpusAvailable", "WaitTimedOut", "CudaAlreadyInitialized",
           "__version__"]


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
