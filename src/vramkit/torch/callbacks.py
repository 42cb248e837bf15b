"""Thin wrappers for trainers: HF Transformers' Trainer and Lightning. Neither library is needed to
import vramkit.torch; the Lightning callback class is built when asked for.

    trainer = transformers.Trainer(..., callbacks=[VramTrainerCallback()])
    trainer = lightning.Trainer(callbacks=[lightning_callback()])

Both run a LeakDetector over the training steps (warnings name the line) and, for Lightning,
print the oom_guard diagnosis when training dies of an out-of-memory error.
"""

from __future__ import annotations

import sys
from typing import Any

from .leak import LeakDetector


class VramTrainerCallback:
    """A transformers.TrainerCallback look-alike: Trainer calls on_* events by name, so every event
    it does not use is a no-op here, and transformers is not imported."""

    def __init__(self, model: Any = None, *, window: int = 3, leaks: bool = True) -> None:
        self.detector = LeakDetector(model, window=window) if leaks else None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.detector is not None:
            if self.detector.model is None and model is not None:
                self.detector.model = self.detector._tracker.model = model
            self.detector.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.detector is not None:
            self.detector.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.detector is not None:
            self.detector.stop()
            report = self.detector.report()
            if report.leaks or report.eval_with_grad:
                print(f"vramkit: {report}", file=sys.stderr)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


def lightning_callback(*, window: int = 3, leaks: bool = True) -> Any:
    """A lightning Callback instance (lightning.pytorch or pytorch_lightning, whichever is installed)."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError:
            raise ImportError("lightning_callback needs lightning: pip install lightning") from None

    class VramLightningCallback(Callback):
        def __init__(self) -> None:
            self.detector: LeakDetector | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if leaks:
                self.detector = LeakDetector(pl_module, window=window).start()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
            if self.detector is not None:
                self.detector.step()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self.detector is not None:
                self.detector.stop()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            if self.detector is not None:
                self.detector.stop()
            from .guard import diagnose, is_oom
            if isinstance(exception, Exception) and is_oom(exception):
                print(diagnose(exception, model=pl_module).format(), file=sys.stderr)

    return VramLightningCallback()
