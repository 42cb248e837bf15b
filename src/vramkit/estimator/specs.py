"""Model specs: the few numbers memory depends on, from a Hugging Face config.json, the built-in
catalog, or a bare parameter count ("7b", "350M": weights and model states only).

No torch, no download: a config is read as JSON.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..errors import RequestError
from ..i18n import _
from . import catalog, hub_cache


class EstimateError(RequestError):
    """Bad input for an estimate (unknown model, config missing a key, batch 0, ...): one line;
    `param` names the Setup field when one is to blame."""


class UnknownFamily(EstimateError):
    """A config whose model_type the formulas do not know: `config` (the config's dict) can still be
    estimated by tracing transformers' own class for it (estimator/traced_family.py)."""

    def __init__(self, message: str, config: dict[str, Any], name: str) -> None:
        super().__init__(message)
        self.config = config
        self.name = name


FAMILIES = ("bert", "roberta", "distilbert", "albert", "gpt2", "gpt_bigcode", "gpt_neox", "opt", "bloom", "llama",
            "mistral", "mixtral", "qwen2", "qwen3", "gemma", "t5", "vit")
ENCODERS = ("bert", "roberta", "distilbert", "albert")
# Decoders built like GPT-2 (LayerNorm, biases, a plain two-matrix MLP) and like LLaMA (RMSNorm,
# rotary positions, a gated MLP, no biases): each family keeps its own name and differs in traits
GPT_LIKE = ("gpt2", "gpt_bigcode", "gpt_neox", "opt", "bloom")
LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # one of FAMILIES, or "params" for a bare count
    hidden: int = 0
    layers: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    intermediate: int = 0
    vocab: int = 0
    max_positions: int = 0
    type_vocab: int = 0
    embedding_size: int = 0  # ALBERT's factorised embedding; else = hidden
    shared_layers: bool = False  # ALBERT: one set of layer weights used by every layer
    decoder_layers: int = 0  # T5
    ffn: str = "gelu"  # gelu | gelu-new (HF's NewGELU: Python ops, GPT-2's default) | relu | swiglu | gated-gelu
    tied: bool = True
    qkv_bias: bool = True
    attn_dropout: float = 0.0
    hidden_dropout: float = 0.0
    rel_buckets: int = 0  # T5 relative attention buckets
    image_size: int = 0
    patch_size: int = 0
    channels: int = 3
    num_labels: int = 2
    head: str = "cls"  # cls (classification) | lm (language-model logits over the vocabulary)
    # decoder traits
    kv_width: int = 0  # GPT-BigCode's fused c_attn: k and v are one head each (multi-query); else 0
    fused_qkv: bool = False  # one q/k/v projection (GPT-2, GPT-BigCode, GPT-NeoX, BLOOM)
    positions: str = "learned"  # learned (an embedding table) | rotary | alibi | relative (T5)
    parallel_residual: bool = False  # GPT-NeoX: attention and MLP read the same input
    embed_norm: bool = False  # BLOOM's LayerNorm after the word embeddings
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head's q and k
    sliding_window: int = 0  # Mistral: attention (and a sliding-window KV cache) sees this many tokens
    experts: int = 0  # Mixtral: feed-forward experts per layer (every one's weights on the GPU)
    top_k: int = 0  # ... of which each token is routed through top_k
    # traits of a family's code, set where its config is read (_from_config), named for what they do
    encoder_decoder: bool = False  # T5: an encoder and a decoder with cross-attention (a decoder length of its own)
    patches: bool = False  # ViT: the input is an image cut into patches (the sequence: the patch count + 1)
    embedding_scale: bool = False  # Gemma: the embeddings are multiplied by sqrt(hidden)
    offset_norm: bool = False  # Gemma: RMSNorm scales by (1 + w), computed in fp32 whatever the dtype
    scaled_q: bool = False  # OPT: q is multiplied by the scale after its projection (a tensor of its own)
    position_offset: int = 0  # OPT: the learned positions start at 2 (the table has 2 more rows)
    mask_buffer: bool = False  # GPT-BigCode: a max_positions² bool causal mask kept as a buffer (`self.bias`)
    qkv_views: bool = False  # GPT-2: q, k and v are views of the fused projection's output (the cache kept them)
    params: int = 0  # only for family "params"
    source: str = "catalog"
    notes: tuple[str, ...] = field(default=())
    # the checkpoint's dtype as its config names it (torch_dtype, transformers 5's dtype): bfloat16, float16,
    # float32, or "" where it names none; transformers 5 loads the weights in it (dtype="auto")
    dtype: str = ""
    # its weights' quantization as its quantization_config names it (GPTQ, AWQ, bitsandbytes): 4bit or 8bit,
    # what transformers loads; "" where it has none or one the estimator does not model (fp8, ...)
    quantized: str = ""
    # the dtype its 4-bit weights are multiplied in, as that config says (bitsandbytes' bnb_4bit_compute_dtype;
    # GPTQ's and AWQ's kernels: the checkpoint's own 16-bit dtype): fp32, bf16, fp16, or "" where it says none
    quantized_compute: str = ""

    @property
    def bare(self) -> bool:
        return self.family == "params"

    @property
    def arch(self) -> str:
        """The code the formulas follow: gpt (GPT-2-like decoders), llama (LLaMA-like), or the family."""
        return "gpt" if self.family in GPT_LIKE else "llama" if self.family in LLAMA_LIKE else self.family

    @property
    def pre_norm(self) -> bool:
        return self.arch in ("gpt", "llama", "t5", "vit")

    @property
    def rmsnorm(self) -> bool:
        return self.arch in ("llama", "t5")

    @property
    def inner(self) -> int:
        """Width of the attention heads together (T5 may differ from hidden)."""
        return self.heads * self.head_dim

    @property
    def causal(self) -> bool:
        return self.arch in ("gpt", "llama")

    @property
    def moe(self) -> bool:
        return self.experts > 0

    def with_head(self, head: str | None) -> ModelSpec:
        if head is None or head == self.head or self.bare:
            return self
        if head == "cls" and self.arch in ("gpt", "llama", "t5"):
            raise EstimateError(_("{model}: only the language-model head (lm) is modelled for {family}").format(
                model=self.name, family=self.family), param="head")
        if head == "lm" and self.patches:
            raise EstimateError(_("{model}: a ViT has no language-model head (use cls)").format(model=self.name),
                                param="head")
        return replace(self, head=head)

    def with_own_head(self, own: bool) -> ModelSpec:
        """With an output layer of its own where the config ties it to the embedding (a copied head: LitGPT)."""
        return replace(self, tied=False) if own and self.tied and self.head == "lm" and not self.bare else self

    def seq_for_image(self, image_size: int | None) -> int:
        size = image_size or self.image_size
        return (size // self.patch_size) ** 2 + 1


MAX_SIZE = 1e15  # no size, count or width of a model comes near it; every product of them stays exact


class _Digits(float):
    """What a JSON integer too long for int() (Python's 4,300-digit limit) reads as: an infinite float
    that says how long it was, so a key nobody reads may hold one and a key that is read names it."""

    digits: int

    def __new__(cls, text: str) -> _Digits:
        self = super().__new__(cls, "-inf" if text.startswith("-") else "inf")
        self.digits = len(text.lstrip("-"))
        return self

    def __repr__(self) -> str:
        return _("a {digits:,}-digit number").format(digits=self.digits)

    __str__ = __repr__


_MAX_INT_DIGITS = 400  # far past any size, far below the limit; a longer one is _Digits


def _parse_int(text: str) -> int | float:
    return int(text) if len(text) <= _MAX_INT_DIGITS else _Digits(text)


def _show(value: Any) -> str:
    """A value of the config, short: never a 5,000-digit int (whose str() raises) nor a 5 MB string."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return _("a {digits:,}-digit number").format(digits=int(math.log10(abs(value))) + 1)
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


_DIGITS_RE = re.compile(r"^\s*([0-9]{1,30})\s*$")  # "4096": ASCII digits only (int() takes '٥' and '1_000')


def _whole(key: str, value: Any, least: int = 0) -> int:
    """A config value as a whole number from `least` to MAX_SIZE: JSON's 4096 or 4096.0 (or "4096");
    not true, 1.5, NaN, 1e309, a 5,000-digit number, or a size of 0 where a formula divides by it."""
    if isinstance(value, str) and _DIGITS_RE.match(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and math.isfinite(value) and not value.is_integer()):
        raise EstimateError(_("{key} must be a whole number, not {value}").format(key=key, value=_show(value)))
    if not value < MAX_SIZE:  # NaN too (and a huge int compares exactly: no float of it)
        raise EstimateError(_("{key} must be a whole number below 1e15, not {value}").format(key=key,
                                                                                            value=_show(value)))
    if value < least:
        raise EstimateError(_("{key} must be a whole number of at least {least}, not {value}").format(
            key=key, least=least, value=_show(value)))
    return int(value)


def _need(cfg: dict[str, Any], *keys: str, where: str) -> int:
    """A required size: the first of `keys` the config has, at least 1 (formulas divide by it)."""
    for key in keys:
        if key in cfg and cfg[key] is not None:
            return _whole(key, cfg[key], least=1)
    raise EstimateError(_("{where}: config is missing {key!r} (needed for a {type} model)").format(
        where=where, key=keys[0], type=cfg.get("model_type")))


def _opt(cfg: dict[str, Any], key: str, default: Any) -> Any:
    value = cfg.get(key)
    return default if value is None else value


def _flag(cfg: dict[str, Any], key: str, default: bool) -> bool:
    """A yes/no of the config: JSON's true or false (not "false", which Python's bool() reads as True:
    a tied head whose untied 525 M parameters would go uncounted)."""
    value = _opt(cfg, key, default)
    if not isinstance(value, bool):
        raise EstimateError(_("{key} must be true or false, not {value}").format(key=key, value=_show(value)))
    return value


def _opt_int(cfg: dict[str, Any], key: str, default: int, least: int = 1) -> int:
    """An optional whole number of the config. Sizes (a table's rows, a layer's width, a count of
    heads, labels, buckets or channels) are at least 1: a 0 there is an empty shape or a division by
    zero; counts that may be none (token types, experts, a window, decoder layers) pass least=0."""
    return _whole(key, _opt(cfg, key, default), least)


def _rate(cfg: dict[str, Any], key: str, default: float) -> float:
    """A dropout probability of the config: a number from 0 to 1."""
    value = _opt(cfg, key, default)
    if isinstance(value, str):
        try:
            value = float(value) if len(value) < 40 and value.isascii() else value
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise EstimateError(_("{key} must be a probability from 0 to 1, not {value}").format(key=key,
                                                                                            value=_show(value)))
    return float(value)


# layers a config may have: past the deepest published transformers (DeepNet's 1,000); every per-layer
# walk (the tracer, the loading replay) stays bounded on a hostile config
MAX_LAYERS = 2048
MAX_EXPERT_LAYERS = 65536  # experts x layers (DeepSeek-V3: 256 x 61, Kimi K2: 384 x 61)


def from_config(cfg: dict[str, Any], name: str = "config", source: str = "config") -> ModelSpec:
    """A spec from the dict of a Hugging Face config.json (untrusted: every value is checked)."""
    try:
        spec = _from_config(cfg, name, source)
    except EstimateError as e:
        if str(e).startswith(name):
            raise
        raise EstimateError(f"{name}: {e}", param=e.param) from None  # which config said so
    except (TypeError, ValueError, OverflowError) as e:  # int("abc"), float(None), int(1e400) of an optional key
        raise EstimateError(_("{where}: a config value is not a number ({error})").format(
            where=name, error=str(e)[:80])) from None
    dtype = cfg.get("dtype", cfg.get("torch_dtype"))
    if isinstance(dtype, str) and dtype in ("bfloat16", "float16", "float32"):
        spec = replace(spec, dtype=dtype)
    spec = _quantized(spec, cfg.get("quantization_config"))
    for f in fields(spec):
        value = getattr(spec, f.name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value < 1e15:
            raise EstimateError(_("{where}: {key} must be a number from 0 to 1e15, not {value}").format(
                where=name, key=f.name, value=_show(value)))
    _check_shape(spec, name)
    return spec


_COMPUTE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# quant_method -> how its bit width is named in the config (bitsandbytes: load_in_4bit / load_in_8bit)
_QUANT_BITS = {"gptq": "bits", "awq": "bits", "bitsandbytes": None}


def _quantized(spec: ModelSpec, config: Any) -> ModelSpec:
    """The spec with its checkpoint's quantization (ModelSpec.quantized) and a note saying how it is priced."""
    if not isinstance(config, dict):
        return spec
    method = config.get("quant_method")
    method = method.lower()[:40] if isinstance(method, str) else ""
    if method in _QUANT_BITS:
        key = _QUANT_BITS[method]
        bits = config.get(key) if key else (4 if config.get("load_in_4bit") is True else
                                            8 if config.get("load_in_8bit") is True else None)
        if bits in (4, 8) and not isinstance(bits, bool):
            dtype = config.get("bnb_4bit_compute_dtype") if method == "bitsandbytes" else spec.dtype
            compute = _COMPUTE.get(dtype, "") if isinstance(dtype, str) else ""
            note = _("the checkpoint is quantized ({method}, {bits}-bit): `vram estimate` prices its weights, where "
                     "they stay frozen (inference, LoRA and other adapters), as bitsandbytes' {bits}-bit, the form the "
                     "estimator models (quant {bits}bit); a full fine-tune, dequantized").format(method=method,
                                                                                                 bits=bits)
            return replace(spec, quantized=f"{bits}bit", quantized_compute=compute, notes=(*spec.notes, note))
    note = _("the checkpoint's quantization_config ({method}) is not modelled: its weights are priced at "
             "{dtype}").format(method=method or "?", dtype=spec.dtype or "16 bits")
    return replace(spec, notes=(*spec.notes, note))


def _check_shape(spec: ModelSpec, name: str) -> None:
    """What every formula divides by or builds a shape from, and what bounds the per-layer walks."""
    sizes = ["hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate"]
    sizes += ["image_size", "patch_size", "channels"] if spec.patches else ["vocab"]
    for size in sizes:
        if getattr(spec, size) < 1:  # 0 from the config, or a width narrower than its heads (head_dim = h // heads)
            raise EstimateError(_("{where}: {key} must be at least 1, not {value} (hidden {hidden:,}, {heads:,} heads)")
                                .format(where=name, key=size, value=getattr(spec, size), hidden=spec.hidden,
                                        heads=spec.heads))
    if spec.heads % spec.kv_heads:
        raise EstimateError(_("{where}: {kv_heads:,} key/value heads do not divide {heads:,} attention heads").format(
            where=name, kv_heads=spec.kv_heads, heads=spec.heads))
    if spec.experts and not 1 <= spec.top_k <= spec.experts:
        raise EstimateError(_("{where}: {top_k} experts per token of {experts} (1 to {experts})").format(
            where=name, top_k=spec.top_k, experts=spec.experts))
    for rate in ("attn_dropout", "hidden_dropout"):
        if getattr(spec, rate) > 1:
            raise EstimateError(_("{where}: {key} is a probability from 0 to 1, not {value!r}").format(
                where=name, key=rate, value=getattr(spec, rate)))
    layers = max(spec.layers, spec.decoder_layers)
    if layers > MAX_LAYERS:
        raise EstimateError(_("{where}: {layers:,} layers is more than any model has (at most {most:,})").format(
            where=name, layers=layers, most=MAX_LAYERS))
    if layers * max(spec.experts, 1) > MAX_EXPERT_LAYERS:  # param_shapes lists every expert of every layer
        raise EstimateError(_("{where}: {experts:,} experts in each of {layers:,} layers is more than any model has "
                              "(at most {most:,} experts in all)").format(
            where=name, experts=spec.experts, layers=layers, most=MAX_EXPERT_LAYERS))
    for tensor, shape, _cast in param_shapes(spec):  # what the sums divide by (Adafactor's rows): no empty table
        if min(shape) < 1:
            raise EstimateError(_("{where}: {tensor} would have shape {shape}: a size of the config is 0").format(
                where=name, tensor=tensor, shape=shape))
    if param_count(spec) > MAX_PARAMS:
        raise EstimateError(_("{where}: {params:.3g} parameters is more than any model has (at most {most:.0e})")
                            .format(where=name, params=param_count(spec), most=MAX_PARAMS))


def _from_config(cfg: dict[str, Any], name: str, source: str) -> ModelSpec:
    if not isinstance(cfg, dict):
        raise EstimateError(_("{where}: a config must be a JSON object").format(where=name))
    mtype = str(cfg.get("model_type", "")).lower()
    where = name
    if mtype in ("bert", "roberta", "xlm-roberta", "albert", "camembert", "electra"):
        family = "albert" if mtype == "albert" else ("bert" if mtype in ("bert", "electra") else "roberta")
        h = _need(cfg, "hidden_size", where=where)
        heads = _need(cfg, "num_attention_heads", where=where)
        return ModelSpec(
            name=name, family=family, hidden=h, layers=_need(cfg, "num_hidden_layers", where=where), heads=heads,
            kv_heads=heads, head_dim=h // heads, intermediate=_need(cfg, "intermediate_size", where=where),
            vocab=_need(cfg, "vocab_size", where=where),
            max_positions=_opt_int(cfg, "max_position_embeddings", 512),
            type_vocab=_opt_int(cfg, "type_vocab_size", 2, least=0),
            embedding_size=_opt_int(cfg, "embedding_size", h) if family == "albert" else h,
            shared_layers=family == "albert" and _opt_int(cfg, "num_hidden_groups", 1) == 1,
            ffn="gelu", attn_dropout=_rate(cfg, "attention_probs_dropout_prob", 0.1),
            hidden_dropout=_rate(cfg, "hidden_dropout_prob", 0.1),
            num_labels=_opt_int(cfg, "num_labels", 2), head="cls", source=source)
    if mtype == "distilbert":
        h = _need(cfg, "dim", "hidden_size", where=where)
        heads = _need(cfg, "n_heads", "num_attention_heads", where=where)
        return ModelSpec(
            name=name, family="distilbert", hidden=h, layers=_need(cfg, "n_layers", where=where), heads=heads,
            kv_heads=heads, head_dim=h // heads, intermediate=_need(cfg, "hidden_dim", where=where),
            vocab=_need(cfg, "vocab_size", where=where),
            max_positions=_opt_int(cfg, "max_position_embeddings", 512), type_vocab=0, embedding_size=h,
            attn_dropout=_rate(cfg, "attention_dropout", 0.1), hidden_dropout=_rate(cfg, "dropout", 0.1),
            num_labels=_opt_int(cfg, "num_labels", 2), head="cls", source=source)
    if mtype == "gpt2":
        h = _need(cfg, "n_embd", "hidden_size", where=where)
        heads = _need(cfg, "n_head", "num_attention_heads", where=where)
        return ModelSpec(
            name=name, family="gpt2", hidden=h, layers=_need(cfg, "n_layer", "num_hidden_layers", where=where),
            heads=heads, kv_heads=heads, head_dim=h // heads, intermediate=_opt_int(cfg, "n_inner", 4 * h),
            vocab=_need(cfg, "vocab_size", where=where), max_positions=_opt_int(cfg, "n_positions", 1024),
            embedding_size=h, tied=True, fused_qkv=True, qkv_views=True,
            attn_dropout=_rate(cfg, "attn_pdrop", 0.1),
            ffn="gelu-new" if _opt(cfg, "activation_function", "gelu_new") == "gelu_new" else "gelu",
            hidden_dropout=_rate(cfg, "resid_pdrop", 0.1), head="lm", source=source)
    if mtype == "gpt_bigcode":  # StarCoder, SantaCoder: GPT-2 with multi-query attention
        h = _need(cfg, "n_embd", "hidden_size", where=where)
        heads = _need(cfg, "n_head", "num_attention_heads", where=where)
        mqa = _flag(cfg, "multi_query", True)
        act = str(_opt(cfg, "activation_function", "gelu_pytorch_tanh"))
        return ModelSpec(
            name=name, family="gpt_bigcode", hidden=h, layers=_need(cfg, "n_layer", "num_hidden_layers", where=where),
            heads=heads, kv_heads=1 if mqa else heads, head_dim=h // heads, kv_width=h // heads if mqa else 0,
            intermediate=_opt_int(cfg, "n_inner", 4 * h), vocab=_need(cfg, "vocab_size", where=where),
            max_positions=_opt_int(cfg, "n_positions", 8192), embedding_size=h, fused_qkv=True, mask_buffer=True,
            tied=_flag(cfg, "tie_word_embeddings", True), attn_dropout=_rate(cfg, "attn_pdrop", 0.1),
            ffn="gelu-new" if act == "gelu_new" else "gelu", hidden_dropout=_rate(cfg, "resid_pdrop", 0.1),
            head="lm", source=source)
    if mtype == "gpt_neox":  # Pythia, GPT-NeoX-20B
        h = _need(cfg, "hidden_size", where=where)
        heads = _need(cfg, "num_attention_heads", where=where)
        return ModelSpec(
            name=name, family="gpt_neox", hidden=h, layers=_need(cfg, "num_hidden_layers", where=where), heads=heads,
            kv_heads=heads, head_dim=h // heads, intermediate=_need(cfg, "intermediate_size", where=where),
            vocab=_need(cfg, "vocab_size", where=where), max_positions=_opt_int(cfg, "max_position_embeddings", 2048),
            embedding_size=h, fused_qkv=True, positions="rotary",
            parallel_residual=_flag(cfg, "use_parallel_residual", True),
            tied=_flag(cfg, "tie_word_embeddings", False), qkv_bias=_flag(cfg, "attention_bias", True),
            attn_dropout=_rate(cfg, "attention_dropout", 0.0),
            hidden_dropout=_rate(cfg, "hidden_dropout", 0.0), ffn="gelu", head="lm", source=source)
    if mtype == "opt":
        h = _need(cfg, "hidden_size", where=where)
        heads = _need(cfg, "num_attention_heads", where=where)
        embed_proj = _opt_int(cfg, "word_embed_proj_dim", h)
        if embed_proj != h or not _flag(cfg, "do_layer_norm_before", True):
            raise EstimateError(_("{where}: OPT with a projected embedding or post-norm layers (opt-350m) is not "
                                  "supported (supported: OPT models with word_embed_proj_dim = hidden_size)").format(
                where=where))
        act = str(_opt(cfg, "activation_function", "relu"))
        return ModelSpec(
            name=name, family="opt", hidden=h, layers=_need(cfg, "num_hidden_layers", where=where), heads=heads,
            kv_heads=heads, head_dim=h // heads, intermediate=_need(cfg, "ffn_dim", "intermediate_size", where=where),
            vocab=_need(cfg, "vocab_size", where=where), max_positions=_opt_int(cfg, "max_position_embeddings", 2048),
            embedding_size=h, ffn="relu" if act == "relu" else "gelu", qkv_bias=_flag(cfg, "enable_bias", True),
            scaled_q=True, position_offset=2,
            tied=_flag(cfg, "tie_word_embeddings", True), attn_dropout=_rate(cfg, "attention_dropout", 0.0),
            hidden_dropout=_rate(cfg, "dropout", 0.1), head="lm", source=source)
    if mtype == "bloom":
        h = _need(cfg, "hidden_size", "n_embed", where=where)
        heads = _need(cfg, "n_head", "num_attention_heads", where=where)
        return ModelSpec(
            name=name, family="bloom", hidden=h, layers=_need(cfg, "n_layer", "num_hidden_layers", where=where),
            heads=heads, kv_heads=heads, head_dim=h // heads, intermediate=4 * h,
            vocab=_need(cfg, "vocab_size", where=where), max_positions=0, embedding_size=h, fused_qkv=True,
            positions="alibi", embed_norm=True, tied=_flag(cfg, "tie_word_embeddings", True), ffn="gelu",
            attn_dropout=_rate(cfg, "attention_dropout", 0.0),
            hidden_dropout=_rate(cfg, "hidden_dropout", 0.0), head="lm", source=source)
    if mtype in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma"):
        h = _need(cfg, "hidden_size", where=where)
        heads = _need(cfg, "num_attention_heads", where=where)
        act = str(_opt(cfg, "hidden_activation", None) or _opt(cfg, "hidden_act", "silu"))
        window = _opt(cfg, "sliding_window", 0) if mtype in ("mistral", "mixtral") or _opt(
            cfg, "use_sliding_window", False) else 0
        experts = _opt_int(cfg, "num_local_experts", 0, least=0) if mtype == "mixtral" else 0
        return ModelSpec(
            name=name, family=mtype, hidden=h, layers=_need(cfg, "num_hidden_layers", where=where), heads=heads,
            kv_heads=_opt_int(cfg, "num_key_value_heads", heads), head_dim=_opt_int(cfg, "head_dim", h // heads),
            intermediate=_need(cfg, "intermediate_size", where=where), vocab=_need(cfg, "vocab_size", where=where),
            max_positions=_opt_int(cfg, "max_position_embeddings", 4096), embedding_size=h,
            ffn="gated-gelu" if act.startswith("gelu") else "swiglu", positions="rotary",
            tied=_flag(cfg, "tie_word_embeddings", mtype == "gemma"),
            embedding_scale=mtype == "gemma", offset_norm=mtype == "gemma",
            qkv_bias=_flag(cfg, "attention_bias", mtype == "qwen2"), qk_norm=mtype == "qwen3",
            sliding_window=_whole("sliding_window", window or 0), experts=experts,
            top_k=_opt_int(cfg, "num_experts_per_tok", 2) if experts else 0,
            attn_dropout=_rate(cfg, "attention_dropout", 0.0), hidden_dropout=0.0, head="lm", source=source)
    if mtype in ("t5", "mt5"):
        h = _need(cfg, "d_model", where=where)
        layers = _need(cfg, "num_layers", where=where)
        proj = str(_opt(cfg, "feed_forward_proj", "relu"))
        return ModelSpec(
            name=name, family="t5", hidden=h, layers=layers, heads=_need(cfg, "num_heads", where=where),
            kv_heads=_need(cfg, "num_heads", where=where), head_dim=_need(cfg, "d_kv", where=where),
            intermediate=_need(cfg, "d_ff", where=where), vocab=_need(cfg, "vocab_size", where=where),
            decoder_layers=_opt_int(cfg, "num_decoder_layers", layers, least=0), embedding_size=h,
            encoder_decoder=True,
            ffn="gated-gelu" if proj.startswith("gated") else "relu",
            tied=_flag(cfg, "tie_word_embeddings", True), qkv_bias=False,
            attn_dropout=_rate(cfg, "dropout_rate", 0.1), hidden_dropout=_rate(cfg, "dropout_rate", 0.1),
            rel_buckets=_opt_int(cfg, "relative_attention_num_buckets", 32), head="lm", source=source)
    if mtype == "vit":
        h = _need(cfg, "hidden_size", where=where)
        heads = _need(cfg, "num_attention_heads", where=where)
        labels = _opt(cfg, "num_labels", None)
        if labels is None:
            id2label = cfg.get("id2label")
            labels = len(id2label) if isinstance(id2label, dict) and id2label else 1000
        return ModelSpec(
            name=name, family="vit", hidden=h, layers=_need(cfg, "num_hidden_layers", where=where), heads=heads,
            kv_heads=heads, head_dim=h // heads, intermediate=_need(cfg, "intermediate_size", where=where),
            image_size=_need(cfg, "image_size", where=where), patch_size=_need(cfg, "patch_size", where=where),
            channels=_opt_int(cfg, "num_channels", 3), embedding_size=h, patches=True,
            attn_dropout=_rate(cfg, "attention_probs_dropout_prob", 0.0),
            hidden_dropout=_rate(cfg, "hidden_dropout_prob", 0.0), num_labels=_whole("num_labels", labels, least=1),
            head="cls", source=source)
    known = ", ".join(SUPPORTED_TYPES)
    if not mtype:
        raise EstimateError(_("{where}: config has no 'model_type' (one of: {known})").format(where=where, known=known))
    raise UnknownFamily(_("{where}: model_type {type!r} is not supported (supported: {known}); for weights and model "
                          "states alone, give its parameter count instead: vram estimate 8B").format(
        where=where, type=mtype[:40], known=known), cfg, name)


# every model_type from_config reads (kept beside it; tests check each one is accepted)
SUPPORTED_TYPES = ("bert", "roberta", "xlm-roberta", "albert", "camembert", "electra", "distilbert", "gpt2",
                   "gpt_bigcode", "gpt_neox", "opt", "bloom", "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma",
                   "t5", "mt5", "vit")

_COUNT_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmbt])\s*$", re.I)
_WHOLE_RE = re.compile(r"^\s*([0-9]+)\s*$")  # a plain number of parameters: 15517456384
_COUNT_LIKE_RE = re.compile(r"^\s*[0-9][0-9.,_]*\s*[a-z]*\s*$", re.I)  # 7x, 1.5, 7,000: meant as a count
_SCALE = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
COUNT_FORMS = "a number with k, m, b or t (7b, 350m) or a whole number of parameters (15517456384)"


