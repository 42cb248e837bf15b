"""The recorder: a collector consumer that writes each snapshot into the history store.

Each snapshot is one transaction: its sample, its GPUs, its processes (matched to their process
life, a row of `jobs`), and the span of the sample before it, now known (see store.py). Nothing
is kept in memory that the database does not also have after the commit, so a recorder killed
at any instant leaves a database that opens, short of at most the last interval; a restarted
one continues the same jobs. A write that fails (the disk is full, a row of the wrong type) is
said once, the sample is dropped, and recording goes on; what was written before stays intact.
Values read back from the file (after a restart) are taken only when they have the type the
schema gives them: a row that does not is left alone, never trusted.

A database other users read (store.published) is copied for them by a Publisher thread every
`publish_every` seconds when something was written, and once more when the recorder closes.
"""

from __future__ import annotations

import math
import operator
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import RequestError
from ..gpu_state import GpuProcess, Snapshot
from ..i18n import _, ngettext
from .store import JOB_TOTALS_AFTER, WORKLOAD_COLUMNS, Retention, RollupError, Store, describe, open_error

COMMANDS = ("off", "name", "full")  # how much of a command line is kept
MAX_COMMAND = 1024
ROLLUP_EVERY = 60.0  # seconds of recording between rollups / retention passes: often, each a small part
FORGET_AFTER = 3600.0  # a job unseen this long is not matched again in memory (the database still is)
LAST_TIME = 253_402_300_799.0  # 9999-12-31 23:59:59 UTC: a stored time past it is not one
LONGEST_SPAN = 7 * 86400.0  # no recorder writes a longer span (max_gap of a day's interval is 3 days)
SAME_START = 1.0  # seconds: with unknown start ticks, a pid started within this of a job's start is that job
PUBLISH_EVERY = 60.0  # seconds between copies of a published database (when something changed)
COPY_SHARE = 10.0  # ... or this many times as long as the last copy took, if longer

# (pid, start ticks, user); a holder outside this PID namespace (store.py: schema 5) is
# (-host pid, None, None): never a pid of this /proc.
JobKey = tuple[int, "int | None", "str | None"]


@dataclass
class _Held:
    """What one process held on one GPU in the newest sample (credited when the next comes)."""

    job: int
    gpu: int
    memory: int | None
    idle: bool


@dataclass
class _Prev:
    """The newest sample, whose span is written when the next one comes. `mono` is its time on
    this run's monotonic clock; None for the last sample of a recorder that was killed, found
    when restarting (its span then comes from the wall clock, capped as any span is)."""

    sample: int
    mono: float | None
    wall: float
    held: list[_Held]
    # Its time was recorded already, by a run before this one (the clock was set back behind the
    # stored history): its span is written but not credited, so nothing is counted twice.
    covered: bool = False


@dataclass
class _Job:
    id: int
    last_seen: float
    gpus: frozenset[int] | set[int] = frozenset()  # replaced, never changed in place
    peak: int = 0
    gpu_list: str = ""  # `gpus` as the jobs table holds them ("0,3")
    # Its workload's columns as last written (None: resumed from the file, not compared yet), and
    # the Workload object they were read from: a process keeps its object while nothing about it
    # changes (gpu_state.Workload), so the columns are compared only when the object is another.
    workload: tuple[object, ...] | None = None
    seen: object = None


def _int(value: object) -> int | None:
    """A value the file holds as an integer, or None (a row of the wrong type is not trusted)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 62 else None


def _real(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _gpu_set(value: object) -> set[int] | None:
    """A job's GPU list ("0,3"), or None when it is not one."""
    if not isinstance(value, str) or len(value) > 4096:
        return None
    parts = [x for x in value.split(",") if x]
    if not all(x.isascii() and x.isdigit() and len(x) < 6 for x in parts):
        return None
    return {int(x) for x in parts}


def _job_row(row: tuple[object, ...] | None) -> _Job | None:
    """(id, last_seen, gpus, peak_memory) as the file holds them: a _Job, or None if wrong-typed."""
    if row is None:
        return None
    job, seen, gpus = _int(row[0]), _real(row[1]), _gpu_set(row[2])
    if job is None or seen is None or gpus is None:
        return None
    return _Job(job, seen, gpus, _int(row[3]) or 0, ",".join(map(str, sorted(gpus))))


def _write_changes(c: sqlite3.Connection, changed: Iterable[_Job]) -> None:
    """The peak and GPUs of the lives whose peak or GPUs changed in this sample (new ones too)."""
    c.executemany("UPDATE jobs SET peak_memory = max(peak_memory, ?), gpus = ? WHERE id = ?",
                  [(j.peak, j.gpu_list, j.id) for j in changed])


