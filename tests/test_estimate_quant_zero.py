"""Quantized bases (bitsandbytes 4/8-bit), DeepSpeed ZeRO's buffers and offload, bare counts, and the
setups the estimator refuses (issue 16 items 1-4 and 9)."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error, run_vram

from vramkit.estimator.analytic import estimate
from vramkit.estimator.formulas import DOUBLE_QUANT_4BIT, params_of
from vramkit.estimator.specs import EstimateError, parse_param_count, resolve, typical_hidden

GIB = 1024**3


def test_a_bare_count_with_quant_has_no_whole_model_dequantized():
    """15.5b in 8-bit for inference was estimated at 46 GB (a 16-bit copy of all 15.5 B parameters
    as 'the largest matrix'); about 16 GB was measured."""
    e = estimate("15.5b", mode="infer", quant="8bit")
    assert e.breakdown.get("dequantized weight", 0) == 0  # a bare count has no batch shape for int8 buffers
    assert e.total_bytes < 17.5 * GIB
    four = estimate("15.5b", mode="infer", quant="4bit", quant_compute_dtype="bf16")
    h = typical_hidden(15_500_000_000)
    assert four.breakdown["dequantized weight"] == 4 * h * h * 2  # one typical feed-forward matrix
    fp32 = estimate("15.5b", mode="infer", quant="4bit")  # HF's default compute dtype: dequantized to fp32
    assert fp32.breakdown["dequantized weight"] == 4 * h * h * 4
    assert four.breakdown["dequantized weight"] < GIB // 2
    assert "typical shape" in next(t.formula for t in four.terms if t.name == "dequantized weight")


def test_whole_numbers_are_counts_and_malformed_counts_are_refused():
    assert parse_param_count("15517456384") == 15_517_456_384
    assert estimate("15517456384").params == 15_517_456_384
    for bad in ("7x", "1.5", "7,000b"):
        with pytest.raises(EstimateError, match="not a parameter count"):
            resolve(bad)
    r = run_vram("estimate", "7x")
    assert_one_line_error(r, 2, "not a parameter count")


def test_quantization_leaves_embeddings_norms_and_lm_head_16bit():
    spec = resolve("llama-2-7b")
    p = params_of(spec)
    assert p.quantized == 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    assert p.largest_quantized == (11008, 4096)
    e8 = estimate(spec, mode="infer", quant="8bit", seq=512)
    assert e8.breakdown["weights"] == p.quantized + (p.total - p.quantized) * 2
    # a ViT's classifier is its output module, the patch embedding a convolution: neither quantized
    vit = params_of(resolve("vit-base"))
    assert vit.quantized == 12 * (4 * 768 * 768 + 2 * 768 * 3072)


def test_double_quant_shrinks_the_block_constants():
    single = estimate("llama-2-7b", lora=16, quant="4bit", seq=512)
    double = estimate("llama-2-7b", lora=16, quant="4bit", double_quant=True, seq=512)
    p = params_of(resolve("llama-2-7b"))
    assert single.breakdown["weights"] - double.breakdown["weights"] == pytest.approx(
        p.quantized * (0.5 + 4 / 64 - DOUBLE_QUANT_4BIT), abs=2)
    with pytest.raises(EstimateError, match="4-bit option") as info:
        estimate("llama-2-7b", mode="infer", quant="8bit", double_quant=True)
    assert info.value.param == "double_quant"


def test_qlora_keeps_the_inputs_bitsandbytes_saves():
    """MatMul4Bit keeps its input (ctx.tensors = (A, B)) when A needs a gradient, which it does
    under LoRA: the layers save what full training saves; plain 16-bit LoRA saves less."""
    kw = {"lora": 16, "seq": 1024, "batch": 2}
    qlora = estimate("llama-2-7b", quant="4bit", **kw)
    lora = estimate("llama-2-7b", **kw)
    full = estimate("llama-2-7b", seq=1024, batch=2)
    def acts(e):
        return next(t.bytes for t in e.terms if t.name == "activations")

    assert acts(qlora) > acts(lora)
    # all that full training saves, but the 16-bit lm_head's input and the frozen RMSNorms' normalised
    # outputs (65 norms, fp32 under autocast): their weights are frozen
    tokens = 2 * 1024
    assert acts(full) - acts(qlora) == tokens * 4096 * 2 + (2 * 32 + 1) * tokens * 4096 * 4
    assert any("MatMul4Bit" in n for n in qlora.notes)


def test_zero_reduce_buffers_are_the_bucket_size_whatever_the_model():
    """DeepSpeed's stage 1-2 backward allocates reduce_bucket_size elements (two with overlap_comm)
    even for a model smaller than that: most of a small ZeRO-2 model's miss (issue 16 item 4)."""
    small = estimate("distilbert-base-uncased", zero=2, gpus=4, batch=12, seq=512, precision="fp16")
    assert small.breakdown["DeepSpeed communication buckets"] == 500_000_000 * 2 > small.trainable * 2
    overlap = estimate("distilbert-base-uncased", zero=2, gpus=4, batch=12, seq=512, precision="fp16",
                       zero_overlap_comm=True, zero_reduce_bucket=200_000_000)
    assert overlap.breakdown["DeepSpeed communication buckets"] == 2 * 200_000_000 * 2
    gather = estimate("7b", zero=2, gpus=8, zero_allgather_bucket=10)  # chunks only: no buffer
    assert gather.breakdown["DeepSpeed communication buckets"] == estimate("7b", zero=2, gpus=8).breakdown[
        "DeepSpeed communication buckets"]
    assert estimate("7b", zero=3, gpus=8).breakdown["DeepSpeed communication buckets"] == 500_000_000 * 2


