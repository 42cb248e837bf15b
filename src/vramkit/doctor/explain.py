"""Why an out-of-memory error happened, and what to change, with the memory each change saves.

`explain(report, snapshot=..., savings=...)`:
- the main cause: a single request larger than the GPU (or the per-process cap) could ever give,
  fragmentation of PyTorch's cache, other processes, or the job's own usage;
- who held the GPU's memory: this job (allocated / reserved-but-unallocated / non-PyTorch) and the
  other processes, from the message (at OOM time) and, when a snapshot is given, from NVML now;
- ranked fixes. A saving is given only where it is known: measured from the message, read live,
  or estimated by the `savings` hook (the model/batch estimator plugs in there; see SavingsHook),
  and never more than the job held. Where the traceback says in which phase the allocation failed
  (doctor.traceback.Phase: backward, DataParallel gather, the evaluation loop...), that phase's
  fixes lead when the job's own usage is the cause, and fixes that cannot help there are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..i18n import N_, _, join_words
from ..units import format_size_any
from .oom import OomReport, printed_rounding
from .traceback import Phase

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, as in cli/common.py
if TYPE_CHECKING:  # a log read with --no-live has no snapshot: gpu_state stays unloaded
    from typing import Any

    from ..gpu_state import Snapshot

# The hook for fixes whose saving depends on the model and batch (halve_batch, bf16,
# checkpointing, grad_accum, no_grad, offload_optimizer). Called as savings(fix_id, context)
# with context = {"report": OomReport, "model": str|None, "batch_size": int|None,
# "seq_len": int|None, ...}; returns bytes saved, or None when it cannot say.
SavingsHook = Callable[[str, "dict[str, Any]"], "int | None"]

MODEL_FIXES = ("halve_batch", "grad_accum", "bf16", "checkpointing", "no_grad", "offload_optimizer")
# Reserved-but-unallocated memory that could have served the request counts as fragmentation when it
# is a real part of the cache (a few MiB of a full cache are normal slack, not the cause).
FRAGMENTATION_SHARE = 0.10
FRAGMENTATION_MIN = 1024**3

# A single request this many times the GPU (or, the GPU's size unknown, above NOT_MEMORY_BYTES: several
# times the largest card made) is no shortage: a shape, an index or a setting computed a wrong size.
NOT_MEMORY_FACTOR = 4
NOT_MEMORY_BYTES = 1024**4
# The least a CUDA context holds on a GPU (its kernels and heaps: ~300 MiB and up, more without lazy
# loading): the older forms' "outside PyTorch" figure has the job's own in it
CUDA_CONTEXT_LEAST = 300 * 1024**2

CAUSES = {
    "not_memory": N_("a bug, not a memory problem: the request is many times any GPU (a wrong shape, an index out "
                  "of range, or a setting that computes the size)"),
    "request_too_large": N_("a single request larger than the job could ever have free on this GPU"),
    "kv_cache_budget": N_("the inference engine's share of the GPU had no room left for the KV cache after the "
                       "weights and activations"),
    "memory_cap": N_("the per-process memory cap (set_per_process_memory_fraction), not the GPU, ran out"),
    "fragmentation": N_("fragmentation: PyTorch had the memory reserved, but in pieces too small for the request"),
    "other_processes": N_("other processes hold the memory this job needed"),
    "own_usage": N_("the job's own usage: its tensors filled the GPU"),
    "host_ram": N_("the host (CPU) ran out of RAM, not the GPU"),
    "library_workspace": N_("cuBLAS/cuDNN could not get memory for a handle or workspace: the GPU was (nearly) full"),
    "free_but_failed": N_("the GPU reported more free memory than was requested: another process took it in "
                       "between, or it was not usable by this job (another GPU, a MIG slice, a Windows WDDM limit)"),
    "device_full": N_("the GPU had no memory for a CUDA call outside PyTorch's cache (often: full before the job "
                      "began)"),
}


@dataclass
class Holder:
    """A process holding memory on the GPU that ran out."""

    pid: int
    bytes: int | None
    source: str  # "message" (at OOM time) or "live" (now, from NVML)
    is_job: bool = False
    user: str | None = None
    command: str | None = None


@dataclass
class Fix:
    id: str
    title: str
    how: str
    saves_bytes: int | None = None  # None: unknown (never a guess)
    basis: str | None = None  # where saves_bytes comes from: message, live, estimate
    enough: bool | None = None  # saves_bytes covers the shortfall


@dataclass
class Explanation:
    report: OomReport
    cause: str
    cause_text: str
    contributing: list[str] = field(default_factory=list)
    job_bytes: int | None = None  # this job's memory on the GPU (PyTorch + non-PyTorch)
    job_pid: int | None = None
    others_bytes: int | None = None  # other processes' memory on that GPU
    others_basis: str | None = None
    holders: list[Holder] = field(default_factory=list)
    live_gpu: int | None = None  # NVML index the live data is about
    fixes: list[Fix] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # whose GPU ("nvidia", "amd"): the message's runtime, else the live GPU's; its runtime is named in its words
    vendor: str = "nvidia"
    phase: Phase | None = None  # where the allocation failed, from the traceback
    # the savings hook was given (--model and --batch): a fix left without a number is one it does not model
    estimated: bool = False
    # the model was in eval mode while autograd recorded its activations (oom_guard sees the live tensors)
    eval_with_grad: bool = False

    @property
    def non_pytorch_bytes(self) -> int | None:
        """The job's memory outside PyTorch's allocator: the message's ("this process has"), or, where the
        job is one of its "Process P has" parts (in a container), that part less what PyTorch reserved."""
        r = self.report
        if r.non_pytorch_bytes is not None:
            return r.non_pytorch_bytes
        if self.job_bytes is None or r.reserved_bytes is None:
            return None
        return max(0, self.job_bytes - r.reserved_bytes)


def _identify_job(report: OomReport, job_pid: int | None) -> tuple[int | None, int | None]:
    """(pid, bytes) of the job among the message's "Process P has U" parts.

    PyTorch prints "this process" only when the pid NVML reports equals os.getpid(); in a
    container the job appears as "Process P" with its host pid. It holds at least what
    PyTorch reserved, so the smallest holder above that is taken as the job.
    """
    if job_pid is not None:
        for p in report.processes:
            if p.pid == job_pid:
                return p.pid, p.bytes
    if report.process_bytes is not None:
        return job_pid, report.process_bytes
    floor = report.reserved_bytes if report.reserved_bytes is not None else report.allocated_bytes
    if len(report.processes) == 1 and job_pid is None and report.kind in ("cuda", "hip") and (
            floor is None or report.processes[0].bytes >= floor):
        # No "this process" part, one process listed, holding at least what PyTorch reserved: the job
        # holds memory too (it is running), so that process is the job, seen under its host pid from
        # a container. One holding less is another process (the job's own line is not there).
        only = report.processes[0]
        return only.pid, only.bytes
    if floor is None or not report.processes:
        return job_pid, None
    candidates = [p for p in report.processes if p.bytes >= floor]
    if not candidates:
        return job_pid, None
    best = min(candidates, key=lambda p: p.bytes)
    return best.pid, best.bytes


def live_gpu_for(report: OomReport, snap: Snapshot, gpu: int | None = None) -> tuple[int | None, str | None]:
    """Which NVML GPU the message is about, and a note when that is an assumption."""
    indices = {g.index for g in snap.gpus}
    if gpu is not None:
        return (gpu, None) if gpu in indices else (None, _("no GPU {index} on this machine").format(index=gpu))
    pids = {p.pid for p in report.processes}
    for proc in snap.processes:
        if proc.pid in pids:
            return proc.gpu, None
    if report.device is not None and report.device in indices:
        from ..visible import variable_for

        vendor = next(g.vendor for g in snap.gpus if g.index == report.device)
        return report.device, _("assuming GPU {index} in the message is vram's GPU {index}; pass --gpu if the "
                                "job ran with {variable} set").format(index=report.device,
                                                                      variable=variable_for(vendor))
    return None, None


def explain(report: OomReport, snapshot: Snapshot | None = None, *, gpu: int | None = None,
            job_pid: int | None = None, me: str | None = None, savings: SavingsHook | None = None,
            context: dict[str, Any] | None = None, phase: Phase | None = None,
            eval_with_grad: bool = False) -> Explanation:
    """The cause and ranked fixes for one parsed out-of-memory message.

    snapshot: live NVML data (named processes, GPUs with room now). gpu: the NVML index the job
    ran on, when the message's CUDA ordinal is not it. me: the caller's user name (own processes
    get `vram kill`, others' get "ask"). savings/context: the estimator hook (SavingsHook).
    phase: where the allocation failed (doctor.traceback.phase_of), which ranks the fixes.
    eval_with_grad: the model was in eval mode and the live activations keep autograd graphs
    (evaluation without torch.no_grad()): no autograd is the fix for a forward pass.
    """
    pid, job_bytes = _identify_job(report, job_pid)
    ex = Explanation(report=report, cause="own_usage", cause_text="", job_pid=pid, job_bytes=job_bytes,
                     phase=phase, eval_with_grad=eval_with_grad)
    for p in report.processes:
        ex.holders.append(Holder(p.pid, p.bytes, "message", is_job=(p.pid == pid and job_bytes == p.bytes)))
    _others_from_message(ex)
    if snapshot is not None:
        _add_live(ex, snapshot, gpu)
    # a message that names its runtime says whose GPU it was; vLLM's, llama.cpp's, ... leave it to the live GPU
    live = next((g.vendor for g in snapshot.gpus if g.index == ex.live_gpu), None) if snapshot else None
    ex.vendor = ("amd" if report.kind in ("hip", "hip-runtime") else "nvidia" if report.kind.startswith("cu")
                 else live or ex.vendor)
    ex.cause = _cause(ex)
    ex.cause_text = _(CAUSES[ex.cause])
    if report.form in ("2.1", "2.2+") and report.reserved_unallocated_bytes is None:
        # every message of these forms ends with the split: one without it was cut (a log's limit, a paste)
        ex.notes.append(_("the message is cut short before what PyTorch reserved but left unallocated: "
                          "fragmentation cannot be ruled out"))
    _contributing(ex)
    ex.estimated = savings is not None
    ex.fixes = _fixes(ex, snapshot, me, savings, dict(context or {}, report=report))
    return ex


def _others_from_message(ex: Explanation) -> None:
    r = ex.report
    listed = [h for h in ex.holders if not h.is_job]
    if listed:
        ex.others_bytes, ex.others_basis = sum(h.bytes or 0 for h in listed), "message"
    elif r.total_bytes is not None and r.free_bytes is not None and ex.job_bytes is not None:
        # No process list (no NVML in the job): what is neither free nor this process's.
        rest = r.total_bytes - r.free_bytes - ex.job_bytes
        if rest > _rounding(r.total_bytes, r.free_bytes, ex.job_bytes):
            ex.others_bytes, ex.others_basis = rest, "derived"
    elif r.total_bytes is not None and r.free_bytes is not None and r.reserved_bytes is not None:
        # Older forms: what is outside PyTorch's cache (other processes and this job's CUDA context).
        rest = r.total_bytes - r.free_bytes - r.reserved_bytes
        if rest > _rounding(r.total_bytes, r.free_bytes, r.allocated_bytes, r.reserved_unallocated_bytes):
            ex.others_bytes, ex.others_basis = rest, "outside PyTorch"


def _rounding(*printed: int | None) -> int:
    """How far a difference of sizes the message printed may be off: below this it is rounding,
    not memory anyone holds."""
    return sum(printed_rounding(v) for v in printed if v is not None)


def _add_live(ex: Explanation, snap: Snapshot, gpu: int | None) -> None:
    index, note = live_gpu_for(ex.report, snap, gpu)
    if note:
        ex.notes.append(note)
    if index is None:
        return
    ex.live_gpu = index
    message_pids = {h.pid for h in ex.holders}
    for proc in sorted((p for p in snap.processes if p.gpu == index), key=lambda p: -(p.memory or 0)):
        found = next((h for h in ex.holders if h.pid == proc.pid), None)
        if found is not None:  # name the processes the message listed
            found.user, found.command = proc.user, proc.command
            continue
        ex.holders.append(Holder(proc.pid, proc.memory, "live", is_job=proc.pid == ex.job_pid,
                                 user=proc.user, command=proc.command))
    live_others = [h for h in ex.holders if h.source == "live" and not h.is_job and h.pid not in message_pids]
    if ex.others_basis != "message" and live_others:
        ex.notes.append(_("live data is from now, not from the moment of the OOM"))


def _cause(ex: Explanation) -> str:
    r = ex.report
    if r.kind == "cpu":
        return "host_ram"
    if r.kind in ("cublas", "cudnn"):
        return "library_workspace"
    if r.kind == "vllm":
        return "kv_cache_budget"
    if r.requested_bytes is None:
        if r.kind not in ("cuda-runtime", "hip-runtime"):
            return "own_usage"
        # The sizeless form: where it failed says whose memory it was. A job in its forward, backward,
        # optimizer step or evaluation loop ran out on its own tensors;
        # with nothing to say so, a CUDA call outside the cache found the GPU full.
        # (The pin-memory thread creates a CUDA context of its own: that call is outside the cache.)
        return "own_usage" if ex.phase is not None and ex.phase.id != "pin_memory" else "device_full"
    if r.requested_bytes >= NOT_MEMORY_BYTES or (r.total_bytes and
                                                  r.requested_bytes >= NOT_MEMORY_FACTOR * r.total_bytes):
        return "not_memory"
    if r.total_bytes is not None and r.requested_bytes > r.total_bytes:
        return "request_too_large"
    if r.allowed_bytes is not None:
        if r.requested_bytes > r.allowed_bytes:
            return "request_too_large"
        slack = _rounding(r.allowed_bytes, r.reserved_bytes)
        if (r.reserved_bytes is not None and r.reserved_bytes + r.requested_bytes > r.allowed_bytes - slack
                and (r.free_bytes is None or r.free_bytes >= r.requested_bytes)):
            return "memory_cap"
    short = r.shortfall_bytes
    if short == 0:
        return "free_but_failed"
    short = short or 0
    ru = r.reserved_unallocated_bytes
    if ru and ru >= short and real_share(r):
        return "fragmentation"
    others = ex.others_bytes or 0
    if ex.others_basis == "outside PyTorch":  # the job's own CUDA context is in it: other processes hold less
        others = max(0, others - CUDA_CONTEXT_LEAST)
    own = ex.job_bytes if ex.job_bytes is not None else r.reserved_bytes
    if others and others >= short and (own is None or others >= own):
        return "other_processes"
    if r.total_bytes is not None and r.requested_bytes > r.total_bytes - others - (ex.non_pytorch_bytes or 0):
        # More than the job could ever have free: the GPU less what others hold and what the job can
        # never give back (its CUDA context, library workspaces).
        return "request_too_large"
    return "own_usage"


def real_share(r: OomReport) -> bool:
    """Reserved-but-unallocated memory that is a real part of PyTorch's cache: at least
    FRAGMENTATION_SHARE of it or FRAGMENTATION_MIN (a few MiB of a full cache are normal slack).
    The one fragmentation rule: fragmentation is the cause when this holds and that memory could
    have served the request (it is at least the shortfall); expandable_segments is offered when
    either holds."""
    ru = r.reserved_unallocated_bytes
    return bool(ru and r.reserved_bytes and (ru >= FRAGMENTATION_SHARE * r.reserved_bytes or ru >= FRAGMENTATION_MIN))


def _contributing(ex: Explanation) -> None:
    from ..vendor_terms import runtime

    r = ex.report
    if ex.eval_with_grad:
        ex.contributing.append(_("the model is in eval mode but autograd is recording: the live activations keep "
                                 "graphs for a backward that never comes"))
    if ex.cause != "other_processes" and ex.others_bytes and ex.others_bytes >= max(1, r.shortfall_bytes or 0):
        size = format_size_any(ex.others_bytes)
        if ex.others_basis == "outside PyTorch":
            ex.contributing.append(_("memory outside PyTorch (other processes, this job's {context}): {size} on "
                                     "that GPU").format(context=_(runtime(ex.vendor).context), size=size))
        else:
            ex.contributing.append(_("other processes: {size} on that GPU").format(size=size))
    if ex.cause != "fragmentation" and r.reserved_unallocated_bytes and r.shortfall_bytes is not None \
            and r.reserved_unallocated_bytes >= r.shortfall_bytes > 0:
        ex.contributing.append(_("{size} reserved by PyTorch but unallocated").format(
            size=format_size_any(r.reserved_unallocated_bytes)))
    outside = ex.non_pytorch_bytes
    if outside and r.total_bytes and outside >= 0.05 * r.total_bytes:
        words = runtime(ex.vendor)
        ex.contributing.append(_("{size} of this process's memory is outside PyTorch ({context}, {libraries})").format(
            size=format_size_any(outside), context=_(words.context), libraries=_(words.libraries)))
    if r.requested_bytes and r.total_bytes and ex.cause != "request_too_large" \
            and r.requested_bytes >= 0.25 * r.total_bytes:
        ex.contributing.append(_("the single request ({size}) is {percent:.0f}% of the GPU").format(
            size=format_size_any(r.requested_bytes), percent=100 * r.requested_bytes / r.total_bytes))


def _fix(fix_id: str, title: str, how: str, saves: int | None = None, basis: str | None = None) -> Fix:
    return Fix(fix_id, title, how, saves, basis if saves is not None else None)


def _known_fix(fix_id: str) -> Fix:
    """A fix of _PHASE_FIX_TEXT, in the reader's language."""
    title, how = _PHASE_FIX_TEXT[fix_id]
    return _fix(fix_id, _(title), _(how))


def _model_fixes(ex: Explanation) -> list[Fix]:
    fixes = [
        _fix("halve_batch", _("smaller batch (or shorter sequences)"),
             _("halve the batch size; with grad_accum below the effective batch stays the same")),
        _fix("grad_accum", _("gradient accumulation"),
             _("run micro-batches and step the optimizer every N of them "
               "(vramkit.torch.accumulation_plan keeps the effective batch)")),
        _fix("bf16", _("mixed precision"), _("torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss")),
        _fix("checkpointing", _("activation checkpointing"),
             _("torch.utils.checkpoint on the big blocks (HF: model.gradient_checkpointing_enable())")),
        _fix("no_grad", _("no autograd for evaluation/inference"),
             _("wrap evaluation in torch.no_grad() or torch.inference_mode(); keep loss.item(), not loss")),
        _fix("offload_optimizer", _("shard or offload optimizer state"),
             _("FSDP / DeepSpeed ZeRO, CPU offload, or an 8-bit optimizer")),
    ]
    return fixes


# Fixes for where the allocation failed (doctor.traceback.PHASES), beside the model fixes above.
_PHASE_FIX_TEXT = {
    "infer_batch": (N_("fewer or smaller inputs at once"),
                    N_("a smaller batch, shorter sequences or smaller images: without autograd, what a forward pass "
                    "holds grows with them")),
    "eval_batch": (N_("smaller evaluation batch"),
                   N_("lower the evaluation batch (HF: TrainingArguments(per_device_eval_batch_size=...)); "
                   "evaluation needs no activations for backward, so it runs under torch.no_grad()")),
    "eval_accumulation": (N_("move predictions to the CPU as they are gathered"),
                          N_("HF: TrainingArguments(eval_accumulation_steps=N) copies the gathered logits to the "
                          "CPU every N steps instead of keeping the whole evaluation set's on the GPU; in your "
                          "own loop, collect outputs.cpu() rather than torch.cat on the GPU")),
    "preprocess_logits": (N_("keep the predictions, not the logits"),
                          N_("HF: Trainer(preprocess_logits_for_metrics=lambda logits, labels: logits.argmax(-1)) "
                          "keeps one id per token instead of a vocabulary-wide row of logits")),
    "ddp": (N_("DistributedDataParallel instead of DataParallel"),
            N_("torchrun --nproc_per_node=N train.py with DistributedDataParallel: each GPU computes its own loss, "
            "nothing is gathered to GPU 0, and no replica is copied there at every step")),
    "loss_in_replicas": (N_("compute the loss inside the replicas"),
                         N_("return the loss from the module DataParallel wraps (not the logits): only a scalar "
                         "per GPU is gathered to GPU 0, not every replica's outputs")),
    "optimizer_foreach": (N_("step the optimizer one tensor at a time"),
                          N_("torch.optim.AdamW(params, foreach=False) (or fused=True): the default multi-tensor "
                          "update allocates temporaries for many parameters at once")),
    "release_before_step": (N_("free what the step does not need"),
                            N_("del outputs and loss (keep loss.item()) before optimizer.step(); "
                            "optimizer.zero_grad(set_to_none=True); the first step also creates the state: "
                            "2 fp32 copies of every parameter for Adam")),
    "pin_memory_off": (N_("DataLoader without pinned memory"),
                       N_("DataLoader(..., pin_memory=False), or fewer prefetched batches (prefetch_factor, "
                       "num_workers): the pin-memory thread copies every batch into page-locked memory")),
    "set_device_first": (N_("set the GPU before building the DataLoader"),
                         N_("torch.cuda.set_device(local_rank) first: the pin-memory thread creates a GPU context "
                         "on the current device, GPU 0 unless set, in every process")),
    "map_location": (N_("load the checkpoint to the CPU first"),
                     N_("torch.load(path, map_location='cpu') (or this rank's own device): a checkpoint saved from "
                     "cuda:0 loads back onto cuda:0, in every process; safetensors: load_file(path, device='cpu')")),
    "load_order": (N_("load before anything else holds the GPU"),
                   N_("free the old model and optimizer first (del, then torch.cuda.empty_cache()); HF: "
                   "from_pretrained(..., torch_dtype=torch.bfloat16, device_map='auto')")),
    "generate_batch": (N_("generate fewer sequences at once"),
                       N_("a smaller batch, fewer num_beams / num_return_sequences, a lower max_new_tokens: the KV "
                       "cache grows with batch x beams x (prompt + new tokens) x layers")),
    "cache_offload": (N_("offload or quantize the KV cache"),
                      N_("generate(..., cache_implementation='offloaded') keeps all but the current layer's cache "
                      "on the CPU; 'quantized' stores it in 4 bits")),
    "half_weights": (N_("half-precision weights"),
                     N_("from_pretrained(..., torch_dtype=torch.bfloat16): the weights take half of fp32")),
    "ds_offload": (N_("offload parameters and optimizer state (DeepSpeed ZeRO-3)"),
                   N_("zero_optimization: stage 3 with offload_param and offload_optimizer {device: cpu} (or nvme): "
                   "each GPU keeps only the layers it is computing")),
    "ds_live_params": (N_("gather fewer parameters at once"),
                       N_("lower stage3_max_live_parameters, stage3_prefetch_bucket_size and reduce_bucket_size "
                       "(DeepSpeed) or FSDP's limit_all_gathers=True: fewer gathered layers on the GPU together")),
    "check_shape": (N_("check the shapes, indexes and settings that set this size"),
                    N_("print the shapes just before the failing line; an index out of range, a wrong view or "
                    "broadcast, or a setting (num_beams with sampling, max_length, a sequence or image size) "
                    "computed it; freeing memory or a smaller batch will not make it fit")),
    "debug_sync": (N_("find the op that asked"),
                   N_("run once with CUDA_LAUNCH_BLOCKING=1 (HIP_LAUNCH_BLOCKING=1 on ROCm) so the error is raised "
                   "at the operation that computed the size, not a later one")),
    "paddle_fraction": (N_("let Paddle take a larger share of the GPU"),
                        N_("export FLAGS_fraction_of_gpu_memory_to_use=0.95 (the share Paddle reserves at start) when "
                        "the GPU runs nothing else; lower it when another process needs room, or use "
                        "FLAGS_allocator_strategy=auto_growth")),
    "paddle_amp": (N_("mixed precision (Paddle)"), N_("with paddle.amp.auto_cast(level='O1'): activations in float16")),
    "paddle_recompute": (N_("recompute the big blocks (Paddle)"),
                         N_("paddle.distributed.fleet.utils.recompute around the large layers (activation "
                         "checkpointing)")),
    "tf_memory_growth": (N_("let TensorFlow take memory as it needs it"),
                         N_("tf.config.experimental.set_memory_growth(gpu, True) for each GPU (or "
                         "TF_FORCE_GPU_ALLOW_GROWTH=true): by default TensorFlow reserves the whole GPU at start, "
                         "leaving nothing for another process (or PyTorch/JAX in the same one)")),
    "tf_mixed": (N_("mixed precision (Keras)"), N_("tf.keras.mixed_precision.set_global_policy('mixed_float16')")),
    "xla_prealloc": (N_("change what JAX/XLA reserves at start"),
                     N_("XLA_PYTHON_CLIENT_MEM_FRACTION=.9 (JAX takes 75% of the GPU at start; lower it when "
                     "another process shares the GPU) or XLA_PYTHON_CLIENT_PREALLOCATE=false (allocate as "
                     "needed; more fragmentation)")),
    "jax_remat": (N_("rematerialize the big blocks (JAX)"), N_("jax.checkpoint (jax.remat) around the large layers")),
    "vllm_gpu_util": (N_("give vLLM a larger share of the GPU"),
                      N_("--gpu-memory-utilization (default 0.9): the share of the whole GPU vLLM may fill with "
                      "weights, activations and the KV cache; raise it when the GPU runs nothing else, lower it "
                      "when other processes hold memory there")),
    "vllm_max_model_len": (N_("a shorter context and fewer sequences at once"),
                           N_("--max-model-len (the KV cache one request must fit), --max-num-seqs and "
                           "--max-num-batched-tokens lower")),
    "vllm_smaller_weights": (N_("smaller weights, or more GPUs"),
                             N_("a quantized model (--quantization awq/gptq/fp8) or --tensor-parallel-size N: the "
                             "weights leave room for the KV cache")),
    "vllm_enforce_eager": (N_("no CUDA graphs"),
                           N_("--enforce-eager: the graphs' private memory pools are not captured")),
    "llama_ngl": (N_("offload fewer layers to the GPU"),
                  N_("-ngl N (n_gpu_layers) lower: the other layers run on the CPU; with several GPUs, "
                  "--tensor-split to give a small one fewer")),
    "llama_ctx": (N_("a smaller context and batch"),
                  N_("-c N (n_ctx) lower: the KV cache grows with it; -ctk q8_0 -ctv q8_0 halve it; -ub/-b lower "
                  "shrink the compute buffer")),
    "llama_quant": (N_("a smaller quantization"), N_("a Q4_K_M (or smaller) GGUF of the model instead of Q8_0/F16")),
}
# The batch fix, in the words of the framework that printed the message.
_BATCH_HOW = {"paddle": N_("lower the batch size in the model's config or arguments (Paddle's message says so too)"),
              "tensorflow": N_("lower batch_size in fit()/the dataset's batch(); the tensor's first dimension is "
                            "usually the batch"),
              "jax": N_("lower the batch (or sequence) size; with pmap/sharding, the per-device batch")}
# framework -> its own fixes, in the order they help when its usage is the cause.
_FRAMEWORK_FIXES: dict[str, tuple[str, ...]] = {
    "paddle": ("halve_batch", "paddle_fraction", "paddle_amp", "paddle_recompute"),
    "tensorflow": ("halve_batch", "tf_mixed", "tf_memory_growth"),
    "jax": ("halve_batch", "xla_prealloc", "jax_remat"),
    "vllm": ("vllm_max_model_len", "vllm_gpu_util", "vllm_enforce_eager"),
    "llama.cpp": ("llama_ctx", "llama_ngl", "llama_quant"),
    "deepspeed": ("ds_offload", "ds_live_params"),
}
# phase -> the fixes in the order they help there. Model fixes missing from a phase's list cannot
# help there (the backward pass needs autograd; the evaluation gather holds no activations) and
# are not offered.
_PHASE_ORDER: dict[str, tuple[str, ...]] = {
    "forward": ("halve_batch", "checkpointing", "bf16", "grad_accum", "offload_optimizer", "no_grad"),
    "backward": ("checkpointing", "halve_batch", "grad_accum", "bf16", "offload_optimizer"),
    "optimizer": ("offload_optimizer", "optimizer_foreach", "release_before_step"),
    "eval_gather": ("eval_accumulation", "preprocess_logits", "eval_batch"),
    "dataparallel": ("ddp", "loss_in_replicas", "halve_batch", "checkpointing", "bf16", "grad_accum"),
    "pin_memory": ("pin_memory_off", "set_device_first"),
    "checkpoint_load": ("map_location", "load_order"),
    "to_device": ("load_order", "half_weights"),  # the weights alone: no batch or activation fix helps
    "generate": ("generate_batch", "cache_offload", "half_weights"),
    "kv_cache": ("vllm_gpu_util", "vllm_max_model_len", "vllm_smaller_weights"),
    "param_gather": ("ds_offload", "ds_live_params", "halve_batch", "checkpointing"),
}
_EVAL_FORWARD = ("eval_batch", "no_grad", "bf16")
_EVAL_FORWARD_NO_GRAD = ("eval_batch", "bf16")  # the loop already runs under no_grad (HF, Lightning)
_EVAL_WITH_GRAD = ("no_grad", "eval_batch", "bf16")  # a model in eval mode whose activations keep graphs
# a forward pass under torch.no_grad() / inference_mode() outside any evaluation loop: inference (a
# pipeline, a server): no training fix (checkpointing, accumulation, optimizer state) applies
_INFER_FORWARD = ("infer_batch", "half_weights", "bf16")
# Causes the phase's fixes answer best; for the others (fragmentation, other processes, a request
# larger than the GPU) the cause's fix leads and the phase's follow.
_PHASE_LEADS = ("own_usage", "device_full", "kv_cache_budget")


def _phase_order(phase: Phase, eval_with_grad: bool) -> tuple[str, ...]:
    if phase.id == "forward" and eval_with_grad:
        return _EVAL_WITH_GRAD
    if phase.id == "forward" and phase.evaluating:
        return _EVAL_FORWARD_NO_GRAD if phase.grad_off else _EVAL_FORWARD
    if phase.id == "forward" and phase.grad_off and not phase.training:
        return _INFER_FORWARD
    return _PHASE_ORDER[phase.id]


def _phase_fixes(ex: Explanation) -> list[Fix]:
    """The fixes for where the allocation failed, in the order that helps there (the model fixes
    in their usual order when the traceback does not say)."""
    model = {f.id: f for f in _model_fixes(ex)}
    if ex.phase is None:
        if ex.eval_with_grad and "no_grad" in model:
            return [model["no_grad"]] + [f for f in model.values() if f.id != "no_grad"]
        return list(model.values())
    order = _phase_order(ex.phase, ex.eval_with_grad)
    return [model[fix_id] if fix_id in model else _known_fix(fix_id) for fix_id in order]


def _fixes(ex: Explanation, snap: Snapshot | None, me: str | None, savings: SavingsHook | None,
           context: dict[str, Any]) -> list[Fix]:
    r = ex.report
    fixes: list[Fix] = []
    ru = r.reserved_unallocated_bytes
    if ex.cause == "host_ram":
        fixes += [
            _fix("halve_batch", _("smaller batch"), _("halve the batch size (host memory scales with it too)")),
            _fix("loader_workers", _("fewer DataLoader workers"), _("each worker holds its own copy of the dataset "
                 "state: lower num_workers, or share data with numpy memmaps")),
            _fix("mmap_load", _("load weights without a full copy in RAM"),
                 _("torch.load(path, mmap=True); HF: from_pretrained(..., low_cpu_mem_usage=True)")),
        ]
        if r.requested_bytes and r.requested_bytes >= 64 * 1024**3:
            fixes.insert(0, _fix("check_shape", _("check the shape of the failing tensor"),
                                 _("a single {size} request is usually a shape bug (an unintended broadcast or "
                                   "a wrong view)").format(size=format_size_any(r.requested_bytes))))
        return _rank(ex, fixes, savings, context)
    if ex.cause == "not_memory":
        # No memory setting helps: the size itself is wrong.
        return _rank(ex, [_known_fix(i) for i in ("check_shape", "debug_sync")], savings, context)
    if ex.cause == "kv_cache_budget":
        fixes += [_known_fix(i) for i in _PHASE_ORDER["kv_cache"]]
        if r.max_length is not None:  # vLLM worked out the context that fits: say it, first (_lead_order)
            fixes = [_fix("vllm_max_model_len", _("a shorter context"),
                          _("--max-model-len {length} or less: what vLLM says fits in the KV cache memory there is "
                            "(or give it more: --gpu-memory-utilization)").format(length=r.max_length),
                          r.requested_bytes - r.free_bytes if r.requested_bytes and r.free_bytes else None,
                          "message")
                     if f.id == "vllm_max_model_len" else f for f in fixes]
    if ex.cause == "request_too_large":
        cap = r.allowed_bytes if r.allowed_bytes is not None and r.allowed_bytes < (r.total_bytes or 1 << 62) \
            else r.total_bytes
        fixes.append(_fix("split_op", _("split the operation"),
                          _("one tensor of {size} cannot fit in {cap}: process it in chunks (smaller batch or "
                            "sequence, chunked attention/loss), or shard it over several GPUs; freeing memory "
                            "will not help").format(size=format_size_any(r.requested_bytes), cap=format_size_any(cap))))
    if ex.cause == "memory_cap" and r.allowed_bytes is not None and r.total_bytes is not None:
        # raising the cap gives at most what the GPU has free beyond it
        room = r.total_bytes - r.allowed_bytes if r.free_bytes is None else min(r.total_bytes - r.allowed_bytes,
                                                                                r.free_bytes)
        fixes.append(_fix("raise_cap", _("raise the per-process cap"),
                          _("torch.cuda.set_per_process_memory_fraction(...) limits this process below the GPU"),
                          room, "message"))
    # expandable_segments whenever the reserved-but-unallocated memory is a real share or could have
    # served the request (the fragmentation rule, real_share), and when the GPU had the memory free but
    # it could not be given (expandable segments map pages: no new contiguous segment is needed).
    could_serve = bool(ru and r.shortfall_bytes and ru >= r.shortfall_bytes)
    expandable = bool(r.alloc_conf and re.search(r"expandable_segments:(?:true|1)\b", r.alloc_conf, re.IGNORECASE))
    if expandable and r.kind in ("cuda", "hip"):
        # nothing to offer: the reserved memory is in segments that grow; what is left is tensor shapes
        ex.notes.append(_("the log shows {setting} already set: no allocator setting is offered").format(
            setting=r.alloc_conf))
    elif r.kind in ("cuda", "hip") and (ex.cause == "free_but_failed" or (ru and (real_share(r) or could_serve))):
        env = "PYTORCH_HIP_ALLOC_CONF" if r.kind == "hip" else "PYTORCH_CUDA_ALLOC_CONF"
        if r.form in ("1.0-1.3", "1.4-2.0"):
            how = _("set {setting} in the job's environment (PyTorch >= 2.1: expandable_segments:True); also keep "
                    "tensor shapes steady (pad or bucket variable lengths)").format(
                        setting=f"{env}=max_split_size_mb:128")
        else:
            how = _("set {setting} in the job's environment; also keep tensor shapes steady (pad or bucket "
                    "variable lengths)").format(setting=f"{env}=expandable_segments:True")
        frag = _fix("alloc_conf", _("let the allocator reuse fragmented memory"), how, ru or None, "message")
        if ex.cause == "fragmentation":
            fixes.insert(0, frag)
        elif ex.cause != "request_too_large":
            fixes.append(frag)
    others = [h for h in ex.holders if not h.is_job and h.bytes]
    if others and ex.cause not in ("request_too_large", "memory_cap"):
        for h in sorted(others, key=lambda h: -(h.bytes or 0))[:3]:
            if me is not None and h.user == me:
                how = (_("{command}; it is yours: stop it, or vram kill {pid}") if h.command
                       else _("it is yours: stop it, or vram kill {pid}")).format(command=h.command, pid=h.pid)
                fixes.append(_fix(f"free_pid_{h.pid}", _("free your process {pid}").format(pid=h.pid), how,
                                  h.bytes, h.source))
            else:
                how = (_("{command}; or run where there is room: vram pick") if h.command
                       else _("or run where there is room: vram pick")).format(command=h.command)
                title = (_("ask {user} to free pid {pid}").format(user=h.user, pid=h.pid) if h.user
                         else _("ask the owner to free pid {pid}").format(pid=h.pid))
                fixes.append(_fix(f"free_pid_{h.pid}", title, how, h.bytes, h.source))
    if snap is not None and r.requested_bytes and ex.cause not in ("request_too_large",):
        need = r.requested_bytes + (ex.job_bytes or r.reserved_bytes or 0)
        # The GPUs `vram pick --min-free NEED` would choose, in the order it would choose them: room
        # enough and not busy, emptiest first (not merely in index order, which names busy GPUs).
        from ..cuda_env import devices_of
        from ..gpu_choice import Policy, ranked, units_of
        from ..visible import example

        devices = devices_of(snap)
        units = [u for u in units_of(snap, devices) if not u.dev.is_mig and u.dev.index != ex.live_gpu]
        roomy = ranked(Policy(count=1, min_free=need), units)
        if roomy:
            names = join_words(
                _("GPU {index} ({free} free, {busy}% busy)").format(
                    index=u.dev.index, free=format_size_any(u.memory_free), busy=u.utilization)
                if u.utilization is not None
                else _("GPU {index} ({free} free)").format(index=u.dev.index, free=format_size_any(u.memory_free))
                for u in roomy[:4])
            fixes.append(_fix("other_gpu", _("run on a GPU with room"),
                              _("now: {gpus}; e.g. {example} (or vram pick)").format(
                                  gpus=names, example=example(roomy[0].dev, devices))))
    if ex.cause == "library_workspace":
        fixes.append(_fix("workspace", _("leave headroom for library workspaces"),
                          _("torch.backends.cudnn.benchmark = False (smaller workspaces); "
                            "CUBLAS_WORKSPACE_CONFIG=:4096:8; see the GPU's other holders: vram status")))
    # other processes to blame, none named (no process list in the message, no live data): find them
    if ex.cause in ("device_full", "free_but_failed") or (ex.cause == "other_processes" and not others):
        fixes.append(_fix("check_gpu", _("check what holds the GPU"), _("vram status; a GPU full before the job "
                          "starts fails at the first CUDA call")))
    if r.kind == "mps":
        fixes.append(_fix("mps_watermark", _("MPS memory limit"), _("PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 lifts the "
                          "limit (may make the system unstable); better: a smaller batch")))
    fixes += _framework_fixes(ex, {f.id for f in fixes})
    return _rank(ex, fixes, savings, context)


def _framework_order(ex: Explanation) -> tuple[str, ...] | None:
    fw = ex.report.framework
    if fw == "llama.cpp" and ex.phase is not None and ex.phase.id == "checkpoint_load":
        return ("llama_ngl", "llama_quant", "llama_ctx")  # the weights did not fit: fewer layers on the GPU
    if fw == "vllm" and _vllm_profiling(ex):
        return _VLLM_PROFILING
    return _FRAMEWORK_FIXES.get(fw)


# vLLM's profiling forward (before the KV cache is sized): the weights and one forward of
# --max-num-batched-tokens did not fit the GPU itself. A share of the GPU (--gpu-memory-utilization)
# sizes the KV cache after it, and CUDA graphs are captured later still: neither helps there.
_VLLM_PROFILING = ("vllm_max_model_len", "vllm_smaller_weights")
_VLLM_PROFILE_FUNCS = ("determine_num_available_blocks", "determine_available_memory", "profile_run", "_dummy_run")


def _vllm_profiling(ex: Explanation) -> bool:
    """Whether a PyTorch OOM in vLLM came in its profiling forward (v0's determine_num_available_blocks,
    v1's determine_available_memory: profile_run)."""
    evidence = ex.phase.evidence if ex.phase is not None and ex.phase.id == "kv_cache" else None
    return evidence is not None and ex.report.kind in ("cuda", "hip") and (
        evidence.func in _VLLM_PROFILE_FUNCS or "profile_run(" in evidence.code
        or "determine_available_memory(" in evidence.code)


def _framework_fixes(ex: Explanation, have: set[str]) -> list[Fix]:
    """The fixes of the framework that printed the message: its own (Paddle, TensorFlow, JAX,
    llama.cpp, a vLLM KV cache), or PyTorch's for the phase with vLLM's or DeepSpeed's first."""
    fw = ex.report.framework
    own = _framework_order(ex) or ()
    out = []
    for fix_id in own:
        if fix_id in have or (fix_id.startswith("vllm") and ex.cause == "kv_cache_budget"):
            continue
        if fix_id == "halve_batch":
            out.append(_fix("halve_batch", _("smaller batch (or shorter sequences)"), _(_BATCH_HOW[fw])))
        else:
            out.append(_known_fix(fix_id))
    if fw in ("paddle", "tensorflow", "jax", "llama.cpp") or ex.cause == "kv_cache_budget":
        return out  # PyTorch's model fixes are not theirs
    taken = have | {f.id for f in out}
    if fw == "vllm" and _vllm_profiling(ex):
        taken |= {"vllm_gpu_util", "vllm_enforce_eager"}
    return out + [f for f in _phase_fixes(ex) if f.id not in taken]


def _lead_order(ex: Explanation) -> tuple[str, ...] | None:
    """The fixes that lead, in order, when the job's own usage is the cause: the framework's own,
    or those for the phase where it failed (DeepSpeed's after the phase's when frames say where)."""
    if ex.cause not in _PHASE_LEADS:
        return None
    fw = ex.report.framework
    if ex.cause == "kv_cache_budget":
        if ex.report.max_length is not None:  # the context vLLM says fits leads
            return ("vllm_max_model_len", "vllm_gpu_util", "vllm_smaller_weights")
        return _PHASE_ORDER["kv_cache"]  # the message's own advice first: a larger gpu_memory_utilization
    if fw in ("paddle", "tensorflow", "jax", "llama.cpp", "vllm"):
        return _framework_order(ex)
    if ex.phase is not None:
        return _phase_order(ex.phase, ex.eval_with_grad)
    return _framework_order(ex)


def _rank(ex: Explanation, fixes: list[Fix], savings: SavingsHook | None, context: dict[str, Any]) -> list[Fix]:
    short = ex.report.shortfall_bytes
    for f in fixes:
        if f.saves_bytes is None and savings is not None and f.id in MODEL_FIXES:
            try:
                value = savings(f.id, context)
            except Exception:  # an estimator problem must not hide the diagnosis
                value = None
            if value is not None:
                f.saves_bytes, f.basis = int(value), "estimate"
    fixes = _bounded(ex, fixes)
    for f in fixes:
        if f.saves_bytes is not None and short is not None:
            f.enough = f.saves_bytes >= short
    order = _lead_order(ex)
    if order:
        # Where it failed (or the framework that failed) decides: those fixes lead, in the order that helps.
        leads = sorted((f for f in fixes if f.id in order), key=lambda f: order.index(f.id))
    else:
        # The fix for the main cause leads; then fixes known to cover the shortfall, biggest first.
        lead = next((f for f in fixes if f.id.startswith(_LEAD[ex.cause])), None)
        if ex.cause == "host_ram" and fixes and fixes[0].id == "check_shape":
            lead = fixes[0]
        leads = [lead] if lead else []
    rest = sorted((f for f in fixes if f not in leads),
                  key=lambda f: (f.enough is not True, f.saves_bytes is None, -(f.saves_bytes or 0)))
    return leads + rest


def _bounded(ex: Explanation, fixes: list[Fix]) -> list[Fix]:
    """Estimated savings as the job can have them: never more than it held (a fix cannot free what
    the job did not have), and a fix that saves nothing for the setup given is not offered."""
    r = ex.report
    held = next((v for v in (ex.job_bytes, r.reserved_bytes, r.allocated_bytes, r.total_bytes) if v), None)
    kept, capped, idle = [], [], []
    for f in fixes:
        if f.basis == "estimate" and f.saves_bytes is not None:
            if f.saves_bytes <= 0:
                idle.append(f.title)
                continue
            if held is not None and f.saves_bytes > held:
                f.saves_bytes = held
                capped.append(f.title)
        kept.append(f)
    if capped and held is not None:
        ex.notes.append(_("estimated savings capped at what the job held ({size}): {fixes}").format(
            size=format_size_any(held), fixes=join_words(capped)))
    if idle:
        ex.notes.append(_("not listed, for the setup given they save nothing (or add memory): {fixes}").format(
            fixes=join_words(idle)))
    return kept


_LEAD = {"not_memory": "check_shape", "kv_cache_budget": "vllm_gpu_util",
         "request_too_large": "split_op", "memory_cap": "raise_cap", "fragmentation": "alloc_conf",
         "other_processes": "free_pid_", "own_usage": "halve_batch", "host_ram": "halve_batch",
         "library_workspace": "workspace", "device_full": "check_gpu", "free_but_failed": "check_gpu"}
