"""LeakDetector's defects of issue 28 (item 5), one test each: bounded buffers and tiny CPU tensors
not called leaks, a flagged line withdrawn when it stops growing (through the HF callback too), the
holder in the first warning, and fix text that fits what is held (a loss, hook outputs, cached
hidden states, kept batches)."""

from __future__ import annotations

import logging
import warnings
from collections import deque

import pytest
from helpers import line_of

torch = pytest.importorskip("torch")

from vramkit.torch import (  # noqa: E402
    LeakDetector,
    VramTrainerCallback,
)
from vramkit.torch.leak import LeakWarning  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MiB = 1024**2
STEPS = 14


def _net(width: int = 16) -> tuple:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def _leak_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if w.category is LeakWarning]


# ---------------------------------------------------------------- bounded containers and tiny tensors

def test_a_bounded_deque_is_not_warned_about_while_it_fills():
    model, opt = _net()
    recent = deque(maxlen=8)  # fills over 8 steps: longer than the detector's window
    det = LeakDetector(model, window=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with det:
            for _ in range(STEPS):
                x = torch.randn(64, 16)
                loss = model(x).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                recent.append(x @ torch.ones(16, 16))  # 4 KiB a step, no graph: above any size floor
                recent.append(loss)  # and the loss with its graph
                det.step()
    assert _leak_warnings(caught) == []
    report = det.report()
    assert report.leaks == [], str(report)
    assert any("deque" in (leak.held_by or "") for leak in report.settled), str(report)


def test_a_deque_of_detached_losses_is_not_a_leak():
    model, opt = _net()
    losses = deque(maxlen=10)
    det = LeakDetector(model, window=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with det:
            for _ in range(STEPS):
                loss = model(torch.randn(8, 16)).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.detach())
                det.step()
    assert _leak_warnings(caught) == [] and det.report().leaks == []


def test_small_cpu_tensors_without_a_graph_are_not_flagged_but_with_a_graph_they_are():
    model, opt = _net()
    floats, graphs = [], []
    det = LeakDetector(model, window=2, warn=False)
    with det:
        for _ in range(STEPS):
            loss = model(torch.randn(8, 16)).pow(2).mean()  # small-loss marker
            loss.backward()
            opt.step()
            opt.zero_grad()
            floats.append(loss.detach() * 2)  # small-detached marker: 4 bytes a step, no graph
            graphs.append(loss)
            det.step()
    lines = [leak.line for leak in det.report().leaks]
    assert line_of(__file__, "small-detached marker") not in lines
    assert lines == [line_of(__file__, "small-loss marker")]


def test_a_flagged_line_that_stops_growing_is_withdrawn_with_a_warning():
    model, opt = _net()
    kept: list = []
    det = LeakDetector(model, window=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with det:
            for step in range(STEPS):
                x = torch.randn(64, 16)
                model(x).pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
                if step < 5:
                    kept.append(x * 2)  # withdrawn marker: grows for 5 steps, then stays
                det.step()
    messages = _leak_warnings(caught)
    assert any("possible memory leak" in m for m in messages)
    withdrawn = [m for m in messages if m.startswith("vramkit: withdrawn: ")]
    line = line_of(__file__, "withdrawn marker")
    assert len(withdrawn) == 1 and f":{line} in" in withdrawn[0]
    assert "stopped growing" in withdrawn[0]
    assert det.report().leaks == [] and [leak.line for leak in det.report().settled] == [line]


def test_the_hf_callback_withdraws_a_leak_that_stopped_growing_and_never_flags_a_deque(caplog):
    caplog.set_level(logging.INFO, logger="vramkit.torch")
    cb = VramTrainerCallback(window=2)
    model, opt = _net()
    cb.on_train_begin(None, None, None, model=model)
    kept: list = []
    recent = deque(maxlen=8)
    for step in range(STEPS):
        x = torch.randn(64, 16)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        recent.append(loss)
        if step < 5:
            kept.append(x * 2)
        cb.on_step_end(None, None, None)
    cb.on_train_end(None, None, None)
    messages = [r.getMessage() for r in caplog.records if r.name == "vramkit.torch"]
    flagged = [m for m in messages if "possible memory leak" in m]
    assert len(flagged) == 1 and "kept (list of" in flagged[0]  # the trimmed list, not the deque
    assert any(m.startswith("vramkit: withdrawn: ") and "stopped growing" in m and "kept (list of" in m
               for m in messages), messages
    assert not any("recent (deque" in m for m in flagged)


# ---------------------------------------------------------------- what a warning says

def test_the_first_warning_already_names_the_holder():
    model, opt = _net()
    losses = []
    det = LeakDetector(model, window=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with det:
            for _ in range(8):
                loss = model(torch.randn(8, 16)).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss)
                det.step()
    first = [m for m in _leak_warnings(caught) if "possible memory leak" in m][0]
    assert "held by losses (list of" in first


def _flag(model, step) -> str:
    """The one leak LeakDetector(model) finds in STEPS calls of step(), as it prints."""
    det = LeakDetector(model, window=2, warn=False)
    with det:
        for _ in range(STEPS):
            step()
            det.step()
    leak, = det.report().leaks
    return str(leak)


def _trainer():
    model, opt = _net()

    def train(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return model, train


def test_fix_text_for_a_kept_loss_says_item():
    model, train = _trainer()
    losses = []
    text = _flag(model, lambda: losses.append(train(torch.randn(8, 16))))
    assert "loss.item()" in text and "held by losses (list of" in text


def test_fix_text_for_hook_activations_says_remove_the_hook_or_detach_inside_it():
    model, train = _trainer()
    acts = []
    model[0].register_forward_hook(lambda module, inputs, output: acts.append(output))
    text = _flag(model, lambda: train(torch.randn(8, 16)))
    assert "hook" in text and ".remove()" in text and "detach" in text
    assert "loss.item()" not in text


class _CachesHidden(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.head = torch.nn.Linear(16, 32), torch.nn.Linear(32, 1)
        self.hidden_cache: list = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.lin(x))
        self.hidden_cache.append(h)
        return self.head(h)


def test_fix_text_for_cached_hidden_states_says_detach_or_clear_the_cache():
    model = _CachesHidden()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        model(torch.randn(8, 16)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    text = _flag(model, step)
    assert "hidden_cache" in text and "detach" in text and "clear" in text
    assert "loss.item()" not in text


def test_fix_text_for_kept_batches_says_do_not_keep_them():
    model, train = _trainer()
    batches = []

    def step() -> None:
        x = torch.randn(64, 16)
        train(x)
        batches.append(x)

    text = _flag(model, step)
    assert "no autograd graph" in text and "batches (list of" in text
    assert "loss.item()" not in text and "deque(maxlen" in text
