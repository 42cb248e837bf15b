"""Each formula pinned on small hand-computed cases, and parameter counts on published ones."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vramkit.estimator.analytic import Setup, default_context, estimate
from vramkit.estimator.formulas import Dtypes, Shape, activations, kv_cache, params_of
from vramkit.estimator.specs import EstimateError, ModelSpec, param_count, parse_param_count, resolve

GIB = 1024**3


@pytest.mark.parametrize("name, count", [
    ("bert-base-uncased", 109_482_240 + 768 * 2 + 2),  # BertModel (published) + a 2-label classifier
    ("distilbert-base-uncased", 66_362_880 + 768 * 768 + 768 + 768 * 2 + 2),
    ("gpt2", 124_439_808),
    ("llama-2-7b", 6_738_415_616),
    ("llama-3-8b", 8_030_261_248),
    ("mistral-7b", 7_241_732_096),
    ("t5-base", 222_903_552),
    ("vit-base", 86_567_656),
])
def test_parameter_counts_match_published(name, count):
    assert param_count(resolve(name)) == count


def test_bare_counts():
    assert parse_param_count("7b") == 7_000_000_000
    assert parse_param_count("350M") == 350_000_000
    assert parse_param_count("1.5B") == 1_500_000_000
    assert parse_param_count("bert") is None
    spec = resolve("7b")
    assert spec.bare and "weights and model states only" in spec.notes[0]


def test_fp32_adamw_model_states_are_16_bytes_per_param_plus_the_foreach_temporary():
    e = estimate("1b", precision="fp32", context_overhead=0)
    # weights 4 + grads 4 + exp_avg 4 + exp_avg_sq 4 + foreach sqrt temporary 4 = 20 B/param
    assert e.peak_bytes == 20 * 10**9
    assert e.peak_moment == "optimizer step"
    assert estimate("1b", precision="fp32", optimizer="sgd").peak_bytes == 8 * 10**9
    assert estimate("1b", precision="fp32", optimizer="sgd-momentum").peak_bytes == 12 * 10**9
    assert estimate("1b", precision="bf16-pure").peak_bytes == 10 * 10**9  # 2+2+4+2


def test_8bit_adam_states():
    e = estimate("1b", precision="fp32", optimizer="adamw-8bit")
    # a bare count: every tensor 8-bit, an fp32 absmax per 256, and bitsandbytes' two 256-value maps (2 KiB)
    assert e.breakdown["optimizer states (adamw-8bit)"] == int(2 * 10**9 * (1 + 4 / 256)) + 2048


@pytest.mark.parametrize("stage, expected", [(0, 120e9), (1, 31.40625e9), (2, 16.640625e9), (3, 1.875e9)])
def test_zero_model_states_match_the_paper(stage, expected):
    """Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, 64 GPUs, K = 12 (mixed-precision Adam)."""
    e = estimate("7.5b", zero=stage, gpus=64, precision="bf16")
    states = sum(v for k, v in e.breakdown.items() if k in ("weights", "gradients", "optimizer states (adamw)"))
    assert states == pytest.approx(expected, rel=1e-9)


def test_zero_offload_keeps_optimizer_states_off_the_gpu():
    e = estimate("7b", zero=2, gpus=4, offload=True)
    assert e.breakdown.get("optimizer states (adamw)", 0) == 0


def test_bf16_pure_bert_layer_matches_korthikanti():
    """Korthikanti et al. 2022 eq. (1): a transformer layer saves s·b·h·(34 + 5·a·s/h) bytes in
    16-bit with dropout; we add LayerNorm's fp32 mean and rstd (2 × 4 B per token per norm)."""
    spec = ModelSpec(name="tiny", family="bert", hidden=64, layers=1, heads=2, kv_heads=2, head_dim=32,
                     intermediate=256, vocab=100, max_positions=64, type_vocab=2, embedding_size=64,
                     attn_dropout=0.1, hidden_dropout=0.1)
    b, s, h, a = 1, 8, 64, 2
    acts = activations(spec, Shape(b=b, s=s), Dtypes.of("bf16-pure"), flash=False, lora=False)
    assert acts.layer == s * b * h * (34 + 5 * a * s / h) + 2 * 8 * b * s


def test_fp32_bert_layer_hand_computed():
    spec = ModelSpec(name="tiny", family="bert", hidden=64, layers=1, heads=2, kv_heads=2, head_dim=32,
                     intermediate=256, vocab=100, max_positions=64, type_vocab=2, embedding_size=64,
                     attn_dropout=0.1, hidden_dropout=0.1)
    acts = activations(spec, Shape(b=1, s=8), Dtypes.of("fp32"), flash=False, lora=False)
    parts = dict(acts.layer_terms)
    T, h = 8, 64
    assert parts["q/k/v projection input"] == T * h * 4  # one fp32 input shared by q, k and v
    assert parts["q, kᵀ, v copies for the two matmuls"] == 3 * T * h * 4
    assert parts["attention scores: softmax + dropout + probs (9 B/elem)"] == 2 * 8 * 8 * 9
    assert acts.layer == 35_072


