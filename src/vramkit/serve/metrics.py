"""What `vram serve` exports to Prometheus: a snapshot as metric families, named by Prometheus'
conventions (base units: bytes, ratios 0-1, celsius, watts, seconds), and optionally also under
dcgm-exporter's names so that existing DCGM dashboards work unchanged. docs/metrics.md lists them.

A field the driver does not report (None) has no sample: a missing series, never a 0.
Per-process series carry pid and user (inside a container, the pid here, empty where none is
known, and the host's as nvml_pid), never the command line unless asked for
(`commands=True`), and are capped (the largest holders first) so that a machine with thousands
of processes cannot blow up Prometheus' series count.

Two ways to the same text: `render()` writes Prometheus' text format (0.0.4) directly; it is
what `vram serve` sends (8 GPUs x 200 processes in about 1 ms, ~8x faster than through
prometheus_client, so a scrape stays short even when it meets a reading). `SnapshotCollector`
yields the same families as prometheus_client objects, for a prometheus_client registry and as
the reference tests/test_serve_exposition.py compares `render()` with, sample by sample. The two
are kept apart on purpose (a shared table would let one typo pass the comparison): a new metric
goes into both, and that test fails until they agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector
from prometheus_client.samples import Sample as PromSample

from ..gpu_state import Device, GpuProcess, Health, Snapshot
from ..procs import sanitize
from ..procs.workload import short_id

MIB = 1024**2
MAX_LABEL = 128  # characters of a label value another user chose (user names, commands)


@dataclass
class ExportState:
    """What the exporter knows besides the snapshot: the host, read timings and errors."""

    hostname: str
    version: str
    read_seconds: float | None = None  # how long the newest reading of the machine took
    read_errors: int = 0  # readings that failed, since start
    process_series_dropped: int = 0  # (process, GPU) pairs left out by the cap at the newest reading
    # GPU or MIG UUID -> (namespace, pod, container) of the one pod the kubelet lists it for
    # (kubelet.GpuPods; --compat dcgm labels the GPU's DCGM_FI_* series with it, as dcgm-exporter)
    gpu_pods: dict[str, tuple[str, str, str | None]] | None = None


def label(text: str | None) -> str:
    """A label value from text another user chose: control and format characters stripped, lone
    surrogates (bytes that were not UTF-8, decoded with surrogateescape, or "\\udcff" in a JSON
    scenario) replaced, since the exposition format is UTF-8 and encoding one would fail the whole
    scrape; bounded (prometheus_client escapes quotes, backslashes and newlines itself)."""
    if not text:
        return ""
    clean = _SURROGATE.sub("\ufffd", sanitize(text))
    return clean if len(clean) <= MAX_LABEL else clean[:MAX_LABEL - 1] + "…"


_SURROGATE = re.compile("[\ud800-\udfff]")


class SnapshotCollector(PromCollector):
    """A prometheus_client collector over the newest snapshot (`latest()` returns it, or None
    before the first reading)."""

    def __init__(self, latest: object, state: ExportState, *, commands: bool = False,
                 max_process_series: int = 2000, dcgm_names: bool = False, compat: Iterable[str] = (),
                 xids: Callable[[], Xids | None] = lambda: None):
        self._latest = latest
        self.state = state
        self.commands = commands
        self.max_process_series = max_process_series
        self.compat = frozenset(compat) | ({"dcgm"} if dcgm_names else set())
        self.xids = xids

    def collect(self) -> Iterator[Metric]:
        snap = self._latest()  # type: ignore[operator]
        if snap is None:
            yield from exporter_metrics(self.state)
            return
        # Built first: it counts the process series the cap drops, which exporter_metrics reports
        # for this same reading.
        families = list(vram_metrics(snap, self.state, self.commands, self.max_process_series,
                                     dcgm="dcgm" in self.compat))
        extra = extra_families(snap, self.state, self.compat, self.xids(), self.commands, self.max_process_series)
        yield from exporter_metrics(self.state)
        yield from families
        vram, others = _split(extra)
        yield from (_prom_family(f) for f in vram)
        if "dcgm" in self.compat:
            yield from dcgm_metrics(snap, self.state.hostname, dcgm_pod_labels(snap, self.state.gpu_pods))
        yield from (_prom_family(f) for f in others)


def _split(extra: list[Family]) -> tuple[list[Family], list[Family]]:
    """(the vram_ families, the other exporters' ones)."""
    return [f for f in extra if f[0].startswith("vram_")], [f for f in extra if not f[0].startswith("vram_")]


def _prom_family(f: Family) -> Metric:
    """A family built once (extra_families) as a prometheus_client Metric."""
    name, kind, doc, samples = f
    metric = Metric(name[:-6] if kind == "counter" else name, doc, kind)
    for labels, value in samples:
        metric.add_sample(name, labels, value)
    return metric


def exporter_metrics(state: ExportState) -> Iterator[Metric]:
    info = InfoMetricFamily("vram_exporter", "vram serve itself", labels=["version", "hostname"])
    info.add_metric([state.version, label(state.hostname)], {})
    yield info
    if state.read_seconds is not None:
        g = GaugeMetricFamily("vram_read_duration_seconds", "How long the newest reading of the GPUs took")
        g.add_metric([], state.read_seconds)
        yield g
    c = CounterMetricFamily("vram_read_errors", "Readings of the GPUs that failed since vram serve started")
    c.add_metric([], state.read_errors)
    yield c
    d = GaugeMetricFamily("vram_process_series_dropped", "Processes left out of the per-process series by "
                          "--max-process-series at the newest reading")
    d.add_metric([], state.process_series_dropped)
    yield d


_GPU_LABELS = ["gpu", "uuid"]


def _gauge(name: str, doc: str, labels: list[str] = _GPU_LABELS) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def vram_metrics(snap: Snapshot, state: ExportState, commands: bool, max_process_series: int,
                 dcgm: bool = False) -> Iterator[Metric]:
    host = InfoMetricFamily("vram_host", "The machine vram reads", labels=[
        "hostname", "driver_version", "cuda_version", "simulated", "scenario"])
    host.add_metric([label(state.hostname), snap.driver_version or "", snap.cuda_version or "",
                     "true" if snap.simulated else "false", label(snap.scenario)], {})
    yield host
    info = InfoMetricFamily("vram_gpu", "Each GPU", labels=["gpu", "uuid", "name", "pci_bus_id", "vendor"])
    fields = {
        "memory_used": _gauge("vram_gpu_memory_used_bytes", "GPU memory in use (NVML; reserved memory apart)"),
        "memory_total": _gauge("vram_gpu_memory_total_bytes", "GPU memory in all"),
        "memory_free": _gauge("vram_gpu_memory_free_bytes", "GPU memory free"),
        "memory_reserved": _gauge("vram_gpu_memory_reserved_bytes", "GPU memory the driver reserves"),
        "utilization": _gauge("vram_gpu_utilization_ratio", "Share of recent time a kernel ran (0-1)"),
        "memory_utilization": _gauge("vram_gpu_memory_utilization_ratio",
                                     "Share of recent time memory was read or written (0-1)"),
        "temperature": _gauge("vram_gpu_temperature_celsius", "GPU temperature"),
        "power_draw": _gauge("vram_gpu_power_watts", "Power drawn"),
        "power_limit": _gauge("vram_gpu_power_limit_watts", "Enforced power limit"),
    }
    ratios = {"utilization", "memory_utilization"}
    lost = _gauge("vram_gpu_lost", "1 when the GPU fell off the bus or stopped answering")
    procs = _gauge("vram_gpu_processes", "Processes holding memory on the GPU")
    for g in snap.gpus:
        key = [str(g.index), g.uuid or ""]
        info.add_metric([str(g.index), g.uuid or "", label(g.name), g.pci_bus_id or "", g.vendor], {})
        lost.add_metric(key, 1.0 if g.lost else 0.0)
        if g.lost:
            continue
        if "processes" not in g.na:  # a list the driver would not give has no count: no series, never 0
            procs.add_metric(key, float(len(g.processes)))
        for name, family in fields.items():
            value = getattr(g, name)
            if value is not None:
                family.add_metric(key, value / 100 if name in ratios else float(value))
    yield info
    yield lost
    yield procs
    yield from fields.values()
    yield from _process_metrics(snap, state, commands, max_process_series, dcgm)


def _process_metrics(snap: Snapshot, state: ExportState, commands: bool, cap: int,
                     dcgm: bool = False) -> Iterator[Metric]:
    labels = ["gpu", "uuid", "pid", "user"] + (["command"] if commands else [])
    memory = _gauge("vram_process_memory_bytes", "GPU memory a process holds on a GPU", labels)
    sm = _gauge("vram_process_sm_utilization_ratio", "Share of recent time the process's own kernels ran "
                "(NVML per-process samples; 0-1)", labels)
    idle = _gauge("vram_process_idle_seconds", "How long the process has held memory on the GPU without "
                  "running kernels of its own (0: busy)", labels)
    rows = [(g, p) for g in snap.gpus for p in g.processes]
    rows.sort(key=lambda gp: -(gp[1].memory or 0))
    state.process_series_dropped = max(0, len(rows) - cap)
    owners = OwnerLabels(dcgm)
    for g, p in rows[:cap]:
        key = [str(g.index), g.uuid or "", pid_label(p), label(p.user)]
        if commands:
            key.append(label(p.command))
        values = [(memory, None if p.memory is None else float(p.memory)),
                  (sm, None if p.sm_utilization is None else p.sm_utilization / 100),
                  (idle, float(p.idle_for or 0.0) if p.idle else 0.0)]
        owner = owners.of(p) + nvml_pid_label(p)
        if p.mig_gi is not None or owner:  # a MIG instance, as dcgm-exporter labels it; an owner; a host pid
            named = {**dict(zip(labels, key)), **dict(owner)}
            if p.mig_gi is not None:
                named.update(GPU_I_ID=str(p.mig_gi), GPU_I_PROFILE=label(_mig_of(g).get(p.mig_gi, "")))
            for family, value in values:
                if value is not None:
                    family.samples.append(PromSample(family.name, named, value))
            continue
        for family, value in values:
            if value is not None:
                family.add_metric(key, value)
    yield memory
    yield sm
    yield idle


def pid_label(p: GpuProcess) -> str:
    """A row's pid label: its pid here, or "" where NVML listed it under another PID namespace's
    pid (inside a container) that no process here could be told to be: that number names another
    process here, or none (the JSON's pid null)."""
    pid = p.pid_here
    return "" if pid is None else str(pid)


def nvml_pid_label(p: GpuProcess) -> tuple[tuple[str, str], ...]:
    """nvml_pid, the host pid NVML listed a row under where it is another PID namespace's (inside a
    container; the JSON's nvml_pid): it keeps apart the rows with no pid here, and follows a process
    whether or not it could be told to be one here."""
    return () if p.nvml_pid is None else (("nvml_pid", str(p.nvml_pid)),)


# Whom a process works for, as labels of its series: the names dcgm-exporter gives a pod's
# (pod, namespace, container: kube-state-metrics' too), and the Slurm job as slurm_job, or as
# dcgm-exporter's hpc_job under --compat dcgm. At most MAX_OWNERS distinct owners a reading (the
# largest holders first): more would multiply Prometheus' series; the rest carry none.
MAX_OWNERS = 500


class OwnerLabels:
    """The owner labels of each process of one reading, under the MAX_OWNERS cap."""

    def __init__(self, dcgm: bool):
        self.job_label = "hpc_job" if dcgm else "slurm_job"
        self.seen: set[tuple[tuple[str, str], ...]] = set()

    def of(self, p: GpuProcess) -> tuple[tuple[str, str], ...]:
        w = p.workload
        if w is None:
            return ()
        pairs: list[tuple[str, str]] = []
        if w.pod is not None:
            pairs += [("pod", label(w.pod)), ("namespace", label(w.namespace))]
        container = w.pod_container if w.pod is not None else (w.container_name or short_id(w))
        if container:
            pairs.append(("container", label(container)))
        if w.slurm_job is not None:
            pairs.append((self.job_label, str(w.slurm_job)))
        owner = tuple(pairs)
        if owner and owner not in self.seen:
            if len(self.seen) >= MAX_OWNERS:
                return ()
            self.seen.add(owner)
        return owner


# dcgm-exporter's series for the facts vram also reads: (name, help, Device field, divisor). Names,
# help and units as etc/default-counters.csv of NVIDIA/dcgm-exporter says (memory in MiB, integer;
# utilization in %); FB_TOTAL and POWER_MGMT_LIMIT are DCGM fields outside that default list, which
# a DCGM set-up exports when its counters file names them.
DCGM_FIELDS = [
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "memory_used", MIB),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "memory_free", MIB),
    ("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).", "memory_total", MIB),
    ("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", "memory_reserved", MIB),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "utilization", 1),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "memory_utilization", 1),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature", 1),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_draw", 1),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", "power_limit", 1),
]
# dcgm-exporter's labels, in its order: UUID upper case (its default; --use-old-namespace gives
# uuid), device nvidiaN, and Hostname as its releases to 4.5 write it (its master renamed it to
# hostname in May 2026; a dashboard joining on it should match either).
DCGM_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
_MIG_FB = ("memory_used", "memory_free", "memory_total")  # the fields a MIG instance has its own of


