"""The software stack an estimate assumes, and the one table of library behaviours that change memory.

A `Stack` names the versions of torch, transformers, peft, bitsandbytes, torchao, deepspeed and torchtune; by
default the ones installed beside vram (read from their package metadata, never imported), else the
releases current when this vram was made. Each behaviour that changes memory is one row of
BEHAVIOURS: what it is, the versions or training loops it belongs to, whether the traced estimator
reproduces it, the words describe() prints, and the Setup field it sets. Every reader goes through
this table: the command line (setup_for), Setup.describe() and --explain (active), the planner
(remedies) and the tracer (untraced).
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from ..i18n import N_, _, join_words, pgettext
from .specs import LLAMA_LIKE, EstimateError, ModelSpec

if TYPE_CHECKING:
    from .analytic import Setup

LIBRARIES = ("torch", "transformers", "peft", "bitsandbytes", "torchao", "deepspeed", "torchtune")
Version = tuple[int, int]

# the releases an estimate assumes where a library is not installed beside vram
CURRENT: dict[str, Version] = {"torch": (2, 13), "transformers": (5, 24), "peft": (0, 21), "bitsandbytes": (0, 49),
                               "torchao": (0, 18), "deepspeed": (0, 18), "torchtune": (0, 6)}

# the training loops whose own behaviour changes memory (--loop); hf-trainer is the default
LOOPS = ("hf-trainer", "accelerate", "lightning", "litgpt", "torchtune", "plain")
DEFAULT_LOOP = "hf-trainer"

_NAMES = {"torch": "PyTorch"}
_VERSION_RE = re.compile(r"([0-9]{1,4})\.([0-9]{1,4})(?:[.+][0-9A-Za-z.+]{0,40})?", re.ASCII)


def parse_version(text: str, library: str) -> Version:
    """'2.1', '4.53.2', '2.1.0+cu118' or '2.1.0.dev20230623' -> (major, minor); else EstimateError
    naming the library's flag."""
    match = _VERSION_RE.fullmatch(str(text).strip())
    if not match:
        raise EstimateError(_("{value!r} is not a {library} version such as {example}").format(
            value=str(text)[:40], library=_NAMES.get(library, library), example=".".join(map(str, CURRENT[library]))),
            param=library)
    return int(match[1]), int(match[2])


@dataclass(frozen=True)
class Stack:
    torch: Version = CURRENT["torch"]
    transformers: Version = CURRENT["transformers"]
    peft: Version = CURRENT["peft"]
    bitsandbytes: Version = CURRENT["bitsandbytes"]
    torchao: Version = CURRENT["torchao"]
    deepspeed: Version = CURRENT["deepspeed"]
    torchtune: Version = CURRENT["torchtune"]
    # which libraries were not installed and fell back to CURRENT, or were given explicitly
    origin: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @classmethod
    def installed(cls) -> Stack:
        """The versions installed beside vram (package metadata; nothing is imported), else CURRENT."""
        return _installed_stack()

    def given(self, **versions: str | None) -> Stack:
        """This stack with the libraries named set to the versions given (text, as typed)."""
        changed = {lib: parse_version(text, lib) for lib, text in versions.items() if text is not None}
        if not changed:
            return self
        origin = tuple((lib, "given" if lib in changed else how) for lib, how in self.origin or
                       ((lib, "current release") for lib in LIBRARIES))
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "origin"}
        return Stack(**{**values, **changed}, origin=origin)

    def parse(self, text: str) -> Stack:
        """--stack 'torch=2.1,transformers=4.36': the libraries named, the rest as in this stack."""
        versions: dict[str, str | None] = {}
        for part in (p.strip() for p in text.split(",") if p.strip()):
            name, _eq, version = part.partition("=")
            name = name.strip().lower()
            if name not in LIBRARIES or not version.strip():
                raise EstimateError(_("{value!r}: give LIBRARY=VERSION, a comma list of {libraries} "
                                      "(torch=2.1,transformers=4.36)").format(value=part[:40],
                                                                              libraries=", ".join(LIBRARIES)),
                                    param="stack")
            versions[name] = version
        try:
            return self.given(**versions)
        except EstimateError as e:  # the library's version is bad: --stack is the flag that said it
            raise EstimateError(str(e), param="stack") from None

    def version(self, library: str) -> Version:
        value: Version = getattr(self, library)
        return value

    def __str__(self) -> str:
        return self.naming(LIBRARIES)

    def naming(self, libraries: tuple[str, ...]) -> str:
        """'torch 2.13, transformers 5.24 installed' for the libraries given (each with where its version came
        from where they differ: installed, given, the current release)."""
        origin = dict(self.origin)
        named = [f"{lib} {'.'.join(map(str, self.version(lib)))}" for lib in libraries]
        whence = {origin.get(lib, "") for lib in libraries}
        if len(whence) == 1:
            return _whence(join_words(named), whence.pop() if origin else "")
        return join_words([_whence(text, origin.get(lib, "")) for text, lib in zip(named, libraries)])