def _write_totals(c: sqlite3.Connection, added: dict[int, list[float]], last_seen: dict[int, float],
                  through: int) -> None:
    """One UPDATE per life: what its processes added to its totals (`added`: seconds, memory
    byte-seconds, idle seconds) and when it was last seen, since the totals were last written;
    `jobs` then holds every sample up to `through` (store.py: schema 8)."""
    nothing = (0.0, 0.0, 0.0)
    c.executemany("UPDATE jobs SET gpu_seconds = gpu_seconds + ?, memory_byte_seconds = memory_byte_seconds + ?, "
                  "idle_seconds = idle_seconds + ?, last_seen = coalesce(?, last_seen) WHERE id = ?",
                  [(*(added.get(job) or nothing), last_seen.get(job), job) for job in added.keys() | last_seen.keys()])
    c.execute("INSERT INTO meta (key, value) VALUES ('jobs_through', ?) ON CONFLICT(key) DO UPDATE "
              "SET value = excluded.value", (str(through),))


def _add_credit(into: dict[int, list[float]], credit: dict[int, list[float]]) -> None:
    for job, add in credit.items():
        was = into.get(job)
        if was is None:
            into[job] = add
        else:
            was[0] += add[0]
            was[1] += add[1]
            was[2] += add[2]


_WORKLOAD_NAMES = ", ".join(column for column, _k in WORKLOAD_COLUMNS)
# A life's row of `workloads`, written or, where there is one, filled in: a part not known before
# (the pod's name once the kubelet answers, a container's once its state file can be read) is
# written, a part already written stays (a process does not move to another container, pod or job).
_WORKLOAD_UPSERT = (f"INSERT INTO workloads (job, {_WORKLOAD_NAMES}) VALUES (?{', ?' * len(WORKLOAD_COLUMNS)}) "
                    "ON CONFLICT (job) DO UPDATE SET "
                    + ", ".join(f"{column} = coalesce({column}, excluded.{column})" for column, _k in WORKLOAD_COLUMNS))


_WORKLOAD_OF = operator.attrgetter(*(column for column, _k in WORKLOAD_COLUMNS))
_NO_WORKLOAD = (None,) * len(WORKLOAD_COLUMNS)


def _workload_values(p: GpuProcess) -> tuple[object, ...]:
    """The process's workload as the columns of `jobs` hold it (every one NULL: in none), as it is
    (compared every sample: one C call); _cut() bounds its text when it is written."""
    return _NO_WORKLOAD if p.workload is None else _WORKLOAD_OF(p.workload)


def _cut(values: tuple[object, ...]) -> tuple[object, ...]:
    """Text cut as a command is: a name from a runtime's state file is bounded already, this bounds the rest."""
    return tuple(v[:MAX_COMMAND] if isinstance(v, str) else v for v in values)


def _fill_workload(c: sqlite3.Connection, job: int, values: tuple[object, ...]) -> None:
    """Write a life's workload, or what of it was not known before (_WORKLOAD_UPSERT)."""
    c.execute(_WORKLOAD_UPSERT, (job, *_cut(values)))


def max_gap(interval: float) -> float:
    """Longer than this between two samples and the time between is not counted: the recorder
    was stopped, the machine slept, or the clock jumped."""
    return max(3 * interval, interval + 10)


