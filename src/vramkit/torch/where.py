"""where(model): on which devices and in which dtypes a model's parameters and buffers live.

Flags the mistakes that waste memory or crash a step: a stray tensor left on the CPU while the
rest is on a GPU (often a buffer created in __init__ without register_buffer, or a module added
after .to()), parameters spread over several devices by accident, and mixed dtypes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..units import format_size
from ._common import require_torch


@dataclass
class WhereReport:
    groups: dict[tuple[str, str], dict[str, int]]  # (device, dtype) -> {"tensors", "elements", "bytes"}
    stray: list[tuple[str, str]]  # (name, device) of tensors off the main device
    devices: list[str]
    dtypes: list[str]
    warnings: list[str] = field(default_factory=list)

    @property
    def mixed_devices(self) -> bool:
        return len(self.devices) > 1

    def __str__(self) -> str:
        lines = [f"{'DEVICE':<10} {'DTYPE':<16} {'TENSORS':>8} {'MEMORY':>9}"]
        for (device, dtype), g in sorted(self.groups.items()):
            lines.append(f"{device:<10} {dtype:<16} {g['tensors']:>8} {format_size(g['bytes']):>9}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def where(model: Any, max_stray: int = 10) -> WhereReport:
    """Devices and dtypes of `model`'s parameters and buffers (an nn.Module)."""
    require_torch()
    groups: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: {"tensors": 0, "elements": 0, "bytes": 0})
    placed: list[tuple[str, str, int]] = []
    for kind, items in (("param", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, t in items:
            device, dtype = str(t.device), str(t.dtype).removeprefix("torch.")
            g = groups[(device, dtype)]
            g["tensors"] += 1
            g["elements"] += t.numel()
            g["bytes"] += t.numel() * t.element_size()
            placed.append((f"{name} ({kind})", device, t.numel() * t.element_size()))
    by_device: dict[str, int] = defaultdict(int)
    for _, device, nbytes in placed:
        by_device[device] += nbytes
    devices = sorted(by_device, key=lambda d: -by_device[d])
    dtypes = sorted({dtype for _, dtype in groups})
    report = WhereReport(groups=dict(groups), stray=[], devices=devices, dtypes=dtypes)
    if len(devices) > 1:
        main = devices[0]
        report.stray = [(name, device) for name, device, _ in placed if device != main][:max_stray]
        on_cpu = [n for n, d in report.stray if d == "cpu"]
        if on_cpu and main != "cpu":
            report.warnings.append(f"{len(on_cpu)} tensor(s) still on the CPU while the model is on {main}: "
                                   f"{', '.join(on_cpu[:3])}" + (" ..." if len(on_cpu) > 3 else "")
                                   + " (register_buffer / nn.Parameter so .to() moves them)")
        others = [d for d in devices[1:] if d != "cpu"]
        if others:
            report.warnings.append(f"parameters on several devices: {', '.join(devices)} "
                                   "(intended model parallelism, or a module moved by mistake?)")
    float_types = [d for d in dtypes if d.startswith(("float", "bfloat"))]
    if len(float_types) > 1:
        report.warnings.append(f"mixed floating dtypes: {', '.join(float_types)}")
    return report
