"""PyTorch 2.0's foreach Adam keeps two parameter-sized lists at the update (`--torch 2.0`,
Setup.foreach_denom_copy): sqrt(exp_avg_sq) and `denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`."""

from __future__ import annotations

from helpers import run_vram

from vramkit.estimate.analytic import estimate

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
