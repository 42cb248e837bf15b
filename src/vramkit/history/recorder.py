"""The recorder: a collector consumer that writes each snapshot into the history store.

Each snapshot is one transaction: its sample, its GPUs, its processes (matched to their process
life, a row of `jobs`), and the span of the sample before it, now known (see store.py). Nothing
is kept in memory that the database does not also have after the commit, so a recorder killed
at any instant leaves a database that opens, short of at most the last interval; a restarted
one continues the same jobs. A write that fails (the disk is full) is said once, the sample is
dropped, and recording goes on; what was written before stays intact.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import RequestError
from ..model import GpuProcess, Snapshot
from .store import Retention, Store, StoreError, describe

COMMANDS = ("off", "name", "full")  # how much of a command line is kept
MAX_COMMAND = 1024
ROLLUP_EVERY = 300.0  # seconds of recording between rollups / retention passes
FORGET_AFTER = 3600.0  # a job unseen this long is not matched again in memory (the database still is)
SAME_START = 1.0  # seconds: with unknown start ticks, a pid started within this of a job's start is that job

JobKey = tuple[int, "int | None", "str | None"]  # (pid, start ticks, user)


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


@dataclass
class _Job:
    id: int
    last_seen: float
    gpus: set[int] = field(default_factory=set)
    peak: int = 0


def max_gap(interval: float) -> float:
    """Longer than this between two samples and the time between is not counted: the recorder
    was stopped, the machine slept, or the clock jumped."""
    return max(3 * interval, interval + 10)


class Recorder:
    def __init__(self, store: Store, interval: float, commands: str = "name",
                 retention: Retention | None = None, say: Callable[[str], None] | None = None):
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
        self._failing: str | None = None  # the failure being reported, said once
        self._prev: _Prev | None = None
        self._jobs: dict[JobKey, _Job] = {}
        self._last_rollup: float | None = None
        self._gpus: dict[int, tuple[str | None, str | None, int | None]] = {}
        self._idle_since: dict[tuple[int, int], float | None] = {}  # as in the table `holding`
        # wall - monotonic at the first sample: retention's "now" follows the monotonic clock, so a
        # wall clock that jumps a year ahead does not expire a year of history. _origin: the
        # newest offset, to say each jump once.
        self._first_origin: float | None = None
        self._origin: float | None = None
        self._lost: set[int] = set()  # GPUs lost as of the newest snapshot, said once each
        try:
            self._resume()
        except sqlite3.Error as e:  # a file damaged past its first pages
            raise StoreError(describe(e, store.path), param="db") from None

    # ------------------------------------------------------------ consumer
    def __call__(self, snap: Snapshot) -> None:
        self.record(snap)

    def record(self, snap: Snapshot) -> None:
        mono = snap.monotonic if snap.monotonic is not None else time.monotonic()
        self._check_clock(snap.time, mono)
        self._check_lost(snap)
        try:
            with self.store.transaction() as c:
                unbroken = self._credit_previous(c, mono, snap.time)
                continuing = {h.job for h in self._prev.held} if unbroken and self._prev else set()
                sample = c.execute("INSERT INTO samples (t) VALUES (?)", (snap.time,)).lastrowid
                assert sample is not None
                self._write_gpus(c, sample, snap)
                new_jobs, held = self._write_processes(c, sample, snap, continuing)
                idle_since = self._write_holding(c, held, snap.time, unbroken)
        except sqlite3.Error as e:
            self.dropped += 1
            self._fail(describe(e, self.store.path))
            return
        # Committed: only now does memory follow the database.
        self._jobs.update(new_jobs)
        self._prev = _Prev(sample, mono, snap.time, held)
        self._idle_since = idle_since
        self.samples += 1
        if self._failing is not None:
            self.say(f"recording again ({self.dropped} sample{'s' if self.dropped != 1 else ''} "
                     "could not be written)")
            self._failing = None
        assert self._first_origin is not None
        self._maintain(self._first_origin + mono)

    def _check_lost(self, snap: Snapshot) -> None:
        """Say once when a GPU is lost (its samples are kept, marked lost) and when it is back."""
        lost = {g.index for g in snap.gpus if g.lost}
        for gpu in sorted(lost - self._lost):
            why = next((g.error for g in snap.gpus if g.index == gpu and g.error), None)
            self.say(f"GPU {gpu} is lost{f' ({why})' if why else ''}; recording it as lost until it is back")
        for gpu in sorted(self._lost - lost):
            self.say(f"GPU {gpu} is back; recording it again")
        self._lost = lost

    def _check_clock(self, wall: float, mono: float) -> None:
        """Say once per jump that the wall clock moved apart from the monotonic one (spans come
        from the monotonic clock; only the samples' time stamps follow the wall clock)."""
        origin = wall - mono
        if self._origin is None:
            self._origin = self._first_origin = origin
            return
        jump = origin - self._origin
        if abs(jump) > self.gap:
            from ..units import format_duration

            self.say(f"the system clock jumped {'ahead' if jump > 0 else 'back'} by {format_duration(abs(jump))}; "
                     "recorded time is measured on the monotonic clock, so nothing is counted twice or lost")
            self._origin = origin

    def close(self, now_monotonic: float | None = None) -> None:
        """Credit the newest sample with the time since it (as on SIGTERM), then close the store."""
        try:
            if self._prev is not None:
                mono = time.monotonic() if now_monotonic is None else now_monotonic
                if self._prev.mono is not None:  # (a resumed sample waits for a real next one)
                    with self.store.transaction() as c:
                        self._credit_previous(c, mono, None)
                self._prev = None
        except sqlite3.Error as e:
            self._fail(describe(e, self.store.path))
        finally:
            self.store.close()

    # ------------------------------------------------------------ the writes
    def _credit_previous(self, c: sqlite3.Connection, mono: float, wall: float | None) -> bool:
        """The previous sample stands for the time from it to now (capped): write its span and
        add its processes' time to their jobs. False when there was no previous sample or the
        time since it is a gap (recording was broken)."""
        if self._prev is None:
            return False
        sample, held = self._prev.sample, self._prev.held
        if self._prev.mono is not None:
            span = mono - self._prev.mono
        else:  # resumed after a kill: only the wall clock spans the two runs
            span = (wall if wall is not None else self._prev.wall) - self._prev.wall
        unbroken = 0 <= span <= self.gap
        span = span if unbroken else 0.0  # a gap, or a clock that went back: not counted
        c.execute("UPDATE samples SET span = ? WHERE id = ?", (span, sample))
        c.executemany("UPDATE jobs SET gpu_seconds = gpu_seconds + ?, memory_byte_seconds = "
                      "memory_byte_seconds + ?, idle_seconds = idle_seconds + ? WHERE id = ?",
                      [(span, (h.memory or 0) * span, span if h.idle else 0.0, h.job) for h in held])
        return unbroken

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
                         continuing: set[int]) -> tuple[dict[JobKey, _Job], list[_Held]]:
        # One row per (process, GPU): a process in two MIG instances of one GPU is summed.
        per: dict[tuple[JobKey, int], tuple[GpuProcess, int | None, int | None, bool]] = {}
        for dev in snap.gpus:
            for p in dev.processes:
                key: JobKey = (p.pid, p.start_ticks, p.user)
                was = per.get((key, dev.index))
                if was is None:
                    per[(key, dev.index)] = (p, p.memory, p.sm_utilization, p.idle)
                else:
                    memory = None if was[1] is None or p.memory is None else was[1] + p.memory
                    per[(key, dev.index)] = (p, memory, was[2], was[3] and p.idle)
        changed: dict[JobKey, _Job] = {}
        held: list[_Held] = []
        rows = []
        for (key, gpu), (p, memory, sm, idle) in per.items():
            job = changed.get(key)
            if job is None:
                base = self._job(c, key, p, snap.time, continuing)
                job = changed[key] = _Job(base.id, snap.time, set(base.gpus), base.peak)
            job.gpus.add(gpu)
            job.peak = max(job.peak, memory or 0)
            rows.append((sample, job.id, gpu, memory, sm, int(idle)))
            held.append(_Held(job.id, gpu, memory, idle))
        c.executemany("INSERT INTO proc_raw (sample, job, gpu, memory, sm_util, idle) VALUES (?, ?, ?, ?, ?, ?)", rows)
        c.executemany("UPDATE jobs SET last_seen = ?, peak_memory = max(peak_memory, ?), gpus = ? WHERE id = ?",
                      [(snap.time, j.peak, ",".join(map(str, sorted(j.gpus))), j.id) for j in changed.values()])
        return changed, held

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
        if ticks is not None:
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
        if row is not None:
            return _Job(row[0], row[1], {int(x) for x in row[2].split(",") if x}, row[3])
        job_id = c.execute(
            "INSERT INTO jobs (pid, start_ticks, start_time, user, uid, command, container, first_seen, "
            "last_seen, gpus) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '')",
            (pid, ticks, p.start_time, user, p.uid, self._command(p), p.container, now, now)).lastrowid
        assert job_id is not None
        return _Job(job_id, now)

    # ------------------------------------------------------------ upkeep
    def _resume(self) -> None:
        """After a restart: the jobs seen in the last recorded sample can be continued. If that
        sample was never credited (the recorder was killed), it is the previous sample again: the
        first new one credits it (from the wall clock, capped) and idle times go on."""
        c = self.store.conn
        last = c.execute("SELECT id, t, span FROM samples ORDER BY id DESC LIMIT 1").fetchone()
        if last is None:
            return
        sample, t, span = last
        for job_id, pid, ticks, user, seen, gpus, peak in c.execute(
                "SELECT id, pid, start_ticks, user, last_seen, gpus, peak_memory FROM jobs WHERE last_seen >= ?",
                (t - self.gap,)):
            self._jobs[(pid, ticks, user)] = _Job(job_id, seen, {int(x) for x in gpus.split(",") if x}, peak)
        if span:
            return  # stopped cleanly: the time since is downtime
        held = [_Held(job, gpu, memory, bool(idle)) for job, gpu, memory, idle in c.execute(
            "SELECT job, gpu, memory, idle FROM proc_raw WHERE sample = ?", (sample,))]
        self._prev = _Prev(sample, None, float(t), held)
        self._idle_since = {(job, gpu): since for job, gpu, since in c.execute(
            "SELECT job, gpu, idle_since FROM holding")}

    def _maintain(self, now: float) -> None:
        if self._last_rollup is not None and 0 <= now - self._last_rollup < ROLLUP_EVERY:
            return
        self._last_rollup = now
        try:
            self.store.roll_up(now, self.retention)
            # Forget jobs not seen for a while, and any the size bound removed from the database.
            ids = ",".join(str(j.id) for j in self._jobs.values())
            kept = {row[0] for row in self.store.conn.execute(f"SELECT id FROM jobs WHERE id IN ({ids})")}
        except sqlite3.Error as e:
            self._fail(describe(e, self.store.path))
            return
        self._jobs = {k: j for k, j in self._jobs.items() if j.id in kept and abs(now - j.last_seen) <= FORGET_AFTER}

    def _fail(self, line: str) -> None:
        if self._failing != line:
            self.say(f"{line}: samples are not being recorded (what was recorded is intact); retrying "
                     "every interval")
            self._failing = line
