"""Small reference PyTorch implementations of each family, built from a ModelSpec with random
weights, written op for op like the Hugging Face eager code (so the tensors autograd saves are
the ones real models save). Used by the traced estimator; imports torch, so import it lazily.
"""
# nn.Module and TorchFunctionMode are Any here (torch is not analysed), so subclassing them is allowed:
# mypy: allow-subclassing-any

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .formulas import UPCAST_SOFTMAX
from .specs import ENCODERS, ModelSpec


class Options:
    def __init__(self, mixed: bool = False, flash: bool = False, checkpointing: bool = False,
                 cache_views: bool = False) -> None:
        self.mixed = mixed  # under autocast: norms and softmax in fp32, as CUDA autocast runs them
        self.flash = flash
        self.checkpointing = checkpointing
        self.cache_views = cache_views  # the KV cache keeps k and v as computed (transformers < 4.54)


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout as CUDA runs it (native_dropout, a 1-byte mask), also when recomputed under
    checkpointing, where the tracer's F.dropout redirect is not active."""
    if not training or p <= 0:
        return x
    return torch.native_dropout(x, p, True)[0]


class LayerNorm(nn.LayerNorm):
    def __init__(self, width: int, opt: Options, eps: float = 1e-12) -> None:
        super().__init__(width, eps=eps)
        self.opt = opt

    def forward(self, x: Any) -> Any:
        if self.opt.mixed:  # CUDA autocast runs layer_norm in fp32
            x = x.float()
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class LlamaRMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: Any) -> Any:
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


