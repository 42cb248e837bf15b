"""The moments of a training step are sums over the terms alive in them: each term carries its own lifetime
(Term.lifetime, the moments of a step it is alive in), so a new term lands in its moments, and one that says
none is refused rather than silently left out of the peak."""
from __future__ import annotations

import pytest

from vramkit.estimator import analytic
from vramkit.estimator.analytic import cublas_workspaces, estimate
from vramkit.estimator.formulas import STEP_MOMENTS, Term

GiB = 1024**3

SETUPS = [
    ("gpt2", {"batch": 4, "seq": 512, "precision": "fp16"}),
    ("gpt2", {"batch": 4, "seq": 512, "precision": "fp16", "checkpointing": True}),
    ("llama-2-7b", {"batch": 1, "seq": 1024, "lora": 16, "quant": "4bit", "checkpointing": True}),
    ("llama-2-7b", {"batch": 2, "seq": 512, "gpus": 4, "fsdp": True, "precision": "bf16"}),
    ("llama-2-7b", {"batch": 2, "seq": 512, "gpus": 4, "zero": 3}),
    ("bert-base-uncased", {"batch": 16, "seq": 128, "grad_accum": 4, "stack": "torch=1.13"}),
    ("t5-base", {"batch": 8, "seq": 256, "precision": "bf16", "checkpointing": True}),
    ("gpt2", {"batch": 8, "seq": 256, "gpus": 2, "parallel": "dp"}),
]


def _alive_sum(e: analytic.Estimate, moment: str, first: bool) -> int:
    # the cuBLAS workspaces are allocated from the first matmul on where PyTorch takes them from its allocator
    return sum(t.at(moment) for t in e.terms if t.alive_in(moment, first)) + cublas_workspaces(e.setup)[0]


@pytest.mark.parametrize(("model", "options"), SETUPS)
def test_each_moment_is_the_sum_of_the_terms_alive_in_it(model: str, options: dict):
    e = estimate(model, mode="train", **options)
    assert set(e.moments) <= set(STEP_MOMENTS)
    for moment, total in e.moments.items():
        assert total == _alive_sum(e, moment, first=False), moment
        assert e.first_step[moment] == _alive_sum(e, moment, first=True), moment
    # the optimizer's states exist from the first update on: not in the first step's forward
    opt = next(t for t in e.terms if t.kind == "optimizer")
    if opt.bytes:
        assert e.moments["forward end"] - e.first_step["forward end"] >= opt.bytes


def test_a_new_term_lands_in_the_moments_it_says(monkeypatch: pytest.MonkeyPatch):
    """A term added to the step with a lifetime is counted where it is alive, and only there."""
    before = estimate("gpt2", mode="train", batch=4, seq=512, precision="fp16", checkpointing=True)
    step_terms = analytic._step_terms

    def with_extra(*args, **kwargs):
        acts = step_terms(*args, **kwargs)
        args[-1].append(Term("a new transient", 100 * GiB, "a test's", "transient",
                          lifetime=("backward start", "recompute")))
        return acts

    monkeypatch.setattr(analytic, "_step_terms", with_extra)
    after = estimate("gpt2", mode="train", batch=4, seq=512, precision="fp16", checkpointing=True)
    for moment in before.moments:
        grew = after.moments[moment] - before.moments[moment]
        assert grew == (100 * GiB if moment in ("backward start", "recompute") else 0), moment
    assert after.peak_moment in ("backward start", "recompute")
    assert after.breakdown["a new transient"] == 100 * GiB


def test_a_term_without_a_lifetime_is_refused(monkeypatch: pytest.MonkeyPatch):
    step_terms = analytic._step_terms

    def with_unplaced(*args, **kwargs):
        acts = step_terms(*args, **kwargs)
        args[-1].append(Term("a term nobody placed", GiB, "a test's", "transient"))
        return acts

    monkeypatch.setattr(analytic, "_step_terms", with_unplaced)
    with pytest.raises(ValueError, match="a term nobody placed"):
        estimate("gpt2", mode="train", batch=4, seq=512)
