"""`vram doctor` for people (text) and for programs (JSON): an OOM explained, or the checklist."""

from __future__ import annotations

from ..doctor.oom import FORMS
from ..i18n import N_, _, join_words, ngettext, pgettext
from ..procs.text import excerpt, sanitize
from ..units import format_size_any, format_size_as_logged
from .style import Style, clip
from .text_width import cells, pad, wrap

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, as in cli/common.py
if TYPE_CHECKING:  # `vram doctor LOG` loads neither the checklist nor gpu_state; JSON only for --json
    from typing import Any

    from ..doctor.checklist import Checklist
    from ..doctor.explain import Explanation
    from ..doctor.traceback import Frame
    from ..gpu_state import Snapshot

SCHEMA_VERSION = 1
_SEVERITY_STYLE = {"problem": ("red", "bold"), "warning": ("yellow",), "info": ("cyan",)}
# The checklist's severity tags (the JSON keeps the key: problem, warning, info).
_SEVERITY_TAG = {"problem": N_("PROBLEM"), "warning": N_("WARNING"), "info": N_("INFO")}
# What the text reads as the program's words by their kind (the JSON keeps the key).
_BASIS = {"message": N_("message"), "live": N_("live"), "estimate": N_("estimate")}


def _wrap(text: str, indent: int, width: int) -> list[str]:
    """Wrap rather than cut: a diagnosis is read in full. By display width (Chinese breaks between
    any two characters: text_width.wrap); ASCII text as textwrap wraps it, what the English output
    always was."""
    lead = " " * indent
    if text.isascii():
        import textwrap

        return textwrap.wrap(text, width=max(40, width), initial_indent=lead, subsequent_indent=lead,
                             break_on_hyphens=False) or [lead]
    return [lead + line for line in wrap(" ".join(text.split("\n")), max(40, width) - indent)] or [lead]


# ------------------------------------------------------------------ an OOM, explained

# The failure's heading by the message's kind; a kind not listed is CUDA's.
_WHAT = {"cpu": N_("Host RAM ran out"), "cublas": N_("cuBLAS could not allocate"),
         "cudnn": N_("cuDNN could not allocate"), "mps": N_("MPS ran out of memory"),
         "hip": N_("HIP (ROCm) out of memory"), "hip-runtime": N_("HIP (ROCm) out of memory"),
         "paddle": N_("PaddlePaddle out of GPU memory"),
         "tensorflow": N_("TensorFlow out of GPU memory"), "vllm": N_("vLLM: no memory left for the KV cache"),
         "ggml": N_("llama.cpp could not allocate"), "cuda": N_("CUDA out of memory")}


# The bar's part that the framework's allocator handed out, by the framework that printed the message
# (OomReport.framework); vLLM and DeepSpeed allocate through PyTorch.
_ALLOCATED_BY = {"pytorch": N_("allocated by PyTorch"), "tensorflow": N_("allocated by TensorFlow"),
                 "paddle": N_("allocated by PaddlePaddle"), "jax": N_("allocated by JAX"),
                 "llama.cpp": N_("allocated by llama.cpp")}


def _gpu_bar(ex: Explanation, style: Style, width: int = 50) -> list[str]:
    """One bar for the GPU that ran out: this job's parts, the others, and what was free."""
    r = ex.report
    if not r.total_bytes or r.free_bytes is None:
        return []
    parts: list[tuple[str, int | None, str, str]] = [
        (_(_ALLOCATED_BY.get(r.framework, _ALLOCATED_BY["pytorch"])), r.allocated_bytes, "█", "#"),
        (_("reserved, unallocated"), r.reserved_unallocated_bytes, "▒", "R"),
        (_("non-PyTorch (this job)"), ex.non_pytorch_bytes, "▓", "N"),
        (_("other processes") if ex.others_basis != "outside PyTorch" else _("outside PyTorch"), ex.others_bytes,
         "░", "O"),
        (pgettext("memory", "free"), r.free_bytes, "·", "."),
    ]
    if r.allocated_bytes is None and r.reserved_bytes is None and ex.job_bytes:
        parts[0] = (_("this job"), ex.job_bytes, "█", "#")  # the message names the job's total only
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
        legend.append(f"{mark} {label} {format_size_any(value)}")
    return [f"  [{bar[:width].ljust(width)}] {format_size_any(r.total_bytes)}", *_wrap("  ".join(legend), 3, 200)]


