"""The host's load: CPU time counters (/proc/stat) and memory (/proc/meminfo)."""

from __future__ import annotations

from dataclasses import dataclass

from .files import read_proc_file


@dataclass
class HostLoad:
    """The host's CPU time counters and memory, from /proc/stat and /proc/meminfo. CPU % is the
    busy share of the ticks between two readings (busy_percent)."""

    cpu_busy: int  # clock ticks spent not idle (nor waiting for I/O), all CPUs
    cpu_total: int
    cpus: int
    mem_total: int | None  # bytes
    mem_available: int | None
    swap_total: int | None
    swap_free: int | None

    def busy_percent(self, before: HostLoad | None) -> float | None:
        if before is None or self.cpu_total <= before.cpu_total:
            return None
        return 100 * (self.cpu_busy - before.cpu_busy) / (self.cpu_total - before.cpu_total)


def read_host_load() -> HostLoad | None:
    """The host's load now (None: /proc/stat unreadable)."""
    stat = read_proc_file("/proc/stat", 64 * 1024)
    if not stat:
        return None
    cpus = 0
    busy = total = 0
    for line in stat.split(b"\n"):
        if line.startswith(b"cpu "):
            ticks = [int(x) for x in line.split()[1:9]]  # user nice system idle iowait irq softirq steal
            total = sum(ticks)
            busy = total - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
        elif line.startswith(b"cpu"):
            cpus += 1
    mem: dict[bytes, int] = {}
    for line in (read_proc_file("/proc/meminfo", 16 * 1024) or b"").split(b"\n"):
        key, _, rest = line.partition(b":")
        if key in (b"MemTotal", b"MemAvailable", b"SwapTotal", b"SwapFree") and rest.split():
            mem[key] = int(rest.split()[0]) * 1024  # kB
    return HostLoad(busy, total, cpus, mem.get(b"MemTotal"), mem.get(b"MemAvailable"), mem.get(b"SwapTotal"),
                    mem.get(b"SwapFree"))
