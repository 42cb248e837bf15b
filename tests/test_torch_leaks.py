"""LeakDetector on real training loops: a small torch model, and tiny transformers models (BERT and
GPT-2 built from a config, random weights) trained on the CPU for 20 steps, with the leaks people
really write planted one at a time, and the loops that must not be flagged."""

from __future__ import annotations

import copy
import os
import sys
import warnings
from collections import deque

import pytest
from helpers import line_of

torch = pytest.importorskip("torch")

from vramkit.torch import LeakDetector, _graph  # noqa: E402
from vramkit.torch._common import format_bytes  # noqa: E402
from vramkit.torch._hostmem import heap_bytes, rss_bytes  # noqa: E402
from vramkit.torch._referrers import find_holder  # noqa: E402
from vramkit.torch._tracking import Tracker  # noqa: E402
from vramkit.torch.leak import LeakWarning, _grows, _settled  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 20  # the issue asks for at least 20 steps of each loop
VOCAB, SEQ, BATCH = 50, 16, 4


def _here(marker: str) -> tuple[str, int]:
    return __file__, line_of(__file__, marker)


# ---------------------------------------------------------------- a plain torch loop

def _train(steps: int, leak: bool, detector: LeakDetector) -> list:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    flagged_at = []
    with detector:
        for step in range(steps):
            x, y = torch.randn(8, 16), torch.randn(8, 1)
            loss = torch.nn.functional.mse_loss(model(x), y)  # loss-line marker
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss if leak else loss.item())
            if detector.step():
                flagged_at.append(step)
    return flagged_at


@pytest.mark.slow
def test_planted_leak_is_reported_within_a_few_steps_naming_the_line():
    det = LeakDetector(window=3, warn=False)
    flagged = _train(10, leak=True, detector=det)
    assert flagged and flagged[0] <= 4
    leak = det.report().leaks[0]
    assert leak.line == line_of(__file__, "loss-line marker") and leak.site[0] == __file__
    assert "mse_loss" in leak.code
    assert leak.keeps_graph == leak.survivors >= 3 and leak.grad_fn == "MseLossBackward0"
    assert "loss.item()" in str(leak)
    assert leak.held_by.startswith("losses (list of")
    assert leak.library_site is None  # torch.nn is passed over, and there is no other library below


@pytest.mark.slow
def test_fixed_loop_is_not_flagged():
    det = LeakDetector(window=3, warn=False)
    assert _train(12, leak=False, detector=det) == []
    report = det.report()
    assert report.leaks == [] and not report.growing and "no leak found over 12 steps" in str(report)


def test_leak_warning_names_the_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train(6, leak=True, detector=LeakDetector(window=3))
    named = [w for w in caught if f":{line_of(__file__, 'loss-line marker')} in _train" in str(w.message)]
    assert named and all(w.category is LeakWarning for w in named)
    assert issubclass(LeakWarning, UserWarning)  # shown under Python's default filters, unlike ResourceWarning


def test_evaluation_with_grad_enabled_is_reported():
    model = torch.nn.Linear(4, 1)
    model.eval()
    det = LeakDetector(model, warn=False)
    with det:
        for _ in range(2):
            model(torch.randn(2, 4)).sum()  # eval-grad marker
            det.step()
        with torch.no_grad():
            model(torch.randn(2, 4)).sum()
            det.step()
    sites = det.report().eval_with_grad
    assert [site[1] for site, _ in sites] == [line_of(__file__, "eval-grad marker")]


