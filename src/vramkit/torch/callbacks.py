"""Thin wrappers for trainers: HF Transformers' Trainer and Lightning. Neither library is needed to
import vramkit.torch; the Lightning callback class is built when asked for.

    trainer = transformers.Trainer(...)
    VramTrainerCallback().attach(trainer)       # or Trainer(..., callbacks=[VramTrainerCallback()])
    trainer = lightning.Trainer(callbacks=[lightning_callback()])

Both do three things:
- log memory into the trainer's own metrics (so they reach TensorBoard, W&B, CSV, ...):
  with CUDA, `memory/gpu_peak_allocated_mib` and `memory/gpu_peak_reserved_mib`, the peaks since
  the previous log (HF: per logging step) or batch (Lightning), read from torch.cuda and then reset;
  without CUDA, the process's resident memory `memory/cpu_rss_mib` and its lifetime peak
  `memory/cpu_peak_rss_mib` (what exists on a CPU run; there is no allocator peak to reset);
- run a LeakDetector over the training steps and report each leak, once, through the
  `vramkit.torch` logger at WARNING (shown on stderr unless logging is configured otherwise), and
  withdraw it there ("vramkit: withdrawn: ... bounded, not a leak") when it stops growing;
- when training dies of an out-of-memory error, log the oom_guard diagnosis at ERROR, and always
  stop the detector's TorchFunctionMode. With snapshot="oom.pickle", CUDA's allocation history is
  recorded over training and a memory snapshot dumped there on an OOM (`vram doctor oom.pickle`).
  Lightning calls on_exception; HF's Trainer has no such
  event: `attach(trainer)` wraps trainer.train (and puts the callback first so that the reporting
  callbacks, TensorBoard and W&B, see the memory keys it adds); passed in callbacks=[...], it
  wraps the running trainer's training_step, which covers forward and backward but not the
  optimizer step.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..i18n import _
from ._common import require_torch
from ._hostmem import rss_bytes
from .leak import LeakDetector, eval_text

if TYPE_CHECKING:
    from .guard import SnapshotRecorder

logger = logging.getLogger("vramkit.torch")

MiB = 1024**2


def _mib(n: int | float) -> float:
    return round(n / MiB, 1)


def memory_metrics(device: Any = None) -> dict[str, float]:
    """The keys the callbacks log (MiB, floats). On a CUDA device: the peaks of allocated and reserved
    memory since the last call, which resets them. Otherwise: the process's RSS now and its peak."""
    torch = require_torch()
    dev = torch.device(device) if device is not None else None
    if (dev is None or dev.type == "cuda") and torch.cuda.is_available() and torch.cuda.is_initialized():
        metrics = {"memory/gpu_peak_allocated_mib": _mib(torch.cuda.max_memory_allocated(dev)),
                   "memory/gpu_peak_reserved_mib": _mib(torch.cuda.max_memory_reserved(dev))}
        torch.cuda.reset_peak_memory_stats(dev)
        return metrics
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    rss = rss_bytes()
    if rss is None:
        return {"memory/cpu_peak_rss_mib": _mib(peak)}
    # the kernel updates the high-water mark lazily: it can trail the RSS read just now
    return {"memory/cpu_rss_mib": _mib(rss), "memory/cpu_peak_rss_mib": _mib(max(peak, rss))}


class _Reporter:
    """The leak detector and the OOM diagnosis both callbacks share; reports through `logger`.
    With `snapshot` (a file name), CUDA's allocation history is recorded over training and a memory
    snapshot dumped there on an OOM (`vram doctor FILE`)."""

    def __init__(self, window: int, leaks: bool, snapshot: str | os.PathLike[str] | None = None) -> None:
        self.window, self.leaks = window, leaks
        self.detector: LeakDetector | None = None
        self._eval_reported: set[tuple[str, int, str]] = set()
        self.recorder: SnapshotRecorder | None = None
        if snapshot is not None:
            from .guard import SnapshotRecorder
            self.recorder = SnapshotRecorder(snapshot)

    def start(self, model: Any) -> None:
        self.stop()  # a previous run that died without telling us leaves its mode on the stack
        if self.recorder is not None:
            self.recorder.start()
            if self.recorder.note:
                logger.warning(_("vramkit: no memory snapshot on OOM: %s"), self.recorder.note)
        if self.leaks:
            self.detector = LeakDetector(model, window=self.window, warn=False).start()
            self._eval_reported = set()

    def step(self) -> None:
        if self.detector is None:
            return
        for leak in self.detector.step():
            logger.warning(_("vramkit: possible memory leak: %s"), leak)
        for leak in self.detector.withdrawn:  # it stopped growing: take the warning back, at its level
            logger.warning(_("vramkit: withdrawn: %s"), leak.settled_text())
        report = self.detector.report()
        new_lines = {site for site, __ in report.eval_with_grad} - self._eval_reported
        if new_lines:  # one finding for all of evaluation's lines, again only when a new line appears
            self._eval_reported |= new_lines
            logger.warning("vramkit: %s", eval_text(report.eval_with_grad, report.eval_library))

    def stop(self) -> None:
        """Leave no TorchFunctionMode behind (nor history recording); the detector's report stays readable."""
        if self.detector is not None:
            self.detector.stop()
        if self.recorder is not None:
            self.recorder.stop()

    def finish(self) -> None:
        self.stop()
        if self.detector is not None:
            report = self.detector.report()
            if report.leaks or report.eval_with_grad:
                logger.warning("vramkit: %s", report)

    def failed(self, exc: BaseException, model: Any) -> None:
        from .guard import diagnose, is_oom
        oom = isinstance(exc, Exception) and is_oom(exc)
        written = self.recorder.dump() if self.recorder is not None and oom else None
        self.stop()
        if oom:
            diagnosis = diagnose(exc, model=model)
            if self.recorder is not None:
                diagnosis.snapshot, diagnosis.snapshot_note = written, self.recorder.note
            logger.error("%s", diagnosis.format())