def test_zero3_gathers_by_prefetch_bucket_and_keeps_small_parameters():
    e = estimate("llama-2-7b", zero=3, gpus=8, seq=512)
    p = params_of(resolve("llama-2-7b"))
    assert e.breakdown["ZeRO-3 gathered layers"] == (p.largest_layer + 50_000_000) * 2
    norms = (2 * 32 + 1) * 4096  # RMSNorm weights: under the persistence threshold
    assert e.breakdown["ZeRO-3 persistent parameters"] == norms * 2 - norms * 2 // 8
    capped = estimate("llama-2-7b", zero=3, gpus=8, seq=512, zero_max_live=10_000_000)
    assert capped.breakdown["ZeRO-3 gathered layers"] == 10_000_000 * 2


def test_parameter_offload_and_zero3_on_one_gpu():
    with pytest.raises(EstimateError, match="shards nothing") as info:
        estimate("llama-2-7b", zero=3, gpus=1)
    assert info.value.param == "zero"
    infinity = estimate("llama-2-7b", zero=3, gpus=1, offload=True, offload_params=True, seq=512)
    assert infinity.breakdown.get("weights", 0) == 0 and "ZeRO-3 gathered layers" in infinity.breakdown
    with pytest.raises(EstimateError, match="stage 3"):
        estimate("llama-2-7b", zero=2, gpus=2, offload_params=True)


@pytest.mark.parametrize("argv, flag, words", [
    (("llama-2-7b", "--quant", "4bit"), "--quant", "LoRA"),
    (("llama-2-7b", "--zero", "3"), "--zero", "shards nothing"),
    (("llama-2-7b", "--zero", "2", "--gpus", "2", "--offload", "params"), "--offload", "stage 3"),
    (("llama-2-7b", "--zero", "2", "--gpus", "2", "--offload", "disk"), "--offload", "optimizer"),
    (("llama-2-7b", "--zero", "2", "--gpus", "2", "--zero-reduce-bucket", "lots"), "--zero-reduce-bucket", "lots"),
    (("llama-2-7b", "--infer", "--quant", "8bit", "--double-quant"), "--double-quant", "4-bit"),
])
def test_contradictions_are_one_line_errors(argv, flag, words):
    assert_one_line_error(run_vram("estimate", *argv), 2, flag, words)


def test_cli_options_reach_the_setup():
    data = run_vram("estimate", "llama-2-7b", "--gpus", "2", "--zero", "3", "--offload", "optimizer,params",
                    "--zero-prefetch-bucket", "1e7", "--zero-overlap-comm", "--json").json()
    assert data["setup"]["zero_overlap_comm"]
    assert data["setup"]["offload"] and data["setup"]["offload_params"]
    assert data["setup"]["zero_prefetch_bucket"] == 10_000_000
    qlora = run_vram("estimate", "llama-2-7b", "--lora", "8", "--quant", "4bit", "--double-quant", "--json").json()
    assert qlora["setup"]["double_quant"]


def test_torch_semantics_are_an_option_and_said():
    new = run_vram("estimate", "bert-base-uncased", "--batch", "8", "--json").json()
    old = run_vram("estimate", "bert-base-uncased", "--batch", "8", "--torch", "1.13", "--json").json()
    assert new["setup"]["zero_grad_to_none"] and not old["setup"]["zero_grad_to_none"]
    # before 2.0 zero_grad() keeps the gradients, and cuBLAS's workspaces are its own, outside the allocator's peak
    assert old["setup"]["cublas_own_workspace"] and not new["setup"]["cublas_own_workspace"]
    assert old["peak_bytes"] - new["peak_bytes"] == (old["breakdown"]["gradients"]
                                                     - new["breakdown"]["cuBLAS workspaces"])
    assert any("PyTorch 2.0 or later" in n for n in new["notes"])
    assert any("before 2.0" in n for n in old["notes"])
    assert_one_line_error(run_vram("estimate", "gpt2", "--torch", "new"), 2, "--torch", "PyTorch version")


