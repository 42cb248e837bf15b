"""Snapshots as data: the JSON and CSV that `vram status` and `vram ps` print.

Schema: docs/json.md. Bytes are ints, N/A is null (JSON) or "N/A" (CSV); `na` says why.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from ..gpu_state import Device, GpuProcess, Snapshot
from .banner import hostname
from .fmt import memory_share

SCHEMA_VERSION = 1

_PROCESS_KEYS = ("pid", "memory", "user", "uid", "command", "name", "state", "types", "mig_gi", "sm_utilization",
                 "memory_utilization", "encoder_utilization", "decoder_utilization", "utilization_na",
                 "start_ticks", "start_time", "elapsed", "cpu_percent", "rss", "ppid", "container", "zombie",
                 "orphaned", "idle", "idle_for", "real", "host_missing", "nvml_pid")


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds")


def _header(snap: Snapshot) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "hostname": hostname(snap),
        "time": _iso(snap.time),
        "timestamp": round(snap.time, 3),
        "simulated": snap.simulated,
        "scenario": snap.scenario,
        "driver_version": snap.driver_version,
        "cuda_version": snap.cuda_version,
    }


def process_dict(proc: GpuProcess) -> dict[str, Any]:
    out = {k: getattr(proc, k) for k in _PROCESS_KEYS}
    out["workload"] = asdict(proc.workload) if proc.workload is not None else None
    out["types"] = list(proc.types)
    out["pid"] = proc.pid_here  # null: NVML's host pid, which names no process of this /proc
    out["holders_here"] = list(proc.holders_here)
    for key in ("elapsed", "start_time", "cpu_percent"):
        if out[key] is not None:
            out[key] = round(out[key], 1 if key != "start_time" else 3)
    return out


def gpu_dict(dev: Device) -> dict[str, Any]:
    out = {k: v for k, v in asdict(dev).items() if k not in ("processes", "mig_devices")}
    out["mig_devices"] = [asdict(m) for m in dev.mig_devices]
    out["processes"] = [process_dict(p) for p in dev.processes]
    return out


def status_doc(snap: Snapshot) -> dict[str, Any]:
    """What `vram status --json` prints, as a dict (vram serve's API adds to it)."""
    return {**_header(snap), "gpus": [gpu_dict(g) for g in snap.gpus]}


def status_json(snap: Snapshot, compact: bool = False) -> str:
    """Indented; `compact`: one line (NDJSON, a line per frame under --watch)."""
    doc = status_doc(snap)
    return json.dumps(doc, separators=(",", ":")) if compact else json.dumps(doc, indent=2)


def ps_rows(snap: Snapshot, procs: list[GpuProcess]) -> list[dict[str, Any]]:
    by_index = {g.index: g for g in snap.gpus}
    rows = []
    for p in procs:
        dev = by_index[p.gpu]
        row = {"gpu": p.gpu, "gpu_uuid": p.gpu_uuid, **process_dict(p)}
        share = memory_share(p, dev)  # of its MIG instance's memory when it runs in one
        row["memory_percent"] = None if share is None else round(share, 1)
        row["gpu_utilization"] = dev.utilization
        rows.append(row)
    return rows


def ps_json(snap: Snapshot, procs: list[GpuProcess]) -> str:
    return json.dumps({**_header(snap), "processes": ps_rows(snap, procs)}, indent=2)


STATUS_CSV_COLUMNS = ("index", "name", "uuid", "pci_bus_id", "lost", "memory_used", "memory_total",
                      "memory_free", "memory_reserved", "utilization", "memory_utilization",
                      "temperature", "power_draw", "power_limit", "fan", "encoder_utilization", "decoder_utilization",
                      "process_count", "simulated", "time")


# What a spreadsheet runs as a formula when a cell starts with it: another user's command line
# "=HYPERLINK(...)" in a CSV an admin opens. Such a text cell starts with ' (OWASP's advice, which
# spreadsheets show as text); the JSON keeps the text as it is.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> str:
    """A value as a CSV cell: N/A for None, true/false, a text that would start a formula quoted."""
    if value is None:
        return "N/A"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return str(value)


def process_count(dev: Device) -> int | None:
    """How many processes hold memory on the GPU, or None (N/A) where that is not known: the
    driver would not list them (dev.na["processes"] says why) or the GPU is lost. Never 0 then."""
    if dev.lost or "processes" in dev.na:
        return None
    return len(dev.processes)


def status_csv(snap: Snapshot, header: bool = True) -> str:
    """The header row (unless not `header`: later --watch frames), then a row per GPU."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if header:
        writer.writerow(STATUS_CSV_COLUMNS)
    for dev in snap.gpus:
        values = {**asdict(dev), "process_count": process_count(dev), "simulated": snap.simulated,
                  "time": _iso(snap.time)}
        writer.writerow([csv_cell(values[c]) for c in STATUS_CSV_COLUMNS])
    return buf.getvalue()


PS_CSV_COLUMNS = ("gpu", "pid", "user", "memory", "memory_percent", "gpu_utilization", "sm_utilization",
                  "memory_utilization", "encoder_utilization", "decoder_utilization", "cpu_percent", "rss",
                  "elapsed", "state", "container", "container_name", "pod", "namespace", "pod_container",
                  "slurm_job", "slurm_step", "command", "time")
# Its owner's columns: empty (not N/A) for a process in no container, pod or Slurm job.
_OWNER_CSV = {"container_name", "pod", "namespace", "pod_container", "slurm_job", "slurm_step"}


def ps_csv(snap: Snapshot, procs: list[GpuProcess]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PS_CSV_COLUMNS)
    when = _iso(snap.time)
    for row in ps_rows(snap, procs):
        owner = row["workload"] or {}
        writer.writerow([csv_cell(when if c == "time" else row[c]) if c not in _OWNER_CSV else
                         ("" if owner.get(c) is None else csv_cell(owner[c])) for c in PS_CSV_COLUMNS])
    return buf.getvalue()
