"""What `vram serve` exports to Prometheus: a snapshot as metric families, named by Prometheus'
conventions (base units: bytes, ratios 0-1, celsius, watts, seconds), and optionally also under
dcgm-exporter's names so that existing DCGM dashboards work unchanged. docs/metrics.md lists them.

A field the driver does not report (None) has no sample: a missing series, never a 0.
Per-process series carry pid and user, never the command line unless asked for
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
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from ..model import Snapshot
from ..procs import sanitize

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
                 max_process_series: int = 2000, dcgm_names: bool = False):
        self._latest = latest
        self.state = state
        self.commands = commands
        self.max_process_series = max_process_series
        self.dcgm_names = dcgm_names

    def collect(self) -> Iterator[Metric]:
        snap = self._latest()  # type: ignore[operator]
        if snap is None:
            yield from exporter_metrics(self.state)
            return
        # Built first: it counts the process series the cap drops, which exporter_metrics reports
        # for this same reading.
        families = list(vram_metrics(snap, self.state, self.commands, self.max_process_series))
        yield from exporter_metrics(self.state)
        yield from families
        if self.dcgm_names:
            yield from dcgm_metrics(snap, self.state.hostname)


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


def vram_metrics(snap: Snapshot, state: ExportState, commands: bool, max_process_series: int) -> Iterator[Metric]:
    host = InfoMetricFamily("vram_host", "The machine vram reads", labels=[
        "hostname", "driver_version", "cuda_version", "simulated", "scenario"])
    host.add_metric([label(state.hostname), snap.driver_version or "", snap.cuda_version or "",
                     "true" if snap.simulated else "false", label(snap.scenario)], {})
    yield host
    info = InfoMetricFamily("vram_gpu", "Each GPU", labels=["gpu", "uuid", "name", "pci_bus_id"])
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
        info.add_metric([str(g.index), g.uuid or "", label(g.name), g.pci_bus_id or ""], {})
        lost.add_metric(key, 1.0 if g.lost else 0.0)
        if g.lost:
            continue
        procs.add_metric(key, float(len(g.processes)))
        for name, family in fields.items():
            value = getattr(g, name)
            if value is not None:
                family.add_metric(key, value / 100 if name in ratios else float(value))
    yield info
    yield lost
    yield procs
    yield from fields.values()
    yield from _process_metrics(snap, state, commands, max_process_series)


def _process_metrics(snap: Snapshot, state: ExportState, commands: bool, cap: int) -> Iterator[Metric]:
    labels = ["gpu", "uuid", "pid", "user"] + (["command"] if commands else [])
    memory = _gauge("vram_process_memory_bytes", "GPU memory a process holds on a GPU", labels)
    sm = _gauge("vram_process_sm_utilization_ratio", "Share of recent time the process's own kernels ran "
                "(NVML per-process samples; 0-1)", labels)
    idle = _gauge("vram_process_idle_seconds", "How long the process has held memory on the GPU without "
                  "running kernels of its own (0: busy)", labels)
    rows = [(g, p) for g in snap.gpus for p in g.processes]
    rows.sort(key=lambda gp: -(gp[1].memory or 0))
    state.process_series_dropped = max(0, len(rows) - cap)
    for g, p in rows[:cap]:
        key = [str(g.index), g.uuid or "", str(p.pid), label(p.user)]
        if commands:
            key.append(label(p.command))
        if p.memory is not None:
            memory.add_metric(key, float(p.memory))
        if p.sm_utilization is not None:
            sm.add_metric(key, p.sm_utilization / 100)
        idle.add_metric(key, float(p.idle_for or 0.0) if p.idle else 0.0)
    yield memory
    yield sm
    yield idle


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


def dcgm_metrics(snap: Snapshot, hostname: str) -> Iterator[Metric]:
    """dcgm-exporter's names, units and labels for the same facts (DCGM_FIELDS, DCGM_LABELS).
    Memory is whole MiB, rounded down as DCGM gives it."""
    families = [(GaugeMetricFamily(name, doc, labels=DCGM_LABELS), field, unit)
                for name, doc, field, unit in DCGM_FIELDS]
    for g in snap.gpus:
        if g.lost:
            continue
        key = [str(g.index), g.uuid or "", g.pci_bus_id or "", f"nvidia{g.index}", label(g.name), label(hostname)]
        for family, field, unit in families:
            value = getattr(g, field)
            if value is not None:
                family.add_metric(key, float(value // unit) if unit != 1 else float(value))
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
           dcgm_names: bool = False) -> bytes:
    """What /metrics answers for `snap` (None: before the first reading, the exporter's own
    series only): the text SnapshotCollector's families make through prometheus_client, written
    directly. Sets state.process_series_dropped for this reading, as SnapshotCollector does."""
    text = _Text()
    if snap is None:
        _exporter_text(text, state)
        return "".join(text.lines).encode()
    # Built first: the cap's count of dropped series is reported above them, for this reading.
    body = _Text()
    _vram_text(body, snap, state, commands, max_process_series)
    if dcgm_names:
        _dcgm_text(body, snap, state.hostname)
    _exporter_text(text, state)
    return ("".join(text.lines) + "".join(body.lines)).encode()


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


def _vram_text(text: _Text, snap: Snapshot, state: ExportState, commands: bool, cap: int) -> None:
    text.family("vram_host_info", "gauge", "The machine vram reads", [(_block([
        ("hostname", label(state.hostname)), ("driver_version", snap.driver_version or ""),
        ("cuda_version", snap.cuda_version or ""), ("simulated", "true" if snap.simulated else "false"),
        ("scenario", label(snap.scenario))]), 1.0)])
    info, lost, procs = [], [], []
    fields: list[list[tuple[str, float]]] = [[] for _ in _GPU_FIELDS]
    for g in snap.gpus:
        key = _block([("gpu", str(g.index)), ("uuid", g.uuid or "")])
        info.append((_block([("gpu", str(g.index)), ("uuid", g.uuid or ""), ("name", label(g.name)),
                             ("pci_bus_id", g.pci_bus_id or "")]), 1.0))
        lost.append((key, 1.0 if g.lost else 0.0))
        if g.lost:
            continue
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
    _process_text(text, snap, state, commands, cap)


def _process_text(text: _Text, snap: Snapshot, state: ExportState, commands: bool, cap: int) -> None:
    rows = [(g, p) for g in snap.gpus for p in g.processes]
    rows.sort(key=lambda gp: -(gp[1].memory or 0))
    state.process_series_dropped = max(0, len(rows) - cap)
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
        key = f'{head}{gpu},pid="{p.pid}",user="{user}",{uuid}'
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


def _dcgm_text(text: _Text, snap: Snapshot, hostname: str) -> None:
    rows = [(g, _block([("gpu", str(g.index)), ("UUID", g.uuid or ""), ("pci_bus_id", g.pci_bus_id or ""),
                        ("device", f"nvidia{g.index}"), ("modelName", label(g.name)),
                        ("Hostname", label(hostname))]))
            for g in snap.gpus if not g.lost]
    for name, doc, field, unit in DCGM_FIELDS:
        samples = []
        for g, key in rows:
            value = getattr(g, field)
            if value is not None:
                samples.append((key, float(value // unit) if unit != 1 else float(value)))
        text.family(name, "gauge", doc, samples)