class GemmaRMSNorm(LlamaRMSNorm):
    """Gemma's: normalised in fp32, scaled by (1 + weight) in fp32, then cast back."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__(width, eps)
        nn.init.zeros_(self.weight)

    def forward(self, x: Any) -> Any:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class T5LayerNorm(LlamaRMSNorm):
    def forward(self, x: Any) -> Any:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


def _norm(spec: ModelSpec, width: int, opt: Options) -> nn.Module:
    if spec.offset_norm:
        return GemmaRMSNorm(width)
    if spec.arch == "llama":
        return LlamaRMSNorm(width)
    if spec.encoder_decoder:
        return T5LayerNorm(width)
    return LayerNorm(width, opt, eps=1e-5 if spec.arch == "gpt" else 1e-12)


def _rotate_half(x: Any) -> Any:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, opt: Options, causal: bool = False) -> None:
        super().__init__()
        self.spec, self.opt, self.causal = spec, opt, causal
        h, d, a, kv = spec.hidden, spec.head_dim, spec.heads, spec.kv_heads
        bias = spec.qkv_bias
        if spec.fused_qkv:
            self.kv_width = spec.kv_width or h
            self.qkv = nn.Linear(h, h + 2 * self.kv_width, bias=bias)
        else:
            self.q = nn.Linear(h, a * d, bias=bias)
            self.k = nn.Linear(h, kv * d, bias=bias)
            self.v = nn.Linear(h, kv * d, bias=bias)
        if spec.qk_norm:  # Qwen3: RMSNorm over each head of q and k
            self.q_norm = LlamaRMSNorm(d)
            self.k_norm = LlamaRMSNorm(d)
        self.o = nn.Linear(a * d, h, bias=spec.arch not in ("llama", "t5"))

    def forward(self, x: Any, kv_input: Any = None, bias: Any = None, rope: Any = None, cache: Any = None) -> Any:
        spec = self.spec
        b, s, _ = x.shape
        a, kv, d = spec.heads, spec.kv_heads, spec.head_dim
        if spec.fused_qkv:
            q, k, v = self.qkv(x).split((spec.hidden, self.kv_width, self.kv_width), dim=2)
        else:
            src = x if kv_input is None else kv_input
            q, k, v = self.q(x), self.k(src), self.v(src)
        sk = k.shape[1]
        if spec.kv_width and not self.opt.flash:
            return self.o(self._multi_query(q, k, v, bias))
        q = q.view(b, s, a, d)
        k = k.view(b, sk, kv, d)
        if spec.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        v = v.view(b, sk, kv, d).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        if cache is not None:
            # transformers >= 4.54 torch.cat's them into the cache's own tensors; before, it kept them as
            # computed (views, for a fused qkv projection, of its whole output)
            cache.append((k, v) if self.opt.cache_views else (k.clone(), v.clone()))
        if kv != a:  # repeat_kv, as HF does before the matmuls
            k = k[:, :, None].expand(b, kv, a // kv, sk, d).reshape(b, a, sk, d)
            v = v[:, :, None].expand(b, kv, a // kv, sk, d).reshape(b, a, sk, d)
        p_drop = spec.attn_dropout if self.training else 0.0
        if self.opt.flash:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=None if bias is None else bias.to(q.dtype),
                                                 is_causal=self.causal and bias is None,
                                                 scale=1.0 if spec.encoder_decoder else None)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2))
            if not spec.encoder_decoder:
                scores = scores / math.sqrt(d)
            if bias is not None:
                scores = scores + bias.to(scores.dtype)
            elif self.causal:
                mask = torch.full((s, sk), float("-inf"), device=x.device).triu(1)
                scores = scores + mask.to(scores.dtype)
            upcast = self.opt.mixed or spec.arch in ("llama", "t5") or spec.family in UPCAST_SOFTMAX
            probs = F.softmax(scores, dim=-1, dtype=torch.float32) if upcast else F.softmax(scores, dim=-1)
            probs = _dropout(probs.to(v.dtype), p_drop, self.training)
            ctx = torch.matmul(probs, v)
        ctx = ctx.transpose(1, 2).reshape(b, s, a * d)
        return self.o(ctx)

    def _multi_query(self, q: Any, k: Any, v: Any, bias: Any) -> Any:
        """GPT-BigCode's multi-query attention, as HF writes it: the heads of q stacked into one
        matrix against the one k and v head, no copies of k and v per head."""
        spec = self.spec
        b, s, _ = q.shape
        a, d, sk = spec.heads, spec.head_dim, k.shape[1]
        scores = torch.bmm(q.reshape(b, s * a, d), k.transpose(1, 2)) / math.sqrt(d)
        scores = scores.view(b, s, a, sk)
        if bias is not None:
            scores = scores + bias.to(scores.dtype)
        elif self.causal:
            scores = scores + torch.full((s, 1, sk), float("-inf"), device=q.device).triu(1).to(scores.dtype)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
        probs = _dropout(probs, spec.attn_dropout if self.training else 0.0, self.training)
        return torch.bmm(probs.view(b, s * a, sk), v).view(b, s, a * d)


def _gelu_new(x: Any, mixed: bool) -> Any:
    """HF's NewGELUActivation (GPT-2's gelu_new), op for op: it keeps tanh's output, 1 + tanh and
    0.5·x for backward, which F.gelu does not. CUDA autocast runs pow in fp32 (a kept fp32 copy of
    x); CPU autocast does not, hence the explicit cast."""
    cube = torch.pow(x.float() if mixed else x, 3.0)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * cube)))


class MixtureOfExperts(nn.Module):
    """Mixtral's sparse block: a router, every expert's weights, each token through top_k experts.
    Routing is data-dependent, which fake tensors cannot follow: tokens go round-robin (token t to
    experts t, t+1, ... mod E), the balanced routing the estimate assumes; the tensors each expert
    keeps are those of HF's loop (an indexed copy of its tokens, its weighted output)."""

    def __init__(self, spec: ModelSpec, opt: Options) -> None:
        super().__init__()
        self.spec = spec
        self.router = nn.Linear(spec.hidden, spec.experts, bias=False)
        self.experts = nn.ModuleList([FeedForward(spec, opt) for _ in range(spec.experts)])

    def forward(self, x: Any) -> Any:
        spec = self.spec
        b, s, h = x.shape
        flat = x.reshape(-1, h)
        weights = F.softmax(self.router(flat), dim=1, dtype=torch.float32)
        top, _ = torch.topk(weights, spec.top_k, dim=-1)
        top = (top / top.sum(dim=-1, keepdim=True)).to(flat.dtype)
        out = torch.zeros_like(flat)
        tokens = flat.shape[0]
        for e, expert in enumerate(self.experts):
            for j in range(spec.top_k):
                idx = torch.arange((e - j) % spec.experts, tokens, spec.experts, device=x.device)
                y = expert(flat[idx]) * top[idx, j, None]
                out = out.index_add(0, idx, y.to(out.dtype))
        return out.reshape(b, s, h)


class FeedForward(nn.Module):
    def __init__(self, spec: ModelSpec, opt: Options) -> None:
        super().__init__()
        self.spec, self.mixed = spec, opt.mixed
        h, i = spec.hidden, spec.intermediate
        bias = spec.arch not in ("llama", "t5")
        if spec.ffn in ("swiglu", "gated-gelu"):
            self.gate = nn.Linear(h, i, bias=bias)
        self.up = nn.Linear(h, i, bias=bias)
        self.down = nn.Linear(i, h, bias=bias)

    def forward(self, x: Any) -> Any:
        spec = self.spec
        if spec.ffn == "swiglu":
            y = F.silu(self.gate(x)) * self.up(x)
        elif spec.ffn == "gated-gelu":
            y = F.gelu(self.gate(x), approximate="tanh") * self.up(x)
        elif spec.ffn == "gelu-new":
            y = _gelu_new(self.up(x), self.mixed)
        elif spec.ffn == "relu":
            y = F.relu(self.up(x))
        else:
            y = F.gelu(self.up(x), approximate="tanh" if spec.arch == "gpt" else "none")
        if spec.encoder_decoder:
            y = _dropout(y, spec.hidden_dropout, self.training)
        return self.down(y)


