"""The trainer callbacks in real CPU runs: a tiny HF Trainer (a BERT built from a config) and a
Lightning Trainer. Memory metrics reach the trainers' logs; a leak is reported through logging; an
out-of-memory error raised inside training is diagnosed and leaves no TorchFunctionMode behind."""

from __future__ import annotations

import csv
import functools
import logging
import sys
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from torch.overrides import _get_current_function_mode_stack  # noqa: E402

from vramkit.torch import VramTrainerCallback, lightning_callback  # noqa: E402
from vramkit.torch.callbacks import memory_metrics  # noqa: E402

MESSAGE = ((Path(__file__).parent / "fixtures" / "oom" / "cuda_2_1_capacty_two_processes.txt")
           .read_text().split(": ", 1)[1].strip())
CPU_KEYS = {"memory/cpu_rss_mib", "memory/cpu_peak_rss_mib"}


@pytest.fixture
def vram_log(caplog):
    caplog.set_level(logging.WARNING, logger="vramkit.torch")
    return caplog


def _records(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "vramkit.torch" and r.levelno == level]


# ---------------------------------------------------------------- what is logged

def test_memory_metrics_on_cpu_are_the_process_rss():
    held = torch.ones(64, 1024, 1024, dtype=torch.uint8)  # 64 MiB touched: it is resident
    metrics = memory_metrics("cpu")
    assert set(metrics) == CPU_KEYS
    assert metrics["memory/cpu_peak_rss_mib"] >= metrics["memory/cpu_rss_mib"] >= 64
    del held


def test_memory_metrics_on_cuda_read_and_reset_the_peaks(monkeypatch):
    peaks = {"allocated": 3 * 1024**3, "reserved": 4 * 1024**3 + 512 * 1024**2}
    resets = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda dev=None: peaks["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda dev=None: peaks["reserved"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda dev=None: resets.append(dev))
    assert memory_metrics("cuda:1") == {"memory/gpu_peak_allocated_mib": 3072.0,
                                        "memory/gpu_peak_reserved_mib": 4608.0}
    assert resets == [torch.device("cuda:1")]
    assert set(memory_metrics("cpu")) == CPU_KEYS  # a CPU trainer on a CUDA machine


# ---------------------------------------------------------------- HF Trainer

# transformers' Trainer is imported by the tests that run one, not when the module is collected: its modules
# take seconds of CPU, which every pytest worker paid on every run (make test-fast too, where these do not run)
needs_hf = pytest.mark.skipif(find_spec("transformers") is None or find_spec("accelerate") is None,
                              reason="needs transformers and accelerate (the trainers extra)")


@functools.cache
def _hf() -> SimpleNamespace:
    """transformers, with the Trainer subclasses and the reporting callback these tests use."""
    import accelerate  # noqa: F401  (transformers' Trainer needs it)
    import transformers

    class SeesLogs(transformers.TrainerCallback):
        """Stands in for TensorBoard / W&B: a reporting callback the Trainer calls before any user one."""

        def __init__(self) -> None:
            self.logs: list[dict] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs))

    class KeepsLosses(transformers.Trainer):
        """The classic leak, inside a Trainer: every step's loss tensor (and its graph) kept."""

        def compute_loss(self, model, inputs, *args, **kwargs):
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            self.kept.append(loss)
            return loss

    class RunsOutOfMemory(transformers.Trainer):
        def training_step(self, model, inputs, *args, **kwargs):
            if self.state.global_step == 2:
                raise torch.OutOfMemoryError(MESSAGE)
            return super().training_step(model, inputs, *args, **kwargs)

    return SimpleNamespace(transformers=transformers, SeesLogs=SeesLogs, KeepsLosses=KeepsLosses,
                           RunsOutOfMemory=RunsOutOfMemory)


class _Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (8,), generator=g), "labels": torch.tensor(i % 2)}


