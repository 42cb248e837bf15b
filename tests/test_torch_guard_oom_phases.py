"""oom_guard on real steps that run out of a simulated GPU's memory (simulated_memory_cap), one per
phase: the diagnosis names where the job's own code allocated (never vramkit's simulator or the
wrappers torch enters a dispatch mode through), ranks that phase's fixes first, and shows the
sizes of small tensors in bytes and KiB."""

from __future__ import annotations

import io
import logging
import os

import pytest

torch = pytest.importorskip("torch")

from torch.overrides import _get_current_function_mode_stack  # noqa: E402

from vramkit.torch import VramTrainerCallback, oom_guard, simulated_memory_cap  # noqa: E402


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.Flatten(),
                               torch.nn.Linear(16 * 16 * 16, 10))


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)


def _guarded(model, capacity: int, step):
    out = io.StringIO()
    guard = oom_guard(model=model, file=out)
    with pytest.raises(torch.OutOfMemoryError):
        with guard, simulated_memory_cap(capacity, held=model):
            step()
    assert _get_current_function_mode_stack() == []
    return guard.diagnosis, out.getvalue()


def _not_vramkit(frame) -> None:
    assert f"{os.sep}vramkit{os.sep}" not in frame.file, frame
    assert "/torch/_dynamo/" not in frame.path and "/torch/_compile.py" not in frame.path, frame


def _peak(step, model) -> int:
    with simulated_memory_cap(1 << 40, held=model) as cap:
        step()
    return cap.peak


def test_forward_names_the_layer_that_allocated_and_the_users_line():
    model = _cnn()
    x, _ = _batch()
    weights = sum(p.numel() * 4 for p in model.parameters())
    diagnosis, text = _guarded(model, weights + 40_000, lambda: model(x))  # forward-call marker
    phase = diagnosis.explanation.phase
    assert phase.id == "forward"
    _not_vramkit(phase.evidence)
    assert phase.evidence.path.endswith("torch/nn/modules/conv.py")  # the conv that asked for memory
    assert phase.user_frame.file == __file__ and "forward-call marker" in phase.user_frame.code
    assert "memcap.py" not in text and "eval_frame.py" not in text


def test_backward_ranks_the_backward_fixes_and_names_loss_backward():
    model = _cnn()
    x, y = _batch()
    forward_peak = _peak(lambda: torch.nn.functional.cross_entropy(model(x), y), model)
    model.zero_grad(set_to_none=True)

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()  # backward marker

    diagnosis, _ = _guarded(model, forward_peak + 20_000, step)
    phase = diagnosis.explanation.phase
    assert phase.id == "backward"
    assert "backward marker" in phase.user_frame.code
    assert diagnosis.explanation.fixes[0].title.startswith("activation checkpointing")


def test_optimizer_step_ranks_optimizer_state_first():
    model = _cnn()
    x, y = _batch()
    opt = torch.optim.Adam(model.parameters())
    torch.nn.functional.cross_entropy(model(x), y).backward()
    weights = sum(p.numel() * 4 for p in model.parameters())
    diagnosis, _ = _guarded(model, int(weights * 2.5), opt.step)  # weights + grads fit, Adam's state does not
    phase = diagnosis.explanation.phase
    assert phase.id == "optimizer"
    _not_vramkit(phase.evidence)
    assert phase.evidence.path.endswith("torch/optim/adam.py")
    assert "optimizer state" in diagnosis.explanation.fixes[0].title


def test_small_live_tensors_show_their_size_and_no_simulator_variable():
    model = _cnn()
    x, _ = _batch()
    weights = sum(p.numel() * 4 for p in model.parameters())
    diagnosis, text = _guarded(model, weights + 40_000, lambda: model(x))
    listed = [line.split() for line in text.split("largest live tensors:\n", 1)[1].splitlines() if " on cpu" in line]
    assert listed and not any(words[0] == "0MiB" for words in listed)
    assert ["128.0", "KiB", "float32", "[8,", "16,", "16,", "16]"] in [words[:7] for words in listed]  # a conv's output
    for info in diagnosis.tensors:
        assert not any("memcap.py" in name or "__torch_dispatch__" in name for name in info.names), info


