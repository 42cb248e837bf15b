"""What each of `vram doctor`'s model-dependent fixes would save, from the analytic estimator.

The OOM message does not say how the job was set up, so the baseline is the common case for a
job that ran out of memory: fp32 training with AdamW and eager attention, at the batch size (and
sequence length) the user gives. Each fix is that baseline with one thing changed.
"""

from __future__ import annotations

from typing import Any

from .analytic import estimate
from .specs import EstimateError, resolve

# fix id (doctor.explain.MODEL_FIXES) -> the one change to the baseline setup
_CHANGES: dict[str, Any] = {
    "halve_batch": lambda b: {"batch": max(1, b["batch"] // 2)},
    "grad_accum": lambda b: {"batch": max(1, b["batch"] // 2), "grad_accum": 2},
    "bf16": lambda b: {"precision": "bf16"},
    "checkpointing": lambda b: {"checkpointing": True},
    "no_grad": lambda b: {"mode": "infer"},
    "offload_optimizer": lambda b: {"zero": 2, "offload": True},
}


def doctor_savings(fix_id: str, context: dict[str, Any]) -> int | None:
    """Bytes the fix would save for context's model and batch_size (seq_len optional), or None."""
    model, batch = context.get("model"), context.get("batch_size")
    change = _CHANGES.get(fix_id)
    report = context.get("report")
    if not model or not batch or change is None or getattr(report, "kind", None) == "cpu":
        return None  # the estimator models GPU memory, not the host's RAM
    baseline = {"batch": batch, "seq": context.get("seq_len"), "precision": "fp32",
                "optimizer": "adamw", "attention": "eager"}
    try:
        spec = resolve(model)
        before = estimate(spec, **baseline).total_bytes
        after = estimate(spec, **{**baseline, **change(baseline)}).total_bytes
    except EstimateError:
        return None  # a setup the estimator cannot model (e.g. no sequence length for a ViT)
    return max(0, before - after)
