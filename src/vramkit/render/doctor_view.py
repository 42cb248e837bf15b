"""`vram doctor` for people (text) and for programs (JSON): an OOM explained, or the checklist."""

from __future__ import annotations

import textwrap

from ..doctor.oom import FORMS
from ..procs import sanitize
from ..units import format_size
from .style import Style, clip

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, as in cli/common.py
if TYPE_CHECKING:  # `vram doctor LOG` loads neither the checklist nor gpu_state; JSON only for --json
    from typing import Any

    from ..doctor.checklist import Checklist
    from ..doctor.explain import Explanation
    from ..doctor.traceback import Frame
    from ..gpu_state import Snapshot

SCHEMA_VERSION = 1
_SEVERITY_STYLE = {"problem": ("red", "bold"), "warning": ("yellow",), "info": ("cyan",)}


def _wrap(text: str, indent: int, width: int) -> list[str]:
    """Wrap rather than cut: a diagnosis is read in full."""
    pad = " " * indent
    return textwrap.wrap(text, width=max(40, width), initial_indent=pad, subsequent_indent=pad,
                         break_on_hyphens=False) or [pad]


# ------------------------------------------------------------------ an OOM, explained

def _gpu_bar(ex: Explanation, style: Style, width: int = 50) -> list[str]:
    """One bar for the GPU that ran out: this job's parts, the others, and what was free."""
    r = ex.report
    if not r.total_bytes or r.free_bytes is None:
        return []
    parts: list[tuple[str, int | None, str, str]] = [
        ("allocated by PyTorch", r.allocated_bytes, "█", "#"),
        ("reserved, unallocated", r.reserved_unallocated_bytes, "▒", "R"),
        ("non-PyTorch (this job)", r.non_pytorch_bytes, "▓", "N"),
        ("other processes" if ex.others_basis != "outside PyTorch" else "outside PyTorch", ex.others_bytes, "░", "O"),
        ("free", r.free_bytes, "·", "."),
    ]
    if r.allocated_bytes is None and r.reserved_bytes is None and ex.job_bytes:
        parts[0] = ("this job", ex.job_bytes, "█", "#")  # the message names the job's total only
    bar, legend, done = "", [], 0.0
    for label, value, uni, ascii_ in parts:
        if not value:
            continue
        mark = uni if style.unicode else ascii_
        # cumulative rounding keeps the bar exactly `width` cells; a part too small for a cell still shows
        end = min(width, done + width * value / r.total_bytes)
        cells = max(1, round(end) - len(bar))
        bar += mark * cells
        done = end
        legend.append(f"{mark} {label} {format_size(value)}")
    return [f"  [{bar[:width].ljust(width)}] {format_size(r.total_bytes)}", *_wrap("  ".join(legend), 3, 200)]


