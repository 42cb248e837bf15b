"""Many hosts through Prometheus: the HTTP API client, and the fleet it describes.

`vram serve` on each host exports its GPUs; Prometheus scrapes them; this module asks Prometheus
(GET /api/v1/query, instant queries) and builds one Fleet: every host with its scrape state and its
GPUs. Nothing here aggregates on its own: the numbers are the newest ones Prometheus holds.

Prometheus and its answers are not trusted (a broken proxy, a hostile server, a user name on some
host with terminal escapes in it):
- one deadline for all the queries of a reading, connection, headers and body together: a watch
  shuts the connection down when it passes, whatever it is waiting for (a byte a second is no
  answer), and the body is bounded in size;
- the JSON is parsed with its nesting bounded (a RecursionError is an answer that is not the API's),
  and only the shapes the API gives are read: label values are strings, sanitized before anyone
  prints them; GPU indexes are ASCII digits; every number finite and in its range, else unknown;
- Prometheus' warnings are kept once each and at most MAX_WARNINGS of them; the rest counted.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from typing import Any

from .cuda_env import CudaDevice
from .errors import RequestError, VramkitError
from .gpu_choice import Decision, Policy, Unit, decide, shortfall_text
from .gpu_state import GpuProcess
from .http_get import GetError, get
from .i18n import _, join_words
from .procs import sanitize

DEFAULT_TIMEOUT = 10.0  # seconds for Prometheus' answers to one reading (read_fleet's four queries)
MAX_ANSWER = 32 * 1024**2  # bytes of one answer: a fleet of thousands of GPUs fits well within
MAX_LABEL = 128  # characters of a label value kept
MAX_WARNINGS = 20  # distinct warnings of Prometheus kept (the rest only counted)
MAX_BYTES = 2**53  # a memory number above this (8 PiB) is not one
MAX_COUNT = 2**31  # processes, failed readings, dropped series: above this, not a count
SEEN_WITHIN = "1d"  # a target that exported vram_exporter_info this recently is a vram host, up or down

# The queries, one request each. GPU facts in one selector: a target's whole reading at once.
Q_UP = "up"
Q_SEEN = f"last_over_time(vram_exporter_info[{SEEN_WITHIN}])"
Q_GPU = '{__name__=~"vram_gpu_.+|vram_host_info|vram_process_series_dropped|vram_read_errors_total"}'
Q_USERS = "sum by (job, instance, gpu, user) (vram_process_memory_bytes)"

_GPU_INDEX = re.compile(r"[0-9]{1,5}")  # ASCII digits only: str.isdigit() takes '²' and '٣'


class PrometheusError(VramkitError):
    """Prometheus could not be asked, or answered something other than data (exit 1)."""


def clean(text: object) -> str:
    """A label value fit to print: control and format characters and lone surrogates replaced, bounded.
    Anything but a string or a number is shown as its type's name (str() of a deeply nested list
    would recurse)."""
    if not isinstance(text, (str, int, float)) or isinstance(text, bool):
        text = f"<{type(text).__name__}>"
    elif isinstance(text, int) and abs(text) >= 10**MAX_LABEL:  # str() refuses over 4300 digits
        text = "<a huge number>"
    value = str(text)[:MAX_LABEL * 4]
    value = re.sub("[\ud800-\udfff]", "\ufffd", sanitize(value))
    return value if len(value) <= MAX_LABEL else value[:MAX_LABEL - 1] + "…"


def check_url(url: str) -> str:
    """The base URL of a Prometheus server ('http://prom:9090', also behind a path prefix), or a
    RequestError naming the parameter `url`."""
    shown = clean(url if len(url) <= 80 else url[:77] + "...")
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise RequestError(_("expected Prometheus' address, like http://prometheus:9090, got {url}").format(
            url=repr(shown)), param="url")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise RequestError(_("bad port in {url}").format(url=repr(shown)), param="url") from None
    return url.strip().rstrip("/")


@dataclass
class Sample:
    labels: dict[str, str]  # sanitized
    value: float | None  # None: NaN, infinite or not a number


class Prometheus:
    """Instant queries through Prometheus' HTTP API (urllib, no extra dependency)."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT, max_answer: int = MAX_ANSWER):
        self.url = check_url(url)
        self.timeout = timeout
        self.max_answer = max_answer
        self.warnings: list[str] = []  # Prometheus' own warnings (its answer may be partial), each once
        self.warnings_left_out = 0  # distinct warnings beyond MAX_WARNINGS
        self._warned: set[str] = set()

    def query(self, promql: str, deadline: float | None = None) -> list[Sample]:
        """An instant query's vector; PrometheusError when it cannot be had by `deadline`
        (time.monotonic(); default: `timeout` from now)."""
        target = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        answer = self._get(target, time.monotonic() + self.timeout if deadline is None else deadline)
        data = self._json(answer)
        if not isinstance(data, dict):
            raise PrometheusError(_("Prometheus at {url} answered JSON that is not its API's").format(url=self.url))
        self._warn(data.get("warnings"))
        if data.get("status") != "success":
            kind, error = clean(data.get("errorType", "error")), clean(data.get("error", _("no reason given")))
            raise self._error_answer(f"{kind}: {error}")
        result = data.get("data")
        if not isinstance(result, dict) or result.get("resultType") != "vector" or not isinstance(
                result.get("result"), list):
            # Translators: {type} is a JSON type as Python names it (NoneType, list, str)
            raise PrometheusError(_("Prometheus at {url} answered a {type} where its API gives a vector").format(
                url=self.url, type=clean(type(result).__name__)))
        return [s for s in (_sample(item) for item in result["result"]) if s is not None]

    def _json(self, answer: bytes) -> Any:
        try:
            return json.loads(answer.decode("utf-8", "replace"))
        except RecursionError:
            raise PrometheusError(_("Prometheus at {url} answered JSON nested too deeply to be its API's").format(
                url=self.url)) from None
        except ValueError:  # not JSON, or a number of more than 4300 digits
            raise PrometheusError(_("Prometheus at {url} answered something that is not JSON (is this "
                                    "Prometheus' address?)").format(url=self.url)) from None

    def _warn(self, warnings: object) -> None:
        if not isinstance(warnings, list):
            return
        for w in warnings:
            if not isinstance(w, str):
                continue
            text = clean(w)
            if text in self._warned:
                continue
            self._warned.add(text)
            if len(self.warnings) < MAX_WARNINGS:
                self.warnings.append(text)
            else:
                self.warnings_left_out += 1

    def _get(self, target: str, deadline: float) -> bytes:
        try:
            answer = get(target, deadline, self.max_answer, headers={"Accept": "application/json"})
        except GetError as e:
            raise self._failed(e) from None
        if answer.status >= 300:  # Prometheus answers 400/422/503 with a JSON error body; a 3xx here is a
            # redirect not followed (a loop, or past urllib's ten): said as its status
            try:
                data = json.loads(answer.body.decode("utf-8", "replace"))
                error = f"{clean(data['errorType'])}: {clean(data['error'])}"
            except Exception:  # noqa: BLE001 - no JSON error body: say the status
                error = f"HTTP {clean(answer.status)} {clean(answer.reason)}"
            raise self._error_answer(error)
        return answer.body

    def _error_answer(self, error: str) -> PrometheusError:
        # Translators: {error} is Prometheus' own, e.g. "bad_data: ...", or "HTTP 503 Service Unavailable"
        return PrometheusError(_("Prometheus at {url} answered an error: {error}").format(url=self.url, error=error))

    def _failed(self, e: GetError) -> PrometheusError:
        if e.kind == "slow":
            return PrometheusError(_("Prometheus at {url} did not answer within {timeout}").format(
                url=self.url, timeout=f"{self.timeout:g}s"))
        if e.kind == "too-big":
            return PrometheusError(_("Prometheus at {url} answered more than {size} for one query: not read").format(
                url=self.url, size=f"{self.max_answer // 1024**2}MiB"))
        if e.kind == "unreachable":
            # Translators: {error} is the system's, in English, e.g. "Connection refused"
            return PrometheusError(_("cannot reach Prometheus at {url}: {error}").format(
                url=self.url, error=clean(e.detail)))
        if e.kind == "bad-body":
            # Translators: {error} is in English, e.g. "its gzip is broken: Error -3 while decompressing data"
            return PrometheusError(_("Prometheus at {url} answered, but its answer cannot be read: {error}").format(
                url=self.url, error=clean(e.detail)))
        return PrometheusError(_("Prometheus at {url} did not answer in HTTP: {error}").format(
            url=self.url, error=clean(e.detail)))


