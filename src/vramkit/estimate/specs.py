"""Model specs: the few numbers memory depends on, from a Hugging Face config.json, the built-in
catalog, or a bare parameter count ("7b", "350M": weights and model states only).

No torch, no download: a config is read as JSON.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import RequestError
from . import catalog


class EstimateError(RequestError):
    """Bad input for an estimate (unknown model, config missing a key, batch 0, ...): one line;
    `param` names the Setup field when one is to blame."""


FAMILIES = ("bert", "roberta", "distilbert", "albert", "gpt2", "llama", "t5", "vit")
ENCODERS = ("bert", "roberta", "distilbert", "albert")


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
    params: int = 0  # only for family "params"
    source: str = "catalog"
    notes: tuple[str, ...] = field(default=())

    @property
    def bare(self) -> bool:
        return self.family == "params"

    @property
    def pre_norm(self) -> bool:
        return self.family in ("gpt2", "llama", "t5", "vit")

    @property
    def rmsnorm(self) -> bool:
        return self.family in ("llama", "t5")

    @property
    def inner(self) -> int:
        """Width of the attention heads together (T5 may differ from hidden)."""
        return self.heads * self.head_dim

    @property
    def causal(self) -> bool:
        return self.family in ("gpt2", "llama")

    def with_head(self, head: str | None) -> ModelSpec:
        if head is None or head == self.head or self.bare:
            return self
        if head == "cls" and self.family in ("gpt2", "llama", "t5"):
            raise EstimateError(f"{self.name}: only the language-model head (lm) is modelled for {self.family}",
                                param="head")
        if head == "lm" and self.family == "vit":
            raise EstimateError(f"{self.name}: a ViT has no language-model head (use cls)", param="head")
        return replace(self, head=head)

    def seq_for_image(self, image_size: int | None) -> int:
        size = image_size or self.image_size
        return (size // self.patch_size) ** 2 + 1


def _need(cfg: dict[str, Any], *keys: str, where: str) -> int:
    for key in keys:
        if key in cfg and cfg[key] is not None:
            value = cfg[key]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise EstimateError(f"{where}: {key} must be a positive number, not {value!r}")
            return int(value)
    raise EstimateError(f"{where}: config is missing {keys[0]!r} (needed for a {cfg.get('model_type')} model)")


def _opt(cfg: dict[str, Any], key: str, default: Any) -> Any:
    value = cfg.get(key)
    return default if value is None else value


def from_config(cfg: dict[str, Any], name: str = "config", source: str = "config") -> ModelSpec:
    """A spec from the dict of a Hugging Face config.json."""
    if not isinstance(cfg, dict):
        raise EstimateError(f"{name}: a config must be a JSON object")
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
            max_positions=int(_opt(cfg, "max_position_embeddings", 512)),
            type_vocab=int(_opt(cfg, "type_vocab_size", 2)),
            embedding_size=int(_opt(cfg, "embedding_size", h)) if family == "albert" else h,
            shared_layers=family == "albert" and int(_opt(cfg, "num_hidden_groups", 1)) == 1,
            ffn="gelu", attn_dropout=float(_opt(cfg, "attention_probs_dropout_prob", 0.1)),
            hidden_dropout=float(_opt(cfg, "hidden_dropout_prob", 0.1)),
            num_labels=int(_opt(cfg, "num_labels", 2)), head="cls", source=source)
    if mtype == "distilbert":
        h = _need(cfg, "dim", "hidden_size", where=where)
        heads = _need(cfg, "n_heads", "num_attention_heads", where=where)
        return ModelSpec(
            name=name, family="distilbert", hidden=h, layers=_need(cfg, "n_layers", where=where), heads=heads,
            kv_heads=heads, head_dim=h // heads, intermediate=_need(cfg, "hidden_dim", where=where),
            vocab=_need(cfg, "vocab_size", where=where),
            max_positions=int(_opt(cfg, "max_position_embeddings", 512)), type_vocab=0, embedding_size=h,
            attn_dropout=float(_opt(cfg, "attention_dropout", 0.1)), hidden_dropout=float(_opt(cfg, "dropout", 0.1)),
            num_labels=int(_opt(cfg, "num_labels", 2)), head="cls", source=source)
    if mtype == "gpt2":
        h = _need(cfg, "n_embd", "hidden_size", where=where)
        heads = _need(cfg, "n_head", "num_attention_heads", where=where)
        return ModelSpec(
            name=name, family="gpt2", hidden=h, layers=_need(cfg, "n_layer", "num_hidden_layers", where=where),
            heads=heads, kv_heads=heads, head_dim=h // heads, intermediate=int(_opt(cfg, "n_inner", 4 * h)),
            vocab=_need(cfg, "vocab_size", where=where), max_positions=int(_opt(cfg, "n_positions", 1024)),
            embedding_size=h, tied=True, attn_dropout=float(_opt(cfg, "attn_pdrop", 0.1)),
            ffn="gelu-new" if _opt(cfg, "activation_function", "gelu_new") == "gelu_new" else "gelu",
            hidden_dropout=float(_opt(cfg, "resid_pdrop", 0.1)), head="lm", source=source)
    if mtype in ("llama", "mistral", "qwen2", "qwen3", "gemma", "mixtral_dense"):
        h = _need(cfg, "hidden_size", where=where)
        heads = _need(cfg, "num_attention_heads", where=where)
        return ModelSpec(
            name=name, family="llama", hidden=h, layers=_need(cfg, "num_hidden_layers", where=where), heads=heads,
            kv_heads=int(_opt(cfg, "num_key_value_heads", heads)), head_dim=int(_opt(cfg, "head_dim", h // heads)),
            intermediate=_need(cfg, "intermediate_size", where=where), vocab=_need(cfg, "vocab_size", where=where),
            max_positions=int(_opt(cfg, "max_position_embeddings", 4096)), embedding_size=h, ffn="swiglu",
            tied=bool(_opt(cfg, "tie_word_embeddings", False)),
            qkv_bias=bool(_opt(cfg, "attention_bias", mtype == "qwen2")),
            attn_dropout=float(_opt(cfg, "attention_dropout", 0.0)), hidden_dropout=0.0, head="lm", source=source)
    if mtype in ("t5", "mt5"):
        h = _need(cfg, "d_model", where=where)
        layers = _need(cfg, "num_layers", where=where)
        proj = str(_opt(cfg, "feed_forward_proj", "relu"))
        return ModelSpec(
            name=name, family="t5", hidden=h, layers=layers, heads=_need(cfg, "num_heads", where=where),
            kv_heads=_need(cfg, "num_heads", where=where), head_dim=_need(cfg, "d_kv", where=where),
            intermediate=_need(cfg, "d_ff", where=where), vocab=_need(cfg, "vocab_size", where=where),
            decoder_layers=int(_opt(cfg, "num_decoder_layers", layers)), embedding_size=h,
            ffn="gated-gelu" if proj.startswith("gated") else "relu",
            tied=bool(_opt(cfg, "tie_word_embeddings", True)), qkv_bias=False,
            attn_dropout=float(_opt(cfg, "dropout_rate", 0.1)), hidden_dropout=float(_opt(cfg, "dropout_rate", 0.1)),
            rel_buckets=int(_opt(cfg, "relative_attention_num_buckets", 32)), head="lm", source=source)
    if mtype == "vit":
        h = _need(cfg, "hidden_size", where=where)
        heads = _need(cfg, "num_attention_heads", where=where)
        labels = cfg.get("num_labels") or len(cfg.get("id2label") or {}) or 1000
        return ModelSpec(
            name=name, family="vit", hidden=h, layers=_need(cfg, "num_hidden_layers", where=where), heads=heads,
            kv_heads=heads, head_dim=h // heads, intermediate=_need(cfg, "intermediate_size", where=where),
            image_size=_need(cfg, "image_size", where=where), patch_size=_need(cfg, "patch_size", where=where),
            channels=int(_opt(cfg, "num_channels", 3)), embedding_size=h,
            attn_dropout=float(_opt(cfg, "attention_probs_dropout_prob", 0.0)),
            hidden_dropout=float(_opt(cfg, "hidden_dropout_prob", 0.0)), num_labels=int(labels), head="cls",
            source=source)
    known = ", ".join(SUPPORTED_TYPES)
    if not mtype:
        raise EstimateError(f"{where}: config has no 'model_type' (one of: {known})")
    raise EstimateError(f"{where}: model_type {mtype!r} is not supported (supported: {known})")


# every model_type from_config reads (kept beside it; tests check each one is accepted)
SUPPORTED_TYPES = ("bert", "roberta", "xlm-roberta", "albert", "camembert", "electra", "distilbert", "gpt2",
                   "llama", "mistral", "qwen2", "qwen3", "gemma", "mixtral_dense", "t5", "mt5", "vit")

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
        raise EstimateError(f"{text[:40]}{'…' if len(text) > 40 else ''}: more parameters than any model "
                            f"(at most {MAX_PARAMS:.0e})", param="model")
    return int(count)


def resolve(model: str) -> ModelSpec:
    """A catalog name, a config.json file or a folder holding one, or a bare count like '7b'."""
    if not isinstance(model, str) or not model.strip():
        raise EstimateError("no model given (a catalog name, a config.json path, or a count like 7b)")
    text = model.strip()
    count = parse_param_count(text)
    if count is not None:
        if count <= 0:
            raise EstimateError(f"{text!r}: the parameter count must be more than 0")
        return ModelSpec(name=text, family="params", params=count, source="count",
                         notes=("a bare parameter count: weights and model states only, no activations",))
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise EstimateError(f"{text}: no config.json in this folder")
    if path.is_file():
        try:
            cfg = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise EstimateError(f"{path}: not a readable JSON config ({e})") from None
        return from_config(cfg, name=str(path), source="config")
    key = text.lower()
    key = catalog.ALIASES.get(key, key)
    if key in catalog.MODELS:
        return from_config(catalog.MODELS[key], name=key, source="catalog")
    if "/" in text or text.endswith(".json"):
        raise EstimateError(f"{text}: no such file (configs are read locally, never downloaded)")
    if _COUNT_LIKE_RE.match(text):
        raise EstimateError(f"{text[:40]!r} is not a parameter count: give {COUNT_FORMS}")
    names = list(catalog.MODELS) + list(catalog.ALIASES)
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see 'vram estimate --list'"
    raise EstimateError(f"unknown model {text!r}{hint}")


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
    if fam == "gpt2":
        out.append(("wte", (v, h), False))
        out.append(("wpe", (spec.max_positions, h), False))
        for n in range(spec.layers):
            p = f"layer{n}"
            norm(f"{p}.norm1", h)
            lin(f"{p}.attn.qkv", h, 3 * h)
            lin(f"{p}.attn.o", h, h)
            norm(f"{p}.norm2", h)
            lin(f"{p}.ffn.up", h, i)
            lin(f"{p}.ffn.down", i, h)
        norm("norm_f", h)
        return out
    if fam == "llama":
        d, kv, a = spec.head_dim, spec.kv_heads, spec.heads
        out.append(("embed", (v, h), False))
        for n in range(spec.layers):
            p = f"layer{n}"
            norm(f"{p}.norm1", h, bias=False)
            lin(f"{p}.attn.q", h, a * d, spec.qkv_bias)
            lin(f"{p}.attn.k", h, kv * d, spec.qkv_bias)
            lin(f"{p}.attn.v", h, kv * d, spec.qkv_bias)
            lin(f"{p}.attn.o", a * d, h, False)
            norm(f"{p}.norm2", h, bias=False)
            lin(f"{p}.ffn.gate", h, i, False)
            lin(f"{p}.ffn.up", h, i, False)
            lin(f"{p}.ffn.down", i, h, False)
        norm("norm_f", h, bias=False)
        if not spec.tied:
            lin("lm_head", h, v, False)
        return out
    if fam == "t5":
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
    if fam == "vit":
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
    return sum(numel(s) for _, s, _ in param_shapes(spec))
