"""What loading leaves reserved: the caching-allocator model (estimator/allocator.py) and torchtune's
QLoRA build and checkpoint load with torchao's to_nf4 (estimator/loading.py, `--loading torchtune`)."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error, run_vram

from vramkit.estimator.allocator import CachingAllocator, replay, round_request, segment_size
from vramkit.estimator.analytic import estimate
from vramkit.estimator.loading import TORCHAO_CHUNK, torchtune_qlora_events, torchtune_qlora_reserved
from vramkit.estimator.specs import EstimateError, resolve

MiB = 2**20
ALL_LINEAR = ("q", "k", "v", "o", "gate", "down", "up")
# torchtune's QLoRA tutorial (docs/source/tutorials/qlora_finetune.rst at 0914d5cf, torchao 0.1):
# "Peak memory reserved, model init" for llama2 7B, LoRA r 8 on q, k, v, o and the MLP
TUTORIAL_INIT_RESERVED = 9.13e9
QLORA = {"precision": "bf16-pure", "seq": 512, "batch": 2, "attention": "flash", "checkpointing": True,
         "lora": 8, "adapter_dtype": "16bit", "quant": "4bit", "quant_backend": "torchao",
         "quant_compute_dtype": "bf16", "lora_targets": ALL_LINEAR}


def test_requests_are_rounded_and_take_segments_of_their_pool():
    assert round_request(1) == 512 and round_request(513) == 1024
    assert segment_size(1 * MiB) == 2 * MiB  # small pool
    assert segment_size(5 * MiB) == 20 * MiB  # large requests under 10 MiB share 20 MiB segments
    assert segment_size(11 * MiB + 1) == 12 * MiB  # the rest get their own, rounded up to 2 MiB
    a = CachingAllocator()
    a.malloc(1, 100)
    a.malloc(2, 300_000)
    assert a.reserved == 2 * MiB and a.allocated == 512 + round_request(300_000)  # one small segment holds both
    a.malloc(3, 5 * MiB)
    a.malloc(4, 5 * MiB)
    assert a.reserved == 22 * MiB  # the second 5 MiB is cut from the same 20 MiB segment


def test_a_block_carved_from_a_cached_segment_forces_a_new_segment_until_it_is_freed():
    a = CachingAllocator()
    a.malloc(1, 100 * MiB)
    a.free(1)
    a.malloc(2, 10 * MiB)  # best fit: cut from the cached 100 MiB segment
    assert a.reserved == 100 * MiB
    a.malloc(3, 95 * MiB)  # the 90 MiB left do not hold it: a new segment, 96 MiB, not split for 1 MiB
    assert a.reserved == 196 * MiB and a.allocated == 106 * MiB
    a.free(2)  # merges back into a free 100 MiB block
    a.free(3)
    a.malloc(4, 100 * MiB)
    a.malloc(5, 96 * MiB)
    assert a.reserved == 196 * MiB and a.peak_allocated == 196 * MiB  # nothing new, nothing ever released


def test_a_large_block_is_not_split_for_a_remainder_of_1_mib_or_less():
    a = CachingAllocator()
    a.malloc(1, 12 * MiB)
    a.free(1)
    a.malloc(2, 11 * MiB + 512 * 1024)  # 0.5 MiB would be left: the whole block is handed out
    assert a.allocated == 12 * MiB
    a.malloc(3, 512 * 1024)  # a small request never comes from the large pool
    assert a.reserved == 14 * MiB


def _kept_after_loading(spec, rank: int) -> int:
    """What the built and loaded model holds: per NF4 linear the fields of a fresh to_nf4 (codes, int8
    scales, the full factor storage it keeps a view of, the mean, the level table), its LoRA pair,
    the 16-bit embeddings, output, norms and the RoPE buffers; each rounded to the allocator's 512 B."""
    r = round_request
    kv = spec.kv_heads * spec.head_dim
    shapes = [(spec.inner, spec.hidden), (kv, spec.hidden), (kv, spec.hidden), (spec.hidden, spec.inner),
              (spec.intermediate, spec.hidden), (spec.hidden, spec.intermediate), (spec.intermediate, spec.hidden)]
    per_layer = 0
    for out, inp in shapes:
        n = out * inp
        per_layer += r(n // 2) + r(n // 64) + r(n // 32) + r(2) + r(32) + r(2 * rank * inp) + r(2 * out * rank)
    per_layer += 2 * r(2 * spec.hidden) + r(2 * spec.head_dim) + r(4 * spec.max_positions * spec.head_dim)
    return spec.layers * per_layer + 2 * r(2 * spec.vocab * spec.hidden) + r(2 * spec.hidden)


@pytest.mark.parametrize("chunk", [0, TORCHAO_CHUNK])
def test_the_load_sequence_frees_all_but_the_model(chunk: int):
    spec = resolve("llama-2-7b")
    live: dict[int, int] = {}
    for key, nbytes in torchtune_qlora_events(spec, 8, ALL_LINEAR, chunk=chunk):
        if nbytes is None:
            del live[key]  # a free of what is not allocated fails here
        else:
            assert key not in live
            live[key] = round_request(nbytes)
    assert sum(live.values()) == _kept_after_loading(spec, 8)


def test_torchao_0_1_quantizes_whole_tensors_and_leaves_what_torchtune_measured():
    spec = resolve("llama-2-7b")
    mlp = spec.intermediate * spec.hidden
    whole = replay(torchtune_qlora_events(spec, 8, ALL_LINEAR, chunk=0))
    chunked = replay(torchtune_qlora_events(spec, 8, ALL_LINEAR))
    # (value - nf4) and its abs(): 16 bf16 differences per element, both alive at once
    assert whole.peak_allocated - whole.allocated >= 2 * 32 * mlp
    assert chunked.peak_allocated - chunked.allocated < 2 * 32 * mlp // 4
    assert whole.reserved == pytest.approx(TUTORIAL_INIT_RESERVED, rel=0.02)
    assert whole.reserved > whole.peak_allocated + 10**9  # fragmentation, not just the transient peak
    assert torchtune_qlora_reserved(spec, 8, ALL_LINEAR, chunk=0) == (whole.reserved, whole.peak_allocated)


def test_the_estimate_reserves_the_larger_of_loading_and_the_step():
    plain = estimate("llama-2-7b", **QLORA)
    old = estimate("llama-2-7b", **QLORA, loading="torchtune", torchao_chunk=0)
    new = estimate("llama-2-7b", **QLORA, loading="torchtune")
    loaded = torchtune_qlora_reserved(resolve("llama-2-7b"), 8, ALL_LINEAR, chunk=0)[0]
    assert old.peak_bytes == plain.peak_bytes  # what the step allocates does not change
    assert old.reserved_bytes == loaded > plain.reserved_bytes
    assert old.breakdown["cached since loading"] == loaded - plain.reserved_bytes
    assert old.total_bytes == loaded + old.context_bytes
    assert new.reserved_bytes == plain.reserved_bytes and "cached since loading" not in new.breakdown
    assert any("torchtune loading leaves" in note for note in old.notes)
    assert "torchtune loading, torchao 0.1" in old.setup.describe(512)


def test_loading_needs_what_it_models():
    with pytest.raises(EstimateError, match="quant 4bit, quant backend torchao") as e:
        estimate("llama-2-7b", lora=8, quant="4bit", loading="torchtune")  # bitsandbytes
    assert e.value.param == "loading"
    with pytest.raises(EstimateError, match="llama-family"):
        estimate("bert-base-uncased", lora=8, quant="4bit", quant_backend="torchao", loading="torchtune")
    with pytest.raises(EstimateError, match="torchtune"):
        estimate("llama-2-7b", **QLORA, loading="hf")
    with pytest.raises(EstimateError, match="number of elements"):
        estimate("llama-2-7b", **QLORA, loading="torchtune", torchao_chunk=-1)


def test_the_cli_flags_and_their_errors():
    args = ("estimate", "llama-2-7b", "--precision", "bf16-pure", "--seq", "512", "--batch", "2", "--attention",
            "flash", "--checkpointing", "--lora", "8", "--adapter-dtype", "16bit", "--quant", "4bit",
            "--quant-backend", "torchao", "--quant-compute-dtype", "bf16", "--lora-targets", "q,k,v,o,gate,up,down")
    old = run_vram(*args, "--loading", "torchtune", "--torchao", "0.1", "--json").json()
    assert old["setup"]["loading"] == "torchtune" and old["setup"]["torchao_chunk"] == 0
    assert old["reserved_bytes"] == estimate("llama-2-7b", **QLORA, loading="torchtune", torchao_chunk=0).reserved_bytes
    new = run_vram(*args, "--loading", "torchtune", "--json").json()
    assert new["setup"]["torchao_chunk"] == TORCHAO_CHUNK and new["reserved_bytes"] < old["reserved_bytes"]
    text = run_vram(*args, "--loading", "torchtune", "--torchao", "0.1").out
    assert "cached since loading" in text and "torchtune loading" in text
    assert_one_line_error(run_vram(*args, "--loading", "torchtune", "--torchao", "x.y"), 2, "--torchao",
                          "torchao version")
    assert_one_line_error(run_vram("estimate", "llama-2-7b", "--loading", "torchtune"), 2, "--loading",
                          "quant backend torchao")


def test_the_transformers_flag_selects_the_kv_cache_semantics():
    # transformers < 4.54 kept k and v as computed: GPT-2's are views of the fused qkv output, whose
    # q third stays allocated beside the cache; 4.54 on copy them into the cache (the default)
    args = ("estimate", "gpt2-medium", "--infer", "--batch", "16", "--seq", "1024", "--precision", "bf16", "--json")
    new = run_vram(*args).json()
    old = run_vram(*args, "--transformers", "4.53.3").json()
    assert not new["setup"]["cache_views"] and old["setup"]["cache_views"]
    kv = estimate("gpt2-medium", mode="infer", batch=16, seq=1024).breakdown["KV cache"]
    assert old["peak_bytes"] - new["peak_bytes"] == kv // 2
    assert run_vram(*args, "--transformers", "5.0").json()["peak_bytes"] == new["peak_bytes"]
    # a family whose cache holds no fused projection is the same either way
    llama = ("estimate", "llama-2-7b", "--infer", "--precision", "fp16", "--json")
    assert run_vram(*llama, "--transformers", "4.50").json()["peak_bytes"] == run_vram(*llama).json()["peak_bytes"]
    assert_one_line_error(run_vram(*args, "--transformers", "four"), 2, "--transformers", "transformers version")
