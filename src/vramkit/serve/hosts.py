"""The other hosts a page shows (`vram serve --hosts h1:9787,h2:9787`): each one's own `vram serve`
read on its own clock by threads of their own (fleet_hosts.fetch_snapshot: bounded answers, TLS
and basic auth from --hosts-config), once per reading interval, each within its own deadline,
never by the sampler or a request: a slow, silent or dead host holds up neither the page,
/metrics nor the other hosts (each host's reading is published as it comes).

A host's answer is untrusted (any server on the network): only the fields the page shows are
kept, each of the type it should be (strings sanitized and bounded by fleet.clean, numbers finite,
lists bounded); the rest is dropped. The page sets every string as text, never as markup.

Each host is an entry of /api/v1/hosts (English, as the rest of the API):

    {"address": "gpu-a:9787", "hostname": "gpu-a", "up": true, "why": null, "error": null, "detail": null,
     "last_seen": null, "snapshot": {the host's /api/v1/snapshot, as kept}}

and, for a host that did not answer: "up": false, "why" (slow, too-big, unreachable, protocol,
bad-body, status, not-json; waiting before its first read), "error" (the English sentence), "detail" (what
the sentence names: the timeout, the error, the HTTP status), "last_seen" (unix time this server last read
it; null: never), "hostname" (the name it last gave for itself) and "snapshot": null.
"""

from __future__ import annotations

import heapq
import json
import math
import threading
import time
from typing import Any

from ..fleet import clean
from ..fleet_hosts import ClientConfig, Down, fetch_snapshot, parse_snapshot
from . import page_words
from .service import gzipped

MAX_GPUS = 64  # per host
MAX_PROCESSES = 16_384  # per host, over all its GPUs (a big server: 8 x 1,000)
MAX_ANSWER_BYTES = 16 * 1024**2  # of a host's answer (8 x 1,000 processes: ~4 MB); parsed under the GIL
MAX_DEVICES = 64  # MIG instances per GPU
MIN_PERIOD = 1.0  # seconds between two reads of a host at the least, however short the reading interval
MAX_READERS = 32  # hosts read at the same time: threads, connections, answers in memory
_TOP_TEXT = ("hostname", "scenario", "driver_version", "cuda_version")
_TOP_NUMBERS = ("timestamp", "interval", "watched_for")
_GPU_TEXT = ("name", "uuid", "error")
_GPU_NUMBERS = ("memory_total", "memory_used", "memory_free", "utilization", "memory_utilization",
                "temperature", "power_draw", "power_limit")
_PROCESS_TEXT = ("user", "name", "command")
_PROCESS_NUMBERS = ("memory", "sm_utilization", "cpu_percent", "elapsed", "idle_for", "start_time")
_FLAGS = ("idle", "zombie", "orphaned")


def _text(value: object) -> str | None:
    return clean(value) if isinstance(value, str) else None