class _Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (32,), generator=g), "labels": torch.randint(0, 2, (), generator=g)}


@pytest.mark.slow
def test_hf_trainer_oom_under_a_cap_names_the_model_line_not_the_simulator(tmp_path, caplog):
    transformers = pytest.importorskip("transformers")
    caplog.set_level(logging.WARNING, logger="vramkit.torch")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=128, max_position_embeddings=32)
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=16,
                                          report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens())
    VramTrainerCallback().attach(trainer)
    weights = sum(p.numel() * 4 for p in model.parameters())
    with pytest.raises(torch.OutOfMemoryError), simulated_memory_cap(weights + 2 * 1024**2, held=model):
        trainer.train()
    assert _get_current_function_mode_stack() == []
    errors = [r.getMessage() for r in caplog.records if r.name == "vramkit.torch" and r.levelno == logging.ERROR]
    assert len(errors) == 1
    failed = next(line for line in errors[0].splitlines() if "Failed in" in line)
    assert failed.startswith("  Failed in the forward pass") and ".py:" in failed
    for not_the_job in ("memcap.py", "eval_frame.py", "callbacks.py", "_tracking.py", "overrides.py"):
        assert not_the_job not in failed, failed  # the simulator, the leak detector's mode, torch's wrappers


def _evaluate(model, x, grad: bool):
    def loop():
        model.eval()
        kept = []
        with torch.set_grad_enabled(grad):
            for _ in range(40):
                kept.append(model[:3](x))  # an evaluation loop that keeps every feature map (128 KiB)
    return loop


def _evaluation_diagnosis(grad: bool):
    model = _cnn()
    x, _ = _batch()
    weights = sum(p.numel() * 4 for p in model.parameters())
    diagnosis, text = _guarded(model, weights + 1024**2, _evaluate(model, x, grad=grad))
    return diagnosis.explanation, text


def test_evaluation_without_no_grad_ranks_no_grad_first():
    ex, text = _evaluation_diagnosis(grad=True)
    assert ex.eval_with_grad and ex.fixes[0].id == "no_grad"
    assert "also: the model is in eval mode but autograd is recording" in text


def test_evaluation_under_no_grad_is_not_told_to_use_no_grad():
    ex, text = _evaluation_diagnosis(grad=False)
    assert not ex.eval_with_grad and ex.fixes[0].id != "no_grad"  # no_grad ended before the guard looked
    assert "autograd is recording" not in text


def test_a_training_forward_is_not_an_evaluation():
    model = _cnn()
    x, _ = _batch()
    weights = sum(p.numel() * 4 for p in model.parameters())
    diagnosis, _ = _guarded(model, weights + 40_000, lambda: model(x))
    assert model.training and not diagnosis.explanation.eval_with_grad
    assert diagnosis.explanation.fixes[0].id == "halve_batch"


def test_under_the_leak_detector_the_failing_op_is_the_jobs_not_the_mode():
    from vramkit.torch import LeakDetector

    norm = torch.nn.LayerNorm(64)
    x = torch.randn(64, 64, 64)  # 1 MiB: the normalised copy does not fit
    out = io.StringIO()
    guard = oom_guard(file=out)
    with pytest.raises(torch.OutOfMemoryError), LeakDetector(warn=False):
        # a TorchFunctionMode: torch.nn.functional enters it through handle_torch_function
        with guard, simulated_memory_cap(512 * 1024, held=norm):
            norm(x)
    evidence, text = guard.diagnosis.explanation.phase.evidence, out.getvalue()
    _not_vramkit(evidence)
    assert evidence.path.endswith("torch/nn/functional.py") and "overrides.py" not in text
