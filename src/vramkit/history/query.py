"""Questions asked of the history store: usage over a window (by user, GPU, job or day), the top
idle holders, one job's memory over its life, and how long each held memory has been idle.

Every total is a sum of value x seconds over the rows of every tier (store.gpu_time and
store.proc_time, read here through the tables' keys: PROC_WINDOW, GPU_WINDOW). A row belongs to
a window by its start time, so a window's edges are exact to one sample (raw), one minute or
fifteen minutes (older tiers).

Usage, idle holders and coverage read the whole hours of a window from the hour sums (proc_hour,
gpu_hour: store.py) and only the rest row by row: the ragged edges (under an hour each side) and
the samples not summed yet (the last few minutes). The sums are those of the same rows, so the
totals are the same to float rounding (tests/test_history_summary.py checks it).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..errors import RequestError
from .store import HOUR, ROLLUP_TIERS, Store, StoreError, describe

BY = ("user", "gpu", "job", "day")
# Every UTC offset in use is a whole number of quarter hours: a 15-minute bucket lies in one
# local day, so days are summed from quarter-hour sums (no date() call per row).
_QUARTER = 900

# The rollup tiers store.roll_up writes (a bucket's seconds). The rollup tables' keys begin with
# the tier: naming the tiers lets SQLite seek to a window, where the views proc_time and gpu_time
# (no tier in a WHERE on t) scan every rollup row, even for the last hour.
TIERS = ROLLUP_TIERS
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

# The sums of usage, idle holders and coverage, as rows of one shape whichever source they come
# from: row by row (as PROC_WINDOW, GPU_WINDOW) over [:s<n>, :u<n>), or from the hour sums over
# the whole hours [:s<n>, :u<n>) plus the samples not summed yet (id > :after) up to :r<n>. The
# unary + keeps SQLite on the samples' key (a few recent ids), not on their index by time.
_PROC_FINE = f"""
    SELECT s.t AS t, p.job AS job, p.gpu AS gpu, s.span AS seconds, p.memory * s.span AS mbs, p.memory AS peak,
           p.idle * s.span AS idle, p.memory * (p.idle * s.span) AS idle_mbs
    FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.t >= :s{{n}} AND s.t < :u{{n}}
    UNION ALL
    SELECT t, job, gpu, seconds, memory * seconds, memory_max, idle_seconds, memory * idle_seconds FROM proc_rollup
    WHERE {_IN_TIERS} AND t >= :s{{n}} AND t < :u{{n}}"""
_PROC_HOURS = """
    SELECT t AS t, job AS job, gpu AS gpu, seconds AS seconds, memory_byte_seconds AS mbs, memory_max AS peak,
           idle_seconds AS idle, idle_memory_byte_seconds AS idle_mbs
    FROM proc_hour WHERE t >= :s{n} AND t < :u{n}
    UNION ALL
    SELECT s.t, p.job, p.gpu, s.span, p.memory * s.span, p.memory, p.idle * s.span, p.memory * (p.idle * s.span)
    FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.id > :after AND +s.t >= :s{n} AND +s.t < :r{n}"""
_GPU_FINE = f"""
    SELECT s.t AS t, g.gpu AS gpu, s.span AS seconds, CASE WHEN g.procs > 0 THEN s.span ELSE 0 END AS occupied,
           g.used AS used_max, g.util * s.span AS util_seconds,
           CASE WHEN g.util IS NOT NULL THEN s.span END AS util_known
    FROM samples s JOIN gpu_raw g ON g.sample = s.id WHERE s.t >= :s{{n}} AND s.t < :u{{n}}
    UNION ALL
    SELECT t, gpu, seconds, occupied_seconds, used_max, util * seconds, CASE WHEN util IS NOT NULL THEN seconds END
    FROM gpu_rollup WHERE {_IN_TIERS} AND t >= :s{{n}} AND t < :u{{n}}"""
_GPU_HOURS = """
    SELECT t AS t, gpu AS gpu, seconds AS seconds, occupied_seconds AS occupied, used_max AS used_max,
           util_seconds AS util_seconds, util_known_seconds AS util_known
    FROM gpu_hour WHERE t >= :s{n} AND t < :u{n}
    UNION ALL
    SELECT s.t, g.gpu, s.span, CASE WHEN g.procs > 0 THEN s.span ELSE 0 END, g.used, g.util * s.span,
           CASE WHEN g.util IS NOT NULL THEN s.span END
    FROM samples s JOIN gpu_raw g ON g.sample = s.id WHERE s.id > :after AND +s.t >= :s{n} AND +s.t < :r{n}"""


@dataclass
class _Plan:
    """Where the parts of a window are read: `fine` ranges row by row, `hours` (start, end, end of
    the samples not summed yet) from the hour sums; `after`: the last sample id summed."""

    fine: list[tuple[float, float]]
    hours: list[tuple[float, float, float]]
    after: int = 0

    def sql(self, fine: str, hours: str) -> tuple[str, dict[str, object]]:
        """The rows of the whole window (a UNION ALL of each part) and their parameters."""
        parts: list[str] = []
        params: dict[str, object] = {"after": self.after}
        for start, end in self.fine:
            n = len(parts)
            parts.append(fine.format(n=n))
            params.update({f"s{n}": start, f"u{n}": end})
        for start, end, raw_end in self.hours:
            n = len(parts)
            parts.append(hours.format(n=n))
            params.update({f"s{n}": start, f"u{n}": end, f"r{n}": raw_end})
        return "\n    UNION ALL".join(parts), params


@contextmanager
def _snapshot(store: Store) -> Iterator[None]:
    """One read transaction: the hour sums, meta and the raw rows as of one commit (a roll_up that
    sums more samples between two statements would otherwise count them twice)."""
    if store.conn.in_transaction:
        yield
        return
    try:
        store.conn.execute("BEGIN")
    except sqlite3.Error as e:
        raise StoreError(describe(e, store.path), param="db") from None
    try:
        yield
    finally:
        if store.conn.in_transaction:
            store.conn.execute("COMMIT")


def _plan(store: Store, since: float, until: float, days: bool = False) -> _Plan:
    """Split [since, until) into whole hours read from the hour sums and the rest read row by row.
    `days`: an hour that local midnight cuts (zones half an hour off UTC) is read row by row, so
    that each row still falls into the day of its quarter hour, as before."""
    whole = _Plan([(since, until)], [])
    if not store.hour_sums or not (math.isfinite(since) and math.isfinite(until) and since < until):
        return whole
    meta = {str(k): str(v) for k, v in _rows(
        store, "SELECT key, value FROM meta WHERE key IN ('hour_sample', 'hour_since', 'hour_t_last')", ())}
    first = max(math.ceil(since / HOUR) * HOUR, float(meta.get("hour_since", "-inf")))
    # The hour `until` falls in comes from the sums too when every sample summed is before `until`.
    summed_until = meta.get("hour_t_last")
    end = (math.ceil(until / HOUR) if summed_until is None or float(summed_until) < until
           else math.floor(until / HOUR)) * HOUR
    if not first < end:
        return whole
    plan = _Plan([], [], int(meta.get("hour_sample", "0")))
    if since < first:
        plan.fine.append((since, first))
    start = first
    for cut in _hours_across_midnight(store, first, end) if days else []:
        if start < cut:
            plan.hours.append((start, cut, min(cut, until)))
        plan.fine.append((cut, min(cut + HOUR, until)))
        start = cut + HOUR
    if start < end:
        plan.hours.append((start, end, min(end, until)))
    if end < until:
        plan.fine.append((end, until))
    return plan


def _hours_across_midnight(store: Store, first: float, end: float) -> list[float]:
    """The hours in [first, end) whose quarter hours fall into two local days (none where the zone
    is a whole number of hours off UTC), within the hours that hold any row."""
    from datetime import datetime

    extent = _rows(store, "SELECT min(t), max(t) FROM (SELECT min(t) AS t FROM proc_hour UNION ALL "
                   "SELECT max(t) FROM proc_hour UNION ALL SELECT min(t) FROM samples UNION ALL "
                   "SELECT max(t) FROM samples)", ())[0]
    if extent[0] is None:
        return []
    lo = max(first, math.floor(float(extent[0]) / HOUR) * HOUR)
    hi = min(end, math.floor(float(extent[1]) / HOUR) * HOUR + HOUR)
    out = []
    for h in range(int(lo), int(hi), HOUR):
        if datetime.fromtimestamp(h).date() != datetime.fromtimestamp(h + HOUR - _QUARTER).date():
            out.append(float(h))
    return out


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
    # The first and last of each tier, each one seek in a key (min(t) over the whole rollup
    # table would read every row of it).
    ends = " UNION ALL ".join(f"SELECT min(t) AS t FROM gpu_rollup WHERE tier = {tier} UNION ALL "
                              f"SELECT max(t) FROM gpu_rollup WHERE tier = {tier}" for tier in TIERS)
    rows = _rows(store, f"SELECT min(t), max(t) FROM (SELECT min(t) AS t FROM samples UNION ALL "
                 f"SELECT max(t) FROM samples UNION ALL {ends})", ())
    first, last = rows[0]
    # Seconds covered: each GPU's rows count the same time; one GPU's total is the window's.
    with _snapshot(store):
        rows_sql, params = _plan(store, since, until).sql(_GPU_FINE, _GPU_HOURS)
        per_gpu = _rows(store, f"SELECT gpu, SUM(seconds) FROM ({rows_sql}) GROUP BY gpu", params)
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
    """Per job and GPU over [since, until): one pass over the window's hour sums and rows, which
    usage() (by user, job, GPU) and idle_holders() can share (pass it as `sums=`)."""
    with _snapshot(store):
        rows_sql, params = _plan(store, since, until).sql(_PROC_FINE, _PROC_HOURS)
        rows = _rows(store, f"""
            SELECT job, gpu, SUM(seconds), SUM(mbs), MAX(peak), SUM(idle), SUM(idle_mbs)
            FROM ({rows_sql}) GROUP BY job, gpu""", params)
    return [Held(int(job), int(gpu), float(s or 0), float(mbs or 0), None if peak is None else int(peak),
                 float(idle or 0), float(idle_mbs or 0)) for job, gpu, s, mbs, peak, idle, idle_mbs in rows]


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
    if by == "day":
        return _by_day(store, since, until)
    sums = held(store, since, until) if sums is None else sums
    if by == "gpu":
        return _by_gpu(store, since, until, sums)
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


def _by_day(store: Store, since: float, until: float) -> list[Usage]:
    """Each row counts in the local day of its quarter hour (an hour's sums: of its hour, which
    _plan(days=True) keeps within one day)."""
    from datetime import datetime

    with _snapshot(store):
        rows_sql, params = _plan(store, since, until, days=True).sql(_PROC_FINE, _PROC_HOURS)
        rows = _rows(store, f"""
            SELECT CAST(t / {_QUARTER} AS INTEGER) AS q, job, SUM(seconds), SUM(mbs), MAX(peak), SUM(idle)
            FROM ({rows_sql}) GROUP BY q, job""", params)
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


def _by_gpu(store: Store, since: float, until: float, sums: list[Held]) -> list[Usage]:
    """GPU-seconds of a GPU: the time any process held memory on it; peak: the GPU's own reading."""
    with _snapshot(store):
        rows_sql, params = _plan(store, since, until).sql(_GPU_FINE, _GPU_HOURS)
        gpus = _rows(store, f"""
            SELECT gpu, SUM(occupied), MAX(used_max), SUM(util_seconds) / NULLIF(SUM(util_known), 0)
            FROM ({rows_sql}) GROUP BY gpu""", params)
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
