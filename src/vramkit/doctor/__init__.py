"""Diagnose and prevent out-of-memory errors: read PyTorch's OOM messages, explain them, and check
a machine for the usual culprits. Pure Python on the snapshot: no torch import (see vramkit.torch
for the helpers that run inside a training job).
"""

from __future__ import annotations

from .checklist import Finding, run_checklist
from .explain import Explanation, Fix, Holder, SavingsHook, explain
from .oom import OomProcess, OomReport, find_oom, parse_oom

__all__ = ["Explanation", "Finding", "Fix", "Holder", "OomProcess", "OomReport", "SavingsHook", "explain",
           "find_oom", "parse_oom", "run_checklist"]
