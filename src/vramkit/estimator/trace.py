"""The traced estimator: run real training or inference steps on fake tensors (no GPU, no
weights, no arithmetic) and track every tensor storage as it is allocated and freed, to get
the true peak and what it is made of.

    from vramkit.estimator.trace import trace_memory
    result = trace_memory(model_factory, step_fn)   # or an nn.Module built under fake_mode()

What makes a CPU trace behave like a CUDA run:
- sizes are rounded up to the CUDA caching allocator's 512-byte blocks;
- F.dropout keeps a 1-byte mask (CUDA's fused dropout) instead of the CPU's float mask;
- optimizers are asked for the foreach implementation CUDA picks by default;
- under mixed precision the reference models run norms and softmax in fp32, as CUDA autocast
  does (CPU autocast would keep them in 16-bit).
What it cannot see: memory inside kernels (cuBLAS/cuDNN workspaces), fragmentation of the
caching allocator, and the CUDA context; those come from the analytic estimate.
"""
# nn.Module and TorchFunctionMode are Any here (torch is not analysed), so subclassing them is allowed:
# mypy: allow-subclassing-any

from __future__ import annotations

import bisect
import contextlib
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import RequestError, VramkitError
from ..i18n import _
from ..torch._common import format_bytes
from ..torch._tensors import TensorTracker, round_block  # round_block: re-exported (__all__)
from .specs import EstimateError, ModelSpec, spec_of
from .stack import untraced

if TYPE_CHECKING:
    from ..doctor.snapshot import Timeline
    from .analytic import Setup

class TraceUnavailable(VramkitError, RuntimeError):
    """PyTorch is not installed (the optional torch extra)."""


def _torch() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Failed to initialize NumPy"
            import torch
    except ImportError:
        from ..install_hint import install_hint

        raise TraceUnavailable(_("needs PyTorch: {hint}").format(hint=install_hint("torch"))) from None
    return torch


@dataclass
class TraceResult:
    peak_bytes: int  # most allocated over all steps, 512-byte rounded
    steady_bytes: int  # the peak of the last step
    step_peaks: list[int]
    peak_step: int
    peak_phase: str
    breakdown: dict[str, int]  # at the peak: parameters, gradients, optimizer state, ...
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    # every storage the steps made, for the timeline: (bytes, born, died or None, category), born and
    # died the tracker's sequence numbers (each allocation and free is one); `events` the last of them
    storages: list[tuple[int, int, int | None, str]] = field(default_factory=list, repr=False)
    events: int = 0
    peak_seq: int = 0
    phases: list[tuple[int, str]] = field(default_factory=list, repr=False)  # (seq, phase begun after it)

    def __str__(self) -> str:
        """The peak, where it came, and what it is made of (largest first)."""
        steady = _("the peak") if self.steady_bytes == self.peak_bytes else format_bytes(self.steady_bytes)
        # format_bytes: B and KiB too, a small model's trace is not '0MiB'
        lines = [_("traced peak {peak} at step {step} ({phase}), steady state {steady}").format(
            peak=format_bytes(self.peak_bytes), step=self.peak_step, phase=self.peak_phase, steady=steady)]
        width = max((len(k) for k in self.breakdown), default=0)
        lines += [f"  {what:<{width}}  {format_bytes(n):>10}"
                  for what, n in sorted(self.breakdown.items(), key=lambda kv: -kv[1])]
        lines += ["  " + _("note: {note}").format(note=note) for note in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"peak_bytes": self.peak_bytes, "steady_bytes": self.steady_bytes, "step_peaks": self.step_peaks,
                "peak_step": self.peak_step, "peak_phase": self.peak_phase, "breakdown": self.breakdown,
                "seconds": round(self.seconds, 3), "notes": self.notes}


