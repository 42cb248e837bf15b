"""Alerts from a short history of snapshots: what a person watching the GPUs should notice.

`History` keeps the last minutes of each GPU (memory, utilization) and of each process's GPU
memory; `evaluate(history)` turns it into `Alert`s:

- a GPU nearly full (little memory left now);
- memory growing toward full, with the estimated time until full from the recent trend
  (a least-squares slope over the last `trend_window` seconds; always labelled an estimate);
- a process holding memory while idle (idle.py's rule: no kernels of its own) for at least
  `idle_after` seconds *as observed*: `GpuProcess.idle_for`, from the collector's samples;
- a defunct (zombie) process that the driver still lists as holding memory;
- a lost GPU.

No printing, no Textual: the live view renders these, and tests drive them with plain snapshots.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .gpu_state import Device, GpuProcess, PidKey, Snapshot
from .i18n import N_, _
from .units import format_duration, format_size

ProcKey = tuple[PidKey, int, "int | None"]  # (GpuProcess.pid_key, GPU index, MIG instance)


@dataclass(slots=True)  # one per GPU per refresh, kept for the trend window: ~100 bytes each, not ~220
class GpuSample:
    time: float
    memory_used: int | None
    memory_total: int | None
    memory_free: int | None
    utilization: int | None
    lost: bool = False


Point = tuple[float, "int | None"]  # (time, bytes or None)
POINTS_KEPT = 512  # change points kept per process: the newest


class ProcessTrace:
    """A process's GPU memory over time, stored as change points (most holders are flat). A flat
    holder keeps its one point in place, as two fields (not a tuple); a deque (~600 bytes, even
    empty) is made with the second point, so 1,600 flat processes do not cost 1 MiB."""

    __slots__ = ("_t", "_memory", "_more", "last_seen", "start_ticks")

    def __init__(self, start_ticks: int | None = None) -> None:
        self._t: float | None = None  # the first point's time (None: no point yet) and memory
        self._memory: int | None = None
        self._more: deque[Point] | None = None  # from the second point on: the points, the newest POINTS_KEPT
        self.last_seen = 0.0
        self.start_ticks = start_ticks  # tells a reused pid from the process we traced

    @property
    def points(self) -> list[Point]:
        if self._more is not None:
            return list(self._more)
        return [] if self._t is None else [(self._t, self._memory)]

    def add(self, t: float, memory: int | None) -> None:
        more = self._more
        if more is not None:
            if more[-1][1] != memory:
                more.append((t, memory))
        elif self._t is None:
            self._t, self._memory = t, memory
        elif self._memory != memory:
            self._more = deque(((self._t, self._memory), (t, memory)), maxlen=POINTS_KEPT)
        self.last_seen = t

    def series(self) -> list[Point]:
        """Change points plus the last-seen time, so a flat line reaches now."""
        out = self.points
        if out and out[-1][0] < self.last_seen:
            out.append((self.last_seen, out[-1][1]))
        return out


class History:
    """The recent past of one machine, fed one snapshot at a time (oldest first)."""

    def __init__(self, keep_seconds: float = 900.0, max_samples: int = 3600):
        self.keep_seconds = keep_seconds
        self.gpus: dict[int, deque[GpuSample]] = {}
        self.procs: dict[ProcKey, ProcessTrace] = {}
        self.latest: Snapshot | None = None
        self._max_samples = max_samples

    def add(self, snap: Snapshot) -> None:
        t = snap.time
        for dev in snap.gpus:
            samples = self.gpus.setdefault(dev.index, deque(maxlen=self._max_samples))
            samples.append(GpuSample(t, dev.memory_used, dev.memory_total, dev.memory_free,
                                     dev.utilization, dev.lost))
            while samples and samples[0].time < t - self.keep_seconds:
                samples.popleft()
            for p in dev.processes:
                key = (p.pid_key, dev.index, p.mig_gi)  # an outside host pid N is not pid N here
                trace = self.procs.get(key)
                if trace is None or trace.start_ticks != p.start_ticks:
                    trace = self.procs[key] = ProcessTrace(start_ticks=p.start_ticks)  # new or reused pid
                trace.add(t, p.memory)
        # Forget processes gone for longer than the window: 500 short jobs must not pile up.
        for key in [k for k, tr in self.procs.items() if tr.last_seen < t - self.keep_seconds]:
            del self.procs[key]
        self.latest = snap

    def gpu(self, index: int) -> list[GpuSample]:
        return list(self.gpus.get(index, ()))

    def process(self, key: PidKey, gpu: int, mig_gi: int | None = None) -> list[tuple[float, int | None]]:
        """The memory series of the process `key` (its GpuProcess.pid_key) on one GPU."""
        trace = self.procs.get((key, gpu, mig_gi))
        return trace.series() if trace else []


class Alert:
    """One alert. An alert about a process keeps the process and words its message when it is
    first read: the view shows a few lines of alerts and counts the rest, and where hundreds of
    processes hold memory idle (a busy server, once `idle_after` has passed), wording every
    holder's line took ~2 ms of each refresh at 500 (benchmarks/README.md)."""

    __slots__ = ("kind", "severity", "_message", "gpu", "pid", "eta", "process", "idle_for")

    def __init__(self, kind: str, severity: str, message: str | None = None, gpu: int | None = None,
                 pid: int | None = None, eta: float | None = None, process: GpuProcess | None = None,
                 idle_for: float | None = None) -> None:
        self.kind = kind  # nearly_full | growing | idle_holder | defunct | lost
        self.severity = severity  # "critical" or "warning"
        self._message = message  # None: worded from `process` when read
        self.gpu = gpu
        self.pid = pid
        self.eta = eta  # seconds until full (growing), an estimate
        self.process = process  # the process a defunct or idle holder alert is about
        self.idle_for = idle_for  # seconds an idle holder has been seen idle

    @property
    def message(self) -> str:
        if self._message is None:
            self._message = _process_message(self)
        return self._message

    def __repr__(self) -> str:
        return f"Alert({self.kind!r}, {self.severity!r}, {self.message!r}, gpu={self.gpu!r}, pid={self.pid!r})"


