"""The analytic estimator: a spec and a setup -> the terms, the memory at each moment of a
step, the peak and steady state, and what nvidia-smi would show.

Moments of a training step (the peak is the largest):
  forward end     weights + optimizer states + [gradients, when accumulating] + saved activations
                  + autocast's 16-bit weight copies + the logits being turned into a loss
  backward start  the same, with the loss gradient's fp32 transients instead
  recompute       (checkpointing) the kept layer inputs + one layer's activations rebuilt
  optimizer step  weights + gradients + optimizer states + the optimizer's temporaries
Steady state is the second step (optimizer states exist); the first step has none until its
optimizer step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..i18n import N_, _, join_words, ngettext, pgettext
from .formulas import (
    ALL_LINEAR,
    INT8_WO_V1_ROW,
    LORA_TARGET_NAMES,
    OPTIMIZERS,
    PRECISIONS,
    QUANT_BYTES,
    STEP_MOMENTS,
    TORCHAO_STATES,
    TORCHAO_WEIGHT_ONLY,
    UNQUANTIZED_OUTPUTS,
    Acts,
    Dtypes,
    GiB,
    MiB,
    Params,
    Shape,
    Term,
    activations,
    adapter_params,
    bnb_held_inputs,
    fmt,
    generation_steps,
    hf_inference_note,
    inference_held,
    inference_working_set,
    kv_cache,
    lora_targets,
    model_buffers,
    params_of,
    prefill_logits,
    quant_bytes,
    softmax_bytes,
    step_moments,
    t5_inference,
)
from .loading import LOADING_PATHS, TORCHAO_CHUNK, reserved_by_loading
from .specs import ENCODERS, EstimateError, ModelSpec, numel, spec_of
from .stack import Stack, active, assumed_text, setup_for

SEGMENT = 2 * MiB  # the caching allocator's large-segment granularity


# PyTorch's cuBLAS and cuBLASLt workspaces, taken through the caching allocator at the first matmul and kept
# (from torch 2.0 on: stack.BEHAVIOURS' cublas-own-workspace row for before). Their size depends on the GPU:
# CublasHandlePool.cpp `parseChosenWorkspaceSize` gives cuBLAS CUBLAS_WORKSPACE_CONFIG's default :4096:2:16:8
# (8,519,680 B) and 32 MiB on compute capability 9.0 (Hopper); the cuBLASLt one is CUBLASLT_WORKSPACE_SIZE (1 MiB
# there, 4 MiB on large Ampere and 32 MiB on 9.x in CUDABlas.cpp after pytorch#120925). The estimate takes no GPU:
# it adds what an H200 measured, max_memory_allocated 66-69 MiB above the traced peak in every case of
# scripts/estimate_check.py (docs/gpu-check.md); on other GPUs about 50 MiB of it is not there.
CUBLAS_WORKSPACES = 64 * MiB


def default_context(cuda: float) -> int:
    """CUDA context + PyTorch's kernels, as nvidia-smi counts it (NVML's used memory of the process
    minus what the caching allocator reserved). With lazy module loading (CUDA >= 11.7, PyTorch's
    default) it was 742-762 MiB on an H200 (CUDA 13.0, PyTorch 2.11; docs/gpu-check.md): 768 MiB;
    less on GPUs with fewer multiprocessors. Before 11.7 ~1 GiB and more (1343 MiB published on a
    V100, CUDA 11.2). --context-overhead sets it."""
    return 768 * MiB if cuda >= 11.7 else 1024 * MiB


# The largest value each count may take: far past any real training or inference setup, and
# small enough that the arithmetic stays within floats.
SETUP_LIMITS = {"batch": 10**7, "grad_accum": 10**6, "gpus": 10**6, "tp": 10**6, "seq": 10**8,
                "image_size": 10**6, "lora": 10**6, "decoder_seq": 10**8, "ce_chunk": 10**8,
                "adapter": 10**6, "prefix_len": 10**6, "new_tokens": 10**8, "cache_len": 10**8}
ZERO_SIZES = ("zero_reduce_bucket", "zero_allgather_bucket", "zero_prefetch_bucket", "zero_persistence",
              "zero_max_live")


# the Setup fields describe() spells in its own words (a behaviour row setting one needs no label of its own)
_SPELLED = ("attention", "precision", "optimizer", "adapter_dtype", "quant_compute_dtype", "quant_head",
            "torchao_chunk")


@dataclass
class Setup:
    mode: str = "train"  # train | infer
    batch: int = 1  # micro-batch per GPU
    seq: int | None = None  # tokens (or decoder length = encoder length for T5)
    image_size: int | None = None  # ViT
    precision: str = "bf16"
    optimizer: str = "adamw"
    grad_accum: int = 1
    checkpointing: bool = False
    attention: str = "eager"  # eager | flash
    lora: int | None = None  # LoRA rank
    adapter: int | None = None  # bottleneck adapters (Houlsby: two a layer) of this width; the base frozen
    prefix_len: int | None = None  # prefix tuning: virtual tokens per layer's keys and values; the base frozen
    lora_targets: tuple[str, ...] | None = None  # q, k, v, o, gate, up, down or all-linear; None: PEFT's default
    lora_dropout: float = 0.0  # PEFT's default; LitGPT's configs use 0.05
    # LoRA weights (their gradients and optimizer states) on a 16-bit base: fp32 as PEFT keeps them
    # (autocast_adapter_dtype=True, its default since 0.12), or 16bit as LitGPT and torchtune do
    adapter_dtype: str = "fp32"
    decoder_seq: int | None = None  # T5: decoder (target) length; None = seq
    ce_chunk: int | None = None  # LitGPT-style chunked lm_head + cross-entropy: tokens per chunk
    quant: str | None = None  # 8bit | 4bit (frozen base)
    double_quant: bool = False  # 4-bit: the block constants quantized too (bnb_4bit_use_double_quant)
    # 4-bit: the dtype the weights are dequantized to and multiplied in (bnb_4bit_compute_dtype):
    # HF's BitsAndBytesConfig defaults to fp32; LitGPT uses its precision (bf16), torchtune the input's
    quant_compute_dtype: str = "fp32"
    quant_head: bool = False  # the output layer quantized too (Lightning's BitsandbytesPrecision, LitGPT)
    # whose 4-bit linear: bitsandbytes (Linear4bit: keeps its input, in ctx.tensors) or torchao (NF4Tensor's
    # linear_nf4, torchtune's QLoRA: keeps only the weight, dequantized to the input's dtype)
    quant_backend: str = "bitsandbytes"
    # q, k, v as one linear whatever the family (LitGPT's attn, torchvision's MultiheadAttention in_proj):
    # one autocast cast, one LoRA dropout for the three
    fused_qkv: bool = False
    # the training loop holds the last micro-step's loss and logits into the next forward (LitGPT's fit
    # loop): that graph's nodes live on, with the logits and what bitsandbytes keeps as ctx attributes
    keeps_last_graph: bool = False
    gpus: int = 1
    zero: int | None = None  # DeepSpeed ZeRO stage; None = plain PyTorch
    offload: bool = False  # ZeRO-Offload: optimizer states, fp32 master weights and gradients in CPU memory
    offload_params: bool = False  # ZeRO-3 parameter offload (ZeRO-Infinity): only gathered layers on the GPU
    # DeepSpeed's bucket sizes, in elements (its defaults): gradients reduced and parameters gathered
    # through buffers of this size (stages 1-2); stage 3 prefetches, keeps small parameters whole
    # (persistence threshold) and at most max_live parameters gathered
    zero_reduce_bucket: int = 500_000_000
    zero_allgather_bucket: int = 500_000_000
    zero_prefetch_bucket: int = 50_000_000
    zero_persistence: int = 100_000
    zero_max_live: int = 1_000_000_000
    zero_overlap_comm: bool = False  # stages 1-2: a second reduce buffer (DeepSpeed's default off; Lightning on)
    # PyTorch FSDP, full shard, one unit per transformer layer (auto_wrap_policy); with offload_params
    # (CPUOffload(offload_params=True)) parameters and gradients live on the CPU, where the optimizer steps
    fsdp: bool = False
    tp: int = 1  # tensor-parallel degree (within --gpus)
    parallel: str = "ddp"  # ddp | dp (DataParallel)
    head: str | None = None  # cls | lm; default per family
    context_overhead: int | None = None
    cuda: float = 12.4
    fragmentation: float = 0.05  # allocator overhead over the peak (estimate)
    # zero_grad(set_to_none=...): False keeps the gradients allocated through the next forward and
    # backward (PyTorch < 2.0's default, which the HF Trainer inherited until 2023)
    zero_grad_to_none: bool = True
    # the loop calls zero_grad() after the forward, just before backward (forward, zero_grad, backward,
    # step: Raschka's scripts): the last step's gradients stay allocated through the forward
    zero_grad_before_backward: bool = False
    # foreach Adam/AdamW keep sqrt(exp_avg_sq) and sqrt(...) + eps as two lists at the update (PyTorch 2.0 and
    # 2.1 nightlies before July 2023: `denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`; pytorch#104780
    # adds eps in place)
    foreach_denom_copy: bool = False
    # the optimizer updates all parameters at once (foreach: PyTorch >= 2.0's default on CUDA), its
    # temporaries as large as all of them; False: one at a time (PyTorch < 2.0, HF's own AdamW and
    # Adafactor): the temporaries of the largest tensor only (pytorch#97712: 5515 MiB on 1.13.1, 6802 on 2.0.0)
    foreach: bool = True
    # how the model was built and loaded, where that leaves more reserved than the step needs (loading.py):
    # None (the weights loaded in place) or "torchtune" (torchtune 0.1's QLoRA build and checkpoint load)
    loading: str | None = None
    # elements torchao's to_nf4 quantizes at a time: 1,048,576 from torchao 0.2 on; 0 = the whole tensor (0.1)
    torchao_chunk: int = TORCHAO_CHUNK
    # inference: the KV cache keeps views of the k/v projections instead of copies (transformers before
    # 4.54, whose DynamicCache stored the first step's tensors; 4.54 on torch.cat them into its own):
    # GPT-2's k and v are views of one fused c_attn output, so its q third stays allocated too
    cache_views: bool = False
    # inference: generate() goes on for this many new tokens after the prompt (0: the prefill alone); the
    # last decode step extends the cache to seq + new_tokens - 1 positions (the last token is sampled
    # from that step's logits)
    new_tokens: int = 0
    # generate() holds the previous step's cache while the model builds the next (transformers < 4.42: the
    # legacy tuple, concatenated into a new one each step, or rebuilt through DynamicCache.from_legacy_cache),
    # and the prefill's outputs (its logits) through the first decode step (no `del outputs` yet)
    legacy_cache: bool = False
    # the prefill computes every prompt position's logits (transformers < 4.45: no num_logits_to_keep)
    all_logits: bool = False
    # the optimizer as one fused kernel (AdamW(fused=True); the HF Trainer's adamw_torch_fused on torch >= 2.8):
    # each parameter updated in place, no list-wide temporaries
    fused: bool = False
    # inference: a static KV cache of this many positions (HF's StaticCache, generate(cache_implementation="static");
    # gpt-fast's setup_caches), each layer's allocated whole at once; None: the dynamic cache, grown as tokens come
    cache_len: int | None = None
    # the static cache's causal mask made whole with it, cache_len × cache_len booleans, its rows indexed each step
    # (torchtune's setup_caches before 0.4); else the prefill's own mask over the cache (transformers' sdpa_mask)
    cache_mask_whole: bool = False
    # the prefill with a static cache builds SDPA's boolean mask over the whole cache, b × s × cache_len (transformers
    # < 5.14; 5.14's masking_utils lets an empty static cache's prefill use is_causal instead, #47094)
    static_prefill_mask: bool = False
    # the KV cache holds k and v expanded to the query heads (torchtune's KVCache before 0.5), not the kv heads
    kv_expanded: bool = False
    # training: torchtune's optimizer_in_bwd (each parameter stepped and its gradient freed from a backward hook)
    # and enable_activation_offloading (saved tensors in pinned CPU memory between forward and backward)
    optimizer_in_backward: bool = False
    # the output layer has weights of its own even where the config ties it to the embedding: LitGPT's GPT always
    # builds an lm_head, and convert_hf_checkpoint copies the embedding into it (a copied head, not a tied one)
    own_head: bool = False
    offload_activations: bool = False
    # torchao < 0.18's int8 weight-only tensor (Int8WeightOnlyConfig version 1): a 16-bit scale and an int64 zero
    # point per output row, where 0.18's Int8Tensor keeps an fp32 scale and an int8 zero point
    int8_wo_v1: bool = False
    # torch.compile: not modelled, said as a bound (stack.BEHAVIOURS: training an upper bound, inference a lower)
    compiled: bool = False
    # cuBLAS allocates its workspaces itself (cudaMalloc), outside the caching allocator: PyTorch before 2.0 gave
    # it none of its own (pytorch#95668): not in max_memory_allocated or reserved, still in nvidia-smi's count
    cublas_own_workspace: bool = False
    # the stack and training loop the behaviour fields above were read from (stack.setup_for), and the rows
    # of stack.BEHAVIOURS it assumed as the stack's defaults (the header names them); None: set field by field
    stack: Stack | None = None
    loop: str | None = None
    assumed: tuple[str, ...] = ()

    def describe(self, seq: int, family: str = "") -> str:
        """One line: mode, batch, sequence, precision, and every option that changes the estimate: a list
        of items, each a whole phrase in the reader's words."""
        if self.mode == "infer":
            head = (_("inference, batch {batch}, context {context} + {new_tokens} new tokens") if self.new_tokens > 1
                    else _("inference, batch {batch}, context {context}"))
            parts = [head.format(batch=self.batch, context=seq, new_tokens=self.new_tokens),
                     "fp32" if self.precision == "fp32" else "16-bit"]
            if self.cache_len:
                parts.append(_("static cache {positions}").format(positions=self.cache_len))
        else:
            optimizer = (_("fused {optimizer}").format(optimizer=self.optimizer)
                         if self.fused and self.optimizer == "adamw" else self.optimizer)
            parts = [_("training, batch {batch}, seq {seq}").format(batch=self.batch, seq=seq), self.precision,
                     optimizer]
            if self.grad_accum > 1:
                parts.append(_("grad-accum {steps}").format(steps=self.grad_accum))
            if self.checkpointing:
                parts.append(_("checkpointing"))
            if self.optimizer_in_backward:
                parts.append(_("optimizer in backward"))
            if self.offload_activations:
                parts.append(_("activations offloaded"))
        # the library behaviours in effect (stack.BEHAVIOURS) but those whose field this line spells itself;
        # the stack's defaults are the header's to name
        parts += [_(row.label) for row in active(self, family) if not row.default and row.field not in _SPELLED]
        if family not in ("params",):
            parts.append(_("{kind} attention").format(kind=self.attention))
        if self.lora:
            parts.append(_("LoRA r={rank} dropout {dropout:g}").format(rank=self.lora, dropout=self.lora_dropout)
                         if self.lora_dropout else f"LoRA r={self.lora}")
        if self.adapter:
            parts.append(_("adapters width {width}").format(width=self.adapter))
        if self.prefix_len:
            parts.append(_("prefix {tokens} tokens").format(tokens=self.prefix_len))
        if self.quant:
            parts.append(self._describe_quant())
        if self.lora and (self.precision == "bf16-pure" or self.quant):
            parts.append(_("{dtype} adapters").format(dtype=self.adapter_dtype))
        if self.loading:
            parts.append(_("{loader} loading, torchao 0.1 to_nf4").format(loader=self.loading)
                         if not self.torchao_chunk else _("{loader} loading").format(loader=self.loading))
        if self.gpus > 1 or self.zero is not None or self.fsdp:
            parts.append(self._describe_gpus())
        # what the stack's defaults chose where the user said nothing, last: its own list follows the colon
        assumed = assumed_text(self, family)
        if assumed:
            parts.append(assumed)
        return join_words(parts)

    def _describe_quant(self) -> str:
        """describe()'s words for a quantized base: the kind, then its options."""
        items = [f"{self.quant} double-quant" if self.double_quant else str(self.quant)]
        if self.quant == "4bit":
            items.append(_("{dtype} compute").format(dtype=self.quant_compute_dtype))
        if self.quant_head:
            items.append(_("head quantized too"))
        if self.fsdp or self.zero == 3:
            items.append(_("16-bit storage, sharded"))
        return join_words(items)

    def _describe_gpus(self) -> str:
        """describe()'s words for the GPUs: how many, and how the work is spread over them."""
        items = [ngettext("{n} GPU", "{n} GPUs", self.gpus).format(n=self.gpus)]
        if self.zero is not None:
            # Translators: what ZeRO offloads to the CPU, joined by "/" (the values of --offload)
            offloaded = "/".join(w for w, on in ((pgettext("offloaded", "optimizer"), self.offload),
                                                 (pgettext("offloaded", "params"), self.offload_params)) if on)
            items.append(_("ZeRO-{stage} + offload {what}").format(stage=self.zero, what=offloaded) if offloaded
                         else f"ZeRO-{self.zero}")
        elif self.fsdp:
            items.append(_("FSDP full shard + CPU offload") if self.offload_params else _("FSDP full shard"))
        elif self.mode == "infer":  # no gradients to reduce: the layers are split, or tensor parallel
            if self.tp == 1:
                items.append(_("layers split over them (device_map='auto')"))
        elif self.parallel == "dp":
            items.append("DataParallel")
        else:
            items.append("DDP")
        if self.tp > 1:
            items.append(f"tp {self.tp}")
        return join_words(items)

    def _check_fsdp(self) -> None:
        """FSDP as modelled: full-shard training, alone (no ZeRO or tp); a quantized base: _check_sharded_quant."""
        for name, clash in (("zero", self.zero is not None), ("tp", self.tp > 1), ("fsdp", self.mode != "train")):
            if clash:  # for inference the flag to blame is --fsdp itself (mode has no flag of its own)
                raise EstimateError(_("FSDP is modelled for training alone: not with DeepSpeed ZeRO, tensor "
                                    "parallelism or inference"), param=name)
        if self.offload:
            raise EstimateError(_("FSDP offloads the parameters, and with them the gradients and the optimizer "
                                "step (CPUOffload(offload_params=True)): offload params"), param="offload")
        if self.gpus == 1 and not self.offload_params:
            raise EstimateError(_("FSDP on one GPU shards nothing: give more GPUs, or offload the parameters to CPU"),
                                param="fsdp")

    def _check_sharded_quant(self) -> None:
        """A quantized base under DeepSpeed ZeRO or FSDP as modelled: ZeRO 0-2 keep it whole on every GPU;
        ZeRO-3 and FSDP shard bitsandbytes' 4-bit weights packed in a 16-bit storage dtype
        (bnb_4bit_quant_storage, PEFT's QLoRA recipes), which 8-bit and torchao's NF4 are not."""
        if not self.quant or (self.zero is None and not self.fsdp):
            return
        if self.quant_backend != "bitsandbytes":
            raise EstimateError(_("a quantized base under DeepSpeed ZeRO or FSDP is modelled for bitsandbytes "
                                "(PEFT's QLoRA recipes), not torchao"), param="quant_backend")
        if (self.fsdp or self.zero == 3) and self.quant != "4bit":
            raise EstimateError(_("ZeRO-3 and FSDP shard a quantized base as bitsandbytes' 4-bit weights in a 16-bit "
                                "storage dtype (bnb_4bit_quant_storage): give quant 4bit"), param="quant")
        if self.zero == 3 and self.offload_params:
            raise EstimateError(_("ZeRO-3 parameter offload with a 4-bit base is not modelled (PEFT's DeepSpeed "
                                "guide: it takes more GPU memory than without): keep the parameters on the GPU, or "
                                "use FSDP's CPU offload"), param="offload_params")

    def check(self, spec: ModelSpec) -> None:
        """EstimateError unless the setup makes sense for `spec`; `param` names the field to blame."""
        for f in fields(self):  # an on/off option takes True or False: "no" would be truthy
            if isinstance(f.default, bool) and not isinstance(getattr(self, f.name), bool):
                raise EstimateError(_("must be True or False, not {value}").format(
                    value=f"{getattr(self, f.name)!r:.40}"), param=f.name)
        def positive(name: str, allow_none: bool = True) -> None:
            value = getattr(self, name)
            if value is None and allow_none:
                return
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise EstimateError(_("must be a whole number of at least 1, not {value!r}").format(value=value),
                                    param=name)
            if value > SETUP_LIMITS[name]:  # far past any real setup; beyond it floats overflow
                raise EstimateError(_("must be at most {limit:,}").format(limit=SETUP_LIMITS[name]), param=name)

        def one_of(name: str, allowed: tuple[object, ...], words: str) -> None:
            value = getattr(self, name)  # by type too: 3.0 == 3 and True == 1, but neither is a stage
            if not any(value == a and type(value) is type(a) for a in allowed):
                raise EstimateError(_("must be {allowed}, not {value!r}").format(allowed=words,
                                                                               value=getattr(self, name)), param=name)

        one_of("mode", ("train", "infer"), _("train or infer"))
        for name in ("batch", "grad_accum", "gpus", "tp"):
            positive(name, allow_none=False)
        for name in ("seq", "image_size", "lora", "decoder_seq", "ce_chunk", "adapter", "prefix_len", "cache_len"):
            positive(name)
        for name in ("optimizer_in_backward", "offload_activations"):
            if getattr(self, name) and (self.mode != "train" or self.zero is not None or self.fsdp):
                raise EstimateError(_("is modelled for training on one GPU or DDP, as torchtune's single-device and "
                                    "distributed recipes run it, not under DeepSpeed ZeRO or FSDP"), param=name)
        if self.optimizer_in_backward and (self.grad_accum > 1 or self.optimizer in ("none", "paged-adamw")):
            raise EstimateError(_("steps each parameter inside backward: no gradient accumulation (torchtune refuses "
                                "it) and an optimizer of torch's own"), param="optimizer_in_backward")
        if self.cache_len is not None:
            if self.mode != "infer" or spec.arch not in ("gpt", "llama"):
                raise EstimateError(_("a static KV cache is for inference of decoder-only models (--infer)"),
                                    param="cache_len")
            if self.attention != "flash":
                raise EstimateError(_("a static cache is modelled with SDPA (--attention flash): eager attention's "
                                    "scores would span the whole cache"), param="cache_len")
            need = (self.seq or 0) + max(self.new_tokens, 1) - 1
            if self.cache_len < need and self.cache_mask_whole:  # torchtune's own cache: its generate() refuses it
                raise EstimateError(_("the prompt and the new tokens ({need}) do not fit in torchtune's cache of the "
                                    "model's max_seq_len ({positions}): its generate() refuses them").format(
                                        positions=self.cache_len, need=need), param="seq")
            if self.cache_len < need:
                raise EstimateError(_("{positions} positions cannot hold the prompt and the new tokens ({need})")
                                    .format(positions=self.cache_len, need=need),
                                    param="cache_len")
        if self.zero is not None and self.mode == "infer":  # it shards training states; inference splits layers
            raise EstimateError(_("DeepSpeed ZeRO shards what training keeps: for inference over several GPUs give "
                                "--gpus alone (device_map's layer split) or tensor parallelism"), param="zero")
        if not isinstance(self.new_tokens, int) or isinstance(self.new_tokens, bool):
            raise EstimateError(_("must be a whole number (0: the prefill alone), not {value}").format(
                value=f"{self.new_tokens!r:.40}"),
                                param="new_tokens")
        if self.new_tokens:  # 0 (the prefill alone) is its default
            positive("new_tokens")
            if self.mode != "infer" or spec.family in ENCODERS or spec.encoder_decoder or spec.patches:
                raise EstimateError(_("generation is modelled for inference of decoder-only models (--infer)"),
                                    param="new_tokens")
        for name in ("adapter", "prefix_len", "new_tokens"):
            if getattr(self, name) and spec.bare:
                raise EstimateError(_("needs a model with layers (a config or a catalog name), not a bare count"),
                                    param=name)
        if self.prefix_len and spec.patches:
            raise EstimateError(_("prefix tuning is for language models, not ViT"), param="prefix_len")
        if self.lora_targets is not None:
            bad = [t for t in self.lora_targets if t not in LORA_TARGET_NAMES]
            if bad or not self.lora_targets or not self.lora:
                raise EstimateError((_("must be some of {names}, with a lora rank, not {value!r}") if bad else
                                     _("must be some of {names}, with a lora rank")).format(
                    names=", ".join(LORA_TARGET_NAMES), value=bad[0] if bad else ""), param="lora_targets")
        if self.decoder_seq is not None and not spec.encoder_decoder:
            raise EstimateError(_("a separate decoder length is for encoder-decoder models (t5), not {family}").format(
                family=spec.family),
                                param="decoder_seq")
        if self.ce_chunk is not None and (self.mode != "train" or spec.head != "lm"):
            raise EstimateError(_("chunks the training loss over a vocabulary: needs training with an lm head"),
                                param="ce_chunk")
        if self.optimizer == "none" and self.zero is not None:
            raise EstimateError(_("DeepSpeed ZeRO shards optimizer states: give an optimizer"), param="optimizer")
        one_of("precision", PRECISIONS, _("one of {names}").format(names=", ".join(PRECISIONS)))
        one_of("optimizer", OPTIMIZERS, _("one of {names}").format(names=", ".join(OPTIMIZERS)))
        one_of("attention", ("eager", "flash"), _("eager or flash"))
        one_of("quant", (None, *QUANT_BYTES, *TORCHAO_WEIGHT_ONLY), _("8bit or 4bit (bitsandbytes), int8-wo, int4-wo "
                                                                      "or fp8-wo (torchao weight-only)"))
        if self.quant in TORCHAO_WEIGHT_ONLY and (self.mode != "infer" or self.zero is not None or self.fsdp):
            raise EstimateError(_("torchao's weight-only quantization is modelled for inference (quantize_ with "
                                "Int8/Int4/Float8WeightOnlyConfig)"), param="quant")
        one_of("adapter_dtype", ("fp32", "16bit"), _("fp32 (PEFT) or 16bit (LitGPT, torchtune)"))
        one_of("quant_compute_dtype", ("fp32", "bf16", "fp16"), _("fp32 (HF's default), bf16 or fp16"))
        one_of("quant_backend", ("bitsandbytes", "torchao"), _("bitsandbytes or torchao"))
        one_of("loading", (None, *LOADING_PATHS), _("torchtune (its QLoRA model build and checkpoint load)"))
        if self.loading and not (self.quant == "4bit" and self.quant_backend == "torchao" and self.lora
                                 and spec.arch == "llama" and not spec.experts):
            raise EstimateError(_("torchtune's loading quantizes the LoRA linears of a llama-family model with "
                                "torchao: give quant 4bit, quant backend torchao and a lora rank"), param="loading")
        if self.loading and not set(ALL_LINEAR) <= set(lora_targets(spec, self.lora_targets)):
            # torchtune 0.1 leaves the linears without LoRA in bf16, where the weights count them all NF4
            raise EstimateError(_("torchtune's loading is modelled for its QLoRA recipe, LoRA on every linear of "
                                "the layers: give lora targets all-linear"), param="loading")
        if self.loading and (self.mode != "train" or self.gpus > 1 or spec.tied):
            raise EstimateError(_("torchtune's loading is modelled for its single-device finetune of a model with "
                                "its own output layer (llama-2, mistral): training on one GPU"), param="loading")
        if not isinstance(self.torchao_chunk, int) or isinstance(self.torchao_chunk, bool) or self.torchao_chunk < 0:
            raise EstimateError(_("must be a number of elements (0: the whole tensor), not {value!r}").format(
                value=self.torchao_chunk),
                                param="torchao_chunk")
        if self.quant_backend == "torchao" and self.quant not in (None, "4bit"):
            raise EstimateError(_("torchao's NF4 is 4-bit: give quant 4bit"), param="quant_backend")
        one_of("zero", (None, 0, 1, 2, 3), _("a ZeRO stage: 0, 1, 2 or 3"))
        one_of("parallel", ("ddp", "dp"), _("ddp or dp"))
        for name in ZERO_SIZES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 10**15:
                raise EstimateError(_("must be a number of elements from 0 to 1e15, not {value!r}").format(value=value),
                                    param=name)
        if self.quant and self.mode == "train" and not (self.lora or self.adapter or self.prefix_len):
            raise EstimateError(_("training a quantized model needs LoRA or other adapters (QLoRA): give a lora rank, "
                                "an adapter width or a prefix length (a 4/8-bit base is frozen; full training is "
                                "supported in fp32, fp16, bf16)"), param="quant")
        if self.quant_head and not self.quant:
            raise EstimateError(_("quantizes the output layer with the rest: give quant 8bit or 4bit"),
                                param="quant_head")
        if self.optimizer in TORCHAO_STATES and (self.zero is not None or self.fsdp):
            raise EstimateError(_("torchao's low-bit AdamW is modelled on one GPU or DDP, not under DeepSpeed ZeRO or "
                                "FSDP"), param="optimizer")
        if self.optimizer == "paged-adamw" and self.zero is not None:
            raise EstimateError(_("DeepSpeed ZeRO shards its own optimizer's states, not bitsandbytes' paged ones"),
                                param="optimizer")
        if self.double_quant and self.quant != "4bit":
            raise EstimateError(_("double quantization is a 4-bit option: give quant 4bit"), param="double_quant")
        self._check_sharded_quant()
        if self.fsdp:
            self._check_fsdp()
        if self.offload and self.zero not in (2, 3):
            raise EstimateError(_("needs ZeRO stage 2 or 3 (ZeRO-Offload / ZeRO-Infinity)"),
                                param="offload")
        if self.offload_params and self.zero != 3 and not self.fsdp:
            raise EstimateError(_("parameter offload needs ZeRO stage 3 (ZeRO-Infinity) or FSDP"),
                                param="offload_params")
        if self.zero == 3 and self.gpus == 1 and not self.offload_params:
            raise EstimateError(_("ZeRO-3 on one GPU shards nothing: give more GPUs, or offload the parameters "
                                "to CPU (ZeRO-Infinity), or use ZeRO-2 with optimizer offload"), param="zero")
        if self.gpus % self.tp:
            raise EstimateError(_("{tp} must divide the number of GPUs ({gpus})").format(tp=self.tp, gpus=self.gpus),
                                param="tp")
        if not spec.bare and spec.heads % self.tp:
            raise EstimateError(_("{tp} must divide the {heads} attention heads").format(tp=self.tp, heads=spec.heads),
                                param="tp")
        if self.context_overhead is not None and self.context_overhead < 0:
            raise EstimateError(_("must not be negative"), param="context_overhead")
        if not isinstance(self.lora_dropout, (int, float)) or not 0 <= self.lora_dropout < 1:
            raise EstimateError(_("must be at least 0 and less than 1, not {value!r}").format(value=self.lora_dropout),
                                param="lora_dropout")
        if not 0 <= self.fragmentation < 1:
            raise EstimateError(_("must be at least 0 and less than 1"), param="fragmentation")
        if self.image_size is not None and spec.patches and self.image_size % spec.patch_size:
            raise EstimateError(_("{size} is not a multiple of the patch size {patch}").format(
                size=self.image_size, patch=spec.patch_size),
                                param="image_size")


