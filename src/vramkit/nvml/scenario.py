"""Scenario files for the simulated NVML: load, validate, and evaluate values over time.

A scenario is JSON (schema: docs/scenarios.md). Validation is strict: an unknown field, a
wrong type or an impossible number is a ScenarioError whose message names the field, e.g.
`demo.json: gpus[2].memory_used: 90GiB is more than memory_total (80GiB)`.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import VramkitError
from ..i18n import _
from ..procs.namespaces import namespace_inode
from ..procs.text import sanitize
from ..units import format_size, parse_duration, parse_size

# json and pathlib are imported where they are used: `vram status` on a real driver imports this
# module (for ScenarioError) and loads no scenario; pathlib alone costs ~4 ms (urllib, ipaddress).
_BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scenarios")
TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, NoReturn

    SCENARIO_DIR: Path  # the bundled scenarios' directory
else:
    def __getattr__(name: str) -> Any:
        if name == "SCENARIO_DIR":
            from pathlib import Path

            return Path(_BUNDLED)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

GPU_FIELDS = {
    "name", "uuid", "pci_bus_id", "memory_total", "memory_used", "memory_reserved",
    "utilization", "memory_utilization", "temperature", "power", "power_limit", "fan",
    "encoder_utilization", "decoder_utilization", "unsupported", "no_permission", "lost", "mig", "health",
    "numa_node",
}
MIG_FIELDS = {"gi", "ci", "profile", "uuid", "memory_total", "memory_used"}
PROCESS_FIELDS = {
    "pid", "source", "gpus", "type", "sm_util", "mem_util", "enc_util", "dec_util", "user", "uid", "command", "age",
    "state", "cpu_percent", "rss", "ppid", "container", "start_at", "exit_at", "ns_pid", "cgroup",
}
TOP_FIELDS = {"name", "description", "driver_version", "cuda_version", "nvml_api", "faults",
              "gpus", "processes", "device_nodes", "topology", "vendor", "rocm_version", "pid_namespace",
              "containers", "pods"}
# Whose GPUs a scenario describes: NVIDIA's (served as NVML by sim.py), AMD's (served as amdsmi and
# as a sysfs tree by vramkit.amd), or both in one host ("mixed": an "nvidia" and an "amd" scenario).
VENDORS = ("nvidia", "amd", "mixed")
MIXED_FIELDS = {"vendor", "name", "description", "nvidia", "amd"}
# An AMD GPU's own fields: its partition modes (MI300's compute SPX/DPX/QPX/CPX and memory NPS1/NPS4);
# a partitioned GPU lists its partitions as `partitions` (the MIG instances' schema), shown as instances.
AMD_GPU_FIELDS = {"compute_partition", "memory_partition", "partitions"}
COMPUTE_PARTITIONS = {"SPX", "DPX", "TPX", "QPX", "CPX"}
MEMORY_PARTITIONS = {"NPS1", "NPS2", "NPS4", "NPS8"}
# `nvidia-smi topo -m`'s words for how two GPUs are connected (besides NV<n>: n NVLink links)
PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")
FAULT_FIELDS = {"driver", "slow_calls"}
# Fields a scenario may mark unsupported / no_permission, and the NVML calls they stand for.
QUERYABLE = {"memory", "utilization", "process_utilization", "temperature", "power", "power_limit", "fan", "processes",
             "name", "uuid", "pci_bus_id", "encoder_decoder",
             # health (read by `vram status --all` and `vram info`): one name per NVML call family
             "ecc", "retired_pages", "remapped_rows", "throttle_reasons", "clocks", "performance_state", "pcie",
             "pcie_throughput", "persistence_mode", "compute_mode", "nvlink", "topology", "numa_node",
             # read by vram serve: the counters and sensors NVML has beyond those, and its XID events
             "energy", "pcie_replays", "memory_temperature", "events"}
# A GPU's health fields (docs/scenarios.md), the names of gpu_state.Health's: counts, flags, MHz, ...
HEALTH_COUNTS = {"ecc_corrected_volatile", "ecc_uncorrected_volatile", "ecc_corrected_aggregate",
                 "ecc_uncorrected_aggregate", "retired_pages_single_bit", "retired_pages_double_bit",
                 "remapped_rows_correctable", "remapped_rows_uncorrectable"}
HEALTH_FLAGS = {"ecc_enabled", "retired_pages_pending", "remap_pending", "remap_failed", "persistence_mode"}
HEALTH_TIMELINES = {"sm_clock", "memory_clock", "performance_state", "pcie_gen", "pcie_width"}
HEALTH_LIMITS = {"sm_clock_max", "memory_clock_max", "pcie_gen_max", "pcie_width_max", "nvlink_links",
                 "nvlink_links_up"}
HEALTH_RATES = {"pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx"}  # bytes a second: "2GiB" or a number
# Fields a driver reports only on some GPUs: absent from the scenario, their calls answer NOT_SUPPORTED.
HEALTH_OPTIONAL = {"memory_temperature", "energy_joules", "pcie_replays", "xid_events"}
HEALTH_FIELDS = (HEALTH_COUNTS | HEALTH_FLAGS | HEALTH_TIMELINES | HEALTH_LIMITS | HEALTH_RATES | HEALTH_OPTIONAL
                 | {"throttle_reasons", "compute_mode", "memory_errors"})
# NVML's clocks event (throttle) reasons, bit by bit, as words
THROTTLE_REASONS = {"gpu idle": 0x1, "applications clocks setting": 0x2, "sw power cap": 0x4, "hw slowdown": 0x8,
                    "sync boost": 0x10, "sw thermal": 0x20, "hw thermal": 0x40, "hw power brake": 0x80,
                    "display clocks": 0x100}
COMPUTE_MODES = {"default": 0, "prohibited": 2, "exclusive process": 3}
PROCESS_SOURCES = {"synthetic", "real", "missing"}
PROCESS_TYPES = {"compute", "graphics", "both"}
PROCESS_STATES = {"running", "sleeping", "zombie", "disk-sleep", "stopped"}


# No number field needs more (pids, uids, seconds, watts); a larger one is a typo or a fuzzer.
MAX_NUMBER = 1e12
# A machine, not a fleet: more GPUs than any one host has would only make every command slow.
MAX_GPUS = 1024
MAX_NVLINKS = 18  # NVML_NVLINK_MAX_LINKS: the most NVLink links one GPU has
# faults.slow_calls: at most ten minutes per call (enough to play a hung driver).
MAX_SLOW_CALL_MS = 600_000


class ScenarioError(VramkitError, ValueError):
    """A scenario that cannot be used. The message names the file and the field."""

    exit_code = 2


@dataclass
class Scenario:
    """A validated scenario: its GPUs and processes with every default filled in."""

    name: str
    source: str  # the file it came from
    # The file's top-level settings (driver_version, faults, containers, ...) as written; its GPUs
    # and processes are below, validated, and not kept twice (~0.25 MiB at 500 processes for every
    # program on the simulator; load_whole gives the file's whole object where it is needed)
    data: dict[str, Any]
    gpus: list[dict[str, Any]] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    vendor: str = "nvidia"  # one of VENDORS
    parts: dict[str, Scenario] = field(default_factory=dict)  # a mixed scenario's: vendor -> its scenario

    def for_vendor(self, vendor: str) -> Scenario | None:
        """This scenario's machine of `vendor` (a mixed one's part), or None where it has none."""
        return self if self.vendor == vendor else self.parts.get(vendor)


def bundled_names() -> list[str]:
    return sorted(name[:-5] for name in os.listdir(_BUNDLED) if name.endswith(".json"))


def _find(name_or_path: str) -> tuple[str, str]:
    """(the file, its label in messages: the name of a bundled scenario, else the path)."""
    if "/" not in name_or_path and not name_or_path.endswith(".json"):
        candidate = os.path.join(_BUNDLED, f"{name_or_path}.json")
        if os.path.exists(candidate):
            return candidate, name_or_path
    if os.path.isfile(name_or_path):
        bundled = os.path.dirname(name_or_path) == _BUNDLED
        return name_or_path, _stem(name_or_path) if bundled else name_or_path
    raise ScenarioError(
        f"no scenario {name_or_path!r}: not a bundled name ({', '.join(bundled_names())}) "
        "and not a file"
    )


def resolve(name_or_path: str) -> Path:
    """A bundled scenario name (`demo`) or a path to a JSON file."""
    from pathlib import Path

    return Path(_find(name_or_path)[0])


def _stem(path: str) -> str:
    base = os.path.basename(path)
    return base.rsplit(".", 1)[0] if "." in base.lstrip(".") else base


def load(name_or_path: str) -> Scenario:
    return load_whole(name_or_path)[0]


def load_whole(name_or_path: str) -> tuple[Scenario, Any]:
    """The scenario and the file's whole JSON object (vram sim spawn rewrites its processes)."""
    data, label = _read(name_or_path)
    try:
        return validate(data, label), data
    except RecursionError:  # a value nested just below the parser's limit, shown in a message
        raise ScenarioError(_("{label}: nested too deeply to be a scenario").format(label=label)) from None