@functools.cache
def _installed_stack() -> Stack:
    # Read once per process: the package metadata of seven libraries is ~70 ms (each METADATA file parsed
    # as an email), and estimate() asks for it on every call (a sweep, `vram plan` over cards, a notebook).
    versions: dict[str, Version] = {}
    origin = []
    for library in LIBRARIES:
        try:
            versions[library] = parse_version(importlib.metadata.version(library), library)
            origin.append((library, "installed"))
        except (importlib.metadata.PackageNotFoundError, EstimateError, ValueError):
            versions[library] = CURRENT[library]
            origin.append((library, "current release"))
    return Stack(**versions, origin=tuple(origin))


# where a library's version came from (Stack.origin), in words
_WHENCE = {"installed": N_("{libraries} installed"), "current release": N_("{libraries} current release"),
           "given": N_("{libraries} given")}


def _whence(libraries: str, origin: str) -> str:
    return _(_WHENCE[origin]).format(libraries=libraries) if origin in _WHENCE else libraries


@dataclass(frozen=True)
class Requirement:
    """A library version range (`library` `op` `version`) or the training loops a behaviour belongs to."""

    library: str  # one of LIBRARIES, or "loop"
    op: str = ""  # <, >=, == (a version); "" for a loop
    version: Version = (0, 0)
    loops: tuple[str, ...] = ()

    def holds(self, stack: Stack, loop: str) -> bool:
        if self.library == "loop":
            return loop in self.loops
        have = stack.version(self.library)
        return {"<": have < self.version, ">=": have >= self.version, "==": have == self.version}[self.op]

    def __str__(self) -> str:
        if self.library == "loop":
            return "the " + " and ".join(self.loops) + " loop" + ("s" if len(self.loops) > 1 else "")
        return f"{self.library} {self.op} {'.'.join(map(str, self.version))}"


def _v(library: str, op: str, version: str) -> Requirement:
    return Requirement(library, op, parse_version(version, library))


def _loop(*loops: str) -> Requirement:
    return Requirement("loop", loops=loops)


@dataclass(frozen=True)
class Behaviour:
    """One library behaviour that changes memory: a row of BEHAVIOURS."""

    name: str
    what: str  # what the library does, one line
    requires: tuple[Requirement, ...]  # all must hold (versions, loops); () = set only by its flag
    field: str  # the Setup field it sets ...
    value: Any  # ... to this (a callable of the spec and the stack: its value for that model; None: not set)
    off: Any  # the field's value without the behaviour
    traced: bool  # the traced estimator reproduces it
    label: str  # describe()'s words
    effect: str  # what it does to memory
    flag: str  # how the command line asks for it
    source: str = ""  # the library code it follows (docs/estimation.md's table prints it)
    default: bool = False  # a default of the current stack, printed in the header as assumed
    remedy: str = ""  # what a user does to be rid of it (the planner offers it when it helps)
    matters: Callable[[Setup, str], bool] = lambda setup, family: True  # for this setup and model family

    def value_for(self, spec: ModelSpec, stack: Stack | None = None) -> Any:
        return self.value(spec, stack or Stack()) if callable(self.value) else self.value

    @property
    def versions(self) -> str:
        return ", ".join(str(r) for r in self.requires) or f"only when asked ({self.flag})"


def _train(setup: Setup, family: str) -> bool:
    return setup.mode == "train"


def _infer(setup: Setup, family: str) -> bool:
    return setup.mode == "infer"


def _own_adamw(setup: Setup, family: str) -> bool:  # PyTorch's own optimizer steps (not DeepSpeed's)
    return setup.mode == "train" and setup.optimizer == "adamw" and setup.zero is None


def _tune_generates(setup: Setup, family: str) -> bool:
    """torchtune's generate recipe on one of its decoders (all llama-like), through SDPA (its attention calls
    scaled_dot_product_attention)."""
    return setup.mode == "infer" and family in LLAMA_LIKE and setup.attention == "flash"


def _tune_max_seq_len(spec: ModelSpec, stack: Stack) -> int | None:
    """The max_seq_len torchtune's builders give a model: its config's (llama2 4096, llama3 8192, mistral 32768,
    gemma 8192); torchtune 0.1 built llama3_8b (and its 128,256-token vocabulary's family) with max_seq_len=4096
    where its config says 8192 (models/llama3/_model_builders.py in 0.1.1)."""
    if stack.torchtune < (0, 2) and spec.family == "llama" and spec.vocab == 128256 and spec.max_positions:
        return min(spec.max_positions, 4096)
    return spec.max_positions or None


def _qkv_views(spec: ModelSpec, stack: Stack) -> bool | None:
    """The cache's views matter where q, k and v are views of one fused output (GPT-2's c_attn): None elsewhere,
    so the row is not set for a model it changes nothing in."""
    return True if spec.qkv_views else None