class Recorder:
    # Of the device fields a reading may go without (backends.EXTRAS: power limit, fan, encoder and
    # decoder use) the history keeps none (gpu_raw, proc_raw): its Collector need not read them.
    EXTRAS: frozenset[str] = frozenset()

    def __init__(self, store: Store, interval: float, commands: str = "name",
                 retention: Retention | None = None, say: Callable[[str], None] | None = None,
                 publish_every: float = PUBLISH_EVERY):
        if commands not in COMMANDS:
            raise RequestError(f"commands: must be one of {', '.join(COMMANDS)}, got {commands!r}",
                               param="commands")
        self.store = store
        self.interval = interval
        self.gap = max_gap(interval)
        self.commands = commands
        self.retention = retention or Retention()
        self.say = say or (lambda line: None)
        self.samples = 0  # written
        self.dropped = 0  # not written (a failed write)
        self.commits = 0  # transactions committed (what a published copy follows)
        self._failing: str | None = None  # the failure being reported, said once
        self._rollup_failing: str | None = None  # the same for rollups (samples may still be written)
        self._prev: _Prev | None = None
        self._jobs: dict[JobKey, _Job] = {}
        self._last_rollup: float | None = None
        # What `jobs` lacks until the totals are next written (with each rollup, store.py: schema 8):
        # the credit of the samples since (job -> [seconds, memory byte-seconds, idle seconds]), and
        # the lives seen since (id -> the time of the newest sample each was in).
        self._unwritten_credit: dict[int, list[float]] = {}
        self._unwritten_seen: dict[int, float] = {}
        self._gpus: dict[int, tuple[str | None, str | None, int | None]] = {}
        self._idle_since: dict[tuple[int, int], float | None] = {}  # as in the table `holding`
        # wall - monotonic at the first sample (or the stored end's, when the clock starts far
        # ahead of it: _check_start): retention's "now" follows the monotonic clock, so a wall
        # clock that jumps a year ahead does not expire a year of history. _origin: the newest
        # offset of the wall clock, to say each jump once.
        self._first_origin: float | None = None
        self._origin: float | None = None
        # The stored history as found at start: the end of its newest recorded time (t + span),
        # the newest sample id, and the longest span (how far back a sample covering a time can
        # start). While this run's clock is behind that end (_behind_until), each sample's time is
        # looked up among the stored samples (_covered).
        self._stored_end: float | None = None
        self._stored_oldest: float | None = None  # the oldest time of any tier
        self._stored_id = 0
        self._stored_span = 0.0
        self._behind_until: float | None = None
        self._lost: set[int] = set()  # GPUs lost as of the newest snapshot, said once each
        try:
            self._resume()
        except sqlite3.Error as e:  # a file damaged past its first pages (or a failing disk: exit 1)
            raise open_error(e, store.path) from None
        self.publisher = (Publisher(store, publish_every, self.say, lambda: self.commits)
                          if store.published is not None else None)

    # ------------------------------------------------------------ consumer
    def __call__(self, snap: Snapshot) -> None:
        self.record(snap)

    def record(self, snap: Snapshot) -> None:
        mono = snap.monotonic if snap.monotonic is not None else time.monotonic()
        self._check_clock(snap.time, mono)
        self._check_lost(snap)
        assert self._first_origin is not None
        now = self._first_origin + mono
        # The totals are written just before each rollup, in the sample's transaction: raw rows are
        # never rolled up before `jobs` holds them, and a failed write leaves the rollup for later.
        totals_due = self._maintenance_due(now)
        try:
            with self.store.transaction() as c:
                unbroken, credit = self._credit_previous(c, mono, snap.time)
                continuing = {h.job for h in self._prev.held} if unbroken and self._prev else set()
                covered = self._covered(c, snap.time)
                sample = c.execute("INSERT INTO samples (t) VALUES (?)", (snap.time,)).lastrowid
                assert sample is not None
                self._write_gpus(c, sample, snap)
                seen, fresh, held = self._write_processes(c, sample, snap, continuing)
                _write_changes(c, fresh.values())
                if totals_due:
                    self._write_totals(c, credit, seen, snap.time, sample)
                idle_since = self._write_holding(c, held, snap.time, unbroken)
        except Exception as e:  # noqa: BLE001 - a write that fails for any reason is said, not fatal
            self.dropped += 1
            self._fail(self._why(e))
            return
        # Committed: only now does memory follow the database.
        self.commits += 1
        for job in seen:
            job.last_seen = snap.time
        self._jobs.update(fresh)
        if totals_due:
            self._unwritten_credit, self._unwritten_seen = {}, {}
        else:
            _add_credit(self._unwritten_credit, credit)
            self._unwritten_seen.update({job.id: snap.time for job in seen})
        self._prev = _Prev(sample, mono, snap.time, held, covered)
        self._idle_since = idle_since
        self.samples += 1
        if self._failing is not None:
            self.say(ngettext("recording again ({n} sample could not be written)",
                              "recording again ({n} samples could not be written)", self.dropped).format(
                                  n=self.dropped))
            self._failing = None
        if totals_due:
            self._maintain(now, snap.time)

    def _write_totals(self, c: sqlite3.Connection, credit: dict[int, list[float]], seen: list[_Job],
                      now: float | None, sample: int | None) -> None:
        """Write what `jobs` lacks: the credit since the totals were last written and this
        sample's (`credit`), and when each life seen since (`seen`: in this sample, at `now`) was
        last seen. `sample`: the sample being written (None: none, the recorder is closing)."""
        added = {job: list(add) for job, add in self._unwritten_credit.items()}
        _add_credit(added, credit)
        last_seen = dict(self._unwritten_seen)
        if now is not None:
            last_seen.update({j.id: now for j in seen})
        # Every sample before this one is credited now (its span is final).
        through = c.execute("SELECT coalesce(max(id), 0) FROM samples WHERE id < ?",
                            (sample if sample is not None else 1 << 62,)).fetchone()[0]
        _write_totals(c, added, last_seen, through)

    def _check_lost(self, snap: Snapshot) -> None:
        """Say once when a GPU is lost (its samples are kept, marked lost) and when it is back."""
        lost = {g.index for g in snap.gpus if g.lost}
        for gpu in sorted(lost - self._lost):
            why = next((g.error for g in snap.gpus if g.index == gpu and g.error), None)
            if why:
                self.say(_("GPU {index} is lost ({reason}); recording it as lost until it is back").format(
                    index=gpu, reason=_(why)))
            else:
                self.say(_("GPU {index} is lost; recording it as lost until it is back").format(index=gpu))
        for gpu in sorted(self._lost - lost):
            self.say(_("GPU {index} is back; recording it again").format(index=gpu))
        self._lost = lost

    def _check_clock(self, wall: float, mono: float) -> None:
        """Say once per jump that the wall clock moved apart from the monotonic one (spans come
        from the monotonic clock; only the samples' time stamps follow the wall clock)."""
        origin = wall - mono
        if self._origin is None:
            self._origin = self._first_origin = origin
            self._check_start(wall, mono)
            return
        jump = origin - self._origin
        if abs(jump) > self.gap:
            from ..units import format_duration

            line = (_("the system clock jumped ahead by {jump}; recorded time is measured on the monotonic clock, "
                      "so nothing is counted twice or lost") if jump > 0 else
                    _("the system clock jumped back by {jump}; recorded time is measured on the monotonic clock, "
                      "so nothing is counted twice or lost"))
            self.say(line.format(jump=format_duration(abs(jump))))
            self._origin = origin

    def _check_start(self, wall: float, mono: float) -> None:
        """The first sample's wall time against the stored history's end, said once. Ahead by
        more than the gap so far that retention would delete stored rows at once (a bad RTC
        before NTP, or a recorder stopped that long: the two look alike), retention counts from
        the stored end on the monotonic clock, so an unverified clock expires nothing; a shorter
        stop changes nothing. Behind it, this run's samples are checked against the stored ones
        (_covered)."""
        end, oldest = self._stored_end, self._stored_oldest
        if end is None:
            return
        from ..units import format_duration

        # (roll_up deletes 15-minute buckets that start before now - keep.quarter)
        if wall - end > self.gap and oldest is not None and oldest // 900 * 900 < wall - self.retention.quarter:
            self._first_origin = end - mono
            self.say(_("the system clock is {ahead} ahead of the newest recorded sample (recording stopped that "
                       "long, or the clock is wrong); retention counts from that sample until the next start, so "
                       "the clock alone expires no history").format(ahead=format_duration(wall - end)))
        elif wall < end:
            self._behind_until = end
            if end - wall >= 1:
                self.say(_("the system clock is {behind} behind the newest recorded sample; time recorded already "
                           "is not counted again until the clock passes it").format(
                               behind=format_duration(end - wall)))

    def _covered(self, c: sqlite3.Connection, wall: float) -> bool:
        """Whether a sample taken at `wall` falls in time a run before this one recorded: only
        while the clock is behind the stored end. A stored raw sample says exactly; past
        --keep-raw, a 1-minute or 15-minute row with recorded seconds covers its whole bucket
        (which it holds of it is not kept: at the seam, up to a bucket is left uncounted rather
        than counted twice)."""
        if self._behind_until is None:
            return False
        if wall >= self._behind_until:
            self._behind_until = None  # past the stored history: nothing more to look up
            return False
        if c.execute("SELECT 1 FROM samples WHERE t BETWEEN ? AND ? AND id <= ? AND t + span > ? LIMIT 1",
                     (wall - self._stored_span, wall, self._stored_id, wall)).fetchone() is not None:
            return True
        return any(c.execute("SELECT 1 FROM gpu_rollup WHERE tier = ? AND t = ? AND seconds > 0 LIMIT 1",
                             (tier, int(wall // tier * tier))).fetchone() is not None for tier in (60, 900))

    def close(self, now_monotonic: float | None = None) -> None:
        """Credit the newest sample with the time since it (as on SIGTERM), then close the store."""
        try:
            if self._prev is not None:
                mono = time.monotonic() if now_monotonic is None else now_monotonic
                with self.store.transaction() as c:
                    # (a resumed sample's span waits for a real next one)
                    credit = self._credit_previous(c, mono, None)[1] if self._prev.mono is not None else {}
                    self._write_totals(c, credit, [], None, None)
                self.commits += 1
                self._unwritten_credit, self._unwritten_seen = {}, {}
                self._prev = None
        except Exception as e:  # noqa: BLE001 - said; the store still closes
            self._fail(self._why(e))
        finally:
            try:
                if self.publisher is not None:
                    self.publisher.close()
            finally:
                self.store.close()

    # ------------------------------------------------------------ the writes
    def _credit_previous(self, c: sqlite3.Connection, mono: float,
                         wall: float | None) -> tuple[bool, dict[int, list[float]]]:
        """The previous sample stands for the time from it to now (capped): write its span, and
        say what its processes add to their jobs (job -> [seconds, memory byte-seconds, idle
        seconds], all its GPUs together: written with the totals). False when there was no
        previous sample or the time since it is a gap (recording was broken)."""
        if self._prev is None:
            return False, {}
        sample, held = self._prev.sample, self._prev.held
        if self._prev.mono is not None:
            span = mono - self._prev.mono
        else:  # resumed after a kill: only the wall clock spans the two runs
            span = (wall if wall is not None else self._prev.wall) - self._prev.wall
        unbroken = 0 <= span <= self.gap
        # A gap, or a clock that went back: not counted; nor time an earlier run recorded already.
        span = span if unbroken and not self._prev.covered else 0.0
        c.execute("UPDATE samples SET span = ? WHERE id = ?", (span, sample))
        credit: dict[int, list[float]] = {}
        for h in held:
            add = credit.get(h.job)
            if add is None:
                add = credit[h.job] = [0.0, 0.0, 0.0]
            add[0] += span
            add[1] += (h.memory or 0) * span
            if h.idle:
                add[2] += span
        return unbroken, credit

    def _write_holding(self, c: sqlite3.Connection, held: list[_Held], now: float,
                       unbroken: bool) -> dict[tuple[int, int], float | None]:
        """Keep `holding` as of this sample: (job, GPU) -> since when idle without a break (None:
        busy). Only changes are written. After a break in recording idle time starts over."""
        before = self._idle_since if unbroken else {}
        now_idle: dict[tuple[int, int], float | None] = {}
        for h in held:
            key = (h.job, h.gpu)
            since = before.get(key)
            now_idle[key] = (now if since is None else since) if h.idle else None
        if not unbroken:
            c.execute("DELETE FROM holding")
            stale = list(now_idle)
        else:
            c.executemany("DELETE FROM holding WHERE job = ? AND gpu = ?", [k for k in before if k not in now_idle])
            stale = [k for k, v in now_idle.items() if k not in before or before[k] != v]
        c.executemany("INSERT INTO holding (job, gpu, idle_since) VALUES (?, ?, ?) ON CONFLICT(job, gpu) "
                      "DO UPDATE SET idle_since = excluded.idle_since", [(*k, now_idle[k]) for k in stale])
        return now_idle

    def _write_gpus(self, c: sqlite3.Connection, sample: int, snap: Snapshot) -> None:
        rows = []
        for g in snap.gpus:
            facts = (g.uuid, g.name, g.memory_total)
            if g.memory_total is not None and self._gpus.get(g.index) != facts:
                c.execute("INSERT INTO gpus (gpu, uuid, name, memory_total) VALUES (?, ?, ?, ?) ON CONFLICT(gpu) "
                          "DO UPDATE SET uuid = excluded.uuid, name = excluded.name, memory_total = "
                          "excluded.memory_total", (g.index, *facts))
                self._gpus[g.index] = facts
            power = round(g.power_draw, 1) if g.power_draw is not None else None
            rows.append((sample, g.index, g.memory_used, g.memory_reserved, g.utilization, g.memory_utilization,
                         g.temperature, power, len(g.processes), int(g.lost)))
        c.executemany("INSERT INTO gpu_raw (sample, gpu, used, reserved, util, mem_util, temp, power, procs, lost) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def _command(self, p: GpuProcess) -> str | None:
        if self.commands == "off":
            return None
        text = p.name if self.commands == "name" else p.command
        return text[:MAX_COMMAND] if text else text

    def _write_processes(self, c: sqlite3.Connection, sample: int, snap: Snapshot,
                         continuing: set[int]) -> tuple[list[_Job], dict[JobKey, _Job], list[_Held]]:
        # One row per (process, GPU): a process in two MIG instances of one GPU is summed.
        per: dict[tuple[JobKey, int], tuple[GpuProcess, int | None, int | None, bool]] = {}
        for dev in snap.gpus:
            for p in dev.processes:
                key: JobKey
                if p.nvml_pid is not None and p.pid_here is None:
                    # Inside a container, a holder NVML lists under a host pid no process here could
                    # be told to be (pidmap.py): a life of its own, by that host pid, which may be
                    # the number of another process here: kept apart (pid 0, nvml_pid in `jobs`).
                    key = (-p.nvml_pid, None, None)
                else:
                    key = (p.pid, p.start_ticks, p.user)
                was = per.get((key, dev.index))
                if was is None:
                    per[(key, dev.index)] = (p, p.memory, p.sm_utilization, p.idle)
                else:
                    memory = None if was[1] is None or p.memory is None else was[1] + p.memory
                    per[(key, dev.index)] = (p, memory, was[2], was[3] and p.idle)
        # This sample's jobs. A job kept in memory is changed only after the commit (memory follows
        # the database): one whose GPUs, peak or workload change here is a copy, in `fresh` with the
        # lives new to memory (their peak and GPUs are written: _write_changes), which replace the kept.
        known = self._jobs
        seen: dict[JobKey, _Job] = {}
        fresh: dict[JobKey, _Job] = {}

        def own(key: JobKey, job: _Job) -> _Job:
            if key in fresh:
                return job
            copy = seen[key] = fresh[key] = _Job(job.id, snap.time, job.gpus, job.peak, job.gpu_list, job.workload,
                                                 job.seen)
            return copy
        held: list[_Held] = []
        rows = []
        for (key, gpu), (p, memory, sm, idle) in per.items():
            job = seen.get(key)
            if job is None:
                job = seen[key] = self._job(c, key, p, snap.time, continuing)
                if job is not known.get(key):  # new, or found in the file: not in memory yet
                    job.last_seen = snap.time
                    fresh[key] = job
                if p.workload is not job.seen or job.workload is None:
                    values = _workload_values(p)
                    if values != job.workload:
                        if values != _NO_WORKLOAD:  # more is known, or resumed
                            _fill_workload(c, job.id, values)
                        job = own(key, job)
                        job.workload = values
                    job.seen = p.workload  # (the same values: only which object holds them)
            if gpu not in job.gpus:
                job = own(key, job)
                job.gpus = job.gpus | {gpu}
                job.gpu_list = ",".join(map(str, sorted(job.gpus)))
            if memory is not None and memory > job.peak:
                job = own(key, job)
                job.peak = memory
            rows.append((sample, job.id, gpu, memory, sm, int(idle)))
            held.append(_Held(job.id, gpu, memory, idle))
        c.executemany("INSERT INTO proc_raw (sample, job, gpu, memory, sm_util, idle) VALUES (?, ?, ?, ?, ?, ?)", rows)
        return list(seen.values()), fresh, held

    def _job(self, c: sqlite3.Connection, key: JobKey, p: GpuProcess, now: float, continuing: set[int]) -> _Job:
        """The job this process is: one seen in memory, one the database has from before a
        restart (the same pid and start ticks; with unknown ticks, the same start time, or if that
        is unknown too, seen within the gap), or new.
        With unknown ticks a pid seen in the previous, unbroken sample is the same life whatever
        the wall clock did in between; one seen longer ago only if within the gap."""
        known = self._jobs.get(key)
        if known is not None and (key[1] is not None or known.id in continuing
                                  or abs(now - known.last_seen) <= self.gap):
            return known
        pid, ticks, user = key
        if pid < 0:  # a holder outside this PID namespace: the same life while seen without a gap
            row = c.execute("SELECT id, last_seen, gpus, peak_memory FROM jobs WHERE pid = 0 AND nvml_pid = ? "
                            "AND last_seen >= ? ORDER BY id DESC LIMIT 1", (-pid, now - self.gap)).fetchone()
        elif ticks is not None:
            row = c.execute("SELECT id, last_seen, gpus, peak_memory FROM jobs WHERE pid = ? AND start_ticks = ? "
                            "ORDER BY id DESC LIMIT 1", (pid, ticks)).fetchone()
        elif p.start_time is not None:  # the start time tells lives apart over any gap (a lost GPU)
            row = c.execute("SELECT id, last_seen, gpus, peak_memory FROM jobs WHERE pid = ? AND start_ticks IS NULL "
                            "AND user IS ? AND abs(start_time - ?) <= ? ORDER BY id DESC LIMIT 1",
                            (pid, user, p.start_time, SAME_START)).fetchone()
        else:
            row = c.execute("SELECT id, last_seen, gpus, peak_memory FROM jobs WHERE pid = ? AND start_ticks IS NULL "
                            "AND user IS ? AND last_seen >= ? ORDER BY id DESC LIMIT 1",
                            (pid, user, now - self.gap)).fetchone()
        found = _job_row(row)
        if found is not None:
            return found
        workload = _workload_values(p)
        job_id = c.execute(
            "INSERT INTO jobs (pid, nvml_pid, start_ticks, start_time, user, uid, command, container, first_seen, "
            "last_seen, gpus) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '')",
            (0, -pid, None, None, None, None, None, None, now, now) if pid < 0 else
            (pid, None, ticks, p.start_time, user, p.uid, self._command(p), p.container, now, now)).lastrowid
        assert job_id is not None
        if workload != _NO_WORKLOAD:
            _fill_workload(c, job_id, workload)
        return _Job(job_id, now, workload=workload, seen=p.workload)

    # ------------------------------------------------------------ upkeep
    def _resume(self) -> None:
        """After a restart: the jobs seen in the last recorded sample can be continued. If that
        sample was never credited (the recorder was killed), it is the previous sample again: the
        first new one credits it (from the wall clock, capped) and idle times go on."""
        c = self.store.conn
        # What a recorder killed between two writes of the totals left in raw rows only: written
        # with this one's first totals (a write now could fail on a full disk and stop the start).
        for job, seconds, memory_seconds, idle, seen in c.execute(JOB_TOTALS_AFTER).fetchall():
            if _int(job) is not None:
                self._unwritten_credit[job] = [_real(seconds) or 0.0, _real(memory_seconds) or 0.0, _real(idle) or 0.0]
                if _real(seen) is not None:
                    self._unwritten_seen[job] = seen
        last = c.execute("SELECT id, t, span FROM samples ORDER BY id DESC LIMIT 1").fetchone()
        if last is None:
            return
        # The history's end in time (a clock set back before may have written a newer sample
        # before an older one) and the oldest time any tier holds: one seek in samples_t, and in
        # each tier's key; numbers only, as the file may hold any.
        end = c.execute("SELECT t, span FROM samples WHERE t BETWEEN 0 AND ? ORDER BY t DESC LIMIT 1",
                        (LAST_TIME,)).fetchone()
        longest = c.execute("SELECT max(span) FROM samples WHERE typeof(span) IN ('integer', 'real') "
                            "AND span BETWEEN 0 AND ?", (LONGEST_SPAN,)).fetchone()[0]
        tiers = " UNION ALL ".join(f"SELECT min(t) AS t FROM {table} WHERE tier = {tier} AND t BETWEEN 0 AND :last"
                                   for table in ("gpu_rollup", "proc_rollup") for tier in (60, 900))
        self._stored_oldest = _real(c.execute(f"SELECT min(t) FROM (SELECT min(t) AS t FROM samples WHERE t BETWEEN "
                                              f"0 AND :last UNION ALL {tiers})", {"last": LAST_TIME}).fetchone()[0])
        if end is not None and _real(end[0]) is not None and _int(last[0]) is not None:
            end_span = _real(end[1])
            self._stored_end = end[0] + (end_span if end_span is not None and 0 <= end_span <= LONGEST_SPAN else 0.0)
            self._stored_id = last[0]
            self._stored_span = _real(longest) or 0.0
        sample, t, span = _int(last[0]), _real(last[1]), last[2]
        if sample is None or t is None:
            return  # not a sample this recorder could continue from: start afresh
        for row in c.execute("SELECT jobs.id, pid, start_ticks, user, t.last_seen, gpus, peak_memory, nvml_pid "
                             "FROM jobs JOIN job_totals t ON t.id = jobs.id WHERE t.last_seen >= ?", (t - self.gap,)):
            job, pid, ticks, user = _job_row((row[0], row[4], row[5], row[6])), _int(row[1]), row[2], row[3]
            if pid == 0:  # a holder outside this PID namespace, by its host pid
                host = _int(row[7])
                pid, ticks, user = (-host if host is not None and host > 0 else None), None, None
            if job is None or pid is None or (ticks is not None and _int(ticks) is None) \
                    or not (user is None or isinstance(user, str)):
                continue
            self._jobs[(pid, ticks, user)] = job
        if span:
            return  # stopped cleanly: the time since is downtime
        held = []
        for job_id, gpu, memory, idle in c.execute("SELECT job, gpu, memory, idle FROM proc_raw WHERE sample = ?",
                                                   (sample,)):
            if _int(job_id) is not None and _int(gpu) is not None:
                held.append(_Held(job_id, gpu, _int(memory), idle == 1))
        self._prev = _Prev(sample, None, t, held)
        self._idle_since = {(job, gpu): _real(since) for job, gpu, since in c.execute(
            "SELECT job, gpu, idle_since FROM holding") if _int(job) is not None and _int(gpu) is not None}

    def _maintenance_due(self, now: float) -> bool:
        return self._last_rollup is None or not 0 <= now - self._last_rollup < ROLLUP_EVERY

    def _maintain(self, now: float, wall: float) -> None:
        """Roll up and expire by `now` (retention's clock); forget jobs by `wall`, the clock their
        last_seen is of (retention's may count from the stored history's end: _check_start)."""
        self._last_rollup = now
        try:
            try:
                self.store.roll_up(now, self.retention)
            finally:
                self.commits += 1  # (a failed step leaves the others' commits)
            # Forget jobs not seen for a while, and any the size bound removed from the database.
            ids = ",".join(str(j.id) for j in self._jobs.values())
            kept = {row[0] for row in self.store.conn.execute(f"SELECT id FROM jobs WHERE id IN ({ids})")}
        except Exception as e:  # noqa: BLE001 - said once; recording goes on, the next pass retries
            self._fail_rollup(e)
            return
        if self._rollup_failing is not None:
            self.say(_("the history is rolled up again"))
            self._rollup_failing = None
        self._jobs = {k: j for k, j in self._jobs.items() if j.id in kept and abs(wall - j.last_seen) <= FORGET_AFTER}

    def _fail_rollup(self, e: Exception) -> None:
        """Say once what a failed rollup means: samples are still written (record() says when
        they are not)."""
        if isinstance(e, RollupError) and e.sums:
            line = _("{error}: the hour sums could not be updated; samples are still recorded, raw samples are kept "
                     "for twice --keep-raw and then rolled up without the sums (reports read those rows instead, "
                     "slower); retrying every rollup")
        else:
            line = _("{error}: the history could not be rolled up; samples are still recorded, but old rows are not "
                     "rolled up or removed as retention says; retrying every rollup")
        line = line.format(error=self._why(e.error if isinstance(e, RollupError) else e))
        if self._rollup_failing != line:
            self.say(line)
            self._rollup_failing = line

    def _why(self, e: Exception) -> str:
        if isinstance(e, sqlite3.Error):
            return describe(e, self.store.path)
        return f"{self.store.path}: {type(e).__name__}: {' '.join(str(e).split())[:200]}"

    def _fail(self, line: str) -> None:
        if self._failing != line:
            self.say(_("{error}: samples are not being recorded (what was recorded is intact); retrying every "
                       "interval").format(error=line))
            self._failing = line


class Publisher:
    """Copies a store's live database to its published name (Store.publish) in a thread of its
    own, so the copy never delays a sample: at once, then every `every` seconds (or ten times as
    long as the last copy took, if longer) when `changes()` moved, and once more at close. A copy
    that fails is said once (other users then read the copy before); recording is not touched."""

    def __init__(self, store: Store, every: float, say: Callable[[str], None], changes: Callable[[], int]):
        self.store = store
        self.every = every
        self.say = say
        self.changes = changes
        self.copies = 0
        self._done: int | None = None  # changes() as of the newest copy
        self._failing: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vram-publish", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            began = time.monotonic()
            self.publish()
            # A large history takes seconds to copy: wait ten times as long as the copy took, if
            # that is longer, so that copying takes at most a tenth of one core.
            if self._stop.wait(max(self.every, COPY_SHARE * (time.monotonic() - began))):
                return

    def publish(self) -> None:
        with self._lock:
            changes = self.changes()
            if changes == self._done:
                return
            try:
                self.store.publish()
            except (OSError, sqlite3.Error) as e:
                line = (describe(e, self.store.path) if isinstance(e, sqlite3.Error)
                        else f"{e.filename or self.store.published}: {e.strerror or e}")
                if line != self._failing:
                    self.say(_("cannot publish the history for other users ({error}); they read the copy before, "
                               "and it is tried again").format(error=line))
                    self._failing = line
                return
            self._done = changes
            self.copies += 1
            if self._failing is not None:
                self.say(_("published the history for other users again at {path}").format(path=self.store.published))
                self._failing = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.publish()
