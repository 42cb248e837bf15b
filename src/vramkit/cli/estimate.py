"""vram estimate: will a model fit? The memory one GPU needs, term by term (an estimate)."""

from __future__ import annotations

import argparse
import functools
import re
import sys
from typing import TYPE_CHECKING, Any

from ..i18n import N_, _
from .commands import COMMANDS
from .common import PRECISION_HELP, PRECISIONS, HelpFormatter, UsageError, help_values

if TYPE_CHECKING:
    from ..estimator.analytic import Setup
    from ..estimator.specs import ModelSpec
    from ..estimator.stack import Stack
    from .common import Subparsers

HELP = COMMANDS["estimate"]
DESCRIPTION = N_("""\
Estimate the GPU memory one GPU needs to train or run MODEL: weights, gradients, optimizer
states, activations, temporaries, the caching allocator and the CUDA context, at the peak of a
training step, and what nvidia-smi would show. Every number is an estimate (docs/estimation.md).

MODEL is a catalog name (vram estimate --list), a Hugging Face config.json (or a folder holding
one; never downloaded), or a bare parameter count such as 7b or 350M (weights and model states
only). --batch is the micro-batch per GPU. (--batch-size and --seq-len are accepted for --batch
and --seq, as in vram doctor.)

examples:
  vram estimate bert-large-uncased --batch 4 --seq 512 --precision fp32
  vram estimate llama-3-8b --lora 16 --quant 4bit --double-quant --checkpointing --seq 4096
  vram estimate 15517456384 --infer --quant 8bit   a bare count: weights and model states only
  vram estimate ./my-model/config.json --batch 8 --explain
  vram estimate llama-2-70b --gpus 8 --zero 3 --checkpointing --attention flash
  vram estimate llama-2-13b --zero 3 --offload optimizer,params --zero-prefetch-bucket 1e7
  vram estimate distilbert-base-uncased --fsdp --gpus 4 --offload params --precision bf16-pure
  vram estimate llama-2-7b --lora 32 --quant 4bit --quant-head --optimizer paged-adamw --fused-qkv
  vram estimate mistral-7b --infer --batch 4 --seq 8192 --json | jq .total_bytes
  vram estimate llama-2-13b --infer --seq 512 --new-tokens 512 --transformers 4.32
  vram estimate gpt2 --batch 8 --trace        check the formulas against a traced step (needs torch)
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("estimate", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter, usage=_("%(prog)s [options] MODEL | --list"))
    out = add_setup_options(p)["output"]
    out.add_argument("--explain", action="store_true", help=N_("show each term's formula with the numbers put in"))
    out.add_argument("--json", action="store_true", help=N_("print JSON: total_bytes, context_bytes, peak_bytes, "
                     "breakdown, ..."))
    out.add_argument("--trace", action="store_true", help=N_("also trace a real step on fake tensors (needs torch; "
                     "no GPU, no weights)"))
    out.add_argument("--timeline", metavar="FILE", help=N_("with --trace: draw the traced steps' memory over time "
                     "into FILE (.svg, or .html), stacked by category as vram doctor draws a memory snapshot"))
    out.add_argument("--list", action="store_true", help=N_("list the built-in models and exit"))
    p.set_defaults(run=run)


def add_setup_options(p: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """The options that describe a setup, in groups; `vram plan` shares them. Returns the groups
    by name, with an empty "output" one last for the command's own options."""
    from ..estimator.stack import LOOPS

    g_model = p.add_argument_group(N_("model and input"))
    g_step = p.add_argument_group(N_("training step"))
    g_peft = p.add_argument_group(N_("adapters (the base frozen)"))
    g_quant = p.add_argument_group(N_("quantization"))
    g_par = p.add_argument_group(N_("GPUs, sharding and offload (DeepSpeed, FSDP, tensor parallel)"))
    g_ver = p.add_argument_group(N_("library versions and the CUDA context"))
    output = p.add_argument_group(N_("output"))
    g_model.add_argument("model", nargs="?", metavar="MODEL",
                         help=N_("catalog name, config.json path or folder, or 7b"))
    mode = g_model.add_mutually_exclusive_group()
    mode.add_argument("--train", dest="mode", action="store_const", const="train", help=N_("training (default)"))
    mode.add_argument("--infer", dest="mode", action="store_const", const="infer",
                      help=N_("inference (prefill + KV cache)"))
    p.set_defaults(mode="train")
    # --batch-size/--seq-len too: vram doctor's old spelling, accepted by both (one documented).
    g_model.add_argument("--batch", "--batch-size", dest="batch", metavar="N", default="1",
                   help=N_("micro-batch per GPU (default %(default)s)"))
    g_model.add_argument("--seq", "--seq-len", dest="seq", metavar="N", help=N_("sequence length / inference context "
                   "(default: the model's, at most 512 for encoders and T5, 2048 for decoders)"))
    g_model.add_argument("--decoder-seq", "--decoder-seq-len", dest="decoder_seq", metavar="N",
                   help=N_("T5: the decoder (target) length (default: --seq)"))
    g_step.add_argument("--chunked-ce", dest="ce_chunk", metavar="TOKENS", nargs="?", const="128",
                   help=N_("LitGPT-style chunked lm_head and cross-entropy, TOKENS per chunk (default 128)"))
    g_model.add_argument("--image-size", metavar="N", help=N_("ViT input size in pixels (default: the config's)"))
    help_values(g_step.add_argument(
        "--precision", metavar="P", default=None,
        help=N_("%(precisions)s; vram estimate also compares several, a comma list in one table, int8 and int4 being "
                "bitsandbytes' 8-bit and 4-bit base (bf16,int8,int4) (default: the checkpoint's dtype where the stack "
                "loads it so, transformers 5's dtype='auto': bf16-pure for a bf16 checkpoint, fp32 for an fp32 one; "
                "else bf16)")), precisions=lambda: _(PRECISION_HELP))
    g_step.add_argument("--optimizer", choices=("adamw", "sgd", "sgd-momentum", "adafactor", "adamw-8bit", "adamw-4bit",
                                                 "adamw-fp8",
                                                 "paged-adamw",
                                            "none"),
                   default=None, help=N_("default adamw; adamw-8bit: bitsandbytes' AdamW8bit; adamw-4bit, adamw-fp8: "
                   "torchao's AdamW4bit, AdamWFp8; paged-adamw: bitsandbytes' PagedAdamW (LitGPT's with --quant), its "
                   "states in unified memory, outside torch's counters; none: a backward pass without an optimizer "
                   "step"))
    g_step.add_argument("--grad-accum", metavar="N", default="1",
                        help=N_("gradient-accumulation steps (default %(default)s)"))
    g_step.add_argument("--checkpointing", action="store_true", help=N_("activation checkpointing of every layer"))
    g_step.add_argument("--attention", choices=("eager", "flash"), default=None,
                   help=N_("eager (scores materialised) or flash / memory-efficient SDPA (default: SDPA where the "
                   "stack's "
                   "transformers uses it, 4.36 on; else eager)"))
    g_step.add_argument("--fused-optimizer", dest="fused", action=argparse.BooleanOptionalAction, default=None,
                   help=N_("AdamW as one fused kernel, no optimizer-step temporaries (default: as the loop does; "
                   "the HF "
                   "Trainer's adamw_torch_fused on torch >= 2.8)"))
    g_step.add_argument("--optimizer-in-backward", dest="optimizer_in_backward", action="store_true",
                   help=N_("each parameter stepped and its gradient freed inside backward (torchtune's "
                   "optimizer_in_bwd)"))
    g_step.add_argument("--offload-activations", dest="offload_activations", action="store_true",
                   help=N_("saved activations in pinned CPU memory between forward and backward (torchtune's "
                   "enable_activation_offloading)"))
    g_step.add_argument("--compile", dest="compiled", action="store_true", default=None,
                   help=N_("the model runs under torch.compile: not modelled, the estimate is said as a bound (an "
                   "upper "
                   "one for training, a lower one for CUDA-graphed inference)"))
    g_step.add_argument("--loop", choices=LOOPS, default=None, help=N_("the training loop, whose own habits change "
                   "memory (default hf-trainer): litgpt holds the last micro-step's graph, fuses q/k/v, keeps LoRA "
                   "weights 16-bit and quantizes the head with a bf16 compute dtype; torchtune holds the last graph "
                   "and quantizes with torchao's NF4; lightning turns DeepSpeed's overlap_comm on; docs/estimation.md "
                   "lists each"))
    g_peft.add_argument("--lora", metavar="RANK", help=N_("LoRA adapters of this rank; the base is frozen"))
    g_peft.add_argument("--adapter", metavar="WIDTH",
                   help=N_("bottleneck adapters (Houlsby: two a layer) of this width; "
                   "the base is frozen"))
    g_peft.add_argument("--prefix-len", dest="prefix_len", metavar="TOKENS",
                        help=N_("prefix tuning with this many virtual "
                   "tokens (PEFT, no reparameterisation); the base is frozen"))
    g_peft.add_argument("--lora-targets", metavar="LIST",
                        help=N_("the linears LoRA adapts, a comma list of q, k, v, o, gate, "
                   "up, down, head (the lm_head), or all-linear (default PEFT's: q,v; the fused qkv in GPT-2-like "
                   "models)"))
    g_step.add_argument("--fused-qkv", dest="fused_qkv", action="store_true", default=None,
                   help=N_("q, k and v as one linear, as "
                   "LitGPT builds every model and torchvision's ViT (MultiheadAttention): one autocast cast, LoRA "
                   "dropout or 4-bit input cast serves the three"))
    g_step.add_argument("--keeps-last-graph", dest="keeps_last_graph", action="store_true", default=None,
                   help=N_("the training loop "
                   "holds the last micro-step's loss and logits into the next forward (LitGPT's fit loop): that "
                   "graph lives on, with what bitsandbytes' matmuls keep as ctx attributes"))
    g_peft.add_argument("--lora-dropout", metavar="P",
                   help=N_("dropout on each LoRA adapter's input (default 0, PEFT's; "
                   "LitGPT's configs use 0.05): a mask and a dropped copy per adapted linear"))
    g_peft.add_argument("--adapter-dtype", dest="adapter_dtype", choices=("fp32", "16bit"), default=None,
                   help=N_("LoRA weights on a 16-bit base (--precision bf16-pure, --quant): fp32 as PEFT keeps them "
                   "(default, autocast_adapter_dtype, PEFT 0.12 on) or 16bit as LitGPT and torchtune do (--loop)"))
    g_quant.add_argument("--quant", choices=("8bit", "4bit", "int8-wo", "int4-wo", "fp8-wo"),
                   help=N_("8bit, 4bit: a bitsandbytes-quantized frozen base, its nn.Linear weights (embeddings and "
                   "lm_head stay 16-bit; for training needs --lora, QLoRA); int8-wo, int4-wo, fp8-wo: torchao's "
                   "weight-only quantize_ for inference (every nn.Linear, lm_head too)"))
    g_quant.add_argument("--quant-compute-dtype", dest="quant_compute_dtype", choices=("fp32", "bf16", "fp16"),
                   default=None, help=N_("4-bit: the dtype weights are dequantized to and multiplied in "
                   "(bnb_4bit_compute_dtype; default fp32, HF's; LitGPT uses bf16)"))
    g_quant.add_argument("--quant-backend", dest="quant_backend", choices=("bitsandbytes", "torchao"),
                   default=None, help=N_("whose 4-bit linear: bitsandbytes (default; keeps its input for "
                   "backward) or torchao's NF4 (torchtune's QLoRA; keeps only the weight)"))
    g_quant.add_argument("--quant-head", dest="quant_head", action="store_true", default=None,
                   help=N_("quantize the output layer too "
                   "(Lightning's BitsandbytesPrecision in LitGPT; HF leaves lm_head 16-bit)"))
    g_quant.add_argument("--double-quant", action="store_true", help=N_("4-bit: quantize the block constants too "
                   "(bnb_4bit_use_double_quant)"))
    g_model.add_argument("--head", choices=("cls", "lm"), help=N_("task head: cls (classification; encoders and ViT "
                   "default) or lm (logits over the vocabulary; decoders and T5)"))
    g_par.add_argument("--gpus", metavar="N", default="1",
                   help=N_("GPUs: training data parallel unless --tp; inference "
                   "splits the layers over them (device_map='auto'; the fullest GPU shown) unless --tp"))
    g_par.add_argument("--zero", metavar="STAGE", choices=("0", "1", "2", "3"), help=N_("DeepSpeed ZeRO stage"))
    g_par.add_argument("--offload", nargs="?", const="optimizer", metavar="WHAT",
                   help=N_("DeepSpeed offload to CPU memory, a comma list: optimizer (ZeRO-Offload: optimizer "
                        "states, fp32 master weights and gradients; grads is the same), params (ZeRO-3 "
                        "parameter offload). Bare --offload: optimizer"))
    bucket_help = N_("DeepSpeed %(name)s in elements (default %(default)s)")
    for flag, default, name, what in (
            ("reduce-bucket", "5e8", "reduce_bucket_size", bucket_help),
            ("allgather-bucket", "5e8", "allgather_bucket_size",
             N_("DeepSpeed %(name)s (chunks only, no buffer) in elements (default %(default)s)")),
            ("prefetch-bucket", "5e7", "stage3_prefetch_bucket_size", bucket_help),
            ("persistence", "1e5", "stage3_param_persistence_threshold", bucket_help),
            ("max-live", "1e9", "stage3_max_live_parameters", bucket_help)):
        help_values(g_par.add_argument(f"--zero-{flag}", metavar="N", default=default, help=what),
                    name=functools.partial(str, name))
    g_par.add_argument("--zero-overlap-comm", action="store_true", default=None,
                   help=N_("DeepSpeed overlap_comm (stages 1-2): a second "
                   "reduce-bucket buffer (DeepSpeed's default off; Lightning's DeepSpeedStrategy turns it on)"))
    g_par.add_argument("--fsdp", action="store_true",
                   help=N_("PyTorch FSDP, full shard, one unit per layer: parameters, "
                   "gradients and optimizer states sharded over --gpus; with --offload params (CPUOffload) they "
                   "live on the CPU and the optimizer steps there"))
    g_par.add_argument("--tp", metavar="N", default="1",
                       help=N_("tensor-parallel degree (within --gpus; default %(default)s)"))
    g_par.add_argument("--parallel", choices=("ddp", "dp"), default="ddp",
                   help=N_("ddp (default) or dp: DataParallel, which loads GPU 0 more"))
    help_values(g_ver.add_argument("--context-overhead", metavar="SIZE", help=N_("CUDA context size, as nvidia-smi "
                                   "counts it (default %(new)s for CUDA >= 11.7, %(old)s before)")),
                new=lambda: _context_default(12.4), old=lambda: _context_default(11.6))
    g_ver.add_argument("--cuda", metavar="VERSION", default="12.4",
                       help=N_("CUDA version, for the context default (default %(default)s)"))
    p.set_defaults(param_flags={"offload_params": "--offload", "zero_grad_to_none": "--torch",
                                "foreach_denom_copy": "--torch", "foreach": "--torch", "torchao_chunk": "--torchao",
                                "int8_wo_v1": "--torchao",
                                "cublas_own_workspace": "--torch",
                                "cache_views": "--transformers", "legacy_cache": "--transformers",
                                "all_logits": "--transformers", "fused": "--fused-optimizer"})
    g_step.add_argument("--zero-grad-before-backward", dest="zero_grad_before_backward", action="store_true",
                        default=None,
                   help=N_("the loop calls zero_grad() after the forward, just before backward: the last step's "
                   "gradients stay allocated through the forward"))
    g_ver.add_argument("--stack", metavar="LIST", help=N_("the library versions the run used, a comma list such as "
                   "torch=2.1,transformers=4.36,peft=0.7 (default: those installed beside vram, else the current "
                   "releases); --torch, --transformers, --peft, --bitsandbytes, --torchao, --deepspeed, --torchtune "
                   "set one each"))
    g_ver.add_argument("--torch", metavar="VERSION",
                   help=N_("PyTorch's semantics (2.0 and later: zero_grad() frees the "
                   "gradients; 2.0: foreach Adam also keeps sqrt(v) + eps as a second list at the update; 1.13 and "
                   "before keep the gradients allocated, set_to_none=False, and update one parameter at a time; 2.8 "
                   "on: the HF Trainer's fused AdamW)"))
    for library in ("peft", "bitsandbytes", "deepspeed", "torchtune"):
        help_values(g_ver.add_argument(f"--{library}", metavar="VERSION",
                                       help=N_("%(library)s's version (default: --stack's)")),
                    library=functools.partial(str, library))
    g_quant.add_argument("--loading", choices=("torchtune",),
                         help=N_("how the model was built and loaded, where that leaves "
                   "more reserved than the step needs (the caching allocator keeps it): torchtune (its QLoRA recipe "
                   "builds the model on the GPU, quantizes each LoRA linear with torchao's to_nf4, and again as the "
                   "checkpoint loads; needs --quant 4bit --quant-backend torchao --lora)"))
    g_model.add_argument("--cache-len", dest="cache_len", metavar="N", help=N_("inference: a static KV cache of N "
                   "positions (HF's StaticCache, generate(cache_implementation='static'); gpt-fast), allocated whole "
                   "at once, with the prefill's mask over all of it; needs --attention flash"))
    g_model.add_argument("--new-tokens", dest="new_tokens", metavar="N", default="0", help=N_("inference: generate() "
                   "goes on for N new tokens after the --seq prompt (default %(default)s: the prefill alone); the peak "
                   "is the "
                   "larger of the prefill and the last decode step, the cache then seq + N - 1 positions"))
    g_ver.add_argument("--transformers", metavar="VERSION", help=N_("Hugging Face transformers' "
                   "semantics (4.54 and later: the KV cache copies k and v; before, it kept "
                   "them "
                   "as computed, and GPT-2's views hold its whole fused qkv output; before 4.45 the prefill computes "
                   "every position's logits; before 4.42 generate() holds the previous step's cache beside the "
                   "next; 4.36 on: SDPA attention; 5 on: the checkpoint's own dtype); the rest of the inference "
                   "estimate follows transformers 5's modeling code"))
    g_ver.add_argument("--torchao", metavar="VERSION",
                       help=N_("torchao's to_nf4 for --loading (0.2 "
                   "and later: 1,048,576 elements at a time; 0.1 took each whole tensor at once, 32 bytes an element)"))
    return {"model": g_model, "step": g_step, "adapters": g_peft, "quantization": g_quant, "parallel": g_par,
            "versions": g_ver, "output": output}


def _context_default(cuda: float) -> str:
    from ..estimator.analytic import default_context
    from ..units import format_size

    return format_size(default_context(cuda)).replace(" ", "")


def _int(args: argparse.Namespace, name: str) -> int | None:
    """A whole number as typed; its range is Setup.check's to judge (EstimateError names `name`)."""
    value = getattr(args, name)
    if value is None:
        return None
    # int() would take '٥' and '1_000'; past 30 digits no setting means anything (and past 4,300 int() refuses)
    if not re.fullmatch(r"\s*-?[0-9]{1,30}\s*", str(value), re.ASCII):
        if re.fullmatch(r"\s*-?[0-9]+\s*", str(value), re.ASCII):
            raise UsageError(_("{value} is out of range").format(value=f"{str(value).strip()[:20]}..."), param=name)
        raise UsageError(_("{value!r} is not a whole number").format(value=str(value)[:40]), param=name)
    return int(value)


def _required_int(args: argparse.Namespace, name: str) -> int:
    value = _int(args, name)
    assert value is not None  # argparse gives these a default
    return value


OFFLOADS = {"optimizer": "optimizer", "grads": "optimizer", "params": "params"}


def _offload(value: str | None) -> set[str]:
    """--offload's comma list -> {"optimizer", "params"}; DeepSpeed offloads the gradients with the
    optimizer states (offload_optimizer), so grads names the same thing."""
    if value is None:
        return set()
    parts = [part.strip().lower() for part in value.split(",") if part.strip()]
    bad = [part for part in parts if part not in OFFLOADS]
    if bad or not parts:
        raise UsageError(_("{value!r}: give optimizer, grads or params (a comma list)").format(
                         value=(bad or [value])[0][:40]),
                         param="offload")
    return {OFFLOADS[part] for part in parts}


def _elements(args: argparse.Namespace, name: str) -> int:
    """A count of elements as DeepSpeed's config writes it: 500000000, 5e8 or 5_0000_0000."""
    value = getattr(args, name)
    try:
        if not str(value).isascii():  # float() would take other scripts' digits
            raise ValueError(value)
        number = float(str(value).replace("_", ""))
    except ValueError:
        raise UsageError(_("{value!r} is not a number of elements such as 5e8").format(value=str(value)[:40]),
                         param=name) from None
    if not 0 <= number <= 1e15 or number != int(number):
        raise UsageError(_("{value!r}: give a whole number of elements from 0 to 1e15").format(value=str(value)[:40]),
                         param=name)
    return int(number)


def _lora_targets(value: str | None) -> tuple[str, ...] | None:
    """--lora-targets q,k,v,o -> ("q", "k", "v", "o"); PEFT's module names (q_proj, gate_proj,
    c_attn, query_key_value) name the same roles. Setup.check judges the names."""
    if value is None:
        return None
    aliases = {"c_attn": "qkv", "query_key_value": "qkv", "dense": "o", "c_proj": "o", "out_proj": "o",
               "query": "q", "key": "k", "value": "v", "fc1": "up", "fc2": "down", "c_fc": "up"}
    names = [part.strip().lower().removesuffix("_proj") for part in value.split(",") if part.strip()]
    return tuple(aliases.get(name, name) for name in names)


def _fraction(args: argparse.Namespace, name: str) -> float:
    """A probability as typed (0 when not given); Setup.check judges its range."""
    value = getattr(args, name)
    if value is None:
        return 0.0
    try:
        return float(value)
    except ValueError:
        raise UsageError(_("{value!r} is not a number such as 0.05").format(value=str(value)[:40]),
                         param=name) from None


# the old per-source loop flags: each is one row of stack.BEHAVIOURS, which --loop sets with the rest of its loop
LOOP_FLAGS = {"keeps_last_graph": ("--keeps-last-graph", "litgpt or torchtune"), "fused_qkv": ("--fused-qkv", "litgpt"),
              "quant_head": ("--quant-head", "litgpt"), "zero_overlap_comm": ("--zero-overlap-comm", "lightning")}


def _stack(args: argparse.Namespace) -> Stack:
    """--stack, then --torch, --transformers, ... over it; the versions installed beside vram by default."""
    from ..estimator.stack import LIBRARIES, Stack

    stack = Stack.installed()
    if args.stack is not None:
        stack = stack.parse(args.stack)
    return stack.given(**{lib: getattr(args, lib) for lib in LIBRARIES})


# what the command line may leave open for the stack and the loop to fill in (stack.BEHAVIOURS' fields)
_OPEN = ("precision", "quant", "optimizer", "attention", "fused", "adapter_dtype", "quant_compute_dtype",
         "quant_backend", "quant_head", "fused_qkv", "keeps_last_graph", "zero_overlap_comm",
         "zero_grad_before_backward", "compiled")


def setup_from_args(args: argparse.Namespace, spec: ModelSpec | None = None) -> Setup:
    """argparse -> analytic.Setup: what the user gave, the rest from the stack and the loop (stack.setup_for).
    Bad values are VramkitErrors naming the parameter (the dest of its option), which cli/main turns into
    one line that names the flag."""
    from ..estimator.specs import spec_of
    from ..estimator.stack import setup_for
    from ..units import parse_size

    context = None
    if args.context_overhead is not None:
        try:
            context = parse_size(args.context_overhead)
        except ValueError as e:
            raise UsageError(str(e), param="context_overhead") from None
    try:
        cuda = float(args.cuda)
    except ValueError:
        raise UsageError(_("{value!r} is not a version such as 12.4").format(value=args.cuda), param="cuda") from None
    offload = _offload(args.offload)
    stack = _stack(args)
    zero_sizes = {f"zero_{name}": _elements(args, f"zero_{name}")
                  for name in ("reduce_bucket", "allgather_bucket", "prefetch_bucket", "persistence", "max_live")}
    for name, (flag, loop) in LOOP_FLAGS.items():
        if getattr(args, name) and args.loop is None:
            print(_("note: {flag} is part of a training loop's habits: --loop {loop} sets it with the rest (the flag "
                    "stays for a release)").format(flag=flag, loop=loop), file=sys.stderr)
    given = dict(mode=args.mode, checkpointing=args.checkpointing, double_quant=args.double_quant,
                 zero=None if args.zero is None else int(args.zero), offload="optimizer" in offload,
                 offload_params="params" in offload, fsdp=args.fsdp, **zero_sizes,
                 parallel=args.parallel, head=args.head, context_overhead=context, cuda=cuda,
                 batch=_required_int(args, "batch"), grad_accum=_required_int(args, "grad_accum"),
                 gpus=_required_int(args, "gpus"), tp=_required_int(args, "tp"), seq=_int(args, "seq"),
                 image_size=_int(args, "image_size"), lora=_int(args, "lora"), adapter=_int(args, "adapter"),
                 prefix_len=_int(args, "prefix_len"), decoder_seq=_int(args, "decoder_seq"),
                 ce_chunk=_int(args, "ce_chunk"), lora_targets=_lora_targets(args.lora_targets),
                 lora_dropout=_fraction(args, "lora_dropout"), loading=args.loading,
                 new_tokens=_required_int(args, "new_tokens"),
                 optimizer_in_backward=args.optimizer_in_backward, offload_activations=args.offload_activations)
    given |= {name: getattr(args, name) for name in _OPEN if getattr(args, name) is not None}
    if args.cache_len is not None:  # else open: torchtune's recipes size a static cache themselves (stack.BEHAVIOURS)
        given["cache_len"] = _int(args, "cache_len")
    if args.precision is not None and args.precision not in PRECISIONS:
        raise UsageError((_("{value!r}: give one of {names} (vram estimate compares several)") if "," in args.precision
                          else _("{value!r}: give one of {names}")).format(value=args.precision[:40],
                                                                           names=", ".join(PRECISIONS)),
                         param="precision")
    return setup_for(spec or spec_of(args.model), stack, args.loop, given)


def list_models() -> str:
    from ..estimator import catalog
    from ..estimator.specs import from_config, param_count
    from ..i18n import pgettext
    from ..render.text_width import pad

    rows = []
    for name, cfg in catalog.MODELS.items():
        spec = from_config(cfg, name=name)
        rows.append(f"{name:<26}{spec.family:<12}{param_count(spec) / 1e6:>10,.1f}M")
    # Translators: the headings of vram estimate --list (model name, family, parameter count)
    heads = (pgettext("column", "MODEL"), pgettext("column", "FAMILY"), pgettext("column", "PARAMS"))
    return pad(heads[0], 26) + pad(heads[1], 12) + pad(heads[2], 10, right=True) + "\n" + "\n".join(rows)


def _note_flash_attention(model: str, setup: Any, result: Any) -> None:
    """Eager attention is an older stack's default (transformers < 4.36): where the scores make much of
    the peak, say what flash / memory-efficient attention would need, so a long context is not read as
    needing far more."""
    from dataclasses import replace

    from ..errors import VramkitError
    from ..estimator.analytic import estimate
    from ..units import format_size

    try:
        flash = estimate(model, replace(setup, attention="flash"))
    except VramkitError:  # a setup flash attention is not modelled for
        return
    if flash.total_bytes < 0.75 * result.total_bytes:
        result.notes.append(_("eager attention (transformers < 4.36's default) keeps every score matrix: with SDPA or "
                              "flash kernels (--attention flash; the default from transformers 4.36) it would be "
                              "{size} as nvidia-smi shows it").format(size=format_size(flash.total_bytes)))


def run(args: argparse.Namespace) -> int:
    from ..estimator.host import host_memory
    from ..render.estimate_view import estimate_json, render_estimate, render_trace
    from ..render.style import style_for, terminal_width

    if args.list:
        print(list_models())
        return 0
    if not args.model:
        raise UsageError(_("estimate: give a MODEL (a catalog name, a config.json, or a count like 7b; see --list)"))
    if args.timeline is not None and not args.trace:
        raise UsageError(_("--timeline draws the traced steps: add --trace"), param="timeline")
    if args.timeline is not None and not args.timeline.lower().endswith((".svg", ".html", ".htm")):
        raise UsageError(_("--timeline: give a .svg or .html file name"), param="timeline")
    style = style_for(sys.stdout, getattr(args, "no_color", False))
    precisions = _precision_choices(args)
    if len(precisions) > 1:
        return _compare_precisions(args, precisions, style)
    if precisions:
        args = _with_precision(args, precisions[0])
    result, traced, by_tracing = _estimate(args)
    host = host_memory(result)
    if args.timeline is not None and traced is not None:
        _write_timeline(args.timeline, traced, _("{model}: the traced steps, by category").format(model=result.model))
    if args.json:
        extra: dict[str, Any] = {"trace": traced.to_dict()} if traced and args.trace else {}
        if by_tracing:
            extra["estimated_by"] = "trace"
        if host is not None:
            extra |= {"host_bytes": host[0], "host_formula": host[1]}
        if args.timeline is not None:
            extra["timeline"] = args.timeline
        print(estimate_json(result, extra or None))
        return 0
    print(render_estimate(result, style, terminal_width(), explain=args.explain, host=host))
    if traced and args.trace:
        print()
        print(render_trace(traced, style))
    if args.timeline is not None:
        from ..procs import sanitize

        print("\n" + _("timeline written to {path}").format(path=sanitize(args.timeline)))
    return 0


def _estimate(args: argparse.Namespace) -> tuple[Any, Any, bool]:
    """(estimate, trace or None, whether the estimate is itself a trace): a family the formulas do
    not know is traced through its transformers class (estimator/traced_family.py)."""
    from ..estimator.analytic import estimate
    from ..estimator.specs import UnknownFamily

    try:
        setup = setup_from_args(args)
        result = estimate(args.model, setup)  # an EstimateError is a VramkitError (exit 2): cli/main prints it
    except UnknownFamily as unknown:
        return (*_estimate_by_tracing(args, unknown), True)
    if args.attention is None and setup.attention == "eager":  # an older stack's default
        _note_flash_attention(args.model, setup, result)
    traced = None
    if args.trace:
        from ..estimator.trace import TraceUnavailable, trace_estimate

        try:
            traced = trace_estimate(args.model, setup)
        except TraceUnavailable as e:  # about --trace itself, which no library parameter names
            raise UsageError(e.message, param="trace") from e
    return result, traced, False


def _estimate_by_tracing(args: argparse.Namespace, unknown: Any) -> tuple[Any, Any]:
    from ..estimator.trace import TraceUnavailable
    from ..estimator.traced_family import NotTraceable, estimate_by_tracing, stand_in

    setup = setup_from_args(args, stand_in(unknown.config, unknown.name))
    try:
        return estimate_by_tracing(unknown.config, setup, name=unknown.name)
    except TraceUnavailable as e:  # no torch or transformers: the refusal, and what tracing it needs
        raise UsageError(_("{refusal}; tracing its transformers class {why}").format(refusal=unknown.message,
                                                                                   why=e.message)) from None
    except NotTraceable as e:  # the refusal (what the formulas take), and why tracing does not either
        raise UsageError(_("{refusal}; {why}").format(refusal=unknown.message,
                                                     why=e.message.split(": ", 1)[-1])) from None


def _write_timeline(path: str, traced: Any, title: str) -> None:
    """The traced steps' memory over time, drawn as vram doctor draws a snapshot's."""
    import os

    from ..estimator.trace import trace_timeline
    from ..render.snapshot_view import render_html, render_svg

    tl = trace_timeline(traced)
    text = render_html(tl, title) if path.lower().endswith((".html", ".htm")) else render_svg(tl, title)
    from ..output_files import write_new

    write_new(os.path.abspath(path), text.encode("utf-8"), param="timeline")


# --precision int8 / int4: bitsandbytes' 8-bit and 4-bit base (load_in_8bit / load_in_4bit), as --quant
_QUANT_PRECISIONS = {"int8": "8bit", "int4": "4bit"}


def _precision_choices(args: argparse.Namespace) -> list[str]:
    """--precision's comma list, each a precision or int8/int4 ([] when not given)."""
    if args.precision is None:
        return []
    items = list(dict.fromkeys(x.strip().lower() for x in str(args.precision).split(",") if x.strip()))
    bad = [x for x in items if x not in PRECISIONS and x not in _QUANT_PRECISIONS]
    if bad or not items:
        import difflib

        typed = (bad or [str(args.precision)])[0]
        close = difflib.get_close_matches(typed, [*PRECISIONS, *_QUANT_PRECISIONS], n=1, cutoff=0.6)
        raise UsageError((_("{value!r}: give {names}, int8 or int4, or a comma list of them to compare; did you mean "
                            "'{close}'?") if close else
                          _("{value!r}: give {names}, int8 or int4, or a comma list of them to compare")).format(
            value=typed[:40], names=", ".join(PRECISIONS), close=close[0] if close else ""), param="precision")
    if args.quant and any(x in _QUANT_PRECISIONS for x in items):
        raise UsageError(_("int8 and int4 are --quant 8bit and 4bit: give one or the other"), param="quant")
    return items


def _with_precision(args: argparse.Namespace, choice: str) -> argparse.Namespace:
    quant = _QUANT_PRECISIONS.get(choice)
    return argparse.Namespace(**{**vars(args), "precision": None if quant else choice, "quant": quant or args.quant})


def _compare_precisions(args: argparse.Namespace, choices: list[str], style: Any) -> int:
    """One setup at several precisions, one row each."""
    import json

    from ..errors import VramkitError
    from ..estimator.host import host_memory
    from ..render.estimate_view import estimate_json, render_precisions

    for flag, on in (("trace", args.trace), ("explain", args.explain)):
        if on:
            raise UsageError(_("--{flag} shows one estimate: give one --precision").format(flag=flag), param=flag)
    rows = []
    for choice in choices:
        try:
            result, _t, _b = _estimate(_with_precision(args, choice))
        except VramkitError as e:  # which row could not be estimated
            e.message = f"{choice}: {e.message}"
            if choice in _QUANT_PRECISIONS and e.param == "quant":  # int4 stands for --quant 4bit here
                e.param = "precision"
            raise
        label = f"{choice} (bitsandbytes)" if choice in _QUANT_PRECISIONS else choice
        rows.append((label, result))
    if args.json:
        out = []
        for label, result in rows:
            row = json.loads(estimate_json(result))
            host = host_memory(result)
            out.append({"precision": label, **row, **({"host_bytes": host[0]} if host else {})})
        print(json.dumps({"model": rows[0][1].model, "estimate": True, "by_precision": out}, indent=2))
        return 0
    print(render_precisions(rows, style))
    return 0