def dcgm_metrics(snap: Snapshot, hostname: str, pods: PodLabels | None = None) -> Iterator[Metric]:
    """dcgm-exporter's names, units and labels for the same facts (DCGM_FIELDS, DCGM_LABELS), and
    the pod a GPU or MIG instance is allocated to (`pods`: dcgm_pod_labels). Memory is whole MiB,
    rounded down as DCGM gives it."""
    pods = pods or {}
    families = [(GaugeMetricFamily(name, doc, labels=DCGM_LABELS), field_name, unit)
                for name, doc, field_name, unit in DCGM_FIELDS]
    for g in snap.gpus:
        if g.lost:
            continue
        key = [str(g.index), g.uuid or "", g.pci_bus_id or "", f"nvidia{g.index}", label(g.name), label(hostname)]
        pod = pods.get(g.uuid or "")
        for family, field_name, unit in families:
            value = getattr(g, field_name)
            if value is not None:
                number = float(value // unit) if unit != 1 else float(value)
                if pod:
                    family.samples.append(PromSample(family.name, {**dict(zip(DCGM_LABELS, key)), **dict(pod)},
                                                     number))
                else:
                    family.add_metric(key, number)
            if field_name in _MIG_FB:  # each MIG instance's framebuffer, with GPU_I_ID and GPU_I_PROFILE
                for m in g.mig_devices:
                    v = getattr(m, field_name)
                    if v is not None:
                        labels = {**dict(zip(DCGM_LABELS, key)), "GPU_I_ID": str(m.gi),
                                  "GPU_I_PROFILE": label(mig_profile(m.name)), **dict(pods.get(m.uuid or "", ()))}
                        family.samples.append(PromSample(family.name, labels, float(v // MIB)))
    for family, _, _ in families:
        yield family


# ---------------------------------------------------------------- the text format, written directly
# The same families, names, labels and values as above, in the same order and byte for byte as
# prometheus_client's generate_latest writes them: labels in sorted order, HELP escaped, values as
# Go writes floats. Label names are constants here, so each label block ({gpu="0",uuid="..."}) is
# built once per GPU, or once per (process, GPU) pair, and reused for every series that carries it.

def go_float(value: float) -> str:
    """`value` as the text format writes it: prometheus_client's floatToGoString (Go switches to
    an exponent sooner than Python's repr: 1e+07, not 10000000.0)."""
    d = float(value)
    if d != d:
        return "NaN"
    if d in (_INF, -_INF):
        return "+Inf" if d > 0 else "-Inf"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


_INF = float("inf")


def _value(text: str) -> str:
    """A label value as the format quotes it: backslash, double quote and newline escaped."""
    if "\\" in text or "\n" in text or '"' in text:
        return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return text


def _block(pairs: list[tuple[str, str]]) -> str:
    """{a="1",b="2"}: the labels sorted by name, as prometheus_client writes them."""
    return "{" + ",".join(f'{k}="{_value(v)}"' for k, v in sorted(pairs)) + "}"


class _Text:
    """Lines of one exposition."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, doc: str, samples: list[tuple[str, float]]) -> None:
        """HELP, TYPE and one line per (label block, value); `name` as exposed (_total, _info)."""
        doc = doc.replace("\\", r"\\").replace("\n", r"\n")
        out = self.lines
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        out.extend(f"{name}{labels} {go_float(v)}\n" for labels, v in samples)


def render(snap: Snapshot | None, state: ExportState, *, commands: bool = False, max_process_series: int = 2000,
           dcgm_names: bool = False, compat: Iterable[str] = (), xids: Xids | None = None) -> bytes:
    """What /metrics answers for `snap` (None: before the first reading, the exporter's own
    series only): the text SnapshotCollector's families make through prometheus_client, written
    directly. Sets state.process_series_dropped for this reading, as SnapshotCollector does."""
    text = _Text()
    if snap is None:
        _exporter_text(text, state)
        return "".join(text.lines).encode()
    # Built first: the cap's count of dropped series is reported above them, for this reading.
    schemes = frozenset(compat) | ({"dcgm"} if dcgm_names else set())
    body = _Text()
    _vram_text(body, snap, state, commands, max_process_series, "dcgm" in schemes)
    vram, others = _split(extra_families(snap, state, schemes, xids, commands, max_process_series))
    _families_text(body, vram)
    if "dcgm" in schemes:
        _dcgm_text(body, snap, state.hostname, dcgm_pod_labels(snap, state.gpu_pods))
    _families_text(body, others)
    _exporter_text(text, state)
    return ("".join(text.lines) + "".join(body.lines)).encode()


def _families_text(text: _Text, families: list[Family]) -> None:
    for name, kind, doc, samples in families:
        text.family(name, kind, doc, [(_block(list(labels.items())) if labels else "", v) for labels, v in samples])


def _exporter_text(text: _Text, state: ExportState) -> None:
    text.family("vram_exporter_info", "gauge", "vram serve itself",
                [(_block([("version", state.version), ("hostname", label(state.hostname))]), 1.0)])
    if state.read_seconds is not None:
        text.family("vram_read_duration_seconds", "gauge", "How long the newest reading of the GPUs took",
                    [("", state.read_seconds)])
    text.family("vram_read_errors_total", "counter", "Readings of the GPUs that failed since vram serve started",
                [("", state.read_errors)])
    text.family("vram_process_series_dropped", "gauge", "Processes left out of the per-process series by "
                "--max-process-series at the newest reading", [("", state.process_series_dropped)])


# vram_gpu_* per field: (Device field, name, help, scale), in the order exposed.
_GPU_FIELDS = [
    ("memory_used", "vram_gpu_memory_used_bytes", "GPU memory in use (NVML; reserved memory apart)", 1),
    ("memory_total", "vram_gpu_memory_total_bytes", "GPU memory in all", 1),
    ("memory_free", "vram_gpu_memory_free_bytes", "GPU memory free", 1),
    ("memory_reserved", "vram_gpu_memory_reserved_bytes", "GPU memory the driver reserves", 1),
    ("utilization", "vram_gpu_utilization_ratio", "Share of recent time a kernel ran (0-1)", 100),
    ("memory_utilization", "vram_gpu_memory_utilization_ratio",
     "Share of recent time memory was read or written (0-1)", 100),
    ("temperature", "vram_gpu_temperature_celsius", "GPU temperature", 1),
    ("power_draw", "vram_gpu_power_watts", "Power drawn", 1),
    ("power_limit", "vram_gpu_power_limit_watts", "Enforced power limit", 1),
]


def _vram_text(text: _Text, snap: Snapshot, state: ExportState, commands: bool, cap: int,
               dcgm: bool = False) -> None:
    text.family("vram_host_info", "gauge", "The machine vram reads", [(_block([
        ("hostname", label(state.hostname)), ("driver_version", snap.driver_version or ""),
        ("cuda_version", snap.cuda_version or ""), ("simulated", "true" if snap.simulated else "false"),
        ("scenario", label(snap.scenario))]), 1.0)])
    info, lost, procs = [], [], []
    fields: list[list[tuple[str, float]]] = [[] for _ in _GPU_FIELDS]
    for g in snap.gpus:
        key = _block([("gpu", str(g.index)), ("uuid", g.uuid or "")])
        info.append((_block([("gpu", str(g.index)), ("uuid", g.uuid or ""), ("name", label(g.name)),
                             ("pci_bus_id", g.pci_bus_id or ""), ("vendor", g.vendor)]), 1.0))
        lost.append((key, 1.0 if g.lost else 0.0))
        if g.lost:
            continue
        if "processes" not in g.na:  # a list the driver would not give has no count: no series, never 0
            procs.append((key, float(len(g.processes))))
        for samples, (field, _, _, scale) in zip(fields, _GPU_FIELDS):
            value = getattr(g, field)
            if value is not None:
                samples.append((key, value / scale if scale != 1 else float(value)))
    text.family("vram_gpu_info", "gauge", "Each GPU", info)
    text.family("vram_gpu_lost", "gauge", "1 when the GPU fell off the bus or stopped answering", lost)
    text.family("vram_gpu_processes", "gauge", "Processes holding memory on the GPU", procs)
    for samples, (_, name, doc, _) in zip(fields, _GPU_FIELDS):
        text.family(name, "gauge", doc, samples)
    _process_text(text, snap, state, commands, cap, dcgm)


def _process_text(text: _Text, snap: Snapshot, state: ExportState, commands: bool, cap: int,
                  dcgm: bool = False) -> None:
    rows = [(g, p) for g in snap.gpus for p in g.processes]
    rows.sort(key=lambda gp: -(gp[1].memory or 0))
    state.process_series_dropped = max(0, len(rows) - cap)
    owners = OwnerLabels(dcgm)
    # Sorted label names: command, gpu, pid, user, uuid. The GPU's part is the same for its pairs.
    gpu_part = {id(g): (f'gpu="{g.index}"', f'uuid="{_value(g.uuid or "")}"}}') for g in snap.gpus}
    users: dict[str | None, str] = {}
    memory, sm, idle = [], [], []
    for g, p in rows[:cap]:
        gpu, uuid = gpu_part[id(g)]
        user = users.get(p.user)
        if user is None:
            user = users[p.user] = _value(label(p.user))
        head = f'{{command="{_value(label(p.command))}",' if commands else "{"
        if p.mig_gi is not None:  # upper case sorts first: GPU_I_ID, GPU_I_PROFILE, command, ...
            profile = _value(label(_mig_of(g).get(p.mig_gi, "")))
            head = f'{{GPU_I_ID="{p.mig_gi}",GPU_I_PROFILE="{profile}",' + head[1:]
        pid = pid_label(p)
        key = f'{head}{gpu},pid="{pid}",user="{user}",{uuid}'
        owner = owners.of(p) + nvml_pid_label(p)
        if owner:  # its labels sort among the others: the block built whole (few processes have one)
            pairs = [("gpu", str(g.index)), ("uuid", g.uuid or ""), ("pid", pid), ("user", label(p.user)),
                     *owner]
            if commands:
                pairs.append(("command", label(p.command)))
            if p.mig_gi is not None:
                pairs += [("GPU_I_ID", str(p.mig_gi)), ("GPU_I_PROFILE", label(_mig_of(g).get(p.mig_gi, "")))]
            key = _block(pairs)
        if p.memory is not None:
            memory.append((key, float(p.memory)))
        if p.sm_utilization is not None:
            sm.append((key, p.sm_utilization / 100))
        idle.append((key, float(p.idle_for or 0.0) if p.idle else 0.0))
    text.family("vram_process_memory_bytes", "gauge", "GPU memory a process holds on a GPU", memory)
    text.family("vram_process_sm_utilization_ratio", "gauge", "Share of recent time the process's own kernels "
                "ran (NVML per-process samples; 0-1)", sm)
    text.family("vram_process_idle_seconds", "gauge", "How long the process has held memory on the GPU without "
                "running kernels of its own (0: busy)", idle)


def _dcgm_text(text: _Text, snap: Snapshot, hostname: str, pods: PodLabels) -> None:
    rows = [(g, _block([("gpu", str(g.index)), ("UUID", g.uuid or ""), ("pci_bus_id", g.pci_bus_id or ""),
                        ("device", f"nvidia{g.index}"), ("modelName", label(g.name)),
                        ("Hostname", label(hostname)), *pods.get(g.uuid or "", ())]))
            for g in snap.gpus if not g.lost]
    for name, doc, field, unit in DCGM_FIELDS:
        samples = []
        for g, key in rows:
            value = getattr(g, field)
            if value is not None:
                samples.append((key, float(value // unit) if unit != 1 else float(value)))
            if field in _MIG_FB:
                for m in g.mig_devices:
                    v = getattr(m, field)
                    if v is not None:
                        samples.append((_block([
                            ("gpu", str(g.index)), ("UUID", g.uuid or ""), ("pci_bus_id", g.pci_bus_id or ""),
                            ("device", f"nvidia{g.index}"), ("modelName", label(g.name)),
                            ("Hostname", label(hostname)), ("GPU_I_ID", str(m.gi)),
                            ("GPU_I_PROFILE", label(mig_profile(m.name))), *pods.get(m.uuid or "", ())]),
                                        float(v // MIB)))
        text.family(name, "gauge", doc, samples)


# ---------------------------------------------------------------- the families built once for both writers
# Health, XID, MIG and the other exporters' names (--compat). Each is (name, type, help, samples:
# [(labels, value)]), built by one function below and written by both render() and
# SnapshotCollector: their names and units are checked against docs/metrics.md and the dashboards
# (tests/e2e/test_metrics_compat.py), and the comparison of the two writers checks the text itself.
Sample = tuple[dict[str, str], float]
Family = tuple[str, str, str, list[Sample]]
COMPAT_SCHEMES = ("dcgm", "nvitop", "nvidia-smi-exporter")


@dataclass
class Xids:
    """What the XID waiter has seen: watched GPU -> XID -> events, and GPU -> (last XID, unix time)."""

    counts: dict[int, dict[int, int]]
    last: dict[int, tuple[int, float]]


def _throttle_bits() -> dict[str, int]:
    from ..nvml.scenario import THROTTLE_REASONS  # NVML's bits by their words (a light module)

    return THROTTLE_REASONS


def mig_profile(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3 MIG 3g.40gb' -> '3g.40gb' (NVML names a MIG device so)."""
    if not name or " MIG " not in name:
        return ""
    return name.rsplit(" MIG ", 1)[1].strip()


def _mig_of(g: Device) -> dict[int, str]:
    return {m.gi: mig_profile(m.name) for m in g.mig_devices}


def extra_families(snap: Snapshot, state: ExportState, compat: frozenset[str], xids: Xids | None,
                   commands: bool, cap: int) -> list[Family]:
    out = _vram_health(snap) + _vram_xid(snap, xids) + _vram_mig(snap)
    if "dcgm" in compat:
        out += _dcgm_more(snap, state.hostname, xids, dcgm_pod_labels(snap, state.gpu_pods))
    if "nvitop" in compat:
        out += _nvitop(snap, state.hostname, commands, cap)
    if "nvidia-smi-exporter" in compat:
        out += _nvidia_smi(snap, xids, cap)
    return out


def _fam(name: str, doc: str, kind: str = "gauge") -> Family:
    return (name, kind, doc, [])


def _per_gpu(rows: list[tuple[str, str, str, Callable[[Health], float | None]]],
             gpus: list[tuple[dict[str, str], Health]],
             kind_of: Callable[[str], str] = lambda n: "counter" if n.endswith("_total") else "gauge") -> list[Family]:
    out = []
    for name, doc, _, value in rows:
        samples: list[Sample] = []
        for labels, h in gpus:
            v = value(h)
            if v is not None:
                samples.append((labels, float(v)))
        out.append((name, kind_of(name), doc, samples))
    return out


def _healthy(snap: Snapshot) -> list[tuple[Device, Health]]:
    """(GPU, its health) for each GPU not lost whose health was read."""
    return [(g, g.health) for g in snap.gpus if not g.lost and g.health is not None]


def _scaled(v: float | None, k: float) -> float | None:
    return None if v is None else v * k


def _flag(v: bool | None) -> float | None:
    return None if v is None else (1.0 if v else 0.0)


_MHZ = 1e6
_VRAM_HEALTH: list[tuple[str, str, str, Callable[[Health], float | None]]] = [
    ("vram_gpu_sm_clock_hertz", "SM clock", "", lambda h: _scaled(h.sm_clock, _MHZ)),
    ("vram_gpu_sm_clock_max_hertz", "Highest SM clock", "", lambda h: _scaled(h.sm_clock_max, _MHZ)),
    ("vram_gpu_memory_clock_hertz", "Memory clock", "", lambda h: _scaled(h.memory_clock, _MHZ)),
    ("vram_gpu_memory_clock_max_hertz", "Highest memory clock", "", lambda h: _scaled(h.memory_clock_max, _MHZ)),
    ("vram_gpu_graphics_clock_hertz", "Graphics clock", "", lambda h: _scaled(h.graphics_clock, _MHZ)),
    ("vram_gpu_graphics_clock_max_hertz", "Highest graphics clock", "",
     lambda h: _scaled(h.graphics_clock_max, _MHZ)),
    ("vram_gpu_performance_state", "Performance state: 0 (P0, full speed) to 15", "", lambda h: h.performance_state),
    ("vram_gpu_pcie_link_generation", "PCIe link generation now", "", lambda h: h.pcie_gen),
    ("vram_gpu_pcie_link_generation_max", "Highest PCIe link generation of the GPU and its slot", "",
     lambda h: h.pcie_gen_max),
    ("vram_gpu_pcie_link_width", "PCIe lanes now", "", lambda h: h.pcie_width),
    ("vram_gpu_pcie_link_width_max", "Most PCIe lanes", "", lambda h: h.pcie_width_max),
    ("vram_gpu_pcie_transmit_bytes_per_second", "Bytes a second sent over PCIe (NVML's 20 ms sample)", "",
     lambda h: h.pcie_tx),
    ("vram_gpu_pcie_receive_bytes_per_second", "Bytes a second received over PCIe (NVML's 20 ms sample)", "",
     lambda h: h.pcie_rx),
    ("vram_gpu_pcie_replays_total", "PCIe replays (link retries) since the driver loaded", "",
     lambda h: h.pcie_replays),
    ("vram_gpu_nvlink_links", "NVLink links the GPU has", "", lambda h: h.nvlink_links),
    ("vram_gpu_nvlink_links_up", "NVLink links active", "", lambda h: h.nvlink_links_up),
    ("vram_gpu_nvlink_transmit_bytes_per_second", "Bytes a second sent over all NVLink links (data)", "",
     lambda h: h.nvlink_tx),
    ("vram_gpu_nvlink_receive_bytes_per_second", "Bytes a second received over all NVLink links (data)", "",
     lambda h: h.nvlink_rx),
    ("vram_gpu_memory_temperature_celsius", "GPU memory (HBM) temperature", "", lambda h: h.memory_temperature),
    ("vram_gpu_energy_joules_total", "Energy the GPU consumed since the driver loaded", "",
     lambda h: _scaled(h.energy_total, 1e-3)),
    ("vram_gpu_ecc_enabled", "1 when ECC is on", "", lambda h: _flag(h.ecc_enabled)),
    ("vram_gpu_row_remap_pending", "1 when a row remap waits for a GPU reset", "", lambda h: _flag(h.remap_pending)),
    ("vram_gpu_row_remap_failed", "1 when row remapping failed (no spare row)", "", lambda h: _flag(h.remap_failed)),
    ("vram_gpu_retired_pages_pending", "1 when a page retirement waits for a GPU reset", "",
     lambda h: _flag(h.retired_pages_pending)),
]


# Percentages every reading has (not health's): exported as ratios
_VRAM_PERCENT: list[tuple[str, str, Callable[[Device], int | None]]] = [
    ("vram_gpu_fan_speed_ratio", "Fan speed, share of its maximum (0-1)", lambda g: g.fan),
    ("vram_gpu_encoder_utilization_ratio", "Share of recent time the video encoder was busy (0-1)",
     lambda g: g.encoder_utilization),
    ("vram_gpu_decoder_utilization_ratio", "Share of recent time the video decoder was busy (0-1)",
     lambda g: g.decoder_utilization),
]


def _vram_health(snap: Snapshot) -> list[Family]:
    gpus = [({"gpu": str(g.index), "uuid": g.uuid or ""}, h) for g, h in _healthy(snap)]
    live = [g for g in snap.gpus if not g.lost]
    out: list[Family] = [(name, "gauge", doc, [({"gpu": str(g.index), "uuid": g.uuid or ""}, v / 100)
                                               for g in live if (v := get(g)) is not None])
                         for name, doc, get in _VRAM_PERCENT]
    out += _per_gpu(_VRAM_HEALTH, gpus)
    ecc = _fam("vram_gpu_ecc_errors_total", "ECC errors: corrected or uncorrected, since the driver loaded "
               "(volatile) or over the GPU's life (aggregate)", "counter")
    rows = _fam("vram_gpu_remapped_rows_total", "Memory rows remapped, for correctable or uncorrectable errors",
                "counter")
    pages = _fam("vram_gpu_retired_pages_total", "Memory pages retired, for multiple single-bit or a double-bit "
                 "error", "counter")
    throttle = _fam("vram_gpu_clock_event_reason", "1 when this reason holds the clocks back (NVML's clocks event "
                    "reasons)")
    for labels, h in gpus:
        for error in ("corrected", "uncorrected"):
            for counter in ("volatile", "aggregate"):
                v = getattr(h, f"ecc_{error}_{counter}")
                if v is not None:
                    ecc[3].append(({**labels, "error": error, "counter": counter}, float(v)))
        for error, v in (("correctable", h.remapped_rows_correctable),
                         ("uncorrectable", h.remapped_rows_uncorrectable)):
            if v is not None:
                rows[3].append(({**labels, "error": error}, float(v)))
        for cause, v in (("single_bit", h.retired_pages_single_bit), ("double_bit", h.retired_pages_double_bit)):
            if v is not None:
                pages[3].append(({**labels, "cause": cause}, float(v)))
        if h.throttle_reasons is not None:
            for word in _throttle_bits():
                throttle[3].append(({**labels, "reason": word.replace(" ", "_")},
                                    1.0 if word in h.throttle_reasons else 0.0))
    return out + [ecc, rows, pages, throttle]


def _vram_xid(snap: Snapshot, xids: Xids | None) -> list[Family]:
    events = _fam("vram_gpu_xid_events_total", "XID errors the driver reported since vram serve started watching "
                  "(NVML events, else the kernel log; absent where neither is read)", "counter")
    per = _fam("vram_gpu_xid_errors_total", "XID errors by number since vram serve started watching", "counter")
    last = _fam("vram_gpu_xid_last", "The number of the last XID error")
    when = _fam("vram_gpu_xid_last_timestamp_seconds", "When the last XID error came (unix time)")
    if xids is not None:
        for g in snap.gpus:
            counts = xids.counts.get(g.index)
            if counts is None:
                continue
            labels = {"gpu": str(g.index), "uuid": g.uuid or ""}
            events[3].append((labels, float(sum(counts.values()))))
            for xid, n in sorted(counts.items()):
                per[3].append(({**labels, "xid": str(xid)}, float(n)))
            if g.index in xids.last:
                code, stamp = xids.last[g.index]
                last[3].append((labels, float(code)))
                when[3].append((labels, stamp))
    return [events, per, last, when]


def _vram_mig(snap: Snapshot) -> list[Family]:
    info = _fam("vram_mig_info", "Each MIG instance (GPU instance GPU_I_ID, its profile, compute instance, uuid)")
    fams = {f: _fam(f"vram_mig_{f}_bytes", doc) for f, doc in (
        ("memory_used", "Memory in use on the MIG instance"), ("memory_total", "Memory of the MIG instance"),
        ("memory_free", "Memory free on the MIG instance"))}
    procs = _fam("vram_mig_processes", "Processes holding memory on the MIG instance")
    for g in snap.gpus:
        if g.lost:
            continue
        for m in g.mig_devices:
            labels = {"gpu": str(g.index), "uuid": g.uuid or "", "GPU_I_ID": str(m.gi),
                      "GPU_I_PROFILE": label(mig_profile(m.name))}
            info[3].append(({**labels, "compute_instance": "" if m.ci is None else str(m.ci),
                             "mig_uuid": m.uuid or ""}, 1.0))
            for f, fam in fams.items():
                v = getattr(m, f)
                if v is not None:
                    fam[3].append((labels, float(v)))
            if "processes" not in g.na:
                procs[3].append((labels, float(sum(1 for p in g.processes if p.mig_gi == m.gi))))
    return [info, *fams.values(), procs]


def _dcgm_key(g: Device, hostname: str, pods: PodLabels) -> dict[str, str]:
    return {"gpu": str(g.index), "UUID": g.uuid or "", "pci_bus_id": g.pci_bus_id or "",
            "device": f"nvidia{g.index}", "modelName": label(g.name), "Hostname": label(hostname),
            **dict(pods.get(g.uuid or "", ()))}


# The pod a GPU (or MIG instance) is allocated to, as dcgm-exporter labels the GPU's series with it
# (its default names pod, namespace, container; pod_uid only with a Kubernetes API it asks and vram
# does not): only a device the kubelet lists for exactly one pod (dcgm-exporter, with time-slicing,
# takes the last pod listed: vram guesses none), the container where one container of it holds the
# device; at most MAX_OWNERS distinct pods a reading, in GPU order, the rest unlabelled.
PodLabels = dict[str, tuple[tuple[str, str], ...]]


def dcgm_pod_labels(snap: Snapshot, gpu_pods: dict[str, tuple[str, str, str | None]] | None) -> PodLabels:
    """GPU or MIG UUID -> its pod's labels, for the devices of `snap` that `gpu_pods` (ExportState's) lists."""
    if not gpu_pods:
        return {}
    out: PodLabels = {}
    seen: set[tuple[str, str, str | None]] = set()
    for g in snap.gpus:
        for uuid in (g.uuid, *(m.uuid for m in g.mig_devices)):
            owner = gpu_pods.get(uuid or "")
            if owner is None or uuid is None:
                continue
            if owner not in seen:
                if len(seen) >= MAX_OWNERS:
                    continue
                seen.add(owner)
            namespace, pod, container = owner
            pairs = [("namespace", label(namespace)), ("pod", label(pod))]
            out[uuid] = tuple(pairs + ([("container", label(container))] if container else []))
    return out


# DCGM fields beyond DCGM_FIELDS, from the health reading: (name, help as dcgm-exporter's csv or DCGM's
# field list says, value). Counters in dcgm-exporter's csv are typed gauge here: their names lack _total.
_DCGM_HEALTH: list[tuple[str, str, str, Callable[[Health], float | None]]] = [
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "", lambda h: h.sm_clock),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "", lambda h: h.memory_clock),
    ("DCGM_FI_DEV_MAX_SM_CLOCK", "Maximum SM clock (in MHz).", "", lambda h: h.sm_clock_max),
    ("DCGM_FI_DEV_MAX_MEM_CLOCK", "Maximum memory clock (in MHz).", "", lambda h: h.memory_clock_max),
    ("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", "", lambda h: h.memory_temperature),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", "",
     lambda h: h.energy_total),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "", lambda h: h.pcie_replays),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus (in B/s; NVML's 20 ms sample).",
     "", lambda h: h.pcie_tx),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus (in B/s; NVML's 20 ms sample).",
     "", lambda h: h.pcie_rx),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "The rate of data transmitted over NVLink, not including protocol headers "
     "(in B/s).", "", lambda h: h.nvlink_tx),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "The rate of data received over NVLink, not including protocol headers "
     "(in B/s).", "", lambda h: h.nvlink_rx),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors", "",
     lambda h: h.remapped_rows_correctable),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors", "",
     lambda h: h.remapped_rows_uncorrectable),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", "", lambda h: _flag(h.remap_failed)),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether remapping of rows is pending (a GPU reset is needed)", "",
     lambda h: _flag(h.remap_pending)),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", "",
     lambda h: h.ecc_corrected_volatile),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", "",
     lambda h: h.ecc_uncorrected_volatile),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors.", "",
     lambda h: h.ecc_corrected_aggregate),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", "",
     lambda h: h.ecc_uncorrected_aggregate),
    ("DCGM_FI_DEV_RETIRED_SBE", "Total number of retired pages due to single-bit errors.", "",
     lambda h: h.retired_pages_single_bit),
    ("DCGM_FI_DEV_RETIRED_DBE", "Total number of retired pages due to double-bit errors.", "",
     lambda h: h.retired_pages_double_bit),
    ("DCGM_FI_DEV_RETIRED_PENDING", "Total number of pages pending retirement.", "",
     lambda h: _flag(h.retired_pages_pending)),
    ("DCGM_FI_DEV_PSTATE", "Performance state (P-State) 0-15. 0=highest", "", lambda h: h.performance_state),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*)", "",
     lambda h: None if h.throttle_reasons is None else sum(_throttle_bits()[w] for w in h.throttle_reasons)),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (the name before DCGM 3.3)", "",
     lambda h: None if h.throttle_reasons is None else sum(_throttle_bits()[w] for w in h.throttle_reasons)),
]