@dataclass
class Thresholds:
    nearly_full: float = 0.95  # share of memory in use (free < 5 %)
    trend_window: float = 30.0  # seconds of history the trend is fitted on
    trend_min_span: float = 5.0  # need at least this much history to talk about a trend
    grow_horizon: float = 3600.0  # warn when the estimate says full within this
    grow_min_rate: float = 1024**2  # bytes/s: slower is noise
    idle_after: float = 300.0  # observed idle this long -> idle holder
    idle_min_memory: int = 256 * 1024**2  # holding less than this is not worth an alert


def trend(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope (units per second) of (time, value) points, or None with < 2 times."""
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in points) / var


def _used_share(dev: Device) -> float | None:
    if dev.memory_total and dev.memory_free is not None:
        return 1 - dev.memory_free / dev.memory_total  # counts driver-reserved memory as unusable
    if dev.memory_total and dev.memory_used is not None:
        return dev.memory_used / dev.memory_total
    return None


def growth(history: History, index: int, th: Thresholds) -> tuple[float, float] | None:
    """(bytes/s, seconds until full) when the GPU's memory is still rising fast enough, else None."""
    samples = history.gpus.get(index)
    if not samples or samples[-1].memory_used is None or samples[-1].memory_free is None:
        return None
    now = samples[-1].time
    recent = [(s.time, float(s.memory_used)) for s in samples
              if s.time >= now - th.trend_window and s.memory_used is not None]
    if len(recent) < 3 or recent[-1][0] - recent[0][0] < th.trend_min_span:
        return None
    rate = trend(recent)
    # Still rising: the newest third of the window must go up too, or a plateau after a step
    # would keep "growing" alive for a whole window.
    tail = [p for p in recent if p[0] >= now - (now - recent[0][0]) / 3]
    tail_rate = trend(tail) if len(tail) >= 2 else rate
    if rate is None or rate < th.grow_min_rate or tail_rate is None or tail_rate < th.grow_min_rate:
        return None
    # The newest part of the trend says best how fast it grows now (a job that just started
    # allocating sits on a flat stretch in the window's first part).
    eta = samples[-1].memory_free / tail_rate
    return (tail_rate, eta) if eta <= th.grow_horizon else None


def _process_message(alert: Alert) -> str:
    """The message of an alert about a process (defunct, idle_holder)."""
    p = alert.process
    if p is None:
        raise ValueError(f"a {alert.kind} alert without its message or process")
    if alert.kind == "defunct":
        return _("{who} is defunct and still holds {size} on GPU {index}").format(
            who=_who(p), size=format_size(p.memory), index=alert.gpu)
    return _("{who} holds {size} on GPU {index}, idle for {idle}+").format(
        who=_who(p), size=format_size(p.memory), index=alert.gpu, idle=format_duration(alert.idle_for))


def _who(p: GpuProcess) -> str:
    # said inside the sentences below; inside a container a row no process here could be told to be
    # is named by its host pid as that (the same number here may be another process)
    if p.pid_here is None:
        return _("host pid {pid}, of another PID namespace").format(pid=p.nvml_pid)
    return _("pid {pid} ({user})").format(pid=p.pid, user=p.user) if p.user else _("pid {pid}").format(pid=p.pid)


def evaluate(history: History, th: Thresholds | None = None) -> list[Alert]:
    """Alerts for the latest snapshot in `history`, most urgent first."""
    th = th or Thresholds()
    snap = history.latest
    if snap is None:
        return []
    out: list[Alert] = []
    for dev in snap.gpus:
        if dev.lost:
            # the kinds ("lost", "nearly_full", ...) are for programs; the messages for people
            out.append(Alert("lost", "critical", _("GPU {index} lost: {reason}").format(
                index=dev.index, reason=_(dev.error or N_("GPU is lost"))), gpu=dev.index))
            continue
        share = _used_share(dev)
        if share is not None and share >= th.nearly_full:
            out.append(Alert("nearly_full", "critical",
                             _("GPU {index} nearly full: {free} free of {total} ({share}% used)").format(
                                 index=dev.index, free=format_size(dev.memory_free),
                                 total=format_size(dev.memory_total), share=f"{100 * share:.0f}"), gpu=dev.index))
        else:
            grow = growth(history, dev.index, th)
            if grow is not None:
                rate, eta = grow
                out.append(Alert("growing", "warning",
                                 _("GPU {index} memory growing {rate}/s: full in ~{eta} at this rate "
                                   "(estimate)").format(
                                     index=dev.index, rate=format_size(int(rate)), eta=format_duration(eta)),
                                 gpu=dev.index, eta=eta))
        for p in dev.processes:  # worded when shown (Alert): there may be hundreds
            idle = p.idle_for
            if p.zombie and p.memory:
                out.append(Alert("defunct", "warning", gpu=dev.index, pid=p.pid_here, process=p))
            elif idle is not None and idle >= th.idle_after and (p.memory or 0) >= th.idle_min_memory:
                out.append(Alert("idle_holder", "warning", gpu=dev.index, pid=p.pid_here, process=p, idle_for=idle))
    order = {"critical": 0, "warning": 1}
    out.sort(key=lambda a: (order[a.severity], a.gpu if a.gpu is not None else -1))
    return out
