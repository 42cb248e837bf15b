"""The terms of a memory estimate, each with its formula written out with the numbers put in.

Activation terms count the tensors autograd saves for backward in a Hugging Face-style eager
PyTorch implementation of each family (the method of Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", §4), with dtypes as CUDA autocast leaves
them: matmul outputs in 16-bit, layer norms and softmax in fp32, dropout masks as 1-byte bools.
Model states follow Rajbhandari et al. 2020 (ZeRO) for DeepSpeed and PyTorch AMP otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..i18n import N_, _
from .specs import ENCODERS, ModelSpec, numel, param_shapes, typical_hidden

MiB = 1024**2
GiB = 1024**3
PRECISIONS = ("fp32", "fp16", "bf16", "bf16-pure")
# none: backward only; paged-adamw: bitsandbytes' PagedAdamW, its fp32 states in CUDA unified memory
# adamw-4bit, adamw-fp8: torchao's low-bit AdamW (torchao/optim/adam.py AdamW4bit, AdamWFp8)
OPTIMIZERS = ("adamw", "sgd", "sgd-momentum", "adafactor", "adamw-8bit", "adamw-4bit", "adamw-fp8", "paged-adamw",
              "none")
# torchao's low-bit AdamW: (bytes a state value, values per fp32 scale): AdamW4bit's blocks of 128, AdamWFp8's of 256
# (torchao optim/subclass_4bit.py, subclass_fp8.py); tensors under 4,096 values, or not a whole number of
# blocks, keep plain states in the parameter's dtype (_AdamBase._new_buffer, "follow bitsandbytes")
TORCHAO_STATES = {"adamw-4bit": (0.5, 128), "adamw-fp8": (1.0, 256)}
QUANT_BYTES = {"8bit": 1.0, "4bit": 0.5 + 4 / 64}  # int8 / NF4 + an fp32 absmax per 64-block
# bitsandbytes' double quantization: the absmax constants 8-bit per 64-block, plus an fp32 constant
# per 256 of them (QLoRA paper §3: 0.5 + 4/64 -> 0.5 + 1/64 + 4/(64·256) bytes per weight)
DOUBLE_QUANT_4BIT = 0.5 + 1 / 64 + 4 / (64 * 256)
# The output module HF leaves unquantized (get_keys_to_not_convert: lm_head, or the classifier)
UNQUANTIZED_OUTPUTS = ("lm_head.weight", "classifier.weight", "head.classifier.weight")


# torchao's weight-only quantization (quantize_(model, Int8WeightOnlyConfig() / Int4WeightOnlyConfig() /
# Float8WeightOnlyConfig())), inference: bytes a weight, and the bytes per output row (int8: Int8Tensor's fp32
# scale and int8 zero point, torchao 0.18's only version; float8: Float8Tensor's fp32 scale) or, int4, the bf16
# scale and zero point of each group of 128 values (Int4WeightOnlyConfig(group_size=128): Int4Tensor's plain
# packing, two values a byte, its default from torchao 0.15 on; tinygemm's tile_packed_to_4d pads the input width to
# a multiple of 1,024 and the output to 8, not modelled). Measured on the CPU with torchao 0.18 (docs/estimation.md):
# int8 and float8 to the byte
TORCHAO_WEIGHT_ONLY = {"int8-wo": (1.0, 4 + 1), "int4-wo": (0.5 + 4 / 128, 0), "fp8-wo": (1.0, 4)}
# torchao before 0.18: Int8WeightOnlyConfig's version 1, an AffineQuantizedTensor whose scale is in the weight's
# 16-bit dtype and whose zero point is int64 (quant_api.py `zero_point_dtype = torch.int64`): 10 B a row
INT8_WO_V1_ROW = 2 + 8


def quant_bytes(quant: str, double_quant: bool = False) -> float:
    """Bytes per quantized weight, with its block constants (torchao's row scales apart: weight_only_scales)."""
    if quant in TORCHAO_WEIGHT_ONLY:
        return TORCHAO_WEIGHT_ONLY[quant][0]
    return DOUBLE_QUANT_4BIT if quant == "4bit" and double_quant else QUANT_BYTES[quant]
ALL_LINEAR = ("q", "k", "v", "o", "gate", "up", "down")  # the linears of a layer, by role
LORA_TARGET_NAMES = (*ALL_LINEAR, "qkv", "all-linear", "head")  # head: the lm_head (LitGPT, torchtune)
# Families whose HF attention runs the softmax in fp32 whatever the input dtype
UPCAST_SOFTMAX = ("gpt_bigcode", "gpt_neox", "opt", "bloom")


@dataclass
class Term:
    name: str
    bytes: int
    formula: str
    kind: str  # weights | gradients | optimizer | activations | transient | overhead | kv
    # The moments of a training step (STEP_MOMENTS) the term is alive in: "step" for every one, whatever its kind
    # (weights always are; so are DDP's and DeepSpeed's buffers, ZeRO-3's gathered layers, a quantized base's
    # dequantized weight), else the moments' names. A training term without one is refused (step_moments), so a
    # new term cannot silently miss the peak.
    lifetime: str | tuple[str, ...] = ""
    sizes: dict[str, int] = field(default_factory=dict)  # a moment where it is alive at another size than `bytes`
    first_step: tuple[str, ...] | None = None  # its lifetime in the first step, where that differs

    @property
    def whole_step(self) -> bool:
        return self.kind == "weights" or self.lifetime == "step"

    def alive_in(self, moment: str, first: bool = False) -> bool:
        if first and self.first_step is not None:
            return moment in self.first_step
        return self.whole_step or (isinstance(self.lifetime, tuple) and moment in self.lifetime)

    def at(self, moment: str) -> int:
        """Its bytes at `moment` (alive there)."""
        return self.sizes.get(moment, self.bytes)


# The moments of a training step, in order: the end of the forward (activations, the loss's logits), the start of
# backward (the loss's and the last layer's gradients), a checkpointed layer's recompute, the end of backward (the
# gradients), the optimizer step (its states' update)
STEP_MOMENTS = ("forward end", "backward start", "backward end", "optimizer step", "recompute")


def step_moments(terms: list[Term], checkpointing: bool, first: bool = False) -> dict[str, dict[str, int]]:
    """Each moment of a training step: the terms alive in it, at their size there. `first`: the first step
    (terms whose first_step says otherwise: no optimizer states before the first update)."""
    for t in terms:
        if not t.whole_step and not t.lifetime:
            raise ValueError(f"the training term {t.name!r} says no lifetime (the moments it is alive in)")
    moments = STEP_MOMENTS if checkpointing else STEP_MOMENTS[:-1]
    return {m: {t.name: t.at(m) for t in terms if t.alive_in(m, first)} for m in moments}


@dataclass
class Dtypes:
    """Bytes per element: w weights, g gradients, x matmul outputs, n norm outputs (fp32 under
    autocast), r residual stream; mixed = autocast casts fp32 tensors to 16-bit for matmuls."""
    w: float
    g: float
    x: int
    n: int
    r: int
    mixed: bool

    @classmethod
    def of(cls, precision: str, deepspeed: bool = False) -> Dtypes:
        if precision == "fp32":
            return cls(4, 4, 4, 4, 4, False)
        if precision == "bf16-pure" or deepspeed:  # DeepSpeed runs the model itself in 16-bit
            return cls(2, 2, 2, 2, 2, False)
        return cls(4, 4, 2, 4, 4, True)


@dataclass
class Shape:
    b: int  # micro-batch per GPU
    s: int  # sequence length (encoder side for T5; patches + 1 for ViT)
    s_dec: int = 0  # T5 decoder length
    tp: int = 1  # tensor-parallel degree

    @property
    def tokens(self) -> int:
        return self.b * self.s


# A term's name is a key of the breakdown (JSON keeps it in English): it is marked N_() where the term is
# made and said in the reader's words when shown (term_name). The names made from a template:
_NAMED_TERMS = ((N_("optimizer states ({optimizer})"), "optimizer states ("),)


def term_name(name: str) -> str:
    """A term's name in the reader's words."""
    for template, start in _NAMED_TERMS:
        if name.startswith(start) and name.endswith(")"):
            return _(template).format(optimizer=name[len(start):-1])
    return _(name)


def fmt(n: float) -> str:
    """A byte count for formulas: exact below 1 MiB, else MiB/GiB with 2 decimals."""
    if abs(n) < MiB:
        return f"{int(n):,} B"
    if abs(n) < GiB:
        return f"{n / MiB:,.2f} MiB"
    return f"{n / GiB:,.2f} GiB"


# ---------------------------------------------------------------- parameters

@dataclass
class Params:
    total: int
    cast: int  # numel autocast casts to 16-bit (matmul weights and biases)
    largest: int  # numel of the largest tensor
    largest_layer: int  # numel of the largest transformer layer
    layer_cast: int  # cast numel of one layer (what checkpointing re-casts)
    head_cast: int  # cast numel outside the checkpointed layers
    lora: int = 0  # adapter numel
    quantized: int = 0  # numel bitsandbytes quantizes: nn.Linear weights, not the output module
    largest_quantized: tuple[int, int] = (0, 0)  # (out, in) of the largest of those
    adafactor_state: int = 0  # numel of Adafactor's factored second moment
    shapes: list[tuple[str, tuple[int, ...], bool]] = field(default_factory=list)


def adapter_params(spec: ModelSpec, adapter: int | None, prefix: int | None) -> tuple[int, int]:
    """(bottleneck-adapter params, prefix-tuning params): Houlsby adapters, two a layer, each down
    h→m and up m→h with biases; prefix tuning (PEFT, no reparameterisation) a key and a value per
    virtual token per attention layer."""
    layers = spec.layers + spec.decoder_layers
    bottleneck = layers * 2 * (2 * spec.hidden * adapter + adapter + spec.hidden) if adapter else 0
    virtual = layers * 2 * prefix * spec.kv_heads * spec.head_dim if prefix else 0
    return bottleneck, virtual


def params_of(spec: ModelSpec, lora_rank: int | None = None, tp: int = 1,
              targets: tuple[str, ...] | None = None, quant_head: bool = False) -> Params:
    """The parameter counts memory depends on. `quant_head`: bitsandbytes quantizes the output layer
    too (Lightning's BitsandbytesPrecision replaces every nn.Linear; HF leaves lm_head 16-bit)."""
    shapes = param_shapes(spec)
    total = sum(numel(s) for _n, s, _c in shapes)
    cast = sum(numel(s) for _n, s, c in shapes if c)
    lm_tied = spec.head == "lm" and spec.tied and (spec.family in ENCODERS or spec.encoder_decoder)
    if (spec.arch == "gpt" and spec.tied) or lm_tied:
        # The tied LM head multiplies by the (embedding) matrix: autocast casts it too.
        emb = next(s for n, s, _ in shapes if n in ("wte", "shared", "embeddings.word"))
        cast += numel(emb)
    if spec.arch == "llama" and spec.tied:
        cast += spec.vocab * spec.hidden
    layer_sizes: dict[str, int] = {}
    layer_cast: dict[str, int] = {}
    for name, s, c in shapes:
        if ".layer" in name or name.startswith("layer"):
            key = name.split(".attn")[0].split(".ffn")[0].split(".self")[0].split(".cross")[0].split(".norm")[0]
            layer_sizes[key] = layer_sizes.get(key, 0) + numel(s)
            if c:
                layer_cast[key] = layer_cast.get(key, 0) + numel(s)
    largest_layer = max(layer_sizes.values(), default=total)
    one_layer_cast = max(layer_cast.values(), default=0)
    n_layers = spec.layers + spec.decoder_layers
    layers_cast = one_layer_cast * (n_layers if not spec.shared_layers else 1)
    lora = 0
    if lora_rank:
        adapted = lora_targets(spec, targets)
        for name, s, _cast in shapes:
            parts = name.split(".")
            if parts[-1] == "weight" and len(s) == 2 and parts[-2] in adapted \
                    and any(k in f".{name}" for k in (".attn.", ".self.", ".cross.", ".ffn")):
                lora += lora_rank * (s[0] + s[1])
        if "head" in adapted and spec.head == "lm":  # the lm_head, or the tied embedding it multiplies by
            lora += lora_rank * (spec.hidden + spec.vocab)
    ada = sum((s[0] + numel(s) // s[0]) if len(s) >= 2 else numel(s) for _n, s, _c in shapes)
    if spec.bare:  # no shapes: every parameter counts as quantized, its largest matrix a typical one
        h = typical_hidden(total)
        quantized, largest_q = total, (4 * h, h)
    else:
        linear = [s for n, s, c in shapes if c and len(s) == 2 and n.endswith(".weight")
                  and (quant_head or n not in UNQUANTIZED_OUTPUTS)]
        quantized = sum(numel(s) for s in linear)
        largest_q = max(((s[0], s[1]) for s in linear), key=lambda s: s[0] * s[1], default=(0, 0))
    return Params(total=total, cast=cast, largest=max(numel(s) for _n, s, _c in shapes),
                  largest_layer=largest_layer, layer_cast=one_layer_cast,
                  head_cast=max(0, cast - layers_cast), lora=lora, adafactor_state=ada, quantized=quantized,
                  largest_quantized=largest_q, shapes=shapes)


# ---------------------------------------------------------------- activations (training)

@dataclass
class Acts:
    """Saved activation bytes: per layer (encoder / decoder), outside the layers, and what a
    checkpointed layer keeps (its input)."""
    layer: int
    layer_terms: list[tuple[str, int]]
    dec_layer: int = 0
    dec_terms: list[tuple[str, int]] = field(default_factory=list)
    outside: list[tuple[str, int]] = field(default_factory=list)
    ckpt_layer: int = 0  # what a checkpointed encoder layer keeps
    layer_adjust: int = 0  # one-off correction (ALBERT's first layer in mixed precision)
    logits: int = 0  # b·s·V: the number of logits, for the loss transients
    ffn: int = 0  # a layer's feed-forward's own saved bytes: freed by its backward, before the attention's


def _lin_in(tokens: int, width: int, k: int, dt: Dtypes, saved: bool = True) -> int:
    """What `k` linears reading one input of norm dtype save: each its own 16-bit cast under
    autocast when the input is fp32, else the one shared input."""
    if not saved or k == 0:
        return 0
    if dt.mixed and dt.n == 4:
        return k * tokens * width * 2
    return tokens * width * dt.n


def _norm(spec: ModelSpec, tokens: int, width: int, dt: Dtypes, input_bytes: int | None = None,
          frozen: bool = False) -> int:
    """LayerNorm saves its input and fp32 mean/rstd; HF's RMSNorms save an fp32 input and the
    normalised tensor (LLaMA keeps it in the input dtype, T5 in fp32 or the weight dtype). A frozen
    LLaMA-like RMSNorm (LoRA, adapters) keeps no normalised tensor: only the weight's gradient reads it
    (traced with PEFT on HF's LLaMA and Qwen3)."""
    if spec.rmsnorm and frozen and spec.arch == "llama":
        return tokens * width * 4 + tokens * 4
    if spec.rmsnorm:
        if spec.arch == "llama" and dt.r == 2 and not spec.offset_norm:  # Gemma's stays fp32: (1 + w) · x
            return tokens * width * (4 + 2) + tokens * 4
        return tokens * width * 8 + tokens * 4
    return tokens * width * (input_bytes or dt.r) + tokens * 8


def _softmax_bytes(spec: ModelSpec, dt: Dtypes) -> int:
    """Bytes per attention-score element saved for backward: the softmax output (fp32 under
    autocast, and always fp32 in LLaMA/T5 code), the dropout mask and the probabilities the
    second matmul keeps (a 16-bit cast or the dropout output)."""
    sm = softmax_bytes(spec, dt)
    if spec.attn_dropout > 0:
        return sm + 1 + dt.x
    return sm + (dt.x if sm != dt.x else 0)


def softmax_bytes(spec: ModelSpec, dt: Dtypes) -> int:
    """The softmax's dtype: fp32 under autocast, and in the code of every family but GPT-2 and the
    encoders, which run it in the input dtype."""
    return 4 if (dt.mixed or spec.arch in ("llama", "t5") or spec.family in UPCAST_SOFTMAX) else dt.x


def _attention(spec: ModelSpec, sh: Shape, dt: Dtypes, flash: bool, keeps: frozenset[str], sq: int, sk: int,
               cross: bool = False, frozen: bool = False, fused: bool = False) -> list[tuple[str, int]]:
    """One attention layer's saved tensors; `fused`: q, k, v are one linear whatever the family."""
    b, t = sh.b, sh.tp
    tq, tk = b * sq, b * sk
    inner, a = spec.inner, spec.heads
    # GPT-BigCode's multi-query attention multiplies by its one k and v head as they are; GQA's
    # repeat_kv makes full-width copies
    kv_inner = spec.kv_width or inner
    out: list[tuple[str, int]] = []
    if cross:  # q reads the decoder stream; k and v the encoder output (counted once, outside)
        out.append((_("cross-attention query input"), _lin_in(tq, spec.hidden, 1, dt, "q" in keeps)))
    else:
        k = int(bool(keeps & {"q", "k", "v"})) if spec.fused_qkv or fused else len(keeps & {"q", "k", "v"})
        out.append((_("q/k/v projection input (16-bit casts)") if dt.mixed else _("q/k/v projection input"),
                    _lin_in(tq, spec.hidden, k, dt)))
    if spec.qk_norm:  # Qwen3's per-head RMSNorm of q and k: fp32 input, normalised copy, rstd per head
        heads = spec.heads + spec.kv_heads
        out.append((_("q/k norms"),
                    tq * heads * spec.head_dim * (4 + (0 if frozen else dt.x)) // t + tq * heads * 4 // t))
    if flash:
        out.append((_("q, k, v, output kept by the fused attention kernel"),
                    (tq * inner + 2 * tk * kv_inner + tq * inner) * dt.x // t + b * a * sq * 4 // t))
    else:
        out.append((_("q, kᵀ, v copies for the two matmuls"), (tq * inner + 2 * tk * kv_inner) * dt.x // t))
        out.append((_("attention scores: softmax + dropout + probs ({bytes} B/elem)").format(
                        bytes=_softmax_bytes(spec, dt)),
                    b * a * sq * sk * _softmax_bytes(spec, dt) // t))
    if "o" in keeps:
        out.append((_("attention context (output-projection input)"), tq * inner * dt.x // t))
    if spec.hidden_dropout > 0:
        out.append((_("dropout mask after attention"), tq * spec.hidden))
    return out


def _ffn(spec: ModelSpec, tokens: int, dt: Dtypes, keeps: frozenset[str], tp: int) -> list[tuple[str, int]]:
    i = spec.intermediate
    gated = spec.ffn in ("swiglu", "gated-gelu")
    down = "down" in keeps
    routed = 0  # experts a token is routed to
    out: list[tuple[str, int]] = []
    if spec.moe:  # HF's Mixtral loop: each expert reads an indexed copy of its tokens' states, its
        # weighted output is kept for the routing weight's gradient; router logits and probabilities
        out.append((_("router logits and softmax (fp32)"), tokens * spec.experts * (dt.x + 4 + 4) // tp))
        out.append((_("expert inputs and weighted outputs (top {experts})").format(experts=spec.top_k),
                    tokens * spec.top_k * spec.hidden * dt.x * 2 // tp))
        tokens *= spec.top_k
        routed = spec.top_k
    out.append((_("feed-forward input (16-bit casts)") if dt.mixed else _("feed-forward input"),
                _lin_in(tokens, spec.hidden, len(keeps & {"gate", "up"}) if gated else 1, dt,
                        saved=bool(keeps & {"gate", "up"}))))
    inner_drop = spec.encoder_decoder and spec.hidden_dropout > 0
    # the tensors the inner activation keeps, each list whole (a translator sees every one)
    if spec.ffn == "relu":
        per = dt.x + ((1 + dt.x) if inner_drop else 0)  # relu keeps its output = the down input
        what = _("relu output + dropout mask + dropped") if inner_drop else _("relu output")
    elif gated:
        per = (4 if down else 3) * dt.x + (1 if inner_drop else 0)
        what = {(True, True): _("gate activation in/out, up projection, product + dropout mask"),
                (True, False): _("gate activation in/out, up projection, product"),
                (False, True): _("gate activation in/out, up projection + dropout mask"),
                (False, False): _("gate activation in/out, up projection")}[(down, inner_drop)]
    else:
        per = (2 if down else 1) * dt.x
        what = _("gelu input and output (down-projection input)") if down else _("gelu input")
        if spec.ffn == "gelu-new":  # HF's Python-op GELU keeps tanh, 1 + tanh and 0.5·x (fp32 under
            per += 12 if dt.mixed else 3 * dt.x  # autocast, where pow keeps an fp32 copy of x instead of x)
            what = (_("{tensors}; gelu_new's tanh, 1 + tanh, 0.5·x and fp32 copy") if dt.mixed else
                    _("{tensors}; gelu_new's tanh, 1 + tanh, 0.5·x")).format(tensors=what)
    inner = (_("feed-forward inner ({tensors}, {bytes} B × {width} wide, × top {experts} experts per token)") if routed
             else _("feed-forward inner ({tensors}, {bytes} B × {width} wide)"))
    out.append((inner.format(tensors=what, bytes=per, width=i, experts=routed), tokens * i * per // tp))
    if spec.hidden_dropout > 0:
        out.append((_("dropout mask after feed-forward"), tokens * spec.hidden))
    return out


def _input_widths(spec: ModelSpec) -> dict[str, int]:
    """The input width of each linear of a layer, by role."""
    h = spec.hidden
    return {"q": h, "k": h, "v": h, "qkv": h, "o": spec.inner, "gate": h, "up": h, "down": spec.intermediate}


def bnb_held_inputs(spec: ModelSpec, tokens: int, dt: Dtypes, fp32_compute: bool, fused_qkv: bool,
                    quant_head: bool) -> int:
    """The inputs bitsandbytes' matmuls hold as ctx attributes (MatMul4Bit / MatMul8bitLt
    ctx.tensors, not save_for_backward): freed with the graph's nodes, not by backward. Every layer's
    quantized linears (one shared 16-bit input per q/k/v, o, gate/up and down; with the fp32 compute
    dtype each linear's own fp32 copy) and the head's when it is quantized."""
    gated = spec.ffn in ("swiglu", "gated-gelu")
    roles = _fuse([t for t in lora_targets(spec, ("all-linear",)) if t != "gate" or gated], fused_qkv)
    widths = _input_widths(spec)
    if fp32_compute:
        per_layer = sum(tokens * widths[t] * 4 for t in roles)
    else:
        groups = {("attn" if t in ("q", "k", "v", "qkv") else "ffn" if t in ("gate", "up") else t): widths[t]
                  for t in roles}
        per_layer = sum(tokens * w * dt.x for w in groups.values())
    head = tokens * spec.hidden * (4 if fp32_compute else dt.x) if quant_head and spec.head == "lm" else 0
    return (spec.layers + spec.decoder_layers) * per_layer + head


def _fuse(roles: tuple[str, ...] | list[str], fused_qkv: bool) -> list[str]:
    """The linears of `roles` with an input width (not the head), q, k and v as one when fused."""
    named = [("qkv" if fused_qkv and t in ("q", "k", "v") else t) for t in roles if t != "head"]
    return list(dict.fromkeys(named))


def _input_copies(spec: ModelSpec, roles: list[str], tokens: int, dt: Dtypes, copy: int, replaces_shared: bool) -> int:
    """Each linear of `roles` keeping its own copy of its input at `copy` bytes (a dtype cast of its
    own), less the shared 16-bit inputs (q/k/v, gate/up, o, down) those copies stand in for when
    nothing else keeps them."""
    widths = _input_widths(spec)
    groups = {"q": "attn", "k": "attn", "v": "attn", "qkv": "attn", "gate": "ffn", "up": "ffn"}
    shared = {groups.get(t, t): widths[t] for t in roles} if replaces_shared else {}
    return sum(tokens * widths[t] * copy for t in roles) - sum(tokens * w * dt.x for w in shared.values())


def lora_targets(spec: ModelSpec, targets: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The linears LoRA adapts: `targets` (q, k, v, o, gate, up, down; all-linear for every one) or
    PEFT's default for the family (q and v; the fused qkv projection where there is one)."""
    if targets is None:
        return ("qkv",) if spec.fused_qkv else ("q", "v")
    if not targets:  # no LoRA: other adapters only
        return ()
    if "all-linear" in targets:  # PEFT's all-linear leaves the output layer out; head adds it
        targets = ALL_LINEAR + (("head",) if "head" in targets else ())
    if spec.fused_qkv:  # one projection: adapting any of q, k, v adapts it
        fused = ("qkv",) if set(targets) & {"q", "k", "v", "qkv"} else ()
        return fused + tuple(t for t in targets if t not in ("q", "k", "v", "qkv"))
    return tuple(dict.fromkeys(t for x in targets for t in (("q", "k", "v") if x == "qkv" else (x,))))


def _keeps(spec: ModelSpec, lora: bool, quantized: bool, targets: tuple[str, ...] | None) -> frozenset[str]:
    """The linears of a layer that keep their input for backward: all of them in full training and
    under bitsandbytes (MatMul4Bit, MatMul8bitLt keep it whenever it needs a gradient, frozen weight or
    not); under 16-bit LoRA only the adapted ones (their adapters read it)."""
    if not lora or quantized:
        return frozenset(ALL_LINEAR)
    adapted = lora_targets(spec, targets)
    return frozenset(t for x in adapted for t in (("q", "k", "v") if x == "qkv" else (x,)))


def activations(spec: ModelSpec, sh: Shape, dt: Dtypes, flash: bool, lora: bool, quantized: bool = False,
                targets: tuple[str, ...] | None = None, adapter: int = 0, prefix: int = 0,
                lora_dropout: float = 0.0, fp32_adapters: bool = False, fp32_compute: bool = False,
                quant_head: bool = False, fused_qkv: bool = False) -> Acts:
    """`lora`: a frozen base with adapters (LoRA on `targets`, () for none; bottleneck adapters of
    width `adapter`; `prefix` virtual tokens). `quantized`: the layers' linears are bitsandbytes'
    4/8-bit ones (see _keeps); the 16-bit output module keeps no input under LoRA. `fp32_adapters`:
    LoRA weights in fp32 on a 16-bit base (PEFT), which casts each adapted linear's input to fp32.
    `fp32_compute`: 4-bit linears computing in fp32 (bnb_4bit_compute_dtype, HF's default), each
    casting its input to fp32, the copy MatMul4Bit keeps. `quant_head`: the output layer is a
    quantized linear too, which keeps its input like the others. `fused_qkv`: q, k and v are one
    linear (LitGPT's attn, torchvision's MultiheadAttention in_proj), so one adapter dropout and one
    input cast (autocast, 4-bit compute dtype) serve the three."""
    b, s = sh.b, sh.s
    keeps = _keeps(spec, lora, quantized, targets)
    frozen = lora  # the base's norms too
    # the LM head's input is kept when its weight trains, or an adapter on it reads the input
    outer_lora = lora and "head" not in lora_targets(spec, targets) and not (quantized and quant_head)
    adapted_quantized = lora_targets(spec, targets) if lora and quantized else ()
    lora = lora and not quantized
    T = b * s
    h = spec.hidden
    fam = spec.family
    layer_terms: list[tuple[str, int]] = []
    ffn_saved = 0
    if fam in ENCODERS or spec.arch in ("gpt", "llama", "vit", "t5"):
        attn = _attention(spec, sh, dt, flash, keeps, s, s + prefix, frozen=frozen, fused=fused_qkv)
        ffn = _ffn(spec, T, dt, keeps, sh.tp)
        ffn_saved = sum(v for _n, v in ffn)
        adapted = lora_targets(spec, targets) if lora and (lora_dropout > 0 or fp32_adapters) else ()
        adapted = adapted or (adapted_quantized if fp32_adapters or lora_dropout > 0 else ())
        if adapted:  # each adapter's own dropout of its input: a 1-byte mask, and (without autocast,
            # whose casts are kept either way) its dropped copy in place of the input they shared.
            # fp32 adapters on a 16-bit base (PEFT's _cast_input_dtype): each adapter's own fp32 copy
            # of its input (what lora_A keeps) in place of the shared 16-bit one, which the frozen base
            # does not keep (a bitsandbytes base does: there the copies come on top)
            roles = _fuse(adapted, fused_qkv)
            extra = sum(T * _input_widths(spec)[t] for t in roles) if lora_dropout > 0 else 0
            if fp32_adapters or not dt.mixed:
                extra += _input_copies(spec, roles, T, dt, 4 if fp32_adapters else dt.x,
                                       replaces_shared=not adapted_quantized)
            what = ((_("a mask per adapter; its fp32 input copy") if fp32_adapters else
                     _("a mask per adapter; its dropped input")) if lora_dropout > 0 else
                    _("its fp32 input copy") if fp32_adapters else _("its dropped input"))
            ffn = ffn + [(_("LoRA inputs ({what})").format(what=what), extra)]
        if quantized and fp32_compute:  # bnb's Linear4bit: x.to(compute_dtype), kept by MatMul4Bit
            roles = _fuse([t for t in lora_targets(spec, ("all-linear",))
                           if t != "gate" or spec.ffn in ("swiglu", "gated-gelu")], fused_qkv)
            ffn = ffn + [(_("4-bit linears' inputs in the fp32 compute dtype (one copy each)"),
                          _input_copies(spec, roles, T, dt, 4, replaces_shared=True))]
        if adapter:  # Houlsby: after attention and after the MLP, each down (kept input), act, up
            one = _lin_in(T, h, 1, dt) + 2 * T * adapter * dt.x
            ffn = ffn + [(_("bottleneck adapters (2 × width {width}: inputs, activation, up input)").format(
                width=adapter), 2 * one)]
        if spec.pre_norm:
            layer_terms = [(_("norm before attention"), _norm(spec, T, h, dt, frozen=frozen))] + attn + \
                          [(_("norm before feed-forward"), _norm(spec, T, h, dt, frozen=frozen))] + ffn
        else:  # post-LN (BERT family): the norms read the residual sums
            layer_terms = attn + [(_("norm after attention"), _norm(spec, T, h, dt))] + ffn + \
                          [(_("norm after feed-forward"), _norm(spec, T, h, dt))]
    acts = Acts(layer=sum(v for _n, v in layer_terms), layer_terms=layer_terms, ffn=ffn_saved)
    acts.ckpt_layer = T * h * dt.r  # a checkpointed layer keeps only its input
    outside: list[tuple[str, int]] = []
    if fam in ENCODERS:
        e = spec.embedding_size
        outside.append(("embedding norm", _norm(spec, T, e, dt)))
        if spec.hidden_dropout > 0:
            outside.append(("embedding dropout mask", T * e))
        if fam == "albert":
            outside.append(("embedding → hidden mapping input", _lin_in(T, e, 1, dt)))
            if dt.mixed:  # the mapping's 16-bit output feeds layer 1: one shared input, not 3 casts
                acts.layer_adjust = -(_lin_in(T, h, 3, dt) - T * h * 2)
        outside.append(("input ids", T * 8 * (2 if spec.type_vocab else 1)))
        if spec.head == "cls":
            # The pooler reads token 0: a 16-bit copy under autocast, else a view that keeps
            # the whole last hidden state alive.
            outside.append(("pooler input", b * h * 2 if dt.mixed else T * h * dt.n))
        else:
            outside += [("LM head transform input", _lin_in(T, h, 1, dt, not lora)),
                        ("LM head gelu input", T * e * dt.x),
                        ("LM head norm", _norm(spec, T, e, dt, input_bytes=4 if dt.mixed else dt.x)),
                        ("LM head decoder input", _lin_in(T, e, 1, dt, not outer_lora)),
                        ("log-softmax output (fp32)", T * spec.vocab * 4 // sh.tp),
                        ("labels", T * 8)]
            acts.logits = T * spec.vocab
    elif spec.arch in ("gpt", "llama"):
        if spec.arch == "gpt" and spec.hidden_dropout > 0:
            outside.append(("embedding dropout mask", T * h))
        if spec.embed_norm:
            outside.append(("embedding norm", _norm(spec, T, h, dt)))
        outside += [("final norm", _norm(spec, T, h, dt, frozen=frozen)),
                    ("LM head input", _lin_in(T, h, 1, dt, not outer_lora)),
                    ("log-softmax output (fp32)", T * spec.vocab * 4 // sh.tp),
                    ("input ids and labels", T * 8 * 2)]
        acts.logits = T * spec.vocab
    elif spec.patches:
        img = spec.seq_for_image(None) and b * spec.channels * (spec.patch_size ** 2) * (s - 1)
        outside += [("image (patch-embedding input)", img * (2 if dt.mixed else dt.x if dt.r == 2 else 4)),
                    ("final norm", _norm(spec, T, h, dt)),
                    ("classifier input", b * h * 2 if dt.mixed else T * h * dt.n)]
    elif spec.encoder_decoder:
        sd = sh.s_dec or s
        Td = b * sd
        dec_self = _attention(spec, sh, dt, flash, keeps, sd, sd + prefix)
        dec_cross = _attention(spec, sh, dt, flash, keeps, sd, s, cross=True)
        if dt.mixed:  # every decoder layer casts the fp32 encoder output for its k and v
            dec_cross.append(("encoder output, cast for cross k/v", _lin_in(T, h, len(keeps & {"k", "v"}), dt)))
        dec_terms = [("norm before self-attention", _norm(spec, Td, h, dt))] + dec_self + \
                    [("norm before cross-attention", _norm(spec, Td, h, dt))] + dec_cross + \
                    [("norm before feed-forward", _norm(spec, Td, h, dt))] + _ffn(spec, Td, dt, keeps, sh.tp)
        if adapter:
            dec_terms.append((_("bottleneck adapters (2 × width {width})").format(width=adapter),
                              2 * (_lin_in(Td, h, 1, dt) + 2 * Td * adapter * dt.x)))
        acts.dec_terms = dec_terms
        acts.dec_layer = sum(v for _n, v in dec_terms)
        drop = spec.hidden_dropout > 0
        outside += [("encoder embedding dropout mask", T * h if drop else 0),
                    ("encoder final norm", _norm(spec, T, h, dt)),
                    ("encoder output dropout mask", T * h if drop else 0)]
        if not dt.mixed:
            outside.append(("encoder output (cross k/v input)", T * h * dt.n))
        outside += [("decoder embedding dropout mask", Td * h if drop else 0),
                    ("decoder final norm", _norm(spec, Td, h, dt)),
                    ("decoder output dropout mask", Td * h if drop else 0),
                    ("LM head input", _lin_in(Td, h, 1, dt, not outer_lora)),
                    ("log-softmax output (fp32)", Td * spec.vocab * 4 // sh.tp),
                    ("relative-position buckets (int64)", (s * s + sd * sd) * 8),
                    ("input ids, decoder ids, labels", (T + 2 * Td) * 8)]
        acts.logits = Td * spec.vocab
    if prefix:  # the prefix encoder's output: every layer's virtual keys and values, for the batch
        n_attn = spec.layers + spec.decoder_layers
        outside.append(("prefix keys and values", b * prefix * 2 * n_attn * spec.kv_heads * spec.head_dim * dt.x))
    acts.outside = [(n, v) for n, v in outside if v]
    return acts


def model_buffers(spec: ModelSpec) -> tuple[str, int, str] | None:
    """(name, bytes, formula) of a buffer the family's HF model class allocates beside its parameters:
    GPT-BigCode keeps a max_positions² bool causal mask (`self.bias`, not persistent: built at init and
    moved to the GPU with the model, though transformers 5 masks through masking_utils instead)."""
    if not spec.mask_buffer or not spec.max_positions:
        return None
    n = spec.max_positions
    return (N_("causal-mask buffer"), n * n,
            _("{n:,} × {n:,} × 1 B (GPT-BigCode's bool `bias`, max positions²)").format(n=n))


def kv_cache(spec: ModelSpec, b: int, s: int, x: int, tp: int = 1, s_dec: int = 0) -> int:
    """2 (k and v) · layers · batch · context · kv-heads · head-dim · bytes (T5: the decoder's
    `s_dec` tokens of self-attention and the encoder's `s` of cross-attention)."""
    if spec.arch in ("gpt", "llama"):
        # a sliding window does not shrink the prefill: transformers' sliding-window cache layer keeps
        # a view of the last window tokens, which holds the whole prefill's keys and values until the
        # next token (traced); only then is the cache window-sized
        return 2 * spec.layers * b * s * spec.kv_heads * spec.head_dim * x // tp
    if spec.encoder_decoder:  # decoder self-attention + cross-attention caches
        return 2 * spec.decoder_layers * b * ((s_dec or s) + s) * spec.inner * x // tp
    return 0


# What Hugging Face's eager decoder code (transformers 5) holds in a no-grad forward beyond one layer's
# own temporaries, by family. Every decoder layer unpacks `out, _ = self.attn(...)`: `_` keeps that
# layer's attention probabilities alive through the feed-forward; BLOOM's model keeps each block's
# (output, probabilities) tuple until the next block returns, so the previous layer's too.
HF_DECODERS = ("gpt2", "gpt_bigcode", "gpt_neox", "opt", "bloom", "llama", "mistral", "mixtral", "qwen2", "qwen3",
               "gemma")
HELD_PROBS = {"bloom": 2}  # probability tensors alive during the feed-forward; 1 in the others
# Residual-width tensors alive during the feed-forward: the layer input (bound by the caller), the
# post-attention sum and the norm output; GPT-2's and GPT-BigCode's blocks also keep attn_output bound
RESIDUAL_TENSORS = {"gpt2": 4, "gpt_bigcode": 4}
# Learned position embeddings the model holds through its layers, as elements per token of one sequence:
# GPT-2 and GPT-BigCode look them up once for the sequence (1 × s × h), OPT once per batch row (b × s × h)
POSITION_EMBEDS = {"gpt2": "sequence", "gpt_bigcode": "sequence", "opt": "batch"}
# Feed-forward inner tensors alive at once: GELU written as Python ops keeps the matmul output beside
# its partial products (GPT-2's gelu_new: x, 0.5·x, x³, 0.044715·x³; BLOOM's bloom_gelu_forward in
# inference: x, 0.5·x, 0.798·x, 0.044715·x, 0.044715·x·x); a gated FFN keeps act(gate), up, product
GELU_TENSORS = {"gelu-new": 4, "bloom": 5}


def inference_held(spec: ModelSpec, b: int, s: int, dt: Dtypes, flash: bool) -> list[tuple[str, int, str]]:
    """Tensors the model's forward holds through every layer (name, bytes, formula): the embedding output
    (`inputs_embeds` stays bound while the layers run; GPT-2, GPT-BigCode and OPT add their learned
    position embeddings) and, with eager attention, the 4-D causal mask masking_utils builds in the
    model's dtype."""
    if spec.family not in HF_DECODERS:
        return []
    T, h, x = b * s, spec.hidden, dt.x
    emb, formula = T * h * x, f"{b} × {s} × {h:,} × {x} B"
    per = POSITION_EMBEDS.get(spec.family)
    if per:  # the learned position embeddings stay bound beside it
        rows = b if per == "batch" else 1
        emb += rows * s * h * x
        formula = _("{formula} + position embeddings {rows} × {seq} × {hidden:,} × {bytes} B").format(
            formula=formula, rows=rows, seq=s, hidden=h, bytes=x)
    out = [(N_("embedding output (inputs_embeds)"), emb, formula)]
    if not flash:
        out.append((N_("causal mask (eager, 4-D)"), b * s * s * x, f"{b} × 1 × {s} × {s} × {x} B (masking_utils)"))
    return out


def inference_working_set(spec: ModelSpec, b: int, s: int, dt: Dtypes, flash: bool, tp: int = 1) -> int:
    """The largest set of temporaries one layer holds during a no-grad forward: the residual
    stream and its norm, q/k/v, the attention scores (eager) and the feed-forward inner tensors;
    for Hugging Face's decoders (HF_DECODERS) as their code holds them: the attention probabilities
    kept through the feed-forward, the residual sums and each family's activation ops."""
    T = b * s
    h, inner = spec.hidden, spec.inner
    hf = spec.family in HF_DECODERS
    # the residual stream and its norm; post-LN layers (BERT) also hold the sublayer output and the
    # sum the norm reads (traced, and measured on an H200: BERT-Large inference was 64 MiB short without)
    base = (2 if spec.pre_norm else 4) * T * h * dt.r
    sm = softmax_bytes(spec, dt)
    probs = b * spec.heads * s * s * dt.x // tp  # the attention probabilities in the model's dtype
    if flash:
        attn = base + 4 * T * inner * dt.x // tp
    else:
        # softmax(scores, dtype=float32) casts a 16-bit input first: scores, the fp32 copy and the output
        score_bytes = dt.x + (8 if sm == 4 and dt.x < 4 else sm)
        qkv = 3 * T * inner
        if hf:
            qkv = hf_attention_inputs(spec, T)
        if spec.positions == "alibi":  # alibi.baddbmm's scores stay bound beside the masked sum, and the
            # previous block's probabilities are still held; its query is reshaped into a copy
            score_bytes += (2 if spec.layers > 1 else 1) * dt.x
            qkv = 4 * T * inner
        attn = base + qkv * dt.x // tp + b * spec.heads * s * s * score_bytes // tp
    gated = spec.ffn in ("swiglu", "gated-gelu")
    inner_tensors = 3 if gated else GELU_TENSORS.get(spec.family, GELU_TENSORS.get(spec.ffn, 2))
    if hf:  # beside the norm output: the layer input (bound by the caller) and the post-attention sum;
        # GPT-2's block also keeps attn_output; and the probabilities `_` holds (none from SDPA / flash)
        base = RESIDUAL_TENSORS.get(spec.family, 3) * T * h * dt.r + (0 if flash else probs * HELD_PROBS.get(
            spec.family, 1))
    if spec.moe:  # transformers' grouped_mm experts: the routed tokens' gathered inputs, the fused gate_up
        # output (2 × intermediate wide) beside act(gate) and their product
        routed = T * spec.top_k
        ffn = base + routed * h * dt.x + routed * spec.intermediate * dt.x * 4 // tp
    else:
        ffn = base + T * spec.intermediate * dt.x * inner_tensors // tp
    return max(attn, ffn)


# Families whose HF causal-LM head upcasts its logits with `logits = logits.float()` (transformers 4.32 to
# 4.45: LlamaForCausalLM and the families copied from it); GPT-2, GPT-BigCode, GPT-NeoX, OPT and BLOOM
# return them in the model's dtype
UPCAST_LOGITS = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma")


def prefill_logits(spec: ModelSpec, b: int, s: int, x: int, all_positions: bool, kept: bool = False) -> tuple[int, str]:
    """(bytes, formula) of the logits the prefill makes: the last token's in fp32 (transformers >= 4.45's
    generate() asks for one: num_logits_to_keep=1), or before 4.45 every prompt position's, which
    LlamaForCausalLM then upcasts (`.float()`) while its 16-bit output is still alive. `kept`: what stays
    once the head returns (the upcast copy alone)."""
    v = spec.vocab
    if not all_positions:
        return b * v * 4, f"{b} × {v:,} × 4 B"
    upcast = spec.family in UPCAST_LOGITS and x < 4
    if kept:
        return b * s * v * (4 if upcast else x), _("{batch} × {seq} positions × {vocab:,} × {bytes} B").format(
            batch=b, seq=s, vocab=v, bytes=4 if upcast else x)
    per = x + (4 if upcast else 0)
    return b * s * v * per, (_("{batch} × {seq} positions × {vocab:,} × {bytes} B ({output} B output + its fp32 copy)")
                             if per > x else _("{batch} × {seq} positions × {vocab:,} × {bytes} B")).format(
        batch=b, seq=s, vocab=v, bytes=per, output=x)


def decode_working_set(spec: ModelSpec, b: int, context: int, dt: Dtypes, flash: bool, tp: int = 1) -> int:
    """One decode step's temporaries: a one-token forward (inference_working_set at s = 1) plus what its
    attention reads across a cache of `context` positions: with eager attention the b × heads × context
    scores (and the fp32 softmax copy), and for grouped-query attention repeat_kv's full-width copies of
    one layer's cached k and v."""
    one = inference_working_set(spec, b, 1, dt, flash, tp)
    if flash:
        return one
    sm = softmax_bytes(spec, dt)
    scores = b * spec.heads * context * (dt.x + (8 if sm == 4 and dt.x < 4 else sm)) // tp
    repeat = 2 * b * context * spec.inner * dt.x // tp if _repeats_kv(spec) else 0
    return one + scores + repeat


def generation_steps(spec: ModelSpec, b: int, s: int, new_tokens: int, dt: Dtypes, flash: bool, tp: int,
                     legacy: bool, all_logits: bool, static_len: int = 0) -> dict[str, list[Term]]:
    """generate()'s decode steps after a prefill of `s` tokens, as {moment: the terms it holds beyond the
    weights and the prefill's KV cache}. The last step extends the cache to s + new_tokens - 1 positions
    (the last token is sampled from its logits) beside one token's temporaries. Before transformers 4.42
    generate() kept the previous step's cache (model_kwargs["past_key_values"]) while the model built the
    next, so each step ends with two caches; and it kept the prefill's `outputs`, with its logits, through
    the first decode step."""
    if static_len:  # a static cache was allocated whole for the prefill: nothing grows, nothing is copied
        return {"last decode step": [
            Term(N_("decode-step temporaries"), decode_working_set(spec, b, static_len, dt, flash, tp) + b * static_len,
                 _("one token's forward over the {positions}-position static cache, with its boolean mask "
                   "{batch} × {positions} B").format(positions=static_len, batch=b), "transient"),
            Term(N_("decode-step logits (last token, fp32)"), b * spec.vocab * 4, f"{b} × {spec.vocab:,} × 4 B",
                 "transient")]}
    kv_token = kv_cache(spec, b, 1, dt.x, tp)  # one position of the cache, all layers
    last = s + new_tokens - 1
    # a sliding-window cache keeps the last `window` positions once decoding goes on (the prefill's
    # full cache, counted in the prefill moment, is cut down at the first decode step)
    kept = min(last, spec.sliding_window) if spec.sliding_window else last
    growth_f = (_("{more} more positions to {last} (prompt {prompt} + {new} new - 1), the cache kept to the "
                  "{window}-token window × {size} a position") if kept < last else
                _("{more} more positions to {last} (prompt {prompt} + {new} new - 1) × {size} a position"))
    growth = Term(N_("KV cache growth (generation)"), kv_token * max(0, kept - s), growth_f.format(
        more=new_tokens - 1, last=last, prompt=s, new=new_tokens, window=spec.sliding_window, size=fmt(kv_token)),
        "kv")
    layer_copy = kv_token * (kept - 1) // max(1, spec.layers)
    ws = Term(N_("decode-step temporaries"), decode_working_set(spec, b, kept, dt, flash, tp) + layer_copy,
              (_("one token's forward attending to {positions} positions, and one layer's k/v while torch.cat copies "
                 "it {size}") if flash else
               _("one token's forward attending to {positions} positions (eager scores over the cache), and one "
                 "layer's k/v while torch.cat copies it {size}")).format(positions=kept, size=fmt(layer_copy)),
              "transient")
    logits = Term(N_("decode-step logits (last token, fp32)"), b * spec.vocab * 4, f"{b} × {spec.vocab:,} × 4 B",
                  "transient")
    steps = {"last decode step": [growth, ws, logits]}
    if legacy:
        steps["last decode step"].insert(1, Term(N_("previous step's cache (transformers < 4.42)"),
                                                 kv_token * (kept - 1),
                                                 _("{positions} positions × {size}: generate() still holds the "
                                                   "tuple the step concatenates into a new one").format(
                                                     positions=kept - 1, size=fmt(kv_token)), "kv"))
        first_ws = decode_working_set(spec, b, s + 1, dt, flash, tp)
        held, formula = prefill_logits(spec, b, s, dt.x, all_logits, kept=True)
        steps["first decode step"] = [
            Term(N_("first decode step: the new cache"), kv_token * (s + 1), _(
                "{positions} positions × {size} beside the prefill's, which generate() still holds").format(
                    positions=s + 1, size=fmt(kv_token)), "kv"),
            Term(N_("first decode step: the prefill's logits"), held, _(
                "{formula}: the prefill's `outputs`, kept until the next forward returns (no `del outputs` before "
                "transformers 4.42)").format(formula=formula), "transient"),
            Term(N_("first decode step: temporaries"), first_ws, _(
                "one token's forward attending to {positions} positions").format(positions=s + 1), "transient")]
    return steps


def t5_inference(spec: ModelSpec, b: int, s: int, sd: int, dt: Dtypes, flash: bool,
                 tp: int = 1) -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]]]:
    """HF T5's no-grad forward as two moments, (encoder forward, decoder prefill of `sd` tokens), each
    a list of (name, bytes, formula); the KV cache exists only in the second. Both stacks hold their
    input embeddings and the relative position bias layer 0 computes for all layers, each block's `_`
    the attention probabilities through its next sublayer; T5's softmax runs in the model's dtype, so
    the scores are two tensors at once (matmul and its scaled or biased copy). Layer 0 first computes
    the position buckets in int64: 49 bytes per query-key pair at once in the encoder (bidirectional),
    41 in the decoder. The decoder adds the encoder output, its causal mask and the cross-attention's
    zero position bias; its k and v go to the cache, so only q is held beside the scores."""
    x, h, H = dt.x, spec.hidden, spec.heads
    T, Td, F = b * s, b * sd, spec.intermediate
    inner = spec.inner // tp
    ffn_k = 3 if spec.ffn == "gated-gelu" else 2  # act(wi_0), wi_1, product; or wi and relu
    # flash keeps no scores nor probabilities, but q, k, v and its output (as inference_working_set counts it)
    score, held_probs, qkv_extra = (0, 0, 3) if flash else (2, 1, 0)

    def probs(q: int, k: int) -> int:
        return b * H * q * k * x // tp

    bias = H * s * s * x // tp
    enc_layer = max(bias + (2 * T * h + (3 + qkv_extra) * T * inner) * x + score * probs(s, s),
                    bias + 3 * T * h * x + held_probs * probs(s, s) + ffn_k * T * F * x // tp,
                    (T * h + 3 * T * inner) * x + 49 * s * s)  # layer 0's buckets: its input is the embedding
    encoder = [(N_("encoder: embedding output"), T * h * x, f"{b} × {s} × {h:,} × {x} B"),
               (N_("encoder: layer temporaries"), enc_layer, _(
                   "the relative position bias 1 × {heads} × {seq} × {seq} × {bytes} B and the larger of attention "
                   "(input, norm, q/k/v, scores and their scaled copy) and the feed-forward (input, sum, norm, the "
                   "probabilities `_` holds, {inner} inner tensors); or layer 0's int64 position buckets, {seq} × "
                   "{seq} × 49 B").format(heads=H, seq=s, bytes=x, inner=ffn_k))]
    biases = (H * sd * sd + H * sd * s) * x // tp
    dec_layer = max(biases + (2 * Td * h + (1 + qkv_extra) * Td * inner) * x + score * probs(sd, sd),
                    biases + (3 * Td * h + (1 + qkv_extra) * Td * inner) * x + held_probs * probs(sd, sd)
                    + score * probs(sd, s),
                    biases + 3 * Td * h * x + held_probs * probs(sd, s) + ffn_k * Td * F * x // tp,
                    (Td * h + Td * inner) * x + 41 * sd * sd)
    decoder = [(N_("encoder output (cross k/v input)"), T * h * x, f"{b} × {s} × {h:,} × {x} B"),
               (N_("decoder: embedding output and causal mask"), (Td * h + b * sd * sd) * x,
                f"({b} × {sd} × {h:,} + {b} × 1 × {sd} × {sd}) × {x} B"),
               (N_("decoder: layer temporaries"), dec_layer,
                _("the position biases ({heads} × {dec} × {dec} self, {heads} × {dec} × {seq} cross) × {bytes} B and "
                  "the largest of self-attention (scores and their scaled copy beside q), cross-attention (the "
                  "self-attention probabilities `_` still held) and the feed-forward (the cross-attention "
                  "probabilities held, {inner} inner tensors); or layer 0's int64 position buckets, {dec} × {dec} × "
                  "41 B").format(heads=H, dec=sd, seq=s, bytes=x, inner=ffn_k))]
    return encoder, decoder


def _repeats_kv(spec: ModelSpec) -> bool:
    """Grouped-query attention in HF's llama-like code: repeat_kv makes full-width copies of k and v (one
    kv head expands as a view; as many kv heads as heads need no repeat)."""
    return spec.arch == "llama" and 1 < spec.kv_heads < spec.heads


def hf_attention_inputs(spec: ModelSpec, T: int) -> int:
    """Elements of the q/k/v tensors an HF decoder's eager attention holds beside its scores (the cache
    holds its own copies of k and v): the fused projection's output, which its q, k and v are views of
    (GPT-2, GPT-BigCode's h + 2 kv heads, GPT-NeoX); the rotated q (rotary families: a new tensor);
    OPT's q scaled after its projection; repeat_kv's full-width copies of k and v for grouped-query
    attention (one kv head expands as a view; as many as heads: the cache itself)."""
    inner = spec.inner
    held = T * (inner + 2 * spec.kv_heads * spec.head_dim) if spec.fused_qkv else 0
    if spec.positions == "rotary" or spec.scaled_q:
        held += T * inner
    if _repeats_kv(spec):
        held += 2 * T * inner
    return held


def hf_inference_note(spec: ModelSpec, flash: bool) -> str:
    """What the family's Hugging Face eager code holds that a plain layer would not, for the explanation ("": none)."""
    if spec.family not in HF_DECODERS or flash:
        return ""
    what = {"gpt2": N_("HF GPT-2's block keeps attn_output and the probabilities (`_`) through the MLP, "
                    "gelu_new's Python ops hold 4 inner tensors"),
            "gpt_bigcode": N_("HF GPT-BigCode's block keeps attn_output and the probabilities (`_`) through the "
                           "MLP, and its attention the fused c_attn output its q, k and v are views of"),
            "gpt_neox": N_("HF GPT-NeoX keeps the attention probabilities (`_`) through the MLP, and its attention "
                        "the fused qkv output beside the rotated q"),
            "bloom": N_("HF BLOOM keeps the baddbmm scores beside their masked sum and fp32 softmax, this and "
                     "the previous block's probabilities, and bloom_gelu_forward's Python ops hold 5 inner tensors"),
            "mixtral": N_("HF Mixtral's grouped_mm experts hold the routed tokens' inputs and their fused "
                       "gate_up output beside act(gate) and the product")}
    default = N_("HF keeps the attention probabilities (`_`) through the feed-forward")
    return _(what.get(spec.family, default))