def _checkpoint_precision(spec: ModelSpec, stack: Stack) -> str | None:
    """transformers 5's dtype="auto": the checkpoint's own dtype; a bf16 checkpoint trains in pure bf16,
    an fp32 one in fp32; None where the config names none (a bare count, an older config: torch's fp32
    default, which the setup's own precision default stands for)."""
    return {"bfloat16": "bf16-pure", "float32": "fp32"}.get(spec.dtype)


BEHAVIOURS: tuple[Behaviour, ...] = (
    # ---- the defaults of the current stack (printed in the header as assumed)
    Behaviour("sdpa", "transformers runs attention through torch's scaled_dot_product_attention (the fused "
              "flash / memory-efficient kernels: no score matrix kept) unless attn_implementation='eager'",
              (_v("transformers", ">=", "4.36"),), "attention", "flash", "eager", traced=True,
              label=N_("SDPA attention"),
              effect=N_("no b·a·s² scores or probabilities kept; q, k, v, output and logsumexp "
              "saved instead"), flag="--attention flash", default=True,
              matters=lambda setup, family: family != "params",
              source='transformers modeling_utils.py `_check_and_adjust_attn_implementation` (SDPA by default since '
                     '4.36, #26572)'),
    Behaviour("quantized-checkpoint", "from_pretrained loads a GPTQ, AWQ or bitsandbytes checkpoint quantized, as "
              "its config's quantization_config says: its weights stay 4- or 8-bit, frozen",
              (_v("transformers", ">=", "4.32"),), "quant", lambda spec, stack: spec.quantized or None, None,
              traced=False, label=N_("the checkpoint's quantization"),
              effect=N_("4- or 8-bit frozen weights, as --quant prices them"), flag="--quant", default=True,
              # a full fine-tune dequantizes them: priced so, not refused for a --quant the user did not give
              matters=lambda setup, family: setup.mode != "train" or bool(setup.lora or setup.adapter or
                                                                          setup.prefix_len),
              source="transformers quantizers/ (auto.py `AutoHfQuantizer`: quant_method gptq, awq, bitsandbytes "
                     "from the config's quantization_config)"),
    Behaviour("dtype-auto", "from_pretrained loads the checkpoint's own dtype (dtype='auto', transformers 5's "
              "default): a bf16 checkpoint trains in pure bf16 unless mixed precision is asked for",
              (_v("transformers", ">=", "5.0"),), "precision", _checkpoint_precision, "bf16", traced=True,
              label=N_("the checkpoint's dtype"),
              effect=N_("bf16 checkpoints: 2 B weights, gradients and AdamW states, no "
              "fp32 master copy nor autocast copies; fp32 checkpoints: fp32 throughout"), flag="--precision",
              default=True, matters=lambda setup, family: not setup.quant,
              source='transformers 5 modeling_utils.py `from_pretrained` (`dtype="auto"`: the config\'s '
                     '`dtype`/`torch_dtype`)'),
    Behaviour("fp32-default", "from_pretrained loads fp32 unless a torch_dtype is given (transformers < 5), and the "
              "Trainer runs no mixed precision unless --bf16 or --fp16 is asked for: fp32 throughout",
              (_v("transformers", "<", "5.0"),), "precision", "fp32", "bf16", traced=True,
              label=N_("fp32 (from_pretrained's default)"), effect=N_("4 B weights, gradients and AdamW states, fp32 "
              "activations"), flag="--precision fp32", default=True,
              matters=lambda setup, family: not setup.quant,
              source="transformers 4.x modeling_utils.py `from_pretrained` (torch_dtype None: torch's default "
                     "dtype, fp32); training_args.py (`bf16`, `fp16` False)"),
    Behaviour("fused-adamw", "the HF Trainer's default optimizer is adamw_torch_fused on torch >= 2.8 "
              "(transformers#37358): one fused kernel updates each parameter in place",
              (_v("torch", ">=", "2.8"), _v("transformers", ">=", "4.54"), _loop("hf-trainer")), "fused", True,
              False, traced=True, label=N_("fused AdamW"),
              effect=N_("no optimizer-step temporaries (foreach AdamW keeps "
              "sqrt(exp_avg_sq) for every parameter at once)"), flag="--fused-optimizer", default=True,
              matters=_own_adamw,
              source='transformers training_args.py (`default_optim = "adamw_torch_fused"` if torch >= 2.8, #37358); '
                     'torch/optim/adamw.py `_fused_adamw` (`torch._fused_adamw_`)'),
    # ---- older versions
    Behaviour("zero-grad-keeps", "zero_grad() zeroes the gradients in place instead of freeing them "
              "(set_to_none=False, PyTorch's default before 2.0; HF's Trainer until 2023)",
              (_v("torch", "<", "2.0"),), "zero_grad_to_none", False, True, traced=True,
              label=N_("torch < 2.0 zero_grad"), effect=N_("the gradients stay allocated through the next forward and "
              "backward"), flag="--torch 1.13", remedy=N_("torch 2.0 or later (--torch 2.0)"), matters=_train,
              source='torch/optim/optimizer.py `zero_grad(set_to_none=...)` (default True from 2.0)'),
    Behaviour("cublas-own-workspace", "cuBLAS allocates its workspaces itself (cudaMalloc): PyTorch before 2.0 "
              "hands it none from the caching allocator (2.0 nightlies on: cublasSetWorkspace with a block of its "
              "own, pytorch#95668)", (_v("torch", "<", "2.0"),), "cublas_own_workspace", True, False, traced=True,
              label=N_("torch < 2.0 cuBLAS workspaces"),
              effect=N_("the cuBLAS workspaces outside the caching allocator: not in max_memory_allocated or "
              "reserved; nvidia-smi still counts them"), flag="--torch 1.13",
              matters=lambda setup, family: family != "params",
              source="torch aten/src/ATen/cuda/CublasHandlePool.cpp (1.13: `cublasCreate`, `cublasSetStream` only; "
                     "2.0: `getNewWorkspace()` from the CUDACachingAllocator, `cublasSetWorkspace`; pytorch#95668)"),
    Behaviour("foreach-denom-copy", "PyTorch 2.0's foreach Adam adds eps into a new list (denom = "
              "torch._foreach_add(exp_avg_sq_sqrt, eps); pytorch#104780 made it in place in 2.1)",
              (_v("torch", "==", "2.0"),), "foreach_denom_copy", True, False, traced=False,
              label=N_("torch 2.0 foreach Adam"), effect=N_("a second parameter-sized list at the update"),
              flag="--torch 2.0", remedy=N_("torch 2.1 or later (--torch 2.1)"),
              matters=lambda setup, family: _own_adamw(setup, family) and setup.foreach and not setup.fused,
              source='torch/optim/adam.py `_multi_tensor_adam` in 2.0 (`denom = torch._foreach_add(exp_avg_sq_sqrt, '
                     'eps)`; pytorch#104780)'),
    Behaviour("for-loop-optimizer", "the optimizers update one parameter at a time (foreach off: PyTorch < 2.0, "
              "HF's own AdamW and Adafactor)", (_v("torch", "<", "2.0"),), "foreach", False, True, traced=True,
              label=N_("for-loop optimizer"), effect=N_("the update's temporaries are the largest tensor's, not all of "
              "them"), flag="--torch 1.13",
              matters=lambda setup, family: setup.mode == "train" and setup.optimizer in ("adamw", "adafactor")
              and setup.zero is None and not setup.fused,
              source='torch/optim/adamw.py `_single_tensor_adamw`; transformers optimization.py `AdamW.step` (`for p '
                     'in group["params"]`)'),
    Behaviour("cache-views", "the KV cache keeps k and v as computed (views) instead of copying them into its "
              "own tensors (DynamicCache before transformers 4.54): GPT-2's views hold its whole fused qkv output",
              (_v("transformers", "<", "4.54"),), "cache_views", _qkv_views, False, traced=True,
              label=N_("transformers < 4.54 cache"),
              effect=N_("GPT-2: the q third of the fused projection stays beside "
              "the cache"), flag="--transformers 4.53", remedy=N_("transformers 4.54 or later (--transformers 4.54)"),
              matters=_infer,
              source='transformers cache_utils.py `DynamicCache.update` (`torch.cat` into its own tensors from 4.54)'),
    Behaviour("legacy-cache", "generate() holds the previous step's cache while the model builds the next "
              "(the legacy tuple cache, before transformers 4.42), and the prefill's outputs through the first "
              "decode step", (_v("transformers", "<", "4.42"),), "legacy_cache", True, False, traced=False,
              label=N_("transformers < 4.42 generate (two caches at a step)"),
              effect=N_("two KV caches at a decode step"),
              flag="--transformers 4.41", remedy=N_("transformers 4.54 or later (--transformers 4.54)"),
              matters=lambda setup, family: setup.mode == "infer" and setup.new_tokens > 1,
              source='transformers generation/utils.py `_sample` (the tuple cache before 4.42)'),
    Behaviour("all-logits", "the prefill computes every prompt position's logits (generate() before "
              "transformers 4.45 passed no num_logits_to_keep)", (_v("transformers", "<", "4.45"),),
              "all_logits", True, False, traced=False, label=N_("transformers < 4.45 prefill (every position's "
              "logits)"), effect=N_("b·s·vocab logits (upcast to fp32) instead of the last position's"),
              flag="--transformers 4.44", remedy=N_("transformers 4.54 or later (--transformers 4.54)"), matters=_infer,
              source='transformers generation/utils.py (`num_logits_to_keep` from 4.45)'),
    Behaviour("static-prefill-mask", "a prefill into a static cache builds SDPA's boolean mask over the whole cache "
              "(transformers 5.14's masking_utils skips it for an empty static cache and passes is_causal, #47094)",
              (_v("transformers", "<", "5.14"),), "static_prefill_mask", True, False, traced=False,
              label=N_("transformers < 5.14 static-cache prefill mask"),
              effect=N_("b·s·cache_len booleans through the prefill"), flag="--transformers 5.13",
              remedy=N_("transformers 5.14 or later (--transformers 5.14)"),
              matters=lambda setup, family: setup.mode == "infer" and setup.cache_len is not None
              and not setup.cache_mask_whole,
              source="transformers masking_utils.py `_ignore_causal_mask_sdpa` (5.14: `q_offset == 0` with only "
                     "future k/v positions padded returns True; before, XPU only), `sdpa_mask`"),
    Behaviour("peft-base-dtype-adapters", "PEFT before 0.12 created LoRA weights in the base layer's dtype "
              "(autocast_adapter_dtype, fp32 adapters on a 16-bit base, came with 0.12)",
              (_v("peft", "<", "0.12"),), "adapter_dtype", "16bit", "fp32", traced=False,
              label=N_("16bit adapters"), effect=N_("LoRA weights, gradients and AdamW states 2 B instead of 4 B on a "
              "16-bit base"), flag="--peft 0.11",
              matters=lambda setup, family: bool(setup.lora) and (setup.precision == "bf16-pure" or bool(setup.quant)),
              source='peft tuners/lora/layer.py `update_layer` (`autocast_adapter_dtype` from 0.12)'),
    Behaviour("torchao-whole-tensor", "torchao 0.1's to_nf4 quantizes each whole tensor at once (32 B an element; "
              "0.2 on: 1,048,576 elements at a time)", (_v("torchao", "<", "0.2"),), "torchao_chunk", 0, 1048576,
              traced=False, label=N_("torchao 0.1 to_nf4"), effect=N_("torchtune's loading leaves more reserved"),
              flag="--torchao 0.1", remedy=N_("torchao 0.2 or later (--torchao 0.2)"),
              matters=lambda setup, family: bool(setup.loading),
              source='torchao dtypes/nf4tensor.py `to_nf4` (`CHUNK_SIZE` from 0.2)'),
    Behaviour("torchao-int8-v1", "torchao before 0.18 quantizes int8 weight-only into an AffineQuantizedTensor "
              "(Int8WeightOnlyConfig version 1): a scale in the weight's dtype and an int64 zero point per output row "
              "(0.18's Int8Tensor: an fp32 scale and an int8 zero point)", (_v("torchao", "<", "0.18"),),
              "int8_wo_v1", True, False, traced=False, label=N_("torchao < 0.18 int8 weight-only"),
              effect=N_("10 B a weight row of scale and zero point instead of 5"), flag="--torchao 0.17",
              remedy=N_("torchao 0.18 or later (--torchao 0.18)"),
              matters=lambda setup, family: setup.quant == "int8-wo",
              source="torchao quantization/quant_api.py `_int8_weight_only_quantize_tensor` (version 1: "
                     "`to_affine_quantized_intx(..., zero_point_dtype=torch.int64)`; 0.18: `Int8Tensor.from_hp`), "
                     "quantize_/workflows/int8/int8_tensor.py (`scale_dtype=torch.float32`, "
                     "`zero_point_dtype=torch.int8`)"),
    # ---- training loops (--loop)
    Behaviour("torchtune-static-cache", "torchtune's generate recipe before 0.4 calls setup_caches, which gives every "
              "layer a KVCache over the whole max_seq_len of the model's builder before the prefill (0.4 sizes it to "
              "the prompt and max_new_tokens; 0.1 built llama3_8b with 4096)",
              (_v("torchtune", "<", "0.4"), _loop("torchtune")), "cache_len", _tune_max_seq_len, None, traced=False,
              label=N_("torchtune's static KV cache"),
              effect=N_("k and v of every layer for max_seq_len positions, whatever the prompt and the new tokens"),
              flag="--loop torchtune --infer --torchtune 0.3", matters=_tune_generates,
              source="torchtune 0.1-0.3 recipes/generate.py (`setup_caches(batch_size=1, dtype)`), "
                     "modules/transformer.py `setup_caches`, modules/kv_cache.py `KVCache`; 0.1 "
                     "models/llama3/_model_builders.py (`max_seq_len=4096`); 0.4 "
                     "(`decoder_max_seq_len=prompt.numel() + cfg.max_new_tokens`)"),
    Behaviour("torchtune-causal-mask", "torchtune's setup_caches before 0.4 also makes the causal mask over the whole "
              "cache, torch.tril(torch.ones(max_seq_len, max_seq_len, dtype=torch.bool)), and indexes its rows each "
              "step", (_v("torchtune", "<", "0.4"), _loop("torchtune")), "cache_mask_whole", True, False,
              traced=False, label=N_("torchtune's causal mask over the cache"),
              effect=N_("max_seq_len × max_seq_len booleans beside the cache"),
              flag="--loop torchtune --infer --torchtune 0.3",
              matters=lambda setup, family: _tune_generates(setup, family) and setup.cache_len is not None,
              source="torchtune 0.1-0.3 modules/transformer.py `TransformerDecoder.setup_caches` (`self.causal_mask`), "
                     "`forward` (`self.causal_mask[None, None, input_pos]`)"),
    Behaviour("torchtune-expanded-kv", "torchtune's KVCache before 0.5 holds num_heads, not num_kv_heads: attention "
              "expands k and v to the query heads before it updates the cache (pytorch/torchtune#1961, 2024-11-10, "
              "changed it)", (_v("torchtune", "<", "0.5"), _loop("torchtune")), "kv_expanded", True, False,
              traced=False, label=N_("torchtune < 0.5 cache (k and v expanded to the query heads)"),
              effect=N_("grouped-query models: a KV cache heads / kv_heads times larger"),
              flag="--loop torchtune --infer --torchtune 0.4",
              matters=lambda setup, family: setup.mode == "infer" and family in LLAMA_LIKE,
              source="torchtune 0.1-0.4 modules/kv_cache.py (`cache_shape = (batch_size, num_heads, max_seq_len, "
                     "head_dim)`), modules/attention.py (`k.expand`); #1961 (`num_kv_heads`, 0.5)"),
    Behaviour("keeps-last-graph", "the loop holds the last micro-step's loss and logits into the next forward "
              "(LitGPT's fit(), torchtune's recipes): that graph's nodes live on",
              (_loop("litgpt", "torchtune"),), "keeps_last_graph", True, False, traced=False,
              label=N_("loop keeps the last graph"), effect=N_("the logits, and what bitsandbytes' matmuls keep as ctx "
              "attributes, through the next forward"), flag="--keeps-last-graph",
              remedy=N_("a loop that drops the loss and logits before the next forward"), matters=_train,
              source='litgpt finetune/lora.py `fit` (`loss`, `logits` live to the next forward); torchtune '
                     'recipes/lora_finetune_single_device.py `train`'),
    Behaviour("fused-qkv", "q, k and v are one linear (LitGPT builds every model so; torchvision's "
              "MultiheadAttention)", (_loop("litgpt"),), "fused_qkv", True, False, traced=False,
              label=N_("fused qkv"), effect=N_("one autocast cast, LoRA dropout or 4-bit input cast for the three"),
              flag="--fused-qkv", matters=_train,
              source='litgpt model.py `CausalSelfAttention.attn` (one qkv linear); lora.py `LoRAQKVLinear`'),
    Behaviour("copied-head", "LitGPT's GPT always has an lm_head of its own; for a model whose config ties it to the "
              "embedding, convert_hf_checkpoint copies the embedding into it", (_loop("litgpt"),), "own_head", True,
              False, traced=True, label=N_("lm_head its own (copied)"),
              effect=N_("where the config ties the head: vocab × "
              "hidden more weights, and their gradients and optimizer states when trained"), flag="--loop litgpt",
              source="litgpt model.py `GPT.lm_head`; scripts/convert_hf_checkpoint.py (the embedding copied into "
                     "lm_head for tied models)"),
    Behaviour("adapters-16bit", "LoRA weights in the model's 16-bit dtype (LitGPT, torchtune; PEFT keeps them "
              "fp32)", (_loop("litgpt", "torchtune"),), "adapter_dtype", "16bit", "fp32", traced=False,
              label=N_("16bit adapters"), effect=N_("LoRA weights, gradients and AdamW states 2 B instead of 4 B"),
              flag="--adapter-dtype 16bit",
              matters=lambda setup, family: bool(setup.lora) and (setup.precision == "bf16-pure" or bool(setup.quant)),
              source="litgpt lora.py (LoRA weights in the model's dtype); torchtune modules/peft/lora.py `LoRALinear`"),
    Behaviour("checkpoint-quant-compute", "a quantized checkpoint's 4-bit weights are multiplied in the dtype its "
              "config names (bitsandbytes' bnb_4bit_compute_dtype; GPTQ's and AWQ's kernels in the checkpoint's "
              "16-bit dtype)", (_v("transformers", ">=", "4.32"),), "quant_compute_dtype",
              lambda spec, stack: spec.quantized_compute or None, "fp32", traced=False,
              label=N_("the checkpoint's compute dtype"), effect=N_("a 16-bit dequantized weight, no fp32 input cast"),
              flag="--quant-compute-dtype", default=True, matters=lambda setup, family: setup.quant == "4bit",
              source="transformers quantizers/quantizer_bnb_4bit.py (`bnb_4bit_compute_dtype`), "
                     "quantizer_gptq.py / quantizer_awq.py (the model's dtype)"),
    Behaviour("quant-compute-bf16", "4-bit weights dequantized to and multiplied in bf16 (Lightning's "
              "BitsandbytesPrecision in LitGPT; torchao's NF4 in torchtune takes the input's dtype; HF's "
              "BitsAndBytesConfig defaults to fp32)", (_loop("litgpt", "torchtune"),), "quant_compute_dtype",
              "bf16", "fp32", traced=False, label=N_("bf16 compute"), effect=N_("the dequantized weight 2 B, no fp32 "
              "input cast"), flag="--quant-compute-dtype bf16",
              matters=lambda setup, family: setup.quant == "4bit",
              source='lightning fabric/plugins/precision/bnb.py `BitsandbytesPrecision` (compute dtype = its dtype); '
                     'torchao nf4tensor.py `linear_nf4`'),
    Behaviour("quant-head", "the output layer quantized too (Lightning's BitsandbytesPrecision replaces every "
              "nn.Linear; HF leaves lm_head 16-bit)", (_loop("litgpt"),), "quant_head", True, False, traced=False,
              label=N_("head quantized too"), effect=N_("lm_head at 4 or 8 bits"), flag="--quant-head",
              matters=lambda setup, family: bool(setup.quant),
              source='lightning fabric/plugins/precision/bnb.py `_convert_layers` (every nn.Linear)'),
    Behaviour("paged-adamw", "LitGPT's finetune scripts take bitsandbytes' PagedAdamW with a quantized base: its "
              "states in CUDA unified memory", (_loop("litgpt"),), "optimizer", "paged-adamw", "adamw",
              traced=False, label=N_("paged AdamW"), effect=N_("the optimizer states outside the caching allocator"),
              flag="--optimizer paged-adamw",
              matters=lambda setup, family: bool(setup.quant) and setup.mode == "train",
              source='litgpt finetune/lora.py (`bnb.optim.PagedAdamW` when quantizing)'),
    Behaviour("torchao-nf4", "torchtune's QLoRA quantizes with torchao's NF4 (linear_nf4 keeps only the weight, "
              "no input)", (_loop("torchtune"),), "quant_backend", "torchao", "bitsandbytes", traced=False,
              label=N_("torchao NF4"), effect=N_("the frozen 4-bit linears keep no input for backward"),
              flag="--quant-backend torchao", matters=lambda setup, family: setup.quant == "4bit",
              source='torchtune modules/peft/lora.py `LoRALinear(quantize_base=True)` (`to_nf4`, `linear_nf4`)'),
    Behaviour("overlap-comm", "Lightning's DeepSpeedStrategy turns overlap_comm on (DeepSpeed's own default is "
              "off): a second reduce-bucket buffer", (_loop("lightning"),), "zero_overlap_comm", True, False,
              traced=False, label=N_("overlap_comm"),
              effect=N_("a second reduce bucket of reduce_bucket_size elements"),
              flag="--zero-overlap-comm",
              matters=lambda setup, family: setup.zero in (1, 2),
              source='lightning pytorch/strategies/deepspeed.py `DeepSpeedStrategy(overlap_comm=True)`'),
    Behaviour("torch-compile", "torch.compile: Inductor fuses elementwise chains, so fewer intermediates are "
              "allocated or saved for backward; mode='reduce-overhead' replays CUDA graphs whose inputs and outputs "
              "are static buffers", (), "compiled", True, False, traced=False,
              label=N_("torch.compile (not modelled: a bound)"),
              effect=N_("not modelled: training peaks fell 20-30 % under "
              "it in published runs (this estimate is then an upper bound); a CUDA-graphed inference keeps static "
              "buffers beside the step (this estimate is then a lower bound)"), flag="--compile",
              source="torch/_inductor (fusion, min-cut recomputation in the partitioner); "
                     "torch/_inductor/cudagraph_trees.py (static inputs and outputs)"),
    Behaviour("zero-grad-before-backward", "the loop calls zero_grad() after the forward, just before backward "
              "(forward, zero_grad, backward, step: Raschka's scripts)", (), "zero_grad_before_backward", True,
              False, traced=False, label=N_("zero_grad before backward"), effect=N_("the last step's gradients live "
              "through the forward"), flag="--zero-grad-before-backward",
              remedy=N_("zero_grad() after the optimizer step"), matters=_train,
              source="Raschka's pytorch-memory-optim scripts (forward, `zero_grad()`, backward, step)"),
)