@dataclass
class Estimate:
    model: str
    family: str
    setup: Setup
    params: int
    trainable: int
    seq: int
    terms: list[Term]
    moments: dict[str, int]  # allocated bytes at each moment of the steady step
    first_step: dict[str, int]
    peak_moment: str
    peak_bytes: int  # most allocated over the first two steps (torch.cuda.max_memory_allocated)
    steady_bytes: int  # the second step's peak
    reserved_bytes: int  # what the caching allocator holds at the peak
    context_bytes: int
    total_bytes: int  # what nvidia-smi would show: reserved + context
    breakdown: dict[str, int]  # the terms at the peak, plus overheads
    notes: list[str] = field(default_factory=list)
    activation_detail: list[tuple[str, int]] = field(default_factory=list)  # one layer's saved tensors

    def __str__(self) -> str:
        """A few lines, not the dataclass wall: model, setup, peak, steady state, nvidia-smi's view."""
        from ..units import format_size

        steady = _("the peak") if self.steady_bytes == self.peak_bytes else format_size(self.steady_bytes)
        return "\n".join([
            _("{model}: {params:,} parameters ({family}), ESTIMATE").format(model=self.model, params=self.params,
                                                                          family=self.family),
            f"  {self.setup.describe(self.seq, self.family)}",
            "  " + _("peak allocated {peak} ({moment}), steady state {steady}").format(
                peak=format_size(self.peak_bytes), moment=self.peak_moment, steady=steady),
            "  " + (_("nvidia-smi would show {total} (reserved {reserved} + CUDA context {context} + cuBLAS's own "
                      "workspaces {outside})") if self.outside_allocator else
                    _("nvidia-smi would show {total} (reserved {reserved} + CUDA context {context})")).format(
                total=format_size(self.total_bytes), reserved=format_size(self.reserved_bytes),
                context=format_size(self.context_bytes), outside=format_size(self.outside_allocator))])

    @property
    def outside_allocator(self) -> int:
        """What nvidia-smi counts beyond the caching allocator's reserve and the CUDA context: cuBLAS's own
        workspaces before torch 2.0 (Setup.cublas_own_workspace)."""
        return self.total_bytes - self.reserved_bytes - self.context_bytes

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("terms", "setup")}
        out["setup"] = asdict(self.setup)
        out["terms"] = [asdict(t) for t in self.terms]
        return out