MAX_PARAMS = 1e15  # a quadrillion parameters: far past any model, well within floats


def parse_param_count(text: str) -> int | None:
    """'7b' -> 7_000_000_000, '350M' -> 350_000_000, '15517456384' -> itself; None if `text` is not
    a bare count."""
    m = _COUNT_RE.match(text)
    whole = _WHOLE_RE.match(text)
    if whole:
        count = float(whole.group(1))
    elif m:
        count = float(m.group(1)) * _SCALE[m.group(2).lower()]
    else:
        return None
    if not count <= MAX_PARAMS:  # inf from a 400-digit number, or simply more than any model
        raise EstimateError(_("{text}: more parameters than any model (at most {most:.0e})").format(
            text=text[:40] + ("…" if len(text) > 40 else ""), most=MAX_PARAMS), param="model")
    return int(count)


def resolve(model: str) -> ModelSpec:
    """A catalog name, a config.json file or a folder holding one, or a bare count like '7b'."""
    if not isinstance(model, str) or not model.strip():
        raise EstimateError(_("no model given (a catalog name, a config.json path, or a count like 7b)"))
    text = model.strip()
    count = parse_param_count(text)
    if count is not None:
        if count <= 0:
            raise EstimateError(_("{text!r}: the parameter count must be more than 0").format(text=text))
        return ModelSpec(name=text, family="params", params=count, source="count",
                         notes=(_("a bare parameter count: weights and model states only, no activations"),))
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.exists():
            raise EstimateError(_("{path}: no config.json in this folder").format(path=text))
    if path.exists():  # a FIFO or a device too: _read_config says what it is, never "no such file"
        try:
            data = _read_config(path)
        except OSError as e:
            raise EstimateError(_("{path}: not a readable JSON config ({error})").format(path=path, error=e)) from None
        return from_config(_parse_config(data, str(path)), name=str(path), source="config")
    key = _catalog_key(text)
    if key is not None:
        return from_config(catalog.MODELS[key], name=key, source="catalog")
    hub_id = _hub_id(text)
    cached = _from_hub_cache(text) if hub_id is not None or hub_cache.is_repo_id(text) else None
    if cached is not None:
        return cached
    if hub_id is not None:  # a Hugging Face id by the part after the slash: Llama-3.1-8B is llama-3.1-8b
        key = _catalog_key(hub_id)
        if key is not None:
            spec = from_config(catalog.MODELS[key], name=key, source="catalog")
            return replace(spec, notes=(*spec.notes, _("{text} read as the catalog's {key}").format(text=text,
                                                                                                   key=key)))
        raise EstimateError(_("{text!r} is not in the catalog{near} nor in the local Hugging Face cache ({cache}); "
                              "configs are read locally, never downloaded: give the path of its config.json, or "
                              "{count}").format(text=text, near=_near(hub_id.lower()), cache=hub_cache.hub_cache_dir(),
                                                count=_count_hint(hub_id)))
    if "/" in text or text.endswith(".json"):
        raise EstimateError(_("{path}: no such file (configs are read locally, never downloaded)").format(path=text))
    if _COUNT_LIKE_RE.match(text):
        raise EstimateError(_("{text!r} is not a parameter count: give {forms}").format(text=text[:40],
                                                                                         forms=COUNT_FORMS))
    raise EstimateError(_("unknown model {text!r}: not in the catalog{near}; give the path of its config.json, or "
                          "{count}").format(text=text, near=_near(text.lower()), count=_count_hint(text)))


