"""Questions asked of the history store: usage over a window (by user, GPU, process life, day,
container, pod, namespace or Slurm job), the top idle holders, one process life's memory over its
life, and how long each held memory has been idle.

Names: a "life" is one process from its start to its end (pid and start ticks: a row of the
table `jobs`, whose name stays, as does the column `job` naming one; docs/history.md). "Job"
in what people read means a scheduler's job (Slurm).

Every total is a sum of value x seconds over the rows of every tier (store.gpu_time and
store.proc_time, read here through the tables' keys: PROC_WINDOW, GPU_WINDOW). A row belongs to
a window by its start time, so a window's edges are exact to one sample (raw), one minute or
fifteen minutes (older tiers).

Usage, idle holders and coverage read the whole hours of a window from the hour sums (proc_hour,
gpu_hour: store.py) and only the rest row by row: the ragged edges (under an hour each side) and
the samples not summed yet (the last few minutes). The sums are those of the same rows, so the
totals are the same to float rounding (tests/test_history_summary.py checks it).

Typed reads. The file may be damaged or written by someone else, and SQLite lets any value into
any column (no CHECKs; a column's type is only an affinity): a time can be 'abc', a blob, 1e308 or
-9223372036854775808. Every column is read through one table of kinds (KINDS: a number's range,
whether it is whole, or text): in SQL through `checked()` (the value, or NULL), in Python through
`typed()` / `typed_text()`. A value out of its kind is unknown (None, shown as N/A); a row whose
time, length, GPU or job is unknown is left out; non-finite meta values leave the hour sums unused.
"""

from __future__ import annotations

import math
import sqlite3
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RequestError
from ..gpu_state import Workload
from .store import (
    DAY,
    HOUR,
    JOB_TOTALS_AFTER,
    ROLLUP_TIERS,
    WORKLOAD_COLUMNS,
    Store,
    StoreError,
    check_jobs_through,
    check_schema,
    describe,
    not_utf8,
)

# kind -> (lowest, highest, whole number). Times: 1970 to 9999 (what datetime can show, in any
# zone); lengths: up to ~31 years; memory: up to 2**53 bytes (8 PiB, exact as a float); GPUs:
# NVML indexes; pids and start ticks as the kernel gives them.
MAX_TIME = 253_402_214_400.0  # 9999-12-30
KINDS: dict[str, tuple[float, float, bool]] = {
    "time": (0.0, MAX_TIME, False),
    "seconds": (0.0, 1e9, False),
    "bytes": (0.0, float(2**53), False),
    "byte_seconds": (0.0, 2.0**53 * 1e9, False),
    "percent": (0.0, 100.0, False),
    "util_seconds": (0.0, 100 * 1e9, False),  # utilization (%) x seconds
    "count": (0, 2**31, True),
    "flag": (0, 1, True),
    "gpu": (0, 1023, True),
    "id": (1, 2**62, True),
    "pid": (1, 2**31 - 1, True),
    "ticks": (0, 2**62, True),
    "whole": (0, 2**62, True),  # any whole number that is not negative (a Slurm job id, a task)
}


def checked(expr: str, kind: str) -> str:
    """SQL: `expr` where it holds a number of its kind, else NULL. BETWEEN with numeric bounds is
    false for NULL, text and blobs (they sort after every number) and for infinities."""
    return f"(CASE WHEN {of_kind(expr, kind)} THEN {expr} END)"


def of_kind(expr: str, kind: str) -> str:
    """SQL: whether `expr` holds a number of its kind (checked()'s test)."""
    lo, hi, whole = KINDS[kind]
    test = f"{expr} BETWEEN {lo!r} AND {hi!r}"
    if whole:
        test += f" AND {expr} = CAST({expr} AS INTEGER)"
    return test


def typed(value: object, kind: str) -> float | None:
    """A value read from the database, if it is a number of its kind (bool, text, bytes, NaN, an
    infinity or out of range: None). Whole kinds come back as int (see typed_int)."""
    lo, hi, whole = KINDS[kind]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not lo <= value <= hi:  # False for NaN
        return None
    if whole:
        return int(value) if value == int(value) else None
    return float(value)


def typed_int(value: object, kind: str) -> int | None:
    """typed(), as a whole number (bytes, GPUs, ids, pids, ticks, flags)."""
    v = typed(value, kind)
    return None if v is None else int(v)


def typed_text(value: object, limit: int = 4096) -> str | None:
    """Text (a user, a command), cut to `limit` characters; anything else (a number, a blob) None."""
    return value[:limit] if isinstance(value, str) else None


def typed_gpus(value: object) -> str | None:
    """A job's GPU list ("0,1,3"), or None when it is not one."""
    text = typed_text(value, 4096)
    if not text:
        return None
    parts = text.split(",")
    if not all(p.isascii() and p.isdigit() and len(p) <= 4 for p in parts):
        return None
    return ",".join(str(int(p)) for p in parts)


def _meta_number(value: object) -> float | None:
    """A meta value (text) as a finite number, or None."""
    try:
        number = float(str(value))
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


WORKLOADS = ("container", "pod", "namespace", "slurm-job")  # --by a workload (schema 4)
BY = ("user", "gpu", "life", "day", *WORKLOADS)
OLD_BY = {"job": "life"}  # the old name of a grouping, still taken
NONE = "(none)"  # the group of the lives in no container, pod or Slurm job
# Every UTC offset in use is a whole number of quarter hours: a 15-minute bucket lies in one
# local day, so days are summed from quarter-hour sums (no date() call per row).
_QUARTER = 900

# The rollup tiers store.roll_up writes (a bucket's seconds). The rollup tables' keys begin with
# the tier: naming the tiers lets SQLite seek to a window, where the views proc_time and gpu_time
# (no tier in a WHERE on t) scan every rollup row, even for the last hour.
TIERS = ROLLUP_TIERS
_IN_TIERS = f"tier IN ({', '.join(map(str, TIERS))})"


def _keys(*pairs: tuple[str, str]) -> str:
    """SQL: every (expression, kind) holds a value of its kind (the row's keys: time, length, job, GPU)."""
    return " AND ".join(f"{checked(expr, kind)} IS NOT NULL" for expr, kind in pairs)


# A process's row as read: every value through checked(); a row without its time, length, job or
# GPU is left out. `{w}` is the window's condition on the time.
_PROC_RAW_KEYS = _keys(("s.t", "time"), ("s.span", "seconds"), ("p.job", "id"), ("p.gpu", "gpu"))
_PROC_ROLLUP_KEYS = _keys(("t", "time"), ("seconds", "seconds"), ("job", "id"), ("gpu", "gpu"))
_GPU_RAW_KEYS = _keys(("s.t", "time"), ("s.span", "seconds"), ("g.gpu", "gpu"))
_GPU_ROLLUP_KEYS = _keys(("t", "time"), ("seconds", "seconds"), ("gpu", "gpu"))
_SPAN = checked("s.span", "seconds")
_RAW_IDLE = f"{checked('p.idle', 'flag')} * {_SPAN}"
_RAW_OCCUPIED = f"CASE WHEN {checked('g.procs', 'count')} > 0 THEN {_SPAN} ELSE 0 END"
_RAW_UTIL_KNOWN = f"CASE WHEN {checked('g.util', 'percent')} IS NOT NULL THEN {_SPAN} END"
_ROLLUP_UTIL_KNOWN = f"CASE WHEN {checked('util', 'percent')} IS NOT NULL THEN {checked('seconds', 'seconds')} END"


def _c(expr: str, kind: str) -> str:
    """checked(), short, for the SQL below."""
    return checked(expr, kind)


# The rows of proc_time / gpu_time that start in [:since, :until), read through the keys.
PROC_WINDOW = f"""(
    SELECT s.t AS t, {_SPAN} AS seconds, p.job AS job, p.gpu AS gpu, {_c('p.memory', 'bytes')} AS memory,
           {_c('p.memory', 'bytes')} AS memory_max, {_c('p.sm_util', 'percent')} AS sm_util,
           {_RAW_IDLE} AS idle_seconds
    FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.t >= :since AND s.t < :until AND {_PROC_RAW_KEYS}
    UNION ALL
    SELECT t, seconds, job, gpu, {_c('memory', 'bytes')}, {_c('memory_max', 'bytes')}, {_c('sm_util', 'percent')},
           {_c('idle_seconds', 'seconds')} FROM proc_rollup
    WHERE {_IN_TIERS} AND t >= :since AND t < :until AND {_PROC_ROLLUP_KEYS})"""
GPU_WINDOW = f"""(
    SELECT s.t AS t, {_SPAN} AS seconds, g.gpu AS gpu, {_c('g.used', 'bytes')} AS used_max,
           {_c('g.util', 'percent')} AS util, {_RAW_OCCUPIED} AS occupied_seconds
    FROM samples s JOIN gpu_raw g ON g.sample = s.id WHERE s.t >= :since AND s.t < :until AND {_GPU_RAW_KEYS}
    UNION ALL
    SELECT t, seconds, gpu, {_c('used_max', 'bytes')}, {_c('util', 'percent')}, {_c('occupied_seconds', 'seconds')}
    FROM gpu_rollup WHERE {_IN_TIERS} AND t >= :since AND t < :until AND {_GPU_ROLLUP_KEYS})"""

# The sums of usage, idle holders and coverage, as rows of one shape whichever source they come
# from: row by row (as PROC_WINDOW, GPU_WINDOW) over [:s<n>, :u<n>), or from the hour sums over
# the whole hours [:s<n>, :u<n>) plus the samples not summed yet (id > :after) up to :r<n>. The
# unary + keeps SQLite on the samples' key (a few recent ids), not on their index by time.
# ({{n}}: filled in per part by _Plan.sql.)
_MEM = _c("p.memory", "bytes")
_PROC_RAW_SUMS = f"""s.t, p.job, p.gpu, {_SPAN}, {_MEM} * {_SPAN}, {_MEM}, {_RAW_IDLE}, {_MEM} * ({_RAW_IDLE})"""
_PROC_FINE = f"""
    SELECT s.t AS t, p.job AS job, p.gpu AS gpu, {_SPAN} AS seconds, {_MEM} * {_SPAN} AS mbs, {_MEM} AS peak,
           {_RAW_IDLE} AS idle, {_MEM} * ({_RAW_IDLE}) AS idle_mbs
    FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.t >= :s{{n}} AND s.t < :u{{n}} AND {_PROC_RAW_KEYS}
    UNION ALL
    SELECT t, job, gpu, seconds, {_c('memory', 'bytes')} * seconds, {_c('memory_max', 'bytes')},
           {_c('idle_seconds', 'seconds')}, {_c('memory', 'bytes')} * {_c('idle_seconds', 'seconds')}
    FROM proc_rollup WHERE {_IN_TIERS} AND t >= :s{{n}} AND t < :u{{n}} AND {_PROC_ROLLUP_KEYS}"""