def round_segments(n: int) -> int:
    return math.ceil(n / SEGMENT) * SEGMENT


def _default_seq(spec: ModelSpec) -> int:
    if spec.family in ENCODERS or spec.encoder_decoder:
        return min(512, spec.max_positions or 512)
    return min(2048, spec.max_positions or 2048)


def _optimizer(opt: str, pt: int, wt: float, p: Params, lora: bool) -> tuple[float, float, str, str]:
    """(state bytes, temporary bytes at the step, state formula, temp formula) for PyTorch's
    optimizers with the foreach implementation CUDA picks by default."""
    if opt == "adamw":
        return (2 * pt * wt, pt * wt,
                _("2 states (exp_avg, exp_avg_sq) × {params:,} params × {bytes:g} B").format(params=pt, bytes=wt),
                _("foreach AdamW's sqrt(exp_avg_sq) temporary: {params:,} × {bytes:g} B").format(params=pt, bytes=wt))
    if opt == "sgd":
        return 0, 0, _("plain SGD keeps no state"), _("none")
    if opt == "none":
        return 0, 0, _("no optimizer: a backward pass only (the gradients are kept)"), _("none")
    if opt == "paged-adamw":  # cudaMallocManaged pages: outside the caching allocator and its counters
        return 0, 0, _("bitsandbytes PagedAdamW: 2 fp32 states × {params:,} params in CUDA unified memory, outside "
                       "the caching allocator ({size}; nvidia-smi counts the pages resident on the GPU)").format(
            params=pt, size=fmt(8 * pt)), _("fused kernel, none")
    if opt == "sgd-momentum":
        return pt * wt, 0, _("momentum buffer: {params:,} × {bytes:g} B").format(params=pt, bytes=wt), _("none")
    if opt in TORCHAO_STATES:
        return _torchao_states(opt, pt, wt, p, lora)
    if opt == "adafactor":
        n = p.adafactor_state if not lora else pt // 50
        return (n * wt, pt * wt,
                _("factored second moment (rows + columns per matrix): {params:,} × {bytes:g} B").format(
                    params=n, bytes=wt),
                _("foreach Adafactor's full-size variance estimate: {params:,} × {bytes:g} B").format(
                    params=pt, bytes=wt))
    return _bnb_8bit_states(pt, p, lora)


