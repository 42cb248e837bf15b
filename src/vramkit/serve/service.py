"""What `vram serve` serves, apart from HTTP: one collector sampling in the background, and the
answers built from its newest snapshot (Prometheus' text, the status JSON, history from the
store), each built once per snapshot however many clients ask."""

from __future__ import annotations

import gc
import gzip
import json
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from .. import i18n
from .._version import __version__
from ..collector import Collector
from ..gpu_state import Health, Snapshot
from ..machine import Machine
from . import page_words
from .kernel_xids import KernelXids, pci_key
from .metrics import COMPAT_SCHEMES, ExportState, Xids, render
from .updates import Shown

if TYPE_CHECKING:
    from ..kubelet import GpuPods
    from ..nvml.backend import XidWatcher
    from .hosts import OtherHosts

T = TypeVar("T")
HISTORY_POINTS = 300  # slots per GPU in /api/v1/history: what a chart on a page can show
HEALTH_EVERY = 10.0  # seconds between readings of GPU health (some twenty NVML calls a GPU; memory: every reading)
SWITCH_INTERVAL = 0.001  # seconds a thread holds the GIL while others wait (Python's default: 0.005)
GZIP_LEVEL = 6  # zlib's default: /metrics at 8 x 1,000 (~0.4 MB) in a few ms, outside the GIL


