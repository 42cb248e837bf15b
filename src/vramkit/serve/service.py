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
from typing import TYPE_CHECKING, TypeVar

from .._version import __version__
from ..collector import Collector
from ..gpu_state import Health, Snapshot
from ..machine import Machine
from .metrics import COMPAT_SCHEMES, ExportState, Xids, render

if TYPE_CHECKING:
    from ..nvml.backend import XidWatcher

T = TypeVar("T")
HISTORY_POINTS = 300  # slots per GPU in /api/v1/history: what a chart on a page can show
HEALTH_EVERY = 10.0  # seconds between readings of GPU health (some twenty NVML calls a GPU; memory: every reading)


@dataclass
class Options:
    interval: float = 2.0
    commands: bool = False  # export command lines as a label (--process-commands)
    max_process_series: int = 2000
    dcgm_names: bool = False  # the same as "dcgm" in compat
    compat: tuple[str, ...] = ()  # other exporters' names also exported: dcgm, nvitop, nvidia-smi-exporter
    history_db: Path | None = None  # the store /api/v1/history reads and the idle clock is seeded from
    hostname: str = ""
    health_every: float = HEALTH_EVERY
    xids: bool = True  # watch NVML's XID events (a background waiter)

    @property
    def schemes(self) -> frozenset[str]:
        unknown = set(self.compat) - set(COMPAT_SCHEMES)
        if unknown:
            raise ValueError(f"unknown naming scheme {sorted(unknown)[0]!r}")
        return frozenset(self.compat) | ({"dcgm"} if self.dcgm_names else set())


class Service:
    def __init__(self, machine: Machine, options: Options):
        self.options = options
        self.machine = machine
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
        # What /metrics shows: the newest snapshot with the newest health reading (every
        # options.health_every seconds) attached, a copy: the collector's snapshots stay as taken.
        self.exported: Snapshot | None = None
        self._health: dict[int, Health] = {}
        self._health_at: float | None = None
        self._xids: XidWatcher | None = None
        self.idle_note: str | None = None  # what history said to the idle clock, or why nothing
        self._first_monotonic: float | None = None  # the first reading's, on the idle clock's clock

    # ------------------------------------------------------------ sampling
    def start(self) -> None:
        if self.options.history_db is not None:
            self._seed_idle(self.options.history_db)
        if self.options.xids:
            nvml = getattr(self.machine.backend, "nvml", None)
            watch = getattr(nvml, "watch_xids", None)
            if watch is not None:
                self._xids = watch()
        self.collector.start()

    def _seed_idle(self, path: Path) -> None:
        """The idle clock continues from the history (as kill and doctor read it): a process idle
        for an hour before serve started is idle for an hour at its first reading, not 0 s."""
        from ..history.recorded_idle import read_recorded_idle

        backend = self.machine.backend
        now = backend.now()

        def started(pid: int) -> tuple[int | None, float] | None:
            host = backend.host(pid, now)
            return None if isinstance(host, str) else (host.start_ticks, host.start_time)

        recorded = read_recorded_idle(now, path, started)
        self.collector.idle.seed(recorded.since)
        self.idle_note = recorded.note

    def close(self) -> None:
        if self._xids is not None:
            self._xids.stop()
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

    def _read_health(self, snap: Snapshot) -> Snapshot:
        """`snap` with health attached, read again when `health_every` seconds have passed (clocks,
        ECC, throttling, PCIe, NVLink, energy... change slower than memory and cost many calls)."""
        now = time.monotonic()
        if self._health_at is None or now - self._health_at >= self.options.health_every:
            self._health_at = now
            gpus = [replace(g, health=None) for g in snap.gpus]
            try:
                self.machine.backend.read_health(gpus, 0.0)
            except Exception as e:  # noqa: BLE001 - health is extra: memory readings go on without it
                self.last_error = f"health: {type(e).__name__}: {e}"
            else:
                self._health = {g.index: g.health for g in gpus if g.health is not None and not g.lost}
        return replace(snap, gpus=[replace(g, health=self._health.get(g.index)) if not g.lost else g
                                   for g in snap.gpus])

    def _taken(self, snap: Snapshot) -> None:
        if self._first_monotonic is None and snap.monotonic is not None:
            self._first_monotonic = snap.monotonic
        self.state.read_seconds = self.collector.last_read_seconds
        exported = self._read_health(snap)
        with self.changed:
            self.latest = snap
            self.exported = exported
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
        return self._cached("metrics", lambda: render(self.exported, self.state, commands=o.commands,
                                                      max_process_series=o.max_process_series,
                                                      compat=o.schemes, xids=self.xids()))

    def xids(self) -> Xids | None:
        """What the XID waiter has counted (None: not watching)."""
        if self._xids is None:
            return None
        counts, last = self._xids.read()
        return Xids(counts, last)

    def snapshot_json(self) -> bytes:
        from ..render.data import status_doc

        def build() -> bytes:
            snap = self.latest
            if snap is None:
                return b'{"error": "no reading yet"}'
            # The status JSON, and what the page shows besides: whose it is, how often it comes.
            # watched_for: seconds from the first reading to this one, on the idle clock's clock: a
            # holder whose idle_for equals it has been idle since before serve watched (the page
            # then does not show "idle 0s" for a notebook idle for days).
            first = self._first_monotonic
            doc = {**status_doc(self._shown(snap)), "hostname": self.state.hostname,
                   "interval": self.options.interval,
                   "watched_for": None if first is None or snap.monotonic is None else snap.monotonic - first}
            return json.dumps(doc, separators=(",", ":")).encode()
        return self._cached("snapshot", build)

    def page(self, template: bytes) -> bytes:
        """The web page with the current reading in it (a JSON data block, which no browser runs
        and the CSP allows), so that its first paint shows the GPUs, not a wait for the event
        stream. '<' is written as its JSON escape: nothing in the data can end the block."""
        def build() -> bytes:
            if self.latest is None:
                return template
            data = self.snapshot_json().replace(b"<", b"\\u003c")
            block = b'<script type="application/json" id="reading">' + data + b"</script>\n"
            return template.replace(b"</body>", block + b"</body>", 1)
        return self._cached("page", build)

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