def _hf_trainer(tmp_path, trainer_class: str | None = None, steps: int = 6):
    """A tiny Trainer (transformers' own, or the subclass of _hf() named), with a reporting callback."""
    hf = _hf()
    transformers = hf.transformers
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=16)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=steps, logging_steps=2,
                                          per_device_train_batch_size=4, report_to=[], use_cpu=True,
                                          save_strategy="no", disable_tqdm=True)
    seen = hf.SeesLogs()
    trainer = (getattr(hf, trainer_class) if trainer_class else transformers.Trainer)(
        model=transformers.BertForSequenceClassification(config), args=args, train_dataset=_Tokens(),
        callbacks=[seen])
    return trainer, seen


@pytest.mark.slow
@needs_hf
def test_hf_trainer_logs_memory_where_reporting_callbacks_see_it(tmp_path, vram_log):
    trainer, seen = _hf_trainer(tmp_path)
    VramTrainerCallback().attach(trainer)
    trainer.train()
    step_logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(step_logs) == 3
    for entry in step_logs:  # trainer_state.json's history, as the Trainer keeps it
        assert CPU_KEYS <= set(entry) and entry["memory/cpu_rss_mib"] > 0
    assert len(seen.logs) == 4 and all(CPU_KEYS <= set(logs) for logs in seen.logs)
    assert _get_current_function_mode_stack() == []
    assert _records(vram_log, logging.WARNING) == []  # a clean run: nothing to say


@pytest.mark.slow
@needs_hf
def test_hf_trainer_reports_a_leak_through_logging(tmp_path, vram_log):
    trainer, _ = _hf_trainer(tmp_path, "KeepsLosses", steps=8)
    trainer.kept = []
    callback = VramTrainerCallback().attach(trainer)
    trainer.train()
    warnings_logged = _records(vram_log, logging.WARNING)
    assert any("possible memory leak" in m and "test_torch_callbacks.py" in m for m in warnings_logged)
    assert callback.detector.report().leaks
    assert _get_current_function_mode_stack() == []


@pytest.mark.slow
@needs_hf
def test_hf_trainer_oom_is_diagnosed_and_leaves_no_mode(tmp_path, vram_log):
    trainer, _ = _hf_trainer(tmp_path, "RunsOutOfMemory")
    VramTrainerCallback().attach(trainer)
    with pytest.raises(torch.OutOfMemoryError) as caught:
        trainer.train()
    assert str(caught.value) == MESSAGE  # re-raised unchanged
    assert _get_current_function_mode_stack() == []
    errors = _records(vram_log, logging.ERROR)
    assert len(errors) == 1 and "vramkit oom_guard: out of memory" in errors[0] and "fragmentation" in errors[0]


@pytest.mark.slow
@needs_hf
def test_hf_callback_passed_in_callbacks_diagnoses_an_oom_in_the_step_and_leaves_no_mode(tmp_path, vram_log):
    trainer, _ = _hf_trainer(tmp_path, "RunsOutOfMemory")
    callback = VramTrainerCallback()  # not attached: Trainer(..., callbacks=[...]) as most people add it
    trainer.add_callback(callback)
    with pytest.raises(torch.OutOfMemoryError) as caught:
        trainer.train()
    assert str(caught.value) == MESSAGE  # re-raised unchanged
    assert _get_current_function_mode_stack() == []
    errors = _records(vram_log, logging.ERROR)
    assert len(errors) == 1 and "vramkit oom_guard: out of memory" in errors[0]
    assert "training_step" not in vars(trainer)  # the wrapper is gone again


def test_hf_callback_alone_reports_leaks_through_logging(vram_log):
    """Without a Trainer: the events called by hand, as Trainer calls them."""
    cb = VramTrainerCallback()
    cb.on_init_end(None, None, None)  # an event it does not use: a no-op
    model = torch.nn.Linear(4, 1)
    cb.on_train_begin(None, None, None, model=model)
    kept = []
    for _ in range(6):
        loss = model(torch.randn(2, 4)).sum()
        loss.backward()
        kept.append(loss)
        cb.on_step_end(None, None, None)
    cb.on_train_end(None, None, None)
    assert cb.detector.report().leaks
    assert _get_current_function_mode_stack() == []
    messages = _records(vram_log, logging.WARNING)
    assert any("possible memory leak" in m for m in messages)
    assert any("outlive their step" in m for m in messages)


