"""The estimate against the bytes torchao and bitsandbytes themselves allocate, counted from their tensors' storages
on the CPU: the low-bit AdamW states after a real step of the reference llama (torchao 0.18's AdamW4bit, AdamWFp8
and AdamW8bit, bitsandbytes 0.50.2's AdamW8bit), and the weights after torchao's quantize_ with a weight-only config
(0.18's Int8Tensor and Float8Tensor, 0.15's AffineQuantizedTensor for int8; 0.18's Int4Tensor on the
meta device). The default suite holds the estimate to
the bytes so measured (below, with the setups that measured them); with torchao and bitsandbytes importable the
slow tests measure them again (docs/estimation.md, "Settings of the current stack": a venv beside .venv)."""

from __future__ import annotations

from typing import Any

import pytest

from vramkit.estimator import estimate
from vramkit.estimator.specs import from_config

# vramkit's reference llama, narrow (the optimizer's) and wider (the weight-only configs' group sizes divide it)
OPTIM_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2000,
               "max_position_embeddings": 256, "tie_word_embeddings": False}
WO_LLAMA = {**OPTIM_LLAMA, "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 8,
            "num_key_value_heads": 4, "vocab_size": 4096, "max_position_embeddings": 512}
STEP = {"batch": 2, "seq": 64, "attention": "flash"}
INFER = {"mode": "infer", "batch": 1, "seq": 64, "precision": "bf16"}

# the optimizer's state tensors after one step (the step counters left out), bytes: (optimizer, precision) -> bytes
MEASURED_STATES = {
    ("adamw-8bit", "bf16-pure"): 5_037_568, ("adamw-8bit", "fp32"): 5_037_568,  # bitsandbytes.optim.AdamW8bit
    ("adamw-4bit", "bf16-pure"): 2_635_776, ("adamw-4bit", "fp32"): 2_640_896,  # torchao.optim.AdamW4bit
    ("adamw-fp8", "bf16-pure"): 5_030_400, ("adamw-fp8", "fp32"): 5_035_520,  # torchao.optim.AdamWFp8
}
# torchao's own AdamW8bit: a 256-value fp32 map per state tensor (bitsandbytes shares two), small tensors in the
# parameter's dtype (bitsandbytes: fp32); the estimate's adamw-8bit is bitsandbytes'
MEASURED_TORCHAO_8BIT = {"bf16-pure": 5_063_168, "fp32": 5_068_288}
# every parameter and buffer of the quantized bf16 model: (quant, torchao) -> bytes
MEASURED_WEIGHTS = {("int8-wo", "0.18"): 36_303_872, ("fp8-wo", "0.18"): 36_280_320,
                    ("int8-wo", "0.15"): 36_421_632, ("fp8-wo", "0.15"): 36_280_320,
                    # Int4WeightOnlyConfig()'s default, Int4Tensor's plain packing: quantized on the meta device
                    ("int4-wo", "0.18"): 23_160_832}


def _spec(cfg: dict[str, Any]) -> Any:
    return from_config(cfg, name="narrow-llama", source="config")


@pytest.mark.parametrize("optimizer, precision", list(MEASURED_STATES))
def test_low_bit_adamw_states_are_the_librarys_bytes(optimizer: str, precision: str):
    """bitsandbytes: uint8 states and an fp32 absmax per 256 for tensors of 4,096 values or more, fp32 states for
    the rest (min_8bit_size), and its two quantization maps; torchao: 4-bit states with a scale per 128 and a
    16-value map per state, float8 states with a scale per 256, plain states in the parameter's dtype for small
    tensors."""
    e = estimate(_spec(OPTIM_LLAMA), **STEP, precision=precision, optimizer=optimizer)
    assert e.breakdown[f"optimizer states ({optimizer})"] == MEASURED_STATES[optimizer, precision]


@pytest.mark.parametrize("optimizer", ["adamw-4bit", "adamw-fp8"])
def test_torchaos_compiled_step_allocates_nothing(optimizer: str):
    """single_param_adam, compiled, dequantizes, updates and quantizes again in place: the step allocated no bytes
    above what it started with (the profiler's allocator events, both precisions), where foreach AdamW's allocates
    a parameter-sized list."""
    e = estimate(_spec(OPTIM_LLAMA), **STEP, precision="bf16-pure", optimizer=optimizer)
    assert {t.name: t.bytes for t in e.terms}["optimizer-step temporaries"] == 0


def test_torchaos_own_8bit_adamw_is_within_one_percent_of_the_estimate():
    for precision, measured in MEASURED_TORCHAO_8BIT.items():
        states = estimate(_spec(OPTIM_LLAMA), **STEP, precision=precision, optimizer="adamw-8bit").breakdown[
            "optimizer states (adamw-8bit)"]
        assert -0.01 < states / measured - 1 < 0, precision


@pytest.mark.parametrize("quant, torchao", list(MEASURED_WEIGHTS))
def test_weight_only_weights_are_torchaos_bytes(quant: str, torchao: str):
    """int8: one byte a weight with (0.18) an fp32 scale and an int8 zero point per output row, (before 0.18) a
    16-bit scale and an int64 zero point; float8: one byte with an fp32 scale per row; int4: two values a byte
    with a 16-bit scale and zero point per group of 128 inputs; the output layer quantized too, the embeddings and
    norms 16-bit."""
    e = estimate(_spec(WO_LLAMA), **INFER, quant=quant, stack=f"torchao={torchao}")
    assert e.breakdown["weights"] == MEASURED_WEIGHTS[quant, torchao]