_PROC_HOURS = f"""
    SELECT t AS t, job AS job, gpu AS gpu, seconds AS seconds, {_c('memory_byte_seconds', 'byte_seconds')} AS mbs,
           {_c('memory_max', 'bytes')} AS peak, {_c('idle_seconds', 'seconds')} AS idle,
           {_c('idle_memory_byte_seconds', 'byte_seconds')} AS idle_mbs
    FROM proc_hour WHERE t >= :s{{n}} AND t < :u{{n}} AND {_PROC_ROLLUP_KEYS}
    UNION ALL
    SELECT {_PROC_RAW_SUMS}
    FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.id > :after AND +s.t >= :s{{n}} AND +s.t < :r{{n}}
    AND {_PROC_RAW_KEYS}"""
_GPU_RAW_SUMS = (f"s.t, g.gpu, {_SPAN}, {_RAW_OCCUPIED}, {_c('g.used', 'bytes')}, "
                 f"{_c('g.util', 'percent')} * {_SPAN}, {_RAW_UTIL_KNOWN}")
_GPU_FINE = f"""
    SELECT s.t AS t, g.gpu AS gpu, {_SPAN} AS seconds, {_RAW_OCCUPIED} AS occupied,
           {_c('g.used', 'bytes')} AS used_max, {_c('g.util', 'percent')} * {_SPAN} AS util_seconds,
           {_RAW_UTIL_KNOWN} AS util_known
    FROM samples s JOIN gpu_raw g ON g.sample = s.id WHERE s.t >= :s{{n}} AND s.t < :u{{n}} AND {_GPU_RAW_KEYS}
    UNION ALL
    SELECT t, gpu, seconds, {_c('occupied_seconds', 'seconds')}, {_c('used_max', 'bytes')},
           {_c('util', 'percent')} * seconds, {_ROLLUP_UTIL_KNOWN}
    FROM gpu_rollup WHERE {_IN_TIERS} AND t >= :s{{n}} AND t < :u{{n}} AND {_GPU_ROLLUP_KEYS}"""
_GPU_HOURS = f"""
    SELECT t AS t, gpu AS gpu, seconds AS seconds, {_c('occupied_seconds', 'seconds')} AS occupied,
           {_c('used_max', 'bytes')} AS used_max, {_c('util_seconds', 'util_seconds')} AS util_seconds,
           {_c('util_known_seconds', 'seconds')} AS util_known
    FROM gpu_hour WHERE t >= :s{{n}} AND t < :u{{n}} AND {_GPU_ROLLUP_KEYS}
    UNION ALL
    SELECT {_GPU_RAW_SUMS}
    FROM samples s JOIN gpu_raw g ON g.sample = s.id WHERE s.id > :after AND +s.t >= :s{{n}} AND +s.t < :r{{n}}
    AND {_GPU_RAW_KEYS}"""

# The rows of the hours that local midnight cuts (`cuts`: a VALUES list of (lo, hi, whole), see
# _Plan.sql), in one part however many there are (SQLite allows 500 terms in a compound SELECT):
# every row of an hour read whole, only the samples not summed yet of one whose sums come from its
# quarters' totals (schema 7).
_PROC_CUTS = (_PROC_FINE
              .replace("FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.t >= :s{n} AND s.t < :u{n}",
                       "FROM cuts c JOIN samples s ON s.t >= c.lo AND s.t < c.hi JOIN proc_raw p ON p.sample = s.id "
                       "WHERE (c.whole OR s.id > :after)")
              .replace(f"FROM proc_rollup WHERE {_IN_TIERS} AND t >= :s{{n}} AND t < :u{{n}}",
                       f"FROM cuts c JOIN proc_rollup ON {_IN_TIERS} AND t >= c.lo AND t < c.hi WHERE c.whole"))
assert ":s{n}" not in _PROC_CUTS and "c.lo" in _PROC_CUTS

# The samples not summed yet of _PROC_HOURS alone (what held_and_days reads of an hours part
# besides the hour sums it reads per local day).
_PROC_UNSUMMED = f"""
    SELECT s.t AS t, p.job AS job, p.gpu AS gpu, {_SPAN} AS seconds, {_MEM} * {_SPAN} AS mbs, {_MEM} AS peak,
           {_RAW_IDLE} AS idle, {_MEM} * ({_RAW_IDLE}) AS idle_mbs
    FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.id > :after AND +s.t >= :s{{n}} AND +s.t < :r{{n}}
    AND {_PROC_RAW_KEYS}"""
assert _PROC_UNSUMMED.split("FROM")[-1] == _PROC_HOURS.split("FROM")[-1]

_HOUR_KEYS = (("h.t", "time"), ("h.seconds", "seconds"), ("h.job", "id"), ("h.gpu", "gpu"))
# The hour sums of each span of a local day (the temp table _local_days fills: id, lo, hi). The
# keys as plain tests (most of a year's rows pass here: ~10% faster than _keys()); the time's is
# the span's bounds (numbers within its kind's).
_DAY_SPAN_SUMS = f"""
    SELECT d.id, SUM(h.seconds), SUM({_c('h.memory_byte_seconds', 'byte_seconds')}),
           MAX({_c('h.memory_max', 'bytes')}), SUM({_c('h.idle_seconds', 'seconds')}), group_concat(DISTINCT h.job)
    FROM temp.vram_day_spans d JOIN proc_hour h ON h.t >= d.lo AND h.t < d.hi
    WHERE {' AND '.join(of_kind(expr, kind) for expr, kind in _HOUR_KEYS[1:])}
    GROUP BY d.id"""

# The same from the day sums (schema 3): a day's sums are those of its hours; and from the
# recorder's local days (schema 5, processes only).
_DAYS_OF = {_PROC_HOURS: _PROC_HOURS.replace("FROM proc_hour WHERE", "FROM proc_day WHERE"),
            _GPU_HOURS: _GPU_HOURS.replace("FROM gpu_hour WHERE", "FROM gpu_day WHERE")}
_LOCAL_DAYS_OF = {_PROC_HOURS: _PROC_HOURS.replace("FROM proc_hour WHERE", "FROM proc_local_day WHERE")}


@dataclass
class _Plan:
    """Where the parts of a window are read: `fine` ranges row by row, `hours` (start, end, end of
    the samples not summed yet) from the hour sums; `after`: the last sample id summed."""

    fine: list[tuple[float, float]]
    hours: list[tuple[float, float, float]]
    after: int = 0
    days: list[tuple[float, float, float]] = field(default_factory=list)  # as `hours`, from the day sums
    cuts: list[tuple[int, float]] = field(default_factory=list)  # hours inside `hours` read row by row
    # (lo, hi): cut hours whose sums come from their quarters' totals (schema 7): left out of the
    # hours as `cuts` are, and only their samples not summed yet read row by row
    settled: list[tuple[int, float]] = field(default_factory=list)
    local: bool = False  # `days` are the recorder's local days (proc_local_day), not UTC days

    def sql(self, fine: str, hours: str, days: str | None = None) -> tuple[str, dict[str, object]]:
        """The rows of the whole window (a UNION ALL of each part) and their parameters. `hours`
        reads the hour sums; the same with the day sums' table reads the days (`days`: another
        template for the days' parts, with the same parameters)."""
        parts: list[str] = []
        params: dict[str, object] = {"after": self.after}
        for start, end in self.fine:
            n = len(parts)
            parts.append(fine.format(n=n))
            params.update({f"s{n}": start, f"u{n}": end})
        if days is None:
            days = (_LOCAL_DAYS_OF if self.local else _DAYS_OF)[hours] if self.days else hours
        sources = [(hours, self.hours)] + ([(days, self.days)] if self.days else [])
        for template, pieces in sources:
            for start, end, raw_end in pieces:
                n = len(parts)
                part = template.format(n=n)
                if self.cuts or self.settled:  # the cut hours come row by row, below (a local day holds none)
                    part = (f"\n    SELECT * FROM ({part}) WHERE CAST(t / {HOUR} AS INTEGER) * {HOUR} "
                            "NOT IN (SELECT lo FROM cuts)")
                parts.append(part)
                params.update({f"s{n}": start, f"u{n}": end, f"r{n}": raw_end})
        if not (self.cuts or self.settled):
            return "\n    UNION ALL".join(parts), params
        cuts = ", ".join([f"({lo}, {hi!r}, 1)" for lo, hi in self.cuts]
                         + [f"({lo}, {hi!r}, 0)" for lo, hi in self.settled])
        parts.append(_PROC_CUTS)
        return f"WITH cuts(lo, hi, whole) AS (VALUES {cuts})\n" + "\n    UNION ALL".join(parts), params


@contextmanager
def read_transaction(store: Store) -> Iterator[None]:
    """One read transaction: the hour sums, meta and the raw rows as of one commit (a roll_up that
    sums more samples between two statements would otherwise count them twice), of a schema
    checked as its first read (store.check_schema). Every reader of the file reads in one."""
    if store.conn.in_transaction:
        yield
        return
    try:
        store.conn.execute("BEGIN")
    except sqlite3.Error as e:
        raise StoreError(describe(e, store.path), param="db") from None
    try:
        # The schema checked again, as the transaction's first read: every statement in it reads
        # that schema, and another user's file may have been changed since it was opened.
        _one_line(check_schema, store)
        yield
    finally:
        if store.conn.in_transaction:
            try:
                store.conn.execute("COMMIT")
            except sqlite3.Error as e:  # a damaged page found at the end; a read has nothing to lose
                raise StoreError(describe(e, store.path), param="db") from None


