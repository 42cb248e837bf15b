"""A 4-bit base under FSDP and ZeRO-3 (FSDP-QLoRA, issue 16): bitsandbytes' packed 4-bit weights in a
16-bit storage dtype are flattened and sharded with the 16-bit embeddings, norms and lm_head; each
weight's quant state (a module attribute) stays whole on every GPU; the layers are gathered packed;
the LoRA adapters are sharded with their states; FSDP's CPU offload takes parameters, adapters and
the optimizer to the CPU. What is not modelled is refused in one line."""

from __future__ import annotations

import json

import pytest
from helpers import assert_one_line_error, run_vram

from vramkit.estimator.analytic import estimate
from vramkit.estimator.formulas import ALL_LINEAR, DOUBLE_QUANT_4BIT, UNQUANTIZED_OUTPUTS, params_of
from vramkit.estimator.specs import EstimateError, numel, resolve

MODEL = "llama-2-7b"
QLORA = {"lora": 8, "lora_targets": ",".join(ALL_LINEAR), "quant": "4bit", "double_quant": True,
         "quant_compute_dtype": "bf16", "precision": "bf16-pure", "checkpointing": True, "attention": "flash",
         "seq": 1024, "batch": 2}


def _stored_elements(name: str, shape: tuple[int, ...], cast: bool) -> int:
    """16-bit storage elements of one tensor: a quantized linear weight packs four 4-bit values into one."""
    quantized = cast and len(shape) == 2 and name.endswith(".weight") and name not in UNQUANTIZED_OUTPUTS
    return numel(shape) // 4 if quantized else numel(shape)


def _packed() -> tuple[int, int, int, int]:
    """(all storage elements, the root's (outside the layers), one layer's, quantized weights), from the shapes."""
    p = params_of(resolve(MODEL), 8, 1, ALL_LINEAR)
    total = sum(_stored_elements(n, s, c) for n, s, c in p.shapes)
    root = sum(_stored_elements(n, s, c) for n, s, c in p.shapes if not n.startswith("layer"))
    layer = sum(_stored_elements(n, s, c) for n, s, c in p.shapes if n.startswith("layer0."))
    return total, root, layer, p.quantized


def _terms(**options: object) -> dict[str, int]:
    return {t.name: t.bytes for t in estimate(MODEL, **{**QLORA, **options}).terms}  # type: ignore[arg-type]


def test_fsdp_shards_the_packed_weights_and_keeps_the_quant_state_on_every_gpu() -> None:
    total, root, layer, quantized = _packed()
    two, four = _terms(fsdp=True, gpus=2), _terms(fsdp=True, gpus=4)
    assert two["weights"] == total * 2 // 2 and four["weights"] == total * 2 // 4
    state = int(quantized * (DOUBLE_QUANT_4BIT - 0.5))
    assert two["4-bit quant state (every GPU)"] == four["4-bit quant state (every GPU)"] == state
    # the root unit (embeddings, final norm, lm_head in 16-bit) + the layer computed + the next, packed
    assert two["FSDP gathered units"] == (root + 2 * layer) * 2
    lora = params_of(resolve(MODEL), 8, 1, ALL_LINEAR).lora
    assert two["LoRA adapters"] == lora * 4 // 2  # PEFT's fp32 adapters, sharded with everything else
    whole = _terms(gpus=2)  # DDP: the quantized base whole on each GPU
    assert whole["weights"] > 1.9 * two["weights"]


def test_fsdp_cpu_offload_leaves_the_quant_state_and_the_gathered_units_on_the_gpu() -> None:
    offload = _terms(fsdp=True, gpus=2, offload_params=True)
    assert offload["weights"] == offload["LoRA adapters"] == 0
    assert offload["gradients"] == offload["optimizer states (adamw)"] == 0
    on_gpu = _terms(fsdp=True, gpus=2)
    assert offload["4-bit quant state (every GPU)"] == on_gpu["4-bit quant state (every GPU)"] > 0
    assert offload["FSDP gathered units"] == on_gpu["FSDP gathered units"]


def test_zero3_partitions_the_packed_weights_and_gathers_packed_layers() -> None:
    total, _, layer, _ = _packed()
    z3 = _terms(zero=3, gpus=2, precision="bf16")
    assert z3["weights"] == total * 2 // 2
    # the layer computed + the prefetch bucket (5e7 elements), in 16-bit storage elements
    assert z3["ZeRO-3 gathered layers"] == (layer + 50_000_000) * 2
    lora = params_of(resolve(MODEL), 8, 1, ALL_LINEAR).lora
    assert z3["LoRA adapters"] == lora * 2 // 2  # partitioned in DeepSpeed's bf16
    assert "4-bit quant state (every GPU)" in z3
    # ZeRO-2 keeps the quantized base whole on every GPU, as DDP does
    z2 = _terms(zero=2, gpus=2, precision="bf16")
    assert z2["weights"] > 1.9 * z3["weights"] and "4-bit quant state (every GPU)" not in z2


def test_the_estimate_says_the_weights_are_sharded() -> None:
    e = estimate(MODEL, **{**QLORA, "fsdp": True, "gpus": 2})  # type: ignore[arg-type]
    assert "16-bit storage, sharded" in e.setup.describe(e.seq, e.family)
    assert any("bnb_4bit_quant_storage" in n for n in e.notes)


@pytest.mark.parametrize(("options", "param", "words"), [
    ({"quant": "8bit", "double_quant": False, "fsdp": True, "gpus": 2}, "quant", "give quant 4bit"),
    ({"quant": "8bit", "double_quant": False, "zero": 3, "gpus": 2}, "quant", "give quant 4bit"),
    ({"quant_backend": "torchao", "zero": 2, "gpus": 2}, "quant_backend", "bitsandbytes"),
    ({"zero": 3, "gpus": 2, "offload_params": True}, "offload_params", "FSDP's CPU offload"),
])
def test_what_is_not_modelled_is_refused(options: dict[str, object], param: str, words: str) -> None:
    with pytest.raises(EstimateError) as caught:
        estimate(MODEL, **{**QLORA, **options})  # type: ignore[arg-type]
    assert caught.value.param == param and words in str(caught.value)


def test_cli_estimates_fsdp_qlora_and_refuses_8bit_in_one_line() -> None:
    args = ("estimate", MODEL, "--lora", "8", "--lora-targets", "all-linear", "--quant", "4bit", "--double-quant",
            "--fsdp", "--gpus", "2", "--precision", "bf16-pure", "--checkpointing", "--seq", "1024")
    r = run_vram(*args, "--json")
    assert r.rc == 0, r.err
    data = json.loads(r.out)
    weights = next(t for t in data["terms"] if t["name"] == "weights")
    assert weights["bytes"] == _packed()[0] * 2 // 2
    offloaded = run_vram(*args, "--offload", "params", "--json")
    assert offloaded.rc == 0 and json.loads(offloaded.out)["total_bytes"] < data["total_bytes"]
    eight = [a for a in args if a != "--double-quant"]
    eight[eight.index("4bit")] = "8bit"
    assert_one_line_error(run_vram(*eight), 2, "--quant", "4bit")
    assert_one_line_error(run_vram("estimate", MODEL, "--lora", "8", "--quant", "4bit", "--zero", "3", "--gpus", "2",
                                   "--offload", "params"), 2, "--offload", "FSDP")