# ---- measured again where the libraries are installed (not in .venv: a venv of their own, docs/estimation.md)

def _storage_bytes(t: Any, seen: set[int]) -> int:
    if hasattr(t, "__tensor_flatten__"):  # a tensor subclass: its inner tensors
        return sum(_storage_bytes(getattr(t, name), seen) for name in t.__tensor_flatten__()[0])
    storage = t.untyped_storage()
    if storage.data_ptr() in seen:
        return 0
    seen.add(storage.data_ptr())
    return int(storage.nbytes())


@pytest.mark.slow  # torchao compiles its optimizer step with Inductor: minutes on a CPU
@pytest.mark.parametrize("optimizer, precision", list(MEASURED_STATES))
def test_the_libraries_allocate_what_was_measured(optimizer: str, precision: str):
    torch = pytest.importorskip("torch")
    from vramkit.estimator.trace import ReferenceRun

    if optimizer == "adamw-8bit":
        make = pytest.importorskip("bitsandbytes").optim.AdamW8bit
    else:
        optim = pytest.importorskip("torchao.optim")
        make = {"adamw-4bit": optim.AdamW4bit, "adamw-fp8": optim.AdamWFp8}[optimizer]
    run = ReferenceRun.plan(_spec(OPTIM_LLAMA), **STEP, precision=precision, optimizer="adamw")
    net, _unused = run.build()
    opt = make(net.parameters(), lr=1e-4)
    run.step(net, opt)
    opt.step()
    seen: set[int] = set()
    states = sum(_storage_bytes(v, seen) for state in opt.state.values() for k, v in state.items()
                 if torch.is_tensor(v) and k != "step")
    assert states == MEASURED_STATES[optimizer, precision]


def _step_peak(fn: Any) -> int:
    """The most the tensors `fn` allocates hold at once: the profiler's allocator events in time order."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    for _t, n in sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                        if e.name() == "[memory]"):
        live += n
        peak = max(peak, live)
    return peak


@pytest.mark.slow  # compiles the step
@pytest.mark.parametrize("optimizer", ["adamw-4bit", "adamw-fp8"])
def test_torchaos_step_allocates_nothing_on_the_cpu(optimizer: str):
    optim = pytest.importorskip("torchao.optim")
    from vramkit.estimator.trace import ReferenceRun

    run = ReferenceRun.plan(_spec(OPTIM_LLAMA), **STEP, precision="bf16-pure", optimizer="adamw")
    net, _unused = run.build()
    opt = {"adamw-4bit": optim.AdamW4bit, "adamw-fp8": optim.AdamWFp8}[optimizer](net.parameters(), lr=1e-4)
    run.step(net, opt)
    opt.step()  # the states made, the step compiled
    run.step(net, opt)
    assert _step_peak(opt.step) == 0


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["int8-wo", "fp8-wo"])
def test_torchao_quantizes_to_what_was_measured(quant: str):
    pytest.importorskip("torch")
    torchao = pytest.importorskip("torchao")
    from torchao.quantization import Float8WeightOnlyConfig, Int8WeightOnlyConfig, quantize_

    from vramkit.estimator.trace import ReferenceRun

    version = ".".join(torchao.__version__.split(".")[:2])
    if (quant, version) not in MEASURED_WEIGHTS:
        pytest.skip(f"torchao {version} was not measured")
    run = ReferenceRun.plan(_spec(WO_LLAMA), **INFER)
    net, _unused = run.build()
    quantize_(net, Int8WeightOnlyConfig() if quant == "int8-wo" else Float8WeightOnlyConfig())
    seen: set[int] = set()
    got = sum(_storage_bytes(t, seen) for t in [*net.parameters(), *net.buffers()])
    assert got == MEASURED_WEIGHTS[quant, version]


@pytest.mark.slow
def test_torchaos_default_int4_packs_what_was_measured():
    """Int4WeightOnlyConfig()'s default (Int4Tensor.from_hp, plain packing) on the reference llama built on the meta
    device: mslk's int4_row_quantize_zp and pack_int4 are torch code that runs there; mslk's kernels are CUDA only,
    so it is imported as Python alone (MSLK_PYTHON_ONLY=1, triton importable: docs/estimation.md)."""
    torch = pytest.importorskip("torch")
    torchao = pytest.importorskip("torchao")
    import importlib

    from torchao.quantization import Int4WeightOnlyConfig, quantize_

    from vramkit.estimator.trace import ReferenceRun

    version = ".".join(torchao.__version__.split(".")[:2])
    if ("int4-wo", version) not in MEASURED_WEIGHTS:
        pytest.skip(f"torchao {version} was not measured")
    if importlib.import_module("torchao.quantization.quantize_.workflows.int4.int4_tensor").pack_int4 is None:
        pytest.skip("torchao's Int4Tensor needs mslk (MSLK_PYTHON_ONLY=1 and triton importable on a CPU)")
    run = ReferenceRun.plan(_spec(WO_LLAMA), **INFER)
    with torch.device("meta"):
        net, _unused = run.build()
    quantize_(net, Int4WeightOnlyConfig())

    def numel_bytes(t: Any) -> int:  # meta tensors have no storage to tell apart: none is shared here
        if hasattr(t, "__tensor_flatten__"):
            return sum(numel_bytes(getattr(t, name)) for name in t.__tensor_flatten__()[0])
        return int(t.numel() * t.element_size())

    assert sum(numel_bytes(t) for t in [*net.parameters(), *net.buffers()]) == MEASURED_WEIGHTS["int4-wo", version]
