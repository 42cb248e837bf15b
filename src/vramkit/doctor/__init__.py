"""Diagnose and prevent out-of-memory errors: read PyTorch's OOM messages, explain them, and check
a machine for the usual culprits. Pure Python on the snapshot: no torch import (see vramkit.torch
for the helpers that run inside a training job).
"""

from __future__ import annotations

from .explain import Explanation, Fix, Holder, SavingsHook, explain
from .oom import OomProcess, OomReport, find_oom, parse_oom

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .checklist import Finding, run_checklist


def __getattr__(name: str) -> Any:
    # the machine checklist (statistics, cuda_env) loads on first use: `vram doctor LOG` needs none of it
    if name in ("Finding", "run_checklist"):
        from . import checklist

        return getattr(checklist, name)
    raise AttributeError(f"module 'vramkit.doctor' has no attribute {name!r}")


__all__ = ["Explanation", "Finding", "Fix", "Holder", "OomProcess", "OomReport", "SavingsHook", "explain",
           "find_oom", "parse_oom", "run_checklist"]