class _Tracker:
    """trace's policy on the one tensor tracker: every storage kept with its phase (the tag) and its
    category (the label), to rebuild what was live at the peak."""

    def __init__(self) -> None:
        to_copy = _torch().ops.aten._to_copy.default

        def label(func: Any, args: tuple[Any, ...]) -> str | None:
            if func is to_copy and args:  # a 16-bit copy of a parameter made by autocast
                source = self.tracker.storage_of(args[0])
                if source is not None and source.label == "parameters":
                    return "autocast weight copies"
            return None

        self.tracker = TensorTracker(keep=True, label=label)
        self.tracker.tag = "setup"
        self.phases: list[tuple[int, str]] = []

    def set_phase(self, phase: str) -> None:
        if phase != self.tracker.tag:
            self.phases.append((self.tracker.seq, phase))
        self.tracker.tag = phase

    def mark(self, tensor: Any, category: str) -> None:
        record = self.tracker.storage_of(tensor)
        if record is not None:
            record.label = category

    def live_at_peak(self) -> dict[str, int]:
        tracker = self.tracker
        out: dict[str, int] = {}
        for record in tracker.history or ():
            if record.born <= tracker.peak_seq and (record.died is None or record.died > tracker.peak_seq):
                cat = _category(record)
                out[cat] = out.get(cat, 0) + record.nbytes
        return out

    def lifetimes(self) -> list[tuple[int, int, int | None, str]]:
        return [(r.nbytes, r.born, r.died, _category(r)) for r in self.tracker.history or ()]


def _category(record: Any) -> str:
    """A storage's category: its label, else what it was made in (the forward's outputs, kept or not)."""
    return str(record.label or ("activations" if record.tag == "forward" else "temporaries"))