def test_mixed_precision_casts_the_linear_inputs_three_times():
    spec = resolve("bert-base-uncased")
    acts = activations(spec, Shape(b=1, s=8), Dtypes.of("bf16"), flash=False, lora=False)
    parts = dict(acts.layer_terms)
    assert parts["q/k/v projection input (16-bit casts)"] == 3 * 8 * 768 * 2
    # softmax in fp32 (4) + dropout mask (1) + 16-bit probabilities (2)
    assert parts["attention scores: softmax + dropout + probs (7 B/elem)"] == 12 * 8 * 8 * 7


def test_flash_attention_drops_the_quadratic_term():
    spec = resolve("gpt2")
    eager = estimate(spec, batch=4, seq=1024)
    flash = estimate(spec, batch=4, seq=1024, attention="flash")
    assert flash.breakdown["activations"] < eager.breakdown["activations"]
    acts = activations(spec, Shape(b=4, s=1024), Dtypes.of("bf16"), flash=True, lora=False)
    assert not any("scores" in name for name, _ in acts.layer_terms)


def test_checkpointing_keeps_one_input_per_layer():
    spec = resolve("bert-large-uncased")
    e = estimate(spec, batch=8, seq=512, precision="fp32", checkpointing=True)
    acts = activations(spec, Shape(b=8, s=512), Dtypes.of("fp32"), flash=False, lora=False)
    outside = sum(v for _, v in acts.outside)
    assert e.terms[[t.name for t in e.terms].index("activations")].bytes == 24 * 8 * 512 * 1024 * 4 + outside


def test_logits_and_loss():
    spec = resolve("gpt2")
    e = estimate(spec, batch=2, seq=1024)
    t = {x.name: x.bytes for x in e.terms}
    assert t["loss-gradient transients (fp32)"] == 8 * 2 * 1024 * 50257
    acts = activations(spec, Shape(b=2, s=1024), Dtypes.of("bf16"), flash=False, lora=False)
    assert dict(acts.outside)["log-softmax output (fp32)"] == 4 * 2 * 1024 * 50257


def test_gradient_accumulation_holds_gradients_during_the_forward():
    one = estimate("bert-base-uncased", batch=8, seq=512, precision="fp32")
    two = estimate("bert-base-uncased", batch=8, seq=512, precision="fp32", grad_accum=2)
    assert two.moments["forward end"] - one.moments["forward end"] == 4 * one.params


def test_autocast_weight_copies():
    e = estimate("gpt2", batch=1, seq=128)
    p = params_of(resolve("gpt2"))
    t = {x.name: x.bytes for x in e.terms}
    assert t["autocast 16-bit weight copies"] == 2 * p.cast
    assert "autocast 16-bit weight copies" not in {x.name for x in estimate("gpt2", precision="fp32").terms}


def test_lora_and_qlora():
    spec = resolve("llama-2-7b")
    p = params_of(spec, lora_rank=16)
    assert p.lora == 32 * 2 * 16 * (4096 + 4096)  # q and v in 32 layers, r·(in + out)
    e = estimate(spec, lora=16, quant="4bit", seq=512)
    # bitsandbytes quantizes the 7 linears of each layer; the embeddings, norms and lm_head stay 16-bit
    linears = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    assert e.breakdown["weights"] == int(linears * (0.5 + 4 / 64) + (spec_params(spec) - linears) * 2)
    assert e.trainable == p.lora
    assert e.breakdown["optimizer states (adamw)"] == 2 * p.lora * 4


def spec_params(spec):
    return param_count(spec)


def test_kv_cache():
    assert kv_cache(resolve("llama-2-7b"), 1, 4096, 2) == 2 * GIB  # 2·32·4096·32·128·2
    assert kv_cache(resolve("llama-3-8b"), 1, 4096, 2) == GIB // 2  # GQA: 8 kv heads
    e = estimate("llama-2-7b", mode="infer", batch=1, seq=4096)
    assert e.breakdown["KV cache"] == 2 * GIB
    assert e.breakdown["weights"] == 2 * 6_738_415_616


def test_ddp_and_dataparallel():
    single = estimate("bert-base-uncased", batch=8, seq=128, precision="fp32")
    ddp = estimate("bert-base-uncased", batch=8, seq=128, precision="fp32", gpus=4)
    assert ddp.peak_bytes - single.peak_bytes == 4 * single.params  # the gradient buckets
    dp = estimate("bert-base-uncased", batch=8, seq=128, precision="fp32", gpus=4, parallel="dp")
    assert dp.breakdown["DataParallel extra on GPU 0"] > 0


