"""The analytic estimate against Hugging Face's own modeling code, traced on fake tensors: each decoder
family's real model class (transformers, eager attention), narrow and shallow, one training step of
AdamW twice, and an inference forward with the KV cache. fp32 and bf16 weights only: CPU autocast
keeps norms and softmax in 16-bit where CUDA autocast runs them in fp32, so a mixed-precision trace
on the CPU would not be what a GPU does (the reference models in estimator/reference.py cover it).

    python tests/test_trace_hf.py      prints the table docs/estimation.md keeps
"""

from __future__ import annotations

import functools
import warnings

import pytest
from helpers import causal_lm_step

pytestmark = pytest.mark.slow  # traces real PyTorch models

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

from vramkit.estimator.analytic import CUBLAS_WORKSPACES, estimate  # noqa: E402
from vramkit.estimator.specs import from_config  # noqa: E402
from vramkit.estimator.trace import fake_mode, make_optimizer, trace_memory  # noqa: E402

_LAYERS = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 1024,
           "vocab_size": 2000}
CONFIGS = {  # each family's own config keys, narrow
    "gpt2": {"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 4, "vocab_size": 2000},
    "gpt_bigcode": {"model_type": "gpt_bigcode", "n_embd": 256, "n_layer": 2, "n_head": 4, "multi_query": True,
                    "vocab_size": 2000, "n_positions": 512},
    "gpt_neox": {"model_type": "gpt_neox", **_LAYERS, "max_position_embeddings": 512},
    "opt": {"model_type": "opt", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
            "ffn_dim": 1024, "vocab_size": 2000, "word_embed_proj_dim": 256, "max_position_embeddings": 512},
    "bloom": {"model_type": "bloom", "hidden_size": 256, "n_layer": 2, "n_head": 4, "vocab_size": 2000},
    "llama": {"model_type": "llama", **_LAYERS, "num_key_value_heads": 2},
    "qwen2": {"model_type": "qwen2", **_LAYERS, "num_key_value_heads": 2},
    "qwen3": {"model_type": "qwen3", **_LAYERS, "num_key_value_heads": 2, "head_dim": 64},
    "mistral": {"model_type": "mistral", **_LAYERS, "num_key_value_heads": 2, "sliding_window": 64},
    "gemma": {"model_type": "gemma", **_LAYERS, "num_key_value_heads": 1, "head_dim": 64},
    "mixtral": {"model_type": "mixtral", **_LAYERS, "num_key_value_heads": 2, "num_local_experts": 4,
                "num_experts_per_tok": 2},
}
# transformers' grouped-matmul experts take 16-bit inputs only
PRECISIONS = {name: ("bf16-pure",) if name == "mixtral" else ("fp32", "bf16-pure") for name in CONFIGS}


def _hf_model(cfg: dict, dtype):
    config = tf.AutoConfig.for_model(**cfg)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype, as from_pretrained(torch_dtype=...) loads it
    try:
        return tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    finally:
        torch.set_default_dtype(default)


def _config(name: str) -> dict:
    """A family's narrow config, or "NAME-realistic": its realistic widths (REALISTIC, below)."""
    return REALISTIC[name.removesuffix("-realistic")] if name.endswith("-realistic") else CONFIGS[name]


@functools.cache
def _inference_model(name: str, dtype):
    """(model, its fake mode) for inference, built once a module: a no-grad prefill changes nothing in
    the model (no gradient, no optimizer state, a new KV cache each step), so each batch and length
    of it traces the same model as a fresh one would (the same peaks, checked when this came in); a
    build of the realistic widths costs more than their trace."""
    fm = fake_mode()
    with warnings.catch_warnings(), fm:
        warnings.simplefilter("ignore")
        return _hf_model(_config(name), dtype).eval(), fm


def traced_and_analytic(name: str, precision: str, mode: str = "train", batch: int = 4, seq: int = 128):
    """(analytic peak, traced peak) without the cuBLAS workspaces both would add."""
    cfg = _config(name)
    spec = from_config(cfg, name=name)
    dtype = torch.bfloat16 if precision == "bf16-pure" else torch.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "train":  # a training step changes the model (gradients, optimizer state): a new one each
            fm = fake_mode()
            with fm:
                net = _hf_model(cfg, dtype).train()
                optimizer = make_optimizer("adamw", net.parameters())
        else:
            (net, fm), optimizer = _inference_model(name, dtype), None

        step = causal_lm_step(net, optimizer, spec.vocab, batch, seq)
        traced = trace_memory(net, step, steps=2 if optimizer else 1, optimizer=optimizer, fake_mode=fm)
    analytic = estimate(spec, mode=mode, batch=batch, seq=seq,
                        precision=precision if mode == "train" else ("fp32" if precision == "fp32" else "bf16"))
    return analytic.peak_bytes - CUBLAS_WORKSPACES, traced.peak_bytes


@pytest.mark.parametrize("name, precision", [(n, p) for n in CONFIGS for p in PRECISIONS[n]])
def test_training_step_agrees_with_hf_modeling_code(name, precision):
    ours, theirs = traced_and_analytic(name, precision)
    assert abs(ours / theirs - 1) <= 0.10, f"{name} {precision}: analytic {ours:,} vs HF traced {theirs:,}"


# Inference of these narrow models is mostly one layer's working set, as each family's transformers 5
# code holds it: GPT-2, BLOOM and Mixtral were 16-23 % under before inference_working_set modelled
# the probabilities `_` keeps through the feed-forward, BLOOM's baddbmm scores, the Python-op GELUs
# and the grouped_mm experts' fused gate_up output; GPT-NeoX, OPT and GPT-BigCode 2.5-7 % under before
# their embeddings and masks, fused or rotated q/k/v and GPT-BigCode's mask buffer were counted
INFER_FAMILIES = ["gpt2", "gpt_bigcode", "gpt_neox", "opt", "llama", "qwen3", "mistral", "gemma", "bloom", "mixtral"]


# Within 1 %, not the 10 % issue 16 asks: each family's code is modelled tensor by tensor, and 1 % is
# what tells it from the generic working set (OPT -2.5 %, GPT-BigCode -3.5 %, GPT-NeoX -7.1 % here)
INFER_TOLERANCE = 0.01


@pytest.mark.parametrize("name", INFER_FAMILIES)
def test_inference_agrees_with_hf_modeling_code(name):
    ours, theirs = traced_and_analytic(name, "bf16-pure", mode="infer", batch=4, seq=256)
    assert abs(ours / theirs - 1) <= INFER_TOLERANCE, f"{name} inference: analytic {ours:,} vs HF traced {theirs:,}"


# Realistic widths, where the weights dwarf a narrow model's activations: the working set above the
# weights must hold too (GPT-2 small, a BLOOM-560m-like model, a narrow 8-expert Mixtral, Pythia-410m,
# OPT-350m's widths with its embedding unprojected (the estimator refuses word_embed_proj_dim != hidden),
# SantaCoder: multi-query attention and GPT-BigCode's max_positions² bool mask buffer)
REALISTIC = {"gpt2": {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257},
             "bloom": {"model_type": "bloom", "hidden_size": 1024, "n_layer": 24, "n_head": 16, "vocab_size": 250880},
             "mixtral": {"model_type": "mixtral", "hidden_size": 1024, "num_hidden_layers": 8,
                         "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 3584,
                         "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000},
             "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 1024, "num_hidden_layers": 24,
                          "num_attention_heads": 16, "intermediate_size": 4096, "vocab_size": 50304,
                          "max_position_embeddings": 2048, "rotary_pct": 0.25},
             "opt": {"model_type": "opt", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                     "ffn_dim": 4096, "vocab_size": 50272, "word_embed_proj_dim": 1024,
                     "max_position_embeddings": 2048},
             "gpt_bigcode": {"model_type": "gpt_bigcode", "n_embd": 2048, "n_layer": 24, "n_head": 16,
                             "multi_query": True, "vocab_size": 49280, "n_positions": 2048}}


@pytest.mark.parametrize("name, batch, seq", [(n, b, s) for n in REALISTIC for b in (1, 8) for s in (128, 1024)])
def test_inference_at_realistic_width_agrees_above_the_weights(name, batch, seq):
    ours, theirs = traced_and_analytic(f"{name}-realistic", "bf16-pure", mode="infer", batch=batch, seq=seq)
    net, _ = _inference_model(f"{name}-realistic", torch.bfloat16)  # the model traced
    weights = 2 * sum(p.numel() for p in net.parameters())
    above = (ours - weights) / (theirs - weights) - 1
    assert abs(above) <= INFER_TOLERANCE, f"{name} b{batch} s{seq}: {ours:,} vs {theirs:,} ({above:+.1%} above weights)"


# Encoders as people run them (BertModel & co., a tokenizer's attention mask) and T5-small / a
# flan-T5-like gated T5 as generate() runs them: the encoder once, then the decoder's prefill of its own
# length with the cache, and the last token's logits
ENCODER_CONFIGS = {
    "bert": {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
             "intermediate_size": 3072, "vocab_size": 30522},
    "roberta": {"model_type": "roberta", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                "intermediate_size": 3072, "vocab_size": 50265, "max_position_embeddings": 514},
    "distilbert": {"model_type": "distilbert", "dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072,
                   "vocab_size": 30522},
    "t5": {"model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8, "d_ff": 2048, "d_kv": 64,
           "vocab_size": 32128},
    "t5-gated": {"model_type": "t5", "d_model": 512, "num_layers": 8, "num_heads": 6, "d_ff": 1024, "d_kv": 64,
                 "vocab_size": 32128, "feed_forward_proj": "gated-gelu"},
}


@functools.cache
def _encoder_model(name: str, seq2seq: bool):
    """(model, its fake mode), 16-bit, built once a module as _inference_model's are."""
    fm = fake_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = tf.AutoConfig.for_model(**ENCODER_CONFIGS[name])
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with fm:
                auto = tf.AutoModelForSeq2SeqLM if seq2seq else tf.AutoModel
                return auto.from_config(config, attn_implementation="eager").eval(), fm
        finally:
            torch.set_default_dtype(default)


def traced_encoder_and_analytic(name: str, batch: int, seq: int, decoder_seq: int = 0):
    """(analytic peak, traced peak) of a 16-bit no-grad forward, without the cuBLAS workspaces."""
    spec = from_config(ENCODER_CONFIGS[name], name=name)
    net, fm = _encoder_model(name, seq2seq=bool(decoder_seq))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def step(_: int) -> None:
            ids = torch.randint(0, spec.vocab, (batch, seq))
            with torch.no_grad():
                if not decoder_seq:
                    net(input_ids=ids, attention_mask=torch.ones_like(ids))
                    return
                encoded = net.get_encoder()(input_ids=ids).last_hidden_state
                cache = tf.EncoderDecoderCache(tf.DynamicCache(), tf.DynamicCache())
                prompt = torch.randint(0, spec.vocab, (batch, decoder_seq))
                out = net.get_decoder()(input_ids=prompt, encoder_hidden_states=encoded, cache=cache,
                                        use_cache=True).last_hidden_state
                net.lm_head(out[:, -1:])

        traced = trace_memory(net, step, steps=1, fake_mode=fm)
    analytic = estimate(spec, mode="infer", batch=batch, seq=seq, precision="bf16",
                        **({"decoder_seq": decoder_seq} if decoder_seq else {}))
    return analytic.peak_bytes - CUBLAS_WORKSPACES, traced.peak_bytes


ENCODER_CASES = [("bert", 8, 512, 0), ("roberta", 8, 512, 0), ("distilbert", 8, 512, 0),
                 ("t5", 8, 512, 128), ("t5", 8, 128, 512), ("t5", 1, 1024, 64),
                 ("t5-gated", 8, 512, 128), ("t5-gated", 1, 64, 1024), ("t5-gated", 1, 1024, 64)]


@pytest.mark.parametrize("name, batch, seq, decoder_seq", ENCODER_CASES)
def test_encoder_inference_agrees_with_hf_modeling_code(name, batch, seq, decoder_seq):
    # T5 within 3 % (its two moments modelled as its code runs them: it was +45 % to -56 % as one sum);
    # the BERT family within the 10 % (its H200-measured reference layer holds two more
    # residual-width tensors than BertLayer: +2-4 % here)
    ours, theirs = traced_encoder_and_analytic(name, batch, seq, decoder_seq)
    bar = 0.03 if decoder_seq else 0.10
    assert abs(ours / theirs - 1) <= bar, f"{name} b{batch} s{seq}/{decoder_seq}: {ours:,} vs HF traced {theirs:,}"


def traced_peft_and_analytic(name: str, precision: str, options: dict, batch: int = 4, seq: int = 128):
    """(analytic peak, traced peak, analytic trainable, PEFT's trainable) for HF's model under PEFT
    (LoRA or prefix tuning). PEFT builds its adapters by moving weights between devices, which fake tensors
    refuse: the model is built on real CPU tensors (these narrow models are small), then every parameter and
    buffer is swapped for a fake one and the steps are traced on fake tensors, as the other traces here and
    `vram estimate --trace` run. Traced on the real tensors, every case's peak was the same but for the 512
    bytes of each trainable tensor's AdamW step counter, which only the fake trace sees (1 to 14 KiB of
    30-190 MiB); the arithmetic took 1-20 s a case."""
    peft = pytest.importorskip("peft")
    cfg = CONFIGS[name]
    spec = from_config(cfg, name=name)
    if "prefix_len" in options:
        config = peft.PrefixTuningConfig(num_virtual_tokens=options["prefix_len"], task_type="CAUSAL_LM")
    else:
        targets = "all-linear" if options.get("lora_targets") == ("all-linear",) else None
        config = peft.LoraConfig(r=options["lora"], lora_dropout=options.get("lora_dropout", 0.0),
                                 target_modules=targets, task_type="CAUSAL_LM")
    dtype = torch.bfloat16 if precision == "bf16-pure" else torch.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = _hf_model(cfg, dtype)
        if options.get("checkpointing"):  # as the Trainer's gradient_checkpointing=True does it
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        net = peft.get_peft_model(base, config).train()
        fm = _made_fake(net)
        trainable = [p for p in net.parameters() if p.requires_grad]
        with fm:
            optimizer = make_optimizer("adamw", trainable)

        def step(_: int) -> None:
            ids = torch.randint(0, spec.vocab, (batch, seq))
            loss = net(input_ids=ids, labels=ids).loss
            loss.backward()
            del loss
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        traced = trace_memory(net, step, steps=2, optimizer=optimizer, fake_mode=fm)
    analytic = estimate(spec, batch=batch, seq=seq, precision=precision, **options)
    return (analytic.peak_bytes - CUBLAS_WORKSPACES, traced.peak_bytes, analytic.trainable,
            sum(p.numel() for p in trainable))


def _made_fake(net):
    """Swap every parameter and buffer of a model built on real tensors for a fake one of the same shape,
    dtype and requires_grad (a tied weight stays one parameter); returns the fake mode to trace in. Real
    tensors the model keeps otherwise (PEFT's prefix token ids) become fake as an operation meets them."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    fm = FakeTensorMode(allow_non_fake_inputs=True)
    swapped: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> (the real one, kept alive; the fake)
    for module in net.modules():
        for table, fake in ((module._parameters, lambda p: torch.nn.Parameter(fm.from_tensor(p.detach()),
                                                                              requires_grad=p.requires_grad)),
                            (module._buffers, fm.from_tensor)):
            for key, real in table.items():
                if real is not None:
                    if id(real) not in swapped:
                        swapped[id(real)] = (real, fake(real))
                    table[key] = swapped[id(real)][1]
    return fm


# PEFT keeps LoRA weights in fp32 on a 16-bit base (autocast_adapter_dtype) and casts each adapted
# linear's input to fp32: the estimate's default adapter_dtype="fp32" (bf16 all-linear LoRA was 10-23%
# low when the adapters were taken as 16-bit)
PEFT_CASES = [(name, precision, options) for name in ("llama", "gpt2", "qwen3", "opt")
              for precision, options in (("fp32", {"lora": 8}), ("fp32", {"lora": 8, "lora_targets": ("all-linear",)}),
                                         ("fp32", {"prefix_len": 16}), ("bf16-pure", {"lora": 8}),
                                         ("bf16-pure", {"lora": 8, "lora_targets": ("all-linear",)}),
                                         ("bf16-pure", {"lora": 8, "lora_dropout": 0.1}),
                                         ("fp32", {"lora": 8, "lora_dropout": 0.1}),
                                         ("fp32", {"lora": 8, "lora_dropout": 0.1, "lora_targets": ("all-linear",)}),
                                         ("bf16-pure", {"prefix_len": 16}))]


@pytest.mark.parametrize("name, precision, options", PEFT_CASES)
def test_peft_adapters_agree_with_hf_modeling_code(name, precision, options):
    ours, theirs, trainable, peft_trainable = traced_peft_and_analytic(name, precision, options)
    assert trainable == peft_trainable
    assert abs(ours / theirs - 1) <= 0.10, f"{name} {precision} {options}: analytic {ours:,} vs traced {theirs:,}"


# With gradient checkpointing (non-reentrant; HF's GPT-2 fails torch's recompute metadata check here, and so
# does a model with dropout under the tracer's CUDA-like dropout), at shapes whose recompute peaks in the
# feed-forward's backward (b1 s32 to b8 s512) and in the eager attention's (b2 s1024): what the rebuilt layer
# holds grows with b·s (its output's gradient, the feed-forward's or the attention's activation gradients). A
# layer's worth of weight gradients in its place, fitted at b4 s128, was +27 % at b1 s32 and -11 % at b8 s512.
# q,v within 5 % (+0.5 to -2.5 % traced); all-linear within 10 %: the down projection's adapter frees its input
# before the feed-forward's gradients peak, which the estimate still counts (+5.8 to +6.6 % in fp32)
CKPT = {"lora": 8, "checkpointing": True}
PEFT_CKPT_CASES = [(name, precision, CKPT, batch, seq, 0.05) for name in ("llama", "qwen3")
                   for precision in ("fp32", "bf16-pure") for batch, seq in ((1, 32), (4, 128), (8, 512))]
PEFT_CKPT_CASES += [("llama", precision, CKPT, 2, 1024, 0.05) for precision in ("fp32", "bf16-pure")]
PEFT_CKPT_CASES += [("llama", precision, {**CKPT, "lora_targets": ("all-linear",)}, batch, seq, 0.10)
                    for precision in ("fp32", "bf16-pure") for batch, seq in ((1, 32), (4, 128), (8, 512))]


@pytest.mark.parametrize("name, precision, options, batch, seq, tolerance", PEFT_CKPT_CASES)
def test_peft_with_checkpointing_agrees_across_shapes(name, precision, options, batch, seq, tolerance):
    ours, theirs, trainable, peft_trainable = traced_peft_and_analytic(name, precision, options, batch, seq)
    assert trainable == peft_trainable
    assert abs(ours / theirs - 1) <= tolerance, \
        f"{name} {precision} {options} b{batch} s{seq}: analytic {ours:,} vs traced {theirs:,}"


if __name__ == "__main__":
    print("| family (HF model class, 2 layers) | setting | analytic | HF traced | diff |")
    print("|---|---|---|---|---|")
    for family in CONFIGS:
        for prec in PRECISIONS[family]:
            a, t = traced_and_analytic(family, prec)
            print(f"| {family} | train b4 s128 {prec} | {a / 2**20:.1f} MiB | {t / 2**20:.1f} MiB | {a / t - 1:+.1%} |")
    for family in INFER_FAMILIES:
        a, t = traced_and_analytic(family, "bf16-pure", mode="infer", batch=4, seq=256)
        print(f"| {family} | infer b4 s256 16-bit | {a / 2**20:.1f} MiB | {t / 2**20:.1f} MiB | {a / t - 1:+.1%} |")
    for name, batch, seq, decoder_seq in ENCODER_CASES:
        a, t = traced_encoder_and_analytic(name, batch, seq, decoder_seq)
        what = f"infer b{batch} s{seq}" + (f" decoder {decoder_seq}" if decoder_seq else "") + " 16-bit"
        print(f"| {name} | {what} | {a / 2**20:.1f} MiB | {t / 2**20:.1f} MiB | {a / t - 1:+.1%} |")
    try:
        import peft  # noqa: F401
    except ImportError:
        raise SystemExit(0) from None
    for family, prec, options in PEFT_CASES:
        a, t, _, _ = traced_peft_and_analytic(family, prec, options)
        what = ", ".join(f"{k} {v if not isinstance(v, tuple) else ','.join(v)}" for k, v in options.items())
        print(f"| {family} + PEFT | train b4 s128 {prec}, {what} | {a / 2**20:.1f} MiB | {t / 2**20:.1f} MiB | "
              f"{a / t - 1:+.1%} |")
    for family, prec, options, batch, seq, _ in PEFT_CKPT_CASES:
        a, t, _, _ = traced_peft_and_analytic(family, prec, options, batch, seq)
        what = ", ".join(f"{k} {v if not isinstance(v, tuple) else ','.join(v)}" for k, v in options.items())
        print(f"| {family} + PEFT | train b{batch} s{seq} {prec}, {what} | {a / 2**20:.1f} MiB | "
              f"{t / 2**20:.1f} MiB | {a / t - 1:+.1%} |")
