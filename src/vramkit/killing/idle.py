"""kill --idle: keep the targets that stay idle (vramkit.idle's rule, the collector's clock) for
the time asked, sampling until each has been idle that long or stopped being idle."""

from __future__ import annotations

import time

from ..collector import Collector
from ..gpu_state import Snapshot
from ..i18n import _
from ..idle import gpu_idle
from .model import Progress, Target


def select_idle(source: Collector, snap: Snapshot, targets: list[Target], seconds: float, notes: list[str],
                progress: Progress | None, known: bool = False) -> list[Target]:
    """Keep the targets idle (idle.py's rule) on every GPU they use for `seconds`, as the
    collector's idle clock has seen: sampled about every second until each target has been
    idle that long or stopped being idle. A holder NVML does not list has no row of its own:
    its GPUs at 0% stand in for it (the rule where the driver keeps no per-process samples).
    `known`: the clock was seeded from history that watched the whole window, so what it says
    now is the answer (no watching), except for unlisted holders, which history does not see."""
    unknown = sorted({g.index for g in snap.gpus if g.utilization is None
                      and any(g.index in t.all_gpus for t in targets)})
    if unknown:
        notes.append(_("GPU {gpus}: utilization is N/A, so --idle cannot judge the processes there "
                       "(not selected)").format(gpus=",".join(map(str, unknown))))
    first_idle: dict[int, float] = {}  # pid -> monotonic time of the first idle sample (holder GPUs)

    def idle_for(t: Target, now: Snapshot) -> float | None:
        """How long t has been idle on every GPU it uses; None when it is not idle now."""
        rows = {p.gpu: p for p in now.processes if p.pid_here == t.pid and p.key == (t.pid, t.start_ticks)}
        util = {g.index: g.utilization for g in now.gpus}
        if not t.all_gpus or t.memory == 0:
            return None
        spans = []
        for g in t.all_gpus:
            row = rows.get(g)
            if row is not None:
                if row.idle_for is None:
                    return None
                spans.append(row.idle_for)
            elif g in t.gpus or not gpu_idle(util.get(g)):
                return None  # no longer holds memory there, or its GPU is busy
        if len(spans) < len(t.all_gpus):  # a holder GPU: idle since the first sample that saw it so
            clock = time.monotonic()
            spans.append(clock - first_idle.setdefault(t.pid, clock))
        return min(spans)

    # Every idle target is judged again at every sample, those already idle long enough too: one
    # that starts working while the others are still watched is dropped.
    spans = {t.pid: idle_for(t, snap) for t in targets}
    idle = {t.pid: t for t in targets if spans[t.pid] is not None}
    explicit_busy = [t for t in targets if t.explicit and t.pid not in idle]
    if known and all(set(t.all_gpus) <= set(t.gpus) for t in idle.values()):
        # History watched the whole window: idle that long now, or not idle that long at all.
        idle = {pid: t for pid, t in idle.items() if (spans[pid] or 0) >= seconds}
        return _chosen(targets, idle, [t for t in targets if t.explicit and t.pid not in idle], seconds, notes)
    interval = min(1.0, max(0.1, seconds / 10))
    start = time.monotonic()
    end = start + seconds
    while any((spans[pid] or 0) < seconds for pid in idle) and time.monotonic() < end:
        time.sleep(max(0.0, min(interval, end - time.monotonic())))
        now = source.snapshot()
        for pid, t in list(idle.items()):
            spans[pid] = idle_for(t, now)
            if spans[pid] is None:
                del idle[pid]
        if progress is not None:
            progress("idle", min(seconds, time.monotonic() - start), seconds, len(idle))
    # Left: idle at every sample, for `seconds` by the clock, or for the whole wait.
    return _chosen(targets, idle, explicit_busy, seconds, notes)


def _chosen(targets: list[Target], idle: dict[int, Target], not_idle: list[Target], seconds: float,
            notes: list[str]) -> list[Target]:
    for t in not_idle:
        notes.append(_("pid {pid} was not idle for {seconds}s: not selected").format(pid=t.pid, seconds=f"{seconds:g}"))
    return [t for t in targets if t.pid in idle]