def test_hf_callback_passed_in_callbacks_says_reporting_callbacks_miss_its_keys(vram_log):
    from types import SimpleNamespace
    model = torch.nn.Linear(4, 1)
    for report_to, warned in ((["tensorboard", "wandb"], True), ("none", False), ([], False)):
        cb = VramTrainerCallback()
        cb.on_train_begin(SimpleNamespace(report_to=report_to), None, None, model=model)
        cb.on_train_end(None, None, None)
        messages = _records(vram_log, logging.WARNING)
        assert any("tensorboard, wandb callback(s) run before" in m and ".attach(trainer)" in m
                   for m in messages) == warned
        vram_log.clear()


def test_hf_callback_restarted_after_a_run_that_died_leaves_one_mode():
    cb = VramTrainerCallback()
    model = torch.nn.Linear(4, 1)
    cb.on_train_begin(None, None, None, model=model)  # ...then the run raised: on_train_end never came
    assert len(_get_current_function_mode_stack()) == 1
    cb.on_train_begin(None, None, None, model=model)
    assert len(_get_current_function_mode_stack()) == 1
    cb.on_train_end(None, None, None)
    assert _get_current_function_mode_stack() == []


# ---------------------------------------------------------------- Lightning

def test_lightning_callback_without_lightning(monkeypatch):
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # import of these raises ImportError
    with pytest.raises(ImportError, match="pip install lightning"):
        lightning_callback()


def _lightning_run(tmp_path, fail_at: int | None = None):
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import CSVLogger

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

        def training_step(self, batch, batch_idx):
            if batch_idx == fail_at:
                raise torch.OutOfMemoryError(MESSAGE)
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(48, 16), torch.randn(48, 1))
    callback = lightning_callback()
    trainer = pl.Trainer(accelerator="cpu", max_steps=6, log_every_n_steps=1, callbacks=[callback],
                         logger=CSVLogger(str(tmp_path)), enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False)
    return trainer, Tiny(), torch.utils.data.DataLoader(data, batch_size=8), callback


@pytest.mark.slow
def test_lightning_run_logs_memory_metrics(tmp_path, vram_log):
    trainer, module, loader, callback = _lightning_run(tmp_path)
    trainer.fit(module, loader)
    assert CPU_KEYS <= set(trainer.logged_metrics)
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row.get("memory/cpu_rss_mib")]
    assert len(rows) == 6 and all(float(row["memory/cpu_rss_mib"]) > 0 for row in rows)
    assert callback.detector is not None and callback.detector.report().leaks == []
    assert _get_current_function_mode_stack() == []


@pytest.mark.slow
def test_lightning_oom_is_diagnosed_and_leaves_no_mode(tmp_path, vram_log):
    trainer, module, loader, _ = _lightning_run(tmp_path, fail_at=3)
    with pytest.raises(torch.OutOfMemoryError):
        trainer.fit(module, loader)
    assert _get_current_function_mode_stack() == []
    errors = _records(vram_log, logging.ERROR)
    assert len(errors) == 1 and "vramkit oom_guard: out of memory" in errors[0]


def test_evaluation_without_no_grad_is_one_logged_finding_not_one_per_line(vram_log):
    """The callbacks' reporter logs evaluation under autograd once, as one finding naming its lines,
    and again only when a new line records."""
    from vramkit.torch.callbacks import _Reporter

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    reporter = _Reporter(window=3, leaks=True)
    reporter.start(model)
    try:
        kept = []
        for _ in range(8):
            out = model(torch.randn(4, 8))  # eval mode, autograd on
            kept.append(out.softmax(-1))
            reporter.step()
    finally:
        reporter.stop()
    evals = [m for m in _records(vram_log, logging.WARNING) if "eval mode but autograd is recording" in m]
    assert len(evals) == 1, evals
    assert "no_grad" in evals[0]
    assert _get_current_function_mode_stack() == []