def render_diagnosis(ex: Explanation, source: str, style: Style, width: int = 120,
                     live_note: str | None = None) -> str:
    r = ex.report
    where = f"line {r.line} of {source}" if r.line else source
    gpu = f" on GPU {r.device}" if r.device is not None else ""
    what = {"cpu": "Host RAM ran out", "cublas": "cuBLAS could not allocate", "cudnn": "cuDNN could not allocate",
            "mps": "MPS ran out of memory", "hip": "HIP (ROCm) out of memory",
            "paddle": "PaddlePaddle out of GPU memory", "tensorflow": "TensorFlow out of GPU memory",
            "xla": f"XLA ({r.framework}) out of memory", "vllm": "vLLM: no memory left for the KV cache",
            "ggml": "llama.cpp could not allocate"}.get(r.kind, "CUDA out of memory")
    lines = [style.paint(f"{what}{gpu}", "bold") + f"  ({where}; {r.exception or 'message'}, form: {r.form})"]
    rows: list[tuple[str, str]] = []
    if r.requested_bytes is not None:
        rows.append(("asked for", format_size(r.requested_bytes)))
    if r.free_bytes is not None:
        total = f" of {format_size(r.total_bytes)}" if r.total_bytes is not None else ""
        short = f"  → short by {format_size(r.shortfall_bytes)}" if r.shortfall_bytes else ""
        rows.append(("free", f"{format_size(r.free_bytes)}{total}{short}"))
    elif r.total_bytes is not None:
        rows.append(("limit" if r.kind == "mps" else "total", format_size(r.total_bytes)))
    if r.allowed_bytes is not None and r.kind != "mps":
        rows.append(("cap", f"{format_size(r.allowed_bytes)} allowed by set_per_process_memory_fraction"))
    if ex.job_bytes is not None or r.allocated_bytes is not None:
        parts = [f"{format_size(r.allocated_bytes)} allocated"] if r.allocated_bytes is not None else []
        if r.reserved_unallocated_bytes is not None:
            parts.append(f"{format_size(r.reserved_unallocated_bytes)} reserved-unallocated")
        if r.non_pytorch_bytes is not None:
            parts.append(f"{format_size(r.non_pytorch_bytes)} non-PyTorch")
        total = (format_size(ex.job_bytes) if ex.job_bytes is not None
                 else f"at least {format_size(r.reserved_bytes)}" if r.reserved_bytes is not None else "N/A")
        pid = f" (pid {ex.job_pid})" if ex.job_pid is not None else ""
        rows.append((f"this job{pid}", f"{total} = " + " + ".join(parts) if parts else total))
    if ex.others_bytes is not None:
        from ..vendor_terms import runtime

        label = "outside PyTorch" if ex.others_basis == "outside PyTorch" else "others"
        extra = {"derived": " (total - free - this job)",
                 "outside PyTorch": f" (other processes + this job's {runtime(ex.vendor).context})"}.get(
                     ex.others_basis or "", "")
        rows.append((label, format_size(ex.others_bytes) + extra))
    key_width = max((len(k) for k, _ in rows), default=0)
    lines += [f"  {k.ljust(key_width)}  {v}" for k, v in rows]
    lines += _gpu_bar(ex, style)
    holders = [h for h in ex.holders if not h.is_job]
    if holders:
        lines.append("  other processes on that GPU" + (f" (NVML GPU {ex.live_gpu})" if ex.live_gpu is not None else "")
                     + ":")
        for h in holders[:8]:
            when = "at the OOM" if h.source == "message" else "now"
            who = f"{h.user}  " if h.user else ""
            cmd = sanitize(h.command) if h.command else ""
            lines.append(clip(f"    {format_size(h.bytes):>8}  pid {h.pid:<8} [{when}] {who}{cmd}".rstrip(), width))
    lines.append("")
    lines.append(style.paint("Cause: ", "bold") + ex.cause_text)
    for c in ex.contributing:
        lines += _wrap(f"also: {c}", 2, width)
    lines.append("")
    lines.append(style.paint("Fixes, most useful first:", "bold"))
    for i, f in enumerate(ex.fixes, 1):
        saves = ""
        if f.saves_bytes is not None:
            saves = f"  saves {format_size(f.saves_bytes)} ({f.basis})"
            if f.enough is True:
                saves += " " + style.paint("enough", "green")
        lines.append(f" {i:>2}. {f.title}{saves}")
        lines += _wrap(sanitize(f.how), 5, width)
    if any(f.saves_bytes is None for f in ex.fixes):
        why = ("one the estimator does not model; it estimates changes of batch, precision, checkpointing, "
               "accumulation and optimizer state" if ex.estimated
               else "its saving depends on what the log does not say; give --model and --batch")
        lines.append(style.paint(f"     (a fix without a number: {why})", "dim"))
    lines += _wrap(ex.phase.sentence(), 0, width) if ex.phase is not None else []
    notes = list(ex.notes) + ([live_note] if live_note else [])
    for n in notes:
        lines.append(style.paint(f"note: {n}", "dim"))
    return "\n".join(lines)


def _frame_dict(frame: Frame | None) -> dict[str, Any] | None:
    if frame is None:
        return None
    return {"file": sanitize(frame.file), "line": frame.line, "function": sanitize(frame.func),
            "code": sanitize(frame.code)}