def test_estimate_and_plan_print_a_few_readable_lines():
    from vramkit.estimator.planner import plan

    e = estimate("llama-2-7b", lora=16, quant="4bit", double_quant=True, seq=1024)
    text = str(e)
    assert text.splitlines()[0] == "llama-2-7b: 6,738,415,616 parameters (llama), ESTIMATE"
    assert "LoRA r=16, 4bit double-quant" in text and "nvidia-smi would show" in text
    assert len(text.splitlines()) == 4 and "Term(" not in text
    p = plan("bert-large-uncased", "rtx-4090", batch=32, seq=512, precision="fp32")
    lines = str(p).splitlines()
    assert lines[0].startswith("bert-large-uncased on rtx-4090 (24.0GiB): does not fit")
    assert lines[2] == f"  largest batch that fits: {p.max_batch}"
    assert lines[3].startswith("  cheapest change that fits: ") and "Change(" not in str(p)


def test_4bit_compute_dtype_fp32_is_hf_s_default():
    """BitsAndBytesConfig's bnb_4bit_compute_dtype defaults to float32: the weight is dequantized to
    fp32, and each Linear4bit casts its input to fp32, the copy MatMul4Bit keeps for backward."""
    spec = resolve("llama-2-7b")
    out_f, in_f = params_of(spec).largest_quantized
    tokens = 1 * 80
    hf = estimate(spec, mode="infer", quant="4bit", seq=80)
    lit = estimate(spec, mode="infer", quant="4bit", seq=80, quant_compute_dtype="bf16")
    assert lit.breakdown["dequantized weight"] == out_f * in_f * 2
    assert hf.breakdown["dequantized weight"] == out_f * in_f * 4 + tokens * (in_f + out_f) * 4
    assert "fp32 compute" in hf.setup.describe(80) and "bf16 compute" in lit.setup.describe(80)

    def acts(e):
        return next(t.bytes for t in e.terms if t.name == "activations")

    kw = {"lora": 8, "quant": "4bit", "seq": 512, "batch": 2, "precision": "bf16-pure", "adapter_dtype": "16bit"}
    h, i, T = spec.hidden, spec.intermediate, 2 * 512
    fp32 = acts(estimate(spec, **kw))
    bf16 = acts(estimate(spec, quant_compute_dtype="bf16", **kw))
    # per layer: seven fp32 copies (q, k, v, gate, up from h wide; o; down) for four shared bf16 inputs
    assert fp32 - bf16 == spec.layers * T * ((5 * h + spec.inner + i) * 4 - (2 * h + spec.inner + i) * 2)
    assert_one_line_error(run_vram("estimate", "gpt2", "--infer", "--quant", "4bit", "--quant-compute-dtype",
                                   "int8"), 2, "--quant-compute-dtype")