def _as_list(value: Any) -> list[str]:
    """TrainingArguments.report_to: a name, a list of names, or None."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _calling_trainer(callback: Any, depth: int = 12) -> Any:
    """The Trainer running `callback`'s event: a `self` in the calling frames whose callback
    handler lists it (None when there is none, e.g. events called by hand)."""
    frame: FrameType | None = sys._getframe(1)
    for __ in range(depth):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        handler = getattr(candidate, "callback_handler", None)
        if any(c is callback for c in getattr(handler, "callbacks", ())):
            return candidate
        frame = frame.f_back
    return None


class VramTrainerCallback:
    """A transformers.TrainerCallback look-alike: Trainer calls on_* events by name, so every event
    it does not use is a no-op here, and transformers is not imported. See the module docstring."""

    def __init__(self, model: Any = None, *, window: int = 3, leaks: bool = True, memory: bool = True,
                 snapshot: str | os.PathLike[str] | None = None) -> None:
        self.model, self.memory = model, memory
        self._reporter = _Reporter(window, leaks, snapshot)
        self._attached = False
        self._guarded: Any = None  # the trainer whose training_step this callback wrapped

    @property
    def detector(self) -> LeakDetector | None:
        return self._reporter.detector

    def attach(self, trainer: Any) -> VramTrainerCallback:
        """Add this callback to `trainer` first (before TensorBoard/W&B, which log what on_log is given)
        and wrap trainer.train so an exception stops the detector and an OOM is diagnosed."""
        handler = trainer.callback_handler
        handler.callbacks[:] = [self] + [c for c in handler.callbacks if c is not self]
        trainer.train = self._diagnosing(trainer.train, trainer)
        self._attached = True
        return self

    def _diagnosing(self, fn: Any, trainer: Any, then: Any = None) -> Any:
        """`fn` wrapped: an exception out of it stops the detector's mode and diagnoses an OOM
        (then calls `then`, if given) before it propagates unchanged."""
        @functools.wraps(fn)
        def with_diagnosis(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                self._reporter.failed(exc, self.model if self.model is not None else trainer.model)
                if then is not None:
                    then()
                raise

        return with_diagnosis

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.model is None:
            self.model = model
        self._reporter.start(self.model)
        if not self._attached:
            self._guard_training_step(_calling_trainer(self))
        reporting = [r for r in _as_list(getattr(args, "report_to", None)) if r != "none"]
        if reporting and self.memory and not self._attached:
            logger.warning(_("vramkit: the Trainer's %s callback(s) run before VramTrainerCallback and will not see "
                             "its memory metrics, nor will an OOM be diagnosed: add it with "
                             "VramTrainerCallback().attach(trainer)"), ", ".join(reporting))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._reporter.step()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if not self.memory or logs is None:
            return
        metrics = memory_metrics(getattr(args, "device", None))
        logs.update(metrics)
        # Trainer appended a copy of `logs` to log_history before this event: keep the two the same
        history = getattr(state, "log_history", None)
        if history and history[-1] is not logs and all(history[-1].get(k) == v for k, v in logs.items()
                                                       if k not in metrics):
            history[-1].update(metrics)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._reporter.finish()
        self._unguard_training_step()

    # Trainer has no event for an exception. Passed in callbacks=[...], the callback wraps the
    # running trainer's training_step (its forward and backward, where the detector's mode is
    # recording) so that an error there stops the mode and an OOM is diagnosed; an error elsewhere
    # in the loop (the optimizer step) needs attach(trainer).
    def _guard_training_step(self, trainer: Any) -> None:
        self._unguard_training_step()
        if trainer is None or not callable(getattr(trainer, "training_step", None)):
            return
        trainer.training_step = self._diagnosing(trainer.training_step, trainer, then=self._unguard_training_step)
        self._guarded = trainer

    def _unguard_training_step(self) -> None:
        trainer, self._guarded = self._guarded, None
        if trainer is not None and "training_step" in vars(trainer):
            del trainer.training_step  # the class's method again

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


def lightning_callback(*, window: int = 3, leaks: bool = True, memory: bool = True,
                       snapshot: str | os.PathLike[str] | None = None) -> Any:
    """A lightning Callback instance (lightning.pytorch or pytorch_lightning, whichever is installed)."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError:
            raise ImportError(_("lightning_callback needs lightning: pip install lightning")) from None

    class VramLightningCallback(Callback):
        def __init__(self) -> None:
            self._reporter = _Reporter(window, leaks, snapshot)

        @property
        def detector(self) -> LeakDetector | None:
            return self._reporter.detector

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self._reporter.start(pl_module)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
            self._reporter.step()
            if memory:  # the peak of this batch; the trainer's loggers write every log_every_n_steps
                pl_module.log_dict(memory_metrics(pl_module.device), on_step=True, on_epoch=False)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self._reporter.finish()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self._reporter.failed(exception, pl_module)

    return VramLightningCallback()