def test_a_graph_larger_than_the_walk_stays_flagged(monkeypatch):
    monkeypatch.setattr(_graph, "BUDGET", 60)  # a few steps' graphs: the walk stops, the graph grows on
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    det = LeakDetector(warn=False)
    total = 0
    with det:
        for _ in range(STEPS):
            loss = model(torch.randn(4, 8)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            total += loss  # budget marker
            det.step()
    leak, = det.report().leaks
    assert leak.site[:2] == _here("budget marker") and leak.kind == "graph" and leak.graph_walk_stopped
    assert leak.graph_nodes <= 60 and "over " in str(leak)


# ---------------------------------------------------------------- the parts

def test_growth_not_presence():
    assert _grows([0, 1, 2, 3], 3) and _grows([1, 1, 2, 2, 3, 3, 4], 3)  # every step, every other step
    assert not _grows([0, 1, 2], 3) and not _grows([5, 5, 5, 5, 5], 3)
    assert not _grows([1, 2, 3, 2, 3, 4], 3)  # fell once: emptied, not piling up
    assert _settled([1, 2, 3, 5, 5, 5, 5, 5, 5, 5], 3) and not _settled([5, 5, 5, 5, 5, 5, 6], 3)


def test_sizes_below_a_mebibyte_are_shown():
    assert [format_bytes(n) for n in (4, 48, 3584, 5 * 1024**2)] == ["4 B", "48 B", "3.5 KiB", "5MiB"]


class Metric:
    def __init__(self) -> None:
        self.preds: list = [torch.ones(2), torch.ones(2)]
        self.total = torch.ones(3)


def test_holders_are_named_through_variables_containers_and_attributes():
    direct = torch.ones(1)
    metric = Metric()
    cache = {"k": torch.ones(4)}
    history = [{"loss": torch.ones(5)}]
    frame = sys._getframe()
    here = "test_holders_are_named_through_variables_containers_and_attributes"
    assert str(find_holder(direct, frame)) == f"direct in {here}"
    found = find_holder(metric.preds[1], frame)
    assert str(found) == f"metric.preds (list of 2) in {here}"
    metric.preds.append(torch.ones(2))
    assert found.refresh(frame) and found.label == "metric.preds (list of 3)"  # read again, no search
    assert str(find_holder(metric.total, frame)) == f"metric.total in {here}"
    assert str(find_holder(cache["k"], frame)) == f"cache (dict of 1) in {here}"
    assert str(find_holder(history[0]["loss"], frame)) == f"history (list of 1) in {here}"
    assert find_holder(torch.ones(6), frame) is None


def _store_made_in_a_function():
    class Store:
        items: list = []  # a class attribute: every Store shares it

    return Store()


def test_holders_through_a_class_attribute():
    class History:
        losses: list = []

    History.losses.append(torch.ones(3))
    store = _store_made_in_a_function()  # its class is named by no variable: found through the instance
    store.items.append(torch.ones(2))
    frame = sys._getframe()
    here = "test_holders_through_a_class_attribute"
    found = find_holder(History.losses[0], frame)
    assert str(found) == f"History.losses (list of 1) in {here}"
    History.losses.append(torch.ones(3))
    assert found.refresh(frame) and found.label == "History.losses (list of 2)"
    assert str(find_holder(store.items[0], frame)) == f"store.items (list of 1) in {here}"


def test_the_user_line_passes_over_libraries_and_the_library_line_is_kept():
    tracker = Tracker()
    tracker.start()
    try:
        x = torch.ones(3)  # made-directly marker
        y = copy.deepcopy(x)  # made-in-a-library marker: copy.py calls torch's __deepcopy__
    finally:
        tracker.stop()
    made = {id(e.ref()): e for e in tracker.entries.values()}
    assert made[id(x)].site[:2] == _here("made-directly marker") and made[id(x)].library is None
    assert made[id(y)].site[:2] == _here("made-in-a-library marker")
    assert made[id(y)].library[0].endswith(os.sep + "copy.py")


# ---------------------------------------------------------------- tiny transformers models

def _transformers():
    """Imported by the tests that build a model, so that the plain-torch tests above run without it."""
    return pytest.importorskip("transformers", reason="the transformers-model leak tests need transformers")


def _bert():
    torch.manual_seed(0)
    transformers = _transformers()
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=SEQ, num_labels=3)
    return transformers.BertForSequenceClassification(config)


def _gpt2():
    torch.manual_seed(0)
    transformers = _transformers()
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=SEQ)
    return transformers.GPT2LMHeadModel(config)


