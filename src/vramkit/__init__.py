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

from typing import Any

from ._version import __version__
from .model import Device, GpuProcess, MigDevice, Snapshot
from .nvml.backend import NvmlUnavailable
from .nvml.scenario import ScenarioError
from .snapshot import Machine, open_machine, snapshot

_ALLOCATE = ("CudaAlreadyInitialized", "NoGpusAvailable", "Selection", "WaitTimedOut", "select_gpus", "use_gpus")


def __getattr__(name: str) -> Any:  # lazy: `vram status` pays for neither the estimator nor the leases
    if name in _ALLOCATE:
        from . import allocate

        return getattr(allocate, name)
    if name == "kill":
        import importlib

        return importlib.import_module(".kill", __name__)  # a callable module: kill(...)
    if name in ("estimate", "plan", "trace_memory"):
        import importlib

        package = importlib.import_module(".estimate", __name__)  # a callable module: estimate(...)
        return package if name == "estimate" else getattr(package, name)
    raise AttributeError(f"module 'vramkit' has no attribute {name!r}")


__all__ = ["CudaAlreadyInitialized", "NoGpusAvailable", "Selection", "WaitTimedOut", "select_gpus", "use_gpus",
           "Device", "GpuProcess", "Machine", "MigDevice", "NvmlUnavailable", "ScenarioError",
           "Snapshot", "estimate", "kill", "open_machine", "plan", "snapshot", "trace_memory",
           "__version__"]