BY_NAME = {row.name: row for row in BEHAVIOURS}


def changed(spec: ModelSpec, setup: Setup, **diff: Any) -> Setup:
    """`setup` with `diff`, the fields the stack filled in for it (Setup.assumed) filled in again: what
    setup_for makes of the same settings plus `diff`, as `vram estimate` does for the command line with
    them. A quantized base is not given the checkpoint's dtype (dtype-auto matters only without one):
    the planner's QLoRA is estimated as `vram estimate --quant 4bit --lora 16` is."""
    if setup.stack is None or not setup.assumed:
        return replace(setup, **diff)
    filled = {row.field for row in BEHAVIOURS if row.name in setup.assumed}
    given = {f.name: getattr(setup, f.name) for f in fields(setup)
             if f.name not in filled and f.name not in ("stack", "loop", "assumed")}
    return setup_for(spec, setup.stack, setup.loop, {**given, **diff})


def setup_for(spec: ModelSpec, stack: Stack, loop: str | None, given: dict[str, Any]) -> Setup:
    """The Setup of `given` (what the user set), each field it leaves open filled in by the first row of
    BEHAVIOURS whose versions and loop hold for `stack` and `loop`; the defaults among them are named in
    Setup.assumed."""
    from .analytic import Setup

    loop = loop or DEFAULT_LOOP
    if loop not in LOOPS:
        raise EstimateError(_("must be one of {names}, not {value!r}").format(names=", ".join(LOOPS),
                                                                            value=str(loop)[:40]), param="loop")
    rows: dict[str, tuple[Behaviour, Any]] = {}  # field -> the first row that sets it, and its value
    for row in BEHAVIOURS:
        if row.field in given or row.field in rows or not row.requires:
            continue
        if all(r.holds(stack, loop) for r in row.requires):
            value = row.value_for(spec, stack)
            if value is not None:
                rows[row.field] = (row, value)
    # a row that does not matter to the setup it makes is left out (LitGPT's quantized head without a quantized
    # base; the Trainer's fused AdamW when another optimizer is asked for)
    whole = Setup(**{**{f: v for f, (_, v) in rows.items()}, **given})
    kept = {f: (row, v) for f, (row, v) in rows.items() if row.matters(whole, spec.family)}
    return Setup(**{**{f: v for f, (_, v) in kept.items()}, **given}, stack=stack, loop=loop,
                 assumed=tuple(row.name for row, _ in kept.values() if row.default))