def _batch(model, step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = ids if model.config.model_type == "gpt2" else torch.randint(0, 3, (BATCH,), generator=g)
    return {"input_ids": ids, "labels": labels}


def _train_step(model, opt, step: int, **kwargs):
    out = model(**_batch(model, step), **kwargs)  # model-call marker: where the library makes the loss and logits
    out.loss.backward()
    opt.step()
    opt.zero_grad()
    return out


def _run(loop, model) -> tuple[LeakDetector, object]:
    det = LeakDetector(model, warn=False)
    with det:
        result = loop(model, det)
    return det, result


def _only_leak(det: LeakDetector, marker: str):
    report = det.report()
    assert [leak.site[:2] for leak in report.leaks] == [_here(marker)], str(report)
    return report.leaks[0]


def loop_total_loss(model, det):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    total_loss = 0
    for step in range(STEPS):
        out = _train_step(model, opt, step)
        total_loss += out.loss  # total-loss marker
        det.step()
    return det.report()


@pytest.mark.slow
def test_total_loss_accumulating_the_graph_is_flagged():
    det, report = _run(loop_total_loss, _bert())
    leak = _only_leak(det, "total-loss marker")
    assert leak.kind == "graph" and leak.survivors == 1  # one tensor: only its graph grows
    assert leak.graph_steps == STEPS and leak.graph_nodes > 10 * STEPS
    assert leak.held_by.startswith(f"total_loss (graph of {STEPS} steps, ")
    assert leak.held_by.endswith("in loop_total_loss")
    assert "total_loss += out.loss" in leak.code and "loss.item()" in str(leak)


@pytest.mark.slow
def test_total_loss_graph_reports_what_the_process_heap_grew():
    """Backward freed the saved tensors: what the chain keeps is its nodes, C++ heap objects (about
    600 B each measured on BERT), so the process's heap in use is where the leak shows in bytes."""
    if heap_bytes() is None:
        pytest.skip("this C library does not report its heap (glibc's mallinfo2)")
    det, report = _run(loop_total_loss, _bert())
    leak = _only_leak(det, "total-loss marker")
    assert leak.graph_bytes == 0  # nothing saved for backward is left
    assert leak.heap_growth is not None and leak.heap_growth >= 100 * leak.graph_nodes * (STEPS - 1) // STEPS
    assert leak.rss_growth is not None
    assert f"heap in use grew by {format_bytes(leak.heap_growth)}" in str(leak)


def test_live_memory_growth_is_said_in_bytes_when_it_rounds_away():
    from vramkit.torch.leak import LeakReport
    report = LeakReport(leaks=[], live_bytes=[187_000, 187_004, 187_008, 187_012, 187_016], growing=True)
    assert str(report).splitlines()[-1] == ("live tensor memory grew at every step, by 12 B over the last 3: "
                                            "182.6 KiB -> 182.6 KiB -> 182.6 KiB -> 182.6 KiB")


def test_host_memory_readings_see_kept_autograd_nodes():
    if heap_bytes() is None:
        pytest.skip("this C library does not report its heap (glibc's mallinfo2)")
    x = torch.ones(4, requires_grad=True)
    before = heap_bytes()
    chain = x
    for _ in range(2000):
        chain = chain * 1.0  # one MulBackward0 node a step, each kept by the next
    assert heap_bytes() - before >= 2000 * 100
    assert rss_bytes() > 0


def loop_list_append(model, det):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(STEPS):
        out = _train_step(model, opt, step)
        losses.append(out.loss)  # list-append: the loss was made at the model call, in _train_step
        det.step()


@pytest.mark.slow
def test_list_append_of_the_loss_is_flagged_with_the_user_line_and_the_library_line():
    det, _ = _run(loop_list_append, _gpt2())
    leak = _only_leak(det, "model-call marker")
    # the losses, and a few tensors GPT-2 made once and keeps
    assert leak.kind == "tensors" and leak.survivors >= STEPS - 1 and leak.keeps_graph >= STEPS - 1
    assert leak.held_by == f"losses (list of {STEPS}) in loop_list_append"
    assert os.sep + "transformers" + os.sep in leak.library_site[0]  # where the library made the loss
    assert f"made in transformers{os.sep}" in str(leak)  # shown from the package on


class Accuracy:
    def __init__(self) -> None:
        self.preds: list = []

    def update(self, logits) -> None:
        self.preds.append(logits)


def loop_attribute_append(model, det):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    metric = Accuracy()
    for step in range(STEPS):
        out = _train_step(model, opt, step)
        metric.update(out.logits)  # attribute-append: metric.preds.append(logits)
        det.step()


@pytest.mark.slow
def test_attribute_append_names_the_object_and_attribute():
    det, _ = _run(loop_attribute_append, _bert())
    leak = _only_leak(det, "model-call marker")
    assert leak.held_by == f"metric.preds (list of {STEPS}) in loop_attribute_append"
    logits = (STEPS - 1) * BATCH * 3 * 4  # bytes: 4 x 3 float32 logits a step
    assert logits <= leak.bytes < 2 * logits and f"({format_bytes(leak.bytes)})" in str(leak)
    assert "0MiB" not in str(leak)


def loop_dict_cache(model, det):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cache = {}
    for step in range(STEPS):
        out = _train_step(model, opt, step, output_hidden_states=True)
        cache[f"batch{step}"] = out.hidden_states[-1].detach()  # dict-cache marker
        det.step()


@pytest.mark.slow
def test_dict_cache_is_flagged():
    det, _ = _run(loop_dict_cache, _gpt2())
    leak = _only_leak(det, "dict-cache marker")
    assert leak.held_by == f"cache (dict of {STEPS}) in loop_dict_cache"
    assert leak.keeps_graph == 0 and leak.bytes == (STEPS - 1) * BATCH * SEQ * 32 * 4


def loop_eval_with_grad(model, det):
    model.eval()
    kept = []
    for step in range(STEPS):
        out = model(**_batch(model, step))  # eval-without-no-grad marker
        kept.append(out.logits)
        det.step()


@pytest.mark.slow
def test_evaluation_without_no_grad_is_one_finding_and_its_kept_logits_a_leak():
    det, _ = _run(loop_eval_with_grad, _bert())
    leak = _only_leak(det, "eval-without-no-grad marker")
    assert leak.held_by == f"kept (list of {STEPS}) in loop_eval_with_grad"
    assert leak.keeps_graph >= STEPS - 1 and leak.graph_bytes > 100 * leak.bytes  # the activations they keep
    report = det.report()
    assert [site[:2] for site, _ in report.eval_with_grad] == [_here("eval-without-no-grad marker")]
    assert len(report.eval_library) > 5  # many lines inside modeling_bert.py, one finding
    text = str(report)
    assert text.count("eval mode") == 1 and "torch.no_grad()" in text


def loop_eval_loss_sum(model, det):
    model.eval()
    val_loss = 0
    for step in range(STEPS):
        out = model(**_batch(model, step))
        val_loss += out.loss  # eval-loss-sum marker
        det.step()


@pytest.mark.slow
def test_evaluation_loss_summed_without_no_grad_keeps_every_activation():
    det, _ = _run(loop_eval_loss_sum, _gpt2())
    leak = _only_leak(det, "eval-loss-sum marker")
    assert leak.kind == "graph" and leak.graph_bytes > 1024**2  # no backward: every step's activations stay
    assert leak.held_by == f"val_loss (graph of {STEPS} steps, {format_bytes(leak.graph_bytes)}) in loop_eval_loss_sum"
    assert "heap in use" not in str(leak)  # its bytes are the saved tensors, counted: no process-wide figure


# ---------------------------------------------------------------- loops that must not be flagged

def loop_clean(model, det):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, total = [], 0.0
    for step in range(STEPS):
        out = _train_step(model, opt, step)
        losses.append(out.loss.item())
        total += out.loss.item()
        det.step()


def loop_bounded_buffer(model, det):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    recent = deque(maxlen=6)
    for step in range(STEPS):
        out = _train_step(model, opt, step)
        recent.append(out.logits.detach())  # bounded-buffer marker
        det.step()


def loop_ema(model, det):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ema = {name: p.detach().clone() for name, p in model.named_parameters()}
    for step in range(STEPS):
        _train_step(model, opt, step)
        with torch.no_grad():
            for name, p in model.named_parameters():
                ema[name] = 0.9 * ema[name] + 0.1 * p.detach()
        det.step()


def loop_grad_accumulation(model, det):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(STEPS):
        out = model(**_batch(model, step))
        (out.loss / 4).backward()
        if step % 4 == 3:
            opt.step()
            opt.zero_grad()
        det.step()


def loop_scheduler(model, det):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = _transformers().get_linear_schedule_with_warmup(opt, num_warmup_steps=5, num_training_steps=STEPS)
    for step in range(STEPS):
        out = model(**_batch(model, step))
        out.loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        det.step()


@pytest.mark.slow
@pytest.mark.parametrize("loop,make", [(loop_clean, _gpt2), (loop_bounded_buffer, _bert), (loop_ema, _gpt2),
                                       (loop_grad_accumulation, _bert), (loop_scheduler, _gpt2)],
                         ids=["clean", "bounded-buffer", "ema", "grad-accumulation", "scheduler"])
def test_loops_without_a_leak_are_not_flagged(loop, make):
    det, _ = _run(loop, make())
    report = det.report()
    assert report.leaks == [] and not report.eval_with_grad and not report.growing, str(report)
    assert len(report.live_bytes) == STEPS
    assert str(report).startswith(f"no leak found over {STEPS} steps")
    if loop is loop_bounded_buffer:  # 48-byte host tensors without a graph, in a deque: not even counted
        assert report.settled == []