def _parse_config(data: bytes, where: str) -> Any:
    try:
        return json.loads(data, parse_int=_parse_int, object_pairs_hook=_object)  # 10**5000 is no ValueError
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
        raise EstimateError(_("{path}: not a readable JSON config ({error})").format(path=where,
                                                                                      error=str(e)[:120])) from None
    except RecursionError:
        raise EstimateError(_("{path}: not a readable JSON config (nested too deeply)").format(path=where)) from None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object of the config; a key given twice is refused (json would keep the last one silently:
    a config with `"num_hidden_layers": 16` appended estimates another model)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key[:60]!r} is given twice")
        out[key] = value
    return out


def _from_hub_cache(repo_id: str) -> ModelSpec | None:
    """A Hub id's config from the local Hugging Face cache (hub_cache.py); None when it is not there."""
    try:
        found = hub_cache.read_cached_config(repo_id)
    except hub_cache.CacheError as e:
        raise EstimateError(f"{repo_id}: {e}") from None
    if found is None:
        return None
    spec = from_config(_parse_config(found.data, found.path), name=repo_id, source="hub cache")
    return replace(spec, notes=(*spec.notes, _("config from the local Hugging Face cache: {path}").format(
        path=found.path)))


def _catalog_key(text: str) -> str | None:
    """The catalog's name for `text`, case-insensitively, through its aliases; None if it has none."""
    key = text.strip().lower()
    key = catalog.ALIASES.get(key, key)
    return key if key in catalog.MODELS else None


