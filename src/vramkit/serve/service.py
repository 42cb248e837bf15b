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

from .._version import __version__
from ..collector import Collector
from ..model import Snapshot
from ..snapshot import Machine
from .metrics import ExportState, render

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
        self._cache: dict[str, tuple[int, bytes]] = {}
        self._cache_lock = threading.Lock()
        self.last_error: str | None = None

    # ------------------------------------------------------------ sampling
    def start(self) -> None:
        self.collector.start()

    def close(self) -> None:
        self.collector.close()
        with self.changed:
            self.sequence = -1  # wakes every stream, which then ends
            self.changed.notify_all()

    def _taken(self, snap: Snapshot) -> None:
        self.state.read_seconds = self.collector.last_read_seconds
        with self.changed:
            self.latest = snap
            self.sequence += 1
            self.changed.notify_all()
        self.last_error = None

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
    def _cached(self, kind: str, build: Callable[[], bytes]) -> bytes:
        """Built once per snapshot: N clients cost one rendering, not N."""
        with self._cache_lock:
            hit = self._cache.get(kind)
            if hit is not None and hit[0] == self.sequence:
                return hit[1]
            seq = self.sequence
            body = build()
            self._cache[kind] = (seq, body)
            return body

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

    def history(self, span: float) -> tuple[int, dict[str, object]]:
        """(HTTP status, answer): each GPU's recorded memory used and utilization over the last
        `span` seconds, in at most HISTORY_POINTS slots (history/series.py), or why there is none."""
        from ..history.series import gpu_series
        from ..history.store import Store, StoreError

        path = self.options.history_db
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
