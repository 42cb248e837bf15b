"""The other hosts a page shows (`vram serve --hosts h1:9787,h2:9787`): each one's own `vram serve`
read by a thread of its own (fleet_hosts.read_snapshots: all at once, one deadline, bounded
answers, TLS and basic auth from --hosts-config), once per reading interval, never by the sampler
or a request: a slow or dead host holds up neither the page nor /metrics.

A host's answer is untrusted (any server on the network): only the fields the page shows are
kept, each of the type it should be (strings sanitized and bounded by fleet.clean, numbers finite,
lists bounded); the rest is dropped. The page sets every string as text, never as markup.

Each host is an entry of /api/v1/hosts (English, as the rest of the API):

    {"address": "gpu-a:9787", "hostname": "gpu-a", "up": true, "why": null, "error": null, "detail": null,
     "last_seen": null, "snapshot": {the host's /api/v1/snapshot, as kept}}

and, for a host that did not answer: "up": false, "why" (slow, too-big, unreachable, protocol,
status, not-json; waiting before the first round), "error" (the English sentence), "detail" (what
the sentence names: the timeout, the error, the HTTP status), "last_seen" (unix time this server last read
it; null: never), "hostname" (the name it last gave for itself) and "snapshot": null.
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

from ..fleet import clean
from ..fleet_hosts import ClientConfig, Down, read_snapshots
from . import page_words
from .service import gzipped

MAX_GPUS = 64  # per host
MAX_PROCESSES = 16_384  # per host, over all its GPUs (a big server: 8 x 1,000)
MAX_ANSWER_BYTES = 16 * 1024**2  # of a host's answer (8 x 1,000 processes: ~4 MB); parsed under the GIL
MAX_DEVICES = 64  # MIG instances per GPU
MIN_PERIOD = 1.0  # seconds between two rounds at the least, however short the reading interval
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
    """The hosts of --hosts, read again every `period` seconds by one thread. `entries()` is the
    newest round's (new dicts each round, which the event stream's bookkeeping owns and may
    change: the API's JSON is written when the round is, from the entries as read)."""

    def __init__(self, urls: list[str], period: float, timeout: float, config: ClientConfig | None = None,
                 max_answer: int = MAX_ANSWER_BYTES):
        self.urls = urls
        self.period = max(MIN_PERIOD, period)
        self.timeout = timeout
        self.config = config
        self.max_answer = max_answer
        self.rounds = 0
        self._last_seen: dict[str, float] = {}
        self._names: dict[str, str] = {}  # the name each host last gave (--hostname), kept while it is down
        self._lock = threading.Lock()
        self.last_error: str | None = None
        self._entries = [self._down(url, Down("waiting")) for url in urls]
        self._json = self._encode(self._entries)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._packed: tuple[bytes, bytes] | None = None  # (the JSON, gzipped): once per round, when asked

    def _down(self, url: str, down: Down) -> dict[str, Any]:
        detail = f"{self.timeout:g}s" if down.kind == "slow" else \
            f"{self.max_answer // 1024**2}MiB" if down.kind == "too-big" else down.detail
        return {"address": url.split("://", 1)[1], "hostname": self._names.get(url), "up": False, "why": down.kind,
                "error": page_words.HOST_DOWN[down.kind].format(detail=detail), "detail": detail,
                "last_seen": self._last_seen.get(url), "snapshot": None}

    @staticmethod
    def _encode(entries: list[dict[str, Any]]) -> bytes:
        return json.dumps({"hosts": entries}, separators=(",", ":"), allow_nan=False).encode()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="vram-serve-hosts", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return self._entries

    def api_json(self, packed: bool = False) -> bytes:
        """/api/v1/hosts' body (packed: gzipped, compressed once per round however many ask)."""
        with self._lock:
            body, done = self._json, self._packed
        if not packed:
            return body
        if done is None or done[0] is not body:
            done = (body, gzipped(body))
            with self._lock:
                self._packed = done
        return done[1]

    def read_once(self) -> None:
        answers = read_snapshots(self.urls, self.timeout, self.config, self.max_answer)
        now = time.time()
        entries = []
        for url, answer in zip(self.urls, answers):
            kept = None if isinstance(answer, Down) else kept_snapshot(answer)
            if isinstance(answer, Down) or kept is None:
                entries.append(self._down(url, answer if isinstance(answer, Down) else Down("not-json")))
                continue
            self._last_seen[url] = now
            if kept["hostname"]:
                self._names[url] = kept["hostname"]
            entries.append({"address": url.split("://", 1)[1], "hostname": kept["hostname"], "up": True,
                            "why": None, "error": None,
                            "detail": None, "last_seen": None, "snapshot": kept})
        encoded = self._encode(entries)
        with self._lock:
            self._entries, self._json = entries, encoded
            self.rounds += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.read_once()
            except Exception as e:  # noqa: BLE001 - a bug in one round: the next round tries again
                self.last_error = f"hosts: {type(e).__name__}: {e}"
            self._stop.wait(max(0.0, self.period - (time.monotonic() - started)))
