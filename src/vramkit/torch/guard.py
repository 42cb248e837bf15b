"""oom_guard(): when a CUDA out-of-memory error escapes, say why before it propagates.

    with oom_guard():               # or @oom_guard() on the training step
        loss = model(batch).sum()
        loss.backward()

On OOM it prints (or hands to on_oom) a diagnosis: the parsed message and its cause (the
same as `vram doctor`), live allocator statistics (N/A without CUDA), the largest live tensors
with the variable that holds them and, with track=True, the line that created them, and the
device check; then the error is re-raised unchanged.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from collections.abc import Callable
from contextlib import ContextDecorator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from ..doctor.explain import Explanation, explain
from ..doctor.oom import OomReport, parse_oom
from ..doctor.traceback import Frame, frames_of_exception, phase_of
from ..i18n import _, ngettext, pgettext
from ..units import format_size
from ._common import format_bytes, format_site, frame_is_ours, in_vramkit_torch, require_torch, storage_key
from ._tracking import Tracker

_OOM_TEXTS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
              "DefaultCPUAllocator", "can't allocate memory")
_STATS = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
          "inactive_split_bytes.all.current", "num_alloc_retries", "num_ooms")


def is_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError), or an error whose text is an OOM."""
    torch = require_torch()
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, RuntimeError) and any(s in str(exc) for s in _OOM_TEXTS)


@dataclass
class TensorInfo:
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    device: str
    names: list[str] = field(default_factory=list)  # variables holding it, "name (file:line in func)"
    created_at: str | None = None
    keeps_graph: bool = False


def _stat_label(key: str) -> str:
    """'allocated_bytes.all.peak' -> 'allocated peak'; 'num_ooms' -> 'num_ooms'."""
    name, dotted, __ = key.partition(".")
    kind = key.rsplit(".", 1)[-1] if dotted else "current"
    return name.replace("_bytes", "") + ("" if kind == "current" else f" {kind}")


@dataclass
class OomDiagnosis:
    error: str
    report: OomReport | None
    explanation: Explanation | None
    allocator: dict[str, int] | None  # None: N/A
    allocator_note: str | None
    tensors: list[TensorInfo]
    device_check: list[str]
    snapshot: str | None = None  # the memory snapshot written (oom_guard(snapshot=...)), for `vram doctor`
    snapshot_note: str | None = None  # why none was written

    def format(self) -> str:
        lines = [_("vramkit oom_guard: out of memory")]
        if self.explanation is not None:
            ex = self.explanation
            r = ex.report  # the same report explain() was given
            known = _known_sizes(r)
            if known:
                lines.append(f"  {known}")
            lines.append("  " + _("cause: {text}").format(text=ex.cause_text))
            if ex.phase is not None:
                lines.append(f"  {ex.phase.sentence()}")
            lines += ["    " + _("also: {text}").format(text=c) for c in ex.contributing]
            for i, f in enumerate(ex.fixes[:4], 1):
                lines.append("  " + (_("fix {n}: {title} (saves {size}): {how}") if f.saves_bytes is not None
                                     else _("fix {n}: {title}: {how}")).format(
                    n=i, title=f.title, size=format_size(f.saves_bytes), how=f.how))
        else:
            lines.append(f"  {self.error[:200]}")
        if self.allocator is None:
            lines.append("  " + _("allocator stats: N/A ({reason})").format(reason=self.allocator_note))
        else:
            lines.append("  " + _("allocator: {stats}").format(stats=", ".join(
                f"{_stat_label(k)} {format_size(v) if 'bytes' in k else v}" for k, v in self.allocator.items())))
        if self.tensors:
            lines.append("  " + _("largest live tensors:"))
            for t in self.tensors:
                where = pgettext("clause separator", "; ").join(t.names[:2]) or _("no variable in the failing frames")
                if t.created_at:
                    where = _("{where}; created at {site}").format(where=where, site=t.created_at)
                if t.keeps_graph:
                    where = _("{where}; keeps an autograd graph alive").format(where=where)
                lines.append(f"    {format_bytes(t.nbytes):>9}  " + _("{dtype} {shape} on {device}: {where}").format(
                    dtype=t.dtype, shape=list(t.shape), device=t.device, where=where))
        lines += ["  " + _("device: {check}").format(check=d) for d in self.device_check]
        if self.snapshot is not None:
            lines.append("  " + _("memory snapshot: {path} (what was live, by category and line: vram doctor "
                                  "{path})").format(path=self.snapshot))
        elif self.snapshot_note is not None:
            lines.append("  " + _("memory snapshot: not written ({reason})").format(reason=self.snapshot_note))
        return "\n".join(lines)


