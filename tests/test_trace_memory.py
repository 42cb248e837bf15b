"""trace_memory on any nn.Module: categories, allocator rounding, steady state."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from vramkit.estimator.trace import fake_mode, round_block, trace_memory  # noqa: E402


def test_round_block():
    assert round_block(1) == 512 and round_block(512) == 512 and round_block(513) == 1024


def test_mlp_step_on_fake_tensors():
    fm = fake_mode()
    with fm:
        model = torch.nn.Sequential(torch.nn.Linear(1024, 1024, bias=False), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 1024, bias=False))
        opt = torch.optim.AdamW(model.parameters(), foreach=True)

    def step(i):
        x = torch.randn(256, 1024)
        model(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    r = trace_memory(model, step, optimizer=opt, fake_mode=fm)
    w = 2 * 1024 * 1024 * 4  # two 4 MiB weights
    assert r.breakdown["parameters"] == w
    assert r.peak_step in (1, 2) and len(r.step_peaks) == 2
    # the peak is the optimizer step: weights + grads + 2 states + foreach temporary (all 4 MiB each)
    assert r.breakdown["gradients"] == w
    assert 2 * w <= r.breakdown["optimizer state"] <= 2 * w + 4 * 512  # + the step counters
    assert r.breakdown["temporaries"] >= w  # foreach AdamW's sqrt(exp_avg_sq)
    assert r.peak_bytes >= 5 * w
    assert r.steady_bytes == r.step_peaks[-1] >= r.step_peaks[0] - 1024


def test_activations_are_counted_at_the_backward_peak():
    fm = fake_mode()
    with fm:
        model = torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 64))

    def step(i):
        model(torch.randn(1024, 64)).sum().backward()
        model.zero_grad(set_to_none=True)

    r = trace_memory(model, step, fake_mode=fm)
    # linear-2 input and gelu input: 2 × 1024 × 4096 × 4 B saved for backward
    assert r.breakdown["activations"] >= 2 * 1024 * 4096 * 4


@pytest.mark.parametrize("options, named", [
    ({"lora": 8}, "lora"), ({"adapter": 16}, "adapter"), ({"prefix_len": 8}, "prefix_len"),
    ({"ce_chunk": 64}, "ce_chunk"), ({"fsdp": True, "gpus": 2}, "fsdp"),
    ({"optimizer": "paged-adamw"}, "paged-adamw"),
])  # keeps_last_graph is traced without its graph and said so ("not traced: ...": test_estimate_stack.py)
def test_the_reference_run_refuses_what_it_would_trace_as_full_training(options, named):
    """The reference models train whole on one GPU: a frozen base with adapters, a chunked loss or
    sharding traced as full training would be a wrong answer given as a check."""
    from vramkit.estimator.trace import ReferenceRun, TraceUnavailable

    with pytest.raises(TraceUnavailable, match=named):
        ReferenceRun.plan("gpt2", seq=64, **options)


def test_a_backward_pass_without_an_optimizer_traces():
    from vramkit.estimator.trace import make_optimizer, trace_estimate

    assert make_optimizer("none", []) is None
    backward = trace_estimate("gpt2", seq=64, optimizer="none")
    adam = trace_estimate("gpt2", seq=64)
    assert "optimizer state" not in backward.breakdown and backward.peak_bytes < adam.peak_bytes