def _plan(store: Store, since: float, until: float, offsets: list[tuple[int, int]] | None = None,
          local_days: bool = True) -> _Plan:
    """Split [since, until) into whole UTC days read from the day sums, whole hours read from the
    hour sums and the rest read row by row.
    `offsets` (_local_offsets()): the rows go into local days: an hour that local midnight cuts
    (zones half an hour off UTC) is read row by row, so that each row still falls into the day of
    its quarter hour, as before, and the day sums are read only where local days are UTC days;
    elsewhere the recorder's local days where they are the reader's (`local_days`: _read_local_days)."""
    days = offsets is not None
    utc = offsets is None or all(offset == 0 for _, offset in offsets)
    whole = _Plan([(since, until)], [])
    if not store.hour_sums or not (math.isfinite(since) and math.isfinite(until) and since < until):
        return whole
    meta = {str(k): _meta_number(v) for k, v in _rows(
        store, "SELECT key, value FROM meta WHERE key IN ('hour_sample', 'hour_since', 'hour_t_last')", ())}
    after, hour_since, summed_until = (meta.get(k) for k in ("hour_sample", "hour_since", "hour_t_last"))
    # Meta that is there but not a number (or out of range) says nothing true about the sums:
    # read every row instead.
    if any(k in meta and meta[k] is None for k in meta) or not 0 <= (after or 0) <= KINDS["id"][1]:
        return whole
    first = max(math.ceil(since / HOUR) * HOUR, -math.inf if hour_since is None else hour_since)
    # The hour `until` falls in comes from the sums too when every sample summed is before `until`.
    end = (math.ceil(until / HOUR) if summed_until is None or summed_until < until
           else math.floor(until / HOUR)) * HOUR
    if not first < end:
        return whole
    plan = _Plan([], [], int(after or 0))
    if since < first:
        plan.fine.append((since, first))
    plan.hours.append((first, end, min(end, until)))
    if offsets is not None and not utc:
        plan.cuts = [(int(cut), min(cut + HOUR, until)) for cut in _cut_hours(store, offsets, first, end)]
    if end < until:
        plan.fine.append((end, until))
    if offsets is not None and not utc:
        if local_days and store.local_days:
            _read_local_days(store, offsets, plan)
    elif store.day_sums and (utc or not days):
        plan.hours, pieces = [], plan.hours
        for low, high, raw_end in pieces:
            # The whole UTC days inside come from the day sums (each at or after hour_since, as `first` is).
            first_day, last_day = math.ceil(low / DAY) * DAY, math.floor(high / DAY) * DAY
            if not first_day < last_day:
                plan.hours.append((low, high, raw_end))
                continue
            if low < first_day:
                plan.hours.append((low, first_day, min(first_day, raw_end)))
            plan.days.append((first_day, last_day, min(last_day, raw_end)))
            if last_day < high:
                plan.hours.append((last_day, high, raw_end))
    return plan


def _read_local_days(store: Store, offsets: list[tuple[int, int]], plan: _Plan) -> None:
    """Move the local days of `plan.hours` that the recorder stored as the same hours [t, hi)
    (store.py: its own zone's days) to `plan.days`, read from proc_local_day: a row per day and
    pair instead of one per hour and pair. A day stored otherwise (another zone's, a clock change
    the reader sees elsewhere, a day cut by the window) stays in the hour sums."""
    if not plan.hours:
        return
    low, high = plan.hours[0][0], plan.hours[-1][1]
    stored: dict[int, int] = {}
    for t, hi in _rows(store, f"SELECT t, hi FROM local_days WHERE t >= ? AND t < ? AND {of_kind('t', 'time')} "
                       f"AND {of_kind('hi', 'time')} AND t = CAST(t AS INTEGER) AND hi = CAST(hi AS INTEGER)",
                       (low, high)):
        stored[int(t)] = int(hi)
    if not stored:
        return
    starts = sorted(stored)
    cuts = sorted(lo for lo, _ in plan.cuts)
    hours, days = [], []
    for first, end, raw_end in plan.hours:
        # The reader's days in this piece, as the hours [lo, hi) each holds (less the cut hours);
        # the two spans of a day with a change of offset in it are one.
        spans: list[list[int]] = []
        for number, lo, hi in _day_spans(offsets, math.floor(first), math.ceil(end)):
            for a, b in _without_hours(max(lo, math.ceil(first)), min(hi, math.floor(end)), cuts):
                if spans and spans[-1][0] == number and spans[-1][2] == a:
                    spans[-1][2] = b
                else:
                    spans.append([number, a, b])
        runs: list[list[int]] = []  # [from, to, days, index of the last]: consecutive days stored as the reader's
        for i, (_number, a, b) in enumerate(spans):
            if stored.get(a) != b:
                continue
            if runs and runs[-1][3] == i - 1:
                runs[-1][1], runs[-1][2], runs[-1][3] = b, runs[-1][2] + 1, i
            else:
                runs.append([a, b, 1, i])
        cursor = first
        for a, b, count, _last in runs:
            # Another zone's day stored inside the run would be read with it: not from the days then.
            if bisect_left(starts, b) - bisect_left(starts, a) != count:
                continue
            if cursor < a:
                hours.append((cursor, float(a), min(float(a), raw_end)))
            days.append((float(a), float(b), min(float(b), raw_end)))
            cursor = float(b)
        if cursor < end:
            hours.append((cursor, end, raw_end))
    if days:
        plan.hours, plan.days, plan.local = hours, days, True