def _read(name_or_path: str) -> tuple[Any, str]:
    """(the scenario file's JSON, its label in messages), not validated."""
    import json

    path, label = _find(name_or_path)
    try:
        # Non-blocking: a FIFO swapped in after _find's look, or a special file (/proc/kmsg), is not
        # waited on; its size checked on the file opened, and never more than the limit read
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        with open(fd, "rb") as f:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ScenarioError(_("{label}: cannot read: {error}").format(label=label, error=_("not a file")))
            raw = f.read(MAX_FILE_BYTES + 1) or b""
        if info.st_size > MAX_FILE_BYTES or len(raw) > MAX_FILE_BYTES:
            raise ScenarioError(_("{label}: larger than {limit}: not a scenario").format(
                label=label, limit=format_size(MAX_FILE_BYTES)))
        data = json.loads(raw.decode("utf-8"), parse_int=_bounded_int, object_pairs_hook=_object)
    except json.JSONDecodeError as e:
        raise ScenarioError(_("{label}: not valid JSON: {error} at line {line} column {column}").format(
            label=label, error=e.msg, line=e.lineno, column=e.colno)) from None
    except _Refused as e:
        raise ScenarioError(_("{label}: {error}").format(label=label, error=e)) from None
    except RecursionError:
        raise ScenarioError(_("{label}: nested too deeply to be a scenario").format(label=label)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(_("{label}: cannot read: {error}").format(label=label, error=e)) from None
    return data, label


# Bounds on what a scenario file may hold: a scenario is a few kilobytes. Numbers are bounded per
# field (with the field's name in the error); an integer too long for int() (4,300 digits) is
# refused while parsing. NaN and Infinity (which json reads, as 1e999) are refused per field too.
MAX_FILE_BYTES = 64 * 1024**2
_MAX_DIGITS = 1000


class _Refused(ValueError):
    """What the JSON parser is not let read: a number too long, a key given twice."""


def _bounded_int(text: str) -> int:
    if len(text) > _MAX_DIGITS:
        raise _Refused(f"a number of {len(text.lstrip('-'))} digits ({_clip(text, 20)}) is too large")
    return int(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when a key comes twice: json keeps the last silently, and a scenario
    written by hand (a second "pid" pasted in) would say other than its author reads."""
    obj = dict(pairs)
    if len(obj) != len(pairs):  # rare: then find the key to name
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _Refused(_("the key {key} appears twice in one object").format(key=_show(key)))
            seen.add(key)
    return obj


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def _show(value: Any) -> str:
    """A value as JSON for an error message, on one line, cut to a readable length."""
    import json

    try:
        text = json.dumps(value)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return _clip(text)


# ---------------------------------------------------------------- values over time

def is_timeline(value: Any) -> bool:
    return isinstance(value, dict) and "timeline" in value


def value_at(value: Any, t: float) -> Any:
    """A static value, or a timeline {"timeline": [[t, v], ...], "repeat": period} at time t.

    Numbers are interpolated linearly between points; before the first point the first value
    holds, after the last the last value (or the timeline restarts when `repeat` is set).
    """
    if not is_timeline(value):
        return value
    points = value["_points"]
    period = value.get("_repeat")
    if period:
        t = t % period
    if t <= points[0][0]:
        return points[0][1]
    step = value.get("interpolate", "linear") == "step"
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if step:
            if t < t1:  # a step takes its new value at its point's time, as start_at does
                return v0
        elif t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def integral(value: Any, t: float) -> float:
    """The area under a value from time 0 to t: what a counter of a rate (bytes a second) reads at t."""
    if not is_timeline(value):
        return float(value) * t
    period = value.get("_repeat")
    if period and t > period:
        whole, t = divmod(t, period)
        once = {**value, "_repeat": None}
        return float(whole * integral(once, period) + integral(once, t))
    points = value["_points"]
    step = value.get("interpolate", "linear") == "step"
    area, start = 0.0, 0.0
    for (_t0, v0), (t1, _v1) in zip([(0.0, points[0][1])] + points, points + [(math.inf, points[-1][1])]):
        end = min(t, t1)
        if end > start:
            a, b = value_at(value, start), (v0 if step else value_at(value, end))
            area += (end - start) * (a + b) / 2 if not step else (end - start) * a
            start = end
        if t1 >= t:
            break
    return area


def max_value(value: Any) -> Any:
    if is_timeline(value):
        return max(v for _, v in value["_points"])
    return value


# ---------------------------------------------------------------- validation

class _Checker:
    def __init__(self, label: str):
        self.label = label

    def fail(self, where: str, message: str) -> NoReturn:
        raise ScenarioError(_("{label}: {where}: {message}").format(label=self.label, where=where, message=message))

    def known(self, obj: Any, allowed: set[str], where: str) -> None:
        if not isinstance(obj, dict):
            self.fail(where, _("must be an object, got {kind}").format(kind=type(obj).__name__))
        unknown = sorted(set(obj) - allowed)
        if unknown:
            listed = ", ".join(sorted(allowed))
            if len(listed) > 400:  # health has some fifty: the message stays one readable line
                listed = listed[:listed.rfind(", ", 0, 380)] + ", ... (docs/scenarios.md lists them all)"
            self.fail(f"{where}.{unknown[0]}" if where else unknown[0], _("unknown field (allowed: {listed})").format(
                listed=listed))

    def timeline(self, value: Any, where: str, convert: Callable[[Any, str], Any]) -> Any:
        """Validate a static value or a timeline, converting each value with `convert`."""
        if not is_timeline(value):
            return convert(value, where)
        self.known(value, {"timeline", "repeat", "interpolate"}, where)
        raw = value["timeline"]
        if not isinstance(raw, list) or not raw:
            self.fail(f"{where}.timeline", _("must be a non-empty list of [seconds, value] pairs"))
        points: list[tuple[float, Any]] = []
        for i, pair in enumerate(raw):
            if not isinstance(pair, list) or len(pair) != 2:
                self.fail(f"{where}.timeline[{i}]", _("must be a [seconds, value] pair"))
            t = self.number(pair[0], f"{where}.timeline[{i}][0]", minimum=0)
            if points and t < points[-1][0]:
                self.fail(f"{where}.timeline[{i}]", _("times must not decrease"))
            points.append((t, convert(pair[1], f"{where}.timeline[{i}][1]")))
        out = dict(value)
        out["_points"] = points
        if value.get("interpolate", "linear") not in ("linear", "step"):
            self.fail(f"{where}.interpolate", _("must be 'linear' or 'step'"))
        if "repeat" in value:
            out["_repeat"] = self.duration(value["repeat"], f"{where}.repeat")
        return out

    def number(self, value: Any, where: str, minimum: float | None = None,
               maximum: float | None = None, integer: bool = False) -> Any:
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or (
                isinstance(value, float) and not math.isfinite(value)):
            # (json.loads reads Infinity and NaN: NaN would pass every range check below)
            self.fail(where, (_("must be an integer, got {value}") if integer else
                              _("must be a number, got {value}")).format(value=_show(value)))
        if minimum is not None and value < minimum:
            self.fail(where, _("must be at least {minimum}, got {value}").format(minimum=minimum, value=_show(value)))
        if maximum is None:
            maximum = MAX_NUMBER
        if value > maximum:
            self.fail(where, _("must be at most {maximum:g}, got {value}").format(maximum=maximum, value=_show(value)))
        return value

    def size(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            self.fail(where, _('must be a size like "80GiB" or a number of bytes, got {value}').format(
                value=_show(value)))
        try:
            return parse_size(value)
        except ValueError as e:
            self.fail(where, str(e))
        raise AssertionError  # unreachable

    def duration(self, value: Any, where: str) -> float:
        try:
            return parse_duration(value)
        except ValueError as e:
            self.fail(where, str(e))
        raise AssertionError

    def string(self, value: Any, where: str, controls: bool = False) -> str:
        # Blank counts as empty: a process name is taken from the command's first word.
        if not isinstance(value, str) or not value.strip():
            self.fail(where, _("must be a non-empty string, got {value}").format(value=_show(value)))
        # Driver-side text (names, ids, versions) is printed as is, so it must not carry terminal
        # escapes, nor the characters that reorder or hide text (U+202E, zero-width, U+2028: what
        # sanitize replaces). Host-side text (user, command) may: vram strips it as it does /proc's.
        if not controls and sanitize(value) != value:
            self.fail(where, _("must not contain control characters, got {value}").format(value=_show(value)))
        return value

    def choice(self, value: Any, allowed: set[str], where: str) -> str:
        # The isinstance check first: a list or an object is not hashable, `in` would raise.
        if not isinstance(value, str) or value not in allowed:
            self.fail(where, _("must be one of {names}, got {value}").format(
                names=', '.join(sorted(allowed)), value=_show(value)))
        return value


_PCI_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


def validate(data: Any, label: str = "scenario") -> Scenario:
    c = _Checker(label)
    if not isinstance(data, dict):
        raise ScenarioError(_("{label}: the top level must be an object with a 'gpus' list").format(label=label))
    vendor = c.choice(data.get("vendor", "nvidia"), set(VENDORS), "vendor")
    if vendor == "mixed":
        return _validate_mixed(c, data, label)
    c.known(data, TOP_FIELDS, "")
    gpus_raw = data.get("gpus")
    if not isinstance(gpus_raw, list) or not gpus_raw:
        c.fail("gpus", _("must be a non-empty list"))
    if len(gpus_raw) > MAX_GPUS:
        c.fail("gpus", _("at most {most} GPUs (one machine), got {count}").format(most=MAX_GPUS, count=len(gpus_raw)))
    for key in ("name", "description", "driver_version", "rocm_version"):
        if key in data:
            c.string(data[key], key)
    if "cuda_version" in data and not re.fullmatch(r"\d+\.\d+", str(data["cuda_version"])):
        c.fail("cuda_version", _('must look like "12.4", got {value}').format(value=_show(data['cuda_version'])))
    if "device_nodes" in data:
        _check_device_nodes(c, data["device_nodes"])
    _check_workload_state(c, data)
    if "pid_namespace" in data and namespace_inode(data["pid_namespace"]) is None:
        c.fail("pid_namespace", _("must name the PID namespace the pids are numbered in, as /proc/PID/ns/pid "
                                  'links to ("pid:[4026531836]") or its inode number, got '
                                  "{value}").format(value=_show(data['pid_namespace'])))
    api = data.get("nvml_api", {})
    c.known(api, {"process_info", "memory_info"}, "nvml_api")
    if api.get("process_info", "v3") not in ("v1", "v2", "v3"):
        c.fail("nvml_api.process_info", _("must be v1, v2 or v3"))
    if api.get("memory_info", "v2") not in ("v1", "v2"):
        c.fail("nvml_api.memory_info", _("must be v1 or v2"))
    faults = data.get("faults", {})
    c.known(faults, FAULT_FIELDS, "faults")
    if faults.get("driver") not in (None, "missing", "not_loaded"):
        c.fail("faults.driver", _("must be 'missing' or 'not_loaded'"))
    slow = faults.get("slow_calls", {})
    if not isinstance(slow, dict):
        c.fail("faults.slow_calls", _("must be an object {NVML function name: milliseconds}"))
    for fn, ms in slow.items():
        if not fn.startswith("nvml"):
            c.fail(f"faults.slow_calls.{fn}", _("must name an NVML function, e.g. nvmlDeviceGetMemoryInfo"))
        c.number(ms, f"faults.slow_calls.{fn}", minimum=0, maximum=MAX_SLOW_CALL_MS)

    gpus = [_validate_gpu(c, g, i, vendor) for i, g in enumerate(gpus_raw)]
    seen: dict[str, str] = {}
    for i, g in enumerate(gpus):
        ids = [g["uuid"]] + [m["uuid"] for m in g["mig"]]
        for uuid in ids:
            if uuid in seen:
                c.fail(f"gpus[{i}].uuid", _("duplicate uuid {uuid} (also {other})").format(uuid=uuid, other=seen[uuid]))
            seen[uuid] = f"gpus[{i}]"
        if g["pci_bus_id"] in seen:
            c.fail(f"gpus[{i}].pci_bus_id", _("duplicate PCI bus id {bus}").format(bus=g['pci_bus_id']))
        seen[g["pci_bus_id"]] = f"gpus[{i}]"

    if "topology" in data:
        _validate_topology(c, data["topology"], gpus, gpus_raw)
    for i, g in enumerate(gpus):  # after the topology, which may give a GPU its links
        if g["health"]["nvlink_links_up"] > g["health"]["nvlink_links"]:
            c.fail(f"gpus[{i}].health.nvlink_links_up", _("is more than GPU {i}'s {links} "
                                                          "NVLink links").format(
                                                            i=i, links=g['health']['nvlink_links']))

    procs_raw = data.get("processes", [])
    if not isinstance(procs_raw, list):
        c.fail("processes", _("must be a list"))
    processes = [_validate_process(c, p, i, gpus) for i, p in enumerate(procs_raw)]
    pids: dict[int, int] = {}
    for i, p in enumerate(processes):
        if p["pid"] in pids:
            c.fail(f"processes[{i}].pid", _("duplicate pid {pid} (also processes[{other}]); list one "
                                            "process once with several entries in 'gpus'").format(
                                                pid=p['pid'], other=pids[p['pid']]))
        pids[p["pid"]] = i
    _check_memory_fits(c, gpus, processes)
    name = data.get("name", _stem(label))
    return Scenario(name=str(name), source=label, data=_settings(data, ("gpus", "processes")), gpus=gpus,
                    processes=processes, vendor=vendor)


def _settings(data: dict[str, Any], validated: tuple[str, ...]) -> dict[str, Any]:
    """data without the keys whose validated form the Scenario holds."""
    return {key: value for key, value in data.items() if key not in validated}


def _validate_mixed(c: _Checker, data: dict[str, Any], label: str) -> Scenario:
    """One host with both vendors' GPUs: an "nvidia" and an "amd" scenario (each checked as its own),
    NVIDIA's GPUs numbered first. A pid may hold memory on both."""
    c.known(data, MIXED_FIELDS, "")
    for key in ("name", "description"):
        if key in data:
            c.string(data[key], key)
    parts = {}
    for vendor in ("nvidia", "amd"):
        part = data.get(vendor)
        if not isinstance(part, dict):
            c.fail(vendor, _("must be an object: the {vendor} GPUs' scenario (a mixed scenario has both)").format(
                vendor=vendor))
        if part.get("vendor", vendor) != vendor:
            c.fail(f"{vendor}.vendor", _("must be {vendor} (or left out), got {got}").format(
                vendor=repr(vendor), got=_show(part.get('vendor'))))
        parts[vendor] = validate({**part, "vendor": vendor}, f"{label}: {vendor}")
    name = str(data.get("name", _stem(label)))
    for part in parts.values():
        part.name = name
    return Scenario(name=name, source=label, data=_settings(data, tuple(parts)),
                    gpus=[g for p in parts.values() for g in p.gpus],
                    processes=[p for s in parts.values() for p in s.processes], vendor="mixed", parts=parts)


def _check_device_nodes(c: _Checker, value: Any) -> None:
    """The simulated machine's /dev/nvidia*: a glob of files that stand for its device nodes
    (`vram ps --holders` finds the processes that hold them open)."""
    c.string(value, "device_nodes")
    if not value.startswith("/"):
        c.fail("device_nodes", _('must be an absolute path or glob like "/tmp/sim-dev/nvidia*", got '
                                 "{value}").format(value=_show(value)))
    if value.endswith("/"):
        c.fail("device_nodes", _("must name files (e.g. /tmp/sim-dev/nvidia*), not a directory"))


def default_pci_bus_id(i: int) -> str:
    """GPU i's PCI address when the scenario names none: unique for any number of GPUs. Like a
    real server, 15 GPUs to a PCI domain, each on a bus of its own (0x10, 0x20 ... 0xF0: the first
    15 keep the ids of earlier versions); the 16th starts domain 0001."""
    domain, slot = divmod(i, 15)
    return f"{domain:08X}:{0x10 * (slot + 1):02X}:00.0"


def _validate_gpu(c: _Checker, raw: Any, i: int, vendor: str = "nvidia") -> dict[str, Any]:
    where = f"gpus[{i}]"
    amd = vendor == "amd"
    # vramkit reads no AMD video engine: a scenario must not say what nothing would show
    c.known(raw, (GPU_FIELDS - {"mig", "encoder_utilization", "decoder_utilization"}) | AMD_GPU_FIELDS
            if amd else GPU_FIELDS, where)
    g = dict(raw)
    g["index"] = i
    g["name"] = c.string(raw.get("name", "AMD Instinct MI300X" if amd else "NVIDIA A100-SXM4-80GB"), f"{where}.name")
    # ROCm names a GPU "GPU-" + its 16 hex digit unique_id (ROCR_VISIBLE_DEVICES takes it so)
    default_uuid = f"GPU-{0x5eed0000a11 + i:016x}" if amd else f"GPU-{i:08x}-5eed-4a11-9000-{i:012x}"
    g["uuid"] = c.string(raw.get("uuid", default_uuid), f"{where}.uuid")
    if not g["uuid"].startswith("GPU-"):
        c.fail(f"{where}.uuid", _("must start with 'GPU-', got {value}").format(value=_show(g['uuid'])))
    g["pci_bus_id"] = c.string(raw.get("pci_bus_id", default_pci_bus_id(i)), f"{where}.pci_bus_id")
    if not _PCI_RE.match(g["pci_bus_id"]):
        c.fail(f"{where}.pci_bus_id", _("must look like 00000000:07:00.0, got {value}").format(
            value=_show(g['pci_bus_id'])))
    if "memory_total" not in raw:
        c.fail(f"{where}.memory_total", _("is required (e.g. \"80GiB\")"))
    g["memory_total"] = c.size(raw["memory_total"], f"{where}.memory_total")
    if g["memory_total"] == 0:
        c.fail(f"{where}.memory_total", _("must be more than 0"))
    total = g["memory_total"]

    def size_within_total(v: Any, w: str) -> int:
        n = c.size(v, w)
        if n > total:
            c.fail(w, _("{size} is more than memory_total ({total})").format(
                size=format_size(n), total=format_size(total)))
        return n

    for key in ("memory_used", "memory_reserved"):
        if key in raw:
            g[key] = c.timeline(raw[key], f"{where}.{key}", size_within_total)
    g.setdefault("memory_reserved", 0)
    if "memory_used" in raw and max_value(g["memory_used"]) + max_value(g["memory_reserved"]) > total:
        c.fail(f"{where}.memory_used", _("plus memory_reserved is more than memory_total ({total})").format(
            total=format_size(total)))
    pct = lambda v, w: c.number(v, w, minimum=0, maximum=100)  # noqa: E731
    g["utilization"] = c.timeline(raw.get("utilization", 0), f"{where}.utilization", pct)
    g["memory_utilization"] = c.timeline(raw.get("memory_utilization", 0), f"{where}.memory_utilization", pct)
    g["temperature"] = c.timeline(raw.get("temperature", 40), f"{where}.temperature",
                                  lambda v, w: c.number(v, w, minimum=-50, maximum=150))
    g["power_limit"] = c.number(raw.get("power_limit", 400), f"{where}.power_limit", minimum=0)
    g["power"] = c.timeline(raw.get("power", 60), f"{where}.power",
                            lambda v, w: c.number(v, w, minimum=0))
    for key in ("fan", "encoder_utilization", "decoder_utilization"):  # absent: NOT_SUPPORTED
        g[key] = None if raw.get(key) is None else c.timeline(raw[key], f"{where}.{key}", pct)
    for key in ("unsupported", "no_permission"):
        items = raw.get(key, [])
        if not isinstance(items, list) or any(not isinstance(x, str) or x not in QUERYABLE for x in items):
            c.fail(f"{where}.{key}", _("must be a list of: {names}").format(names=', '.join(sorted(QUERYABLE))))
        g[key] = set(items)
    if not isinstance(raw.get("lost", False), bool):
        c.fail(f"{where}.lost", _("must be true or false"))
    g["lost"] = raw.get("lost", False)
    g["health"] = _validate_health(c, raw.get("health", {}), f"{where}.health", g["name"])
    if "numa_node" in raw:
        g["numa_node"] = c.number(raw["numa_node"], f"{where}.numa_node", minimum=0, maximum=1023, integer=True)
    mig = raw.get("mig", [])
    if amd:
        _validate_partitions(c, raw, g, where)
        mig = raw.get("partitions", [])
    if not isinstance(mig, list):
        c.fail(f"{where}.mig", _("must be a list of MIG instances"))
    g["mig"] = []
    gis = set()
    for j, m in enumerate(mig):
        mw = f"{where}.partitions[{j}]" if amd else f"{where}.mig[{j}]"
        c.known(m, MIG_FIELDS, mw)
        inst = dict(m)
        inst["gi"] = c.number(m.get("gi", j if amd else j + 1), f"{mw}.gi", minimum=0, integer=True)
        if inst["gi"] in gis:
            c.fail(f"{mw}.gi", _("duplicate GPU instance id {gi}").format(gi=inst['gi']))
        gis.add(inst["gi"])
        inst["ci"] = c.number(m.get("ci", 0), f"{mw}.ci", minimum=0, integer=True)
        inst["profile"] = c.string(m.get("profile", g.get("compute_partition", "1g.10gb")), f"{mw}.profile")
        default_uuid = (f"GPU-{g['uuid'][-12:]}{inst['gi']:04x}" if amd  # as ROCm: the GPU's id, the partition
                        else f"MIG-{i:08x}-{j:04x}-4a11-9000-{inst['gi']:012x}")
        inst["uuid"] = c.string(m.get("uuid", default_uuid), f"{mw}.uuid")
        if "memory_total" not in m:
            c.fail(f"{mw}.memory_total", _("is required"))
        inst["memory_total"] = c.size(m["memory_total"], f"{mw}.memory_total")
        if "memory_used" in m:
            inst["memory_used"] = c.timeline(m["memory_used"], f"{mw}.memory_used", c.size)
            if max_value(inst["memory_used"]) > inst["memory_total"]:
                c.fail(f"{mw}.memory_used", _("is more than the instance's memory_total"))
        g["mig"].append(inst)
    if sum(m["memory_total"] for m in g["mig"]) > total - max_value(g["memory_reserved"]):
        c.fail(f"{where}.mig", _("the MIG instances' memory_total add up to more than the GPU's "
               "(less memory_reserved)"))
    return g


def _validate_partitions(c: _Checker, raw: dict[str, Any], g: dict[str, Any], where: str) -> None:
    """An AMD GPU's partition modes: a GPU in a compute mode other than SPX lists its partitions."""
    g["compute_partition"] = c.choice(raw.get("compute_partition", "SPX"), COMPUTE_PARTITIONS,
                                      f"{where}.compute_partition")
    g["memory_partition"] = c.choice(raw.get("memory_partition", "NPS1"), MEMORY_PARTITIONS,
                                     f"{where}.memory_partition")
    listed = raw.get("partitions", [])
    if (g["compute_partition"] == "SPX") != (not listed):
        c.fail(f"{where}.partitions", "a GPU in SPX mode has none; one in another compute mode lists them"
               if listed else f"GPU {g['index']} is in {g['compute_partition']} mode: list its partitions")


def _validate_topology(c: _Checker, raw: Any, gpus: list[dict[str, Any]], gpus_raw: list[Any]) -> None:
    """`nvidia-smi topo -m`'s matrix: a row per GPU, "X" on the diagonal, NV<n> or a PCIe word
    elsewhere, the same both ways. Sets each GPU's topology row, and its NVLink links (the NV
    counts of its row) unless its health names nvlink_links, which must then be at least that."""
    n = len(gpus)
    if not isinstance(raw, list) or len(raw) != n:
        c.fail("topology", _("must be a list of {n} rows (one per GPU), like nvidia-smi topo -m").format(n=n))
    rows: list[list[str]] = []
    for i, row in enumerate(raw):
        cells = row.split() if isinstance(row, str) else row
        if not isinstance(cells, list) or len(cells) != n or not all(isinstance(x, str) for x in cells):
            c.fail(f"topology[{i}]", _('must have {n} entries ("X NV12 SYS ..." or a list), got {row}').format(
                n=n, row=_show(row)))
        for j, cell in enumerate(cells):
            if (cell == "X") != (i == j) or (cell != "X" and cell not in PCIE_LINKS
                                            and not re.fullmatch(r"NV([1-9]\d?)", cell)):
                if i == j:
                    c.fail(f"topology[{i}][{j}]", _("must be X, got {value}").format(value=_show(cell)))
                c.fail(f"topology[{i}][{j}]", _("must be NV<links> or {links}, got {value}").format(
                    links=", ".join(PCIE_LINKS), value=_show(cell)))
        rows.append(cells)
    for i in range(n):
        for j in range(i):
            if rows[i][j] != rows[j][i]:
                c.fail(f"topology[{i}][{j}]", _("{there} but topology[{j}][{i}] is {back}: must be the "
                                                "same").format(there=rows[i][j], j=j, i=i, back=rows[j][i]))
    for i, g in enumerate(gpus):
        g["topology"] = rows[i]
        links = sum(int(cell[2:]) for cell in rows[i] if cell.startswith("NV"))
        if links > MAX_NVLINKS:
            c.fail(f"topology[{i}]", _("gives GPU {i} {links} NVLink links; a GPU has at most {most}").format(
                i=i, links=links, most=MAX_NVLINKS))
        h, given = g["health"], gpus_raw[i].get("health", {}) if isinstance(gpus_raw[i], dict) else {}
        if "nvlink_links" in given:
            if h["nvlink_links"] < links:
                c.fail(f"gpus[{i}].health.nvlink_links", _("is {given}, but topology gives GPU {i} "
                                                           "{links} NVLink links").format(
                                                               given=h['nvlink_links'], i=i, links=links))
        else:
            h["nvlink_links"] = links
            if "nvlink_links_up" not in given:
                h["nvlink_links_up"] = links


def _row_remapping(name: str) -> bool:
    """Whether a GPU remaps rows (Ampere and later) rather than retiring pages (Volta, Turing...)."""
    return not any(old in name for old in ("V100", "P100", "P40", "P4", "T4", "K80", "Quadro RTX", "TITAN V"))


def _validate_health(c: _Checker, raw: Any, where: str, name: str) -> dict[str, Any]:
    """A GPU's health with the defaults of a healthy data-center GPU filled in."""
    c.known(raw, HEALTH_FIELDS, where)
    h: dict[str, Any] = {"memory_errors": "row_remapping" if _row_remapping(name) else "page_retirement"}
    if "memory_errors" in raw:
        h["memory_errors"] = c.choice(raw["memory_errors"], {"row_remapping", "page_retirement"},
                                      f"{where}.memory_errors")
    for key in HEALTH_COUNTS:
        h[key] = c.number(raw.get(key, 0), f"{where}.{key}", minimum=0, integer=True)
    for key in HEALTH_FLAGS:
        value = raw.get(key, key in ("ecc_enabled", "persistence_mode"))
        if not isinstance(value, bool):
            c.fail(f"{where}.{key}", _("must be true or false, got {value}").format(value=_show(value)))
        h[key] = value
    nvlink = 12 if "SXM" in name or "HBM" in name else 0  # SXM boards have NVLink, PCIe cards mostly not
    limits = {"sm_clock_max": 1410, "memory_clock_max": 1593, "pcie_gen_max": 4, "pcie_width_max": 16,
              "nvlink_links": nvlink}
    for key, default in limits.items():
        h[key] = c.number(raw.get(key, default), f"{where}.{key}", minimum=0,
                          maximum=MAX_NVLINKS if key == "nvlink_links" else 100_000, integer=True)
    # at most nvlink_links: checked once the topology (which may give the links) is read
    h["nvlink_links_up"] = c.number(raw.get("nvlink_links_up", h["nvlink_links"]), f"{where}.nvlink_links_up",
                                    minimum=0, maximum=MAX_NVLINKS, integer=True)
    current = {"sm_clock": h["sm_clock_max"], "memory_clock": h["memory_clock_max"], "performance_state": 0,
               "pcie_gen": h["pcie_gen_max"], "pcie_width": h["pcie_width_max"]}
    for key, default in current.items():
        top = 15 if key == "performance_state" else h[f"{key}_max"]

        def up_to(v: Any, w: str, top: int = top) -> Any:
            return c.number(v, w, minimum=0, maximum=top, integer=True)

        h[key] = c.timeline(raw.get(key, default), f"{where}.{key}", up_to)
    for key in HEALTH_RATES:
        h[key] = c.timeline(raw.get(key, 0), f"{where}.{key}", c.size)
    reasons = raw.get("throttle_reasons", [])
    if not isinstance(reasons, list) or any(not isinstance(r, str) or r not in THROTTLE_REASONS for r in reasons):
        c.fail(f"{where}.throttle_reasons", _("must be a list of: {reasons}").format(
            reasons=', '.join(THROTTLE_REASONS)))
    h["throttle_reasons"] = reasons
    h["compute_mode"] = c.choice(raw.get("compute_mode", "default"), set(COMPUTE_MODES), f"{where}.compute_mode")
    _validate_optional_health(c, raw, h, where)
    return h


def _validate_optional_health(c: _Checker, raw: dict[str, Any], h: dict[str, Any], where: str) -> None:
    """The fields that default to N/A (None: the call answers NOT_SUPPORTED): memory temperature,
    the energy counter (joules at t=0; it grows by the GPU's power), PCIe replays, and XID events
    ([{"at": "30s", "xid": 79}, ...] on the scenario clock)."""
    h["memory_temperature"] = (None if "memory_temperature" not in raw else c.timeline(
        raw["memory_temperature"], f"{where}.memory_temperature",
        lambda v, w: c.number(v, w, minimum=-50, maximum=150)))
    h["energy_joules"] = (None if "energy_joules" not in raw
                          else c.number(raw["energy_joules"], f"{where}.energy_joules", minimum=0))
    h["pcie_replays"] = (None if "pcie_replays" not in raw
                         else c.number(raw["pcie_replays"], f"{where}.pcie_replays", minimum=0, integer=True))
    events = raw.get("xid_events", [])
    if not isinstance(events, list):
        c.fail(f"{where}.xid_events", _("must be a list of {\"at\": duration, \"xid\": number}"))
    h["xid_events"] = []
    for i, e in enumerate(events):
        ew = f"{where}.xid_events[{i}]"
        c.known(e, {"at", "xid"}, ew)
        if "xid" not in e:
            c.fail(f"{ew}.xid", _("is required (the XID number, e.g. 79)"))
        h["xid_events"].append((c.duration(e.get("at", 0), f"{ew}.at"),
                                c.number(e["xid"], f"{ew}.xid", minimum=1, maximum=0xFFFFFFFF, integer=True)))
    h["xid_events"].sort()


def _parse_gpu_key(c: _Checker, key: str, where: str, gpus: list[dict[str, Any]]) -> tuple[int, int | None]:
    """'3' -> (3, None): the whole GPU 3. '0/2' -> (0, 2): GPU 0, MIG GPU instance 2."""
    m = re.fullmatch(r"(\d+)(?:/(\d+))?", key)
    if not m:
        c.fail(f"{where}.{key}", _("keys must be a GPU index like \"0\", or GPU/GPU-instance like \"0/1\""))
    index, gi = int(m.group(1)), (int(m.group(2)) if m.group(2) else None)
    if index >= len(gpus):
        c.fail(f"{where}.{key}", _("there is no GPU {index} (the scenario has {count})").format(
            index=index, count=len(gpus)))
    if gi is not None and gi not in {x["gi"] for x in gpus[index]["mig"]}:
        c.fail(f"{where}.{key}", _("GPU {index} has no MIG GPU instance {gi}").format(index=index, gi=gi))
    if gi is None and gpus[index]["mig"]:
        c.fail(f"{where}.{key}", _("GPU {index} is in MIG mode: name the instance, e.g. "
                                   '"{index}/{gi}"').format(index=index, gi=gpus[index]['mig'][0]['gi']))
    return index, gi


MAX_CGROUP_TEXT = 64 * 1024  # as much of /proc/PID/cgroup as vram reads


def _check_workload_state(c: _Checker, data: dict[str, Any]) -> None:
    """What the runtimes' state and the kubelet would say about the scenario's workloads:
    "containers": {"<64-digit id>": {"name": ..., "image": ...}} (docker's and podman's state files),
    "pods": [{"namespace", "name", "containers": [{"name", "devices": ["GPU-..."]}]}] (pod-resources List)."""
    containers = data.get("containers", {})
    if not isinstance(containers, dict):
        c.fail("containers", _("must be an object {\"container id\": {\"name\": ..., \"image\": ...}}"))
    for cid, facts in containers.items():
        c.known(facts, {"name", "image"}, f"containers.{cid}")
        for key in ("name", "image"):
            if key in facts:
                c.string(facts[key], f"containers.{cid}.{key}", controls=True)
    pods = data.get("pods", [])
    if not isinstance(pods, list):
        c.fail("pods", _("must be a list of {\"namespace\", \"name\", \"containers\"}"))
    for i, pod in enumerate(pods):
        c.known(pod, {"namespace", "name", "containers"}, f"pods[{i}]")
        for key in ("namespace", "name"):
            c.string(pod.get(key), f"pods[{i}].{key}", controls=True)
        if not isinstance(pod.get("containers"), list):
            c.fail(f"pods[{i}].containers", _("must be a list of {\"name\", \"devices\"}"))
        for j, ctr in enumerate(pod["containers"]):
            c.known(ctr, {"name", "devices"}, f"pods[{i}].containers[{j}]")
            c.string(ctr.get("name"), f"pods[{i}].containers[{j}].name", controls=True)
            devices = ctr.get("devices", [])
            if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
                c.fail(f"pods[{i}].containers[{j}].devices", _("must be a list of device ids (\"GPU-...\")"))


def _validate_process(c: _Checker, raw: Any, i: int, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    where = f"processes[{i}]"
    c.known(raw, PROCESS_FIELDS, where)
    if "pid" not in raw:
        c.fail(f"{where}.pid", _("is required"))
    p = dict(raw)
    p["pid"] = c.number(raw["pid"], f"{where}.pid", minimum=1, integer=True)
    p["source"] = c.choice(raw.get("source", "synthetic"), PROCESS_SOURCES, f"{where}.source")
    p["type"] = c.choice(raw.get("type", "compute"), PROCESS_TYPES, f"{where}.type")
    # Absent: sm_util and mem_util follow the GPU's; enc_util and dec_util are 0.
    for key in ("sm_util", "mem_util", "enc_util", "dec_util"):
        if key in raw:
            p[key] = c.timeline(raw[key], f"{where}.{key}", lambda v, w: c.number(v, w, minimum=0, maximum=100))
    gpus_raw = raw.get("gpus")
    if not isinstance(gpus_raw, dict) or not gpus_raw:
        c.fail(f"{where}.gpus", _("must be an object {\"GPU index\": memory}, e.g. {\"0\": \"10GiB\"}"))
    p["gpus"] = {}
    for key, mem in gpus_raw.items():
        loc = _parse_gpu_key(c, key, f"{where}.gpus", gpus)
        p["gpus"][loc] = c.timeline(mem, f"{where}.gpus.{key}", c.size)
    if p["source"] == "synthetic":
        p["user"] = c.string(raw.get("user", "nobody"), f"{where}.user", controls=True)
        p["uid"] = c.number(raw.get("uid", 65534), f"{where}.uid", minimum=0, integer=True)
        p["command"] = c.string(raw.get("command", "python"), f"{where}.command", controls=True)
        p["age"] = c.duration(raw.get("age", "1h"), f"{where}.age")
        p["state"] = c.choice(raw.get("state", "running"), PROCESS_STATES, f"{where}.state")
        p["cpu_percent"] = c.number(raw.get("cpu_percent", 0), f"{where}.cpu_percent", minimum=0)
        p["rss"] = c.size(raw.get("rss", 0), f"{where}.rss")
        p["ppid"] = c.number(raw.get("ppid", 1000), f"{where}.ppid", minimum=0, integer=True)
        if "container" in raw:
            p["container"] = c.string(raw["container"], f"{where}.container")
        if "cgroup" in raw:  # its /proc/PID/cgroup text: as untrusted as the file (procs/workload.py)
            p["cgroup"] = c.string(raw["cgroup"], f"{where}.cgroup", controls=True)[:MAX_CGROUP_TEXT]
    else:
        extra = sorted(set(raw) & {"user", "uid", "command", "age", "state", "cpu_percent", "rss",
                                   "ppid", "container", "cgroup"})
        if extra:
            c.fail(f"{where}.{extra[0]}", _("only synthetic processes take host fields; a {source} process's "
                                            "host side comes from /proc").format(source=p['source']))
    for key in ("start_at", "exit_at"):
        if key in raw:
            p[key] = c.duration(raw[key], f"{where}.{key}")
    if "ns_pid" in raw:
        if p["source"] != "real":
            c.fail(f"{where}.ns_pid", _("only a real process has a pid in another namespace"))
        p["ns_pid"] = c.number(raw["ns_pid"], f"{where}.ns_pid", minimum=1, integer=True)
    if "start_at" in p and "exit_at" in p and p["exit_at"] <= p["start_at"]:
        c.fail(f"{where}.exit_at", _("must be after start_at"))
    return p


def _check_memory_fits(c: _Checker, gpus: list[dict[str, Any]], processes: list[dict[str, Any]]) -> None:
    # What the processes hold at most on each (GPU, MIG instance), summed in one pass: not a scan of
    # every process for every GPU (64 GPUs x 200 processes was a third of loading the scenario).
    held_on: dict[tuple[int, int | None], Any] = {}
    for p in processes:
        for unit, memory in p["gpus"].items():
            held_on[unit] = held_on.get(unit, 0) + max_value(memory)
    for g in gpus:
        # What the driver reserves is not there for processes: the simulator would cut `used`
        # down to total - reserved, and show less in use than the processes it lists hold.
        reserved = max_value(g["memory_reserved"])
        units = [(None, g["memory_total"] - reserved, g.get("memory_used"))] if not g["mig"] else [
            (m["gi"], m["memory_total"], m.get("memory_used")) for m in g["mig"]]
        for gi, room, used in units:
            held = held_on.get((g["index"], gi), 0)
            where = f"gpus[{g['index']}]" + (f".mig gi {gi}" if gi is not None else "")
            if held > room:
                limit = f"memory_total ({format_size(room)})" if gi is not None or not reserved else (
                    f"memory_total less memory_reserved ({format_size(room)})")
                c.fail(where, _("processes hold {held}, more than {limit}").format(held=format_size(held), limit=limit))
            if used is not None and not is_timeline(used) and held > used:
                c.fail(f"{where}.memory_used", _("is {used} but its processes hold "
                                                 "{held}").format(
                                                   used=format_size(used), held=format_size(held)))