class HeapFreeze:
    """gc.freeze() for as long as a Service is running, shared by the Services of one process:
    what is alive after each one's first reading (modules, caches, the driver's handles) is kept
    out of the collector's full passes, each of which held the GIL ~10 ms at 8 x 1,000 processes
    (a scrape that met one waited as long). The heap is thawed when the last of them closes, so a
    process that ran a Service (the library API, a test) goes on with its heap as it was; a heap
    someone else froze is left alone (gc.unfreeze() would undo theirs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: weakref.WeakSet[object] = weakref.WeakSet()  # the Services holding it
        self._ours = False  # the Services froze it (it was not frozen when the first came)

    def hold(self, holder: object) -> None:
        with self._lock:
            if holder in self._holders:
                return
            if not self._holders:
                self._ours = gc.get_freeze_count() == 0
            if self._ours:
                gc.freeze()  # (again for a second Service: its own long-lived objects too)
            self._holders.add(holder)

    def release(self, holder: object) -> None:
        with self._lock:
            if holder not in self._holders:
                return
            self._holders.discard(holder)
            if not self._holders and self._ours:
                gc.unfreeze()
                self._ours = False


HEAP_FREEZE = HeapFreeze()


def gzipped(body: bytes) -> bytes:
    """`body` as a gzip stream (Content-Encoding: gzip), with no file name or time in its header:
    the same bytes for the same body."""
    return gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)


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
    # The XIDs of GPUs whose driver refuses NVML's events: from this log, where readable (None:
    # the backend's, /dev/kmsg on a real NVIDIA machine, none on a simulated one).
    kernel_log: Path | None = None

    @property
    def schemes(self) -> frozenset[str]:
        unknown = set(self.compat) - set(COMPAT_SCHEMES)
        if unknown:
            raise ValueError(f"unknown naming scheme {sorted(unknown)[0]!r}")
        return frozenset(self.compat) | ({"dcgm"} if self.dcgm_names else set())


@dataclass
class Update:
    """What the event stream sends after reading `seq`: the delta from reading `base` (for a page
    that holds that one), or the whole doc as the pages following the stream hold it."""

    seq: int
    base: int | None
    delta: bytes | None  # the event, ready to write
    doc: dict[str, object] = field(repr=False)
    _full: bytes | None = field(default=None, repr=False)

    @property
    def full(self) -> bytes:
        """The whole doc as an event, made the first time a stream needs it (one that has just
        opened, or that missed a delta)."""
        if self._full is None:
            data = json.dumps(self.doc, separators=(",", ":")).encode()
            self._full = b"event: snapshot\nid: %d\ndata: %s\n\n" % (self.seq, data)
        return self._full


class Service:
    def __init__(self, machine: Machine, options: Options, hosts: OtherHosts | None = None):
        self.options = options
        self.hosts = hosts  # --hosts: the other hosts the page shows, read by their own thread
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
        self._kernel_xids: KernelXids | None = None  # for the GPUs the XID waiter does not watch
        self.idle_note: str | None = None  # what history said to the idle clock, or why nothing
        self._first_monotonic: float | None = None  # the first reading's, on the idle clock's clock
        self._shown = Shown()  # the status JSON as the pages following the event stream hold it
        self.gzip_asked = False  # a scraper asked for gzip: the sampler compresses /metrics too
        self.wants_updates: Callable[[], bool] = lambda: False  # the server: an event stream is open
        # --compat dcgm: the pod each GPU is allocated to, from the kubelet, labels its DCGM series
        self._gpu_pods: GpuPods | None = None
        if "dcgm" in options.schemes:
            from ..kubelet import GpuPods

            self._gpu_pods = GpuPods(getattr(machine.backend, "list_pods", None))

    # ------------------------------------------------------------ sampling
    def start(self) -> None:
        # A reading is Python that holds the GIL (~90 ms at 8 x 1,000 processes); a scrape that
        # meets one passes through three threads (front, worker, front), each waiting for the GIL
        # up to the switch interval: 1 ms instead of 5 keeps that wait short.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        if self.options.history_db is not None:
            self._seed_idle(self.options.history_db)
        if self.options.xids:
            nvml = getattr(self.machine.backend, "nvml", None)
            watch = getattr(nvml, "watch_xids", None)
            if watch is not None:
                self._xids = watch()
                log = self.options.kernel_log or getattr(self.machine.backend, "kernel_log", None)
                if self._xids.refused and log is not None:  # the kernel log instead, for those GPUs
                    self._kernel_xids = KernelXids(Path(log))
                    self._kernel_xids.start()
        self.collector.start()
        if self.hosts is not None:
            self.hosts.start()

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
        if self.hosts is not None:
            self.hosts.close()
        if self._xids is not None:
            self._xids.stop()
        if self._kernel_xids is not None:
            self._kernel_xids.stop()
        self.collector.close()
        HEAP_FREEZE.release(self)  # after the collector: no reading can freeze it again
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
            HEAP_FREEZE.hold(self)  # what is alive now lives as long as serve; thawed by close()
        self.state.read_seconds = self.collector.last_read_seconds
        if self._gpu_pods is not None:
            self.state.gpu_pods = self._gpu_pods.read(time.monotonic())
        exported = self._read_health(snap)
        # /metrics' body is written here, in the sampling thread, right after the reading, and
        # published with it: a scrape only sends bytes. Built lazily by the scraping thread, a
        # scrape that met the next reading waited for the GIL the reading held (~45 ms at 8 x
        # 1,000), so the slowest scrapes took 3-6x the median.
        body = self._render(exported)
        packed = gzipped(body) if self.gzip_asked else None
        lock = self._lock("metrics")
        with lock, self.changed:
            self.latest = snap
            self.exported = exported
            self.sequence += 1
            now = time.monotonic()
            self._cache["metrics"] = (self.sequence, now, body)
            if packed is not None:
                self._cache["metrics gzip"] = (self.sequence, now, packed)
            self.changed.notify_all()
        self.last_error = None
        if self.wants_updates():
            try:
                self.update()  # here, not in the server's one thread that every client shares
            except Exception as e:  # noqa: BLE001 - the front asks again, and says what fails
                self.last_error = f"event stream: {type(e).__name__}: {e}"
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
    def _lock(self, kind: str) -> threading.Lock:
        with self._locks_lock:
            return self._cache_locks.setdefault(kind, threading.Lock())

    def _cached(self, kind: str, build: Callable[[], T], min_age: float = 0.0,
                lasting: Callable[[T], bool] = lambda _: True) -> T:
        """Built once per snapshot (and, with `min_age`, at most once in that many seconds): N
        clients cost one rendering, not N. Each kind has its own lock, so a slow history query
        never holds up /metrics; clients asking for the same kind meanwhile wait for its one build."""
        with self._lock(kind):
            hit = self._cache.get(kind)
            now = time.monotonic()
            if hit is not None and (hit[0] == self.sequence
                                    or (now - hit[1] < min_age and lasting(hit[2]))):  # type: ignore[arg-type]
                return hit[2]  # type: ignore[return-value]  # what build() made for this kind
            seq = self.sequence
            answer = build()
            self._cache[kind] = (seq, now, answer)
            return answer

    def _render(self, exported: Snapshot | None) -> bytes:
        """Prometheus' text for `exported`, written directly (metrics.render), not through
        prometheus_client's registry: ~10x faster."""
        o = self.options
        return render(exported, self.state, commands=o.commands, max_process_series=o.max_process_series,
                      compat=o.schemes, xids=self.xids(exported))

    def metrics(self, packed: bool = False) -> bytes:
        """/metrics' body for the newest reading (packed: gzipped), as the sampler wrote it; built
        here only before the first reading, or the first time gzip is asked for."""
        if packed:
            self.gzip_asked = True
            return self._cached("metrics gzip", lambda: gzipped(self.metrics()))
        return self._cached("metrics", lambda: self._render(self.exported))

    def xids(self, snap: Snapshot | None = None) -> Xids | None:
        """What the XID waiter has counted (None: not watching), and for the GPUs whose driver
        refused its events, what the kernel log said of them (where it is readable; the GPUs as
        `snap`, else the newest reading, has them)."""
        if self._xids is None:
            return None
        counts, last = self._xids.read()
        kernel, snap = self._kernel_xids, snap or self.latest
        if kernel is not None and kernel.watching and snap is not None:
            by_pci, last_by_pci = kernel.read()
            for g in snap.gpus:
                key = pci_key(g.pci_bus_id)
                if g.lost or g.index in counts or g.index not in self._xids.refused or key is None:
                    continue
                counts[g.index] = by_pci.get(key, {})
                if key in last_by_pci:
                    last[g.index] = last_by_pci[key]
        return Xids(counts, last)

    def _doc(self, snap: Snapshot) -> dict[str, object]:
        """The status JSON, and what the page shows besides: whose it is, how often it comes.
        watched_for: seconds from the first reading to this one, on the idle clock's clock: a
        holder whose idle_for equals it has been idle since before serve watched (the page then
        does not show "idle 0s" for a notebook idle for days)."""
        from ..render.data import process_dict, status_doc

        first = self._first_monotonic
        # The GPUs without their processes through status_doc (its dataclass copying would copy
        # every process too, then drop the copies), the processes once each: at 8 x 200 this is
        # a tenth of the cost.
        doc = status_doc(replace(snap, gpus=[replace(g, processes=[]) for g in snap.gpus]))
        for gpu, dev in zip(doc["gpus"], snap.gpus):
            gpu["processes"] = processes = [process_dict(p) for p in dev.processes]
            if not self.options.commands:  # command lines (tokens, passwords) only with --process-commands
                for p in processes:
                    p["command"] = None
        return {**doc, "hostname": self.state.hostname, "interval": self.options.interval,
                "watched_for": None if first is None or snap.monotonic is None else snap.monotonic - first}

    def snapshot_json(self, packed: bool = False) -> bytes:
        if packed:
            return self._cached("snapshot gzip", lambda: gzipped(self.snapshot_json()))

        def build() -> bytes:
            snap = self.latest
            if snap is None:
                return b'{"error": "no reading yet"}'
            return json.dumps(self._doc(snap), separators=(",", ":")).encode()
        return self._cached("snapshot", build)

    def update(self) -> Update | None:
        """The event stream's news for the newest reading (None before the first), made once per
        reading, in order: each delta is from the reading the one before stood for."""
        def build() -> Update | None:
            with self.changed:
                snap, seq = self.latest, self.sequence
            if snap is None:
                return None
            base = self._shown.seq
            doc = self._doc(snap)
            if self.hosts is not None:  # the newest round, read again only when a round has been read
                doc["hosts"] = self.hosts.entries()
            delta = self._shown.advance(doc, seq)
            event = None
            if delta is not None:
                data = json.dumps(delta, separators=(",", ":")).encode()
                event = b"event: delta\nid: %d\ndata: %s\n\n" % (seq, data)
            return Update(seq, base if delta is not None else None, event, self._shown.doc or {})
        return self._cached("update", build)

    def page(self, language: str, packed: bool = False) -> bytes:
        """The web page in `language` (page_words.page: made once per language) with the current
        reading in it (a JSON data block, which no browser runs and the CSP allows), so that its
        first paint shows the GPUs, not a wait for the event stream. '<' is written as its JSON
        escape: nothing in the data can end the block."""
        if packed:
            return self._cached(f"page gzip {language}", lambda: gzipped(self.page(language)))

        def build() -> bytes:
            template = page_words.page(language)
            snap = self.latest
            if snap is None:
                return template
            data = self.snapshot_json().replace(b"<", b"\\u003c")
            block = b'<script type="application/json" id="reading">' + data + b"</script>\n"
            said = {why for g in snap.gpus for why in g.na.values()} | {g.error for g in snap.gpus if g.error}
            block += page_words.reasons(language, said)
            if self.hosts is not None:
                block += (b'<script type="application/json" id="hosts-reading">'
                          + self.hosts.api_json().replace(b"<", b"\\u003c") + b"</script>\n")
            return template.replace(b"</body>", block + b"</body>", 1)
        return self._cached(f"page {language}", build)

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
            return 404, {"error": page_words.NO_HISTORY}  # the API's English; the page shows it translated
        with i18n.english():  # the API's words are English (a store's error is worded where it is raised)
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