def _cut_hours(store: Store, offsets: list[tuple[int, int]], first: float, end: float) -> list[float]:
    """The hours in [first, end) whose quarter hours fall into two local days as _day_sql numbers
    them (none where every offset is a whole number of hours), within the hours that hold any row.
    Only the hours of a local midnight or a change of offset can be: a few a day, not every hour."""
    if all(offset % HOUR == 0 for _, offset in offsets) and all(begin % HOUR == 0 for begin, _ in offsets[1:]):
        return []  # every local midnight and change of offset is on an hour
    low, high = _extent(store)
    if low is None or high is None:
        return []
    lo = int(max(first, math.floor(low / HOUR) * HOUR))
    hi = int(min(end, math.floor(high / HOUR) * HOUR + HOUR))
    hours = {begin // HOUR * HOUR for begin, _ in offsets[1:]}
    for i, (begin, offset) in enumerate(offsets):
        stop = offsets[i + 1][0] if i + 1 < len(offsets) else hi
        midnight = -(-(max(begin, lo) + offset) // DAY) * DAY - offset  # the first at or after the start
        while midnight < stop:
            hours.add(midnight // HOUR * HOUR)
            midnight += DAY
    return [float(h) for h in sorted(hours)
            if lo <= h < hi and _day_of(h, offsets) != _day_of(h + HOUR - _QUARTER, offsets)]


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
    lives: int = 0  # process lives
    utilization: float | None = None  # --by gpu: the GPU's average utilization (%)
    workload: Workload | None = None  # --by life, or a workload: the (first) life's workload
    user: str | None = None  # --by life
    pid: int | None = None  # None: a holder outside this PID namespace (nvml_pid)
    nvml_pid: int | None = None  # a holder outside this PID namespace: the host pid NVML listed it under
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


# (t, seconds, gpu, memory, memory_max, sm_util, idle_seconds): memory and sm_util are averages in
# a rollup's row, whole numbers in a raw one.
Point = tuple[float, float, int, "float | None", "int | None", "float | None", float]


@dataclass
class ProcessLife:
    """One process life. The totals are the recorder's (None: not a valid value in the file)."""

    id: int
    pid: int | None  # None: a holder outside this PID namespace (nvml_pid)
    user: str | None
    command: str | None
    first_seen: float
    last_seen: float
    gpus: str | None
    peak_memory: int | None
    gpu_seconds: float | None
    memory_byte_seconds: float | None
    idle_seconds: float | None
    points: list[Point] = field(default_factory=list)
    # (t, seconds, gpu, memory, memory_max, sm_util, idle_seconds), oldest first
    workload: Workload | None = None  # its container, pod or Slurm job (None: in none, or not recorded)
    nvml_pid: int | None = None  # a holder outside this PID namespace: the host pid NVML listed it under


def _rows(store: Store, sql: str, params: tuple[object, ...] | Mapping[str, object]) -> list[tuple[Any, ...]]:
    """The rows of a query (SQLite's values: Any), or a StoreError with one line."""
    try:
        return list(store.conn.execute(sql, params))
    except sqlite3.Error as e:
        raise StoreError(describe(e, store.path), param="db") from None
    except UnicodeDecodeError:  # text that is not UTF-8, or an error message quoting a damaged schema
        raise StoreError(not_utf8(store.path), param="db") from None


def coverage(store: Store, since: float, until: float) -> Coverage:
    # The first and last of each tier, each one seek in a key (min(t) over the whole rollup
    # table would read every row of it).
    valid = f"t BETWEEN 0 AND {MAX_TIME!r}"
    ends = " UNION ALL ".join(f"SELECT min(t) AS t FROM gpu_rollup WHERE tier = {tier} AND {valid} UNION ALL "
                              f"SELECT max(t) FROM gpu_rollup WHERE tier = {tier} AND {valid}" for tier in TIERS)
    with read_transaction(store):  # the ends too: a statement outside one reads whatever schema the file has then
        rows = _rows(store, f"SELECT min(t), max(t) FROM (SELECT min(t) AS t FROM samples WHERE {valid} UNION ALL "
                     f"SELECT max(t) FROM samples WHERE {valid} UNION ALL {ends})", ())
        first, last = typed(rows[0][0], "time"), typed(rows[0][1], "time")
        # Seconds covered: each GPU's rows count the same time; one GPU's total is the window's.
        rows_sql, params = _plan(store, since, until).sql(_GPU_FINE, _GPU_HOURS)
        per_gpu = _rows(store, f"SELECT gpu, SUM(seconds) FROM ({rows_sql}) GROUP BY gpu", params)
    seconds = max((typed(s, "byte_seconds") or 0.0 for _, s in per_gpu), default=0.0)
    return Coverage(first, last, float(seconds))


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
    with read_transaction(store):
        rows_sql, params = _plan(store, since, until).sql(_PROC_FINE, _PROC_HOURS)
        rows = _rows(store, f"""
            SELECT job, gpu, SUM(seconds), SUM(mbs), MAX(peak), SUM(idle), SUM(idle_mbs)
            FROM ({rows_sql}) GROUP BY job, gpu""", params)
    out = []
    for job, gpu, s, mbs, peak, idle, idle_mbs in rows:
        j, g = typed_int(job, "id"), typed_int(gpu, "gpu")
        if j is None or g is None:
            continue
        out.append(Held(j, g, _total(s), _total(mbs), typed_int(peak, "bytes"), _total(idle), _total(idle_mbs)))
    return out


def _total(value: object) -> float:
    """A sum read back (of checked values: finite, not negative), 0 when there was none."""
    return float(typed(value, "byte_seconds") or 0.0)


@dataclass
class _Life:
    pid: int | None  # None: a holder outside this PID namespace
    user: str | None
    command: str | None
    gpus: str | None
    first_seen: float | None
    last_seen: float | None
    workload: Workload | None = None
    nvml_pid: int | None = None  # its host pid, when it is outside this PID namespace

    @property
    def key(self) -> str:
        """Its name in a report's rows: the pid, or for a holder outside, the host pid."""
        return str(self.pid) if self.pid is not None else f"host {self.nvml_pid}"


def _outside_pid(pid: object, nvml_pid: object) -> int | None:
    """The host pid of a life `jobs` holds as outside this PID namespace (pid 0, schema 5), else None."""
    return typed_int(nvml_pid, "pid") if pid == 0 and not isinstance(pid, bool) else None


def _workload_sql(store: Store) -> tuple[str, str]:
    """SQL: the workload's columns to select after those of `jobs`, and the join that brings them
    (both '' before schema 4)."""
    if not store.workloads:
        return "", ""
    return "".join(f", w.{column}" for column, _ in WORKLOAD_COLUMNS), " LEFT JOIN workloads w ON w.job = jobs.id"


def _workload(values: tuple[Any, ...]) -> Workload | None:
    """A life's workload from its columns (WORKLOAD_COLUMNS' order), each through its type: None
    when none is set (in none, or recorded before schema 4)."""
    fields: dict[str, Any] = {}
    for (column, kind), value in zip(WORKLOAD_COLUMNS, values):
        typed_value = typed_text(value, 256) if kind == "TEXT" else typed_int(value, "whole")
        if typed_value is not None:
            fields[column] = typed_value
    return Workload(**fields) if fields else None


def _one_line(check: Callable[[sqlite3.Connection, Path], None], store: Store) -> None:
    """One of store's checks of the file (check_schema, check_jobs_through), an SQLite error in it
    said in one line too."""
    try:
        check(store.conn, store.path)
    except sqlite3.Error as e:
        raise StoreError(describe(e, store.path), param="db") from None


def _check_mark(store: Store) -> None:
    """A mark vram did not write would count raw rows twice or not at all: refused (one line). In a
    read_transaction, whose first read checked the schema (job_totals is vram's view)."""
    _one_line(check_jobs_through, store)


def _totals_sql(store: Store) -> tuple[str, str, str]:
    """(last_seen, totals, join): a life's last_seen, and its gpu_seconds, memory_byte_seconds and
    idle_seconds, as of the newest sample: from schema 8 the recorder writes them to `jobs` once a
    rollup interval, and the view job_totals adds the raw rows since (store.py)."""
    if not store.totals_behind:
        return "jobs.last_seen", "jobs.gpu_seconds, jobs.memory_byte_seconds, jobs.idle_seconds", ""
    _check_mark(store)
    return ("t.last_seen", "t.gpu_seconds, t.memory_byte_seconds, t.idle_seconds",
            " JOIN job_totals t ON t.id = jobs.id")


def _lives(store: Store, ids: set[int]) -> dict[int, _Life]:
    """The `jobs` rows of these ids (a window's process lives: hundreds, not millions)."""
    out: dict[int, _Life] = {}
    chunk = sorted(ids)
    extra, join = _workload_sql(store)
    outside = "nvml_pid" if store.local_days else "NULL"
    with read_transaction(store):
        # From schema 8 a life seen since the totals were written was last seen in its newest raw
        # row: the rows after the mark read once for every chunk (job_totals would read them again
        # for each 500 lives), in the same read transaction as the chunks.
        newer: dict[object, object] = {}
        if store.totals_behind:
            _check_mark(store)
            newer = dict(_rows(store, f"SELECT job, last_seen FROM ({JOB_TOTALS_AFTER})", ()))
        for i in range(0, len(chunk), 500):  # SQLite's bound-parameter limit
            part = chunk[i:i + 500]
            for row in _rows(store, f"SELECT id, pid, {outside}, user, command, gpus, first_seen, last_seen{extra} "
                             f"FROM jobs{join} WHERE id IN ({','.join('?' * len(part))})", tuple(part)):
                job, pid, host = typed_int(row[0], "id"), typed_int(row[1], "pid"), _outside_pid(row[1], row[2])
                if job is None or (pid is None and host is None):  # a life without its pid: nothing to show it as
                    continue
                out[job] = _Life(pid, typed_text(row[3]), typed_text(row[4]), typed_gpus(row[5]),
                                 typed(row[6], "time"), typed(newer.get(job, row[7]), "time"), _workload(row[8:]), host)
    return out


def workload_group(w: Workload | None, by: str) -> tuple[object, str]:
    """(what tells the group apart, its name) of a life's workload in a report --by a workload:
    a container by its id, named as its runtime (or the kubelet) names it, else by its short id;
    a pod by its UID, as NAMESPACE/NAME (or 'uid UID' where the kubelet did not say); a namespace
    by name; a Slurm job by its id (its steps together). A life in none: NONE."""
    if by == "container" and w is not None and w.container_id is not None:
        return w.container_id, w.container_name or w.pod_container or _short(w)
    if by == "pod" and w is not None and w.pod_uid is not None:
        name = (f"{w.namespace}/{w.pod}" if w.namespace else w.pod) if w.pod else f"uid {w.pod_uid}"
        return w.pod_uid, name
    if by == "namespace" and w is not None and w.pod_uid is not None:
        return w.namespace, w.namespace or "(pod not named by the kubelet)"
    if by == "slurm-job" and w is not None and w.slurm_job is not None:
        return w.slurm_job, str(w.slurm_job)
    return None, NONE


def _short(w: Workload) -> str:
    from ..procs.workload import short_id

    return short_id(w) or "?"


def usage(store: Store, since: float, until: float, by: str, sums: list[Held] | None = None) -> list[Usage]:
    """Totals per user, GPU, process life, day (local time) or workload (WORKLOADS) over
    [since, until), biggest GPU-time first (GPUs and days in order). `sums`: held(store, since,
    until), when the caller has it already."""
    by = OLD_BY.get(by, by)
    if by not in BY:
        raise RequestError(f"by: must be one of {', '.join(BY)}, got {by!r}", param="by")
    if by == "day":
        return held_and_days(store, since, until)[1]
    sums = held(store, since, until) if sums is None else sums
    if by == "gpu":
        return _by_gpu(store, since, until, sums)
    lives = _lives(store, {h.job for h in sums})
    groups: dict[object, Usage] = {}
    members: dict[object, set[int]] = {}
    for h in sums:
        life = lives.get(h.job)
        if life is None:  # dropped by retention since the sums were read
            continue
        if by in WORKLOADS:
            key, name = workload_group(life.workload, by)
        else:
            key = name = (life.user or "?") if by == "user" else str(h.job)
        u = groups.get(key)
        if u is None:
            # A group's workload: its first life's (the one of the group's kind; none for NONE).
            u = groups[key] = Usage(name, workload=life.workload if by not in WORKLOADS or key is not None else None)
            if by == "life":
                u.key, u.user, u.pid, u.command, u.gpus = life.key, life.user, life.pid, life.command, life.gpus
                u.first_seen, u.last_seen, u.nvml_pid = life.first_seen, life.last_seen, life.nvml_pid
        _add(u, h)
        members.setdefault(key, set()).add(h.job)
    for key, u in groups.items():
        u.lives = len(members[key])
    return sorted(groups.values(), key=lambda u: (-u.gpu_seconds, u.key))


def _add(u: Usage, h: Held) -> None:
    u.gpu_seconds += h.seconds
    u.memory_byte_seconds += h.memory_byte_seconds
    u.idle_seconds += h.idle_seconds
    if h.peak_memory is not None:
        u.peak_memory = max(u.peak_memory or 0, h.peak_memory)


def held_and_days(store: Store, since: float, until: float) -> tuple[list[Held], list[Usage]]:
    """held() and usage(by="day") (what `vram report --by day` shows: the days, and the idle
    holders from the sums per job and GPU).

    Each row counts in the local day of its quarter hour (an hour's sums: of its hour, which
    _plan() keeps within one day). The sums per job and GPU are held()'s, as the default report's
    (the UTC day sums serve them whatever the zone). The days: where local days are UTC days, or
    where the recorder stored its local days as the reader's (schema 5: in the recorder's zone),
    the window is mostly whole days, a row per day and pair, summed per day as SQLite reads them in
    their key's order (no sort); the rest (the edges, hours of days not stored so, the samples not
    summed yet, hours local midnight cuts) is summed per day in SQL from the zone's UTC offsets
    (_day_sql). Elsewhere the days are _local_days()'s."""
    with read_transaction(store):
        offsets = _local_offsets(store, since, until)
        plan = _plan(store, since, until, offsets)
        if any(offset != 0 for _, offset in offsets) and not plan.local:
            return held(store, since, until), _local_days(store, since, until, offsets, plan)
        sums = held(store, since, until)
        days = _DayTotals()
        table = "proc_local_day" if plan.local else "proc_day"
        for start, end, _raw_end in plan.days:
            for t, gs, mbs, peak, idle, jobs in _rows(store, f"""
                    SELECT t, SUM(seconds), SUM({_c('memory_byte_seconds', 'byte_seconds')}),
                           MAX({_c('memory_max', 'bytes')}), SUM({_c('idle_seconds', 'seconds')}),
                           group_concat(DISTINCT job)
                    FROM {table} WHERE t >= ? AND t < ? AND {_DAY_KEYS} GROUP BY t""", (start, end)):
                days.add(_day_of(int(t), offsets), gs, mbs, peak, idle, jobs)
        if plan.cuts and store.quarter_totals:
            _settle_cuts(store, plan, days, offsets)
        # The rest: fine rows, hour sums, and of the days' parts the samples not summed yet.
        rest_sql, params = plan.sql(_PROC_FINE, _PROC_HOURS, days=_PROC_UNSUMMED)
        day = _day_sql(f"CAST(t / {_QUARTER} AS INTEGER) * {_QUARTER}", offsets)
        for number, gs, mbs, peak, idle, jobs in _rows(store, f"""
                SELECT {day} AS day, SUM(seconds), SUM(mbs), MAX(peak), SUM(idle), group_concat(DISTINCT job)
                FROM ({rest_sql}) GROUP BY day""", params):
            n = typed_int(number, "count")
            if n is not None:
                days.add(n, gs, mbs, peak, idle, jobs)
    return sums, days.usage()


def _settle_cuts(store: Store, plan: _Plan, days: _DayTotals, offsets: list[tuple[int, int]]) -> None:
    """The cut hours of `plan` (a reader in the recorder's zone, half an hour off UTC: its stored
    local days hold none of them) whose UTC day is wholly in the hours the plan reads from the sums
    and keeps one offset, settled from their quarters (schema 7, _add_quarters) and moved to
    `plan.settled`. Local midnight is the one in that UTC day: a pair whose first hour of the UTC
    day is before the cut hour is in the local day before it, one whose last is after it in the day
    after, whatever part of the plan reads those hours; only the pairs whose first or last hour it
    is are read from their rows in it."""
    pieces = plan.hours + plan.days
    first, end = min(p[0] for p in pieces), max(p[1] for p in pieces)
    changes = [begin for begin, _ in offsets[1:]]
    settle, left = [], []
    for lo, hi in plan.cuts:
        day = lo // DAY * DAY
        if hi == lo + HOUR and first <= day and day + DAY <= end and not any(day < b < day + DAY for b in changes):
            settle.append((day, lo))
        else:
            left.append((lo, hi))
    if not settle:
        return
    unsure: list[tuple[int, int, int]] = []
    # (The few rows found checked here: the tests in SQL would cost more than the scan of the days.)
    for cut, job_value, gpu_value in _temp_rows(store, "vram_cut_days (d INTEGER PRIMARY KEY, cut)", settle, """
            SELECT e.cut, x.job, x.gpu FROM temp.vram_cut_days e JOIN proc_day x ON x.t = e.d
            WHERE e.cut IN (x.first_hour, x.last_hour)"""):
        job, gpu = typed_int(job_value, "id"), typed_int(gpu_value, "gpu")
        if job is not None and gpu is not None:
            unsure.append((int(cut), job, gpu))
    _add_quarters(store, [lo for _day, lo in settle], unsure, days, offsets)
    plan.cuts, plan.settled = left, [(lo, float(lo + HOUR)) for _day, lo in settle]


# A day sums row's keys (the days --by day reads whole), as plain tests (as _DAY_SPAN_SUMS').
_DAY_KEYS = " AND ".join(of_kind(expr, kind) for expr, kind in (("t", "time"), ("seconds", "seconds"),
                                                                 ("job", "id"), ("gpu", "gpu")))


def _day_of(t: int, offsets: list[tuple[int, int]]) -> int:
    """The local day of time `t` as _day_sql numbers it (the offset in effect at its quarter hour)."""
    quarter = t // _QUARTER * _QUARTER
    offset = offsets[0][1]
    for begin, later in offsets[1:]:
        if quarter < begin:
            break
        offset = later
    return (quarter + offset + DAY) // DAY


class _DayTotals:
    """Sums per local day added from several parts: the peak as a maximum, process lives as the
    parts' lists of job ids (group_concat(DISTINCT job)), joined as sets only where a day has more
    than one (a life counts once a day whichever part it is in)."""

    def __init__(self) -> None:
        self.days: dict[int, list[Any]] = {}

    def add(self, number: int, gs: object, mbs: object, peak: object, idle: object, jobs: object) -> None:
        d = self.days.setdefault(number, [0.0, 0.0, None, 0.0, []])
        d[0] += _total(gs)
        d[1] += _total(mbs)
        p = typed_int(peak, "bytes")
        d[2] = d[2] if p is None else max(d[2] or 0, p)
        d[3] += _total(idle)
        if jobs:
            d[4].append(str(jobs))

    def usage(self) -> list[Usage]:
        return [Usage(_day_name(n), gs, mbs, peak, idle, _count(jobs))
                for n, (gs, mbs, peak, idle, jobs) in sorted(self.days.items())]


def _count(lists: list[str | set[str]]) -> int:
    """How many job ids the lists hold together (each list's ids are distinct already; a set: of
    _job_ids()). Lists the same as the first are that one (a day's two parts holding the same
    lives: the same group_concat, in the key's order), not split into sets."""
    if len(lists) > 1 and all(other == lists[0] for other in lists[1:]):
        lists = lists[:1]
    if len(lists) == 1:
        only = lists[0]
        return len(only) if isinstance(only, set) else only.count(",") + 1
    return len(_job_ids(lists))


def _day_name(number: int) -> str:
    """A day as _day_sql numbers it, as YYYY-MM-DD."""
    from datetime import date, timedelta

    return (date(1970, 1, 1) + timedelta(days=number - 1)).strftime("%Y-%m-%d")


def _local_days(store: Store, since: float, until: float, offsets: list[tuple[int, int]],
                plan: _Plan | None = None) -> list[Usage]:
    """usage(by="day") where local days are neither UTC days nor the recorder's.

    Each local day is cut into spans of whole hours (a few per day, from the zone's offsets; the
    hours local midnight cuts are left out). In each stored day wholly in the window (a UTC day of
    proc_day, or a local day of the recorder's, proc_local_day: whichever leaves fewer hours to
    read) the longest part is the stored day's sums less those of its other parts (_Derived), so
    only the other parts are read from the hour sums (an hour or two a day in Europe): through a
    temp table of spans joined to proc_hour's key, each span summed as SQLite reads it, in the
    key's order, with no sort and no per-row day arithmetic. The rest (the window's edges, the
    samples not summed yet, the rows of the hours local midnight cuts but those _add_totals settles
    from their quarters) is summed per day as before (_day_sql). The parts are added here: sums,
    the peak, and the process lives as sets of job ids (a life counts once a day whichever part it
    is in)."""
    # (`plan`: held_and_days' own, which found none of the recorder's days to read: the same.)
    plan = _plan(store, since, until, offsets, local_days=False) if plan is None else plan
    spans: list[tuple[int, float, float]] = []  # (day, lo, hi): the hour sums in [lo, hi) are of that day
    cuts = sorted(lo for lo, _ in plan.cuts)
    for first, end, _ in plan.hours:
        for number, lo, hi in _day_spans(offsets, math.floor(first), math.ceil(end)):
            spans.extend((number, max(a, first), min(b, end)) for a, b in _without_hours(lo, hi, cuts))
    derived: list[_Derived] = []
    days = _DayTotals()
    add = days.add
    if spans and store.hour_totals:
        # The cut hours it settles from their quarters are read row by row no more (only their
        # samples not summed yet, with the rest below).
        _add_totals(store, sorted(spans, key=lambda span: span[1]), days, plan, offsets)
        spans = []
    elif spans:
        spans, derived = _derive(store, spans, cuts, plan.hours[0][0], plan.hours[-1][1])
    # (local day, or None: an hour local midnight cuts, whose rows are summed below; the stored day
    # whose sums it is taken off, or None; lo; hi)
    reads: list[tuple[int | None, _Derived | None, float, float]] = [(n, None, lo, hi) for n, lo, hi in spans]
    for d in derived:
        reads.extend((other, d, lo, hi) for other, lo, hi in d.others)
    if reads:
        _rows(store, "DROP TABLE IF EXISTS temp.vram_day_spans", ())
        _rows(store, "CREATE TEMP TABLE vram_day_spans (id INTEGER PRIMARY KEY, lo, hi)", ())
        try:
            try:
                store.conn.executemany("INSERT INTO temp.vram_day_spans VALUES (?, ?, ?)",
                                       [(i, lo, hi) for i, (_n, _d, lo, hi) in enumerate(reads)])
            except sqlite3.Error as e:
                raise StoreError(describe(e, store.path), param="db") from None
            for i, gs, mbs, peak, idle, jobs in _rows(store, _DAY_SPAN_SUMS, ()):
                local, stored, _lo, _hi = reads[int(i)]
                if local is not None:
                    add(local, gs, mbs, peak, idle, jobs)
                if stored is not None:
                    stored.take_off(gs, mbs, peak, idle, jobs)
        finally:
            _rows(store, "DROP TABLE temp.vram_day_spans", ())
    rest_sql, params = plan.sql(_PROC_FINE, _PROC_UNSUMMED)
    day = _day_sql(f"CAST(t / {_QUARTER} AS INTEGER) * {_QUARTER}", offsets)
    for number, gs, mbs, peak, idle, jobs in _rows(store, f"""
            SELECT {day} AS day, SUM(seconds), SUM(mbs), MAX(peak), SUM(idle), group_concat(DISTINCT job)
            FROM ({rest_sql}) GROUP BY day""", params):
        n = typed_int(number, "count")
        if n is not None:
            add(n, gs, mbs, peak, idle, jobs)
    _add_derived(store, derived, days)
    return days.usage()


def _add_totals(store: Store, spans: list[tuple[int, float, float]], days: _DayTotals, plan: _Plan,
                offsets: list[tuple[int, int]]) -> None:
    """The spans (day, lo, hi) of the hour sums, sorted, added to their local days (schema 6): the
    sums and peak from hour_totals (a row per hour), the lives from the UTC day sums' first and
    last hours: a life is in the part of a day from its start to x when its first hour there is
    before x, in the part from x to its end when its last is at or after x. A part that is neither
    (the window's edges), or of a day whose sums lost hours to retention, is read from the hour sums.

    `plan.cuts`: the hours local midnight cuts ((lo, hi), in no span). From schema 7, one between
    the two parts of its UTC day read so (x = lo, the next from lo + HOUR) is settled here (moved
    to `plan.settled`): its sums and peak per local day from its quarters' totals, and its lives:
    those of the day's pairs whose first hour there is before it and last after it are in both
    days already, and of the others only the pairs whose first or last hour it is can be in it:
    their rows in it are read (a few seeks each)."""
    for i, gs, mbs, peak, idle in _temp_rows(store, "vram_day_spans (id INTEGER PRIMARY KEY, lo, hi)",
                                              [(i, lo, hi) for i, (_n, lo, hi) in enumerate(spans)], f"""
            SELECT s.id, SUM(h.seconds), SUM({_c('h.memory_byte_seconds', 'byte_seconds')}),
                   MAX({_c('h.memory_max', 'bytes')}), SUM({_c('h.idle_seconds', 'seconds')})
            FROM temp.vram_day_spans s JOIN hour_totals h ON h.t >= s.lo AND h.t < s.hi
            WHERE {of_kind('h.seconds', 'seconds')} GROUP BY s.id"""):
        days.add(spans[int(i)][0], gs, mbs, peak, idle, None)
    # Each UTC day's parts [number, lo, hi) (the two spans of a day with a change of offset in it are one).
    parts: dict[int, list[list[Any]]] = {}
    for number, lo, hi in spans:
        day = math.floor(lo / DAY) * DAY
        while lo < hi:
            b = min(hi, day + DAY)
            mine = parts.setdefault(day, [])
            if mine and mine[-1][0] == number and mine[-1][2] == lo:
                mine[-1][2] = b
            else:
                mine.append([number, lo, b])
            lo, day = b, day + DAY
    since = _rows(store, "SELECT value FROM meta WHERE key = 'hour_since'", ())
    hour_since = _meta_number(since[0][0]) if since else None
    ends: dict[int, list[Any]] = {}  # UTC day -> [day before x, x, day from y, y, the cut hour settled]
    direct: list[list[Any]] = []
    for day, mine in parts.items():
        whole = hour_since is None or day >= hour_since  # its day sums are of all its hours
        end = ends.setdefault(day, [None, None, None, None, None]) if whole else None
        for number, lo, hi in mine:
            if end is not None and lo == day and end[1] is None:
                end[0], end[1] = number, hi
            elif end is not None and hi == day + DAY and end[3] is None:
                end[2], end[3] = number, lo
            else:
                direct.append([number, lo, hi])
    left = []
    for lo, hi in plan.cuts:
        end = ends.get(lo // DAY * DAY) if store.quarter_totals else None
        if (end is not None and end[1] == lo and end[3] == lo + HOUR == hi and end[4] is None
                and {_day_of(q, offsets) for q in range(lo, lo + HOUR, _QUARTER)} <= {end[0], end[2]}):
            end[4] = lo
        else:
            left.append((lo, hi))
    settled = [end[4] for end in ends.values() if end[4] is not None]
    plan.cuts, plan.settled = left, [(lo, float(lo + HOUR)) for lo in settled]
    unsure: list[tuple[int, int, int]] = []  # (cut hour, job, GPU): a pair whose first or last hour it is
    for day, before, after, edge in _temp_rows(store, "vram_day_ends (d INTEGER PRIMARY KEY, upto, since, cut)",
                                               [(day, e[1], e[3], e[4]) for day, e in ends.items()], f"""
            SELECT e.d, group_concat(DISTINCT CASE WHEN x.first_hour < e.upto THEN x.job END),
                   group_concat(DISTINCT CASE WHEN x.last_hour >= e.since THEN x.job END),
                   group_concat(CASE WHEN x.first_hour = e.cut OR x.last_hour = e.cut THEN x.job || ':' || x.gpu END)
            FROM temp.vram_day_ends e JOIN proc_day x ON x.t = e.d
            WHERE {of_kind('x.job', 'id')} AND {of_kind('x.gpu', 'gpu')}
            AND {of_kind('x.first_hour', 'time')} AND {of_kind('x.last_hour', 'time')}
            GROUP BY e.d"""):
        end = ends[int(day)]
        if before:
            days.add(end[0], 0.0, 0.0, None, 0.0, before)
        if after:
            days.add(end[2], 0.0, 0.0, None, 0.0, after)
        for pair in str(edge).split(",") if edge else ():
            job, gpu = (int(n) if n.isdigit() else int(float(n)) for n in pair.split(":"))  # (a REAL id: "12.0")
            unsure.append((end[4], job, gpu))
    if settled:
        _add_quarters(store, settled, unsure, days, offsets)
    keys = " AND ".join(of_kind(e, k) for e, k in _HOUR_KEYS[1:])  # (a test of h.t: SQLite's range would be its)
    for number, lo, hi in direct:
        for (jobs,) in _rows(store, f"SELECT group_concat(DISTINCT h.job) FROM proc_hour h WHERE h.t >= ? AND h.t < ? "
                             f"AND {keys}", (lo, hi)):
            if jobs:
                days.add(number, 0.0, 0.0, None, 0.0, jobs)


# (tier, offset): where each rollup tier's buckets start in an hour.
_BUCKETS = ", ".join(f"({tier}, {k})" for tier in TIERS for k in range(0, HOUR, tier))


def _add_quarters(store: Store, cuts: list[int], unsure: list[tuple[int, int, int]], days: _DayTotals,
                  offsets: list[tuple[int, int]]) -> None:
    """The cut hours settled (_add_totals) into their local days: each quarter's totals into the
    day of the quarter (schema 7), and the lives of `unsure` (cut hour, job, GPU) into the day of
    each quarter they have a row in. Their rows are sought by key: a rollup row is at its bucket's
    start (every 15 or 1 minutes from the hour), a raw one through the samples' index by time."""
    for q, gs, mbs, peak, idle in _temp_rows(store, "vram_cuts (lo INTEGER PRIMARY KEY)", [(c,) for c in cuts], f"""
            SELECT q.t, q.seconds, {_c('q.memory_byte_seconds', 'byte_seconds')}, {_c('q.memory_max', 'bytes')},
                   {_c('q.idle_seconds', 'seconds')}
            FROM temp.vram_cuts c JOIN quarter_totals q ON q.t >= c.lo AND q.t < c.lo + {HOUR}
            WHERE {of_kind('q.seconds', 'seconds')}"""):
        days.add(_day_of(int(q), offsets), gs, mbs, peak, idle, None)
    lives: dict[int, set[str]] = {}
    rollup_keys = _keys(("r.t", "time"), ("r.seconds", "seconds"), ("r.job", "id"), ("r.gpu", "gpu"))
    for job, q in _temp_rows(store, "vram_unsure (c, job, gpu)", unsure, f"""
            WITH o(tier, k) AS (VALUES {_BUCKETS})
            SELECT u.job, CAST(r.t / {_QUARTER} AS INTEGER) * {_QUARTER}
            FROM temp.vram_unsure u JOIN o JOIN proc_rollup r ON r.tier = o.tier AND r.t = u.c + o.k AND r.job = u.job
                AND r.gpu = u.gpu
            WHERE {rollup_keys}
            UNION
            SELECT u.job, CAST(s.t / {_QUARTER} AS INTEGER) * {_QUARTER}
            FROM temp.vram_unsure u JOIN samples s ON s.t >= u.c AND s.t < u.c + {HOUR}
            JOIN proc_raw p ON p.sample = s.id AND p.job = u.job AND p.gpu = u.gpu
            WHERE {_PROC_RAW_KEYS}"""):
        lives.setdefault(_day_of(int(q), offsets), set()).add(str(int(job)))
    for number, jobs in lives.items():
        days.add(number, 0.0, 0.0, None, 0.0, ",".join(sorted(jobs)))


def _temp_rows(store: Store, table: str, rows: list[tuple[Any, ...]], sql: str) -> list[tuple[Any, ...]]:
    """The rows of `sql` over a temp table (`table`: its name and columns) holding `rows`, dropped after."""
    name = table.split()[0]
    if not rows:
        return []
    _rows(store, f"DROP TABLE IF EXISTS temp.{name}", ())
    _rows(store, f"CREATE TEMP TABLE {table}", ())
    try:
        try:
            store.conn.executemany(f"INSERT INTO temp.{name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        except sqlite3.Error as e:
            raise StoreError(describe(e, store.path), param="db") from None
        return _rows(store, sql, ())
    finally:
        _rows(store, f"DROP TABLE temp.{name}", ())


@dataclass
class _Derived:
    """A stored day from `t` on (a row per pair of `table`: proc_day or proc_local_day) wholly in
    the window, whose longest part, the hours [lo, hi) of local day `number`, is summed as the
    stored day's sums less its `others` parts' ((local day or None, lo, hi), read from the hour
    sums and taken off here: their sums, peak and job ids)."""

    table: str
    t: int
    number: int
    lo: float
    hi: float
    others: list[tuple[int | None, float, float]]
    seconds: float = 0.0
    mbs: float = 0.0
    idle: float = 0.0
    peak: int | None = None
    jobs: list[str] = field(default_factory=list)

    def take_off(self, gs: object, mbs: object, peak: object, idle: object, jobs: object) -> None:
        self.seconds += _total(gs)
        self.mbs += _total(mbs)
        self.idle += _total(idle)
        p = typed_int(peak, "bytes")
        if p is not None:
            self.peak = max(self.peak or 0, p)
        if jobs:
            self.jobs.append(str(jobs))

    def hours(self) -> list[int]:
        """The hours whose sums this part is (where the hour sums are keyed)."""
        return list(range(math.ceil(self.lo / HOUR) * HOUR, math.ceil(self.hi / HOUR) * HOUR, HOUR))


def _derive(store: Store, spans: list[tuple[int, float, float]], cuts: list[int], first: float,
            end: float) -> tuple[list[tuple[int, float, float]], list[_Derived]]:
    """`spans` as the spans still read from the hour sums and the parts of stored days summed from
    the stored day (_Derived), with the stored days (UTC or the recorder's local) that leave fewer
    hours to read. `cuts`: the hours local midnight cuts ([h, h + HOUR), in no span)."""
    choices: list[tuple[str, list[tuple[int, int]]]] = []
    # Only the stored days of hours there are (a window of centuries has a few years of them).
    low, high = _rows(store, f"SELECT (SELECT min(t) FROM proc_hour WHERE {of_kind('t', 'time')}), "
                      f"(SELECT max(t) FROM proc_hour WHERE {of_kind('t', 'time')})", ())[0]  # (one seek each)
    if typed(low, "time") is None or typed(high, "time") is None:
        return spans, []
    first, end = max(first, float(low)), min(end, float(high) + HOUR)
    if store.day_sums:
        choices.append(("proc_day", [(d, d + DAY) for d in range(math.ceil(first / DAY) * DAY,
                                                                  math.floor(end / DAY) * DAY, DAY)]))
    if store.local_days:
        stored: list[tuple[int, int]] = []
        for t, hi in _rows(store, f"SELECT t, hi FROM local_days WHERE t >= ? AND hi <= ? AND {of_kind('t', 'time')} "
                           f"AND {of_kind('hi', 'time')} ORDER BY t", (first, end)):
            if t == int(t) and hi == int(hi) and int(t) % HOUR == 0 and int(hi) % HOUR == 0 and t < hi:
                if not stored or stored[-1][1] <= t:  # (disjoint, as the recorder keeps them)
                    stored.append((int(t), int(hi)))
        choices.append(("proc_local_day", stored))
    best: tuple[float, list[tuple[int, float, float]], list[_Derived]] = (math.inf, spans, [])
    for table, bases in choices:
        direct, derived = _parts(table, spans, cuts, bases)
        read = sum(hi - lo for _, lo, hi in direct) + sum(hi - lo for d in derived for _, lo, hi in d.others)
        if derived and read < best[0]:
            best = (read, direct, derived)
    return best[1], best[2]


def _parts(table: str, spans: list[tuple[int, float, float]], cuts: list[int],
           bases: list[tuple[int, int]]) -> tuple[list[tuple[int, float, float]], list[_Derived]]:
    """`spans` cut at the edges of the stored days `bases` (sorted, disjoint): the parts still read
    from the hour sums, and per stored day that the spans and `cuts` fill, its longest part."""
    starts = [lo for lo, _ in bases]
    edges = sorted({x for base in bases for x in base})
    direct: list[tuple[int, float, float]] = []
    inside: dict[int, list[tuple[int, float, float]]] = {}
    for number, lo, hi in spans:
        i = bisect_right(edges, lo)
        while lo < hi:
            b = min(hi, edges[i]) if i < len(edges) else hi
            j = bisect_right(starts, lo) - 1
            if j >= 0 and b <= bases[j][1]:
                inside.setdefault(j, []).append((number, lo, b))
            else:
                direct.append((number, lo, b))
            lo, i = b, i + 1
    derived = []
    for j, pieces in inside.items():
        lo, hi = bases[j]
        cut = [(None, float(c), float(c + HOUR)) for c in cuts[bisect_left(cuts, lo):bisect_left(cuts, hi)]]
        if sum(b - a for _, a, b in pieces) + HOUR * len(cut) != hi - lo:  # not all of it in the window's hours
            direct.extend(pieces)
            continue
        longest = max(range(len(pieces)), key=lambda k: pieces[k][2] - pieces[k][1])
        number, a, b = pieces[longest]
        others: list[tuple[int | None, float, float]] = [*pieces[:longest], *pieces[longest + 1:], *cut]
        derived.append(_Derived(table, lo, number, a, b, others))
    return direct, derived


def _add_derived(store: Store, derived: list[_Derived], days: _DayTotals) -> None:
    """Each derived part's sums (its stored day's less its other parts') into its local day, once
    every other part of every day is in `days`. Its peak is the stored day's where that is above
    its other parts' (or where the day's peak is as high already); else the pair that holds it is
    looked for in the part's hours, and failing that the part's peak is read. Its lives: the
    stored day's not in its other parts, and of those in both, the ones in the part's hours."""
    by_table: dict[str, dict[int, _Derived]] = {}
    for d in derived:
        by_table.setdefault(d.table, {})[d.t] = d
    for table, parts in by_table.items():
        read: list[tuple[_Derived, tuple[Any, ...]]] = []
        for row in _rows(store, f"""
                SELECT t, SUM(seconds), SUM({_c('memory_byte_seconds', 'byte_seconds')}),
                       MAX({_c('memory_max', 'bytes')}), SUM({_c('idle_seconds', 'seconds')}),
                       group_concat(job), job, gpu
                FROM {table} WHERE t >= ? AND t <= ? AND {_DAY_KEYS} GROUP BY t""", (min(parts), max(parts))):
            part = parts.pop(int(row[0])) if row[0] == int(row[0]) and int(row[0]) in parts else None
            if part is not None:
                read.append((part, row))
        holding = _holding_rows(store, [d for d, _row in read])
        for d, (_t, gs, mbs, peak, idle, jobs, top_job, top_gpu) in read:
            if id(d) not in holding:  # its stored day's rows are all in its other parts
                continue
            known = days.days.get(d.number)
            lives = _lives_with(store, d, known[4] if known else [], str(jobs) if jobs else "")
            day = days.days.setdefault(d.number, [0.0, 0.0, None, 0.0, []])
            day[0] += max(0.0, _total(gs) - d.seconds)
            day[1] += max(0.0, _total(mbs) - d.mbs)
            day[3] += max(0.0, _total(idle) - d.idle)
            day[4] = lives
            top = typed_int(peak, "bytes")
            if top is not None and (d.peak is None or top > d.peak or (day[2] or 0) >= top):
                day[2] = max(day[2] or 0, top)
            elif top is not None:  # the stored day's peak is also in another part: is it in this one?
                found = _hours_max(store, d, top_job, top_gpu)
                found = top if found == top else _hours_max(store, d)
                if found is not None:
                    day[2] = max(day[2] or 0, found)
        for d in parts.values():  # no stored row: no hour either, or a damaged file (then the part's own hours)
            if d.jobs:
                _add_hours(store, d, days)


def _holding_rows(store: Store, parts: list[_Derived]) -> set[int]:
    """id() of each of `parts` that holds a row in the hour sums (one statement per 400)."""
    out: set[int] = set()
    keys = " AND ".join(of_kind(e, k) for e, k in _HOUR_KEYS[1:])
    for i in range(0, len(parts), 400):
        chunk = parts[i:i + 400]
        values = ", ".join(f"({k}, {d.lo!r}, {d.hi!r})" for k, d in enumerate(chunk))
        out.update(id(chunk[int(k)]) for (k,) in _rows(store, f"""
            WITH p(k, lo, hi) AS (VALUES {values})
            SELECT k FROM p WHERE EXISTS (SELECT 1 FROM proc_hour h WHERE h.t >= p.lo AND h.t < p.hi AND {keys})""",
            ()))
    return out


def _job_ids(lists: list[str] | list[str | set[str]]) -> set[str]:
    """The job ids of group_concat(job) lists (or sets of them), as text ("12"; a REAL id read as
    "12.0": "12")."""
    ids: set[str] = set()
    for text in lists:
        if isinstance(text, set):
            ids |= text
        else:
            ids.update(text.split(",") if "." not in text else (str(int(float(j))) for j in text.split(",") if j))
    ids.discard("")
    return ids


def _lives_with(store: Store, d: _Derived, known: list[str | set[str]], stored: str) -> list[str | set[str]]:
    """A local day's lists of job ids (`known`) with those of derived part `d` (that holds a row),
    as one set: the lives of its stored day (`stored`, group_concat) not in its other parts, and
    of those in both, the ones it holds."""
    if known == d.jobs:  # the same lives as the other parts' (Berlin: the hour before midnight, a day apart)
        return [_job_ids([stored, *d.jobs])]
    in_day, in_others, have = _job_ids([stored]), _job_ids(d.jobs), _job_ids(known)
    unsure = sorted(int(j) for j in (in_day & in_others) - have)
    have |= in_day - in_others
    hours = ",".join(map(str, d.hours()))
    keys = " AND ".join(of_kind(e, k) for e, k in _HOUR_KEYS)
    for i in range(0, len(unsure), 500):  # SQLite's bound-parameter limit
        ids = unsure[i:i + 500]
        have.update(str(int(j)) for (j,) in _rows(store, f"""
            SELECT DISTINCT h.job FROM proc_hour h WHERE h.t IN ({hours})
            AND h.job IN ({','.join('?' * len(ids))}) AND {keys}""", tuple(ids)))
    return [have] if have else []


def _hours_max(store: Store, d: _Derived, job: object = None, gpu: object = None) -> int | None:
    """The peak in the hour sums of derived part `d` (of one pair: `job`, `gpu`)."""
    keys = " AND ".join(of_kind(e, k) for e, k in _HOUR_KEYS)
    params: tuple[object, ...]
    if job is None:
        sql, params = (f"SELECT MAX({_c('h.memory_max', 'bytes')}) FROM proc_hour h WHERE h.t >= ? AND h.t < ? "
                       f"AND {keys}"), (d.lo, d.hi)
    else:
        sql, params = (f"SELECT MAX({_c('h.memory_max', 'bytes')}) FROM proc_hour h "
                       f"WHERE h.t IN ({','.join(map(str, d.hours()))}) AND h.job = ? AND h.gpu = ? AND {keys}",
                       (job, gpu))
    return typed_int(_rows(store, sql, params)[0][0], "bytes")


def _add_hours(store: Store, d: _Derived, days: _DayTotals) -> None:
    """Derived part `d` read from its hour sums after all."""
    keys = " AND ".join(of_kind(e, k) for e, k in _HOUR_KEYS)
    for gs, mbs, peak, idle, jobs in _rows(store, f"""
            SELECT SUM(h.seconds), SUM({_c('h.memory_byte_seconds', 'byte_seconds')}),
                   MAX({_c('h.memory_max', 'bytes')}), SUM({_c('h.idle_seconds', 'seconds')}),
                   group_concat(DISTINCT h.job)
            FROM proc_hour h WHERE h.t >= ? AND h.t < ? AND {keys}""", (d.lo, d.hi)):
        if gs is not None:
            days.add(d.number, gs, mbs, peak, idle, jobs)


def _day_spans(offsets: list[tuple[int, int]], start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(day, lo, hi): the rows in [lo, hi) are of that local day (as _day_sql numbers it), over
    [start, end). A row is in the day of its quarter hour: the quarters from x on are the rows from
    x rounded up to a quarter on."""
    def up(x: int) -> int:
        return -(-x // _QUARTER) * _QUARTER

    for i, (begin, offset) in enumerate(offsets):  # the first offset also holds before it began (as in _day_sql)
        stop = offsets[i + 1][0] if i + 1 < len(offsets) else end
        lo, seg_end = max(begin, start) if i else start, min(stop, end)
        while lo < seg_end:
            number = (lo + offset + DAY) // DAY
            hi = min(seg_end, number * DAY - offset)  # the next local midnight in this offset
            if up(lo) < up(hi):
                yield number, up(lo), up(hi)
            lo = hi


def _without_hours(lo: int, hi: int, hours: list[int]) -> Iterator[tuple[int, int]]:
    """[lo, hi) less the hours [h, h + HOUR) of `hours` (sorted): from the first that ends after lo
    (a day's spans against a year's cut hours)."""
    for k in range(bisect_right(hours, lo - HOUR), len(hours)):
        h = hours[k]
        if h >= hi:
            break
        if lo < h:
            yield lo, h
        lo = max(lo, h + HOUR)
    if lo < hi:
        yield lo, hi


def _day_sql(instant: str, offsets: list[tuple[int, int]]) -> str:
    """SQL: the local day of `instant` (whole unix seconds), as days since 1969-12-31 (so that
    every time from 1970 on, in any zone, is a positive number: SQLite's division truncates)."""
    offset = str(offsets[-1][1])
    if len(offsets) > 1:
        offset = ("(CASE " + " ".join(f"WHEN {instant} < {start} THEN {off}"
                                      for (_, off), (start, _) in zip(offsets, offsets[1:]))
                  + f" ELSE {offset} END)")
    return f"CAST(({instant} + {offset} + {DAY}) / {DAY} AS INTEGER)"


def _local_offsets(store: Store, since: float, until: float) -> list[tuple[int, int]]:
    """[(from, offset)]: the local zone's UTC offset (seconds) from each instant on, over the
    rows of [since, until) (the first entry's `from` is where the search began). A change is
    looked for every 6 hours, then found to the second: zones change their offset months apart."""
    import time

    low, high = _extent(store)
    first, last = low or 0.0, high or 0.0
    if math.isfinite(since):
        first = max(first, since)
    if math.isfinite(until):
        last = min(last, until)
    lo = int(first // HOUR * HOUR)
    hi = max(lo, math.ceil(last))

    def offset(t: int) -> int:
        return time.localtime(t).tm_gmtoff

    out = [(lo, offset(lo))]
    t = lo
    while t < hi:
        step = min(t + 6 * HOUR, hi)
        if offset(step) == out[-1][1]:
            t = step
            continue
        before, after = t, step  # the offset changes in (before, after]
        while after - before > 1:
            middle = (before + after) // 2
            before, after = (middle, after) if offset(middle) == out[-1][1] else (before, middle)
        out.append((after, offset(after)))
        t = after
    return out


def _extent(store: Store) -> tuple[float | None, float | None]:
    """The first and last time of any process row (raw, each rollup tier, the hour sums), each
    one seek in a key."""
    valid = f"t BETWEEN 0 AND {MAX_TIME!r}"
    sources = ["samples WHERE", *(f"proc_rollup WHERE tier = {tier} AND" for tier in TIERS)]
    if store.hour_sums:
        sources.append("proc_hour WHERE")
    ends = " UNION ALL ".join(f"SELECT {f}(t) AS t FROM {source} {valid}" for source in sources for f in ("min", "max"))
    row = _rows(store, f"SELECT min(t), max(t) FROM ({ends})", ())[0]
    return typed(row[0], "time"), typed(row[1], "time")


def _by_gpu(store: Store, since: float, until: float, sums: list[Held]) -> list[Usage]:
    """GPU-seconds of a GPU: the time any process held memory on it; peak: the GPU's own reading."""
    with read_transaction(store):
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
    for gpu_value, occupied, peak, util in gpus:
        gpu = typed_int(gpu_value, "gpu")
        if gpu is None:
            continue
        p = procs.get(gpu, Usage(""))
        out.append(Usage(f"GPU {gpu}", _total(occupied), p.memory_byte_seconds, typed_int(peak, "bytes"),
                         p.idle_seconds, len(members.get(gpu, ())), utilization=typed(util, "percent")))
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
    lives = _lives(store, set(top))
    out = []
    for j in top:
        life = lives.get(j)
        if life is None:
            continue
        u = per_job[j]
        out.append(Usage(life.key, u.gpu_seconds, idle_bytes[j], u.peak_memory, u.idle_seconds, 1,
                         workload=life.workload, user=life.user, pid=life.pid, command=life.command,
                         gpus=life.gpus, first_seen=life.first_seen, last_seen=life.last_seen,
                         nvml_pid=life.nvml_pid))
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
    with read_transaction(store):  # one read transaction, the schema checked first (process_lives)
        recorded: dict[tuple[int, int], float] = {}
        for b, gpu, seconds in _rows(store, f"""
                SELECT CAST((t - :since) / :step AS INTEGER) AS b, gpu, SUM(seconds) FROM {GPU_WINDOW}
                GROUP BY b, gpu""", window):
            if typed(b, "count") is not None and typed(gpu, "gpu") is not None:
                recorded[(int(b), int(gpu))] = _total(seconds)
        # Per job first (the join to `jobs` then touches one row per job and bucket, not per sample).
        held = _rows(store, f"""
            WITH per_job AS (
                SELECT CAST((t - :since) / :step AS INTEGER) AS b, gpu, job, SUM(memory * seconds) AS mbs
                FROM {PROC_WINDOW} GROUP BY b, gpu, job)
            SELECT b, gpu, coalesce(j.user, '?'), SUM(mbs) FROM per_job p JOIN jobs j ON j.id = p.job
            GROUP BY b, gpu, j.user""", window)
        gpus = sorted({gpu for _, gpu in recorded})
        memory: dict[int, dict[str, list[float | None]]] = {g: {} for g in gpus}
        for b_value, gpu_value, user, mbs in held:
            b, gpu = typed_int(b_value, "count"), typed_int(gpu_value, "gpu")
            if b is None or gpu is None:
                continue
            seconds = recorded.get((b, gpu), 0.0)
            if not 0 <= b < count or seconds <= 0:
                continue
            series = memory.setdefault(gpu, {}).setdefault(typed_text(user) or "?", [None] * count)
            series[b] = (series[b] or 0.0) + _total(mbs) / seconds
        # A recorded bucket where a user held nothing is 0, not a gap.
        for gpu, users in memory.items():
            for series in users.values():
                for b in range(count):
                    if series[b] is None and recorded.get((b, gpu), 0.0) > 0:
                        series[b] = 0.0
        totals: dict[int, int | None] = {}
        for g, m in _rows(store, "SELECT gpu, memory_total FROM gpus", ()):
            gpu = typed_int(g, "gpu")
            if gpu is not None:
                totals[gpu] = typed_int(m, "bytes") or None  # a total of 0 is no total
    return MemorySeries(since, float(step), count, memory, {g: totals.get(g) for g in memory})


def process_lives(store: Store, pid: int, outside: bool = False) -> list[ProcessLife]:
    """Every recorded life of `pid`, newest first, each with its memory over time per GPU. A life
    whose first or last time is not valid takes them from its points; without either it is left out.
    `outside`: `pid` is a host pid NVML listed for a holder outside this PID namespace (schema 5),
    never a pid of this /proc."""
    if outside and not store.local_days:
        return []
    lives = []
    # One read transaction, the schema checked as its first read (read_transaction): between two
    # statements outside one, the owner of another user's file could swap a table for a view.
    with read_transaction(store):
        extra, join = _workload_sql(store)
        last_seen, totals, added = _totals_sql(store)
        which = "pid = 0 AND nvml_pid = ?" if outside else "pid = ?"
        for row in _rows(store, f"SELECT jobs.id, user, command, first_seen, {last_seen}, gpus, peak_memory, "
                         f"{totals}{extra} FROM jobs{join}{added} WHERE {which}", (pid,)):
            job = typed_int(row[0], "id")
            if job is None:
                continue
            first, last = typed(row[3], "time"), typed(row[4], "time")
            # The rows of its life (a rollup bucket may start up to 15 minutes before its first sample).
            window = {"job": job, "since": 0.0 if first is None else max(0.0, first - 900),
                      "until": MAX_TIME if last is None else math.nextafter(last, math.inf)}
            points = [_point(r) for r in _rows(store, f"""
                SELECT t, seconds, gpu, memory, memory_max, sm_util, idle_seconds FROM {PROC_WINDOW}
                WHERE job = :job ORDER BY t, gpu""", window)]
            first = first if first is not None else points[0][0] if points else None
            last = last if last is not None else points[-1][0] if points else None
            if first is None or last is None:
                continue
            lives.append(ProcessLife(job, None if outside else pid, typed_text(row[1]), typed_text(row[2]), first, last,
                                     typed_gpus(row[5]), typed_int(row[6], "bytes"), typed(row[7], "seconds"),
                                     typed(row[8], "byte_seconds"), typed(row[9], "seconds"), points,
                                     _workload(row[10:]), pid if outside else None))
    lives.sort(key=lambda life: life.first_seen, reverse=True)
    return lives


def _point(row: tuple[Any, ...]) -> Point:
    """A row of PROC_WINDOW (its values already checked) as a point of a process's life."""
    t, seconds, gpu, memory, memory_max, sm_util, idle = row
    return (float(t), float(seconds), int(gpu), typed(memory, "bytes"), typed_int(memory_max, "bytes"),
            typed(sm_util, "percent"), float(typed(idle, "seconds") or 0.0))


def idle_since(store: Store, fresh_after: float) -> dict[tuple[int, int | None, int], float]:
    """(pid, start ticks, GPU) -> since when (unix time) it has held memory there idle without a
    break in recording, for the processes of the newest sample, if that sample is later than
    `fresh_after` (else {}: the recorder is not running, and its past says nothing about now).
    A row whose pid, start ticks, GPU or time is not valid is left out."""
    last = typed(_rows(store, f"SELECT max(t) FROM samples WHERE t BETWEEN 0 AND {MAX_TIME!r}", ())[0][0], "time")
    if last is None or last < fresh_after:
        return {}
    rows = _rows(store, """
        SELECT j.pid, j.start_ticks, h.gpu, h.idle_since FROM holding h JOIN jobs j ON j.id = h.job
        WHERE h.idle_since IS NOT NULL""", ())
    out: dict[tuple[int, int | None, int], float] = {}
    for pid_value, ticks_value, gpu_value, since_value in rows:
        pid, gpu, since = typed_int(pid_value, "pid"), typed_int(gpu_value, "gpu"), typed(since_value, "time")
        ticks = typed_int(ticks_value, "ticks")
        if pid is None or gpu is None or since is None or (ticks is None and ticks_value is not None):
            continue
        out[(pid, ticks, gpu)] = since
    return out
