"""PyTorch 2.0's foreach Adam keeps two parameter-sized lists at the update (`--torch 2.0`,
Setup.foreach_denom_copy): sqrt(exp_avg_sq) and `denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`."""

from __future__ import annotations

import pytest
from helpers import run_vram

from vramkit.estimator.analytic import estimate
from vramkit.estimator.specs import EstimateError

VIT_ACCUM = {"image_size": 224, "batch": 4, "grad_accum": 4, "precision": "bf16-pure", "attention": "flash"}


def test_the_update_holds_sqrt_and_its_copy_with_eps():
    new = estimate("vit-large", **VIT_ACCUM)
    old = estimate("vit-large", **VIT_ACCUM, foreach_denom_copy=True)
    params_bytes = 2 * new.params  # bf16-pure: the states, the gradients and the temporaries are bf16
    def temporaries(e):
        return next(t.bytes for t in e.terms if t.name == "optimizer-step temporaries")

    assert temporaries(new) == params_bytes and temporaries(old) == 2 * params_bytes
    assert old.moments["optimizer step"] - new.moments["optimizer step"] == params_bytes
    assert old.peak_moment == "optimizer step" != new.peak_moment  # what makes the accumulation run's peak
    assert "torch 2.0 foreach Adam" in old.setup.describe(197)
    sgd = {**VIT_ACCUM, "optimizer": "sgd"}  # keeps no temporaries to copy
    assert estimate("vit-large", **sgd, foreach_denom_copy=True).peak_bytes == estimate("vit-large", **sgd).peak_bytes


def test_torch_versions_on_the_command_line():
    args = ("estimate", "vit-large", "--image-size", "224", "--batch", "4", "--grad-accum", "4",
            "--precision", "bf16-pure", "--attention", "flash", "--json")
    default = run_vram(*args).json()["setup"]
    assert default["zero_grad_to_none"] and not default["foreach_denom_copy"]
    two_oh = run_vram(*args, "--torch", "2.0").json()
    assert two_oh["setup"]["zero_grad_to_none"] and two_oh["setup"]["foreach_denom_copy"]
    assert two_oh["peak_bytes"] == estimate("vit-large", **VIT_ACCUM, foreach_denom_copy=True).peak_bytes
    assert not run_vram(*args, "--torch", "2.4").json()["setup"]["foreach_denom_copy"]
    old = run_vram(*args, "--torch", "1.13").json()["setup"]
    assert not old["zero_grad_to_none"] and not old["foreach_denom_copy"]  # 1.x: the for-loop Adam
    assert not old["foreach"] and default["foreach"] and two_oh["setup"]["foreach"]


def test_a_for_loop_adam_holds_the_largest_tensors_temporaries_only():
    # before PyTorch 2.0 (and HF's own AdamW) each parameter is updated alone: exp_avg_sq.sqrt() and its
    # quotient by the bias correction, for the largest tensor, not a list as large as the model
    opts = {"batch": 1, "seq": 128, "precision": "fp32"}
    looped = estimate("bert-base-uncased", **opts, foreach=False)
    largest = 30522 * 768  # the word embeddings
    assert looped.breakdown["optimizer-step temporaries"] == 2 * largest * 4
    assert "for-loop optimizer" in looped.setup.describe(128)
    assert estimate("bert-base-uncased", **opts, foreach=False, optimizer="sgd").setup.describe(128).count(
        "for-loop") == 0  # SGD keeps no temporaries either way


def test_the_for_loop_adam_agrees_with_its_trace():
    pytest.importorskip("torch")
    from vramkit.estimator.trace import trace_estimate

    peaks = {}
    for foreach in (True, False):  # the optimizer step is the peak of this small batch
        opts = {"batch": 1, "seq": 128, "precision": "fp32", "foreach": foreach}
        peaks[foreach] = estimate("gpt2", **opts).peak_bytes, trace_estimate("gpt2", **opts).peak_bytes
        assert abs(peaks[foreach][0] / peaks[foreach][1] - 1) < 0.001, peaks
    # what the for-loop saves, counted as the trace saw it (the word embeddings, twice, in fp32)
    saved, traced = peaks[True][0] - peaks[False][0], peaks[True][1] - peaks[False][1]
    assert traced > 100 * 2**20 and abs(saved / traced - 1) < 0.001, (saved, traced)


def test_an_on_off_option_takes_only_true_or_false():
    # "no" is truthy: taken as given it would switch the option on
    for option in ("foreach", "foreach_denom_copy", "cache_views", "checkpointing"):
        with pytest.raises(EstimateError, match="True or False") as e:
            estimate("gpt2", **{option: "no"})
        assert e.value.param == option