def test_tensor_parallel_splits_weights():
    one = estimate("llama-2-7b", mode="infer", seq=1024)
    tp = estimate("llama-2-7b", mode="infer", seq=1024, gpus=4, tp=4)
    assert tp.breakdown["weights"] == one.breakdown["weights"] // 4


def test_totals_add_up():
    e = estimate("bert-large-uncased", batch=4, seq=512, precision="fp32")
    assert e.total_bytes == e.reserved_bytes + e.context_bytes
    assert e.reserved_bytes >= e.peak_bytes and e.reserved_bytes % (2 * 1024**2) == 0
    assert sum(e.breakdown.values()) == e.total_bytes
    assert e.context_bytes == default_context(12.4) == 768 * 1024**2
    assert default_context(11.3) == GIB
    assert estimate("gpt2", context_overhead=0).context_bytes == 0


@pytest.mark.parametrize("options, param, message", [
    ({"batch": 0}, "batch", "at least 1"), ({"seq": -1}, "seq", "at least 1"),
    ({"grad_accum": 0}, "grad_accum", "at least 1"), ({"precision": "fp8"}, "precision", "fp8"),
    ({"quant": "4bit"}, "quant", "lora rank"), ({"offload": True}, "offload", "ZeRO stage 2 or 3"),
    ({"tp": 5, "gpus": 5}, "tp", "heads"), ({"seq": 4096}, "seq", "positions"),
])
def test_bad_setups(options, param, message):
    # The library names its parameter (str: "batch: must be ..."), never a flag of vram estimate.
    with pytest.raises(EstimateError, match=message) as info:
        estimate("bert-base-uncased", **options)
    assert info.value.param == param and str(info.value).startswith(f"{param}: ")
    assert "--" not in str(info.value)


def test_unknown_model_did_you_mean():
    with pytest.raises(EstimateError, match="did you mean bert-large"):
        resolve("bert-lage")


def test_config_files(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "llama", "hidden_size": 64}')
    with pytest.raises(EstimateError, match="missing 'num_attention_heads'"):
        resolve(str(tmp_path))
    cfg.write_text('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,'
                   ' "intermediate_size": 128, "vocab_size": 100, "num_key_value_heads": 2}')
    spec = resolve(str(tmp_path))
    assert spec.family == "llama" and spec.kv_heads == 2 and spec.head_dim == 16
    cfg.write_text('{"model_type": "mamba"}')
    with pytest.raises(EstimateError, match="not supported"):
        resolve(str(cfg))
    with pytest.raises(EstimateError, match="no such file"):
        resolve(str(tmp_path / "nope" / "config.json"))


def test_every_family_estimates():
    for name in ("bert-base-uncased", "roberta-base", "distilbert-base-uncased", "albert-base-v2", "tinybert",
                 "gpt2-xl", "llama-2-70b", "qwen2.5-7b", "t5-large", "vit-large"):
        for mode in ("train", "infer"):
            e = estimate(name, mode=mode, batch=2)
            assert e.total_bytes > e.peak_bytes > 0
    vit = estimate("vit-base", image_size=384)
    assert vit.seq == (384 // 16) ** 2 + 1


def test_spec_head_switch():
    spec = resolve("bert-base-uncased")
    assert param_count(spec.with_head("lm")) == 109_514_298  # BertForMaskedLM, published
    with pytest.raises(EstimateError):
        resolve("gpt2").with_head("cls")
    assert replace(spec, layers=1).layers == 1
    assert Setup().precision == "bf16"


def test_every_supported_model_type_is_read_and_the_error_names_them_all():
    from vramkit.estimator.specs import SUPPORTED_TYPES, EstimateError, from_config

    # one config with every family's keys: each supported type must read it
    cfg = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 100, "n_embd": 64, "n_layer": 2, "n_head": 4, "dim": 64, "n_layers": 2, "n_heads": 4,
           "hidden_dim": 128, "d_model": 64, "num_layers": 2, "num_heads": 4, "d_ff": 128, "d_kv": 16,
           "image_size": 32, "patch_size": 16}
    for mtype in SUPPORTED_TYPES:
        assert from_config({**cfg, "model_type": mtype}).layers == 2, mtype
    with pytest.raises(EstimateError) as err:
        from_config({**cfg, "model_type": "mamba"})
    assert all(t in str(err.value) for t in SUPPORTED_TYPES)


def test_a_bare_count_is_named_once():
    e = estimate("7b")
    assert e.model == "7b" and e.params == 7 * 10**9