def _number(value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return value if abs(value) < 2**63 else None
    return value if math.isfinite(value) else None


def _index(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 100_000 else None


def _process(item: object) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    pid = item.get("pid") if isinstance(item.get("pid"), int) and not isinstance(item.get("pid"), bool) \
        and 0 < item["pid"] < 2**31 else None
    if pid is None:
        return None
    p: dict[str, Any] = {"pid": pid, "mig_gi": _index(item.get("mig_gi"))}
    p.update({name: _text(item.get(name)) for name in _PROCESS_TEXT})
    p.update({name: _number(item.get(name)) for name in _PROCESS_NUMBERS})
    p.update({name: item.get(name) is True for name in _FLAGS})
    return p


def _gpu(item: object, room: int) -> dict[str, Any] | None:
    """A GPU of the snapshot, with at most `room` of its processes."""
    if not isinstance(item, dict) or _index(item.get("index")) is None:
        return None
    g: dict[str, Any] = {"index": item["index"], "lost": item.get("lost") is True,
                         "mig_enabled": item.get("mig_enabled") is True}
    g.update({name: _text(item.get(name)) for name in _GPU_TEXT})
    g.update({name: _number(item.get(name)) for name in _GPU_NUMBERS})
    na = item.get("na")
    g["na"] = {clean(k): clean(v) for k, v in list(na.items())[:32] if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(na, dict) else {}
    devices = item.get("mig_devices")
    g["mig_devices"] = [{} for d in devices[:MAX_DEVICES] if isinstance(d, dict)] if isinstance(devices, list) else []
    processes = item.get("processes")
    if isinstance(processes, list):
        kept = [_process(p) for p in processes[:room]]
        g["processes"] = [p for p in kept if p is not None]
    else:
        g["processes"] = []
        g["na"].setdefault("processes", "not listed")
    return g


def kept_snapshot(doc: object) -> dict[str, Any] | None:
    """What the page shows of a host's snapshot, each field checked; None: not a snapshot."""
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        return None
    kept: dict[str, Any] = {name: _text(doc.get(name)) for name in _TOP_TEXT}
    kept.update({name: _number(doc.get(name)) for name in _TOP_NUMBERS})
    kept["simulated"] = doc.get("simulated") is True
    gpus: dict[int, dict[str, Any]] = {}
    room = MAX_PROCESSES
    for item in doc["gpus"][:MAX_GPUS]:
        gpu = _gpu(item, room)
        if gpu is not None and gpu["index"] not in gpus:
            gpus[gpu["index"]] = gpu
            room -= len(gpu["processes"])
    kept["gpus"] = [gpus[i] for i in sorted(gpus)]
    return kept


class OtherHosts:
    """The hosts of --hosts, each read on its own clock: every `period` seconds from the start of
    its last read, within `timeout` seconds of its own, by one of at most MAX_READERS threads. A
    host that is slow, silent or trickles bytes holds one thread and one connection until its own
    deadline; the others' readings are published as each comes (`entries()`, `api_json()`).

    Bounds against hostile hosts: MAX_READERS threads and connections (beyond that many hosts, a
    host waits for a free reader), at most MAX_READERS x `max_answer` bytes of answers in memory,
    and one answer parsed at a time (what is kept of it: kept_snapshot's bounds)."""

    def __init__(self, urls: list[str], period: float, timeout: float, config: ClientConfig | None = None,
                 max_answer: int = MAX_ANSWER_BYTES):
        self.urls = urls
        self.period = max(MIN_PERIOD, period)
        self.timeout = timeout
        self.config = config or ClientConfig()
        self.max_answer = max_answer
        self.reads = 0  # hosts' reads done, over all hosts
        self._last_seen: dict[str, float] = {}
        self._names: dict[str, str] = {}  # the name each host last gave (--hostname), kept while it is down
        self._lock = threading.Lock()
        self._parsing = threading.Lock()  # one parsed answer in memory at a time
        self.last_error: str | None = None
        # Copy on write: a new list each time a host's entry changes, its other entries the same
        # dicts (the event stream's delta finds them unchanged by identity).
        self._entries = [self._down(url, Down("waiting")) for url in urls]
        self._pieces = [self._encode(entry) for entry in self._entries]  # each entry's JSON
        self._json = self._join(self._pieces)
        self._packed: tuple[bytes, bytes] | None = None  # (the JSON, gzipped): once per change, when asked
        self._due = [(0.0, i) for i in range(len(urls))]  # (monotonic time, host): when each is read next
        self._wake = threading.Condition()
        self._stop = False
        self._threads: list[threading.Thread] = []

    def _down(self, url: str, down: Down) -> dict[str, Any]:
        detail = f"{self.timeout:g}s" if down.kind == "slow" else \
            f"{self.max_answer // 1024**2}MiB" if down.kind == "too-big" else down.detail
        return {"address": url.split("://", 1)[1], "hostname": self._names.get(url), "up": False, "why": down.kind,
                "error": page_words.HOST_DOWN[down.kind].format(detail=detail), "detail": detail,
                "last_seen": self._last_seen.get(url), "snapshot": None}

    @staticmethod
    def _encode(entry: dict[str, Any]) -> bytes:
        return json.dumps(entry, separators=(",", ":"), allow_nan=False).encode()

    @staticmethod
    def _join(pieces: list[bytes]) -> bytes:
        return b'{"hosts":[' + b",".join(pieces) + b"]}"

    def start(self) -> None:
        for n in range(min(MAX_READERS, len(self.urls))):
            thread = threading.Thread(target=self._work, name=f"vram-serve-hosts-{n}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def close(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify_all()

    def entries(self) -> list[dict[str, Any]]:
        """The newest entry of each host (a list never changed after it is handed out)."""
        with self._lock:
            return self._entries

    def api_json(self, packed: bool = False) -> bytes:
        """/api/v1/hosts' body (packed: gzipped, compressed once per change however many ask)."""
        with self._lock:
            body, done = self._json, self._packed
        if not packed:
            return body
        if done is None or done[0] is not body:
            done = (body, gzipped(body))
            with self._lock:
                self._packed = done
        return done[1]

    def read(self, i: int) -> dict[str, Any]:
        """Host `i`'s entry, read now (within `timeout` seconds), and published."""
        url = self.urls[i]
        answer = fetch_snapshot(url, time.monotonic() + self.timeout, self.config, self.max_answer)
        down = answer if isinstance(answer, Down) else None
        kept = None
        if not isinstance(answer, Down):
            with self._parsing:
                doc = parse_snapshot(answer)
                del answer
                kept = None if isinstance(doc, Down) else kept_snapshot(doc)
                del doc
        if kept is None:
            entry = self._down(url, down or Down("not-json"))
        else:
            self._last_seen[url] = time.time()
            if kept["hostname"]:
                self._names[url] = kept["hostname"]
            entry = {"address": url.split("://", 1)[1], "hostname": kept["hostname"], "up": True, "why": None,
                     "error": None, "detail": None, "last_seen": None, "snapshot": kept}
        piece = self._encode(entry)  # here, in this host's reader, not under the lock
        with self._lock:
            entries, pieces = list(self._entries), list(self._pieces)
            entries[i], pieces[i] = entry, piece
            self._entries, self._pieces, self._json = entries, pieces, self._join(pieces)
            self.reads += 1
        return entry

    def _next(self) -> int | None:
        """The host due first, once it is due (None: closing)."""
        with self._wake:
            while not self._stop:
                if self._due:
                    when, i = self._due[0]
                    wait = when - time.monotonic()
                    if wait <= 0:
                        heapq.heappop(self._due)
                        return i
                else:
                    wait = None
                self._wake.wait(wait)
            return None

    def _work(self) -> None:
        while (i := self._next()) is not None:
            started = time.monotonic()
            try:
                self.read(i)
            except Exception as e:  # noqa: BLE001 - a bug in one read: the host is read again next time
                self.last_error = f"hosts: {type(e).__name__}: {e}"
            with self._wake:
                heapq.heappush(self._due, (max(started + self.period, time.monotonic()), i))
                self._wake.notify()
