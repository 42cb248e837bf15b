"""PyTorch helpers: run inside a training job (the optional torch extra).

    from vramkit.torch import oom_guard, where, LeakDetector, find_batch_size, accumulation_plan
    from vramkit.torch import simulated_memory_cap   # a GPU's memory limit on any machine, for tests

Importing this package does not import torch: each helper imports it when first used, so
`import vramkit.torch` is cheap and works where torch is missing (the helpers then raise
ImportError with the install hint).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "oom_guard": "guard", "OomDiagnosis": "guard", "diagnose": "guard", "is_oom": "guard",
    "device_check": "guard", "largest_tensors": "guard",
    "where": "where", "WhereReport": "where",
    "LeakDetector": "leak", "Leak": "leak", "LeakReport": "leak", "LeakWarning": "leak",
    "find_batch_size": "batch", "find_batch_size_doubling": "batch", "BatchSearch": "batch",
    "accumulation_plan": "batch", "AccumulationPlan": "batch",
    "simulated_memory_cap": "memcap", "SimulatedMemoryCap": "memcap",
    "VramTrainerCallback": "callbacks", "lightning_callback": "callbacks",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vramkit.torch' has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
