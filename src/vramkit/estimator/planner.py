"""The fit planner: does a setup fit a GPU, the largest batch that does, the changes that make
it fit (cheapest first, each with the memory it needs), and the GPUs that fit it unchanged."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..i18n import _, join_words, ngettext
from . import catalog
from .analytic import Estimate, Setup, estimate
from .specs import EstimateError, ModelSpec, resolve, spec_of
from .stack import changed, remedies


@dataclass
class Change:
    what: str
    total_bytes: int
    fits: bool
    setup: dict[str, Any]  # the options that differ


@dataclass
class Plan:
    model: str
    gpu: str
    capacity_bytes: int
    estimate: Estimate
    fits: bool
    max_batch: int  # 0 when not even batch 1 fits
    changes: list[Change] = field(default_factory=list)
    gpus_that_fit: list[tuple[str, int]] = field(default_factory=list)  # (name, memory)

    def __str__(self) -> str:
        """A few lines: the verdict, the need, the largest batch and the cheapest change that fits."""
        from ..units import format_size

        need = format_size(self.estimate.total_bytes)
        where = dict(model=self.model, gpu=self.gpu, capacity=format_size(self.capacity_bytes), need=need)
        lines = [_("{model} on {gpu} ({capacity}): fits, needs ~{need} as nvidia-smi would show it (estimate)")
                 .format(**where) if self.fits else
                 _("{model} on {gpu} ({capacity}): does not fit, needs ~{need} as nvidia-smi would show it "
                   "(estimate)").format(**where),
                 f"  {self.estimate.setup.describe(self.estimate.seq, self.estimate.family)}",
                 "  " + (_("largest batch that fits: {batch}").format(batch=self.max_batch) if self.max_batch
                         else _("largest batch that fits: none, not even 1"))]
        fitting = [c for c in self.changes if c.fits]
        if fitting:
            lines.append("  " + _("cheapest change that fits: {change} ({size})").format(
                change=fitting[0].what, size=format_size(fitting[0].total_bytes)))
        elif self.changes:  # nothing fits alone: the one that comes closest
            closest = min(self.changes, key=lambda c: c.total_bytes)
            lines.append("  " + _("no change fits alone; closest: {change} ({size})").format(
                change=closest.what, size=format_size(closest.total_bytes)))
        if not self.fits and self.gpus_that_fit:
            names = join_words([f"{n} ({format_size(m)})" for n, m in self.gpus_that_fit[:3]])
            lines.append("  " + _("GPUs that fit it unchanged: {gpus}").format(gpus=names))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "gpu": self.gpu, "capacity_bytes": self.capacity_bytes, "fits": self.fits,
                "total_bytes": self.estimate.total_bytes, "max_batch": self.max_batch,
                "changes": [c.__dict__ for c in self.changes],
                "gpus_that_fit": [{"name": n, "memory_bytes": m} for n, m in self.gpus_that_fit]}


def gpu_memory(name: str) -> tuple[str, int]:
    """A catalog GPU name -> (canonical name, memory bytes); unknown names get a did-you-mean."""
    key = name.strip().lower().removeprefix("nvidia ").replace(" ", "-")
    key = catalog.GPU_ALIASES.get(key, key)
    if key in catalog.GPUS:
        return key, catalog.GPUS[key][0]
    close = difflib.get_close_matches(key, list(catalog.GPUS) + list(catalog.GPU_ALIASES), n=3, cutoff=0.5)
    if close:
        raise EstimateError(_("unknown GPU {name!r}; did you mean {close}?").format(name=name, close=join_words(close)))
    raise EstimateError(_("unknown GPU {name!r} (known: {known})").format(name=name, known=join_words(catalog.GPUS)))


def _total(spec: ModelSpec, setup: Setup) -> int:
    return estimate(spec, setup).total_bytes


def largest_batch(spec: ModelSpec, setup: Setup, capacity: int, limit: int = 65536) -> int:
    """The largest micro-batch whose estimate fits `capacity` (0 if none): memory grows with the batch."""
    if _total(spec, replace(setup, batch=1)) > capacity:
        return 0
    lo, hi = 1, 2
    while hi <= limit and _total(spec, replace(setup, batch=hi)) <= capacity:
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _total(spec, replace(setup, batch=mid)) <= capacity:
            lo = mid
        else:
            hi = mid
    return lo


def _stack_changes(setup: Setup, consider: Callable[..., None], last_fits: Callable[[], bool]) -> None:
    """Stack the cheap changes one on another until the stack fits; a step that changes nothing is skipped.
    Sharding comes last and undoes the planner's own QLoRA and 8-bit AdamW (the user's own are kept: a 4-bit
    base shards under FSDP and ZeRO-3); a setup already under FSDP gets more GPUs, not DeepSpeed."""
    rank = setup.lora or 16
    qlora = {} if setup.quant == "4bit" else {"lora": rank, "quant": "4bit", "optimizer": setup.optimizer}
    own = {"lora": setup.lora, "quant": setup.quant, "optimizer": setup.optimizer}
    if setup.fsdp:
        shard = (_("FSDP on {gpus} GPUs").format(gpus=8), {"gpus": 8, **own} if setup.gpus < 8 else {})
    else:  # DeepSpeed keeps its own optimizer states, not bitsandbytes' paged ones
        optimizer = "adamw" if setup.optimizer == "paged-adamw" else setup.optimizer
        shard = (_("ZeRO-3 on {gpus} GPUs").format(gpus=8), {"zero": 3, "gpus": 8 * setup.tp, **own,
                                                             "optimizer": optimizer, "offload_params": False})
    steps: tuple[tuple[str, dict[str, Any]], ...] = (
        (_("flash attention"), {"attention": "flash"}),
        (_("checkpointing"), {"checkpointing": True}),
        ("bf16", {"precision": "bf16"} if setup.precision == "fp32" else {}),
        (_("8-bit AdamW"), {"optimizer": "adamw-8bit"} if not setup.lora else {}),
        (f"QLoRA r={rank}", qlora),
        shard)
    stacked: dict[str, Any] = {}
    labels: list[str] = []
    reached = setup
    for label, diff in steps:
        trial = {**stacked, **diff}
        if not diff or replace(setup, **trial) == reached:  # already so: the same setup under a longer name
            continue
        # QLoRA's adapters keep the user's optimizer: an 8-bit AdamW stacked before it is undone
        undoes_optimizer = diff.get("optimizer", stacked.get("optimizer")) != stacked.get("optimizer")
        stacked, reached = trial, replace(setup, **trial)
        if label == shard[0]:  # the ZeRO / FSDP path starts again from the user's own fine-tuning
            labels = [lb for lb in labels if lb not in (f"QLoRA r={rank}", _("8-bit AdamW"))]
        elif undoes_optimizer:
            labels = [lb for lb in labels if lb != _("8-bit AdamW")]
        labels.append(label)
        consider(" + ".join(labels), **stacked)  # a sum: the same in every language
        if last_fits():
            break


def _behaviour_remedies(setup: Setup, spec: ModelSpec, consider: Callable[..., None]) -> None:
    """A newer library or another loop habit, for each behaviour in effect that costs memory (stack.BEHAVIOURS'
    remedies: generate() in transformers 4.54 on keeps one cache a step, the last position's logits and the cache's
    own k/v copies); each matters to some setups only, hence must_help."""
    for remedy, diff in remedies(setup, spec.family).items():
        consider(_(remedy), must_help=True, **diff)  # marked where stack.BEHAVIOURS names it


def plan(model: object, gpu: str | int = "a100-80gb", setup: Setup | None = None,
         gpu_label: str | None = None, **options: Any) -> Plan:
    """Plan a setup on a GPU: `gpu` is a catalog name or a capacity in bytes (e.g. free memory).

    >>> p = plan("bert-large-uncased", "rtx-4090", batch=32, seq=512)
    >>> p.fits, p.max_batch, [(c.what, c.total_bytes) for c in p.changes if c.fits]
    """
    spec = spec_of(model)
    setup = replace(setup or Setup(), **options)
    if isinstance(gpu, int):
        if isinstance(gpu, bool) or gpu <= 0:
            raise EstimateError(_("GPU capacity must be a positive number of bytes, not {value!r}").format(value=gpu))
        gpu_name, capacity = gpu_label or _("the GPU"), gpu
    else:
        gpu_name, capacity = gpu_memory(gpu)
    base = estimate(spec, setup)
    fits = base.total_bytes <= capacity
    max_batch = largest_batch(spec, setup, capacity) if not spec.bare else (1 if fits else 0)
    changes: list[Change] = []

    considered: list[tuple[ModelSpec, Setup]] = [(spec, setup)]  # what each listed change leads to

    def consider(what: str, must_help: bool = False, **diff: Any) -> None:
        """List a change unless the estimator refuses it, it leads where the setup or an earlier change does, or
        (must_help) it needs no less than the setup: a shorter generation whose peak is the prefill."""
        change_spec = spec_for.get(what, spec)
        try:
            new = changed(change_spec, setup, **diff)
            if (change_spec, new) in considered:  # e.g. stacked "flash attention" after the single flash change
                return
            total = _total(change_spec, new)
        except EstimateError:
            return
        if must_help and total >= base.total_bytes:
            return
        considered.append((change_spec, new))
        differs = {k: v for k, v in diff.items() if getattr(setup, k) != v}
        changes.append(Change(what, total, total <= capacity, differs))

    spec_for: dict[str, ModelSpec] = {}
    if not fits and setup.mode == "train" and not spec.bare:
        # with accumulation the gradients are held during later forwards: search again with it on
        micro = largest_batch(spec, replace(setup, grad_accum=max(2, setup.grad_accum)), capacity)
        if 0 < micro < setup.batch:
            # The same split vramkit.torch.accumulation_plan gives: an exact divisor of the batch
            # when one fits well, so "same effective batch" is true (32 -> 8 x 4, not 10 x 4).
            from ..torch.batch import accumulation_plan

            split = accumulation_plan(setup.batch, micro)
            accum = setup.grad_accum * split.steps
            consider(_("micro-batch {micro} × grad-accum {steps} (same effective batch)").format(
                micro=split.micro_batch, steps=accum) if split.exact else
                _("micro-batch {micro} × grad-accum {steps} (effective batch {effective} instead of {batch})").format(
                    micro=split.micro_batch, steps=accum, effective=split.effective_batch, batch=setup.batch),
                     batch=split.micro_batch, grad_accum=accum)
        if setup.attention == "eager":
            consider(_("flash / memory-efficient attention"), attention="flash")
        if setup.precision == "fp32":
            consider(_("bf16 mixed precision"), precision="bf16")
        if not setup.checkpointing:
            consider(_("activation checkpointing"), checkpointing=True)
        if setup.optimizer in ("adamw", "adafactor") and not setup.lora:
            consider(_("8-bit AdamW"), optimizer="adamw-8bit")
        _behaviour_remedies(setup, spec, consider)
        if not spec.patches:
            seq = base.seq // 2
            if seq >= 16:
                consider(_("shorter sequences ({seq})").format(seq=seq), seq=seq)
        if not setup.lora:
            consider(_("LoRA r={rank} (frozen base)").format(rank=16), lora=16)
            consider(_("QLoRA: LoRA r={rank} on a 4-bit base").format(rank=16), lora=16, quant="4bit")
        smaller = catalog.SMALLER.get(spec.name)
        if smaller:
            smaller_what = _("smaller model: {model}").format(model=smaller)
            spec_for[smaller_what] = resolve(smaller)
            consider(smaller_what)
        if setup.fsdp:  # already sharding with FSDP: more GPUs, or its CPU offload
            for n in (2, 4, 8):
                if n > setup.gpus:
                    consider(_("{gpus} GPUs (FSDP)").format(gpus=n), gpus=n)
            if not setup.offload_params:
                consider(_("FSDP + CPU offload"), offload_params=True)
        elif setup.zero is None:
            for n in (2, 4, 8):
                consider(_("ZeRO-3 on {gpus} GPUs").format(gpus=n), zero=3, gpus=n * setup.tp,
                         checkpointing=setup.checkpointing)
            consider(_("ZeRO-3 + CPU offload (ZeRO-Infinity)"), zero=3, offload=True,
                     offload_params=True)
        elif not setup.offload and setup.zero >= 2:
            consider(_("CPU offload of optimizer states"), offload=True)
        for n in (2, 4, 8):
            if n > setup.gpus and setup.zero is not None:
                consider(_("{gpus} GPUs (ZeRO-{stage})").format(gpus=n, stage=setup.zero), gpus=n * setup.tp)
        if not any(c.fits for c in changes):  # no single change is enough: stack the cheap ones
            _stack_changes(setup, consider, lambda: bool(changes) and changes[-1].fits)
    elif not fits and setup.mode == "infer" and not spec.bare:
        if setup.batch > 1 and max_batch:
            consider(_("batch {batch}").format(batch=max_batch), batch=max_batch)
        if setup.attention == "eager":
            consider(_("flash / memory-efficient attention"), attention="flash")
        _behaviour_remedies(setup, spec, consider)
        if setup.new_tokens > 1:
            fewer = setup.new_tokens // 2
            consider(ngettext("{n} new token (--new-tokens {n})", "{n} new tokens (--new-tokens {n})", fewer).format(
                n=fewer), must_help=True,
                     new_tokens=fewer)
        if not spec.patches and base.seq // 2 >= 16:  # the prompt: what generation starts from
            consider(_("shorter prompt: {tokens} tokens (--seq {tokens})").format(tokens=base.seq // 2), must_help=True,
                     seq=base.seq // 2)
        for q in ("8bit", "4bit"):
            if setup.quant != q:
                consider(_("{quant} weights").format(quant=q), quant=q)
        for n in (2, 4, 8):
            if spec.heads % n == 0:
                consider(_("tensor parallel over {gpus} GPUs").format(gpus=n), gpus=n, tp=n)
        for n in (2, 4, 8):
            if n > setup.gpus and setup.tp == 1:
                consider(_("layers split over {gpus} GPUs (device_map)").format(gpus=n), gpus=n)
    elif not fits:  # a bare count: model states only
        consider(_("8-bit AdamW"), optimizer="adamw-8bit")
        consider(_("LoRA r={rank} (frozen base)").format(rank=16), lora=16)
        for n in (2, 4, 8):
            consider(_("ZeRO-3 on {gpus} GPUs").format(gpus=n), zero=3, gpus=n)
    gpus = sorted(((n, m) for n, (m, _a, _b) in catalog.GPUS.items() if m >= base.total_bytes), key=lambda x: x[1])
    return Plan(model=spec.name, gpu=gpu_name, capacity_bytes=capacity, estimate=base, fits=fits,
                max_batch=max_batch, changes=changes, gpus_that_fit=gpus)