def _hub_id(text: str) -> str | None:
    """The model part of a Hugging Face id 'org/Name' (one slash, no path syntax); None for a path."""
    if text.count("/") != 1 or text.startswith(("/", ".", "~")) or text.endswith((".json", "/")):
        return None
    org, name = text.split("/")
    return name if org and name and not Path(org).exists() else None


def _near(key: str) -> str:
    names = list(catalog.MODELS) + list(catalog.ALIASES)
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    # Translators: put right after "not in the catalog" in the unknown-model errors
    return (_(" (did you mean {names}?)").format(names=", ".join(close)) if close
            else _(" (vram estimate --list shows it)"))


_SIZE_IN_NAME_RE = re.compile(r"(?<![0-9a-z.])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])", re.IGNORECASE)


def _count_hint(name: str) -> str:
    """'a bare parameter count: vram estimate 8B', with the size the name gives where it gives one."""
    found = _SIZE_IN_NAME_RE.search(name)
    count = f"{found[1]}{found[2].upper()}" if found else "8B"
    return _("a bare parameter count for weights and model states alone: vram estimate {count}").format(count=count)


MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KiB; a large or endless file is not one


def _read_config(path: Path) -> bytes:
    """The file's bytes, bounded; never waiting on a FIFO put in its place. A symlink is followed:
    the user named it (Hugging Face's cache keeps each config.json as a link into its blobs)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(_("{path} is not a regular file").format(path=path))
        data = os.read(fd, MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise OSError(_("larger than {size} MiB: not a config.json").format(size=MAX_CONFIG_BYTES >> 20))
    return data


MODEL_KINDS = ("a catalog name, a config.json path, a count like 7b, a config dict, a transformers config "
               "(PretrainedConfig) or a ModelSpec")


def spec_of(model: object) -> ModelSpec:
    """The spec of whatever estimate(), plan() and the traced estimate are given as `model`: a
    ModelSpec; a string (resolve: catalog name, config.json, bare count); a config.json's dict; a
    transformers config (an object with to_dict() and model_type). A model itself is refused: its
    memory is measured (trace_memory), not estimated."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str):
        return resolve(model)
    if hasattr(model, "named_parameters"):  # torch.nn.Module, a transformers model
        raise EstimateError(_("an nn.Module is measured, not estimated: use vramkit.trace_memory(model, step_fn), or "
                            "pass model.config"), param="model")
    to_dict = getattr(model, "to_dict", None)
    if isinstance(model, dict) or (callable(to_dict) and getattr(model, "model_type", None)):
        cfg = model if isinstance(model, dict) else to_dict()  # type: ignore[misc]
        if not isinstance(cfg, dict):
            raise EstimateError(_("{type}.to_dict() gave no dict").format(type=type(model).__name__), param="model")
        names = (cfg.get("_name_or_path"), cfg.get("model_type"))  # a str: never a 5,000-digit int's
        name = next((v for v in names if isinstance(v, str) and v), "config")
        return from_config(cfg, name=name[:100], source="config")
    raise EstimateError(_("a model is {kinds}, not {type}").format(kinds=MODEL_KINDS, type=type(model).__name__),
                        param="model")