def _known_sizes(r: OomReport) -> str:
    """'asked for A; free F of T' with only the parts the message gave (the runtime forms give none)."""
    parts = []
    if r.requested_bytes is not None:
        parts.append(_("asked for {size}").format(size=format_size(r.requested_bytes)))
    if r.free_bytes is not None:
        free = format_size(r.free_bytes)
        parts.append(_("free {free} of {total}").format(free=free, total=format_size(r.total_bytes))
                     if r.total_bytes is not None else _("free {free}").format(free=free))
    elif r.total_bytes is not None:
        parts.append(_("total {size}").format(size=format_size(r.total_bytes)))
    return pgettext("clause separator", "; ").join(parts)


def device_check(model: Any = None) -> list[str]:
    """What CUDA sees versus what the environment asks for, and where the model lives."""
    torch = require_torch()
    out = []
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    out.append(f"CUDA_VISIBLE_DEVICES={cvd!r}" if cvd is not None else _(
        "CUDA_VISIBLE_DEVICES not set: every GPU is visible and tensors go to GPU 0 unless told otherwise"))
    if not torch.cuda.is_available():
        out.append(_("CUDA: not available (N/A: no GPU or a CPU build of torch)"))
    else:
        count = torch.cuda.device_count()
        out.append(ngettext("CUDA: {n} device visible, current cuda:{current}",
                            "CUDA: {n} devices visible, current cuda:{current}", count).format(
                                n=count, current=torch.cuda.current_device()))
        if cvd is not None and cvd.strip():
            wanted = len([x for x in cvd.split(",") if x.strip()])
            if torch.cuda.is_initialized() and wanted != count:
                out.append(ngettext(
                    "CUDA_VISIBLE_DEVICES lists {wanted} GPU but CUDA sees {count}: it was changed after CUDA was "
                    "initialised, so it has no effect; set it before the first CUDA call (before `import torch` to "
                    "be safe)",
                    "CUDA_VISIBLE_DEVICES lists {wanted} GPUs but CUDA sees {count}: it was changed after CUDA was "
                    "initialised, so it has no effect; set it before the first CUDA call (before `import torch` to "
                    "be safe)", wanted).format(wanted=wanted, count=count))
        if cvd and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            out.append(_("CUDA_DEVICE_ORDER is not PCI_BUS_ID: with different GPU models, CUDA's indices may "
                         "differ from nvidia-smi's"))
    if model is not None:
        from .where import where
        report = where(model)
        out.append(_("model on {devices} in {dtypes}").format(devices=", ".join(report.devices),
                                                             dtypes=", ".join(report.dtypes)))
        out += report.warnings
    return out


def _names_in_traceback(tb: Any) -> dict[int, list[str]]:
    torch = require_torch()
    names: dict[int, list[str]] = {}
    while tb is not None:
        frame = tb.tb_frame
        if frame_is_ours(frame):  # torch's and vramkit's own locals (simulated_memory_cap's `out`) name nothing
            tb = tb.tb_next
            continue
        where = format_site((frame.f_code.co_filename, tb.tb_lineno, frame.f_code.co_name))
        for var, value in frame.f_locals.items():
            if isinstance(value, torch.Tensor):
                names.setdefault(id(value), []).append(f"{var} ({where})")
        tb = tb.tb_next
    return names


def largest_tensors(top: int = 5, device_type: str | None = None, tb: Any = None,
                    tracker: Tracker | None = None, model: Any = None) -> list[TensorInfo]:
    """The biggest tensors alive now (views of one storage count once), with who holds them."""
    torch = require_torch()
    names = _names_in_traceback(tb) if tb is not None else {}
    if model is not None:
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            names.setdefault(id(p), []).append(f"model.{name}")
    seen: dict[tuple[int, int], Any] = {}
    # Fake and meta tensors (an estimate traced in this process, a model built on meta) take no memory, but
    # report a shape and, for fake ones, a real device: a 490 MiB embedding of a traced model is not alive.
    fake_module = sys.modules.get("torch._subclasses.fake_tensor")  # not imported: no fake tensor exists
    fake = getattr(fake_module, "FakeTensor", ())
    with warnings.catch_warnings():  # isinstance() touches deprecated module attributes (torch.distributed)
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if not isinstance(obj, torch.Tensor) or isinstance(obj, fake) or obj.is_meta \
                        or (device_type and obj.device.type != device_type):
                    continue
            except Exception:  # objects whose isinstance check fails (proxies): not tensors
                continue
            key = storage_key(obj)
            if key not in seen or id(obj) in names:
                seen[key] = obj
    biggest = sorted(seen.items(), key=lambda kv: -kv[0][1])[:top]
    out = []
    for (__, nbytes), t in biggest:
        site = tracker.site_of(t) if tracker is not None else None
        out.append(TensorInfo(nbytes=nbytes, shape=tuple(t.shape), dtype=str(t.dtype).removeprefix("torch."),
                              device=str(t.device), names=names.get(id(t), []),
                              created_at=format_site(site) if site else None, keeps_graph=t.grad_fn is not None))
    return out