def _job_row(ex: Explanation) -> str:
    """This job's memory: its total, and what it is made of where the message says."""
    r = ex.report
    logged = format_size_as_logged  # the figures the message printed, as it printed them
    parts = [_("{size} allocated").format(size=logged(r.allocated_bytes))] if r.allocated_bytes is not None else []
    if r.reserved_unallocated_bytes is not None:
        parts.append(_("{size} reserved-unallocated").format(size=logged(r.reserved_unallocated_bytes)))
    if ex.non_pytorch_bytes is not None:
        parts.append(_("{size} non-PyTorch").format(size=logged(ex.non_pytorch_bytes)))
    total = (logged(ex.job_bytes) if ex.job_bytes is not None
             else _("at least {size}").format(size=logged(r.reserved_bytes)) if r.reserved_bytes is not None
             else None)
    if total is None:  # no total to split (TensorFlow's BFC InUse): the parts alone
        return " + ".join(parts) if parts else "N/A"
    return f"{total} = " + " + ".join(parts) if parts else total


def render_diagnosis(ex: Explanation, source: str, style: Style, width: int = 120,
                     live_note: str | None = None) -> str:
    r = ex.report
    where = _("line {line} of {source}").format(line=r.line, source=source) if r.line else source
    what = (_("XLA ({framework}) out of memory").format(framework=r.framework) if r.kind == "xla"
            else _(_WHAT.get(r.kind, _WHAT["cuda"])))
    if r.device is not None:
        what = _("{failure} on GPU {index}").format(failure=what, index=r.device)
    if r.rank is not None:
        what = _("{failure} (rank {rank})").format(failure=what, rank=r.rank)
    # Translators: {exception} is the exception's Python name (RuntimeError, torch.OutOfMemoryError) or the
    # word "message"; {form} is the message's form (2.2+, 1.4-2.0, hip...): both stay as they are
    about = _("({where}; {exception}, form: {form})").format(
        where=where, exception=r.exception or pgettext("exception", "message"), form=r.form)
    lines = [style.paint(what, "bold") + f"  {about}"]
    rows: list[tuple[str, str]] = []
    logged = format_size_as_logged  # the facts: the figures the message printed, as it printed them
    if r.requested_bytes is not None:
        rows.append((_("asked for"), logged(r.requested_bytes)))
    if r.free_bytes is not None:
        free = (_("{free} of {total}").format(free=logged(r.free_bytes), total=logged(r.total_bytes))
                if r.total_bytes is not None else logged(r.free_bytes))
        if r.shortfall_bytes:
            free = _("{free}  → short by {short}").format(free=free, short=logged(r.shortfall_bytes))
        rows.append((pgettext("memory", "free"), free))
    elif r.total_bytes is not None:
        rows.append((_("limit") if r.kind == "mps" else pgettext("memory", "total"), logged(r.total_bytes)))
    if r.allowed_bytes is not None and r.kind != "mps":
        rows.append((_("cap"), _("{size} allowed by set_per_process_memory_fraction").format(
            size=logged(r.allowed_bytes))))
    if ex.job_bytes is not None or r.allocated_bytes is not None:
        label = _("this job (pid {pid})").format(pid=ex.job_pid) if ex.job_pid is not None else _("this job")
        rows.append((label, _job_row(ex)))
    if ex.others_bytes is not None:
        from ..vendor_terms import runtime

        size = logged(ex.others_bytes)
        if ex.others_basis == "outside PyTorch":
            rows.append((_("outside PyTorch"), _("{size} (other processes + this job's {context})").format(
                size=size, context=_(runtime(ex.vendor).context))))
        elif ex.others_basis == "derived":
            rows.append((_("others"), _("{size} (total - free - this job)").format(size=size)))
        else:
            rows.append((_("others"), size))
    key_width = max((cells(k) for k, __ in rows), default=0)
    lines += [f"  {pad(k, key_width)}  {v}" for k, v in rows]
    lines += _gpu_bar(ex, style)
    holders = [h for h in ex.holders if not h.is_job]
    if holders:
        lines.append("  " + (_("other processes on that GPU (NVML GPU {index}):").format(index=ex.live_gpu)
                             if ex.live_gpu is not None else _("other processes on that GPU:")))
        for h in holders[:8]:
            when = _("at the OOM") if h.source == "message" else _("now")
            who = f"{h.user}  " if h.user else ""
            cmd = sanitize(h.command) if h.command else ""
            lines.append(clip(f"    {format_size_any(h.bytes):>8}  pid {h.pid:<8} [{when}] {who}{cmd}".rstrip(), width))
    lines.append("")
    # the label bold, as the template places it (a translation may put the text elsewhere)
    label, __, rest = _("Cause: {text}").partition("{text}")
    lines.append(style.paint(label, "bold") + ex.cause_text + rest)
    for c in ex.contributing:
        lines += _wrap(_("also: {text}").format(text=c), 2, width)
    lines.append("")
    lines.append(style.paint(_("Fixes, most useful first:"), "bold"))
    for i, f in enumerate(ex.fixes, 1):
        saves = ""
        if f.saves_bytes is not None:
            saves = "  " + _("saves {size} ({basis})").format(size=format_size_any(f.saves_bytes),
                                                             basis=_(_BASIS.get(f.basis or "", f.basis or "")))
            if f.enough is True:
                saves += " " + style.paint(_("enough"), "green")
        lines.append(f" {i:>2}. {f.title}{saves}")
        lines += _wrap(sanitize(f.how), 5, width)
    if any(f.saves_bytes is None for f in ex.fixes):
        why = (_("(a fix without a number: one the estimator does not model; it estimates changes of batch, "
                 "precision, checkpointing, accumulation and optimizer state)") if ex.estimated
               else _("(a fix without a number: its saving depends on what the log does not say; give --model and "
                      "--batch)"))
        lines.append(style.paint(f"     {why}", "dim"))
    lines += _wrap(ex.phase.sentence(), 0, width) if ex.phase is not None else []
    notes = list(ex.notes) + ([live_note] if live_note else [])
    for n in notes:
        lines.append(style.paint(_("note: {note}").format(note=n), "dim"))
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
        "rank": r.rank,
        "requested_bytes": r.requested_bytes,
        "total_bytes": r.total_bytes,
        "free_bytes": r.free_bytes,
        "shortfall_bytes": r.shortfall_bytes,
        "allowed_bytes": r.allowed_bytes,
        "allocated_bytes": r.allocated_bytes,
        "reserved_bytes": r.reserved_bytes,
        "reserved_unallocated_bytes": r.reserved_unallocated_bytes,
        "private_pool_bytes": r.private_pool_bytes,
        "non_pytorch_bytes": ex.non_pytorch_bytes,
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