def _cuda_like() -> Any:
    """A TorchFunctionMode: F.dropout as CUDA runs it, native_dropout with a 1-byte mask."""
    torch = _torch()
    from torch.overrides import TorchFunctionMode

    F = torch.nn.functional

    class CudaLike(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            if func is F.dropout:
                x = args[0]
                p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
                training = args[2] if len(args) > 2 else kwargs.get("training", True)
                inplace = args[3] if len(args) > 3 else kwargs.get("inplace", False)
                if training and 0 < p < 1 and not inplace:
                    return torch.native_dropout(x, p, True)[0]
            return func(*args, **kwargs)

    return CudaLike()


def trace_memory(model: Any, step_fn: Callable[[int], object], steps: int = 2, optimizer: Any = None,
                 fake_mode: Any = None) -> TraceResult:
    """Run `step_fn(step_index)` `steps` times and track every tensor storage.

    `model`: an nn.Module whose parameters count as "parameters" (build it under `fake_mode`,
    e.g. `with trace.fake_mode() as fm: model = MyNet()`, so no memory or arithmetic is used;
    real CPU tensors work too, just slower). `optimizer`: its state counts as "optimizer state".
    Steady state = the peak of the last step.
    """
    _torch()
    from torch._subclasses.fake_tensor import FakeTensor

    fake_params = any(isinstance(p, FakeTensor) for p in model.parameters())
    if fake_mode is None and fake_params:
        raise RequestError("the model was built under fake_mode(): pass that mode too, "
                           "trace_memory(model, step_fn, fake_mode=fm), so the step's tensors are fake as well",
                           param="fake_mode")
    policy = _Tracker()
    tracker = policy.tracker
    for p in model.parameters():
        tracker.adopt(p, "parameters")
    for buf in model.buffers():
        tracker.adopt(buf, "buffers")

    def pre_hook(module: Any, args: Any) -> None:
        policy.set_phase("forward")

    def post_hook(module: Any, args: Any, output: Any) -> None:
        policy.set_phase("backward/step")

    handles = [model.register_forward_pre_hook(pre_hook), model.register_forward_hook(post_hook)]
    for p in model.parameters():
        if p.requires_grad:  # a gradient is known as one when it is accumulated, not at the end
            handles.append(p.register_post_accumulate_grad_hook(lambda q: policy.mark(q.grad, "gradients")))
    step_peaks: list[int] = []
    peaks_seq: list[int] = []
    started = time.perf_counter()
    ctx: Any = fake_mode if fake_mode is not None else contextlib.nullcontext()
    try:
        with ctx, _cuda_like():
            tracker.start()  # inside the fake mode: it sees each operation before FakeTensorMode does
            try:
                _steps(policy, model, step_fn, steps, optimizer, fake_mode, step_peaks, peaks_seq)
            finally:
                tracker.stop()
    finally:
        for h in handles:
            h.remove()
    peak_step = next(i for i, c in enumerate(peaks_seq) if tracker.peak_seq <= c) + 1
    return TraceResult(peak_bytes=tracker.peak, steady_bytes=step_peaks[-1], step_peaks=step_peaks,
                       peak_step=peak_step, peak_phase=tracker.peak_tag, breakdown=policy.live_at_peak(),
                       seconds=time.perf_counter() - started, storages=policy.lifetimes(), events=tracker.seq,
                       peak_seq=tracker.peak_seq, phases=policy.phases)


def _steps(policy: _Tracker, model: Any, step_fn: Callable[[int], object], steps: int, optimizer: Any,
           fake_mode: Any, step_peaks: list[int], peaks_seq: list[int]) -> None:
    torch = _torch()
    tracker = policy.tracker
    for i in range(steps):
        tracker.reset_high()
        policy.set_phase("step start")
        try:
            step_fn(i)
        except AssertionError as e:  # FakeTensorMode's word for a real tensor in a fake computation
            if fake_mode is None or "FakeTensor" not in str(e):
                raise
            raise RequestError("a real tensor met the fake ones (a batch made before the trace, or a "
                               "model not built under fake_mode): make the batch inside step_fn and "
                               "build the model under the same fake_mode", param="step_fn") from None
        for p in model.parameters():
            if p.grad is not None:
                policy.mark(p.grad, "gradients")
        if optimizer is not None:
            for state in optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        policy.mark(value, "optimizer state")
        step_peaks.append(tracker.high)
        peaks_seq.append(tracker.seq)


def fake_mode() -> Any:
    """A FakeTensorMode: tensors with shapes and dtypes but no memory."""
    _torch()
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode()


class _Adam8bit:
    """Memory stand-in for bitsandbytes' 8-bit AdamW: two uint8 states + fp32 absmax per 256."""

    def __init__(self, params: Iterable[Any]) -> None:
        torch = _torch()
        self.torch = torch
        self.params = [p for p in params if p.requires_grad]
        self.state: dict[Any, dict[str, Any]] = {}

    def step(self) -> None:
        torch = self.torch
        for p in self.params:
            if p.grad is None:
                continue
            if p not in self.state:
                blocks = -(-p.numel() // 256)
                self.state[p] = {"m": torch.zeros_like(p, dtype=torch.uint8),
                                 "v": torch.zeros_like(p, dtype=torch.uint8),
                                 "am": torch.zeros(blocks), "av": torch.zeros(blocks)}
            p.data.add_(p.grad, alpha=-1e-3)  # in place, like the fused kernel

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


class _InBackward:
    """torchtune's optimizer_in_bwd (training.register_optim_in_bwd_hooks): one optimizer a parameter, stepped
    from the parameter's post-accumulate-grad hook, which then drops the gradient; step() and zero_grad() of
    the loop have nothing left to do."""

    def __init__(self, name: str, params: Iterable[Any], foreach: bool, fused: bool) -> None:
        self.optimizers = {p: make_optimizer(name, [p], foreach, fused) for p in params if p.requires_grad}
        self.armed = False

    def arm(self) -> None:
        """Hook the parameters, once: at the first step, after trace_memory's own hooks (which name each
        gradient as it is accumulated, before this one steps and drops it)."""
        if not self.armed:
            for p in self.optimizers:
                p.register_post_accumulate_grad_hook(self._step)
            self.armed = True

    def _step(self, param: Any) -> None:
        self.optimizers[param].step()
        self.optimizers[param].zero_grad(set_to_none=True)

    @property
    def state(self) -> dict[Any, Any]:
        return {p: s for opt in self.optimizers.values() for p, s in opt.state.items()}

    def step(self) -> None:
        pass

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass


def make_optimizer(name: str, params: Iterable[Any], foreach: bool = True, fused: bool = False) -> Any:
    """The optimizer `name` as CUDA runs it (foreach; False: one parameter at a time, as before
    PyTorch 2.0; fused: AdamW's single kernel); None for "none" (a backward pass without a step)."""
    torch = _torch()
    if name == "none":
        return None
    params = [p for p in params if p.requires_grad]
    if name == "adamw":
        if fused:
            return torch.optim.AdamW(params, lr=1e-4, fused=True)
        return torch.optim.AdamW(params, lr=1e-4, foreach=foreach)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=foreach)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=foreach)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-3, foreach=foreach)
    if name == "adamw-8bit":
        return _Adam8bit(params)
    raise EstimateError(f"unknown optimizer {name!r}")


