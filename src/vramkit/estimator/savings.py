"""What each of `vram doctor`'s model-dependent fixes would save, from the analytic estimator,
anchored to what the OOM message says the job held.

The message does not say how the job was set up, so the baseline is AdamW training with eager
attention at the batch size, sequence length and precision the user gives (fp32 when not given:
the common case of a job that ran out of memory). Each fix is that baseline with one thing changed.

The estimator's baseline is then compared with what the job needed at the OOM (what it held plus
the request that failed). When they disagree (the estimate does not fit the GPU at all, or is off
by more than 2x) the setup is not the one the job ran, so each fix's saving is taken as the same
share of the job's memory that it is of the estimate, and `anchor_note` says so.
"""

from __future__ import annotations

from typing import Any

from .analytic import estimate
from .specs import EstimateError, resolve

# fix id (doctor.explain.MODEL_FIXES) -> the one change to the baseline setup
_CHANGES: dict[str, Any] = {
    "halve_batch": lambda b: {"batch": max(1, b["batch"] // 2)},
    "grad_accum": lambda b: {"batch": max(1, b["batch"] // 2), "grad_accum": 2},
    "bf16": lambda b: {"precision": "bf16" if b["precision"] == "fp32" else b["precision"]},
    "checkpointing": lambda b: {"checkpointing": True},
    "no_grad": lambda b: {"mode": "infer"},
    "offload_optimizer": lambda b: {"zero": 2, "offload": True},
}
DEFAULT_PRECISION = "fp32"
AGREE = 2.0  # estimate / job's need within [1/AGREE, AGREE]: the estimator's bytes are used as they are


def baseline(context: dict[str, Any]) -> dict[str, Any]:
    """The setup the estimates start from: the context's batch, sequence length and precision."""
    return {"batch": context.get("batch_size"), "seq": context.get("seq_len"),
            "precision": context.get("precision") or DEFAULT_PRECISION, "optimizer": "adamw", "attention": "eager"}


def job_need(report: Any) -> int | None:
    """What the job needed when it ran out, as the message says: what it held plus the request."""
    held: int | None = next((v for v in (getattr(report, "process_bytes", None),
                                         getattr(report, "reserved_bytes", None),
                                         getattr(report, "allocated_bytes", None)) if v), None)
    if held is None:
        return None
    requested: int = getattr(report, "requested_bytes", None) or 0
    return held + requested


def anchor_scale(context: dict[str, Any], before: int) -> float:
    """1.0 when the estimate agrees with the message; otherwise the job's need over the estimate."""
    report = context.get("report")
    need = job_need(report)
    if need is None or before <= 0:
        return 1.0
    total = getattr(report, "total_bytes", None)
    if (total is not None and before > total) or not 1 / AGREE <= before / need <= AGREE:
        return need / before
    return 1.0


def _usable(context: dict[str, Any]) -> bool:
    report = context.get("report")
    # the estimator models GPU memory, not the host's RAM
    return bool(context.get("model") and context.get("batch_size")) and getattr(report, "kind", None) != "cpu"


def doctor_savings(fix_id: str, context: dict[str, Any]) -> int | None:
    """Bytes the fix would save for context's model, batch_size (seq_len, precision optional) and
    report, or None when the estimator cannot say."""
    change = _CHANGES.get(fix_id)
    if change is None or not _usable(context):
        return None
    base = baseline(context)
    try:
        spec = resolve(context["model"])
        before = estimate(spec, **base).total_bytes
        after = estimate(spec, **{**base, **change(base)}).total_bytes
    except EstimateError:
        return None  # a setup the estimator cannot model (e.g. no sequence length for a ViT)
    return int(max(0, before - after) * anchor_scale(context, before))


def anchor_note(context: dict[str, Any]) -> str | None:
    """One line on how the estimates relate to the job: the setup they assume and, when the
    message disagrees with it, how far and what was done about it."""
    if not _usable(context):
        return None
    base = baseline(context)
    seq = f", sequence {base['seq']}" if base["seq"] else ""
    setup = f"{base['precision']} AdamW training at batch {base['batch']}{seq}"
    try:
        before = estimate(resolve(context["model"]), **base).total_bytes
    except EstimateError as e:
        return f"no estimated savings: {e.message}"
    from ..units import format_size

    report = context.get("report")
    need = job_need(report)
    scale = anchor_scale(context, before)
    text = f"savings of model-dependent fixes are estimates for {setup} (vram estimate {context['model']} --explain)"
    if scale == 1.0 or need is None:
        return text
    total = getattr(report, "total_bytes", None)
    over = f", more than the GPU's {format_size(total)}" if total is not None and before > total else ""
    return (f"{text}; that setup needs {format_size(before)}{over}, {before / need:.1f}x what the job needed "
            f"at the OOM ({format_size(need)} held + asked): the job ran another setup, so each saving is "
            "that fix's share of the job's memory; give --precision and --seq as the job ran them")