def active(setup: Setup, family: str) -> list[Behaviour]:
    """The rows in effect in `setup` that matter to it (a model of `family`): a default of the stack where
    setup_for assumed it (a user's own --attention flash is no assumption), any other row whenever its field
    has the row's value, however it was set (its library's version, a loop, its own flag)."""
    out = []
    labels = set()
    for row in BEHAVIOURS:
        if row.default:
            if row.name not in setup.assumed:
                continue
        elif callable(row.value):  # a value of the model's (torchtune's cache length): where its stack and loop set it
            if getattr(setup, row.field) == row.off or setup.stack is None or not all(
                    r.holds(setup.stack, setup.loop or DEFAULT_LOOP) for r in row.requires):
                continue
        elif getattr(setup, row.field) != row.value:
            continue
        if not row.matters(setup, family) or row.label in labels:
            continue
        labels.add(row.label)
        out.append(row)
    return out


def assumed_text(setup: Setup, family: str) -> str:
    """The header's words for the stack's defaults in effect: 'assumed (hf-trainer loop; torch 2.13,
    transformers 5.24 installed): SDPA attention, fused AdamW'; "" when none."""
    rows = [row for row in active(setup, family) if row.default]
    if not rows:
        return ""
    libraries = tuple(dict.fromkeys(r.library for row in rows for r in row.requires if r.library != "loop"))
    where = [_("{loop} loop").format(loop=setup.loop)] if any(
        r.library == "loop" for row in rows for r in row.requires) else []
    if setup.stack:
        where.append(setup.stack.naming(libraries))
    # Translators: the header's defaults: where they come from (the loop; the libraries' versions), then which
    return _("assumed ({where}): {behaviours}").format(where=pgettext("list of groups", "; ").join(where),
                                                       behaviours=join_words([_(row.label) for row in rows]))