def _allocator(report: OomReport | None) -> tuple[dict[str, int] | None, str | None]:
    torch = require_torch()
    if not torch.cuda.is_available():
        return None, _("CUDA not available")
    if not torch.cuda.is_initialized():
        return None, _("CUDA not initialised in this process")
    device = report.device if report is not None and report.device is not None else torch.cuda.current_device()
    stats = torch.cuda.memory_stats(device)
    out = {k: int(stats[k]) for k in _STATS if k in stats}
    try:
        free, total = torch.cuda.mem_get_info(device)
        out["free_bytes.now"], out["total_bytes.device"] = int(free), int(total)
    except Exception:  # the driver may refuse right after an OOM
        pass
    return out, None


# torch's wrappers a Python mode is entered through: torch._disable_dynamo for a dispatch mode,
# handle_torch_function for a function mode (LeakDetector's, inside the trainer callbacks)
_MODE_WRAPPERS = ("/torch/_compile.py", "/torch/_dynamo/", "/torch/overrides.py")
# torch's own plumbing between the user's call and the kernel: the dispatcher (torch.ops.aten.mm is
# torch/_ops.py's OpOverloadPacket.__call__), Tensor's operator wrappers (`1 - a` runs
# torch/_tensor.py's __rsub__ through a wrapper), decorators (torch.no_grad's decorate_context,
# functools), Python decompositions and references. None of them is where the job allocated: the
# innermost frame outside them is (the user's line, or a layer in torch/nn or an optimizer).
_PLUMBING = _MODE_WRAPPERS + ("/torch/_ops.py", "/torch/_tensor.py", "/torch/_jit_internal.py",
                              "/torch/utils/_python_dispatch.py", "/torch/utils/_contextlib.py",
                              "/torch/_prims_common/", "/torch/_refs/", "/torch/_decomp/", "/torch/_library/",
                              "/torch/library.py", "/torch/_higher_order_ops/", "/functools.py", "/contextlib.py")


def _job_frames(frames: list[Frame]) -> list[Frame]:
    """The frames of the job itself: an allocation refused by simulated_memory_cap's dispatch mode
    was made by the op called just before the mode was entered, vramkit's own wrappers (attach()'s
    train) are no part of the job, and the innermost frames of torch's plumbing (_PLUMBING) are
    passed over to the frame that called them."""
    entry = next((i for i, f in enumerate(frames) if in_vramkit_torch(f.file)
                  and f.func in ("__torch_dispatch__", "__torch_function__")), None)
    if entry is not None:
        frames = frames[:entry]
    frames = [f for f in frames if not in_vramkit_torch(f.file)]
    inner = len(frames)
    while inner and any(w in frames[inner - 1].path for w in _PLUMBING):
        inner -= 1
    return frames[:inner] if inner else frames  # all plumbing (no other frame): keep what there is


def diagnose(exc: BaseException, tb: Any = None, *, tracker: Tracker | None = None, model: Any = None,
             top: int = 5) -> OomDiagnosis:
    """The diagnosis oom_guard prints, for an OOM exception you caught yourself."""
    text = str(exc)
    report = parse_oom(text)
    # where it failed, from the exception's own frames (and those it chains)
    phase = phase_of(_job_frames(frames_of_exception(exc))) if report is not None else None
    allocator, note = _allocator(report)
    device_type = None
    if report is not None:
        device_type = "cpu" if report.kind == "cpu" else "cuda" if report.kind in ("cuda", "hip", "cuda-runtime",
                                                                                    "cublas", "cudnn") else None
    torch = require_torch()
    if device_type == "cuda" and not torch.cuda.is_available():
        device_type = None  # a CUDA message seen without CUDA (tests, a replayed log): show what is alive
    tensors = largest_tensors(top, device_type, tb or exc.__traceback__, tracker, model)
    # evaluation without no_grad: the model in eval mode, and what filled the memory keeps graphs
    eval_with_grad = model is not None and not getattr(model, "training", True) and any(t.keeps_graph for t in tensors)
    ex = explain(report, phase=phase, eval_with_grad=eval_with_grad) if report is not None else None
    return OomDiagnosis(error=text, report=report, explanation=ex, allocator=allocator, allocator_note=note,
                        tensors=tensors, device_check=device_check(model))


