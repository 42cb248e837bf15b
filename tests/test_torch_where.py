"""where(model): devices and dtypes of parameters, buffers and plain tensor attributes. No GPU here:
the "meta" device stands in for one (a model moved there, with what .to() left behind on the CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from vramkit.torch import where  # noqa: E402


def test_where_flags_a_module_added_after_to_and_says_to_move_it_again():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    model.to("meta")  # stands in for a GPU
    model.append(torch.nn.Linear(64, 4))  # added after .to(): its parameters stay on the CPU
    report = where(model)
    assert report.devices == ["meta", "cpu"] and report.mixed_devices
    assert {name for name, _ in report.stray} == {"1.weight (param)", "1.bias (param)"}
    [warning] = report.warnings
    assert "2 parameters/buffers still on the CPU while the model is on meta" in warning
    assert "call model.to(device) again after adding it" in warning
    assert "register_buffer" not in warning  # they already are parameters
    assert "float32" in str(report)


class _WithRopeCache(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)
        self.rope_cache = torch.zeros(128, 16)  # a plain attribute: .to() does not move it
        self.masks = [torch.ones(4, 4)]
        self.register_buffer("inv_freq", torch.ones(16), persistent=False)


def test_where_sees_plain_tensor_attributes_left_on_the_cpu():
    model = torch.nn.Sequential(_WithRopeCache())
    model.to("meta")
    report = where(model)
    assert {name for name, _ in report.stray} == {"0.rope_cache (attribute)", "0.masks[0] (attribute)"}
    [warning] = report.warnings
    assert warning.startswith("2 plain tensor attributes on the CPU while the model is on meta: "
                              "0.rope_cache (attribute), 0.masks[0] (attribute);")
    assert "self.register_buffer(name, tensor, persistent=False)" in warning
    assert report.groups[("cpu", "float32")] == {"tensors": 2, "elements": 128 * 16 + 16,
                                                 "bytes": (128 * 16 + 16) * 4}
    tidy = _WithRopeCache()  # all on the CPU: nothing to say
    assert where(tidy).devices == ["cpu"] and where(tidy).warnings == []


def test_where_on_a_tidy_model():
    model = torch.nn.Linear(8, 8).to(torch.bfloat16)
    report = where(model)
    assert report.devices == ["cpu"] and not report.warnings and report.dtypes == ["bfloat16"]


def test_a_small_model_shows_its_real_size_not_0mib():
    model = torch.nn.Linear(8, 8).to(torch.bfloat16)  # 72 bf16 values: 144 bytes
    row = str(where(model)).splitlines()[1].split()
    assert row == ["cpu", "bfloat16", "2", "144", "B"]


def test_fp32_norm_layers_in_a_bf16_model_are_not_mixed_dtypes():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 16),
                                torch.nn.RMSNorm(16), torch.nn.Linear(16, 16)).to(torch.bfloat16)
    model[1].float()
    model[3].float()
    report = where(model)
    assert report.dtypes == ["bfloat16", "float32"] and report.warnings == []
    model[2].float()  # a linear layer in fp32: that one is a mistake (or at least worth a look)
    [warning] = where(model).warnings
    assert warning.startswith("mixed floating dtypes: 2 parameters in float32 in a bfloat16 model: "
                              "2.weight (param), 2.bias (param)")


def test_fp32_norms_and_rotary_buffers_of_a_transformers_model():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    for module in model.modules():
        if "RMSNorm" in type(module).__name__:
            module.float()
    model.model.rotary_emb.inv_freq = model.model.rotary_emb.inv_freq.float()
    report = where(model)
    assert "float32" in report.dtypes and report.warnings == []
    model._keep_in_fp32_modules = ["lm_head"]  # what a model class may declare
    model.lm_head.float()
    assert where(model).warnings == []



def test_where_tells_a_reassigned_buffer_from_a_module_added_after_to():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    model.to("meta")  # stands in for a GPU
    model[1].running_mean = torch.zeros(8)  # a buffer re-assigned to a CPU tensor after .to()
    [warning] = where(model).warnings
    assert "1.running_mean (buffer)" in warning
    assert "added after .to()" not in warning
    assert "assigned" in warning and "device=" in warning