def untraced(setup: Setup, family: str) -> list[Behaviour]:
    """The rows in effect that the traced estimator cannot reproduce (--trace says so)."""
    return [row for row in active(setup, family) if not row.traced]


def remedies(setup: Setup, family: str) -> dict[str, dict[str, Any]]:
    """For the planner: each remedy of the rows in effect -> the field values without them (rows that share
    a remedy, such as the three of an older transformers, are undone together)."""
    out: dict[str, dict[str, Any]] = {}
    for row in active(setup, family):
        if row.remedy:
            out.setdefault(row.remedy, {})[row.field] = row.off
    return out


def markdown_table() -> str:
    """BEHAVIOURS as docs/estimation.md shows it (python -m vramkit.estimator.stack prints it)."""
    rows = ["| behaviour | when | traced | header | effect on memory | library code |", "|---|---|---|---|---|---|"]
    rows += [f"| {row.what} | {row.versions}; `{row.flag}` | {'yes' if row.traced else 'no: noted'} | "
             f"{row.label}{' (assumed)' if row.default else ''} | {row.effect} | {row.source} |" for row in BEHAVIOURS]
    return "\n".join(rows)


__all__ = ["BEHAVIOURS", "CURRENT", "LIBRARIES", "LOOPS", "Behaviour", "Stack", "active", "remedies",
           "setup_for", "untraced"]


if __name__ == "__main__":
    print(markdown_table())