@dataclass
class ReferenceRun:
    """The reference model and step for one spec and setup: what the traced estimator runs on fake
    tensors, and what scripts/estimate_check.py runs on a real GPU to check it."""

    spec: ModelSpec
    setup: Setup
    seq: int
    mixed: bool  # training under autocast (fp32 weights, 16-bit compute)
    pure: bool  # weights built in the 16-bit dtype (bf16-pure training, 16-bit inference)
    low: Any  # the 16-bit torch dtype

    @classmethod
    def plan(cls, model: object, setup: Setup | None = None, **options: Any) -> ReferenceRun:
        """Check that the setup can be traced; TraceUnavailable (or EstimateError) if not."""
        from dataclasses import replace

        from .analytic import Setup, _default_seq

        spec = spec_of(model)
        setup = replace(setup or Setup(), **options)
        setup.check(spec)
        spec = spec.with_head(setup.head).with_own_head(setup.own_head)
        if spec.bare:
            raise TraceUnavailable(_("a bare parameter count has no architecture to trace"))
        # the reference models are whole, trained in full, on one GPU: a frozen base with adapters, a
        # chunked loss or sharding would be traced as something else (vramkit.trace_memory traces them
        # on the real model)
        unsupported = [name for name, on in (("lora", setup.lora), ("adapter", setup.adapter),
                                             ("prefix_len", setup.prefix_len), ("ce_chunk", setup.ce_chunk),
                                             ("quant", setup.quant), ("zero", setup.zero is not None),
                                             ("fsdp", setup.fsdp), ("tp", setup.tp > 1), ("gpus", setup.gpus > 1),
                                             ("optimizer paged-adamw", setup.optimizer == "paged-adamw"),
                                             ("activation offloading", setup.offload_activations),
                                             ("a static KV cache", setup.cache_len is not None),
                                             ("torchao's low-bit AdamW",
                                              setup.optimizer in ("adamw-4bit", "adamw-fp8")),
                                             # the reference runs one prefill, as transformers 5 does it
                                             ("new_tokens (generation)", setup.new_tokens > 1)) if on]
        if unsupported:
            raise TraceUnavailable(_("tracing a setup with {options} is not supported (the analytic estimate "
                                     "models it)").format(options=", ".join(unsupported)))
        torch = _torch()  # after the checks: what cannot be traced is said with or without torch
        if setup.image_size and spec.patches:
            spec = replace(spec, image_size=setup.image_size)
        seq = spec.seq_for_image(None) if spec.patches else (setup.seq or _default_seq(spec))
        return cls(spec=spec, setup=setup, seq=seq,
                   mixed=setup.mode == "train" and setup.precision in ("fp16", "bf16"),
                   pure=setup.precision == "bf16-pure" or (setup.mode == "infer" and setup.precision != "fp32"),
                   low=torch.bfloat16 if setup.precision in ("bf16", "bf16-pure") else torch.float16)

    def build(self) -> tuple[Any, Any]:
        """(model, optimizer or None), built in the current fake mode or device context."""
        torch = _torch()
        from . import reference

        opt = reference.Options(mixed=self.mixed, flash=self.setup.attention == "flash",
                                checkpointing=self.setup.checkpointing, cache_views=self.setup.cache_views)
        default = torch.get_default_dtype()
        torch.set_default_dtype(self.low if self.pure else torch.float32)  # built in its dtype: no copies
        try:
            net = reference.build(self.spec, opt)
        finally:
            torch.set_default_dtype(default)
        net.train(self.setup.mode == "train")
        if self.setup.mode != "train":
            optimizer = None
        elif self.setup.optimizer_in_backward:
            optimizer = _InBackward(self.setup.optimizer, net.parameters(), self.setup.foreach, self.setup.fused)
        else:
            optimizer = make_optimizer(self.setup.optimizer, net.parameters(), self.setup.foreach, self.setup.fused)
        return net, optimizer

    def step(self, net: Any, optimizer: Any, device: Any = None) -> None:
        torch = _torch()
        from . import reference

        if isinstance(optimizer, _InBackward):
            optimizer.arm()
        reference.run_step(net, self.spec, self.setup, self.seq, optimizer, mixed=self.mixed, low=self.low,
                           pixel_dtype=self.low if self.pure else torch.float32, device=device)


