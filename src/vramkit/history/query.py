"""Questions asked of the history store: usage over a window (by user, GPU, job or day), the top
idle holders, one job's memory over its life, and how long each held memory has been idle.

Every total is a sum of value x seconds over the rows of every tier (store.gpu_time and
store.proc_time, read here through the tables' keys: PROC_WINDOW, GPU_WINDOW). A row belongs to
a window by its start time, so a window's edges are exact to one sample (raw), one minute or
fifteen minutes (older tiers).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import RequestError
from .store import Store, StoreError, describe

BY = ("user", "gpu", "job", "day")

# The rollup tiers store.roll_up writes (a bucket's seconds). The rollup tables' keys begin with
# the tier: naming the tiers lets SQLite seek to a window, where the views proc_time and gpu_time
# (no tier in a WHERE on t) scan every rollup row, even for the last hour.
TIERS = (60, 900)
_IN_TIERS = f"tier IN ({', '.join(map(str, TIERS))})"
# The rows of proc_time / gpu_time that start in [:since, :until), read through the keys.
PROC_WINDOW = f"""(
    SELECT s.t AS t, s.span AS seconds, p.job AS job, p.gpu AS gpu, p.memory AS memory, p.memory AS memory_max,
           p.sm_util AS sm_util, p.idle * s.span AS idle_seconds
    FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.t >= :since AND s.t < :until
    UNION ALL
    SELECT t, seconds, job, gpu, memory, memory_max, sm_util, idle_seconds FROM proc_rollup
    WHERE {_IN_TIERS} AND t >= :since AND t < :until)"""
GPU_WINDOW = f"""(
    SELECT s.t AS t, s.span AS seconds, g.gpu AS gpu, g.used AS used_max, g.util AS util,
           CASE WHEN g.procs > 0 THEN s.span ELSE 0 END AS occupied_seconds
    FROM samples s JOIN gpu_raw g ON g.sample = s.id WHERE s.t >= :since AND s.t < :until
    UNION ALL
    SELECT t, seconds, gpu, used_max, util, occupied_seconds FROM gpu_rollup
    WHERE {_IN_TIERS} AND t >= :since AND t < :until)"""


@dataclass
class Usage:
    """One row of a report: GPU-seconds (a process holding memory on a GPU for a second is one;
    for --by gpu: seconds any process held memory on it), memory byte-seconds, peak memory,
    seconds memory was held idle (no kernels of the holder's own)."""

    key: str
    gpu_seconds: float = 0.0
    memory_byte_seconds: float = 0.0
    peak_memory: int | None = None
    idle_seconds: float = 0.0
    jobs: int = 0
    utilization: float | None = None  # --by gpu: the GPU's average utilization (%)
    user: str | None = None  # --by job
    pid: int | None = None
    command: str | None = None
    gpus: str | None = None
    first_seen: float | None = None
    last_seen: float | None = None


@dataclass
class Coverage:
    """What the store holds: its first and last sample and the seconds recorded in a window."""

    first: float | None
    last: float | None
    recorded_seconds: float


@dataclass
class JobLife:
    id: int
    pid: int
    user: str | None
    command: str | None
    first_seen: float
    last_seen: float
    gpus: str
    peak_memory: int
    gpu_seconds: float
    memory_byte_seconds: float
    idle_seconds: float
    points: list[tuple[float, float, int, int | None, int | None, int | None, float]] = field(default_factory=list)
    # (t, seconds, gpu, memory, memory_max, sm_util, idle_seconds), oldest first


def _rows(store: Store, sql: str, params: tuple[object, ...] | Mapping[str, object]) -> list[tuple[Any, ...]]:
    """The rows of a query (SQLite's values: Any), or a StoreError with one line."""
    try:
        return list(store.conn.execute(sql, params))
    except sqlite3.Error as e:
        raise StoreError(describe(e, store.path), param="db") from None


def coverage(store: Store, since: float, until: float) -> Coverage:
    rows = _rows(store, "SELECT min(t), max(t) FROM (SELECT t FROM samples UNION ALL SELECT t FROM gpu_rollup)", ())
    first, last = rows[0]
    # Seconds covered: each GPU's rows count the same time; one GPU's total is the window's.
    per_gpu = _rows(store, f"SELECT gpu, SUM(seconds) FROM {GPU_WINDOW} GROUP BY gpu",
                    {"since": since, "until": until})
    seconds = max((float(s) for _, s in per_gpu if s is not None), default=0.0)
    return Coverage(first if first is None else float(first), last if last is None else float(last),
                    seconds)


@dataclass
class Held:
    """What one job held on one GPU over a window: the sums every report is made of."""

    job: int
    gpu: int
    seconds: float
    memory_byte_seconds: float
    peak_memory: int | None
    idle_seconds: float
    idle_memory_byte_seconds: float


def held(store: Store, since: float, until: float) -> list[Held]:
    """Per job and GPU over [since, until): one pass over proc_time, which usage() (by user, job,
    GPU) and idle_holders() can share (pass it as `sums=`): a 30-day window is millions of rows."""
    return [Held(int(job), int(gpu), float(s or 0), float(mbs or 0), None if peak is None else int(peak),
                 float(idle or 0), float(idle_mbs or 0)) for job, gpu, s, mbs, peak, idle, idle_mbs in _rows(store, f"""
        SELECT job, gpu, SUM(seconds), SUM(memory * seconds), MAX(memory_max), SUM(idle_seconds),
               SUM(memory * idle_seconds)
        FROM {PROC_WINDOW} GROUP BY job, gpu""", {"since": since, "until": until})]


@dataclass
class _Job:
    pid: int
    user: str | None
    command: str | None
    gpus: str
    first_seen: float
    last_seen: float


def _jobs(store: Store, ids: set[int]) -> dict[int, _Job]:
    """The `jobs` rows of these ids (a window's jobs: hundreds, not millions)."""
    out: dict[int, _Job] = {}
    chunk = sorted(ids)
    for i in range(0, len(chunk), 500):  # SQLite's bound-parameter limit
        part = chunk[i:i + 500]
        for row in _rows(store, f"SELECT id, pid, user, command, gpus, first_seen, last_seen FROM jobs WHERE id IN "
                         f"({','.join('?' * len(part))})", tuple(part)):
            out[int(row[0])] = _Job(*row[1:])
    return out


def usage(store: Store, since: float, until: float, by: str, sums: list[Held] | None = None) -> list[Usage]:
    """Totals per user, GPU, job or day (local time) over [since, until), biggest GPU-time first
    (GPUs and days in order). `sums`: held(store, since, until), when the caller has it already."""
    if by not in BY:
        raise RequestError(f"by: must be one of {', '.join(BY)}, got {by!r}", param="by")
    window = {"since": since, "until": until}
    if by == "day":
        return _by_day(store, window)
    sums = held(store, since, until) if sums is None else sums
    if by == "gpu":
        return _by_gpu(store, window, sums)
    jobs = _jobs(store, {h.job for h in sums})
    groups: dict[str, Usage] = {}
    members: dict[str, set[int]] = {}
    for h in sums:
        job = jobs.get(h.job)
        if job is None:  # dropped by retention since the sums were read
            continue
        key = (job.user or "?") if by == "user" else str(h.job)
        u = groups.get(key)
        if u is None:
            u = groups[key] = Usage(key)
            if by == "job":
                u.key, u.user, u.pid, u.command, u.gpus = str(job.pid), job.user, job.pid, job.command, job.gpus
                u.first_seen, u.last_seen = job.first_seen, job.last_seen
        _add(u, h)
        members.setdefault(key, set()).add(h.job)
    for key, u in groups.items():
        u.jobs = len(members[key])
    return sorted(groups.values(), key=lambda u: (-u.gpu_seconds, u.key))


def _add(u: Usage, h: Held) -> None:
    u.gpu_seconds += h.seconds
    u.memory_byte_seconds += h.memory_byte_seconds
    u.idle_seconds += h.idle_seconds
    if h.peak_memory is not None:
        u.peak_memory = max(u.peak_memory or 0, h.peak_memory)


# Every UTC offset in use is a whole number of quarter hours: a 15-minute bucket lies in one
# local day, so days are summed from quarter-hour sums (no date() call per row).
_QUARTER = 900


def _by_day(store: Store, window: Mapping[str, object]) -> list[Usage]:
    from datetime import datetime

    rows = _rows(store, f"""
        SELECT CAST(t / {_QUARTER} AS INTEGER) AS q, job, SUM(seconds), SUM(memory * seconds), MAX(memory_max),
               SUM(idle_seconds)
        FROM {PROC_WINDOW} GROUP BY q, job""", window)
    days: dict[str, Usage] = {}
    jobs: dict[str, set[int]] = {}
    day_of: dict[int, str] = {}
    for q, job, gs, mbs, peak, idle in rows:
        day = day_of.get(q)
        if day is None:
            day = day_of[q] = datetime.fromtimestamp(q * _QUARTER).strftime("%Y-%m-%d")
        u = days.get(day)
        if u is None:
            u = days[day] = Usage(day)
        u.gpu_seconds += float(gs or 0)
        u.memory_byte_seconds += float(mbs or 0)
        u.idle_seconds += float(idle or 0)
        if peak is not None:
            u.peak_memory = max(u.peak_memory or 0, int(peak))
        jobs.setdefault(day, set()).add(int(job))
    for day, u in days.items():
        u.jobs = len(jobs[day])
    return sorted(days.values(), key=lambda u: u.key)


def _by_gpu(store: Store, window: Mapping[str, object], sums: list[Held]) -> list[Usage]:
    """GPU-seconds of a GPU: the time any process held memory on it; peak: the GPU's own reading."""
    gpus = _rows(store, f"""
        SELECT gpu, SUM(occupied_seconds), MAX(used_max),
               SUM(util * seconds) / NULLIF(SUM(CASE WHEN util IS NOT NULL THEN seconds END), 0)
        FROM {GPU_WINDOW} GROUP BY gpu""", window)
    procs: dict[int, Usage] = {}
    members: dict[int, set[int]] = {}
    for h in sums:
        _add(procs.setdefault(h.gpu, Usage("")), h)
        members.setdefault(h.gpu, set()).add(h.job)
    out = []
    for gpu, occupied, peak, util in gpus:
        p = procs.get(int(gpu), Usage(""))
        out.append(Usage(f"GPU {gpu}", float(occupied or 0), p.memory_byte_seconds,
                         None if peak is None else int(peak), p.idle_seconds, len(members.get(int(gpu), ())),
                         utilization=None if util is None else float(util)))
    out.sort(key=lambda u: int(u.key.split()[1]))
    return out


def idle_holders(store: Store, since: float, until: float, limit: int = 10,
                 sums: list[Held] | None = None) -> list[Usage]:
    """The jobs that held memory idle longest in the window, longest first: idle_seconds,
    memory_byte_seconds of the idle time, peak memory and gpu_seconds over the window.
    `sums`: held(store, since, until), when the caller has it already."""
    sums = held(store, since, until) if sums is None else sums
    per_job: dict[int, Usage] = {}
    idle_bytes: dict[int, float] = {}
    for h in sums:
        _add(per_job.setdefault(h.job, Usage("")), h)
        idle_bytes[h.job] = idle_bytes.get(h.job, 0.0) + h.idle_memory_byte_seconds
    top = sorted((j for j, u in per_job.items() if u.idle_seconds > 0),
                 key=lambda j: (-per_job[j].idle_seconds, j))[:max(0, limit)]
    jobs = _jobs(store, set(top))
    out = []
    for j in top:
        job = jobs.get(j)
        if job is None:
            continue
        u = per_job[j]
        out.append(Usage(str(job.pid), u.gpu_seconds, idle_bytes[j], u.peak_memory, u.idle_seconds, 1,
                         user=job.user, pid=job.pid, command=job.command, gpus=job.gpus,
                         first_seen=job.first_seen, last_seen=job.last_seen))
    return out


@dataclass
class MemorySeries:
    """Memory per GPU over time, per user: `start` + i * `step` is bucket i's start; memory[gpu][user][i]
    is the average bytes that user held on that GPU over the recorded part of bucket i (None: the
    GPU was not recorded then). `totals`: each GPU's memory as last seen."""

    start: float
    step: float
    count: int
    memory: dict[int, dict[str, list[float | None]]]
    totals: dict[int, int | None]


def memory_series(store: Store, since: float, until: float, step: float) -> MemorySeries:
    """Per-GPU per-user memory over [since, until) in buckets of `step` seconds, read from
    proc_time (every tier alike) and weighted by the seconds each row stands for."""
    if not step > 0:
        raise RequestError(f"step: must be positive, got {step!r}", param="step")
    count = max(1, int(-(-(until - since) // step)))
    window = {"since": since, "until": until, "step": step}
    recorded: dict[tuple[int, int], float] = {}
    for b, gpu, seconds in _rows(store, f"""
            SELECT CAST((t - :since) / :step AS INTEGER) AS b, gpu, SUM(seconds) FROM {GPU_WINDOW}
            GROUP BY b, gpu""", window):
        recorded[(int(b), int(gpu))] = float(seconds or 0)
    # Per job first (the join to `jobs` then touches one row per job and bucket, not per sample).
    held = _rows(store, f"""
        WITH per_job AS (
            SELECT CAST((t - :since) / :step AS INTEGER) AS b, gpu, job, SUM(memory * seconds) AS mbs
            FROM {PROC_WINDOW} GROUP BY b, gpu, job)
        SELECT b, gpu, coalesce(j.user, '?'), SUM(mbs) FROM per_job p JOIN jobs j ON j.id = p.job
        GROUP BY b, gpu, j.user""", window)
    gpus = sorted({gpu for _, gpu in recorded})
    memory: dict[int, dict[str, list[float | None]]] = {g: {} for g in gpus}
    for b, gpu, user, mbs in held:
        b, gpu = int(b), int(gpu)
        seconds = recorded.get((b, gpu), 0.0)
        if not 0 <= b < count or seconds <= 0:
            continue
        series = memory.setdefault(gpu, {}).setdefault(str(user), [None] * count)
        series[b] = (series[b] or 0.0) + float(mbs or 0) / seconds
    # A recorded bucket where a user held nothing is 0, not a gap.
    for gpu, users in memory.items():
        for series in users.values():
            for b in range(count):
                if series[b] is None and recorded.get((b, gpu), 0.0) > 0:
                    series[b] = 0.0
    totals = {int(g): None if m is None else int(m) for g, m in _rows(store, "SELECT gpu, memory_total FROM gpus", ())}
    return MemorySeries(since, float(step), count, memory, {g: totals.get(g) for g in memory})


def job_lives(store: Store, pid: int) -> list[JobLife]:
    """Every recorded life of `pid`, newest first, each with its memory over time per GPU."""
    lives = []
    for row in _rows(store, "SELECT id, pid, user, command, first_seen, last_seen, gpus, peak_memory, gpu_seconds, "
                     "memory_byte_seconds, idle_seconds FROM jobs WHERE pid = ? ORDER BY first_seen DESC", (pid,)):
        life = JobLife(*row)
        # The rows of its life (a rollup bucket may start up to 15 minutes before its first sample).
        life.points = [tuple(r) for r in _rows(store, f"""
            SELECT t, seconds, gpu, memory, memory_max, sm_util, idle_seconds FROM {PROC_WINDOW}
            WHERE job = :job ORDER BY t, gpu""",
            {"job": life.id, "since": life.first_seen - 900, "until": math.nextafter(life.last_seen, math.inf)})]
        lives.append(life)
    return lives


def idle_since(store: Store, fresh_after: float) -> dict[tuple[int, int | None, int], float]:
    """(pid, start ticks, GPU) -> since when (unix time) it has held memory there idle without a
    break in recording, for the processes of the newest sample, if that sample is later than
    `fresh_after` (else {}: the recorder is not running, and its past says nothing about now)."""
    last = _rows(store, "SELECT max(t) FROM samples", ())[0][0]
    if last is None or float(last) < fresh_after:
        return {}
    rows = _rows(store, """
        SELECT j.pid, j.start_ticks, h.gpu, h.idle_since FROM holding h JOIN jobs j ON j.id = h.job
        WHERE h.idle_since IS NOT NULL""", ())
    return {(int(pid), ticks, int(gpu)): float(since) for pid, ticks, gpu, since in rows}
