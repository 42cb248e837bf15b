"""Many hosts through Prometheus: the HTTP API client, and the fleet it describes.

`vram serve` on each host exports its GPUs; Prometheus scrapes them; this module asks Prometheus
(GET /api/v1/query, instant queries) and builds one Fleet: every host with its scrape state and its
GPUs. Nothing here aggregates on its own: the numbers are the newest ones Prometheus holds.

Prometheus and its label values are not trusted: an answer is read with a timeout and a size
bound, and every label value is sanitized before anyone prints it (a user name on some host can
hold terminal escapes or bytes that are not UTF-8).
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

from .cuda_env import CudaDevice
from .errors import RequestError, VramkitError
from .model import GpuProcess
from .procs import sanitize
from .select import Decision, Policy, Unit, decide, shortfall_text

DEFAULT_TIMEOUT = 10.0  # seconds for one answer of Prometheus
MAX_ANSWER = 32 * 1024**2  # bytes of one answer: a fleet of thousands of GPUs fits well within
MAX_LABEL = 128  # characters of a label value kept
SEEN_WITHIN = "1d"  # a target that exported vram_exporter_info this recently is a vram host, up or down

# The queries, one request each. GPU facts in one selector: a target's whole reading at once.
Q_UP = "up"
Q_SEEN = f"last_over_time(vram_exporter_info[{SEEN_WITHIN}])"
Q_GPU = '{__name__=~"vram_gpu_.+|vram_host_info|vram_process_series_dropped|vram_read_errors_total"}'
Q_USERS = "sum by (job, instance, gpu, user) (vram_process_memory_bytes)"


class PrometheusError(VramkitError):
    """Prometheus could not be asked, or answered something other than data (exit 1)."""


def clean(text: object) -> str:
    """A label value fit to print: control and format characters and lone surrogates replaced, bounded."""
    value = re.sub("[\ud800-\udfff]", "\ufffd", sanitize(str(text)))
    return value if len(value) <= MAX_LABEL else value[:MAX_LABEL - 1] + "…"


def check_url(url: str) -> str:
    """The base URL of a Prometheus server ('http://prom:9090', also behind a path prefix), or a
    RequestError naming the parameter `url`."""
    shown = clean(url if len(url) <= 80 else url[:77] + "...")
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise RequestError(f"expected Prometheus' address, like http://prometheus:9090, got {shown!r}", param="url")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise RequestError(f"bad port in {shown!r}", param="url") from None
    return url.strip().rstrip("/")


@dataclass
class Sample:
    labels: dict[str, str]  # sanitized
    value: float | None  # None: NaN or not a number


class Prometheus:
    """Instant queries through Prometheus' HTTP API (urllib, no extra dependency)."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT, max_answer: int = MAX_ANSWER):
        self.url = check_url(url)
        self.timeout = timeout
        self.max_answer = max_answer
        self.warnings: list[str] = []  # Prometheus' own warnings (its answer may be partial)

    def query(self, promql: str) -> list[Sample]:
        """An instant query's vector; PrometheusError when it cannot be had."""
        target = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        answer = self._get(target)
        try:
            data = json.loads(answer.decode("utf-8", "replace"))
        except ValueError:
            raise PrometheusError(f"Prometheus at {self.url} answered something that is not JSON "
                                  "(is this Prometheus' address?)") from None
        if not isinstance(data, dict):
            raise PrometheusError(f"Prometheus at {self.url} answered JSON that is not its API's")
        self.warnings += [clean(w) for w in data.get("warnings") or [] if isinstance(w, str)]
        if data.get("status") != "success":
            kind, error = clean(data.get("errorType", "error")), clean(data.get("error", "no reason given"))
            raise PrometheusError(f"Prometheus at {self.url} answered an error: {kind}: {error}")
        result = data.get("data")
        if not isinstance(result, dict) or result.get("resultType") != "vector" or not isinstance(
                result.get("result"), list):
            raise PrometheusError(f"Prometheus at {self.url} answered a {clean(type(result).__name__)} "
                                  "where its API gives a vector")
        return [s for s in (_sample(item) for item in result["result"]) if s is not None]

    def _get(self, target: str) -> bytes:
        deadline = time.monotonic() + self.timeout
        request = urllib.request.Request(target, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return self._read(response, deadline)
        except urllib.error.HTTPError as e:  # Prometheus answers 400/422/503 with a JSON error body
            try:
                body = self._read(e, deadline)
                data = json.loads(body.decode("utf-8", "replace"))
                error = f"{clean(data['errorType'])}: {clean(data['error'])}"
            except (PrometheusError, ValueError, KeyError, TypeError, OSError):
                error = f"HTTP {e.code} {clean(e.reason)}"
            raise PrometheusError(f"Prometheus at {self.url} answered an error: {error}") from None
        except TimeoutError:
            raise self._slow() from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise self._slow() from None
            reason = e.reason.strerror if isinstance(e.reason, OSError) and e.reason.strerror else e.reason
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {clean(reason)}") from None
        except (OSError, ValueError) as e:  # a connection reset mid-answer, a malformed status line
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {clean(e)}") from None

    def _read(self, response: Any, deadline: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            if time.monotonic() > deadline:
                raise self._slow()
            chunk = response.read(65536)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_answer:
                raise PrometheusError(f"Prometheus at {self.url} answered more than "
                                      f"{self.max_answer // 1024**2}MiB for one query: not read")
            chunks.append(chunk)

    def _slow(self) -> PrometheusError:
        return PrometheusError(f"Prometheus at {self.url} did not answer within {self.timeout:g}s")


def _sample(item: object) -> Sample | None:
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        return None
    value = item.get("value")
    number: float | None = None
    if isinstance(value, list) and len(value) == 2:
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            number = None
        if number is not None and not math.isfinite(number):
            number = None
    labels = {clean(k): clean(v) for k, v in item["metric"].items()}
    return Sample(labels, number)


# ---------------------------------------------------------------- the fleet

@dataclass
class FleetGpu:
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    memory_used: int | None = None  # bytes
    memory_total: int | None = None
    memory_reserved: int | None = None
    memory_free: int | None = None
    utilization: int | None = None  # percent, as vram status shows it
    processes: int | None = None
    top_user: str | None = None  # the user holding the most memory on it
    top_user_memory: int | None = None
    users: dict[str, int] = field(default_factory=dict)  # user -> bytes held
    lost: bool = False


@dataclass
class FleetHost:
    host: str  # vram serve's --hostname (else the instance)
    instance: str
    job: str
    up: bool | None  # Prometheus' `up` for the target; None: not scraped by it (e.g. federated)
    info: dict[str, str] = field(default_factory=dict)  # vram_host_info's labels: driver_version, simulated, ...
    gpus: list[FleetGpu] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # why its data is missing or partial

    @property
    def simulated(self) -> bool:
        """The host runs vram on a simulated machine (it says so: its numbers are made up)."""
        return self.info.get("simulated") == "true"

    @property
    def state(self) -> str:
        """'up', 'down' or 'partial'."""
        if self.up is False:
            return "down"
        return "partial" if self.notes else "up"


@dataclass
class Fleet:
    prometheus: str
    hosts: list[FleetHost]
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        hosts = []
        for h in self.hosts:
            d = asdict(h)
            d["state"] = h.state
            d["simulated"] = h.info.get("simulated") == "true"
            hosts.append(d)
        return {"prometheus": self.prometheus, "hosts": hosts, "warnings": self.warnings}


def _key(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("job", ""), labels.get("instance", "")


def _gpu_index(labels: dict[str, str]) -> int | None:
    text = labels.get("gpu", "")
    return int(text) if text.isdigit() and len(text) < 6 else None


def read_fleet(prom: Prometheus, jobs: tuple[str, ...] = ("vram",)) -> Fleet:
    """Every vram host Prometheus knows: the targets of `jobs`, and every target that exported
    vram_exporter_info within SEEN_WITHIN (so that one which went down is still listed)."""
    up = {_key(s.labels): s.value for s in prom.query(Q_UP)}
    seen = {_key(s.labels): s.labels.get("hostname", "") for s in prom.query(Q_SEEN)}
    readings = prom.query(Q_GPU)
    users = prom.query(Q_USERS)

    keys = set(seen) | {k for k in up if k[0] in jobs} | {_key(s.labels) for s in readings}
    hosts: dict[tuple[str, str], FleetHost] = {}
    for key in keys:
        value = up.get(key)
        hosts[key] = FleetHost(host=seen.get(key) or key[1], instance=key[1], job=key[0],
                               up=None if key not in up else value == 1)
    gpus: dict[tuple[str, str], dict[int, FleetGpu]] = {k: {} for k in keys}
    errors: dict[tuple[str, str], float] = {}
    dropped: dict[tuple[str, str], float] = {}
    for s in readings:
        key, name = _key(s.labels), s.labels.get("__name__", "")
        host = hosts[key]
        if name == "vram_host_info":
            host.host = s.labels.get("hostname") or host.host
            host.info = {k: v for k, v in s.labels.items() if k not in ("__name__", "job", "instance", "hostname")}
            continue
        if name == "vram_read_errors_total" and s.value:
            errors[key] = s.value
            continue
        if name == "vram_process_series_dropped" and s.value:
            dropped[key] = s.value
            continue
        index = _gpu_index(s.labels)
        if index is None:
            continue
        gpu = gpus[key].setdefault(index, FleetGpu(index))
        _apply(gpu, name, s)
    for s in users:
        index = _gpu_index(s.labels)
        key = _key(s.labels)
        if index is None or key not in gpus or s.value is None:
            continue
        gpu = gpus[key].setdefault(index, FleetGpu(index))
        gpu.users[s.labels.get("user") or "unknown user"] = int(s.value)
    for key, host in hosts.items():
        host.gpus = [gpus[key][i] for i in sorted(gpus[key])]
        for g in host.gpus:
            if g.users:
                g.top_user, g.top_user_memory = max(g.users.items(), key=lambda kv: (kv[1], kv[0]))
        _judge_host(host, errors.get(key), dropped.get(key))
    ordered = sorted(hosts.values(), key=lambda h: (h.host, h.instance, h.job))
    return Fleet(prom.url, ordered, prom.warnings)


_FIELDS = {
    "vram_gpu_memory_used_bytes": "memory_used",
    "vram_gpu_memory_total_bytes": "memory_total",
    "vram_gpu_memory_reserved_bytes": "memory_reserved",
    "vram_gpu_memory_free_bytes": "memory_free",
    "vram_gpu_processes": "processes",
}


def _apply(gpu: FleetGpu, name: str, s: Sample) -> None:
    if name == "vram_gpu_info":
        gpu.uuid = s.labels.get("uuid") or None
        gpu.name = s.labels.get("name") or None
        gpu.pci_bus_id = s.labels.get("pci_bus_id") or None
    elif name == "vram_gpu_lost":
        gpu.lost = s.value == 1
    elif name == "vram_gpu_utilization_ratio" and s.value is not None:
        gpu.utilization = round(s.value * 100)
    elif name in _FIELDS and s.value is not None:
        setattr(gpu, _FIELDS[name], int(s.value))


def _judge_host(host: FleetHost, read_errors: float | None, dropped: float | None) -> None:
    """Say plainly what is missing: the scrape down, no reading yet, a GPU without memory numbers."""
    if host.up is False:
        host.notes.append(f"scrape down (up == 0 for {host.instance}): Prometheus cannot read it; "
                          "no current numbers")
        host.gpus = []  # whatever Prometheus still holds is stale
        return
    if host.up is None and not host.gpus:
        host.notes.append(f"not scraped now: Prometheus has no target {host.instance} (it exported "
                          f"within the last {SEEN_WITHIN})")
        return
    if not host.gpus:
        why = f" ({read_errors:.0f} failed readings)" if read_errors else ""
        host.notes.append(f"partial: the target answers but reports no GPU{why}")
        return
    missing = [g.index for g in host.gpus if not g.lost and (g.memory_used is None or g.memory_total is None)]
    if missing:
        host.notes.append(f"partial: no memory numbers for GPU {', '.join(map(str, missing))}")
    if dropped:
        host.notes.append(f"partial: {dropped:.0f} process series left out by --max-process-series "
                          "(top user may be incomplete)")


# ---------------------------------------------------------------- choosing a host

@dataclass
class HostChoice:
    host: FleetHost
    decision: Decision

    @property
    def gpus(self) -> list[FleetGpu]:
        chosen = {u.dev.index for u in self.decision.chosen}
        return [g for g in self.host.gpus if g.index in chosen]

    @property
    def cuda_visible_devices(self) -> str:
        """Indices in PCI order (NVML's), right under CUDA_DEVICE_ORDER=PCI_BUS_ID."""
        return ",".join(str(u.dev.index) for u in self.decision.chosen)


def host_units(host: FleetHost) -> list[Unit]:
    """The host's GPUs as select.py's units (whole GPUs; Prometheus has no MIG series), in PCI order."""
    units = []
    for g in sorted(host.gpus, key=lambda g: (g.pci_bus_id or "", g.index)):
        dev = CudaDevice(key=g.uuid or f"{host.instance}/{g.index}", index=g.index, uuid=g.uuid, name=g.name,
                         pci_bus_id=g.pci_bus_id, lost=g.lost)
        capacity = None if g.memory_total is None else g.memory_total - (g.memory_reserved or 0)
        procs = [GpuProcess(pid=0, gpu=g.index, gpu_uuid=g.uuid, memory=m, user=u) for u, m in g.users.items()]
        units.append(Unit(dev=dev, memory_total=g.memory_total, memory_free=g.memory_free, capacity=capacity,
                          utilization=g.utilization, processes=procs, lost=g.lost,
                          memory_na=None if g.memory_free is not None else "not in Prometheus",
                          util_na=None if g.utilization is not None else "not in Prometheus"))
    return units


def pick_host(fleet: Fleet, policy: Policy) -> tuple[HostChoice | None, list[str]]:
    """The host whose GPUs fit `policy` best (select.py judges each host's GPUs as `vram pick`
    does; among hosts that fit, the one whose chosen GPUs have the most free memory, then the
    least busy). Returns (choice or None, why each other host does not fit)."""
    fits: list[HostChoice] = []
    refusals = []
    for host in fleet.hosts:
        if host.up is False or not host.gpus:
            refusals.append(f"{host.host}: {host.notes[0] if host.notes else 'no GPU numbers'}")
            continue
        decision = decide(policy, host_units(host))
        if decision.ok:
            fits.append(HostChoice(host, decision))
        else:
            refusals.append(f"{host.host}: {decision.impossible or shortfall_text(decision)}")

    def rank(c: HostChoice) -> tuple[int, int, str]:
        free = sum(u.memory_free or 0 for u in c.decision.chosen)
        util = sum(u.utilization or 0 for u in c.decision.chosen)
        return -free, util, c.host.host
    fits.sort(key=rank)
    return (fits[0] if fits else None), refusals

