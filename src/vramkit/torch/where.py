"""where(model): on which devices and in which dtypes a model's parameters, buffers and plain tensor
attributes live.

Flags the mistakes that waste memory or crash a step: a tensor left on the CPU while the rest is
on a GPU (a plain attribute such as `self.rope_cache = torch.zeros(...)`, which .to() never moves;
a buffer or parameter re-assigned to a CPU tensor after .to(), told apart by the module's other
tensors having moved; or a module added after .to()), parameters spread over several devices by accident, and parameters
in a second floating dtype. Norm layers kept in fp32 in a 16-bit model (and a Hugging Face model's
_keep_in_fp32_modules) are intended and not flagged; nor are buffers such as rotary frequencies.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..i18n import _, ngettext
from ._common import format_bytes, require_torch

_SHOWN = 3  # names quoted in one warning
_ITEMS_PER_ATTRIBUTE = 64  # tensors looked at in one list/dict attribute


@dataclass
class Placed:
    name: str  # "encoder.rope_cache"
    kind: str  # "param", "buffer" or "attribute"
    device: str
    dtype: str
    elements: int
    nbytes: int
    module_type: str  # the class of the module that holds it
    module_path: str  # "encoder"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.kind})"


@dataclass
class WhereReport:
    groups: dict[tuple[str, str], dict[str, int]]  # (device, dtype) -> {"tensors", "elements", "bytes"}
    stray: list[tuple[str, str]]  # (name (kind), device) of tensors off the main device
    devices: list[str]
    dtypes: list[str]
    warnings: list[str] = field(default_factory=list)

    @property
    def mixed_devices(self) -> bool:
        return len(self.devices) > 1

    def __str__(self) -> str:
        lines = [f"{'DEVICE':<10} {'DTYPE':<16} {'TENSORS':>8} {'MEMORY':>9}"]
        for (device, dtype), g in sorted(self.groups.items()):
            lines.append(f"{device:<10} {dtype:<16} {g['tensors']:>8} {format_bytes(g['bytes']):>9}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _tensor_attributes(module: Any, torch: Any) -> list[tuple[str, Any]]:
    """Plain tensors a module holds as attributes (directly, or in a list, tuple or dict)."""
    found: list[tuple[str, Any]] = []
    for attr, value in vars(module).items():
        if attr.startswith("_"):  # nn.Module's own bookkeeping (_parameters, _buffers, ...)
            continue
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
            found.append((attr, value))
        elif isinstance(value, (list, tuple, dict)):
            items = list(value.items() if isinstance(value, dict) else enumerate(value))[:_ITEMS_PER_ATTRIBUTE]
            found += [(f"{attr}[{key!r}]", v) for key, v in items
                      if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter)]
    return found


def _placed(model: Any) -> list[Placed]:
    torch = require_torch()
    out: list[Placed] = []
    seen: set[int] = set()  # shared (tied) tensors count once
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        sources = (("param", module._parameters.items()), ("buffer", module._buffers.items()),
                   ("attribute", _tensor_attributes(module, torch)))
        for kind, items in sources:
            for name, t in items:
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                out.append(Placed(f"{prefix}{name}", kind, str(t.device), str(t.dtype).removeprefix("torch."),
                                  t.numel(), t.numel() * t.element_size(), type(module).__name__, path))
    return out


def _names(items: list[Placed]) -> str:
    return ", ".join(p.label for p in items[:_SHOWN]) + (" ..." if len(items) > _SHOWN else "")


def _fp32_on_purpose(p: Placed, keep_fp32: list[str]) -> bool:
    """Norm layers (LayerNorm, RMSNorm, BatchNorm, ...) and HF's _keep_in_fp32_modules."""
    parts = p.module_path.split(".")
    return "Norm" in p.module_type or any(k in parts for k in keep_fp32)