class Layer(nn.Module):
    def __init__(self, spec: ModelSpec, opt: Options, causal: bool = False, cross: bool = False) -> None:
        super().__init__()
        self.spec = spec
        self.norm1 = _norm(spec, spec.hidden, opt)
        self.attn = Attention(spec, opt, causal)
        if cross:
            self.norm_x = _norm(spec, spec.hidden, opt)
            self.cross = Attention(spec, opt)
        self.norm2 = _norm(spec, spec.hidden, opt)
        self.ffn: nn.Module = MixtureOfExperts(spec, opt) if spec.moe else FeedForward(spec, opt)

    def forward(self, x: Any, enc: Any = None, bias: Any = None, rope: Any = None, cache: Any = None) -> Any:
        p = self.spec.hidden_dropout if self.training else 0.0
        if not self.spec.pre_norm:  # BERT family: post-LN
            x = self.norm1(_dropout(self.attn(x), p, self.training) + x)
            return self.norm2(_dropout(self.ffn(x), p, self.training) + x)
        if self.spec.parallel_residual:  # GPT-NeoX: attention and MLP both read x
            attn = _dropout(self.attn(self.norm1(x), bias=bias, rope=rope, cache=cache), p, self.training)
            return x + attn + _dropout(self.ffn(self.norm2(x)), p, self.training)
        x = x + _dropout(self.attn(self.norm1(x), bias=bias, rope=rope, cache=cache), p, self.training)
        if enc is not None:
            x = x + _dropout(self.cross(self.norm_x(x), kv_input=enc), p, self.training)
        return x + _dropout(self.ffn(self.norm2(x)), p, self.training)


class Stack(nn.Module):
    def __init__(self, spec: ModelSpec, opt: Options, n: int, causal: bool = False, cross: bool = False) -> None:
        super().__init__()
        self.opt = opt
        if spec.shared_layers:
            shared = Layer(spec, opt)
            self.layers = nn.ModuleList([shared])
            self.order = [0] * n
        else:
            self.layers = nn.ModuleList([Layer(spec, opt, causal, cross) for _ in range(n)])
            self.order = list(range(n))

    def forward(self, x: Any, enc: Any = None, bias: Any = None, rope: Any = None, cache: Any = None) -> Any:
        for idx in self.order:
            layer = self.layers[idx]
            if self.opt.checkpointing and self.training:
                x = checkpoint(layer, x, enc, bias, rope, None, use_reentrant=False)
            else:
                x = layer(x, enc, bias, rope, cache)
        return x


def _ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


class EncoderModel(nn.Module):
    """BERT, RoBERTa, DistilBERT, ALBERT, with a classification or masked-LM head."""

    def __init__(self, spec: ModelSpec, opt: Options) -> None:
        super().__init__()
        self.spec = spec
        e, h = spec.embedding_size, spec.hidden
        self.word = nn.Embedding(spec.vocab, e)
        self.position = nn.Embedding(spec.max_positions, e)
        self.token_type = nn.Embedding(spec.type_vocab, e) if spec.type_vocab else None
        self.norm = LayerNorm(e, opt)
        self.mapping = nn.Linear(e, h) if spec.family == "albert" else None
        self.stack = Stack(spec, opt, spec.layers)
        if spec.head == "cls":
            self.pooler = nn.Linear(h, h)
            self.classifier = nn.Linear(h, spec.num_labels)
        else:
            self.transform = nn.Linear(h, e)
            self.head_norm = LayerNorm(e, opt)
            self.decoder_bias = nn.Parameter(torch.zeros(spec.vocab))

    def forward(self, ids: Any, labels: Any, token_types: Any = None) -> Any:
        spec = self.spec
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.word(ids) + self.position(pos)
        if self.token_type is not None:
            x = x + self.token_type(token_types)
        x = _dropout(self.norm(x), spec.hidden_dropout, self.training)
        if self.mapping is not None:
            x = self.mapping(x)
        x = self.stack(x)
        if spec.head == "cls":
            pooled = torch.tanh(self.pooler(x[:, 0]))
            logits = self.classifier(_dropout(pooled, spec.hidden_dropout, self.training))
            return _ce(logits, labels)
        y = self.head_norm(F.gelu(self.transform(x)))
        logits = F.linear(y, self.word.weight, self.decoder_bias)
        return _ce(logits, labels)


