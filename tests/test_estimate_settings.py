"""Settings of issue 29 item 4, each as its library's code does it: torch's fused AdamW (tests/test_estimate_stack.py),
torchao's low-bit AdamW states, a static KV cache, torchtune's optimizer in backward (checked against a traced
step) and activation offloading, torch.compile said as a bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import assert_one_line_error, run_vram

from vramkit.estimator import estimate
from vramkit.estimator.formulas import kv_cache
from vramkit.estimator.specs import EstimateError, numel, resolve

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 2048, "max_position_embeddings": 512,
        "tie_word_embeddings": False}


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def _terms(e) -> dict[str, int]:
    return {t.name: t.bytes for t in e.terms}


@pytest.mark.slow  # traces on fake tensors
@pytest.mark.parametrize("checkpointing", [False, True])
def test_optimizer_in_backward_agrees_with_a_traced_step(tiny: str, checkpointing: bool):
    """torchtune's optimizer_in_bwd, traced: one optimizer a parameter stepped from its post-accumulate-grad hook,
    the gradient dropped there; the analytic peak is within 1 % of the trace, and below the plain step's."""
    pytest.importorskip("torch")
    from vramkit.estimator.trace import trace_estimate

    opts = dict(batch=2, seq=64, precision="bf16-pure", attention="flash", checkpointing=checkpointing)
    analytic = estimate(tiny, optimizer_in_backward=True, **opts)
    traced = trace_estimate(tiny, optimizer_in_backward=True, **opts)
    assert abs(analytic.peak_bytes - traced.peak_bytes) <= 0.01 * traced.peak_bytes
    assert traced.peak_bytes < trace_estimate(tiny, **opts).peak_bytes
    assert analytic.peak_bytes < estimate(tiny, **opts).peak_bytes


def test_optimizer_in_backward_keeps_one_gradient_and_refuses_accumulation():
    spec = resolve("llama-3-8b")
    e = estimate(spec, seq=2048, precision="bf16-pure", optimizer_in_backward=True, checkpointing=True)
    largest = max(numel(s) for _, s, _ in __import__("vramkit.estimator.formulas", fromlist=["params_of"])
                  .params_of(spec).shapes)
    assert _terms(e)["gradients"] == largest * 2
    with pytest.raises(EstimateError, match="no gradient accumulation"):
        estimate(spec, optimizer_in_backward=True, grad_accum=2)
    assert_one_line_error(run_vram("estimate", "gpt2", "--optimizer-in-backward", "--zero", "2", "--gpus", "2"), 2,
                          "--optimizer-in-backward")


def test_torchao_low_bit_adamw_states():
    """AdamW4bit: two 4-bit states and an fp32 scale per 128 values (AdamWFp8: 1 byte and one per 256) for every
    tensor of 4,096 values or more, AdamW4bit's each with a 16-value fp32 map; smaller ones keep plain states."""
    spec = resolve("gpt2")
    from vramkit.estimator.formulas import params_of

    shapes = params_of(spec).shapes
    for opt, value, block in (("adamw-4bit", 0.5, 128), ("adamw-fp8", 1.0, 256)):
        small = sum(numel(s) for _, s, _ in shapes if numel(s) < 4096 or numel(s) % block)
        big = sum(numel(s) for _, s, _ in shapes) - small
        maps = 2 * 64 * sum(1 for _, s, _ in shapes if numel(s) >= 4096 and not numel(s) % block) if value == 0.5 else 0
        e = estimate(spec, optimizer=opt, precision="fp32", seq=128)
        assert _terms(e)[f"optimizer states ({opt})"] == int(big * 2 * (value + 4 / block) + small * 2 * 4 + maps)
    assert _terms(estimate(spec, optimizer="adamw-4bit", seq=128))["optimizer states (adamw-4bit)"] < \
        _terms(estimate(spec, optimizer="adamw-8bit", seq=128))["optimizer states (adamw-8bit)"]
    assert_one_line_error(run_vram("estimate", "gpt2", "--optimizer", "adamw-4bit", "--zero", "2", "--gpus", "2"), 2,
                          "--optimizer")


