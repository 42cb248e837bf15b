"""Formatting of single values for people: N/A stays N/A."""

from __future__ import annotations

from ..model import Device, GpuProcess
from ..units import format_duration, format_size

NA = "N/A"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 process', '9 processes', '0 GPUs'."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def pct(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}%"


def temp(value: int | None) -> str:
    return NA if value is None else f"{value}°C"


def power(dev: Device) -> str:
    if dev.power_draw is None and dev.power_limit is None:
        return NA
    draw = NA if dev.power_draw is None else f"{dev.power_draw:.0f}"
    limit = NA if dev.power_limit is None else f"{dev.power_limit:.0f}"
    return f"{draw}/{limit}W"


def memory_pair(used: int | None, total: int | None) -> str:
    if used is None or total is None:
        return f"{format_size(used)}/{format_size(total)}"
    return f"{used / 1024**3:.1f}/{total / 1024**3:.1f}GiB"


def mem_fraction(dev: Device) -> float | None:
    if dev.memory_used is None or not dev.memory_total:
        return None
    return dev.memory_used / dev.memory_total


def short_gpu_name(name: str | None) -> str:
    if name is None:
        return NA
    return name.removeprefix("NVIDIA ").removeprefix("Tesla ")


def flags(proc: GpuProcess) -> list[str]:
    out = []
    if proc.zombie:
        out.append("zombie")
    if proc.orphaned:
        out.append("orphan")
    if proc.idle:
        out.append("idle")
    if proc.host_missing:
        out.append("no-host")
    if proc.container:
        out.append("container")
    if "graphics" in proc.types:
        out.append("graphics")
    return out


def elapsed(proc: GpuProcess) -> str:
    return format_duration(proc.elapsed)
