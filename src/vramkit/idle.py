"""The one idle rule, used by ps, the live view's alerts, kill --idle and doctor alike.

A process is idle on a GPU when it holds memory there and ran no kernels of its own: NVML's
per-process utilization samples say 0%, or, where the driver keeps no such samples (MIG, some
GPUs), its GPU as a whole is at 0%. A defunct process is flagged as such, not as idle.
It is idle *for T* when every sample over T said so: `IdleClock` keeps that across the
samples it is given (the collector's), keyed by process identity, so a reused pid starts over.
"""

from __future__ import annotations

from .gpu_state import Device, GpuProcess, PidKey, Snapshot

# (GpuProcess.pid_key, start ticks, GPU, MIG instance): inside a container a row of a process outside
# it (host pid N) does not share the clock of the process numbered N here.
IdleKey = tuple[PidKey, "int | None", int, "int | None"]


def busy_percent(p: GpuProcess, dev: Device) -> int | None:
    """How busy p is on dev: its own SM utilization, else its GPU's; None when neither is known."""
    return p.sm_utilization if p.sm_utilization is not None else dev.utilization


def gpu_idle(utilization: int | None) -> bool:
    """The rule for a process the driver does not list (it holds the GPU's device files open):
    it has no samples of its own, so its GPU at 0% stands in, as where the driver keeps none."""
    return utilization == 0


def idle_now(p: GpuProcess, dev: Device) -> bool:
    """The rule, on one sample. Memory N/A (None) counts as held: the driver lists the process on
    the GPU; only a listed 0 bytes is nothing held."""
    return busy_percent(p, dev) == 0 and p.memory != 0 and not p.zombie


class IdleClock:
    """Seconds each process has been idle without a break, over the snapshots it is given."""

    def __init__(self) -> None:
        self._since: dict[IdleKey, float] = {}
        self._recorded: dict[tuple[int, int | None, int], float] = {}

    def seed(self, recorded: dict[tuple[int, int | None, int], float]) -> None:
        """What history says: (pid, start ticks, GPU) -> since when (unix time) it has been idle
        there. A process first seen idle here then counts from that time, not from now."""
        self._recorded = dict(recorded)

    def update(self, snap: Snapshot, now: float | None = None) -> None:
        """Set p.idle_for on every process of snap (oldest snapshot first). `now` is when it was
        taken on a clock that does not jump (the collector passes time.monotonic()); default:
        the snapshot's own wall-clock time."""
        now = snap.time if now is None else now
        seen: dict[IdleKey, float] = {}
        for dev in snap.gpus:
            for p in dev.processes:
                # History speaks for the first sample that sees a process only: once seen here,
                # this clock knows better (a process busy since then starts over).
                # History's pids are this /proc's: none is a row's under a host pid.
                here = p.pid_here
                recorded = (self._recorded.pop((here, p.start_ticks, dev.index), None)
                            if self._recorded and here is not None else None)
                if not p.idle:
                    p.idle_for = None
                    continue
                key = (p.pid_key, p.start_ticks, dev.index, p.mig_gi)
                since = self._since.get(key)
                if since is None:
                    # The recorded wall time, moved onto this clock (the snapshot says when it was).
                    since = now if recorded is None else min(now, now - (snap.time - recorded))
                seen[key] = since
                p.idle_for = max(0.0, now - since)
        self._since = seen  # a process seen busy, or gone, starts over