def _scope(result: Checklist) -> str:
    gpus = result.gpus_checked
    span = ",".join(map(str, gpus)) if len(gpus) < 3 or gpus != list(range(gpus[0], gpus[-1] + 1)) \
        else f"{gpus[0]}-{gpus[-1]}"
    if result.visible_set is None:
        cvd = _("{variable} not set").format(variable=result.visible_variable)
    elif result.cuda_visible_devices is not None:  # as before: the value quoted
        cvd = f"{result.visible_variable}={excerpt(result.cuda_visible_devices)!r}"
    else:
        cvd = excerpt(result.visible_set)
    if not gpus:
        return _("checked GPUs none ({visible})").format(visible=cvd)
    return ngettext("checked GPU {gpus} ({visible})", "checked GPUs {gpus} ({visible})", len(gpus)).format(
        gpus=span, visible=cvd)


def _severity_count(severity: str, n: int) -> str:
    if severity == "problem":
        return ngettext("{n} problem", "{n} problems", n).format(n=n)
    if severity == "warning":
        return ngettext("{n} warning", "{n} warnings", n).format(n=n)
    return ngettext("{n} info", "{n} infos", n).format(n=n)


def render_checklist(result: Checklist, snap: Snapshot, style: Style, width: int = 120) -> str:
    from .banner import banner

    lines = [banner(snap, style, width), f"vram doctor: {_scope(result)}"]
    if not result.findings:
        lines.append(style.paint(_("No problems found."), "green"))
    tags = {k: _(v) for k, v in _SEVERITY_TAG.items()}
    tag_width = max(8, *(cells(t) for t in tags.values()))
    for f in result.findings:
        tag = style.paint(pad(tags[f.severity], tag_width), *_SEVERITY_STYLE[f.severity])
        lines.append(f" {tag} {sanitize(f.title)}")
        lines += _wrap(sanitize(f.detail), tag_width + 2, width)
        lines += _wrap("→ " + sanitize(f.fix), tag_width + 2, width)
    for n in result.notes:
        lines.append(style.paint(_("note: {note}").format(note=n), "dim"))
    if result.findings:
        counts: dict[str, int] = {}
        for f in result.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        summary = join_words(_severity_count(k, n) for k, n in counts.items())
        total = len(result.findings)
        lines.append(ngettext("{n} finding: {summary}", "{n} findings: {summary}", total).format(
            n=total, summary=summary))
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
