"""Will it fit? Model specs, the analytic memory estimator, the fit planner, and (with the
optional torch extra) the traced estimator.

    from vramkit.estimator import estimate, plan
    e = estimate("bert-large-uncased", batch=4, seq=512, precision="fp32")
    e.total_bytes, e.peak_bytes, e.breakdown
    p = plan("llama-3-8b", "a100-80gb", seq=4096)

Importing this package imports no torch; `vramkit.estimator.trace` does, when used.
`vramkit.estimate()` and `vramkit.plan()` call `estimate` and `plan` here.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from .analytic import Estimate, Setup, estimate
    from .planner import Plan, plan
    from .savings import doctor_savings
    from .specs import EstimateError, ModelSpec, resolve
    from .trace import trace_estimate, trace_memory

__all__ = ["Estimate", "EstimateError", "ModelSpec", "Plan", "Setup", "doctor_savings", "estimate", "plan",
           "resolve", "trace_estimate", "trace_memory"]

_WHERE = {"Estimate": "analytic", "Setup": "analytic", "estimate": "analytic", "EstimateError": "specs",
          "ModelSpec": "specs", "resolve": "specs", "Plan": "planner", "plan": "planner",
          "trace_estimate": "trace", "trace_memory": "trace", "doctor_savings": "savings"}


def __getattr__(name: str) -> Any:  # lazy: `vram status` never pays for the estimator
    if name in _WHERE:
        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

