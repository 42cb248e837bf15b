"""Why an out-of-memory error happened, and what to change, with the memory each change saves.

`explain(report, snapshot=..., savings=...)`:
- the main cause: a single request larger than the GPU (or the per-process cap) could ever give,
  fragmentation of PyTorch's cache, other processes, or the job's own usage;
- who held the GPU's memory: this job (allocated / reserved-but-unallocated / non-PyTorch) and the
  other processes, from the message (at OOM time) and, when a snapshot is given, from NVML now;
- ranked fixes. A saving is given only where it is known: measured from the message, read live,
  or estimated by the `savings` hook (the model/batch estimator plugs in there; see SavingsHook).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..model import Snapshot
from ..units import format_size
from .oom import OomReport

# The hook for fixes whose saving depends on the model and batch (halve_batch, bf16,
# checkpointing, grad_accum, no_grad, offload_optimizer). Called as savings(fix_id, context)
# with context = {"report": OomReport, "model": str|None, "batch_size": int|None,
# "seq_len": int|None, ...}; returns bytes saved, or None when it cannot say.
SavingsHook = Callable[[str, dict[str, Any]], "int | None"]

MODEL_FIXES = ("halve_batch", "grad_accum", "bf16", "checkpointing", "no_grad", "offload_optimizer")
# Reserved-but-unallocated memory that could have served the request counts as fragmentation when it
# is a real part of the cache (a few MiB of a full cache are normal slack, not the cause).
FRAGMENTATION_SHARE = 0.10
FRAGMENTATION_MIN = 1024**3

CAUSES = {
    "request_too_large": "a single request larger than the GPU could ever give",
    "memory_cap": "the per-process memory cap (set_per_process_memory_fraction), not the GPU, ran out",
    "fragmentation": "fragmentation: PyTorch had the memory reserved, but in pieces too small for the request",
    "other_processes": "other processes hold the memory this job needed",
    "own_usage": "the job's own usage: its tensors filled the GPU",
    "host_ram": "the host (CPU) ran out of RAM, not the GPU",
    "library_workspace": "cuBLAS/cuDNN could not get memory for a handle or workspace: the GPU was (nearly) full",
    "free_but_failed": "the GPU reported more free memory than was requested: another process took it in "
                       "between, or it was not usable by this job (another GPU, a MIG slice, a Windows WDDM limit)",
    "device_full": "the GPU had no memory for a CUDA call outside PyTorch's cache (often: full before the job began)",
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
        return (gpu, None) if gpu in indices else (None, f"no GPU {gpu} on this machine")
    pids = {p.pid for p in report.processes}
    for proc in snap.processes:
        if proc.pid in pids:
            return proc.gpu, None
    if report.device is not None and report.device in indices:
        return report.device, (f"assuming GPU {report.device} in the message is NVML GPU {report.device}; "
                               "pass --gpu if the job ran with CUDA_VISIBLE_DEVICES set")
    return None, None


def explain(report: OomReport, snapshot: Snapshot | None = None, *, gpu: int | None = None,
            job_pid: int | None = None, me: str | None = None, savings: SavingsHook | None = None,
            context: dict[str, Any] | None = None) -> Explanation:
    """The cause and ranked fixes for one parsed out-of-memory message.

    snapshot: live NVML data (named processes, GPUs with room now). gpu: the NVML index the job
    ran on, when the message's CUDA ordinal is not it. me: the caller's user name (own processes
    get `vram kill`, others' get "ask"). savings/context: the estimator hook (SavingsHook).
    """
    pid, job_bytes = _identify_job(report, job_pid)
    ex = Explanation(report=report, cause="own_usage", cause_text="", job_pid=pid, job_bytes=job_bytes)
    for p in report.processes:
        ex.holders.append(Holder(p.pid, p.bytes, "message", is_job=(p.pid == pid and job_bytes == p.bytes)))
    _others_from_message(ex)
    if snapshot is not None:
        _add_live(ex, snapshot, gpu)
    ex.cause = _cause(ex)
    ex.cause_text = CAUSES[ex.cause]
    _contributing(ex)
    ex.fixes = _fixes(ex, snapshot, me, savings, dict(context or {}, report=report))
    return ex


def _others_from_message(ex: Explanation) -> None:
    r = ex.report
    listed = [h for h in ex.holders if not h.is_job]
    if listed:
        ex.others_bytes, ex.others_basis = sum(h.bytes or 0 for h in listed), "message"
    elif r.total_bytes is not None and r.free_bytes is not None and ex.job_bytes is not None:
        # No process list (no NVML in the job): what is neither free nor this process's.
        ex.others_bytes, ex.others_basis = max(0, r.total_bytes - r.free_bytes - ex.job_bytes), "derived"
    elif r.total_bytes is not None and r.free_bytes is not None and r.reserved_bytes is not None:
        # Older forms: what is outside PyTorch's cache (other processes and this job's CUDA context).
        ex.others_bytes = max(0, r.total_bytes - r.free_bytes - r.reserved_bytes)
        ex.others_basis = "outside PyTorch"


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
        ex.notes.append("live data is from now, not from the moment of the OOM")


def _cause(ex: Explanation) -> str:
    r = ex.report
    if r.kind == "cpu":
        return "host_ram"
    if r.kind in ("cublas", "cudnn"):
        return "library_workspace"
    if r.requested_bytes is None:
        return "device_full" if r.kind == "cuda-runtime" else "own_usage"
    if r.total_bytes is not None and r.requested_bytes > r.total_bytes:
        return "request_too_large"
    if r.allowed_bytes is not None:
        if r.requested_bytes > r.allowed_bytes:
            return "request_too_large"
        if (r.reserved_bytes is not None and r.reserved_bytes + r.requested_bytes > r.allowed_bytes
                and (r.free_bytes is None or r.free_bytes >= r.requested_bytes)):
            return "memory_cap"
    short = r.shortfall_bytes
    if short == 0:
        return "free_but_failed"
    short = short or 0
    ru = r.reserved_unallocated_bytes
    if ru and r.reserved_bytes and ru >= short and (ru >= FRAGMENTATION_SHARE * r.reserved_bytes
                                                    or ru >= FRAGMENTATION_MIN):
        return "fragmentation"
    others = ex.others_bytes or 0
    own = ex.job_bytes if ex.job_bytes is not None else r.reserved_bytes
    if others and others >= short and (own is None or others >= own):
        return "other_processes"
    return "own_usage"


def _contributing(ex: Explanation) -> None:
    r = ex.report
    if ex.cause != "other_processes" and ex.others_bytes and ex.others_bytes >= max(1, r.shortfall_bytes or 0):
        who = ("memory outside PyTorch (other processes, this job's CUDA context)"
               if ex.others_basis == "outside PyTorch" else "other processes")
        ex.contributing.append(f"{who}: {format_size(ex.others_bytes)} on that GPU")
    if ex.cause != "fragmentation" and r.reserved_unallocated_bytes and r.shortfall_bytes is not None \
            and r.reserved_unallocated_bytes >= r.shortfall_bytes > 0:
        ex.contributing.append(f"{format_size(r.reserved_unallocated_bytes)} reserved by PyTorch but unallocated")
    if r.non_pytorch_bytes and r.total_bytes and r.non_pytorch_bytes >= 0.05 * r.total_bytes:
        ex.contributing.append(f"{format_size(r.non_pytorch_bytes)} of this process's memory is outside "
                               "PyTorch (CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers)")
    if r.requested_bytes and r.total_bytes and ex.cause != "request_too_large" \
            and r.requested_bytes >= 0.25 * r.total_bytes:
        ex.contributing.append(f"the single request ({format_size(r.requested_bytes)}) is "
                               f"{100 * r.requested_bytes / r.total_bytes:.0f}% of the GPU")


def _fix(fix_id: str, title: str, how: str, saves: int | None = None, basis: str | None = None) -> Fix:
    return Fix(fix_id, title, how, saves, basis if saves is not None else None)


def _model_fixes(ex: Explanation) -> list[Fix]:
    fixes = [
        _fix("halve_batch", "smaller batch (or shorter sequences)",
             "halve the batch size; with grad_accum below the effective batch stays the same"),
        _fix("grad_accum", "gradient accumulation",
             "run micro-batches and step the optimizer every N of them "
             "(vramkit.torch.accumulation_plan keeps the effective batch)"),
        _fix("bf16", "mixed precision", "torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss"),
        _fix("checkpointing", "activation checkpointing",
             "torch.utils.checkpoint on the big blocks (HF: model.gradient_checkpointing_enable())"),
        _fix("no_grad", "no autograd for evaluation/inference",
             "wrap evaluation in torch.no_grad() or torch.inference_mode(); keep loss.item(), not loss"),
        _fix("offload_optimizer", "shard or offload optimizer state",
             "FSDP / DeepSpeed ZeRO, CPU offload, or an 8-bit optimizer"),
    ]
    return fixes


def _fixes(ex: Explanation, snap: Snapshot | None, me: str | None, savings: SavingsHook | None,
           context: dict[str, Any]) -> list[Fix]:
    r = ex.report
    fixes: list[Fix] = []
    ru = r.reserved_unallocated_bytes
    if ex.cause == "host_ram":
        fixes += [
            _fix("halve_batch", "smaller batch", "halve the batch size (host memory scales with it too)"),
            _fix("loader_workers", "fewer DataLoader workers", "each worker holds its own copy of the dataset "
                 "state: lower num_workers, or share data with numpy memmaps"),
            _fix("mmap_load", "load weights without a full copy in RAM",
                 "torch.load(path, mmap=True); HF: from_pretrained(..., low_cpu_mem_usage=True)"),
        ]
        if r.requested_bytes and r.requested_bytes >= 64 * 1024**3:
            fixes.insert(0, _fix("check_shape", "check the shape of the failing tensor",
                                 f"a single {format_size(r.requested_bytes)} request is usually a shape "
                                 "bug (an unintended broadcast or a wrong view)"))
        return _rank(ex, fixes, savings, context)
    if ex.cause == "request_too_large":
        cap = r.allowed_bytes if r.allowed_bytes is not None and r.allowed_bytes < (r.total_bytes or 1 << 62) \
            else r.total_bytes
        fixes.append(_fix("split_op", "split the operation",
                          f"one tensor of {format_size(r.requested_bytes)} cannot fit in {format_size(cap)}: "
                          "process it in chunks (smaller batch or sequence, chunked attention/loss), or shard "
                          "it over several GPUs; freeing memory will not help"))
    if ex.cause == "memory_cap" and r.allowed_bytes is not None and r.total_bytes is not None:
        fixes.append(_fix("raise_cap", "raise the per-process cap",
                          "torch.cuda.set_per_process_memory_fraction(...) limits this process below the GPU",
                          r.total_bytes - r.allowed_bytes, "message"))
    if ru:
        if r.form in ("1.0-1.3", "1.4-2.0"):
            conf = "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128"
            basis_note = " (PyTorch >= 2.1: expandable_segments:True)"
        else:
            conf, basis_note = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", ""
        frag = _fix("alloc_conf", "let the allocator reuse fragmented memory",
                    f"set {conf} in the job's environment{basis_note}; also keep tensor shapes steady "
                    "(pad or bucket variable lengths)", ru, "message")
        if ex.cause == "fragmentation":
            fixes.insert(0, frag)
        elif ex.cause not in ("request_too_large",) and r.shortfall_bytes and ru >= r.shortfall_bytes:
            fixes.append(frag)
    others = [h for h in ex.holders if not h.is_job and h.bytes]
    if others and ex.cause not in ("request_too_large", "memory_cap"):
        for h in sorted(others, key=lambda h: -(h.bytes or 0))[:3]:
            what = f"{h.command}; " if h.command else ""
            if me is not None and h.user == me:
                fixes.append(_fix(f"free_pid_{h.pid}", f"free your process {h.pid}",
                                  f"{what}it is yours: stop it, or vram kill {h.pid}", h.bytes, h.source))
            else:
                owner = h.user or "the owner"
                fixes.append(_fix(f"free_pid_{h.pid}", f"ask {owner} to free pid {h.pid}",
                                  f"{what}or run where there is room: vram pick", h.bytes, h.source))
    if snap is not None and r.requested_bytes and ex.cause not in ("request_too_large",):
        need = r.requested_bytes + (ex.job_bytes or r.reserved_bytes or 0)
        # The GPUs `vram pick --min-free NEED` would choose, in the order it would choose them: room
        # enough and not busy, emptiest first (not merely in index order, which names busy GPUs).
        from ..cuda_env import devices_of
        from ..select import Policy, ranked, units_of

        units = [u for u in units_of(snap, devices_of(snap)) if not u.dev.is_mig and u.dev.index != ex.live_gpu]
        roomy = ranked(Policy(count=1, min_free=need), units)
        if roomy:
            names = ", ".join(f"GPU {u.dev.index} ({format_size(u.memory_free)} free, {u.utilization}% busy)"
                              if u.utilization is not None else f"GPU {u.dev.index} ({format_size(u.memory_free)} free)"
                              for u in roomy[:4])
            fixes.append(_fix("other_gpu", "run on a GPU with room",
                              f"now: {names}; e.g. CUDA_VISIBLE_DEVICES={roomy[0].dev.index} (or vram pick)"))
    if ex.cause == "library_workspace":
        fixes.append(_fix("workspace", "leave headroom for library workspaces",
                          "torch.backends.cudnn.benchmark = False (smaller workspaces); "
                          "CUBLAS_WORKSPACE_CONFIG=:4096:8; see the GPU's other holders: vram status"))
    if ex.cause in ("device_full", "free_but_failed"):
        fixes.append(_fix("check_gpu", "check what holds the GPU", "vram status; a GPU full before the job "
                          "starts fails at the first CUDA call"))
    if r.kind == "mps":
        fixes.append(_fix("mps_watermark", "MPS memory limit", "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 lifts the "
                          "limit (may make the system unstable); better: a smaller batch"))
    fixes += _model_fixes(ex)
    return _rank(ex, fixes, savings, context)


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
        if f.saves_bytes is not None and short is not None:
            f.enough = f.saves_bytes >= short
    # The fix for the main cause leads; then fixes known to cover the shortfall, biggest first.
    lead = next((f for f in fixes if f.id.startswith(_LEAD[ex.cause])), None)
    if ex.cause == "host_ram" and fixes and fixes[0].id == "check_shape":
        lead = fixes[0]
    rest = sorted((f for f in fixes if f is not lead),
                  key=lambda f: (f.enough is not True, f.saves_bytes is None, -(f.saves_bytes or 0)))
    return ([lead] if lead else []) + rest


_LEAD = {"request_too_large": "split_op", "memory_cap": "raise_cap", "fragmentation": "alloc_conf",
         "other_processes": "free_pid_", "own_usage": "halve_batch", "host_ram": "halve_batch",
         "library_workspace": "workspace", "device_full": "check_gpu", "free_but_failed": "check_gpu"}