def _finite(value: object) -> float | None:
    """A sample's value ("1.5", as Prometheus gives it): a finite float, or None."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, str) and len(value) > 64:
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _sample(item: object) -> Sample | None:
    """One element of a vector: its labels (strings, as Prometheus' always are) and value; None
    when it is not one."""
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        return None
    metric: dict[Any, Any] = item["metric"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
        return None
    value = item.get("value")
    number = _finite(value[1]) if isinstance(value, list) and len(value) == 2 else None
    return Sample({clean(k): clean(v) for k, v in metric.items()}, number)


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
    vendor: str = "nvidia"  # vram_gpu_info's vendor label (a vram serve before AMD support has none: NVIDIA)


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


def _name_forms(name: str) -> set[str]:
    """The ways a name for a host reads, whichever was typed or claimed: in lower case, without a
    trailing dot or an IPv6 address's brackets, and without its port ("GPU-A.:9787" is gpu-a)."""
    text = name.strip().lower()
    forms = {text.strip("[]").rstrip(".")}
    host, sep, port = text.rpartition(":")
    if sep and port.isdigit() and (host.count(":") == 0 or host.endswith("]")):
        forms.add(host.strip("[]").rstrip("."))
    return forms


def names_no_one_else_claims(hosts: list[FleetHost]) -> None:
    """A host's name for itself is its own word: shown only where no other host of the list reads
    the same, by its word or by its address (in any case, with or without its port or a trailing
    dot). Else one host could pass for another (gpu-b answering that it is gpu-a, or that it is a
    down host's address, with GPUs to spare) and `fleet pick` send jobs to the wrong one; such a
    host is shown by its address."""
    forms = [_name_forms(h.instance) | (set() if h.host == h.instance else _name_forms(h.host)) for h in hosts]
    for h in hosts:
        if h.host == h.instance:
            continue
        claimed = _name_forms(h.host)
        # (the same target under another job is the same machine)
        if any(claimed & other for j, other in enumerate(forms) if hosts[j].instance != h.instance):
            h.notes.append(_("partial: it says it is {name}, as another host of the list is: shown by its "
                             "address").format(name=h.host))
            h.host = h.instance


@dataclass
class Fleet:
    prometheus: str | None  # its address; None when the hosts were read directly (fleet_hosts.py)
    hosts: list[FleetHost]
    warnings: list[str]  # Prometheus' warnings, each once, at most MAX_WARNINGS
    warnings_left_out: int = 0  # distinct warnings beyond those
    source: str = "prometheus"  # or "hosts": each host's own vram serve

    @property
    def down(self) -> list[FleetHost]:
        return [h for h in self.hosts if h.state == "down"]

    def to_dict(self) -> dict[str, Any]:
        hosts = []
        for h in self.hosts:
            d = asdict(h)
            d["state"] = h.state
            d["simulated"] = h.info.get("simulated") == "true"
            hosts.append(d)
        return {"source": self.source, "prometheus": self.prometheus, "hosts": hosts, "warnings": self.warnings,
                "warnings_left_out": self.warnings_left_out}


def _key(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("job", ""), labels.get("instance", "")


def _gpu_index(labels: dict[str, str]) -> int | None:
    text = labels.get("gpu", "")
    return int(text) if _GPU_INDEX.fullmatch(text) else None


def _in_range(value: float | None, high: float) -> float | None:
    """A non-negative number up to `high`, else None (unknown)."""
    return value if value is not None and 0 <= value <= high else None


def read_fleet(prom: Prometheus, jobs: tuple[str, ...] = ("vram",)) -> Fleet:
    """Every vram host Prometheus knows: the targets of `jobs`, and every target that exported
    vram_exporter_info within SEEN_WITHIN (so that one which went down is still listed). The four
    queries share one deadline, `prom.timeout` from now."""
    deadline = time.monotonic() + prom.timeout
    up = {_key(s.labels): s.value for s in prom.query(Q_UP, deadline)}
    seen = {_key(s.labels): s.labels.get("hostname", "") for s in prom.query(Q_SEEN, deadline)}
    readings = prom.query(Q_GPU, deadline)
    users = prom.query(Q_USERS, deadline)

    keys = set(seen) | {k for k in up if k[0] in jobs} | {_key(s.labels) for s in readings}
    keys = {k for k in keys if k[1]}  # a series without a target's instance (a recording rule's) is no host
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
        host = hosts.get(key)
        if host is None:
            continue
        if name == "vram_host_info":
            host.host = s.labels.get("hostname") or host.host
            host.info = {k: v for k, v in s.labels.items() if k not in ("__name__", "job", "instance", "hostname")}
            continue
        if name == "vram_read_errors_total":
            if _in_range(s.value, MAX_COUNT):
                errors[key] = s.value or 0.0
            continue
        if name == "vram_process_series_dropped":
            if _in_range(s.value, MAX_COUNT):
                dropped[key] = s.value or 0.0
            continue
        index = _gpu_index(s.labels)
        if index is None:
            continue
        gpu = gpus[key].setdefault(index, FleetGpu(index))
        _apply(gpu, name, s)
    for s in users:
        index = _gpu_index(s.labels)
        key = _key(s.labels)
        memory = _in_range(s.value, MAX_BYTES)
        if index is None or key not in gpus or memory is None:
            continue
        gpu = gpus[key].setdefault(index, FleetGpu(index))
        gpu.users[s.labels.get("user") or "unknown user"] = int(memory)
    for key, host in hosts.items():
        host.gpus = [gpus[key][i] for i in sorted(gpus[key])]
        for g in host.gpus:
            if g.users:
                g.top_user, g.top_user_memory = max(g.users.items(), key=lambda kv: (kv[1], kv[0]))
        _judge_host(host, errors.get(key), dropped.get(key))
    names_no_one_else_claims(list(hosts.values()))
    ordered = sorted(hosts.values(), key=lambda h: (h.host, h.instance, h.job))
    return Fleet(prom.url, ordered, list(prom.warnings), prom.warnings_left_out)


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
        gpu.vendor = "amd" if s.labels.get("vendor") == "amd" else "nvidia"
    elif name == "vram_gpu_lost":
        gpu.lost = s.value == 1
    elif name == "vram_gpu_utilization_ratio":
        ratio = _in_range(s.value, 1.0)
        gpu.utilization = None if ratio is None else round(ratio * 100)
    elif name in _FIELDS:
        number = _in_range(s.value, MAX_COUNT if name == "vram_gpu_processes" else MAX_BYTES)
        setattr(gpu, _FIELDS[name], None if number is None else int(number))


def _judge_host(host: FleetHost, read_errors: float | None, dropped: float | None) -> None:
    """Say plainly what is missing: the scrape down, no reading yet, a GPU without memory numbers."""
    if host.up is False:
        host.notes.append(_("scrape down (up == 0 for {target}): Prometheus cannot read it; no current "
                            "numbers").format(target=host.instance))
        host.gpus = []  # whatever Prometheus still holds is stale
        return
    if host.up is None and not host.gpus:
        host.notes.append(_("not scraped now: Prometheus has no target {target} (it exported within the last "
                            "{within})").format(target=host.instance, within=SEEN_WITHIN))
        return
    if not host.gpus:
        host.notes.append(_("partial: the target answers but reports no GPU ({n} failed readings)").format(
            n=f"{read_errors:.0f}") if read_errors else _("partial: the target answers but reports no GPU"))
        return
    missing = [g.index for g in host.gpus if not g.lost and (g.memory_used is None or g.memory_total is None)]
    if missing:
        host.notes.append(_("partial: no memory numbers for GPU {indices}").format(
            indices=join_words(map(str, missing))))
    if dropped:
        host.notes.append(_("partial: {n} process series left out by --max-process-series (top user may be "
                            "incomplete)").format(n=f"{dropped:.0f}"))


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
    def vendor(self) -> str:
        return self.decision.chosen[0].dev.vendor if self.decision.chosen else "nvidia"

    @property
    def env(self) -> dict[str, str]:
        """What to set there: the chosen vendor's variables (visible.py): CUDA's indices in PCI
        order under CUDA_DEVICE_ORDER=PCI_BUS_ID, or HIP_VISIBLE_DEVICES in ROCm's order."""
        from . import visible

        devices = [u.dev for u in host_units(self.host)]
        return visible.child_env([u.dev for u in self.decision.chosen], devices, {}, ids="index")

    @property
    def cuda_visible_devices(self) -> str:
        """The chosen GPUs as the variable names them (the name kept from before AMD GPUs)."""
        from . import visible

        return self.env[visible.variable_of([u.dev for u in self.decision.chosen])]


def host_units(host: FleetHost) -> list[Unit]:
    """The host's GPUs as gpu_choice.py's units (whole GPUs; Prometheus has no MIG series), in PCI order."""
    units = []
    for g in sorted(host.gpus, key=lambda g: (g.pci_bus_id or "", g.index)):
        dev = CudaDevice(key=g.uuid or f"{host.instance}/{g.index}", index=g.index, uuid=g.uuid, name=g.name,
                         pci_bus_id=g.pci_bus_id, lost=g.lost, vendor=g.vendor)
        capacity = None if g.memory_total is None else g.memory_total - (g.memory_reserved or 0)
        procs = [GpuProcess(pid=0, gpu=g.index, gpu_uuid=g.uuid, memory=m, user=u) for u, m in g.users.items()]
        units.append(Unit(dev=dev, memory_total=g.memory_total, memory_free=g.memory_free, capacity=capacity,
                          utilization=g.utilization, processes=procs, lost=g.lost,
                          memory_na=None if g.memory_free is not None else "not in Prometheus",
                          util_na=None if g.utilization is not None else "not in Prometheus"))
    return units


def pick_host(fleet: Fleet, policy: Policy) -> tuple[HostChoice | None, list[str]]:
    """The host whose GPUs fit `policy` best (gpu_choice.py judges each host's GPUs as `vram pick`
    does; among hosts that fit, the one whose chosen GPUs have the most free memory, then the
    least busy). Returns (choice or None, why each other host does not fit)."""
    fits: list[HostChoice] = []
    refusals = []
    # Translators: why a host does not fit, after its name ("gpu-b: GPUs 0, 1 are busy")
    refused = _("{host}: {why}")
    for host in fleet.hosts:
        if host.up is False or not host.gpus:
            refusals.append(refused.format(host=host.host, why=host.notes[0] if host.notes else _("no GPU numbers")))
            continue
        decision = decide(policy, host_units(host))
        if decision.ok:
            fits.append(HostChoice(host, decision))
        else:
            refusals.append(refused.format(host=host.host, why=decision.impossible or shortfall_text(decision)))

    def rank(c: HostChoice) -> tuple[int, int, str]:
        free = sum(u.memory_free or 0 for u in c.decision.chosen)
        util = sum(u.utilization or 0 for u in c.decision.chosen)
        return -free, util, c.host.host
    fits.sort(key=rank)
    return (fits[0] if fits else None), refusals

