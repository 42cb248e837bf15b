"""What `vram serve` serves, apart from HTTP: one collector sampling in the background, and the
answers built from its newest snapshot (Prometheus' text, the status JSON, history from the
store), each built once per snapshot however many clients ask."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from .._version import __version__
from ..collector import Collector
from ..model import Snapshot
from ..snapshot import Machine
from .metrics import ExportState, render

T = TypeVar("T")
HISTORY_POINTS = 300  # slots per GPU in /api/v1/history: what a chart on a page can show


@dataclass
class Options:
    interval: float = 2.0
    commands: bool = False  # export command lines as a label (--process-commands)
    max_process_series: int = 2000
    dcgm_names: bool = False
    history_db: Path | None = None  # the store /api/v1/history reads (None: no history)
    hostname: str = ""


class Service:
    def __init__(self, machine: Machine, options: Options):
        self.options = options
        self.state = ExportState(hostname=options.hostname or socket.gethostname(), version=__version__)
        self.collector = Collector(machine, interval=options.interval)
        self.collector.subscribe(self._taken)
        self.collector.on_error = self._failed
        self.latest: Snapshot | None = None
        self.sequence = 0  # snapshots taken; SSE clients wait for it to move
        self.changed = threading.Condition()
        self._cache: dict[str, tuple[int, float, object]] = {}  # kind -> (sequence, built at, answer)
        self._cache_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.last_error: str | None = None
        self.history_builds = 0  # how many times a history answer was computed (tests see the cache work)

    # ------------------------------------------------------------ sampling
    def start(self) -> None:
        self.collector.start()

    def close(self) -> None:
        self.collector.close()
        with self.changed:
            self.sequence = -1  # wakes every stream, which then ends
            self.changed.notify_all()
        self._tell()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` (quickly, from the sampling thread) after each reading and on closing."""
        self._listeners.append(listener)

    def _tell(self) -> None:
        for listener in self._listeners:
            listener()

    def _taken(self, snap: Snapshot) -> None:
        self.state.read_seconds = self.collector.last_read_seconds
        with self.changed:
            self.latest = snap
            self.sequence += 1
            self.changed.notify_all()
        self.last_error = None
        self._tell()

    def _failed(self, e: Exception) -> None:
        self.state.read_errors += 1
        self.last_error = f"{type(e).__name__}: {e}"

    def wait_for_change(self, seen: int, timeout: float) -> int:
        """The sequence number once it differs from `seen` (a new reading; -1: closing), or
        `seen` again after `timeout` seconds."""
        with self.changed:
            self.changed.wait_for(lambda: self.sequence != seen, timeout)
            return self.sequence

    def wait_for_first(self, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.latest is not None or self.sequence < 0, timeout)

    # ------------------------------------------------------------ answers
    def _cached(self, kind: str, build: Callable[[], T], min_age: float = 0.0,
                lasting: Callable[[T], bool] = lambda _: True) -> T:
        """Built once per snapshot (and, with `min_age`, at most once in that many seconds): N
        clients cost one rendering, not N. Each kind has its own lock, so a slow history query
        never holds up /metrics; clients asking for the same kind meanwhile wait for its one build."""
        with self._locks_lock:
            lock = self._cache_locks.setdefault(kind, threading.Lock())
        with lock:
            hit = self._cache.get(kind)
            now = time.monotonic()
            if hit is not None and (hit[0] == self.sequence
                                    or (now - hit[1] < min_age and lasting(hit[2]))):  # type: ignore[arg-type]
                return hit[2]  # type: ignore[return-value]  # what build() made for this kind
            seq = self.sequence
            answer = build()
            self._cache[kind] = (seq, now, answer)
            return answer

    def metrics(self) -> bytes:
        """Prometheus' text for the newest snapshot, written directly (metrics.render), not through
        prometheus_client's registry: ~10x faster, so a scrape that meets a reading stays short."""
        o = self.options
        return self._cached("metrics", lambda: render(self.latest, self.state, commands=o.commands,
                                                      max_process_series=o.max_process_series,
                                                      dcgm_names=o.dcgm_names))

    def snapshot_json(self) -> bytes:
        from ..render.data import status_doc

        def build() -> bytes:
            snap = self.latest
            if snap is None:
                return b'{"error": "no reading yet"}'
            # The status JSON, and what the page shows besides: whose it is, how often it comes.
            doc = {**status_doc(self._shown(snap)), "hostname": self.state.hostname,
                   "interval": self.options.interval}
            return json.dumps(doc, separators=(",", ":")).encode()
        return self._cached("snapshot", build)

    def _shown(self, snap: Snapshot) -> Snapshot:
        """The snapshot as the JSON API shows it: command lines (which can hold tokens and
        passwords) are null, as in /metrics, unless --process-commands."""
        if self.options.commands:
            return snap
        return replace(snap, gpus=[replace(g, processes=[replace(p, command=None) for p in g.processes])
                                   for g in snap.gpus])

    def history_json(self, span: float) -> tuple[int, bytes]:
        """(HTTP status, JSON) of history(span), computed once per reading, and for the long
        ranges at most once per tenth of a slot (a 7-day chart's slot is 33 minutes): however
        many pages ask, the store is queried once."""
        def build() -> tuple[int, bytes]:
            code, answer = self.history(span)
            return code, json.dumps(answer, allow_nan=False).encode()
        return self._cached(f"history {span:g}", build, min_age=span / HISTORY_POINTS / 10,
                            lasting=lambda answer: answer[0] == 200)  # an error is asked again next reading

    def history(self, span: float) -> tuple[int, dict[str, object]]:
        """(HTTP status, answer): each GPU's recorded memory used and utilization over the last
        `span` seconds, in at most HISTORY_POINTS slots (history/series.py), or why there is none."""
        from ..history.series import gpu_series
        from ..history.store import Store, StoreError

        path = self.options.history_db
        self.history_builds += 1
        if path is None:
            return 404, {"error": "no history: run 'vram record', or name its database with vram serve --db"}
        try:
            store = Store.open(path)
        except StoreError as e:
            return 503, {"error": e.message}
        try:
            series = gpu_series(store, time.time(), span, HISTORY_POINTS)
        except StoreError as e:
            return 503, {"error": e.message}
        finally:
            store.close()
        gpus = {str(gpu): [[round(i * series.width, 3), used, util] for i, (used, util) in sorted(slots.items())]
                for gpu, slots in series.gpus.items()}
        return 200, {"database": str(path), "since": series.since, "until": series.until, "width": series.width,
                     "first": series.first, "last": series.last, "gpus": gpus}