# the tracker's categories as a PyTorch memory snapshot's (doctor/snapshot.py), so the timeline is drawn
# as `vram doctor SNAPSHOT --timeline` draws one; the rest follow the snapshot's rule: made in the forward
# and alive when it ended, an activation (kept for backward); otherwise a temporary
_SNAPSHOT_CATEGORIES = {"parameters": "parameter", "buffers": "parameter", "gradients": "gradient",
                        "optimizer state": "optimizer_state"}
_FORWARD_MADE = ("activations", "autocast weight copies")


def trace_timeline(result: TraceResult, columns: int = 600) -> Timeline:
    """The traced steps' memory over time, stacked by category, as the doctor's snapshot timeline."""
    from ..doctor.snapshot import Allocation, DeviceMemory, timeline

    ends = [seq for seq, phase in result.phases if phase != "forward"]  # where each forward (or other) ended

    def category(born: int, died: int | None, label: str) -> str:
        if label in _SNAPSHOT_CATEGORIES:
            return _SNAPSHOT_CATEGORIES[label]
        if label not in _FORWARD_MADE:
            return "temporary"
        i = bisect.bisect_left(ends, born)
        kept = i < len(ends) and (died is None or died > ends[i])  # alive when its forward ended
        return "activation" if kept else "temporary"

    # step i of a DeviceMemory is the state after trace entry i - 1: entry index = sequence number - 1
    allocations = [Allocation(addr=i, size=n, frames=(), born=born - 1, died=None if died is None else died - 1,
                              category=category(born, died, label))
                   for i, (n, born, died, label) in enumerate(result.storages)]
    d = DeviceMemory(device=0, allocations=allocations, entries=result.events, reserved_start=None,
                     times_us=[None] * (result.events + 1))
    d.peak_step = result.peak_seq
    d.peak_allocated = sum(a.size for a in d.live_at(result.peak_seq))
    return timeline(d, by="category", columns=columns)


def trace_estimate(model: object, setup: Setup | None = None, steps: int = 2,
                   **options: Any) -> TraceResult:
    """Trace the reference implementation of a spec's family with the setup's options."""
    run = ReferenceRun.plan(model, setup, **options)
    notes = [""]  # what the trace does not see: said once the workspaces are added (below)
    # the library behaviours in effect that the reference step does not reproduce: the analytic estimate
    # counts them, the trace does not (stack.BEHAVIOURS' traced column)
    notes += [_("not traced: {behaviour} ({effect}); the analytic estimate counts it").format(
        behaviour=_(row.label), effect=_(row.effect)) for row in untraced(run.setup, run.spec.family)]
    if run.setup.attention == "flash":
        notes.append(_("flash attention traced with PyTorch's CPU fused kernel (keeps q, k, v, output and logsumexp, "
                       "as the CUDA flash and memory-efficient kernels do); dropout inside it omitted"))
    fm = fake_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fm:
            net, optimizer = run.build()
        result = trace_memory(net, lambda i: run.step(net, optimizer), steps=steps, optimizer=optimizer,
                              fake_mode=fm)
    # CUDA-only and not traced, but allocated by every real run through the caching allocator (from torch 2.0 on;
    # before, cuBLAS allocated its own, which max_memory_allocated does not count)
    from .analytic import cublas_workspaces
    pooled, _own = cublas_workspaces(run.setup)
    result.peak_bytes += pooled
    result.steady_bytes += pooled
    result.step_peaks = [p + pooled for p in result.step_peaks]
    if pooled:
        result.breakdown["cuBLAS workspaces"] = pooled
    notes[0] = (_("CPU trace on fake tensors, plus PyTorch's cuBLAS workspaces (64 MiB, measured on an H200); "
                  "allocator fragmentation and the CUDA context are not seen (the analytic estimate adds them)")
                if pooled else
                _("CPU trace on fake tensors; cuBLAS allocates its workspaces outside the caching allocator before "
                  "torch 2.0; allocator fragmentation and the CUDA context are not seen (the analytic estimate adds "
                  "them)"))
    result.notes = notes
    return result


__all__ = ["ReferenceRun", "TraceResult", "TraceUnavailable", "fake_mode", "round_block", "trace_estimate",
           "trace_memory", "trace_timeline"]