def test_a_static_cache_is_sized_by_its_length_with_its_mask():
    """StaticCache(max_cache_len=L) is allocated whole before the prefill: the cache is L positions whatever the
    prompt, the prefill's boolean mask spans it, and decoding adds no growth (nothing is concatenated)."""
    spec = resolve("llama-3-8b")
    e = estimate(spec, mode="infer", seq=1000, new_tokens=24, cache_len=4096, attention="flash", precision="bf16",
                 stack="transformers=5.13")
    terms = _terms(e)
    assert terms["KV cache"] == kv_cache(spec, 1, 4096, 2)
    assert terms["static-cache attention mask"] == 1000 * 4096
    # transformers 5.14 on: an empty static cache's prefill passes is_causal, no mask (masking_utils, #47094)
    current = estimate(spec, mode="infer", seq=1000, new_tokens=24, cache_len=4096, attention="flash",
                       precision="bf16", stack="transformers=5.14")
    assert "static-cache attention mask" not in _terms(current)
    assert e.peak_bytes - current.peak_bytes == 1000 * 4096
    assert "KV cache growth (generation)" not in terms
    dynamic = _terms(estimate(spec, mode="infer", seq=1000, new_tokens=24, attention="flash", precision="bf16"))
    assert dynamic["KV cache"] == kv_cache(spec, 1, 1000, 2) < terms["KV cache"]
    text = run_vram("estimate", "llama-3-8b", "--infer", "--seq", "1000", "--new-tokens", "24", "--cache-len", "4096")
    assert text.rc == 0 and "static cache 4096" in text.out.splitlines()[1]
    for bad, needle in ((("--cache-len", "512"), "cannot hold"), (("--cache-len", "4096", "--attention", "eager"),
                                                                   "SDPA")):
        assert_one_line_error(run_vram("estimate", "llama-3-8b", "--infer", "--seq", "1000", *bad), 2, "--cache-len",
                              needle)
    assert_one_line_error(run_vram("estimate", "llama-3-8b", "--cache-len", "4096"), 2, "--cache-len", "inference")