_DCGM_PERCENT: list[tuple[str, str, Callable[[Device], int | None]]] = [
    ("DCGM_FI_DEV_FAN_SPEED", "Fan speed (in 0-100%).", lambda g: g.fan),
    ("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", lambda g: g.encoder_utilization),
    ("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", lambda g: g.decoder_utilization),
]


def _dcgm_more(snap: Snapshot, hostname: str, xids: Xids | None, pods: PodLabels) -> list[Family]:
    gpus = [(_dcgm_key(g, hostname, pods), h) for g, h in _healthy(snap)]
    live = [g for g in snap.gpus if not g.lost]
    out: list[Family] = [(name, "gauge", doc, [(_dcgm_key(g, hostname, pods), float(v)) for g in live
                                               if (v := get(g)) is not None])
                         for name, doc, get in _DCGM_PERCENT]
    out += _per_gpu(_DCGM_HEALTH, gpus, lambda _: "gauge")
    xid = _fam("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
    if xids is not None:
        for g in snap.gpus:
            if g.index in xids.counts and not g.lost:
                xid[3].append((_dcgm_key(g, hostname, pods), float(xids.last.get(g.index, (0, 0.0))[0])))
    out.append(xid)
    return out




def _nvitop_key(g: Device, hostname: str) -> dict[str, str]:
    return {"hostname": label(hostname), "index": str(g.index), "devicename": label(g.name), "uuid": g.uuid or ""}


def _nvitop(snap: Snapshot, hostname: str, commands: bool, cap: int) -> list[Family]:
    """nvitop-exporter's names (prometheus_client appends each one's unit: gpu_utilization_Percentage) and
    labels; memory in MiB, throughput in MiB/s."""
    info = ("nvitop_info", "gauge", "NVITOP Prometheus Exporter.",
            [({"hostname": label(hostname), "device_count": str(len(snap.gpus)),
               "driver_version": snap.driver_version or "", "cuda_driver_version": snap.cuda_version or ""}, 1.0)])
    gpu_rows: list[tuple[str, str, Callable[[Device], float | None]]] = [
        ("gpu_utilization_Percentage", "GPU utilization (%).", lambda g: g.utilization),
        ("gpu_memory_utilization_Percentage", "GPU memory utilization (%).", lambda g: g.memory_utilization),
        ("gpu_encoder_utilization_Percentage", "GPU encoder utilization (%).", lambda g: g.encoder_utilization),
        ("gpu_decoder_utilization_Percentage", "GPU decoder utilization (%).", lambda g: g.decoder_utilization),
        ("gpu_memory_total_MiB", "GPU memory total (MiB).", lambda g: _scaled(g.memory_total, 1 / MIB)),
        ("gpu_memory_used_MiB", "GPU memory used (MiB).", lambda g: _scaled(g.memory_used, 1 / MIB)),
        ("gpu_memory_free_MiB", "GPU memory free (MiB).", lambda g: _scaled(g.memory_free, 1 / MIB)),
        ("gpu_memory_percent_Percentage", "GPU memory percent (%).",
         lambda g: None if g.memory_used is None or not g.memory_total else 100 * g.memory_used / g.memory_total),
        ("gpu_clock_sm_MHz", "GPU SM clock (MHz).", lambda g: g.health.sm_clock if g.health else None),
        ("gpu_clock_memory_MHz", "GPU memory clock (MHz).", lambda g: g.health.memory_clock if g.health else None),
        ("gpu_clock_graphics_MHz", "GPU graphics clock (MHz).",
         lambda g: g.health.graphics_clock if g.health else None),
        ("gpu_power_usage_W", "GPU power usage (W).", lambda g: g.power_draw),
        ("gpu_power_limit_W", "GPU power limit (W).", lambda g: g.power_limit),
        ("gpu_temperature_C", "GPU temperature (C).", lambda g: g.temperature),
        ("gpu_fan_speed_Percentage", "GPU fan speed (%).", lambda g: g.fan),
        ("gpu_pcie_tx_throughput_MiBps", "GPU PCIe transmit throughput (MiB/s).",
         lambda g: _scaled(g.health.pcie_tx, 1 / MIB) if g.health else None),
        ("gpu_pcie_rx_throughput_MiBps", "GPU PCIe receive throughput (MiB/s).",
         lambda g: _scaled(g.health.pcie_rx, 1 / MIB) if g.health else None),
        ("gpu_nvlink_total_tx_throughput_MiBps", "GPU total NVLink transmit throughput (MiB/s).",
         lambda g: _scaled(g.health.nvlink_tx, 1 / MIB) if g.health else None),
        ("gpu_nvlink_total_rx_throughput_MiBps", "GPU total NVLink receive throughput (MiB/s).",
         lambda g: _scaled(g.health.nvlink_rx, 1 / MIB) if g.health else None),
        ("gpu_nvlink_mean_tx_throughput_MiBps", "GPU mean NVLink transmit throughput (MiB/s).",
         lambda g: _mean_link(g, "tx")),
        ("gpu_nvlink_mean_rx_throughput_MiBps", "GPU mean NVLink receive throughput (MiB/s).",
         lambda g: _mean_link(g, "rx")),
    ]
    live = [g for g in snap.gpus if not g.lost]
    out: list[Family] = [info]
    for name, doc, value in gpu_rows:
        samples = []
        for g in live:
            v = value(g)
            if v is not None:
                samples.append((_nvitop_key(g, hostname), float(v)))
        out.append((name, "gauge", doc, samples))
    rows = sorted(((g, p) for g in live for p in g.processes), key=lambda gp: -(gp[1].memory or 0))[:cap]
    pinfo = _fam("process_info_info", "Process information.")
    proc_rows: list[tuple[str, str, Callable[[GpuProcess], float | None]]] = [
        ("process_running_time_Second", "Process running time (s).", lambda p: p.elapsed),
        ("process_cpu_percent_Percentage", "Process CPU percent (%).", lambda p: p.cpu_percent),
        ("process_rss_memory_MiB", "Process memory resident set size (MiB).", lambda p: _scaled(p.rss, 1 / MIB)),
        ("process_gpu_memory_MiB", "Process GPU memory (MiB).", lambda p: _scaled(p.memory, 1 / MIB)),
        ("process_gpu_sm_utilization_Percentage", "Process GPU SM utilization (%).", lambda p: p.sm_utilization),
        ("process_gpu_memory_utilization_Percentage", "Process GPU memory utilization (%).",
         lambda p: p.memory_utilization),
        ("process_gpu_encoder_utilization_Percentage", "Process GPU encoder utilization (%).",
         lambda p: p.encoder_utilization),
        ("process_gpu_decoder_utilization_Percentage", "Process GPU decoder utilization (%).",
         lambda p: p.decoder_utilization),
    ]
    pfams: list[Family] = [(name, "gauge", doc, []) for name, doc, _ in proc_rows]
    for g, p in rows:
        key = {**_nvitop_key(g, hostname), "pid": pid_label(p), "username": label(p.user), **dict(nvml_pid_label(p))}
        extra = {"status": p.state or ""}
        if commands:
            extra["command"] = label(p.command)
        pinfo[3].append(({**key, **extra}, 1.0))
        for fam, (_, _, read) in zip(pfams, proc_rows):
            pv = read(p)
            if pv is not None:
                fam[3].append((key, float(pv)))
    return out + [pinfo, *pfams]


def _mean_link(g: Device, direction: str) -> float | None:
    h = g.health
    if h is None or not h.nvlink_links_up:
        return None
    total = h.nvlink_tx if direction == "tx" else h.nvlink_rx
    return None if total is None else total / h.nvlink_links_up / MIB


def smi_uuid(uuid: str | None) -> str:
    """nvidia_gpu_exporter's uuid label: lower case, without the GPU- prefix."""
    text = (uuid or "").strip().lower()
    return text[4:] if text.startswith("gpu-") else text


_SMI_REASONS = {"gpu idle": "gpu_idle", "applications clocks setting": "applications_clocks_setting",
                "sw power cap": "sw_power_cap", "hw slowdown": "hw_slowdown", "sync boost": "sync_boost",
                "sw thermal": "sw_thermal_slowdown", "hw thermal": "hw_thermal_slowdown",
                "hw power brake": "hw_power_brake_slowdown", "display clocks": "display_clock_setting"}
_SMI_COMPUTE_MODES = {"default": 0, "exclusive thread": 1, "prohibited": 2, "exclusive process": 3}


def _nvidia_smi(snap: Snapshot, xids: Xids | None, cap: int) -> list[Family]:
    """utkuozdemir/nvidia_gpu_exporter's names and labels (uuid lower case without GPU-); base units."""
    live = [g for g in snap.gpus if not g.lost]

    def h(g: Device) -> Health:
        return g.health or _NO_HEALTH

    gpu_rows: list[tuple[str, str, Callable[[Device], float | None]]] = [
        ("nvidia_smi_index", "index", lambda g: g.index),
        ("nvidia_smi_memory_total_bytes", "memory.total [MiB]", lambda g: g.memory_total),
        ("nvidia_smi_memory_used_bytes", "memory.used [MiB]", lambda g: g.memory_used),
        ("nvidia_smi_memory_free_bytes", "memory.free [MiB]", lambda g: g.memory_free),
        ("nvidia_smi_memory_reserved_bytes", "memory.reserved [MiB]", lambda g: g.memory_reserved),
        ("nvidia_smi_utilization_gpu_ratio", "utilization.gpu [%]", lambda g: _scaled(g.utilization, 0.01)),
        ("nvidia_smi_utilization_memory_ratio", "utilization.memory [%]",
         lambda g: _scaled(g.memory_utilization, 0.01)),
        ("nvidia_smi_utilization_encoder_ratio", "utilization.encoder [%]",
         lambda g: _scaled(g.encoder_utilization, 0.01)),
        ("nvidia_smi_utilization_decoder_ratio", "utilization.decoder [%]",
         lambda g: _scaled(g.decoder_utilization, 0.01)),
        ("nvidia_smi_temperature_gpu", "temperature.gpu", lambda g: g.temperature),
        ("nvidia_smi_temperature_memory", "temperature.memory", lambda g: h(g).memory_temperature),
        ("nvidia_smi_power_draw_watts", "power.draw [W]", lambda g: g.power_draw),
        ("nvidia_smi_enforced_power_limit_watts", "enforced.power.limit [W]", lambda g: g.power_limit),
        ("nvidia_smi_fan_speed_ratio", "fan.speed [%]", lambda g: _scaled(g.fan, 0.01)),
        ("nvidia_smi_pstate", "pstate", lambda g: h(g).performance_state),
        ("nvidia_smi_clocks_current_graphics_clock_hz", "clocks.current.graphics [MHz]",
         lambda g: _scaled(h(g).graphics_clock, _MHZ)),
        ("nvidia_smi_clocks_current_sm_clock_hz", "clocks.current.sm [MHz]", lambda g: _scaled(h(g).sm_clock, _MHZ)),
        ("nvidia_smi_clocks_current_memory_clock_hz", "clocks.current.memory [MHz]",
         lambda g: _scaled(h(g).memory_clock, _MHZ)),
        ("nvidia_smi_clocks_max_graphics_clock_hz", "clocks.max.graphics [MHz]",
         lambda g: _scaled(h(g).graphics_clock_max, _MHZ)),
        ("nvidia_smi_clocks_max_sm_clock_hz", "clocks.max.sm [MHz]", lambda g: _scaled(h(g).sm_clock_max, _MHZ)),
        ("nvidia_smi_clocks_max_memory_clock_hz", "clocks.max.memory [MHz]",
         lambda g: _scaled(h(g).memory_clock_max, _MHZ)),
        ("nvidia_smi_ecc_mode_current", "ecc.mode.current", lambda g: _flag(h(g).ecc_enabled)),
        ("nvidia_smi_ecc_errors_corrected_volatile_total", "ecc.errors.corrected.volatile.total",
         lambda g: h(g).ecc_corrected_volatile),
        ("nvidia_smi_ecc_errors_uncorrected_volatile_total", "ecc.errors.uncorrected.volatile.total",
         lambda g: h(g).ecc_uncorrected_volatile),
        ("nvidia_smi_ecc_errors_corrected_aggregate_total", "ecc.errors.corrected.aggregate.total",
         lambda g: h(g).ecc_corrected_aggregate),
        ("nvidia_smi_ecc_errors_uncorrected_aggregate_total", "ecc.errors.uncorrected.aggregate.total",
         lambda g: h(g).ecc_uncorrected_aggregate),
        ("nvidia_smi_remapped_rows_correctable", "remapped_rows.correctable", lambda g: h(g).remapped_rows_correctable),
        ("nvidia_smi_remapped_rows_uncorrectable", "remapped_rows.uncorrectable",
         lambda g: h(g).remapped_rows_uncorrectable),
        ("nvidia_smi_remapped_rows_pending", "remapped_rows.pending", lambda g: _flag(h(g).remap_pending)),
        ("nvidia_smi_remapped_rows_failure", "remapped_rows.failure", lambda g: _flag(h(g).remap_failed)),
        ("nvidia_smi_persistence_mode", "persistence_mode", lambda g: _flag(h(g).persistence_mode)),
        ("nvidia_smi_compute_mode", "compute_mode",
         lambda g: None if h(g).compute_mode is None else _SMI_COMPUTE_MODES.get(h(g).compute_mode or "")),
        ("nvidia_smi_pcie_link_gen_current", "pcie.link.gen.current", lambda g: h(g).pcie_gen),
        ("nvidia_smi_pcie_link_gen_max", "pcie.link.gen.max", lambda g: h(g).pcie_gen_max),
        ("nvidia_smi_pcie_link_width_current", "pcie.link.width.current", lambda g: h(g).pcie_width),
        ("nvidia_smi_pcie_link_width_max", "pcie.link.width.max", lambda g: h(g).pcie_width_max),
        ("nvidia_smi_pcie_throughput_tx_bytes_per_second", "PCIe bytes transmitted per second",
         lambda g: h(g).pcie_tx),
        ("nvidia_smi_pcie_throughput_rx_bytes_per_second", "PCIe bytes received per second", lambda g: h(g).pcie_rx),
        ("nvidia_smi_mig_mode_current", "mig.mode.current", lambda g: _flag(g.mig_enabled)),
    ]
    info = ("nvidia_smi_gpu_info", "gauge", "A metric with a constant '1' value labeled by gpu uuid, name, "
            "driver_version.", [({"uuid": smi_uuid(g.uuid), "name": label(g.name), "index": str(g.index),
                                  "pci_bus_id": g.pci_bus_id or "", "driver_version": snap.driver_version or "",
                                  "cuda_version": snap.cuda_version or ""}, 1.0) for g in live])
    out: list[Family] = [info]
    for name, doc, value in gpu_rows:
        samples = []
        for g in live:
            v = value(g)
            if v is not None:
                samples.append(({"uuid": smi_uuid(g.uuid)}, float(v)))
        out.append((name, "gauge", doc, samples))
    reasons = [(word, _fam(f"nvidia_smi_clocks_event_reasons_{snake}", f"clocks_event_reasons.{snake}"))
               for word, snake in _SMI_REASONS.items()]
    for g in live:
        if g.health is not None and g.health.throttle_reasons is not None:
            for word, fam in reasons:
                fam[3].append(({"uuid": smi_uuid(g.uuid)}, 1.0 if word in g.health.throttle_reasons else 0.0))
    out += [fam for _, fam in reasons]
    energy = _fam("nvidia_smi_energy_joules_total", "Total energy consumed by the GPU in joules since the driver "
                  "was last loaded.", "counter")
    for g in live:
        if g.health is not None and g.health.energy_total is not None:
            energy[3].append(({"uuid": smi_uuid(g.uuid)}, g.health.energy_total / 1000))
    out.append(energy)
    xid_total = _fam("nvidia_smi_xid_errors_total", "XID error events observed since the exporter started.", "counter")
    xid_when = _fam("nvidia_smi_xid_last_timestamp_seconds", "Unix time of the most recent XID error event.")
    if xids is not None:
        for g in live:
            for xid, n in sorted(xids.counts.get(g.index, {}).items()):
                xid_total[3].append(({"uuid": smi_uuid(g.uuid), "xid": str(xid)}, float(n)))
            if g.index in xids.last:
                code, stamp = xids.last[g.index]
                xid_when[3].append(({"uuid": smi_uuid(g.uuid), "xid": str(code)}, stamp))
    out += [xid_total, xid_when]
    apps = _fam("nvidia_smi_compute_apps", "Number of compute processes on the GPU.")
    ok = _fam("nvidia_smi_compute_apps_last_collect_success", "Whether the last collection of compute processes "
              "succeeded (1) or failed (0).")
    ok[3].append(({}, 0.0 if any("processes" in g.na for g in live) else 1.0))
    app_info = _fam("nvidia_smi_compute_app_info", "A metric with a constant '1' value labeled by pid and process "
                    "name.")
    app_mem = _fam("nvidia_smi_compute_app_used_memory_bytes", "GPU memory used by the process.")
    for g in live:
        if "processes" not in g.na:
            apps[3].append(({"uuid": smi_uuid(g.uuid)}, float(len(g.processes))))
    rows = sorted(((g, p) for g in live for p in g.processes), key=lambda gp: -(gp[1].memory or 0))[:cap]
    for g, p in rows:
        key = {"uuid": smi_uuid(g.uuid), "pid": pid_label(p), "process_name": label(p.name), **dict(nvml_pid_label(p))}
        app_info[3].append((key, 1.0))
        if p.memory is not None:
            app_mem[3].append((key, float(p.memory)))
    out += [apps, ok, app_info, app_mem]
    mig_info = _fam("nvidia_smi_mig_info", "MIG device identity.")
    mig_mem = {f: _fam(f"nvidia_smi_mig_memory_{f}_bytes", f"The GPU instance's memory {f}.")
               for f in ("total", "used", "free")}
    for g in live:
        for m in g.mig_devices:
            mig_info[3].append(({"uuid": smi_uuid(g.uuid), "mig_uuid": (m.uuid or "").lower().removeprefix("mig-"),
                                 "gpu_instance_id": str(m.gi), "compute_instance_id": "" if m.ci is None else str(m.ci),
                                 "profile": label(mig_profile(m.name))}, 1.0))
            for f, fam in mig_mem.items():
                v = getattr(m, f"memory_{f}")
                if v is not None:
                    fam[3].append(({"uuid": smi_uuid(g.uuid), "gpu_instance_id": str(m.gi)}, float(v)))
    return out + [mig_info, *mig_mem.values()]


_NO_HEALTH = Health()