def test_litgpt_qlora_options_quantized_head_paged_adamw_fused_qkv():
    """LitGPT's QLoRA: Lightning's BitsandbytesPrecision quantizes lm_head too, bnb's PagedAdamW keeps its
    states in unified memory, and LitGPT's attention is one q/k/v linear (one LoRA dropout)."""
    spec = resolve("llama-2-7b")
    head = spec.vocab * spec.hidden
    kw = {"lora": 32, "quant": "4bit", "seq": 512, "batch": 2, "precision": "bf16-pure", "adapter_dtype": "16bit",
          "quant_compute_dtype": "bf16"}
    hf, lit = estimate(spec, **kw), estimate(spec, quant_head=True, **kw)
    assert params_of(spec, quant_head=True).quantized - params_of(spec).quantized == head
    assert hf.breakdown["weights"] - lit.breakdown["weights"] == int(head * (2 - 0.5625))
    assert lit.breakdown["dequantized weight"] == head * 2  # now the largest quantized matrix
    hf_acts, lit_acts = (next(t.bytes for t in e.terms if t.name == "activations") for e in (hf, lit))
    assert lit_acts - hf_acts == 2 * 512 * spec.hidden * 2  # the 4-bit head keeps its input
    assert "head quantized too" in lit.setup.describe(512)
    paged = estimate(spec, quant_head=True, optimizer="paged-adamw", **kw)
    assert paged.breakdown.get("optimizer states (paged-adamw)", 0) == 0
    assert lit.peak_bytes - paged.peak_bytes >= 2 * 2 * paged.trainable  # AdamW's bf16 states leave the allocator
    assert "unified memory" in next(t.formula for t in paged.terms if t.name.startswith("optimizer states"))

    def dropout_extra(**more):
        base = {"lora": 8, "seq": 512, "batch": 2, "precision": "bf16-pure", "adapter_dtype": "16bit", **more}
        with_drop = estimate(spec, lora_dropout=0.05, **base)
        return next(t.bytes for t in with_drop.terms if t.name == "activations") - \
            next(t.bytes for t in estimate(spec, **base).terms if t.name == "activations")

    T, h = 2 * 512, spec.hidden
    # q and v apart: two masks and two dropped copies for their shared input; fused: one mask, one copy
    assert dropout_extra() == spec.layers * (2 * T * h + 2 * T * h * 2 - T * h * 2)
    assert dropout_extra(fused_qkv=True) == spec.layers * (T * h + T * h * 2 - T * h * 2)
    # under a 4-bit base the dropped copies come on top of the input bitsandbytes keeps (one mask, one copy)
    assert dropout_extra(fused_qkv=True, quant="4bit", quant_compute_dtype="bf16") == \
        spec.layers * (T * h + T * h * 2)
    with pytest.raises(EstimateError) as err:
        estimate(spec, quant_head=True, lora=8)
    assert err.value.param == "quant_head"
    r = run_vram("estimate", "llama-2-7b", "--lora", "32", "--quant", "4bit", "--quant-head", "--optimizer",
                 "paged-adamw", "--fused-qkv", "--json")
    setup = r.json()["setup"]
    assert setup["quant_head"] and setup["fused_qkv"] and setup["optimizer"] == "paged-adamw"


def test_a_loop_that_keeps_the_last_graph_keeps_what_bitsandbytes_holds_as_ctx_attributes():
    """MatMul4Bit keeps its input as ctx.tensors, freed with the graph's nodes, not by backward;
    LitGPT's fit() holds `logits` and `loss` until the next forward has run."""
    spec = resolve("llama-2-7b")
    kw = {"lora": 32, "quant": "4bit", "seq": 512, "batch": 2, "precision": "bf16-pure", "adapter_dtype": "16bit",
          "quant_compute_dtype": "bf16", "quant_head": True, "fused_qkv": True, "grad_accum": 4}
    freed, held = estimate(spec, **kw), estimate(spec, keeps_last_graph=True, **kw)
    T, h, i = 2 * 512, spec.hidden, spec.intermediate
    bnb = spec.layers * T * (h + spec.inner + h + i) * 2 + T * h * 2  # q/k/v, o, gate/up, down; the 4-bit head
    term = next(t.bytes for t in held.terms if t.name.startswith("last micro-step's graph"))
    assert term == bnb + T * spec.vocab * 2  # and its bf16 logits
    assert held.moments["forward end"] - freed.moments["forward end"] == term
    plain = estimate(spec, keeps_last_graph=True, **{**kw, "quant": None, "quant_head": False})
    assert next(t.bytes for t in plain.terms if t.name.startswith("last micro-step")) == T * spec.vocab * 2


def test_torchao_nf4_keeps_no_inputs_and_nothing_as_ctx_attributes():
    """torchtune's QLoRA quantizes with torchao, whose linear_nf4 keeps only the weight (ctx.nf4_weight):
    its frozen layers save what 16-bit LoRA's save, not what bitsandbytes' MatMul4Bit keeps."""
    kw = {"lora": 8, "quant": "4bit", "double_quant": True, "seq": 512, "batch": 2, "precision": "bf16-pure",
          "adapter_dtype": "16bit", "keeps_last_graph": True}
    bnb = estimate("llama-2-7b", quant_compute_dtype="bf16", **kw)
    torchao = estimate("llama-2-7b", quant_backend="torchao", **kw)
    lora = estimate("llama-2-7b", **{**kw, "quant": None, "double_quant": False})

    def term(e, name):
        return next(t.bytes for t in e.terms if t.name.startswith(name))

    assert term(torchao, "activations") == term(lora, "activations") < term(bnb, "activations")
    assert term(torchao, "last micro-step") == term(lora, "last micro-step") < term(bnb, "last micro-step")
    assert torchao.breakdown.get("dequantized weight", 0) in (0, term(bnb, "dequantized weight"))
    assert any("torchao" in n for n in torchao.notes)
    with pytest.raises(EstimateError) as err:
        estimate("llama-2-7b", lora=8, quant="8bit", quant_backend="torchao")
    assert err.value.param == "quant_backend"