@pytest.mark.slow  # traces on fake tensors
@pytest.mark.filterwarnings("ignore::FutureWarning")  # past_key_values, renamed cache in 5.24, taken by 5.14 on
@pytest.mark.parametrize(("batch", "seq", "cache_len"), [(2, 256, 2048), (1, 1000, 4096)])
def test_a_static_cache_agrees_with_transformers_static_cache_traced(tmp_path: Path, batch: int, seq: int,
                                                                     cache_len: int):
    """transformers' own LlamaForCausalLM, its prefill into a StaticCache(max_cache_len=cache_len) traced on fake
    tensors (no mask: the installed transformers is 5.14 or later), against the analytic estimate on that stack."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from vramkit.estimator.analytic import CUBLAS_WORKSPACES
    from vramkit.estimator.stack import parse_version
    from vramkit.estimator.trace import fake_mode, trace_memory

    if parse_version(transformers.__version__, "transformers") < (5, 14):
        pytest.skip("transformers before 5.14 builds the prefill's mask over the cache")
    cfg = {**TINY, "num_key_value_heads": 2, "max_position_embeddings": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    config = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k != "model_type"})
    config._attn_implementation = "sdpa"
    fm = fake_mode()
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with fm:
            net = transformers.LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)

    def prefill(_step: int) -> None:
        ids = torch.randint(0, cfg["vocab_size"], (batch, seq))
        with torch.no_grad():
            net(input_ids=ids, past_key_values=transformers.StaticCache(config=config, max_cache_len=cache_len),
                use_cache=True, logits_to_keep=1)

    traced = trace_memory(net, prefill, steps=1, fake_mode=fm).peak_bytes
    analytic = estimate(str(path), mode="infer", batch=batch, seq=seq, cache_len=cache_len, attention="flash",
                        precision="bf16", stack=f"transformers={transformers.__version__}")
    assert "static-cache attention mask" not in _terms(analytic)
    # the trace sees no cuBLAS workspaces: the analytic peak less them
    assert abs(analytic.peak_bytes - CUBLAS_WORKSPACES - traced) <= 0.03 * traced
    static_kv = kv_cache(resolve(str(path)), batch, cache_len, 2)
    assert static_kv == _terms(analytic)["KV cache"]


def test_torch_compile_is_said_as_a_bound():
    r = run_vram("estimate", "gpt2", "--compile")
    assert r.rc == 0 and "torch.compile (not modelled: a bound)" in r.out.splitlines()[1]
    assert estimate("gpt2", compiled=True).peak_bytes == estimate("gpt2").peak_bytes  # not modelled: only said


def test_torchao_weight_only_quantization_for_inference():
    """quantize_(model, Int8WeightOnlyConfig() | Int4WeightOnlyConfig() | Float8WeightOnlyConfig()): every nn.Linear,
    lm_head too, in 1 B (+ per output row: int8's fp32 scale and int8 zero point, float8's fp32 scale) or 0.5 B with
    a bf16 scale and zero point per 128 values; int8 and float8 dequantize the weight for each matmul, int4's
    tinygemm kernel does not."""
    from vramkit.estimator.formulas import params_of

    spec = resolve("llama-3-8b")
    p = params_of(spec, quant_head=True)
    rows = sum(s[0] for n, s, c in p.shapes if c and len(s) == 2 and n.endswith(".weight"))
    rest = p.total - p.quantized
    expected = {"int8-wo": p.quantized + rows * 5 + rest * 2, "fp8-wo": p.quantized + rows * 4 + rest * 2,
                "int4-wo": p.quantized * (0.5 + 4 / 128) + rest * 2}
    for quant, weights in expected.items():
        e = estimate(spec, mode="infer", seq=512, quant=quant)
        assert _terms(e)["weights"] == int(weights), quant
        dequantized = _terms(e)["dequantized weight"]
        assert (dequantized == 0) == (quant == "int4-wo")
    assert "lm_head.weight" in {n for n, s, c in p.shapes if c and len(s) == 2}  # quantized with the rest
    assert_one_line_error(run_vram("estimate", "llama-3-8b", "--quant", "int4-wo"), 2, "--quant", "inference")


@pytest.mark.parametrize("model, options", [
    ("llama-2-7b", {}),
    ("llama-2-7b", {"gpus": 2}),  # DDP's gradient buckets
    ("llama-2-13b", {"zero": 2, "gpus": 4}),  # DeepSpeed's reduce buckets
    ("llama-2-70b", {"zero": 3, "gpus": 8}),  # ZeRO-3's gathered layers and persistent parameters
    ("llama-2-7b", {"lora": 16, "quant": "4bit"}),  # the dequantized weight, the LoRA adapters
    ("starcoder", {"lora": 8, "adapter": 64}),  # the causal-mask buffer, bottleneck adapters
])
def test_what_lives_the_whole_step_is_in_every_moment(model: str, options: dict):
    """Each term says whether it lives through the whole training step (Term.whole_step: weights, and the
    buffers and gathered layers of DDP, DeepSpeed, ZeRO-3 and a quantized base): the optimizer step is exactly
    those, the gradients, the optimizer states and the step's temporaries, and no moment holds less than them."""
    e = estimate(model, seq=512, **options)
    terms = _terms(e)
    whole = sum(t.bytes for t in e.terms if t.whole_step)
    step = whole + terms["gradients"] + terms[f"optimizer states ({e.setup.optimizer})"] + \
        terms["optimizer-step temporaries"] + terms["cuBLAS workspaces"]
    assert e.moments["optimizer step"] == step
    assert all(total >= whole for total in e.moments.values())
    assert {t.name for t in e.terms if t.whole_step} >= {"weights"}
