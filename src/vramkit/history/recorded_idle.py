"""What the recorder's history says about idle time right now, for kill --idle and doctor.

`vram record` keeps, for each process holding memory in its newest sample, since when it has
been idle without a break in recording (the table `holding`). That answers "idle for the last
2 h?" at once, where live sampling would have to watch for 2 h, but only when the recorder is
running now (its newest sample is recent) and ran without a break over the whole window.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ..collector import Collector
from ..snapshot import Machine
from ..units import format_duration
from .paths import reader_path
from .query import idle_since
from .recorder import max_gap
from .store import Store, StoreError


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


def read_recorded_idle(now: float, path: Path | str | None = None) -> RecordedIdle:
    """Read the history at `path` (default: the recorder's database). Never raises for a missing,
    stale or unreadable database: history is a help here, and its note says why it was not used."""
    path = reader_path(path)
    if not path.exists():
        return RecordedIdle(note=f"no recorded history at {path} ('vram record' keeps one)")
    try:
        store = Store.open(path)
    except StoreError as e:
        return RecordedIdle(note=f"history not used: {e.message}")
    try:
        c = store.conn
        last_two = [t for (t,) in c.execute("SELECT t FROM samples ORDER BY id DESC LIMIT 2")]
        if not last_two:
            return RecordedIdle(note=f"history at {path} has no recent samples")
        interval = last_two[0] - last_two[1] if len(last_two) == 2 and last_two[0] > last_two[1] else 60.0
        fresh_after = now - max_gap(interval)
        if last_two[0] < fresh_after:
            return RecordedIdle(note=f"history at {path} ends {format_duration(now - last_two[0])} ago "
                                "('vram record' is not running)")
        # The current unbroken run began after the newest sample whose span is 0 (a break in
        # recording, or a restart), other than the newest sample itself.
        broke = c.execute("SELECT max(t) FROM samples WHERE span = 0 AND id < (SELECT max(id) FROM samples)"
                          ).fetchone()[0]
        if broke is not None:
            began = c.execute("SELECT min(t) FROM samples WHERE t > ?", (broke,)).fetchone()[0]
        else:
            began = c.execute("SELECT min(t) FROM samples").fetchone()[0]
        since = idle_since(store, fresh_after)
    except (sqlite3.Error, StoreError) as e:
        return RecordedIdle(note=f"history not used: {e}")
    finally:
        store.close()
    return RecordedIdle(since, None if began is None else float(began),
                        f"idle times from the history in {path} (recorded without a break for "
                        f"{format_duration(now - began) if began is not None else '0s'})")


def seeded_collector(machine: Machine, path: Path | str | None = None) -> tuple[Collector, RecordedIdle]:
    """A collector on `machine` whose idle clock starts from what the history at `path` says
    (kill --idle, doctor), and that history (its `covers` says for how long it can be trusted)."""
    collector = Collector(machine)
    recorded = read_recorded_idle(machine.backend.now(), path)
    collector.idle.seed(recorded.since)
    return collector, recorded