def _bnb_8bit_states(pt: int, p: Params, lora: bool) -> tuple[float, float, str, str]:
    """bitsandbytes' AdamW8bit (optim/optimizer.py Optimizer2State.init_state): two uint8 states and an fp32
    absmax per block of 256 for a tensor of min_8bit_size (4,096) values or more, two fp32 states for a smaller
    one; the two 256-value quantization maps (dynamic, udynamic) are the optimizer's, shared by every tensor."""
    known = not lora and bool(p.shapes)  # adapters (r × h, over 4,096 values) or a bare count: every tensor 8-bit
    small = sum(numel(s) for _n, s, _c in p.shapes if numel(s) < 4096) if known else 0
    big = pt - small
    blocks = sum(-(-numel(s) // 256) for _n, s, _c in p.shapes if numel(s) >= 4096) if known else -(-big // 256)
    maps = 2 * 256 * 4
    states = 2 * big + 2 * 4 * blocks + 2 * 4 * small + maps
    states_f = (_("2 uint8 states + an fp32 absmax per 256: {params:,} × 2.03 B + {small:,} in tensors under 4,096 "
                  "values × 2 fp32 states + the 2 quantization maps (2 KiB)") if small else
                _("2 uint8 states + an fp32 absmax per 256: {params:,} × 2.03 B + the 2 quantization maps (2 KiB)"))
    return states, 0, states_f.format(params=big, small=small), _("fused kernel, none")


def _with_stack(spec: ModelSpec, setup: Setup | None, options: dict[str, Any]) -> Setup:
    """`setup` with `options` over it; with a stack or a loop among them ("torch=2.0,transformers=4.32", a
    Stack, "litgpt"), the fields neither sets filled in from stack.BEHAVIOURS for that stack (over the versions
    installed beside vram) and loop, as the command line does."""
    stack, loop = options.get("stack"), options.get("loop")
    if (stack is None or isinstance(stack, Stack)) and loop is None:
        return replace(setup or Setup(), **options)
    if not isinstance(stack, Stack):
        stack = Stack.installed() if stack is None else Stack.installed().parse(str(stack))
    defaults = Setup()
    given = {f.name: getattr(setup, f.name) for f in fields(Setup) if setup is not None
             and f.name not in ("stack", "loop", "assumed") and getattr(setup, f.name) != getattr(defaults, f.name)}
    given |= {k: v for k, v in options.items() if k not in ("stack", "loop")}
    return setup_for(spec, stack, loop, given)


def _torchao_states(opt: str, pt: int, wt: float, p: Params, lora: bool) -> tuple[float, float, str, str]:
    """torchao's AdamW4bit / AdamWFp8: two states a parameter, each quantized in blocks with an fp32 scale a
    block where the tensor has 4,096 values or more and a whole number of blocks, else in the parameter's own
    dtype (_AdamBase._new_buffer). The step (single_param_adam, torch.compile'd a parameter at a time) computes
    in fp32 inside fused kernels that write the states and the parameter in place: no temporaries."""
    value, block = TORCHAO_STATES[opt]
    per = 2 * (value + 4 / block)
    if lora or not p.shapes:  # adapters (r × h, well over 4,096 values) or a bare count: every tensor quantized
        small = 0
    else:
        small = sum(numel(s) for _n, s, _c in p.shapes if numel(s) < 4096 or numel(s) % block)
    # AdamW4bit's states carry their own 16-value fp32 quantization map each (OptimState4bit.qmap); AdamWFp8's none
    quantized = 0 if lora or not p.shapes else sum(1 for _n, s, _c in p.shapes
                                                   if numel(s) >= 4096 and not numel(s) % block)
    maps = 2 * quantized * 16 * 4 if opt == "adamw-4bit" else 0
    states = (pt - small) * per + small * 2 * wt + maps
    what = "4-bit" if opt == "adamw-4bit" else "FP8"
    states_f = (_("torchao {optimizer}: 2 {what} states + an fp32 scale per {block} values: {params:,} × "
                  "{bytes:.4g} B + {small:,} in small tensors × 2 × {small_bytes:g} B") if small else
                _("torchao {optimizer}: 2 {what} states + an fp32 scale per {block} values: {params:,} × "
                  "{bytes:.4g} B"))
    if maps:
        states_f = _("{formula} + a 16-value fp32 map per state ({tensors:,} tensors × 2 × 64 B)").format(
            formula=states_f, tensors=quantized)
    # the step: single_param_adam, torch.compile'd (fullgraph), dequantizes, updates and quantizes again a parameter
    # at a time in fused kernels that write in place: traced on the CPU, the step allocated nothing
    return (states, 0,
            states_f.format(optimizer="AdamW4bit" if opt == "adamw-4bit" else "AdamWFp8", what=what, block=block,
                            params=pt - small, bytes=per, small=small, small_bytes=wt),
            _("single_param_adam compiled by torch.compile: each tensor dequantized, updated and quantized again in "
              "fused kernels, in place: none"))


def estimate(model: object, setup: Setup | None = None, **options: Any) -> Estimate:
    """Estimate the GPU memory one GPU needs. `model`: a catalog name, a config.json path or
    folder, a bare count like "7b", a config dict, a transformers config (model.config) or a
    ModelSpec (specs.spec_of); options: the fields of Setup; `stack` ("torch=2.1,transformers=4.36") and
    `loop` ("litgpt") fill in the fields not given from those libraries' and that loop's behaviours
    (stack.BEHAVIOURS).

    >>> e = estimate("bert-large-uncased", batch=4, seq=512, precision="fp32")
    >>> e.total_bytes, e.breakdown
    """
    spec = spec_of(model)
    setup = _with_stack(spec, setup, options)
    if isinstance(setup.lora_targets, str):  # "q,v" as the command line writes it
        setup = replace(setup, lora_targets=tuple(t.strip() for t in setup.lora_targets.split(",") if t.strip()))
    setup.check(spec)
    spec = spec.with_head(setup.head).with_own_head(setup.own_head)
    train = setup.mode == "train"
    lora = bool(setup.lora or setup.adapter or setup.prefix_len)  # a frozen base with adapters
    deepspeed = setup.zero is not None
    dt = Dtypes.of(setup.precision, deepspeed=deepspeed and setup.precision != "fp32")
    tp = setup.tp
    dp = setup.gpus // tp
    # torchao's quantize_ takes every nn.Linear, the output layer's too
    p = params_of(spec, setup.lora, tp, setup.lora_targets,
                  quant_head=setup.quant_head or setup.quant in TORCHAO_WEIGHT_ONLY)
    notes = list(spec.notes)
    if spec.patches:
        seq = spec.seq_for_image(setup.image_size)
    else:
        seq = setup.seq or _default_seq(spec)
        learned = spec.family in ENCODERS or (spec.arch == "gpt" and spec.positions == "learned")
        if learned and spec.max_positions and seq > spec.max_positions:
            raise EstimateError(_("{seq} is longer than {model}'s {positions} positions").format(
                seq=seq, model=spec.name, positions=spec.max_positions), param="seq")
        last = seq + max(setup.new_tokens, 1) - 1  # the positions the last decode step reaches
        if learned and spec.max_positions and last > spec.max_positions:
            reach = (_("a prompt of {seq} + {new_tokens} new tokens reach past {model}'s {positions} positions")
                     if setup.seq else
                     _("the default prompt ({seq}, give --seq for a shorter one) + {new_tokens} new tokens reach past "
                       "{model}'s {positions} positions"))
            raise EstimateError(reach.format(seq=seq, new_tokens=setup.new_tokens, model=spec.name,
                                             positions=spec.max_positions), param="new_tokens")
    s_dec = (setup.decoder_seq or seq) if spec.encoder_decoder else 0
    terms: list[Term] = []
    b = setup.batch

    # ---- weights
    P = p.total
    if setup.quant and (setup.fsdp or setup.zero == 3):  # the packed 4-bit weights flattened and sharded
        terms += _sharded_4bit(spec, p, setup, dp)
        notes.append(_("{sharding} over a 4-bit base: assumes bnb_4bit_quant_storage is the model's 16-bit dtype "
                       "(PEFT's QLoRA recipes), so the packed weights are sharded; with uint8 storage they stay whole "
                       "on every GPU").format(sharding="FSDP" if setup.fsdp else "ZeRO-3"))
    elif setup.quant in TORCHAO_WEIGHT_ONLY:
        terms.append(_torchao_weight_only(spec, p, setup))
    elif setup.quant:
        qb = quant_bytes(setup.quant, setup.double_quant)
        rest = P - p.quantized
        base = (p.quantized * qb + rest * 2) / tp
        base_f = (_("{quantized:,} linear weights × {bytes:.4g} B ({quant} double-quantized frozen base)")
                  if setup.double_quant else _("{quantized:,} linear weights × {bytes:.4g} B ({quant} frozen base)"))
        others = (_("{formula} + {rest:,} others × 2 B (embeddings, norms, biases stay 16-bit: bitsandbytes "
                    "quantizes nn.Linear only)") if setup.quant_head else
                  _("{formula} + {rest:,} others × 2 B (embeddings, norms, biases and the output layer stay 16-bit: "
                    "bitsandbytes quantizes nn.Linear only, HF skips lm_head)")) if rest else \
            _("{formula} (a bare count: the 16-bit embeddings and lm_head are not known)")
        weights_f = others.format(formula=base_f.format(quantized=p.quantized, bytes=qb, quant=setup.quant), rest=rest)
        terms.append(Term(N_("weights"), int(base), weights_f + (f" / tp {tp}" if tp > 1 else ""), "weights"))
    elif not train and setup.precision != "fp32":
        terms.append(Term(N_("weights"), P * 2 // tp,
                          _("{params:,} params × 2 B (16-bit for inference)").format(params=P), "weights"))
    elif setup.fsdp:
        terms.append(Term(N_("weights"), 0 if setup.offload_params else int(P * dt.w) // dp,
                          _("in CPU memory (FSDP CPUOffload)") if setup.offload_params else
                          _("{params:,} params × {bytes:g} B / {gpus} GPUs (FSDP full shard)").format(
                              params=P, bytes=dt.w, gpus=dp), "weights"))
        if not spec.bare:  # a bare count has no layers to gather
            terms.append(_fsdp_gathered(p, dt.w))
    elif deepspeed:
        w16 = 4 if setup.precision == "fp32" else 2
        shard = dp if setup.zero == 3 else 1
        wbytes = 0 if setup.offload_params else P * w16 // tp // shard
        terms.append(Term(N_("weights"), wbytes, _("in CPU memory (ZeRO-3 parameter offload)") if setup.offload_params
                          else (_("{params:,} params × {bytes} B / {gpus} GPUs (ZeRO-3)") if shard > 1 else
                                _("{params:,} params × {bytes} B")).format(params=P, bytes=w16, gpus=shard)
                          + (f" / tp {tp}" if tp > 1 else ""), "weights"))
        if setup.zero == 3 and not spec.bare:  # a bare count has no layers to gather
            terms += _zero3_gathered(p, setup, w16, tp, shard)
    else:
        kept_as = {4: "fp32", 2: "bf16" if setup.precision.startswith("bf16") else "fp16"}.get(int(dt.w), "")
        if dt.mixed and dt.w == 4:  # mixed precision keeps fp32 master weights; autocast makes 16-bit copies
            kept_as = _("fp32 master weights, {precision} compute").format(precision=setup.precision)
        terms.append(Term(N_("weights"), int(P * dt.w) // tp, _("{params:,} params × {bytes:g} B ({dtype})").format(
            params=P, bytes=dt.w, dtype=kept_as) + (f" / tp {tp}" if tp > 1 else ""), "weights"))
    bottleneck, virtual = adapter_params(spec, setup.adapter, setup.prefix_len)
    aw = 4 if setup.precision != "bf16-pure" else 2
    lw = 2 if setup.precision == "bf16-pure" and setup.adapter_dtype == "16bit" else 4  # LoRA's weights
    if setup.lora:
        # ZeRO-3 partitions them with every parameter, in its 16-bit dtype; FSDP flattens and shards them
        # (PEFT's fsdp_auto_wrap_policy makes each trainable linear a unit of its own), or offloads them
        zero3_lw = (4 if setup.precision == "fp32" else 2) if setup.zero == 3 else lw
        shards = dp if setup.zero == 3 or setup.fsdp else 1
        on_gpu = 0 if setup.fsdp and setup.offload_params else p.lora * zero3_lw // shards
        lora_f = _("rank {rank} on {targets}: {params:,} params × {bytes} B").format(
            rank=setup.lora, targets="/".join(_targets(spec, setup)), params=p.lora, bytes=zero3_lw)
        if zero3_lw == 4 and aw == 2:
            lora_f = _("{formula} (fp32 on a 16-bit base: PEFT's autocast_adapter_dtype)").format(formula=lora_f)
        if shards > 1:
            lora_f = _("{formula} / {gpus} GPUs").format(formula=lora_f, gpus=shards)
        if setup.fsdp and setup.offload_params:
            lora_f = _("{formula} (on the CPU: FSDP CPUOffload)").format(formula=lora_f)
        terms.append(Term(N_("LoRA adapters"), on_gpu, lora_f, "weights"))
    if bottleneck:
        terms.append(Term(N_("bottleneck adapters"), bottleneck * aw, _(
            "2 a layer, h→{width}→h with biases: {params:,} params × {bytes} B").format(
                width=setup.adapter, params=bottleneck, bytes=aw), "weights"))
    if virtual:
        terms.append(Term(N_("prefix (virtual tokens)"), virtual * aw, _(
            "{tokens} keys and values a layer: {params:,} params × {bytes} B").format(
                tokens=setup.prefix_len, params=virtual, bytes=aw), "weights"))
    buffer = None if spec.bare else model_buffers(spec)
    if buffer:  # allocated with the model, training or not
        terms.append(Term(*buffer, "weights"))

    pt = (p.lora + bottleneck + virtual if lora else P) // tp  # trainable params on this GPU (before ZeRO)
    if not train:
        return _inference(spec, setup, p, pt, seq, s_dec, terms, notes)

    # ---- training: gradients and optimizer states
    wt = (lw if setup.lora else aw) if lora else dt.w  # master / trainable dtype
    G, Opt, T_opt = _model_states(spec, setup, p, pt, wt, lora, dp, terms, notes)
    terms += [G, Opt, T_opt]
    if setup.gpus > 1 and dp > 1 and not deepspeed and not setup.fsdp and setup.parallel == "ddp":
        terms.append(Term(N_("DDP gradient buckets"), G.bytes, _("a flat copy of the gradients for all-reduce "
                                                                 "(gradient_as_bucket_view=True removes it)"),
                          "overhead", lifetime="step"))

    if spec.bare:
        notes.append(_("activations not counted: a bare parameter count has no shape"))
        moments = {"optimizer step": {t.name: t.bytes for t in terms}}
        first = dict(moments)
        return _finish(spec, setup, p, pt, seq, terms, moments, first, notes)

    acts = _step_terms(spec, setup, p, dt, seq, s_dec, lora, wt, lw, aw, terms)
    if setup.gpus > 1 and setup.parallel == "dp" and not deepspeed and not setup.fsdp:
        extra = (dp - 1) * (acts.logits * (dt.x + 8) if acts.logits else b * spec.hidden * 4) // tp + G.bytes
        terms.append(Term(N_("DataParallel extra on GPU 0"), extra, _(
            "outputs of {replicas} other replicas gathered (+ their loss gradients) and the gradient reduction "
            "buffer").format(replicas=dp - 1), "overhead", lifetime="step"))
        notes.append(_("DataParallel: GPU 0 carries the extra shown; the other GPUs need that much less"))
    if lora:
        bnb = bool(setup.quant) and setup.quant_backend == "bitsandbytes"
        where = join_words([w for w, on in (
            (_("LoRA on {targets}").format(targets="/".join(_targets(spec, setup))), setup.lora),
            (_("bottleneck adapters ({width} wide)").format(width=setup.adapter), setup.adapter),
            (_("a {tokens}-token prefix").format(tokens=setup.prefix_len), setup.prefix_len)) if on])
        if bnb:
            notes.append(_("QLoRA: bitsandbytes' {quant} matmuls keep their inputs for the input gradient "
                           "(MatMul4Bit / MatMul8bitLt ctx.tensors), as full training does; {adapters}").format(
                quant=setup.quant, adapters=where))
        elif setup.quant:
            notes.append(_("QLoRA: torchao's NF4 linear keeps only its weight (linear_nf4), no input; {adapters}")
                         .format(adapters=where))
        else:
            notes.append(_("a frozen base: its linears keep no inputs for weight gradients; {adapters}").format(
                adapters=where))
    if setup.lora and (setup.precision == "bf16-pure" or setup.quant):
        notes.append(_("LoRA weights, their gradients and optimizer states in fp32 on the 16-bit base, as PEFT keeps "
                       "them (autocast_adapter_dtype); --adapter-dtype 16bit for LitGPT and torchtune")
                     if setup.adapter_dtype == "fp32" else _("LoRA weights in 16-bit, as LitGPT and torchtune keep "
                                                             "them (PEFT's default is fp32: --adapter-dtype fp32)"))
    notes.append(_("assumes PyTorch 2.0 or later: zero_grad() frees the gradients between steps (--torch 1.13 keeps "
                   "them)") if setup.zero_grad_to_none else _("PyTorch before 2.0: zero_grad() keeps the gradients "
                                                            "allocated through the next forward and backward"))
    moments = step_moments(terms, setup.checkpointing)  # each moment: the terms alive in it
    first = step_moments(terms, setup.checkpointing, first=True)
    result = _finish(spec, setup, p, pt, seq, terms, moments, first, notes)
    result.activation_detail = [(n, v) for n, v in acts.layer_terms if v]
    return result


def _step_terms(spec: ModelSpec, setup: Setup, p: Params, dt: Dtypes, seq: int, s_dec: int, lora: bool, wt: float,
                lw: int, aw: int, terms: list[Term]) -> Acts:
    """A training step's activations and transients, appended to `terms`, each with the moments it is alive in:
    the saved activations, autocast's weight copies, the loss's logits and their gradients, backward's largest
    gradients, a checkpointed layer's recompute, a quantized base's dequantized weight, the last micro-step's graph
    where the loop holds it. Returns the activations (their per-layer detail)."""
    b, tp = setup.batch, setup.tp
    sh = Shape(b=b, s=seq, s_dec=s_dec, tp=tp)
    bnb = bool(setup.quant) and setup.quant_backend == "bitsandbytes"  # torchao's frozen linears keep no input
    acts = activations(spec, sh, dt, setup.attention == "flash", lora, quantized=bnb,
                       targets=setup.lora_targets if setup.lora else (), adapter=setup.adapter or 0,
                       prefix=setup.prefix_len or 0, lora_dropout=setup.lora_dropout,
                       fp32_adapters=bool(setup.lora) and lw == 4 and aw == 2,
                       # in fp32, or under autocast, the input is fp32 already: the linears share it
                       fp32_compute=bnb and setup.quant == "4bit" and setup.quant_compute_dtype == "fp32" and dt.x == 2
                       and not dt.mixed, quant_head=setup.quant_head, fused_qkv=setup.fused_qkv)
    n_enc = spec.layers
    n_dec = spec.decoder_layers if spec.encoder_decoder else 0
    outside = sum(v for _n, v in acts.outside)
    if setup.checkpointing:
        kept = n_enc * acts.ckpt_layer + n_dec * (b * (sh.s_dec or seq) * spec.hidden * dt.r)
        if spec.encoder_decoder:
            kept += n_dec * b * seq * spec.hidden * dt.r  # each decoder layer keeps the encoder output ref
            kept -= n_dec * b * seq * spec.hidden * dt.r  # ... which is one shared tensor
        a_total = kept + outside
        recompute = max(acts.layer, acts.dec_layer)
        act_f = _("{layers} layer inputs kept (b·s·h·{bytes} B = {each} each) + outside the layers {outside}").format(
            layers=n_enc + n_dec, bytes=dt.r, each=fmt(acts.ckpt_layer), outside=fmt(outside))
    else:
        a_total = n_enc * acts.layer + n_dec * acts.dec_layer + outside + acts.layer_adjust
        recompute = 0
        act_f = (_("{layers} layers × {each} + {decoder} decoder layers × {decoder_each} + outside the layers "
                   "{outside}") if n_dec else _("{layers} layers × {each} + outside the layers {outside}")).format(
            layers=n_enc, each=fmt(acts.layer), decoder=n_dec, decoder_each=fmt(acts.dec_layer), outside=fmt(outside))
    sizes = {"recompute": int(a_total) - outside}
    if setup.offload_activations:
        # torchtune's OffloadActivations (training/_activation_offloading.py, saved_tensors_hooks): each saved tensor
        # of 1 KiB or more is copied to pinned CPU memory as the forward saves it; its GPU copy stays in fwd_stash
        # until 5 later tensors were saved (max_fwd_stash_size, counted in saved tensors, parameters included), so
        # the final norm's saved tensors push the last layer's out: at the forward's end only what is saved outside
        # the layers is on the GPU. In backward a tensor brought back is freed once the next autograd node has run:
        # with checkpointing, one layer input beside its recompute; without, two nodes' saved tensors, bounded by
        # the layer's two largest (traced: tests/test_estimate_offload_trace.py)
        largest = sorted((v for _n, v in acts.layer_terms), reverse=True)[:2]
        in_flight = acts.ckpt_layer if setup.checkpointing else sum(largest)
        on_gpu = min(int(a_total), outside)
        act_f = _("activation offloading: outside the layers {outside} on the GPU at the forward's end; in "
                  "backward {each} brought back at a time; the other {rest} in pinned CPU memory").format(
            outside=fmt(outside), each=fmt(in_flight), rest=fmt(int(a_total) - on_gpu))
        sizes = ({"backward start": on_gpu, "recompute": min(int(a_total) - outside, in_flight)}
                 if setup.checkpointing else {"backward start": min(int(a_total), outside + in_flight)})
        a_total = on_gpu
    # saved from the forward until backward uses them; those outside the layers (the head's, the final norm's) are
    # used and freed before the first checkpointed layer is recomputed
    terms.append(Term(N_("activations"), int(a_total), act_f, "activations",
                      lifetime=("forward end", "backward start", "recompute"), sizes=sizes))
    wrote_copies = dt.mixed and not setup.quant
    if wrote_copies:  # cached by autocast for the forward; with checkpointing only the head's outlive it
        cast_copies = 2 * p.cast // tp
        terms.append(Term(N_("autocast 16-bit weight copies"), cast_copies,
                          _("{params:,} matmul params × 2 B, cached for the forward and kept for backward").format(
                              params=p.cast),
                          "transient", lifetime=("forward end", "backward start"),
                          sizes={"backward start": 2 * p.head_cast // tp} if setup.checkpointing else {}))
    # LitGPT's chunked lm_head + cross-entropy: the fp32 copy and the loss gradient one chunk at a time
    chunk_logits = acts.logits if not setup.ce_chunk else acts.logits * min(setup.ce_chunk, s_dec or seq) // (
        s_dec or seq)
    fwd_logits = (dt.x * acts.logits + (4 * chunk_logits if dt.x != 4 else 0)) // tp
    if fwd_logits:
        logits_f = (_("{logits:,} logits × {bytes} B + their fp32 copy for the loss, {chunk:,} × 4 B") if dt.x != 4
                    else _("{logits:,} logits × {bytes} B")).format(logits=acts.logits, bytes=dt.x, chunk=chunk_logits)
        terms.append(Term(N_("logits + fp32 copy (loss forward)"), fwd_logits, logits_f
                          + (f" / tp {tp}" if tp > 1 else ""), "transient", lifetime=("forward end",)))
    logits_extra = 8 * chunk_logits // tp
    # Backward of one layer holds the gradients of its largest activations for a moment (e.g.
    # softmax backward: grad of probs and of scores together).
    T = b * seq
    sm = softmax_bytes(spec, dt)
    scores = 0 if setup.attention == "flash" else b * spec.heads * seq * seq * sm // tp
    gx = 4 if spec.ffn == "gelu-new" and dt.mixed else dt.x  # gelu_new's chain runs in fp32 under autocast
    layer_bwd = 2 * max(T * spec.intermediate * gx // tp, scores, T * spec.hidden * dt.r)
    # the loss's backward runs, and frees its transients, before the last layer's: backward start holds the larger
    loss_first = logits_extra > layer_bwd
    # gelu_new's backward runs a chain of fp32 ops, each gradient beside the next (traced)
    recompute_bwd = layer_bwd if spec.ffn == "gelu-new" else layer_bwd // 2
    in_recompute = setup.checkpointing and not lora  # a frozen base's recompute has terms of its own (below)
    bwd_f = (_("2 × the largest gradient of one layer: max(b·s·i·{ffn}, b·a·s²·{scores} (eager), b·s·h·{hidden}) = "
               "{largest}") if scores else
             _("2 × the largest gradient of one layer: max(b·s·i·{ffn}, b·a·s²·{scores} (0 with flash), b·s·h·{hidden})"
               " = {largest}")).format(ffn=gx, scores=sm, hidden=dt.r, largest=fmt(layer_bwd // 2))
    terms.append(Term(N_("backward temporaries"), layer_bwd, bwd_f, "transient",
                      lifetime=("backward start", "recompute") if in_recompute else ("backward start",),
                      sizes={"backward start": 0 if loss_first else layer_bwd, "recompute": recompute_bwd}))
    if logits_extra:
        terms.append(Term(N_("loss-gradient transients (fp32)"), logits_extra,
                          (_("grad of log-softmax + grad of logits: {logits:,} logits × 8 B (one chunk of {tokens} "
                             "tokens)") if setup.ce_chunk else
                           _("grad of log-softmax + grad of logits: {logits:,} logits × 8 B")).format(
                              logits=chunk_logits, tokens=setup.ce_chunk), "transient",
                          lifetime=("backward start",), sizes={} if loss_first else {"backward start": 0}))
    if setup.checkpointing:
        recast = dt.mixed and not setup.quant  # bitsandbytes' weights are not autocast's to cast
        terms.append(Term(N_("recomputed layer"), recompute + (2 * p.layer_cast // tp if recast else 0),
                          (_("one layer's activations rebuilt in backward: {size} + its 16-bit weights") if recast
                           else _("one layer's activations rebuilt in backward: {size}")).format(size=fmt(recompute)),
                          "transient", lifetime=("recompute",)))
        if in_recompute:
            terms.append(Term(N_("gradients (head and one layer)"), int(p.largest_layer * wt) // tp,
                              _("the gradients written by then: the largest layer's, {params:,} × {bytes:g} B").format(
                                  params=p.largest_layer, bytes=wt)
                              + (f" / tp {tp}" if tp > 1 else ""), "gradients", lifetime=("recompute",)))
        else:  # a frozen base: no weight gradients at the recompute, but the rebuilt layer's activation
            # gradients beside its saved tensors (traced, HF llama/qwen3 + PEFT, b1 s32 to b2 s1024): the layer
            # output's gradient, then either the feed-forward's backward (the down-projection input's gradient
            # with those of the activation's inputs: gate and up of a gated feed-forward, 3 alive, else 2) or
            # the attention's, once the feed-forward's saved tensors are freed (eager: the probabilities' and
            # the scores' gradients, with v's; the probabilities' own copy for the second matmul, a 16-bit cast
            # or the dropout output, is freed by then)
            n_ffn = 3 if spec.ffn in ("swiglu", "gated-gelu") else 2
            ffn_grads = n_ffn * T * spec.intermediate * gx // tp
            probs = b * spec.heads * seq * seq * dt.x // tp if scores and (sm != dt.x or spec.attn_dropout) else 0
            attn_grads = 2 * scores + T * spec.inner * dt.x // tp
            rebuilt_grads = T * spec.hidden * dt.r + max(ffn_grads, attn_grads - acts.ffn - probs)
            ffn_f = _("the feed-forward's backward, {n} input gradients × b·s·i·{bytes} B = {size}").format(
                n=n_ffn, bytes=gx, size=fmt(ffn_grads))
            rebuilt_f = (_("the layer output's gradient b·s·h·{hidden} B + the larger of {ffn}, and the eager "
                           "attention's, 2 × b·a·s²·{scores} + v's b·s·h·{x} B less the feed-forward's {saved} and the "
                           "probabilities' copy {probs} freed by then") if scores and probs else
                         _("the layer output's gradient b·s·h·{hidden} B + the larger of {ffn}, and the eager "
                           "attention's, 2 × b·a·s²·{scores} + v's b·s·h·{x} B less the feed-forward's {saved} freed "
                           "by then") if scores else
                         _("the layer output's gradient b·s·h·{hidden} B + {ffn}"))
            terms.append(Term(N_("recompute gradients (frozen base)"), rebuilt_grads, rebuilt_f.format(
                hidden=dt.r, ffn=ffn_f, scores=sm, x=dt.x, saved=fmt(acts.ffn), probs=fmt(probs)), "transient",
                lifetime=("recompute",)))
    if setup.quant:
        terms.append(replace(_quant_transient(spec, p, setup, b * seq, train=True), lifetime="step"))
    if setup.keeps_last_graph:
        ctx_held = bnb_held_inputs(spec, b * seq, dt, setup.quant == "4bit" and setup.quant_compute_dtype == "fp32"
                                   and dt.x == 2 and not dt.mixed, setup.fused_qkv, setup.quant_head) \
            if bnb else 0
        terms.append(Term(N_("last micro-step's graph (held by the loop)"), ctx_held + dt.x * acts.logits // tp,
                          (_("its logits {logits} + the inputs bitsandbytes' matmuls keep as ctx attributes "
                             "(MatMul4Bit ctx.tensors: freed with the graph, not by backward) {held}") if ctx_held
                           else _("its logits {logits}")).format(logits=fmt(dt.x * acts.logits // tp),
                                                                  held=fmt(ctx_held)),
                          "activations", lifetime=("forward end", "backward start", "recompute")))
    return acts


def _inference(spec: ModelSpec, setup: Setup, p: Params, pt: int, seq: int, s_dec: int, terms: list[Term],
               notes: list[str]) -> Estimate:
    """Inference: beside the weights (`terms`), the KV cache, the prefill's held tensors, its largest working
    set and its logits, and generation's decode steps; the moments are the prefill, its logits and each step."""
    b, tp = setup.batch, setup.tp
    encoder_only: set[str] = set()
    decode: dict[str, list[str]] = {}  # generation's decode steps: the names of their own terms
    x = 2 if setup.precision != "fp32" else 4
    dti = Dtypes(x, x, x, x, x, False)
    if spec.bare:
        notes.append(_("no activations or KV cache: a bare parameter count has no shape"))
    else:
        flash = setup.attention == "flash"
        static = _static_len(spec, setup)
        # the cache's own heads: the query heads where k and v are expanded before it (torchtune < 0.5)
        cached = replace(spec, kv_heads=spec.heads) if setup.kv_expanded else spec
        if setup.cache_len and setup.cache_len < seq + max(setup.new_tokens, 1) - 1:
            raise EstimateError(_("{positions} positions cannot hold the prompt and the new tokens ({need})").format(
                positions=setup.cache_len, need=seq + max(setup.new_tokens, 1) - 1), param="cache_len")
        kv = kv_cache(cached, b, static or seq, x, tp, s_dec)
        expanded = (_("; k and v expanded to the {heads} query heads before the cache (torchtune's KVCache before "
                      "0.5)").format(heads=spec.heads) if cached is not spec and spec.kv_heads < spec.heads else "")
        if static and setup.cache_mask_whole:  # torchtune's setup_caches: the caches and the mask, before the prefill
            terms.append(Term(N_("KV cache"), kv, _(
                "a static cache of {positions} positions, every layer's KVCache made by setup_caches before the "
                "prefill (torchtune): {formula}").format(
                    positions=static, formula=_kv_formula(cached, b, static, x, tp)) + expanded, "kv"))
            terms.append(Term(N_("causal mask over the cache"), static * static, _(
                "torch.tril(torch.ones({positions}, {positions}, dtype=torch.bool)): {positions} × {positions} × 1 B, "
                "made with the caches (torchtune's setup_caches)").format(positions=static), "kv"))
        elif static:  # allocated whole before the prefill; the prefill's mask spans it
            static_f = (_("a static cache of {positions} positions, each layer's allocated whole at its first update "
                          "(StaticCache(max_cache_len={length}), the {window}-token window): {formula}")
                        if static < (setup.cache_len or 0) else
                        _("a static cache of {positions} positions, each layer's allocated whole at its first update "
                          "(StaticCache(max_cache_len={length})): {formula}"))
            terms.append(Term(N_("KV cache"), kv, static_f.format(
                positions=static, length=setup.cache_len, window=spec.sliding_window,
                formula=_kv_formula(cached, b, static, x, tp)) + expanded, "kv"))
        if static and (setup.cache_mask_whole or setup.static_prefill_mask):
            terms.append(Term(N_("static-cache attention mask"), b * seq * static, _(
                "the prefill's boolean mask over the whole cache, b·s·cache_len: {batch} × {seq} × {positions} × 1 B "
                "(SDPA's mask, transformers masking_utils)").format(batch=b, seq=seq, positions=static), "transient"))
        elif kv:
            terms.append(Term(N_("KV cache"), kv, _kv_formula(cached, b, seq, x, tp, s_dec) + expanded, "kv"))
        if setup.cache_views and spec.qkv_views:
            terms.append(Term(N_("q beside the cache (fused qkv)"), kv // 2, _(
                "the cache keeps views of GPT-2's fused qkv projection (transformers < 4.54), so its q third stays "
                "allocated through the prefill"), "kv"))
        if spec.encoder_decoder:  # the encoder's forward, then the decoder's prefill beside the cache
            encoder, decoder = t5_inference(spec, b, seq, s_dec, dti, flash, tp)
            terms += [Term(name, size, formula, "transient") for name, size, formula in encoder + decoder]
            encoder_only = {name for name, _s, _f in encoder}
        else:
            for name, size, formula in inference_held(spec, b, seq, dti, flash):
                terms.append(Term(name, size, formula, "transient"))
            ws = inference_working_set(spec, b, seq, dti, flash, tp)
            working = (_("largest layer working set: residual + norm, q/k/v, attention scores, feed-forward inner "
                         "(no-grad forward)") if setup.attention == "eager" else
                       _("largest layer working set: residual + norm, q/k/v, feed-forward inner (no-grad forward)"))
            held = hf_inference_note(spec, flash)
            terms.append(Term(N_("forward temporaries"), ws, _("{formula}; {held}").format(formula=working, held=held)
                              if held else working, "transient"))
        if spec.head == "lm":
            size, formula = prefill_logits(spec, b, s_dec or seq, x, setup.all_logits)  # T5: the decoder's
            terms.append(Term(N_("logits (every position)") if setup.all_logits else N_("logits (last token, fp32)"),
                              size, formula, "transient"))
        if setup.new_tokens > 1 and kv:
            steps = generation_steps(cached, b, seq, setup.new_tokens, dti, flash, tp, setup.legacy_cache,
                                     setup.all_logits, static)
            terms += [t for step in steps.values() for t in step if t.name not in {u.name for u in terms}]
            decode = {name: [t.name for t in step] for name, step in steps.items()}
    if setup.quant:
        terms.append(_quant_transient(spec, p, setup, b * seq, train=False))
        if decode:  # a decode step multiplies one token a sequence: its matmul buffers are that size
            step_quant = _quant_transient(spec, p, setup, b, train=False)
            terms.append(replace(step_quant, name=N_("dequantized weight (decode step)"),
                                 formula=step_quant.formula + " (one token a sequence)"))
            for names in decode.values():
                names.append("dequantized weight (decode step)")
    if setup.gpus > 1 and tp == 1:
        terms = _split_over_gpus(spec, p, setup.gpus, terms, notes)
    in_decode = {n for names in decode.values() for n in names}
    prefill_terms = [t for t in terms if t.name not in in_decode or t.name.startswith("logits")]
    moments = {"forward": {t.name: t.bytes for t in prefill_terms if not t.name.startswith("logits")
                           and t.name not in encoder_only}}
    if encoder_only:  # no cache yet while the encoder runs
        moments["encoder forward"] = {t.name: t.bytes for t in terms if t.kind not in ("transient", "kv")
                                      or t.name in encoder_only}
    if any(t.name.startswith("logits") for t in terms):  # the layers' temporaries are freed by then
        moments["logits"] = {t.name: t.bytes for t in prefill_terms if t.kind != "transient"
                             or t.name.startswith("logits")}
    named = {t.name: t.bytes for t in terms}
    for step, names in decode.items():  # the weights, the prefill's cache and the step's own terms
        moments[step] = {t.name: t.bytes for t in terms if t.kind == "weights"
                         or t.name in ("KV cache", "causal mask over the cache")} \
            | {n: named[n] for n in names}
    return _finish(spec, setup, p, pt, seq, terms, moments, dict(moments), notes)


def _model_states(spec: ModelSpec, setup: Setup, p: Params, pt: int, wt: float, lora: bool, dp: int,
                  terms: list[Term], notes: list[str]) -> tuple[Term, Term, Term]:
    """Training's gradients, optimizer states and the optimizer step's temporaries for `pt` trainable parameters
    in `wt` bytes: DeepSpeed's ZeRO (its buckets appended to `terms`), or PyTorch's own optimizers (fused,
    foreach, a parameter at a time, torchao's low-bit, FSDP's shards, optimizer in backward)."""
    g: float  # bytes; float where a formula has fractional bytes per param
    o: float
    tmp: float
    if setup.zero is not None:  # DeepSpeed
        w16 = 4 if setup.precision == "fp32" else 2
        k_opt = {"adamw": 12, "sgd": 4, "sgd-momentum": 8, "adafactor": 4, "adamw-8bit": 6}[setup.optimizer]
        if setup.precision == "fp32":
            k_opt -= 4  # no separate fp32 master copy
        gshard = dp if setup.zero >= 2 else 1
        oshard = dp if setup.zero >= 1 else 1
        g = pt * w16 // gshard
        o = pt * k_opt // oshard
        if setup.offload:
            o = 0
            g = min(g, 2 * p.largest * w16)
            notes.append(_("ZeRO-Offload: optimizer states and fp32 master weights live in CPU memory"))
        grad_f = f"{pt:,} × {w16} B"
        if gshard > 1:
            grad_f = _("{formula} / {gpus} GPUs").format(formula=grad_f, gpus=gshard)
        opt_f = _("K={k} B/param (ZeRO paper: fp32 master + states) × {params:,}").format(k=k_opt, params=pt)
        if oshard > 1:
            opt_f = _("{formula} / {gpus} GPUs").format(formula=opt_f, gpus=oshard)
        if setup.offload:
            opt_f = _("offloaded to CPU")
        tmp = 0
        tmp_f = _("DeepSpeed's fused optimizer: none counted")
        terms.append(replace(_zero_buckets(setup, pt, w16), lifetime="step"))
    else:
        g = int(pt * wt)
        o, tmp, opt_f, tmp_f = _optimizer(setup.optimizer, pt, wt, p, lora)
        if setup.fused and setup.optimizer == "adamw":  # torch._fused_adamw_: every state updated in place
            tmp, tmp_f = 0, _("fused AdamW (torch._fused_adamw_, one kernel over each parameter): none")
        elif setup.optimizer in TORCHAO_STATES:  # a parameter at a time already
            pass
        elif not setup.foreach and tmp:  # one parameter at a time: the largest one's temporaries
            # _single_tensor_adamw: exp_avg_sq.sqrt() and its quotient by the bias correction, both alive
            n = (2 if setup.optimizer == "adamw" else 1) * min(pt, p.largest)
            tmp = n * wt
            tmp_f = _("for-loop {optimizer} (one parameter at a time): the largest tensor's temporaries, "
                      "{params:,} × {bytes:g} B").format(optimizer=setup.optimizer, params=n, bytes=wt)
        elif setup.foreach_denom_copy and setup.optimizer == "adamw":
            tmp, tmp_f = 2 * tmp, _("{formula} + its copy with eps added (PyTorch 2.0's foreach Adam: denom)").format(
                formula=tmp_f)
        grad_f = _("{params:,} trainable params × {bytes:g} B").format(params=pt, bytes=wt)
        if setup.fsdp:  # sharded like the parameters, or with them on the CPU
            sharded = (_("{formula} (on the CPU: FSDP CPUOffload)") if setup.offload_params else
                       _("{formula} / {gpus} GPUs (FSDP)"))
            g, o, tmp = (0, 0, 0) if setup.offload_params else (g // dp, o / dp, tmp / dp)
            grad_f, opt_f, tmp_f = (sharded.format(formula=f, gpus=dp) for f in (grad_f, opt_f, tmp_f))
            if not spec.bare:
                terms.append(_fsdp_unit_gradient(spec, p, pt if lora else 0, wt, dp))
    if setup.optimizer_in_backward:
        # torchtune's optimizer_in_bwd: one optimizer a parameter, stepped from its post-accumulate-grad hook, which
        # then drops the gradient: one parameter's gradient and its step's temporaries at a time, inside backward
        one = min(pt, p.largest)
        g = one * wt
        grad_f = _("optimizer in backward: each gradient stepped and freed as it is accumulated, the largest "
                   "{params:,} × {bytes:g} B").format(params=one, bytes=wt)
        if tmp:
            tmp = min(tmp, (2 if setup.foreach_denom_copy else 1) * one * wt)
            tmp_f = _("one parameter's step at a time (its own optimizer): {params:,} × {bytes:g} B").format(
                params=one, bytes=wt)
    # the gradients live from backward to the optimizer step; later micro-steps run with them held, and so does
    # every step when zero_grad keeps them; zeroed before backward, they are in the next forward too (not the first)
    held = setup.grad_accum > 1 or not setup.zero_grad_to_none
    g_life: tuple[str, ...] = ("backward end", "optimizer step") + (
        ("forward end", "backward start", "recompute") if held else ())
    zeroed_late = setup.zero_grad_before_backward and not held
    return (Term(N_("gradients"), int(g), grad_f, "gradients",
                 lifetime=g_life + (("forward end",) if zeroed_late else ()),
                 first_step=g_life if zeroed_late else None),
            # the states live through every moment from the first update on (torch creates them lazily): not
            # whole_step, which is every moment of every step
            Term(f"optimizer states ({setup.optimizer})", int(o), opt_f, "optimizer", lifetime=STEP_MOMENTS,
                 first_step=("optimizer step",)),
            Term(N_("optimizer-step temporaries"), int(tmp), tmp_f, "transient", lifetime=("optimizer step",)))


def _static_len(spec: ModelSpec, setup: Setup) -> int:
    """The positions a static cache holds (0: a dynamic cache): --cache-len, or the sliding window where the
    model has one (transformers' sliding-window cache layers keep the window alone)."""
    if not setup.cache_len:
        return 0
    return min(setup.cache_len, spec.sliding_window) if spec.sliding_window else setup.cache_len


def _torchao_weight_only(spec: ModelSpec, p: Params, setup: Setup) -> Term:
    """torchao's quantize_ with a weight-only config replaces the weight of every nn.Linear, the output layer's
    too (its default filter), by an affine-quantized tensor: int8 or float8 values with a scale per output row,
    or int4 values two a byte (Int4Tensor's plain packing) with a bf16 scale and zero point per group of 128; the
    embeddings, norms and biases stay 16-bit."""
    assert setup.quant is not None
    per, row_scale = TORCHAO_WEIGHT_ONLY[setup.quant]
    if setup.quant == "int8-wo" and setup.int8_wo_v1:
        row_scale = INT8_WO_V1_ROW
    rows = sum(s[0] for n, s, c in p.shapes if _quantized_tensor(n, s, c, True)) if not spec.bare else 0
    rest = p.total - p.quantized
    size = (p.quantized * per + rows * row_scale + rest * 2) / setup.tp
    weights_f = (_("{quantized:,} linear weights × {bytes:.4g} B (torchao {quant}, + {rows:,} output rows × "
                   "{scale} B of scales and zero points) + {rest:,} others × 2 B (embeddings, norms, biases stay "
                   "16-bit)")
                 if row_scale and rows else
                 _("{quantized:,} linear weights × {bytes:.4g} B (torchao {quant}) + {rest:,} others × 2 B "
                   "(embeddings, norms, biases stay 16-bit)")).format(
        quantized=p.quantized, bytes=per, quant=setup.quant, rows=rows, scale=row_scale, rest=rest)
    return Term(N_("weights"), int(size), weights_f + (f" / tp {setup.tp}" if setup.tp > 1 else ""), "weights")


def _quant_transient(spec: ModelSpec, p: Params, setup: Setup, tokens: int, train: bool) -> Term:
    """What one bitsandbytes matmul allocates beside its output, for the largest quantized linear:
    4-bit dequantizes the whole weight to 16-bit (forward, and backward for the input gradient);
    8-bit (LLM.int8) quantizes the input to int8 and multiplies into an int32 output, and in
    backward dequantizes the weight for the input gradient."""
    out_f, in_f = p.largest_quantized
    shape = (_("{rows:,} × {columns:,} (a typical shape for the count: no layers known)") if spec.bare
             else "{rows:,} × {columns:,}").format(rows=out_f, columns=in_f)
    weight = out_f * in_f * 2 // setup.tp
    if setup.quant == "int4-wo":  # mslk's bf16i4bf16_rowwise (tinygemm's _weight_int4pack_mm) reads the packed weight
        return Term(N_("dequantized weight"), 0, _("torchao int4 weight-only: its kernel (mslk's bf16i4bf16_rowwise; "
                                                    "tinygemm's _weight_int4pack_mm) reads the packed weight, no copy"),
                    "transient")
    if setup.quant in TORCHAO_WEIGHT_ONLY:  # int8: w.to(x.dtype) before the mm; float8: dequantize() then linear
        return Term(N_("dequantized weight"), weight, _(
            "torchao {quant}: the largest quantized matrix {shape} dequantized to 16-bit for each matmul").format(
                quant=setup.quant, shape=shape), "transient")
    rows = 0 if spec.bare else tokens  # a bare count has no batch shape
    if setup.quant == "4bit":
        if setup.quant_compute_dtype != "fp32" or setup.quant_backend == "torchao":  # torchao: the input's dtype
            return Term(N_("dequantized weight"), weight, _(
                "largest quantized matrix {shape} × 2 B, dequantized per matmul").format(shape=shape), "transient")
        # Linear4bit casts its input to fp32 (kept as an activation in training), dequantizes the weight
        # to fp32 and multiplies into an fp32 output, cast back to the input's dtype after
        cast = rows * ((0 if train else in_f) + out_f) * 4 // setup.tp
        dequantized = (_("largest quantized matrix {shape} × 4 B, dequantized per matmul in the fp32 compute dtype "
                         "(bnb_4bit_compute_dtype, HF's default) + its fp32 output {size}") if cast and train else
                       _("largest quantized matrix {shape} × 4 B, dequantized per matmul in the fp32 compute dtype "
                         "(bnb_4bit_compute_dtype, HF's default) + its fp32 input and output {size}") if cast else
                       _("largest quantized matrix {shape} × 4 B, dequantized per matmul in the fp32 compute dtype "
                         "(bnb_4bit_compute_dtype, HF's default)"))
        return Term(N_("dequantized weight"), 2 * weight + cast, dequantized.format(shape=shape, size=fmt(cast)),
                    "transient")
    int8 = rows * (in_f + 4 * out_f) // setup.tp
    size = max(int8, weight) if train else int8
    buffers = (_("int8 input + int32 output {size}").format(size=fmt(int8)) if rows
               else _("its int8 input and int32 output not counted"))
    int8_f = _("LLM.int8 matmul of the largest quantized matrix {shape}: {buffers}").format(shape=shape,
                                                                                            buffers=buffers)
    if train:
        int8_f = _("{formula}; backward dequantizes the weight {size}").format(formula=int8_f, size=fmt(weight))
    return Term(N_("dequantized weight"), size, int8_f, "transient")


def _split_over_gpus(spec: ModelSpec, p: Params, gpus: int, terms: list[Term], notes: list[str]) -> list[Term]:
    """Inference with the layers split over `gpus` (device_map="auto", one GPU at a time computing):
    the fullest GPU holds its share of the layers, and the embeddings (first GPU) or the final norm
    and lm_head (last GPU), whichever is larger; the KV cache is its layers' share."""
    layers = spec.layers + spec.decoder_layers
    if spec.bare or layers < 2:
        share = 1 / gpus
        what = _("1/{gpus} of the parameters (a bare count: no layers known)").format(gpus=gpus)
    else:
        per_gpu = -(-layers // min(gpus, layers))
        in_layers = sum(numel(s) for n, s, _ in p.shapes if n.startswith(("layer", "encoder.", "decoder.")))
        tail = sum(numel(s) for n, s, _ in p.shapes if n.startswith(("lm_head", "norm_f", "classifier", "head.")))
        head = p.total - in_layers - tail
        fullest = in_layers * per_gpu // layers + max(head, tail) if not spec.tied else \
            in_layers * per_gpu // layers + head + tail
        share = fullest / p.total
        what = _("{layers} of {all_layers} layers + the larger end ({params:,} params) on the fullest GPU").format(
            layers=per_gpu, all_layers=layers, params=max(head, tail))
    kv_share = (-(-layers // min(gpus, max(layers, 1))) / layers) if layers else 1 / gpus
    notes.append(_("split over {gpus} GPUs (device_map='auto', layer by layer): the fullest GPU is shown").format(
        gpus=gpus))
    out = []
    for t in terms:
        if t.kind == "weights":
            t = Term(t.name, int(t.bytes * share), f"{t.formula}; × {share:.3f}: {what}", t.kind)  # arithmetic
        elif t.kind == "kv":
            t = Term(t.name, int(t.bytes * kv_share), _("{formula}; × {share:.3f}: this GPU's layers").format(
                formula=t.formula, share=kv_share), t.kind)
        out.append(t)
    return out


def _zero_buckets(setup: Setup, pt: int, w16: int) -> Term:
    """DeepSpeed's gradient-reduction buffers, in the gradient dtype. Stages 1-2 (contiguous_gradients,
    its default) allocate reduce_bucket_size elements in every backward, a second such buffer with
    overlap_comm, whatever the model's size; stage 3 one flat buffer of that size. The allgather
    bucket only bounds the chunks gathered into the parameters' own flat buffer: nothing of its own.
    (DeepSpeed runtime/zero/stage_1_and_2.py backward(), stage3.py __ipg_bucket_flat_buffer)"""
    assert setup.zero is not None
    size = setup.zero_reduce_bucket
    if setup.zero == 0:
        return Term(N_("DeepSpeed communication buckets"), 0, _("ZeRO-0: DeepSpeed's plain data parallel"), "overhead")
    if setup.zero == 3:
        return Term(N_("DeepSpeed communication buckets"), size * w16, _(
            "the reduce bucket's flat buffer: {elements:,} elements × {bytes} B").format(elements=size, bytes=w16),
            "overhead")
    n = 2 if setup.zero_overlap_comm else 1
    return Term(N_("DeepSpeed communication buckets"), n * size * w16, (
        _("{n} reduce bucket buffers (overlap_comm) of {elements:,} elements × {bytes} B, allocated in backward "
          "whatever the model's size") if n > 1 else
        _("{n} reduce bucket buffer of {elements:,} elements × {bytes} B, allocated in backward whatever the model's "
          "size")).format(n=n, elements=size, bytes=w16), "overhead")


def _zero3_gathered(p: Params, setup: Setup, w16: int, tp: int, shard: int) -> list[Term]:
    """ZeRO-3 on each GPU: the layer being computed plus what the prefetch bucket fetched ahead (at
    most max_live_parameters), and the small parameters it never partitions (persistence threshold)."""
    live = min(p.largest_layer + setup.zero_prefetch_bucket, setup.zero_max_live, p.total)
    small = sum(numel(s) for _n, s, _c in p.shapes if numel(s) < setup.zero_persistence)
    return [Term(N_("ZeRO-3 gathered layers"), live * w16 // tp,
                 _("min(largest layer {layer:,} + prefetch bucket {prefetch:,}, max live {live:,}) params × {bytes} B")
                 .format(layer=p.largest_layer, prefetch=setup.zero_prefetch_bucket, live=setup.zero_max_live,
                         bytes=w16), "transient", lifetime="step"),
            Term(N_("ZeRO-3 persistent parameters"), small * w16 // tp - (0 if setup.offload_params else
                 small * w16 // tp // shard),
                 _("{params:,} params in tensors under the persistence threshold ({threshold:,}) kept whole on every "
                   "GPU × {bytes} B").format(params=small, threshold=setup.zero_persistence, bytes=w16), "weights")]


def _in_layers(p: Params) -> int:
    """Parameters inside the transformer layers (what a per-layer wrap policy makes units of)."""
    return sum(numel(s) for n, s, _ in p.shapes if n.startswith(("layer", "encoder.", "decoder.")))


def _fsdp_gathered(p: Params, w: float) -> Term:
    """FSDP full shard with one unit per layer: the root unit (embeddings, head: the parameters outside
    the layers) stays gathered from forward through backward (FSDP does not reshard the root after
    forward), and in backward the unit being computed plus the next one, prefetched (BACKWARD_PRE,
    the default). (torch.distributed.fsdp _runtime_utils: _post_forward_reshard, _prefetch_handle)"""
    root = p.total - _in_layers(p)
    live = root + 2 * p.largest_layer
    return Term(N_("FSDP gathered units"), int(live * w), _(
        "(root unit {root:,} + 2 layers × {layer:,}) params × {bytes:g} B: the root, the layer computed and the next "
        "one prefetched").format(root=root, layer=p.largest_layer, bytes=w), "transient",
                lifetime=("forward end", "backward start", "backward end", "recompute"))  # resharded before the step


def _quantized_tensor(name: str, shape: tuple[int, ...], cast: bool, quant_head: bool) -> bool:
    """Whether bitsandbytes quantizes this tensor: an nn.Linear weight, not HF's output module (params_of)."""
    return cast and len(shape) == 2 and name.endswith(".weight") and (quant_head or name not in UNQUANTIZED_OUTPUTS)


def _packed_4bit(spec: ModelSpec, p: Params, quant_head: bool) -> Params:
    """The parameters as FSDP and ZeRO-3 flatten them when bitsandbytes packs its 4-bit weights in a 16-bit
    storage dtype (bnb_4bit_quant_storage): each quantized weight a tensor of numel/4 16-bit elements (two
    4-bit values a byte), the others as they are; counts in 16-bit storage elements. Layers are uniform."""
    def stored(name: str, shape: tuple[int, ...], cast: bool) -> tuple[int, ...]:
        return (-(-numel(shape) // 4), 1) if _quantized_tensor(name, shape, cast, quant_head) else shape

    shapes = [(n, stored(n, s, c), c) for n, s, c in p.shapes]
    in_layers = [(n, s, c) for n, s, c in p.shapes if n.startswith(("layer", "encoder.", "decoder."))]
    per_layer = sum(numel(s) - numel(stored(n, s, c)) for n, s, c in in_layers) // max(
        1, spec.layers + spec.decoder_layers)
    return replace(p, total=sum(numel(s) for _n, s, _c in shapes), largest_layer=p.largest_layer - per_layer,
                   largest=max(numel(s) for _n, s, _c in shapes), shapes=shapes)


def _sharded_4bit(spec: ModelSpec, p: Params, setup: Setup, dp: int) -> list[Term]:
    """FSDP / ZeRO-3 over a bitsandbytes 4-bit base (PEFT's QLoRA recipes): the packed weights, the 16-bit
    embeddings, norms and output layer are one flat set of 16-bit elements, sharded over the GPUs (or, under
    FSDP's CPU offload, on the CPU); each quantized weight's quant state (absmax, and the second-level
    constants with double quantization) is an attribute of its module, not a parameter: every GPU keeps all
    of it (bitsandbytes Params4bit / fix_4bit_weight_quant_state_from_module). Each layer is gathered whole
    before it runs: the units FSDP keeps gathered, or ZeRO-3's live layers, in packed 16-bit elements."""
    packed = _packed_4bit(spec, p, setup.quant_head)
    qb = quant_bytes("4bit", setup.double_quant)
    state = int(p.quantized * (qb - 0.5)) // setup.tp
    kind = "double-quantized " if setup.double_quant else ""
    where = "FSDP" if setup.fsdp else "ZeRO-3"
    offloaded = setup.fsdp and setup.offload_params
    terms = [Term(N_("weights"), 0 if offloaded else packed.total * 2 // setup.tp // dp,
                  _("in CPU memory (FSDP CPUOffload): {elements:,} 16-bit elements").format(elements=packed.total)
                  if offloaded else
                  _("{elements:,} 16-bit elements ({quantized:,} 4-bit weights packed 4 to an element "
                    "(bnb_4bit_quant_storage) + {rest:,} 16-bit embeddings, norms and output layer) × 2 B / {gpus} "
                    "GPUs ({sharding})").format(elements=packed.total, quantized=p.quantized,
                                                rest=p.total - p.quantized, gpus=dp, sharding=where), "weights"),
             Term(N_("4-bit quant state (every GPU)"), state, (
                 _("{weights:,} quantized weights × {bytes:.4g} B (double-quantized block constants): module "
                   "attributes, not parameters: not sharded") if kind else
                 _("{weights:,} quantized weights × {bytes:.4g} B (block constants): module attributes, not "
                   "parameters: not sharded")).format(weights=p.quantized, bytes=qb - 0.5), "weights")]
    if spec.bare:  # a bare count has no layers to gather
        return terms
    if setup.fsdp:
        return [*terms, _fsdp_gathered(packed, 2)]
    return [*terms, *_zero3_gathered(packed, setup, 2, setup.tp, dp)]


def _fsdp_unit_gradient(spec: ModelSpec, p: Params, trainable: int, w: float, dp: int) -> Term:
    """One unit's unsharded gradient and the shard its reduce-scatter writes (no bucket: FSDP reduces
    per unit); the root unit's comes last. `trainable`: the adapters' count under LoRA, else 0 (all)."""
    layers = spec.layers + spec.decoder_layers
    unit = max(p.largest_layer, p.total - _in_layers(p)) if not trainable else -(-trainable // max(1, layers))
    size = unit + -(-unit // dp)
    return Term(N_("FSDP unit gradient"), int(size * w), _(
        "the largest unit's gradient {unit:,} + its reduce-scattered shard {shard:,}, × {bytes:g} B").format(
            unit=unit, shard=-(-unit // dp), bytes=w), "transient", lifetime=("backward start", "backward end"))


def _targets(spec: ModelSpec, setup: Setup) -> tuple[str, ...]:
    return lora_targets(spec, setup.lora_targets)


def _kv_formula(spec: ModelSpec, b: int, s: int, x: int, tp: int, s_dec: int = 0) -> str:
    if spec.encoder_decoder:
        return _("2 × {layers} layers × {batch} × ({self_len} self + {cross_len} cross) × {inner} × {bytes} B").format(
            layers=spec.decoder_layers, batch=b, self_len=s_dec or s, cross_len=s, inner=spec.inner, bytes=x)
    window = spec.sliding_window and s > spec.sliding_window
    tokens = _("{tokens} tokens (all of the prefill; {window} once decoding goes on: the sliding window)").format(
        tokens=s, window=spec.sliding_window) if window else _("{tokens} tokens").format(tokens=s)
    heads = (_("{heads} kv-heads (multi-query)") if spec.kv_heads == 1 else
             _("{heads} kv-heads (grouped-query)") if spec.kv_heads < spec.heads else
             _("{heads} kv-heads")).format(heads=spec.kv_heads)
    return (_("2 (k,v) × {layers} layers × {batch} × {tokens} × {heads} × {head_dim} × {bytes} B").format(
        layers=spec.layers, batch=b, tokens=tokens, heads=heads, head_dim=spec.head_dim, bytes=x)
        + (f" / tp {tp}" if tp > 1 else ""))


def _finish(spec: ModelSpec, setup: Setup, p: Params, pt: int, seq: int, terms: list[Term],
            moments: dict[str, dict[str, int]], first: dict[str, dict[str, int]], notes: list[str]) -> Estimate:
    workspaces = 0 if spec.bare else CUBLAS_WORKSPACES  # a bare count: model states only
    pooled, own = cublas_workspaces(setup, workspaces)
    totals = {k: sum(v.values()) + pooled for k, v in moments.items()}  # allocated from the first matmul
    first_totals = {k: sum(v.values()) + pooled for k, v in first.items()}
    peak_moment = max(totals, key=lambda k: totals[k])
    steady = totals[peak_moment]
    peak = max(steady, max(first_totals.values()))
    breakdown = {k: v for k, v in moments[peak_moment].items() if v}
    if workspaces:
        breakdown["cuBLAS workspaces"] = workspaces
        terms = terms + [Term(N_("cuBLAS workspaces"), workspaces, _(
            "cuBLAS's own workspaces (cudaMalloc: PyTorch before 2.0 gave it none from the caching allocator), "
            "outside max_memory_allocated and reserved; nvidia-smi counts them (the H200's 64 MiB)") if own else _(
            "PyTorch's cuBLAS + cuBLASLt workspaces (32 MiB each on Hopper), kept in the caching allocator from the "
            "first matmul"), "overhead")]
    reserved = round_segments(int(peak * (1 + setup.fragmentation)))
    context = setup.context_overhead if setup.context_overhead is not None else default_context(setup.cuda)
    terms = terms + [
        Term(N_("allocator overhead"), reserved - peak, _(
            "caching allocator: {share:.0%} fragmentation over the peak, rounded up to 2 MiB segments "
            "(estimate)").format(share=setup.fragmentation), "overhead"),
        Term(N_("CUDA context"), context, ("--context-overhead" if setup.context_overhead is not None else
             (_("default for CUDA {version:g}: lazy module loading") if setup.cuda >= 11.7
              else _("default for CUDA {version:g}: eager module loading")).format(version=setup.cuda)), "overhead")]
    breakdown["allocator overhead"] = reserved - peak
    loaded = reserved_by_loading(spec, setup)
    if setup.loading:
        notes.append(_("{loader} loading leaves {size} reserved (its segments stay cached); reserved is the larger "
                       "of that and the step's").format(loader=setup.loading, size=fmt(loaded)))
    if loaded > reserved:  # the allocator keeps what loading reserved: the step runs in those segments
        terms.insert(-1, Term(N_("cached since loading"), loaded - reserved, _(
            "{loader}'s model build and checkpoint load leave {size} reserved (a replay through the caching allocator; "
            "no empty_cache), more than the step needs").format(loader=setup.loading, size=fmt(loaded)), "overhead"))
        breakdown["cached since loading"] = loaded - reserved
        reserved = loaded
    breakdown["CUDA context"] = context
    return Estimate(model=spec.name, family=spec.family, setup=setup, params=p.total, trainable=pt
                    if setup.mode == "train" else 0, seq=seq, terms=terms, moments=totals,
                    first_step=first_totals,
                    peak_moment=peak_moment, peak_bytes=int(peak), steady_bytes=int(steady),
                    reserved_bytes=reserved, context_bytes=context, total_bytes=reserved + context + own,
                    breakdown={k: int(v) for k, v in breakdown.items()}, notes=notes)


def cublas_workspaces(setup: Setup, workspaces: int = CUBLAS_WORKSPACES) -> tuple[int, int]:
    """(the workspaces in the caching allocator, those cuBLAS allocated itself): PyTorch hands cuBLAS a workspace
    from its allocator (cublasSetWorkspace) from 2.0 on; before, cuBLAS cudaMallocs its own, which only nvidia-smi
    sees."""
    return (0, workspaces) if setup.cublas_own_workspace else (workspaces, 0)


__all__ = ["Estimate", "EstimateError", "GiB", "MiB", "Setup", "default_context", "estimate"]