def diagnosis_dict(ex: Explanation, source: str, snap: Snapshot | None, live_note: str | None) -> dict[str, Any]:
    r = ex.report
    return {
        "schema": SCHEMA_VERSION,
        "source": source,
        "line": r.line,
        "kind": r.kind,
        "form": r.form,
        "form_description": FORMS.get(r.form),
        "framework": r.framework,
        "exception": r.exception,
        "message": r.message,
        "device": r.device,
        "requested_bytes": r.requested_bytes,
        "total_bytes": r.total_bytes,
        "free_bytes": r.free_bytes,
        "shortfall_bytes": r.shortfall_bytes,
        "allowed_bytes": r.allowed_bytes,
        "allocated_bytes": r.allocated_bytes,
        "reserved_bytes": r.reserved_bytes,
        "reserved_unallocated_bytes": r.reserved_unallocated_bytes,
        "private_pool_bytes": r.private_pool_bytes,
        "non_pytorch_bytes": r.non_pytorch_bytes,
        "process_bytes": r.process_bytes,
        "job_pid": ex.job_pid,
        "job_bytes": ex.job_bytes,
        "others_bytes": ex.others_bytes,
        "others_basis": ex.others_basis,
        "processes": [{"pid": h.pid, "bytes": h.bytes, "source": h.source, "is_job": h.is_job,
                       "user": h.user, "command": sanitize(h.command) if h.command else None} for h in ex.holders],
        "phase": None if ex.phase is None else {
            "id": ex.phase.id, "title": ex.phase.title, "detail": ex.phase.detail, "evaluating": ex.phase.evaluating,
            "frame": _frame_dict(ex.phase.evidence), "user_frame": _frame_dict(ex.phase.user_frame)},
        "cause": ex.cause,
        "cause_text": ex.cause_text,
        "contributing": ex.contributing,
        "fixes": [{"id": f.id, "title": f.title, "how": f.how, "saves_bytes": f.saves_bytes, "basis": f.basis,
                   "enough": f.enough} for f in ex.fixes],
        "hint": r.hint,
        "live": {"available": snap is not None, "gpu": ex.live_gpu,
                 "simulated": snap.simulated if snap is not None else None,
                 "scenario": snap.scenario if snap is not None else None, "note": live_note},
        "notes": ex.notes,
    }


def diagnosis_json(ex: Explanation, source: str, snap: Snapshot | None, live_note: str | None) -> str:
    import json

    return json.dumps(diagnosis_dict(ex, source, snap, live_note), indent=2)


# ------------------------------------------------------------------ the checklist

def _clipped(text: str, keep: int = 60) -> str:
    """An environment value as much as a person reads: a 4,000-digit one is cut, and says so."""
    return text if len(text) <= keep else f"{text[:keep]}… ({len(text):,} characters)"


def _scope(result: Checklist) -> str:
    gpus = result.gpus_checked
    span = ",".join(map(str, gpus)) if len(gpus) < 3 or gpus != list(range(gpus[0], gpus[-1] + 1)) \
        else f"{gpus[0]}-{gpus[-1]}"
    if result.visible_set is None:
        cvd = f"{result.visible_variable} not set"
    elif result.cuda_visible_devices is not None:  # as before: the value quoted
        cvd = f"{result.visible_variable}={_clipped(sanitize(result.cuda_visible_devices))!r}"
    else:
        cvd = _clipped(sanitize(result.visible_set))
    return f"checked GPU{'s' if len(gpus) != 1 else ''} {span or 'none'} ({cvd})"


def render_checklist(result: Checklist, snap: Snapshot, style: Style, width: int = 120) -> str:
    from .banner import banner

    lines = [banner(snap, style, width), f"vram doctor: {_scope(result)}"]
    if not result.findings:
        lines.append(style.paint("No problems found.", "green"))
    for f in result.findings:
        tag = style.paint(f"{f.severity.upper():<8}", *_SEVERITY_STYLE[f.severity])
        lines.append(f" {tag} {sanitize(f.title)}")
        lines += _wrap(sanitize(f.detail), 10, width)
        lines += _wrap("→ " + sanitize(f.fix), 10, width)
    for n in result.notes:
        lines.append(style.paint(f"note: {n}", "dim"))
    if result.findings:
        counts: dict[str, int] = {}
        for f in result.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        summary = ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in counts.items())
        lines.append(f"{len(result.findings)} finding{'s' if len(result.findings) != 1 else ''}: {summary}")
    return "\n".join(lines)


def checklist_json(result: Checklist, snap: Snapshot) -> str:
    import json
    from datetime import datetime, timezone

    out = {
        "schema": SCHEMA_VERSION,
        "time": datetime.fromtimestamp(snap.time, timezone.utc).isoformat(timespec="seconds"),
        "simulated": snap.simulated,
        "scenario": snap.scenario,
        "gpus_checked": result.gpus_checked,
        "cuda_visible_devices": result.cuda_visible_devices,
        "visible_devices": result.visible_set,
        "user": result.me,
        "findings": [{"code": f.code, "severity": f.severity, "title": f.title, "detail": f.detail, "fix": f.fix,
                      "gpus": f.gpus, "pid": f.pid, "user": f.user, "command": f.command, "memory": f.memory}
                     for f in result.findings],
        "notes": result.notes,
    }
    return json.dumps(out, indent=2)