class SnapshotRecorder:
    """torch.cuda.memory's history recording for one guarded stretch: started on enter (when CUDA is
    there), dumped to `path` on an OOM, stopped on leaving if this started it."""

    def __init__(self, path: str | os.PathLike[str], max_entries: int = 100_000) -> None:
        self.path, self.max_entries = os.fspath(path), max_entries
        self.recording = False
        self.note: str | None = None

    def start(self) -> None:
        torch = require_torch()
        if not torch.cuda.is_available():
            self.note = _("CUDA not available: a memory snapshot records CUDA's caching allocator")
            return
        try:
            torch.cuda.memory._record_memory_history(max_entries=self.max_entries)
            self.recording, self.note = True, None
        except Exception as e:  # an old torch, or a build without it: the guard still works
            self.note = _("could not record memory history: {error}").format(error=f"{type(e).__name__}: {e}")

    def dump(self) -> str | None:
        if not self.recording:
            return None
        torch = require_torch()
        try:
            torch.cuda.memory._dump_snapshot(self.path)
        except Exception as e:
            self.note = _("could not write {path}: {error}").format(path=self.path, error=f"{type(e).__name__}: {e}")
            return None
        return self.path

    def stop(self) -> None:
        if self.recording:
            self.recording = False
            try:
                require_torch().cuda.memory._record_memory_history(enabled=None)
            except Exception:  # nothing to undo
                pass


class oom_guard(ContextDecorator):  # noqa: N801 - used like contextlib's lower-case managers
    """Context manager and decorator: on an out-of-memory error, print the diagnosis, then re-raise.

    file: where to print (default stderr; None prints nothing). on_oom: called with the
    OomDiagnosis. track: record where tensors are created while inside (slower; for debugging).
    model: include where(model) in the device check and name its parameters.
    snapshot: a file name: record CUDA's allocation history while inside
    (torch.cuda.memory._record_memory_history, max_entries=snapshot_entries) and, on an OOM, dump a
    memory snapshot there (`vram doctor FILE` reads it); without CUDA the diagnosis says why none.
    The last diagnosis stays in `.diagnosis`.
    """

    def __init__(self, *, file: Any = sys.stderr, on_oom: Callable[[OomDiagnosis], Any] | None = None,
                 track: bool = False, model: Any = None, top: int = 5,
                 snapshot: str | os.PathLike[str] | None = None, snapshot_entries: int = 100_000) -> None:
        self.file, self.on_oom, self.track, self.model, self.top = file, on_oom, track, model, top
        self.diagnosis: OomDiagnosis | None = None
        self._tracker: Tracker | None = None
        self._recorder = SnapshotRecorder(snapshot, snapshot_entries) if snapshot is not None else None

    def __enter__(self) -> oom_guard:
        if self.track:
            self._tracker = Tracker()
            self._tracker.start()
        if self._recorder is not None:
            self._recorder.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.stop()
        recorder = self._recorder
        try:
            written = recorder.dump() if recorder is not None and exc is not None and isinstance(exc, Exception) \
                and is_oom(exc) else None
        finally:
            if recorder is not None:
                recorder.stop()
        if exc is not None and isinstance(exc, Exception) and is_oom(exc):
            try:
                self.diagnosis = diagnose(exc, tb, tracker=tracker, model=self.model, top=self.top)
            except Exception as e:  # the diagnosis must never replace the user's error
                print(_("vramkit oom_guard: could not diagnose: {error}").format(error=f"{type(e).__name__}: {e}"),
                      file=self.file or sys.stderr)
                return False
            if recorder is not None:
                self.diagnosis.snapshot, self.diagnosis.snapshot_note = written, recorder.note
            if self.file is not None:
                print(self.diagnosis.format(), file=self.file)
            if self.on_oom is not None:
                self.on_oom(self.diagnosis)
        return False  # re-raise
