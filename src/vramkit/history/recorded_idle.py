"""What the recorder's history says about idle time right now, for kill --idle and doctor.

`vram record` keeps, for each process holding memory in its newest sample, since when it has
been idle without a break in recording (the table `holding`). That answers "idle for the last
2 h?" at once, where live sampling would have to watch for 2 h, but only when the recorder is
running now (its newest sample is recent) and ran without a break over the whole window.

The file is only as true as whoever wrote it (or what damaged it): a recorded idle start is never
trusted beyond the life of the process it is about. It counts only for the live process with the
same (pid, start ticks), from no earlier than that process started; one in the future, or for a
process that is gone or is another one now, is dropped (that process is then watched from now).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import procs
from ..collector import Collector
from ..i18n import _
from ..machine import Machine
from ..units import format_duration
from .paths import reader_path
from .query import MAX_TIME, idle_since, read_transaction, typed
from .recorder import max_gap
from .store import Store, StoreError

IdleKey = tuple[int, "int | None", int]  # (pid, start ticks, GPU)
# How a process's start is found now: pid -> (start ticks, unix start time), or None when there is
# no such process (or it cannot be read).
Started = Callable[[int], "tuple[int | None, float] | None"]
# A newest sample later than now by more than this is a clock (or a file) not to be trusted.
FUTURE_SLACK = 60.0


@dataclass
class RecordedIdle:
    """since: (pid, start ticks, GPU) -> unix time it has been idle since; unbroken_since: when
    the recorder's current unbroken run of samples began (None: no usable history); note: one
    line saying what history was used, or why none."""

    since: dict[tuple[int, int | None, int], float] = field(default_factory=dict)
    unbroken_since: float | None = None
    note: str = ""

    def covers(self, now: float, window: float) -> bool:
        """Whether the recorder watched every moment of the last `window` seconds."""
        return self.unbroken_since is not None and self.unbroken_since <= now - window


def read_recorded_idle(now: float, path: Path | str | None = None, started: Started | None = None) -> RecordedIdle:
    """Read the history at `path` (default: the recorder's database). Never raises for a missing,
    stale or unreadable database: history is a help here, and its note says why it was not used.
    `started`: how to find a live process's start (within_lives; default /proc)."""
    path = reader_path(path)
    if not path.exists():
        return RecordedIdle(note=_("no recorded history at {path} ('vram record' keeps one)").format(path=path))
    try:
        store = Store.open(path)
    except StoreError as e:
        return RecordedIdle(note=_("history not used: {error}").format(error=e.message))
    try:
        # One read transaction, the schema checked as its first read (query.read_transaction): the
        # owner of another user's file could swap a table for a view after Store.open.
        with read_transaction(store):
            c = store.conn
            valid = f"t BETWEEN 0 AND {MAX_TIME!r}"
            last_two = [float(t) for (t,) in c.execute(f"SELECT t FROM samples WHERE {valid} ORDER BY id DESC LIMIT 2")]
            if not last_two:
                return RecordedIdle(note=_("history at {path} has no recent samples").format(path=path))
            interval = last_two[0] - last_two[1] if len(last_two) == 2 and last_two[0] > last_two[1] else 60.0
            fresh_after = now - max_gap(interval)
            if last_two[0] < fresh_after:
                return RecordedIdle(note=_("history at {path} ends {ago} ago ('vram record' is not running)").format(
                    path=path, ago=format_duration(now - last_two[0])))
            if last_two[0] > now + FUTURE_SLACK:
                return RecordedIdle(note=_("history not used: its newest sample is {ahead} in the future "
                                           "({path})").format(ahead=format_duration(last_two[0] - now), path=path))
            # The current unbroken run began after the newest sample whose span is 0 (a break in
            # recording, or a restart), other than the newest sample itself.
            broke = typed(c.execute(f"SELECT max(t) FROM samples WHERE span = 0 AND {valid} AND id < "
                                    "(SELECT max(id) FROM samples)").fetchone()[0], "time")
            if broke is not None:
                began = typed(c.execute(f"SELECT min(t) FROM samples WHERE t > ? AND {valid}", (broke,)).fetchone()[0],
                              "time")
            else:
                began = typed(c.execute(f"SELECT min(t) FROM samples WHERE {valid}").fetchone()[0], "time")
            since = idle_since(store, fresh_after)
    except (sqlite3.Error, StoreError) as e:
        return RecordedIdle(note=_("history not used: {error}").format(error=e))
    except UnicodeDecodeError:
        return RecordedIdle(note=_("history not used: {path} is corrupt (text that is not UTF-8)").format(path=path))
    finally:
        store.close()
    return RecordedIdle(within_lives(since, now, started), None if began is None else min(began, now),
                        _("idle times from the history in {path} (recorded without a break for {span})").format(
                            path=path, span=format_duration(now - began) if began is not None else "0s"))


def started_here(pid: int) -> tuple[int | None, float] | None:
    """The live process `pid` on this host, from /proc: (start ticks, start time), or None."""
    found = procs.identity(pid)
    return None if found is None else (found.start_ticks, found.start_time)


def within_lives(since: dict[IdleKey, float], now: float, started: Started | None = None
                 ) -> dict[IdleKey, float]:
    """The recorded idle starts that can be true now: for the live process of the same identity,
    moved up to its start (never earlier than it ran); one in the future, or whose process is
    gone or is another one, is left out. `started` (default: /proc) finds a process's start; a
    process recorded without start ticks (a simulated one, or one whose host side was not known)
    is looked up only through a `started` given, else counted from no earlier than recorded."""
    out = {}
    for key, when in since.items():
        pid, ticks, _gpu = key
        if when > now:
            continue
        if ticks is not None or started is not None:
            live = (started or started_here)(pid)
            if live is None or live[0] != ticks:
                continue
            when = max(when, live[1])
        out[key] = when
    return out


def seeded_collector(machine: Machine, path: Path | str | None = None) -> tuple[Collector, RecordedIdle]:
    """A collector on `machine` whose idle clock starts from what the history at `path` says
    (kill --idle, doctor), and that history (its `covers` says for how long it can be trusted)."""
    collector = Collector(machine)
    now = machine.backend.now()

    def started(pid: int) -> tuple[int | None, float] | None:
        host = machine.backend.host(pid, now)
        return None if isinstance(host, str) else (host.start_ticks, host.start_time)

    recorded = read_recorded_idle(now, path, started)
    collector.idle.seed(recorded.since)
    return collector, recorded
