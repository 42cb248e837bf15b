"""What `vram serve` exports to Prometheus: a snapshot as metric families, named by Prometheus'
conventions (base units: bytes, ratios 0-1, celsius, watts, seconds), and optionally also under
dcgm-exporter's names so that existing DCGM dashboards work unchanged. docs/metrics.md lists them.

A field the driver does not report (None) has no sample: a missing series, never a 0.
Per-process series carry pid and user, never the command line unless asked for
(`commands=True`), and are capped (the largest holders first) so that a machine with thousands
of processes cannot blow up Prometheus' series count.
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
