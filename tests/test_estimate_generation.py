"""Generation (`--new-tokens`, Setup.new_tokens) and transformers' generate() by version (`--transformers`):
the last decode step beside the prefill; before 4.42 the previous step's cache held beside the next and
the prefill's outputs through the first decode step; before 4.45 every prompt position's logits."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error, run_vram

from vramkit.estimator.analytic import CUBLAS_WORKSPACES, estimate
from vramkit.estimator.specs import EstimateError, resolve

LLAMA_13B = {"mode": "infer", "precision": "fp16", "attention": "eager", "seq": 512}


def cache_bytes(model: str, batch: int, positions: int) -> int:
    """The KV cache of `positions` tokens, written out from the config (2 B a value)."""
    spec = resolve(model)
    return 2 * spec.layers * batch * positions * spec.kv_heads * spec.head_dim * 2


def test_the_prefill_alone_is_the_default_and_one_new_token_is_the_prefill():
    prefill = estimate("llama-2-13b", **LLAMA_13B, batch=4)
    assert prefill.setup.new_tokens == 0 and "last decode step" not in prefill.moments
    one = estimate("llama-2-13b", **LLAMA_13B, batch=4, new_tokens=1)
    assert one.peak_bytes == prefill.peak_bytes and one.moments == prefill.moments


def test_the_last_decode_step_holds_the_cache_of_prompt_plus_new_tokens_minus_one():
    b, n = 16, 512
    gen = estimate("llama-2-13b", **LLAMA_13B, batch=b, new_tokens=n)
    assert gen.peak_moment == "last decode step"
    at_peak = gen.breakdown
    # the N-th token is sampled from the last step's logits: that step's cache has 512 + 511 positions
    assert at_peak["KV cache"] + at_peak["KV cache growth (generation)"] == cache_bytes("llama-2-13b", b, 512 + n - 1)
    # one token's temporaries are small next to the cache
    assert at_peak["decode-step temporaries"] < cache_bytes("llama-2-13b", b, 512 + n - 1) / 10
    assert "forward temporaries" not in at_peak


def test_before_transformers_4_42_the_last_step_holds_two_caches():
    b, n = 8, 512
    new = estimate("llama-2-13b", **LLAMA_13B, batch=b, new_tokens=n)
    old = estimate("llama-2-13b", **LLAMA_13B, batch=b, new_tokens=n, legacy_cache=True)
    # the previous step's cache (512 + 510 positions) beside the one the step concatenates into
    previous = cache_bytes("llama-2-13b", b, 512 + n - 2)
    assert old.moments["last decode step"] - new.moments["last decode step"] == previous
    assert old.peak_bytes - new.peak_bytes == previous
    # and the first decode step: the prefill's cache beside the new one, with the prefill's logits still held
    first = old.moments["first decode step"]
    assert first > new.moments["forward"] - new.breakdown.get("forward temporaries", 0)


def test_before_transformers_4_45_the_prefill_computes_every_positions_logits():
    b, s = 2, 512
    last = estimate("llama-2-13b", **LLAMA_13B, batch=b)
    every = estimate("llama-2-13b", **LLAMA_13B, batch=b, all_logits=True)
    vocab = resolve("llama-2-13b").vocab
    # LlamaForCausalLM's fp16 logits and their .float() copy, for all 512 positions, against the last token's fp32
    assert every.moments["logits"] - last.moments["logits"] == b * s * vocab * (2 + 4) - b * vocab * 4
    # GPT-2's head does not upcast: its logits stay in the model's dtype
    g_last = estimate("gpt2", mode="infer", precision="fp16", batch=b, seq=s)
    g_every = estimate("gpt2", mode="infer", precision="fp16", batch=b, seq=s, all_logits=True)
    assert g_every.moments["logits"] - g_last.moments["logits"] == b * s * 50257 * 2 - b * 50257 * 4


def test_the_transformers_flag_selects_the_generate_semantics_by_version():
    args = ("estimate", "llama-2-13b", "--infer", "--precision", "fp16", "--seq", "512", "--new-tokens", "512",
            "--batch", "8", "--attention", "eager", "--json")
    by_version = {v: run_vram(*args, "--transformers", v).json() for v in ("4.32", "4.41", "4.42", "4.44", "4.45")}
    semantics = {v: (r["setup"]["legacy_cache"], r["setup"]["all_logits"], r["setup"]["new_tokens"])
                 for v, r in by_version.items()}
    assert semantics == {"4.32": (True, True, 512), "4.41": (True, True, 512), "4.42": (False, True, 512),
                         "4.44": (False, True, 512), "4.45": (False, False, 512)}
    assert by_version["4.32"]["peak_bytes"] - by_version["4.45"]["peak_bytes"] == cache_bytes("llama-2-13b", 8, 1022)
    default = run_vram(*args).json()
    assert default["peak_bytes"] == by_version["4.45"]["peak_bytes"]
    assert not default["setup"]["legacy_cache"] and not default["setup"]["all_logits"]
    text = run_vram(*args[:-1], "--transformers", "4.32").out
    assert "512 new tokens" in text and "two caches" in text and "last decode step" in text


@pytest.mark.parametrize(("extra", "words"), [
    (("--new-tokens", "x", "--infer"), "whole number"),
    (("--new-tokens", "-1", "--infer"), "at least 1"),
    (("--new-tokens", "8"), "decoder-only"),  # training
    (("--new-tokens", "999999999999", "--infer"), "at most"),
])
def test_bad_new_tokens_are_one_line_errors(extra, words):
    assert_one_line_error(run_vram("estimate", "llama-2-7b", *extra), 2, "--new-tokens", words)


def test_generation_is_refused_where_it_is_not_modelled():
    for model in ("bert-base-uncased", "t5-small"):
        with pytest.raises(EstimateError, match="decoder-only") as e:
            estimate(model, mode="infer", new_tokens=8)
        assert e.value.param == "new_tokens"
    # GPT-2's learned positions end at 1,024: a 1,000-token prompt cannot go on for 100 more
    with pytest.raises(EstimateError, match="past gpt2's 1024 positions") as e:
        estimate("gpt2", mode="infer", seq=1000, new_tokens=100)
    assert e.value.param == "new_tokens"
    assert estimate("gpt2", mode="infer", seq=1000, new_tokens=25).peak_bytes > 0


def test_a_sliding_window_cache_stops_growing_at_the_window():
    # transformers 5 keeps a sliding-window layer's last `window` positions once decoding goes on
    opts = {"mode": "infer", "batch": 8, "attention": "flash"}
    window = resolve("mistral-7b").sliding_window
    assert window == 4096
    short = estimate("mistral-7b", seq=2048, new_tokens=window - 2048 + 1, **opts)  # ends at the window
    long = estimate("mistral-7b", seq=2048, new_tokens=16 * window, **opts)
    assert long.moments["last decode step"] == short.moments["last decode step"]
    # a prompt past the window: decoding holds less than the prefill did, which stays the peak
    past = estimate("mistral-7b", seq=8192, new_tokens=32768, **opts)
    assert past.peak_bytes == estimate("mistral-7b", seq=8192, **opts).peak_bytes


def test_a_decode_steps_quantized_matmul_is_one_token_a_sequence():
    opts = {"mode": "infer", "seq": 4096, "batch": 8, "quant": "4bit", "attention": "flash"}
    gen = estimate("llama-2-7b", new_tokens=4096, **opts)
    size = {t.name: t.bytes for t in gen.terms}
    assert size["dequantized weight (decode step)"] < size["dequantized weight"] / 8  # fp32 buffers of 8 tokens
    weights = sum(t.bytes for t in gen.terms if t.kind == "weights")
    step = ("KV cache", "KV cache growth (generation)", "decode-step temporaries",
            "decode-step logits (last token, fp32)", "dequantized weight (decode step)")
    # (every moment also holds the cuBLAS workspaces)
    assert gen.moments["last decode step"] == weights + sum(size[n] for n in step) + CUBLAS_WORKSPACES


def test_what_generation_cannot_be_combined_with():
    with pytest.raises(EstimateError, match="ZeRO shards what training keeps") as e:
        estimate("llama-2-7b", mode="infer", zero=3, gpus=2)
    assert e.value.param == "zero"
    with pytest.raises(EstimateError, match="whole number") as e:
        estimate("gpt2", mode="infer", new_tokens=None)
    assert e.value.param == "new_tokens"
    assert_one_line_error(run_vram("estimate", "gpt2", "--infer", "--seq", "100", "--new-tokens", "10", "--trace"),
                          2, "--trace", "new_tokens (generation)")
    assert_one_line_error(run_vram("estimate", "gpt2", "--infer", "--new-tokens", "10"), 2, "--new-tokens",
                          "default prompt (1024, give --seq")
    assert_one_line_error(run_vram("estimate", "gpt2", "--infer", "--fsdp", "--gpus", "2"), 2, "--fsdp")