def where(model: Any, max_stray: int = 10) -> WhereReport:
    """Devices and dtypes of `model`'s parameters, buffers and plain tensor attributes (an nn.Module)."""
    placed = _placed(model)
    groups: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: {"tensors": 0, "elements": 0, "bytes": 0})
    # the model is where most of its parameters are (a large cache left behind does not move it)
    by_device: dict[str, tuple[int, int]] = defaultdict(lambda: (0, 0))  # device -> (param bytes, all bytes)
    for p in placed:
        g = groups[(p.device, p.dtype)]
        g["tensors"] += 1
        g["bytes"] += p.nbytes
        g["elements"] += p.elements
        params, total = by_device[p.device]
        by_device[p.device] = (params + (p.nbytes if p.kind == "param" else 0), total + p.nbytes)
    devices = sorted(by_device, key=lambda d: by_device[d], reverse=True)
    dtypes = sorted({dtype for __, dtype in groups})
    report = WhereReport(groups=dict(groups), stray=[], devices=devices, dtypes=dtypes)
    if len(devices) > 1:
        main = devices[0]
        stray = [p for p in placed if p.device != main]
        report.stray = [(p.label, p.device) for p in stray][:max_stray]
        if main != "cpu":
            on_cpu = [p for p in stray if p.device == "cpu"]
            attributes = [p for p in on_cpu if p.kind == "attribute"]
            registered = [p for p in on_cpu if p.kind != "attribute"]
            if attributes:
                report.warnings.append(ngettext(
                    "{n} plain tensor attribute on the CPU while the model is on {device}: {names}; .to() does not "
                    "move plain attributes: register it with self.register_buffer(name, tensor, persistent=False) "
                    "(or nn.Parameter if trained)",
                    "{n} plain tensor attributes on the CPU while the model is on {device}: {names}; .to() does not "
                    "move plain attributes: register them with self.register_buffer(name, tensor, persistent=False) "
                    "(or nn.Parameter if trained)", len(attributes)).format(
                        n=len(attributes), device=main, names=_names(attributes)))
            # a module whose other parameters/buffers moved had this one replaced after .to(); a
            # module with none on the main device was added after it (or all of its tensors replaced)
            moved = {p.module_path for p in placed if p.device == main and p.kind != "attribute"}
            replaced = [p for p in registered if p.module_path in moved]
            left = [p for p in registered if p.module_path not in moved]
            if replaced:
                report.warnings.append(ngettext(
                    "{n} parameter or buffer on the CPU in a module otherwise on {device}: {names}; re-assigned to a "
                    "CPU tensor after .to() (`self.name = torch.zeros(...)` replaces the moved tensor): create the "
                    "new one on the module's device (torch.zeros(..., device=self.weight.device)) or fill the old "
                    "one in place (self.name.copy_(...), .zero_())",
                    "{n} parameters/buffers on the CPU in modules otherwise on {device}: {names}; re-assigned to a "
                    "CPU tensor after .to() (`self.name = torch.zeros(...)` replaces the moved tensor): create the "
                    "new one on the module's device (torch.zeros(..., device=self.weight.device)) or fill the old "
                    "one in place (self.name.copy_(...), .zero_())", len(replaced)).format(
                        n=len(replaced), device=main, names=_names(replaced)))
            if left:
                report.warnings.append(ngettext(
                    "{n} parameter or buffer still on the CPU while the model is on {device}: {names}; in a module "
                    "with nothing on {device}: probably a module added after .to() (or all its tensors assigned "
                    "after it): call model.to(device) again after adding it",
                    "{n} parameters/buffers still on the CPU while the model is on {device}: {names}; in modules "
                    "with nothing on {device}: probably a module added after .to() (or all its tensors assigned "
                    "after it): call model.to(device) again after adding it", len(left)).format(
                        n=len(left), device=main, names=_names(left)))
        others = [d for d in devices[1:] if d != "cpu"]
        if others:
            report.warnings.append(_("parameters on several devices: {devices} (intended model parallelism, or a "
                                     "module moved by mistake?)").format(devices=", ".join(devices)))
    report.warnings += _dtype_warnings(model, placed)
    return report


def _dtype_warnings(model: Any, placed: list[Placed]) -> list[str]:
    keep_fp32 = list(getattr(model, "_keep_in_fp32_modules", None) or [])
    params = [p for p in placed if p.kind == "param" and p.dtype.startswith(("float", "bfloat"))
              and not _fp32_on_purpose(p, keep_fp32)]
    by_dtype: dict[str, int] = defaultdict(int)
    for p in params:
        by_dtype[p.dtype] += p.elements
    if len(by_dtype) < 2:
        return []
    main = max(by_dtype, key=lambda d: by_dtype[d])  # the model's dtype: most of its parameters
    odd = [p for p in params if p.dtype != main]
    if not odd:
        return []
    kinds = sorted({p.dtype for p in odd})
    return [ngettext("mixed floating dtypes: {n} parameter in {dtypes} in a {main} model: {names} (norm layers kept "
                     "in float32 on purpose are not counted)",
                     "mixed floating dtypes: {n} parameters in {dtypes} in a {main} model: {names} (norm layers kept "
                     "in float32 on purpose are not counted)", len(odd)).format(
                         n=len(odd), dtypes=", ".join(kinds), main=main, names=_names(odd))]