class DecoderModel(nn.Module):
    """GPT-2-like (GPT-BigCode, GPT-NeoX, OPT, BLOOM) and LLaMA-like (Mistral, Mixtral, Qwen, Gemma)
    causal LMs."""

    def __init__(self, spec: ModelSpec, opt: Options) -> None:
        super().__init__()
        self.spec = spec
        h = spec.hidden
        self.embed = nn.Embedding(spec.vocab, h)
        self.offset = spec.position_offset  # OPT's positions start at 2
        learned = spec.arch == "gpt" and spec.positions == "learned"
        self.wpe = nn.Embedding(spec.max_positions + self.offset, h) if learned else None
        self.embed_norm = _norm(spec, h, opt) if spec.embed_norm else None
        self.stack = Stack(spec, opt, spec.layers, causal=True)
        self.norm_f = _norm(spec, h, opt)
        self.lm_head = None if spec.tied else nn.Linear(h, spec.vocab, bias=False)

    def _rope(self, s: int, device: Any) -> Any:
        d = self.spec.head_dim
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device).float() / d))
        freqs = torch.outer(torch.arange(s, device=device).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[None, None], emb.sin()[None, None]

    def _alibi(self, s: int, device: Any) -> Any:
        """BLOOM's ALiBi: a per-head linear bias on the scores, with the causal mask."""
        a = self.spec.heads
        slopes = 2.0 ** (-8.0 * torch.arange(1, a + 1, device=device).float() / a)
        bias = slopes[:, None, None] * torch.arange(s, device=device).float()[None, None, :]
        return (bias + torch.full((s, s), float("-inf"), device=device).triu(1))[None]

    def forward(self, ids: Any, labels: Any = None, cache: Any = None) -> Any:
        spec = self.spec
        s = ids.shape[1]
        x = self.embed(ids)
        if spec.embedding_scale:  # scaled by sqrt(hidden), in the embedding's dtype
            x = x * torch.tensor(spec.hidden ** 0.5, dtype=x.dtype)
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        rope = bias = None
        if self.wpe is not None:
            x = _dropout(x + self.wpe(torch.arange(s, device=ids.device) + self.offset), spec.hidden_dropout,
                         self.training)
        elif spec.positions == "alibi":
            bias = self._alibi(s, ids.device)
        else:
            rope = self._rope(s, ids.device)
        x = self.stack(x, bias=bias, rope=rope, cache=cache)
        x = self.norm_f(x)
        if labels is None:  # inference: logits of the last token only
            x = x[:, -1:]
        logits = F.linear(x, self.embed.weight) if self.lm_head is None else self.lm_head(x)
        return _ce(logits, labels) if labels is not None else logits.float()


def _t5_buckets(q_len: int, k_len: int, num_buckets: int, bidirectional: bool, device: Any) -> torch.Tensor:
    ctx = torch.arange(q_len, device=device)[:, None]
    mem = torch.arange(k_len, device=device)[None, :]
    rel = mem - ctx
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).to(torch.long) * num_buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    small = rel < max_exact
    large = max_exact + (torch.log(rel.float().clamp(min=1) / max_exact) / math.log(128 / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(small, rel, large)


class T5Model(nn.Module):
    def __init__(self, spec: ModelSpec, opt: Options) -> None:
        super().__init__()
        self.spec = spec
        h = spec.hidden
        self.shared = nn.Embedding(spec.vocab, h)
        self.enc_bias = nn.Embedding(spec.rel_buckets, spec.heads)
        self.dec_bias = nn.Embedding(spec.rel_buckets, spec.heads)
        self.encoder = Stack(spec, opt, spec.layers)
        self.decoder = Stack(spec, opt, spec.decoder_layers, causal=True, cross=True)
        self.enc_norm = T5LayerNorm(h)
        self.dec_norm = T5LayerNorm(h)
        self.lm_head = None if spec.tied else nn.Linear(h, spec.vocab, bias=False)

    def _bias(self, table: nn.Embedding, s: int, bidirectional: bool, device: Any) -> Any:
        buckets = _t5_buckets(s, s, self.spec.rel_buckets, bidirectional, device)
        bias = table(buckets).permute(2, 0, 1)[None]
        if not bidirectional:
            bias = bias + torch.full((s, s), float("-inf"), device=device).triu(1)
        return bias

    def forward(self, ids: Any, labels: Any, dec_ids: Any = None) -> Any:
        spec = self.spec
        p = spec.hidden_dropout if self.training else 0.0
        x = _dropout(self.shared(ids), p, self.training)
        x = self.encoder(x, bias=self._bias(self.enc_bias, ids.shape[1], True, ids.device))
        enc = _dropout(self.enc_norm(x), p, self.training)
        dec_ids = labels if dec_ids is None else dec_ids
        y = _dropout(self.shared(dec_ids), p, self.training)
        y = self.decoder(y, enc=enc, bias=self._bias(self.dec_bias, dec_ids.shape[1], False, ids.device))
        y = _dropout(self.dec_norm(y), p, self.training)
        if self.lm_head is None:
            y = y * (spec.hidden ** -0.5)
            logits = F.linear(y, self.shared.weight)
        else:
            logits = self.lm_head(y)
        return _ce(logits, labels)


class ViTModel(nn.Module):
    def __init__(self, spec: ModelSpec, opt: Options) -> None:
        super().__init__()
        self.spec = spec
        h = spec.hidden
        n = (spec.image_size // spec.patch_size) ** 2
        self.patch = nn.Conv2d(spec.channels, h, spec.patch_size, stride=spec.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, h))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, h))
        self.stack = Stack(spec, opt, spec.layers)
        self.norm_f = LayerNorm(h, opt)
        self.classifier = nn.Linear(h, spec.num_labels)

    def forward(self, pixels: Any, labels: Any) -> Any:
        b = pixels.shape[0]
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(b, -1, -1).to(x.dtype), x], dim=1) + self.pos
        x = _dropout(x, self.spec.hidden_dropout, self.training)
        x = self.norm_f(self.stack(x))
        return _ce(self.classifier(x[:, 0]), labels)