def typical_hidden(params: int) -> int:
    """The width of a typical decoder of `params` parameters (LLaMA-shaped: 12·layers·hidden² with
    layers = hidden / 128, as LLaMA-2 7B and 13B have), for the bounds a bare count has no shape for."""
    return max(64, int(round((params * 128 / 12) ** (1 / 3))))


# ---------------------------------------------------------------- parameter tensors

def param_shapes(spec: ModelSpec) -> list[tuple[str, tuple[int, ...], bool]]:
    """Every parameter tensor as (name, shape, is_matmul_weight), the way the Hugging Face model with
    its head holds them (ALBERT's shared layer once; a tied head not twice). `is_matmul_weight`
    marks what autocast casts to 16-bit (linear/conv weights and biases)."""
    if spec.bare:
        return [("params", (spec.params,), True)]
    h, i, v = spec.hidden, spec.intermediate, spec.vocab
    out: list[tuple[str, tuple[int, ...], bool]] = []

    def lin(name: str, n_in: int, n_out: int, bias: bool = True) -> None:
        out.append((f"{name}.weight", (n_out, n_in), True))
        if bias:
            out.append((f"{name}.bias", (n_out,), True))

    def norm(name: str, width: int, bias: bool = True) -> None:
        out.append((f"{name}.weight", (width,), False))
        if bias:
            out.append((f"{name}.bias", (width,), False))

    fam = spec.family
    if fam in ENCODERS:
        e = spec.embedding_size
        out.append(("embeddings.word", (v, e), False))
        out.append(("embeddings.position", (spec.max_positions, e), False))
        if spec.type_vocab:
            out.append(("embeddings.token_type", (spec.type_vocab, e), False))
        norm("embeddings.norm", e)
        if fam == "albert":
            lin("embeddings.mapping", e, h)
        for n in range(1 if spec.shared_layers else spec.layers):
            p = f"layer{n}"
            for proj in ("q", "k", "v", "o"):
                lin(f"{p}.attn.{proj}", h, h)
            norm(f"{p}.norm1", h)
            lin(f"{p}.ffn.up", h, i)
            lin(f"{p}.ffn.down", i, h)
            norm(f"{p}.norm2", h)
        if spec.head == "cls":
            lin("head.pooler", h, h)
            lin("head.classifier", h, spec.num_labels)
        else:
            lin("head.transform", h, e)
            norm("head.norm", e)
            out.append(("head.decoder.bias", (v,), True))  # the decoder weight is the word embedding
        return out
    if spec.arch == "gpt":
        out.append(("wte", (v, h), False))
        if spec.positions == "learned":  # OPT's table has 2 more rows (its positions start at 2)
            out.append(("wpe", (spec.max_positions + spec.position_offset, h), False))
        if spec.embed_norm:
            norm("embed_norm", h)
        kv = spec.kv_width or h  # GPT-BigCode's multi-query c_attn: q, then one head each of k and v
        for n in range(spec.layers):
            p = f"layer{n}"
            norm(f"{p}.norm1", h)
            if spec.fused_qkv:
                lin(f"{p}.attn.qkv", h, h + 2 * kv, spec.qkv_bias)
            else:
                for proj in ("q", "k", "v"):
                    lin(f"{p}.attn.{proj}", h, h, spec.qkv_bias)
            lin(f"{p}.attn.o", h, h)
            norm(f"{p}.norm2", h)
            lin(f"{p}.ffn.up", h, i)
            lin(f"{p}.ffn.down", i, h)
        norm("norm_f", h)
        if not spec.tied:
            lin("lm_head", h, v, False)
        return out
    if spec.arch == "llama":
        d, kv, a = spec.head_dim, spec.kv_heads, spec.heads
        out.append(("embed", (v, h), False))
        for n in range(spec.layers):
            p = f"layer{n}"
            norm(f"{p}.norm1", h, bias=False)
            lin(f"{p}.attn.q", h, a * d, spec.qkv_bias)
            lin(f"{p}.attn.k", h, kv * d, spec.qkv_bias)
            lin(f"{p}.attn.v", h, kv * d, spec.qkv_bias)
            if spec.qk_norm:
                norm(f"{p}.attn.q_norm", d, bias=False)
                norm(f"{p}.attn.k_norm", d, bias=False)
            lin(f"{p}.attn.o", a * d, h, False)
            norm(f"{p}.norm2", h, bias=False)
            if spec.moe:
                lin(f"{p}.ffn.router", h, spec.experts, False)
            for e in range(spec.experts or 1):
                x = f".expert{e}" if spec.moe else ""
                lin(f"{p}.ffn{x}.gate", h, i, False)
                lin(f"{p}.ffn{x}.up", h, i, False)
                lin(f"{p}.ffn{x}.down", i, h, False)
        norm("norm_f", h, bias=False)
        if not spec.tied:
            lin("lm_head", h, v, False)
        return out
    if spec.encoder_decoder:
        inner = spec.inner
        out.append(("shared", (v, h), False))

        def attn(p: str) -> None:
            for proj in ("q", "k", "v"):
                lin(f"{p}.{proj}", h, inner, False)
            lin(f"{p}.o", inner, h, False)

        def ffn(p: str) -> None:
            if spec.ffn == "gated-gelu":
                lin(f"{p}.gate", h, i, False)
            lin(f"{p}.up", h, i, False)
            lin(f"{p}.down", i, h, False)

        for stack, n_layers in (("encoder", spec.layers), ("decoder", spec.decoder_layers)):
            for n in range(n_layers):
                p = f"{stack}.layer{n}"
                norm(f"{p}.norm1", h, bias=False)
                attn(f"{p}.self")
                if n == 0:
                    out.append((f"{p}.self.rel_bias", (spec.rel_buckets, spec.heads), False))
                if stack == "decoder":
                    norm(f"{p}.norm_x", h, bias=False)
                    attn(f"{p}.cross")
                norm(f"{p}.norm2", h, bias=False)
                ffn(f"{p}.ffn")
            norm(f"{stack}.norm_f", h, bias=False)
        if not spec.tied:
            lin("lm_head", h, v, False)
        return out
    if spec.patches:
        n_patches = (spec.image_size // spec.patch_size) ** 2
        out.append(("patch.weight", (h, spec.channels, spec.patch_size, spec.patch_size), True))
        out.append(("patch.bias", (h,), True))
        out.append(("cls_token", (1, 1, h), False))
        out.append(("pos", (1, n_patches + 1, h), False))
        for n in range(spec.layers):
            p = f"layer{n}"
            norm(f"{p}.norm1", h)
            for proj in ("q", "k", "v", "o"):
                lin(f"{p}.attn.{proj}", h, h)
            norm(f"{p}.norm2", h)
            lin(f"{p}.ffn.up", h, i)
            lin(f"{p}.ffn.down", i, h)
        norm("norm_f", h)
        lin("classifier", h, spec.num_labels)
        return out
    raise EstimateError(f"unknown family {fam!r}")  # pragma: no cover - from_config guards it


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def param_count(spec: ModelSpec) -> int:
    return sum(numel(s) for _n, s, _c in param_shapes(spec))