def build(spec: ModelSpec, opt: Options) -> nn.Module:
    if spec.family in ENCODERS:
        return EncoderModel(spec, opt)
    if spec.arch in ("gpt", "llama"):
        return DecoderModel(spec, opt)
    if spec.encoder_decoder:
        return T5Model(spec, opt)
    if spec.patches:
        return ViTModel(spec, opt)
    raise ValueError(f"no reference model for {spec.family!r}")


def batch_for(spec: ModelSpec, b: int, s: int, device: Any = None, dtype: Any = torch.float32,
              s_dec: int | None = None) -> dict[str, Any]:
    """Random inputs of the right shape for one step (`s_dec`: T5's decoder length, default `s`)."""
    if spec.patches:
        size = spec.image_size
        return {"pixels": torch.randn(b, spec.channels, size, size, device=device, dtype=dtype),
                "labels": torch.randint(0, spec.num_labels, (b,), device=device)}
    ids = torch.randint(0, spec.vocab, (b, s), device=device)
    if spec.family in ENCODERS:
        out = {"ids": ids, "labels": torch.randint(0, spec.num_labels if spec.head == "cls" else spec.vocab,
                                                   (b,) if spec.head == "cls" else (b, s), device=device)}
        if spec.type_vocab:
            out["token_types"] = torch.zeros(b, s, dtype=torch.long, device=device)
        return out
    return {"ids": ids, "labels": torch.randint(0, spec.vocab, (b, s_dec or s), device=device)}


def run_step(net: nn.Module, spec: ModelSpec, setup: Any, seq: int, optimizer: Any, *, mixed: bool, low: Any,
             pixel_dtype: Any, device: Any = None) -> None:
    """One step as the estimator models it: a training step (forward under autocast when mixed,
    backward, optimizer step, zero_grad) per `setup`, or an inference forward. The traced estimator
    runs it on fake CPU tensors; scripts/estimate_check.py runs the same step on a real GPU."""
    if setup.mode == "infer":
        with torch.no_grad():
            batch = batch_for(spec, setup.batch, seq, device=device, dtype=pixel_dtype)
            if spec.arch in ("gpt", "llama"):
                cache: list[Any] = []
                net(batch["ids"], cache=cache)
            else:
                net(**batch)
        return
    for _ in range(setup.grad_accum):
        batch = batch_for(spec, setup.batch, seq, device=device, dtype=pixel_dtype,
                          s_dec=getattr(setup, "decoder_seq", None))
        if mixed:
            with torch.autocast("cpu" if device is None else torch.device(device).type, dtype=low):
                loss = net(**batch)
        else:
            loss = net(**batch)
        loss.backward()
        del loss, batch
    if optimizer is None:  # optimizer "none": backward passes only, the gradients cleared between them
        net.zero_grad(set_to_none=setup.zero_grad_to_none)
        return
    optimizer.step()
    optimizer.zero_grad(set_to_none=setup.zero_grad_to_none)
