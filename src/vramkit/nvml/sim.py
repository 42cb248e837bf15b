"""Simulated NVML: a scenario served through the same functions as nvidia-ml-py's `pynvml`.

`SimulatedNvml(scenario)` is a module-like object: `sim.nvmlInit()`, `sim.nvmlDeviceGetCount()`,
`sim.NVMLError_GpuIsLost`, ... The NVML layer (backend.py) runs on it unchanged. In vram it
uses the light mirrors in compat.py; in the pynvml shim (shim.py) `install()` writes the same
functions into the real pynvml namespace, so errors and structs are pynvml's own classes.

The scenario clock: t = seconds since the simulator started, or since VRAM_SIM_EPOCH (a unix
time, so that several programs share one clock), or fixed by VRAM_SIM_TIME.
VRAM_SIM_CLOCK=stepped makes it a stepped clock: t starts at VRAM_SIM_TIME (default 0) and moves
only when vram waits between samples, by exactly the time it would have waited; readings are
stamped VRAM_SIM_EPOCH (default: when the simulator started) + t. A day of recording at a
60 s interval then takes a second, and what it recorded follows from the scenario exactly.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import select
import threading
import time
from collections.abc import Callable

from ..errors import RequestError
from ..procs import Stat, StatFiles, comm, in_pid_namespace, is_defunct, kept_fds_limit, namespace_inode
from . import compat
from .scenario import COMPUTE_MODES, THROTTLE_REASONS, Scenario, ScenarioError, integral, value_at

TYPE_CHECKING = False  # for mypy: every program on the shim would import typing (~2.5 ms)
if TYPE_CHECKING:
    from typing import Any, ParamSpec, TypeVar

    _P = ParamSpec("_P")
    _R = TypeVar("_R")

_TYPE_LISTS = {"compute": ("compute",), "graphics": ("graphics",), "both": ("compute", "graphics")}


def _seconds_from_env(name: str) -> float | None:
    """A number of seconds from the environment (None: unset or empty); a RequestError (one
    line, exit 2) for anything else than a finite number: abc, nan, inf, 1e999."""
    text = os.environ.get(name)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or abs(value) > 1e12:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise RequestError(f"{name} must be a number of seconds, got {shown!r}")
    return value


def scenario_clock() -> tuple[float, float | None, bool]:
    """A simulated machine's clock from the environment, for every vendor's simulator: (the
    scenario's time zero in unix seconds, the fixed scenario time or None when it runs with the
    wall clock, stepped). VRAM_SIM_EPOCH, VRAM_SIM_TIME and VRAM_SIM_CLOCK=real|stepped (a
    stepped clock starts at 0 and moves only when a sampler sleeps)."""
    epoch = _seconds_from_env("VRAM_SIM_EPOCH")
    fixed = _seconds_from_env("VRAM_SIM_TIME")
    clock = os.environ.get("VRAM_SIM_CLOCK", "").strip()
    if clock not in ("", "real", "stepped"):
        shown = clock if len(clock) <= 40 else clock[:37] + "..."
        raise RequestError(f"VRAM_SIM_CLOCK must be 'real' or 'stepped', got {shown!r}")
    stepped = clock == "stepped"
    if stepped and fixed is None:
        fixed = 0.0
    return (time.time() if epoch is None else epoch), fixed, stepped


class ScenarioClock:
    """Scenario time for every vendor's simulator (its __init__ sets the fields from scenario_clock())."""

    _t0: float
    _fixed_t: float | None
    stepped: bool

    def now(self) -> float:
        return self._fixed_t if self._fixed_t is not None else time.time() - self._t0

    def wall_time(self) -> float:
        """The unix time of now on the scenario clock: the real time, unless the clock is stepped."""
        return self._t0 + self.now() if self.stepped else time.time()

    def advance(self, seconds: float) -> None:
        """Move a stepped clock forward (what waiting `seconds` would have done)."""
        if not self.stepped:
            raise RuntimeError("advance() needs VRAM_SIM_CLOCK=stepped")
        self._fixed_t = (self._fixed_t or 0.0) + max(0.0, seconds)


class SimHandle:
    """A device handle: a whole GPU (gi None) or one MIG instance of it."""

    __slots__ = ("index", "gi")

    def __init__(self, index: int, gi: int | None = None):
        self.index, self.gi = index, gi

    def __repr__(self) -> str:
        return f"<simulated nvmlDevice {self.index}{'' if self.gi is None else f'/{self.gi}'}>"


class SimEventSet:
    """An NVML event set: the GPUs registered (from when, on the scenario clock) and how many of
    each one's XID events were handed out."""

    def __init__(self) -> None:
        self.since: dict[int, float] = {}
        self.delivered: dict[int, int] = {}
        self.freed = False
        self.lock = threading.Lock()


class _RealProcesses:
    """Whether the scenario's real processes still run. A driver frees a process's memory when it
    exits, so every call that lists or counts processes asks again (nothing is cached), but at
    one poll() per call instead of /proc reads per process: each process is held by a pidfd,
    which becomes readable once all its threads have exited (what is_defunct says of a zombie)
    and never stands for another process that reuses the pid. Without pidfds (a kernel before
    5.3, a seccomp filter) or past kept_fds_limit() of them: /proc/PID/stat, with its start ticks."""

    def __init__(self) -> None:
        self._pidfds: dict[int, int] = {}  # pid -> pidfd of the process first seen with that pid
        self._polls: dict[Any, tuple[select.poll, set[int]]] = {}  # group -> (poll, its pids registered)
        self._use_pidfd = hasattr(os, "pidfd_open")
        self._keep = kept_fds_limit()
        self._stats = StatFiles()
        self._real_start: dict[int, int] = {}  # pid -> start ticks first seen (pid reuse guard)
        self._lock = threading.Lock()  # the pynvml shim serves threaded programs (nvitop)

    def alive(self, group: Any, pids: list[int]) -> set[int]:
        """Which of `pids` (always the same list for one `group`) run now."""
        with self._lock:
            entry = self._polls.get(group)
            if entry is None:
                entry = self._polls[group] = (select.poll(), set())
            poll, registered = entry
            for pid in pids:
                if pid not in registered and self._pin(pid):
                    poll.register(self._pidfds[pid], select.POLLIN)
                    registered.add(pid)
            ended = {fd for fd, _ in poll.poll(0)} if registered else set()
            return {pid for pid in pids if (self._pidfds[pid] not in ended if pid in registered
                                            else self._alive_by_stat(pid))}

    def _pin(self, pid: int) -> bool:
        """Hold pid's process by a pidfd; False where that cannot be done (then: /proc)."""
        if pid in self._pidfds:
            return True
        if not self._use_pidfd or pid in self._real_start or len(self._pidfds) >= self._keep:
            return False  # a pid once read through /proc stays on /proc: one identity per pid
        try:
            self._pidfds[pid] = os.pidfd_open(pid)
        except ProcessLookupError:
            return False  # not running now: asked again next time, as a new process may take the pid
        except OSError as e:
            if e.errno in (errno.ENOSYS, errno.EPERM):  # no pidfds here at all
                self._use_pidfd = False
            return False  # EINVAL (a thread's id), EMFILE: this pid through /proc
        return True

    def _alive_by_stat(self, pid: int) -> bool:
        try:
            raw = self._stats.read(pid)
        except (FileNotFoundError, ProcessLookupError):
            return False
        except OSError:  # out of descriptors, refused: not known to have exited (a driver frees on exit)
            return True
        stat = Stat(raw) if raw else None
        if stat is None or (stat.state == "Z" and is_defunct(pid)):
            return False
        return self._real_start.setdefault(pid, stat.start_ticks) == stat.start_ticks

    def __del__(self) -> None:
        for fd in getattr(self, "_pidfds", {}).values():
            try:
                os.close(fd)
            except OSError:
                pass


class SimulatedNvml(ScenarioClock):
    def __init__(self, scenario: Scenario, api: Any = None):
        nvidia = scenario.for_vendor("nvidia")  # a mixed host's NVIDIA part; an AMD machine has none
        if nvidia is None:
            raise ScenarioError(f"{scenario.source}: a scenario of {scenario.vendor} GPUs has no NVIDIA GPU to "
                                "serve through NVML")
        self.scenario = scenario = nvidia
        # `api` supplies the error and struct classes: pynvml itself in the shim, else compat.
        self.api = api if api is not None else compat
        self._initialized = 0
        self._t0, self._fixed_t, self.stepped = scenario_clock()
        self._real = _RealProcesses()
        # (gpu index, gi) -> [(process, memory spec)], built once: calls stay O(processes on GPU).
        self._by_unit: dict[tuple[int, int | None], list[tuple[dict[str, Any], Any]]] = {}
        self._by_pid = {p["pid"]: p for p in scenario.processes}
        self._nvlink_peers: dict[int, list[int]] = {}  # GPU -> the GPU at each of its links
        for p in scenario.processes:
            for unit, mem in p["gpus"].items():
                self._by_unit.setdefault(unit, []).append((p, mem))
        # Run inside another PID namespace than the scenario's pids are numbered in (a container
        # test), the simulated driver reaches a real process by its pid here (ns_pid), as the real
        # driver, on the host, by its own; one without is taken as running.
        ns = namespace_inode(scenario.data.get("pid_namespace"))
        self._reach: Callable[[dict[str, Any]], int | None] = (
            (lambda p: p.get("ns_pid")) if ns is not None and in_pid_namespace(ns) is False else (lambda p: p["pid"]))
        # unit -> the pids of its real processes, whose liveness each call asks the host
        self._real_pids = {unit: [pid for p, _ in entries if p["source"] == "real" and (pid := self._reach(p))]
                           for unit, entries in self._by_unit.items()}
        api_cfg = scenario.data.get("nvml_api", {})
        self._proc_api: str = api_cfg.get("process_info", "v3")
        self._mem_api: str = api_cfg.get("memory_info", "v2")
        self._slow = scenario.data.get("faults", {}).get("slow_calls", {})
        for name, ms in self._slow.items():
            if hasattr(self, name):
                setattr(self, name, _slowed(getattr(self, name), ms / 1000))

    # ------------------------------------------------------------ namespace plumbing
    def __getattr__(self, name: str) -> Any:
        # Constants, NVMLError classes and anything else pynvml offers come from `api`.
        return getattr(self.api, name)

    def functions(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in dir(type(self)) if n.startswith("nvml")}


    @property
    def initialized(self) -> bool:
        return self._initialized > 0

    def driver_has(self, name: str) -> bool:
        """Whether this simulated driver's library exports the C function `name`.

        An older driver lacks the newer struct versions: process info _v3 (and _v2), memory
        info _v2. Looking one up fails with FUNCTION_NOT_FOUND, as pynvml's does on such a driver.
        """
        if "RunningProcesses_v" in name:
            return name[-2:] <= self._proc_api
        if name == "nvmlDeviceGetMemoryInfo_v2":
            return self._mem_api == "v2"
        return True

    def _error(self, code: int) -> Exception:
        error: Exception = self.api.NVMLError(code)
        return error

    def _check_init(self) -> None:
        if not self._initialized:
            raise self._error(self.api.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any) -> dict[str, Any]:
        self._check_init()
        if not isinstance(handle, SimHandle):
            raise self._error(self.api.NVML_ERROR_INVALID_ARGUMENT)
        g = self.scenario.gpus[handle.index]
        if g["lost"]:
            raise self._error(self.api.NVML_ERROR_GPU_IS_LOST)
        return g

    def _field(self, handle: Any, what: str) -> dict[str, Any]:
        g = self._gpu(handle)
        if what in g["unsupported"]:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        if what in g["no_permission"]:
            raise self._error(self.api.NVML_ERROR_NO_PERMISSION)
        return g

    # ------------------------------------------------------------ processes over time
    def _live(self, unit: tuple[int, int | None], t: float) -> list[tuple[dict[str, Any], Any]]:
        """The unit's (process, memory spec) pairs whose process runs at t: within its
        start_at/exit_at, and for a real process, still running on this host (a driver frees a
        process's memory when it exits)."""
        entries = self._by_unit.get(unit, ())
        real = self._real_pids.get(unit)
        running = self._real.alive(unit, real) if real else ()
        return [(p, mem) for p, mem in entries
                if not (t < p.get("start_at", 0) or ("exit_at" in p and t >= p["exit_at"]))
                and (p["source"] != "real" or (pid := self._reach(p)) is None or pid in running)]

    def _unit_memory(self, index: int, gi: int | None, t: float) -> tuple[int, int]:
        """(memory used by live processes, memory of listed processes not live now)."""
        live = sum(int(value_at(mem, t)) for _, mem in self._live((index, gi), t))
        listed = sum(int(value_at(mem, t)) for _, mem in self._by_unit.get((index, gi), ()))
        return live, listed - live

    def _used(self, spec: dict[str, Any], index: int, gi: int | None, t: float) -> int:
        live, gone = self._unit_memory(index, gi, t)
        if "memory_used" not in spec:
            return live
        return max(live, int(value_at(spec["memory_used"], t)) - gone)

    # ------------------------------------------------------------ init and system
    def nvmlErrorString(self, result: int) -> str:
        # Needs no nvmlInit, as in NVML: pynvml's NVMLError.__str__ calls it.
        return compat._MESSAGES.get(result, "Unknown Error")

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        driver = self.scenario.data.get("faults", {}).get("driver")
        if driver == "missing":
            raise self._error(self.api.NVML_ERROR_LIBRARY_NOT_FOUND)
        if driver == "not_loaded":
            raise self._error(self.api.NVML_ERROR_DRIVER_NOT_LOADED)
        self._initialized += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        version: str = self.scenario.data.get("driver_version", "550.54.15")
        return version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check_init()
        return "12." + self.nvmlSystemGetDriverVersion()

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check_init()
        major, minor = self.scenario.data.get("cuda_version", "12.4").split(".")
        return int(major) * 1000 + int(minor) * 10

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._check_init()
        p = self._by_pid.get(pid)
        if p is not None and p["source"] == "synthetic":
            name: str = p["command"].split()[0]
            return name
        here = self._reach(p) if p is not None else pid
        real = comm(here) if here is not None else None
        if real is None:
            raise self._error(self.api.NVML_ERROR_NOT_FOUND)
        return real

    # ------------------------------------------------------------ devices
    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.scenario.gpus)

    nvmlDeviceGetCount_v2 = nvmlDeviceGetCount

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimHandle:
        self._check_init()
        if not 0 <= index < len(self.scenario.gpus):
            raise self._error(self.api.NVML_ERROR_INVALID_ARGUMENT)
        if self.scenario.gpus[index]["lost"]:
            raise self._error(self.api.NVML_ERROR_GPU_IS_LOST)
        return SimHandle(index)

    nvmlDeviceGetHandleByIndex_v2 = nvmlDeviceGetHandleByIndex

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> SimHandle:
        self._check_init()
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for g in self.scenario.gpus:
            if g["uuid"] == uuid:
                return self.nvmlDeviceGetHandleByIndex(g["index"])
            for m in g["mig"]:
                if m["uuid"] == uuid:
                    return SimHandle(g["index"], m["gi"])
        raise self._error(self.api.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str | bytes) -> SimHandle:
        self._check_init()
        bus_id = (bus_id.decode() if isinstance(bus_id, bytes) else bus_id).upper()
        for g in self.scenario.gpus:
            if g["pci_bus_id"].upper().endswith(bus_id[-12:]):
                return self.nvmlDeviceGetHandleByIndex(g["index"])
        raise self._error(self.api.NVML_ERROR_NOT_FOUND)

    nvmlDeviceGetHandleByPciBusId_v2 = nvmlDeviceGetHandleByPciBusId

    def nvmlDeviceGetIndex(self, handle: SimHandle) -> int:
        index: int = self._gpu(handle)["index"]
        return index

    def _mig(self, handle: SimHandle) -> dict[str, Any] | None:
        if handle.gi is None:
            return None
        mig: dict[str, Any] = next(m for m in self._gpu(handle)["mig"] if m["gi"] == handle.gi)
        return mig

    def nvmlDeviceGetName(self, handle: SimHandle) -> str:
        g = self._field(handle, "name")
        mig = self._mig(handle)
        return g["name"] if mig is None else f"{g['name']} MIG {mig['profile']}"

    def nvmlDeviceGetUUID(self, handle: SimHandle) -> str:
        g = self._field(handle, "uuid")
        mig = self._mig(handle)
        uuid: str = g["uuid"] if mig is None else mig["uuid"]
        return uuid

    def nvmlDeviceGetSerial(self, handle: SimHandle) -> str:
        return f"SIM{self._gpu(handle)['index']:010d}"

    def nvmlDeviceGetPciInfo(self, handle: SimHandle) -> Any:
        g = self._field(handle, "pci_bus_id")
        bus_id = g["pci_bus_id"].encode()
        domain, bus, rest = g["pci_bus_id"].split(":")
        device = rest.split(".")[0]
        return self.api.nvmlPciInfo_t(bus_id[-12:], int(domain, 16), int(bus, 16), int(device, 16),
                                      0x20B510DE, 0x134F10DE, bus_id)

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    def nvmlDeviceGetMemoryInfo(self, handle: SimHandle, version: int | None = None) -> Any:
        g = self._field(handle, "memory")
        if version and self._mem_api == "v1":
            raise self._error(self.api.NVML_ERROR_FUNCTION_NOT_FOUND)
        t = self.now()
        mig = self._mig(handle)
        if mig is not None:
            total, reserved = mig["memory_total"], 0
            used = self._used(mig, handle.index, mig["gi"], t)
        elif g["mig"]:
            total, reserved = g["memory_total"], int(value_at(g["memory_reserved"], t))
            used = sum(self._used(m, handle.index, m["gi"], t) for m in g["mig"])
        else:
            total, reserved = g["memory_total"], int(value_at(g["memory_reserved"], t))
            used = self._used(g, handle.index, None, t)
        used = min(used, total - reserved)
        free = total - reserved - used
        if version:
            return self.api.c_nvmlMemory_v2_t(version, total, reserved, free, used)
        # The v1 struct has no `reserved`: the driver counts it as used.
        return self.api.c_nvmlMemory_t(total, free, used + reserved)

    def nvmlDeviceGetBAR1MemoryInfo(self, handle: SimHandle) -> Any:
        """The BAR1 aperture. Scenarios do not describe it, so it follows the large-BAR layout of
        data-center GPUs (the power of two at or above the memory: 128 GiB on an 80 GB GPU), shared
        among MIG instances by memory, with 2 MiB mapped per live process."""
        g = self._gpu(handle)
        total = 1 << max(g["memory_total"] - 1, 1).bit_length()
        mig = self._mig(handle)
        if mig is not None:
            total = total * mig["memory_total"] // g["memory_total"] // 2**20 * 2**20
        t = self.now()
        units = [(handle.index, handle.gi)] if mig is not None or not g["mig"] else [
            (handle.index, m["gi"]) for m in g["mig"]]
        used = 2 * 2**20 * sum(len(self._live(unit, t)) for unit in units)
        used = min(used, total)
        return self.api.c_nvmlBAR1Memory_t(total, total - used, used)

    def nvmlDeviceGetUtilizationRates(self, handle: SimHandle) -> Any:
        g = self._field(handle, "utilization")
        if handle.gi is not None or g["mig"]:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)  # as on real MIG GPUs
        t = self.now()
        return self.api.c_nvmlUtilization_t(int(value_at(g["utilization"], t)),
                                            int(value_at(g["memory_utilization"], t)))

    def nvmlDeviceGetTemperature(self, handle: SimHandle, sensor: int = 0) -> int:
        if handle.gi is not None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        return int(value_at(self._field(handle, "temperature")["temperature"], self.now()))

    def nvmlDeviceGetPowerUsage(self, handle: SimHandle) -> int:
        if handle.gi is not None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        return int(value_at(self._field(handle, "power")["power"], self.now()) * 1000)  # milliwatts

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimHandle) -> int:
        if handle.gi is not None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        return int(self._field(handle, "power_limit")["power_limit"] * 1000)

    nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetEnforcedPowerLimit

    def nvmlDeviceGetFanSpeed(self, handle: SimHandle) -> int:
        g = self._field(handle, "fan")
        if g["fan"] is None or handle.gi is not None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)  # passively cooled, like an SXM A100
        return int(value_at(g["fan"], self.now()))

    def _video(self, handle: SimHandle, key: str) -> list[int]:
        """The GPU's video encoder or decoder: [%, sampling period in µs]."""
        g = self._field(handle, "encoder_decoder")
        if g[key] is None or handle.gi is not None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)  # no such engine (or a MIG instance)
        return [int(value_at(g[key], self.now())), 167_000]

    def nvmlDeviceGetEncoderUtilization(self, handle: SimHandle) -> list[int]:
        return self._video(handle, "encoder_utilization")

    def nvmlDeviceGetDecoderUtilization(self, handle: SimHandle) -> list[int]:
        return self._video(handle, "decoder_utilization")

    # ------------------------------------------------------------ health (scenario gpus[].health)
    def _health(self, handle: SimHandle, family: str) -> dict[str, Any]:
        """The GPU's health fields, or the error its `family` of calls answers with (a MIG instance
        answers NOT_SUPPORTED: these are the whole GPU's)."""
        if handle.gi is not None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        health: dict[str, Any] = self._field(handle, family)["health"]
        return health

    def _health_now(self, handle: SimHandle, family: str, key: str) -> int:
        return int(value_at(self._health(handle, family)[key], self.now()))

    def nvmlDeviceGetEccMode(self, handle: SimHandle) -> list[int]:
        enabled = int(self._health(handle, "ecc")["ecc_enabled"])
        return [enabled, enabled]  # [current, pending]

    def nvmlDeviceGetTotalEccErrors(self, handle: SimHandle, errorType: int, counterType: int) -> int:
        h = self._health(handle, "ecc")
        if not h["ecc_enabled"]:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        kind = "corrected" if errorType == self.api.NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected"
        when = "volatile" if counterType == self.api.NVML_VOLATILE_ECC else "aggregate"
        count: int = h[f"ecc_{kind}_{when}"]
        return count

    def _pages(self, handle: SimHandle, cause: int) -> int:
        h = self._health(handle, "retired_pages")
        if h["memory_errors"] != "page_retirement":
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)  # Ampere and later remap rows instead
        single = cause == self.api.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        count: int = h["retired_pages_single_bit" if single else "retired_pages_double_bit"]
        return count

    def nvmlDeviceGetRetiredPages(self, handle: SimHandle, sourceFilter: int) -> list[int]:
        return [0x1000 * (i + 1) for i in range(self._pages(handle, sourceFilter))]  # page addresses

    def nvmlDeviceGetRetiredPages_v2(self, handle: SimHandle, sourceFilter: int) -> list[dict[str, int]]:
        stamp = int(self._t0)
        return [{"address": a, "timestamp": stamp} for a in self.nvmlDeviceGetRetiredPages(handle, sourceFilter)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: SimHandle) -> int:
        self._pages(handle, 0)
        return int(self._health(handle, "retired_pages")["retired_pages_pending"])

    def nvmlDeviceGetRemappedRows(self, handle: SimHandle) -> tuple[int, int, int, int]:
        h = self._health(handle, "remapped_rows")
        if h["memory_errors"] != "row_remapping":
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)  # before Ampere: page retirement
        return (h["remapped_rows_correctable"], h["remapped_rows_uncorrectable"], int(h["remap_pending"]),
                int(h["remap_failed"]))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: SimHandle) -> int:
        mask = 0
        for word in self._health(handle, "throttle_reasons")["throttle_reasons"]:
            mask |= THROTTLE_REASONS[word]
        return mask

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: SimHandle) -> int:
        self._health(handle, "throttle_reasons")
        return sum(THROTTLE_REASONS.values())

    nvmlDeviceGetSupportedClocksThrottleReasons = nvmlDeviceGetSupportedClocksEventReasons

    def _clock_key(self, clock: int) -> str:
        if clock in (self.api.NVML_CLOCK_SM, self.api.NVML_CLOCK_GRAPHICS):
            return "sm_clock"
        if clock == self.api.NVML_CLOCK_MEM:
            return "memory_clock"
        raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)  # the video clock: not in scenarios

    def nvmlDeviceGetClockInfo(self, handle: SimHandle, type: int) -> int:
        return self._health_now(handle, "clocks", self._clock_key(type))

    def nvmlDeviceGetMaxClockInfo(self, handle: SimHandle, type: int) -> int:
        return self._health_now(handle, "clocks", self._clock_key(type) + "_max")

    def nvmlDeviceGetPerformanceState(self, handle: SimHandle) -> int:
        return self._health_now(handle, "performance_state", "performance_state")

    nvmlDeviceGetPowerState = nvmlDeviceGetPerformanceState

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: SimHandle) -> int:
        return self._health_now(handle, "pcie", "pcie_gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: SimHandle) -> int:
        return self._health_now(handle, "pcie", "pcie_gen_max")

    nvmlDeviceGetGpuMaxPcieLinkGeneration = nvmlDeviceGetMaxPcieLinkGeneration

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: SimHandle) -> int:
        return self._health_now(handle, "pcie", "pcie_width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: SimHandle) -> int:
        return self._health_now(handle, "pcie", "pcie_width_max")

    def nvmlDeviceGetPcieThroughput(self, handle: SimHandle, counter: int) -> int:
        key = "pcie_tx" if counter == self.api.NVML_PCIE_UTIL_TX_BYTES else "pcie_rx"
        return self._health_now(handle, "pcie_throughput", key) // 1024  # KB/s, as NVML reports it

    def nvmlDeviceGetPersistenceMode(self, handle: SimHandle) -> int:
        return int(self._health(handle, "persistence_mode")["persistence_mode"])

    def nvmlDeviceGetComputeMode(self, handle: SimHandle) -> int:
        return COMPUTE_MODES[self._health(handle, "compute_mode")["compute_mode"]]

    # ---------------------------------------------- counters and sensors only some GPUs have (N/A by default)
    def _optional(self, handle: SimHandle, family: str, key: str) -> Any:
        value = self._health(handle, family)[key]
        if value is None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: SimHandle) -> int:
        """Millijoules since the driver loaded: the scenario's energy_joules at t=0 plus the area
        under the GPU's power since."""
        start = self._optional(handle, "energy", "energy_joules")
        power = self._gpu(handle)["power"]
        return int((start + integral(power, self.now())) * 1000)

    def nvmlDeviceGetPcieReplayCounter(self, handle: SimHandle) -> int:
        count: int = self._optional(handle, "pcie_replays", "pcie_replays")
        return count


    # ---------------------------------------------- events: XIDs (scenario gpus[].health.xid_events)
    def nvmlDeviceGetSupportedEventTypes(self, handle: SimHandle) -> int:
        self._health(handle, "events")
        return int(self.api.nvmlEventTypeXidCriticalError)

    def nvmlEventSetCreate(self) -> SimEventSet:
        self._check_init()
        return SimEventSet()

    def nvmlDeviceRegisterEvents(self, handle: SimHandle, eventTypes: int, eventSet: SimEventSet) -> None:
        """Only XID events are simulated. As NVML does, an event set sees the events that come
        after its registration."""
        self._health(handle, "events")
        if not eventTypes & self.api.nvmlEventTypeXidCriticalError:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        with eventSet.lock:
            eventSet.since[handle.index] = self.now()

    def nvmlEventSetWait(self, eventSet: SimEventSet, timeoutms: int) -> Any:
        """The next XID whose scenario time has come on a registered GPU (the earliest first), or
        NVML_ERROR_TIMEOUT after `timeoutms` milliseconds."""
        self._check_init()
        deadline = time.monotonic() + max(0, timeoutms) / 1000
        while True:
            found = self._next_event(eventSet)
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0 or eventSet.freed:
                raise self._error(self.api.NVML_ERROR_TIMEOUT)
            time.sleep(min(left, 0.05))

    nvmlEventSetWait_v2 = nvmlEventSetWait

    def _next_event(self, eventSet: SimEventSet) -> Any:
        t = self.now()
        with eventSet.lock:
            best = None
            for index, since in eventSet.since.items():
                g = self.scenario.gpus[index]
                if g["lost"]:
                    continue
                done = eventSet.delivered.get(index, 0)
                pending = [e for e in g["health"]["xid_events"] if e[0] >= since][done:]
                if pending and pending[0][0] <= t and (best is None or pending[0][0] < best[1][0]):
                    best = (index, pending[0])
            if best is None:
                return None
            index, (_, xid) = best
            eventSet.delivered[index] = eventSet.delivered.get(index, 0) + 1
        return compat.c_nvmlEventData_t(SimHandle(index), self.api.nvmlEventTypeXidCriticalError, xid,
                                        0xFFFFFFFF, 0xFFFFFFFF)

    def nvmlEventSetFree(self, eventSet: SimEventSet) -> None:
        eventSet.freed = True

    def _link(self, handle: SimHandle, link: int) -> dict[str, Any]:
        h = self._health(handle, "nvlink")
        if not 0 <= link < h["nvlink_links"]:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED if link >= 0 else self.api.NVML_ERROR_INVALID_ARGUMENT)
        return h

    def nvmlDeviceGetNvLinkState(self, handle: SimHandle, link: int) -> int:
        return int(link < self._link(handle, link)["nvlink_links_up"])  # the first links_up are active

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, fieldIds: list[Any]) -> list[Any]:
        """NVLink data counters (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX, KiB since the driver
        loaded), per link as scopeId: the scenario's rate shared by the active links; and the link
        count (NVML_FI_DEV_NVLINK_LINK_COUNT); the memory temperature (NVML_FI_DEV_MEMORY_TEMP).
        Other fields answer NOT_SUPPORTED in their own nvmlReturn, as NVML does."""
        self._gpu(handle)
        values = []
        t = self.now()
        for entry in fieldIds:
            field_id, scope = entry if isinstance(entry, tuple) else (entry, 0)
            value = self.api.c_nvmlFieldValue_t()
            value.fieldId, value.scopeId = field_id, scope
            value.timestamp = int((self._t0 + t) * 1e6)
            value.valueType = self.api.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            direction = {self.api.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: "nvlink_tx",
                         self.api.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: "nvlink_rx"}.get(field_id)
            try:
                if field_id == self.api.NVML_FI_DEV_MEMORY_TEMP:
                    temperature = self._optional(handle, "memory_temperature", "memory_temperature")
                    value.valueType = self.api.NVML_VALUE_TYPE_UNSIGNED_INT
                    value.value.uiVal = int(value_at(temperature, t))
                    value.nvmlReturn = self.api.NVML_SUCCESS
                    values.append(value)
                    continue
                if field_id == self.api.NVML_FI_DEV_NVLINK_LINK_COUNT:  # what nvitop asks for
                    value.valueType = self.api.NVML_VALUE_TYPE_UNSIGNED_INT
                    value.value.uiVal = self._health(handle, "nvlink")["nvlink_links"]
                    value.nvmlReturn = self.api.NVML_SUCCESS
                    values.append(value)
                    continue
                if direction is None:
                    raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
                h = self._link(handle, scope)
                up = h["nvlink_links_up"]
                value.value.ullVal = int(integral(h[direction], t) / up / 1024) if scope < up else 0
                value.nvmlReturn = self.api.NVML_SUCCESS
            except self.api.NVMLError as e:
                value.nvmlReturn = e.value
            values.append(value)
        return values

    # ------------------------------------------------------------ topology (scenario "topology")
    def _topology_row(self, handle: SimHandle) -> list[str]:
        if handle.gi is not None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        row: list[str] | None = self._field(handle, "topology").get("topology")
        if row is None:  # the scenario does not describe how its GPUs are connected
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        return row

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: SimHandle, device2: SimHandle) -> int:
        """The closest PCIe ancestor of two GPUs. For a pair joined by NVLink (NV<n>), whose PCIe
        path the matrix does not say: NODE on one NUMA node (or where none is given), else SYSTEM."""
        cell = self._topology_row(device1)[device2.index]
        self._topology_row(device2)
        levels = {"X": self.api.NVML_TOPOLOGY_INTERNAL, "PIX": self.api.NVML_TOPOLOGY_SINGLE,
                  "PXB": self.api.NVML_TOPOLOGY_MULTIPLE, "PHB": self.api.NVML_TOPOLOGY_HOSTBRIDGE,
                  "NODE": self.api.NVML_TOPOLOGY_NODE, "SYS": self.api.NVML_TOPOLOGY_SYSTEM}
        if cell.startswith("NV"):
            nodes = {self.scenario.gpus[d.index].get("numa_node") for d in (device1, device2)}
            return int(self.api.NVML_TOPOLOGY_NODE if len(nodes) == 1 else self.api.NVML_TOPOLOGY_SYSTEM)
        return int(levels[cell])

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: SimHandle, link: int) -> Any:
        """The GPU at the other end of `link`: a GPU's links go to its NV<n> peers in index order,
        n links each."""
        self._link(handle, link)
        peers = self._nvlink_peers.get(handle.index)
        if peers is None:  # built once a GPU: the matrix does not change
            peers = [j for j, cell in enumerate(self._topology_row(handle)) if cell.startswith("NV")
                     for _ in range(int(cell[2:]))]
            self._nvlink_peers[handle.index] = peers
        if link >= len(peers):
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        return self.nvmlDeviceGetPciInfo(SimHandle(peers[link]))

    def nvmlDeviceGetNumaNodeId(self, handle: SimHandle) -> int:
        g = self._field(handle, "numa_node")
        if g.get("numa_node") is None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        node: int = g["numa_node"]
        return node

    def nvmlDeviceGetProcessUtilization(self, handle: SimHandle, lastSeenTimeStamp: int) -> list[Any]:
        """Per-process samples, as the driver keeps them: one per process that did some work
        lately (any of SM, memory, encoder, decoder above 0); NOT_FOUND when none did. A process's
        sm_util defaults to its GPU's utilization, its mem_util (while it runs kernels) to its
        GPU's memory utilization; enc_util and dec_util to 0."""
        g = self._field(handle, "process_utilization")
        if "utilization" in g["unsupported"] | g["no_permission"]:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)  # no sampling at all on this GPU
        if handle.gi is not None or g["mig"]:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)  # as on real MIG GPUs
        t = self.now()
        stamp = int(time.time() * 1e6)
        device_util = int(value_at(g["utilization"], t))
        device_mem = int(value_at(g["memory_utilization"], t))
        samples = []
        for p, _ in self._live((handle.index, None), t):
            if p.get("state") == "zombie":
                continue
            sm = int(value_at(p["sm_util"], t)) if "sm_util" in p else device_util
            mem = int(value_at(p["mem_util"], t)) if "mem_util" in p else (device_mem if sm else 0)
            enc = int(value_at(p.get("enc_util", 0), t))
            dec = int(value_at(p.get("dec_util", 0), t))
            if (sm or mem or enc or dec) and stamp > lastSeenTimeStamp:
                samples.append(self.api.c_nvmlProcessUtilizationSample_t(p["pid"], stamp, sm, mem, enc, dec))
        if not samples:
            raise self._error(self.api.NVML_ERROR_NOT_FOUND)
        return samples

    # ------------------------------------------------------------ MIG
    def nvmlDeviceGetMigMode(self, handle: SimHandle) -> list[int]:
        g = self._gpu(handle)
        if handle.gi is not None:
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        if not g["mig"] and not g["name"].startswith(("NVIDIA A100", "NVIDIA A30", "NVIDIA H100",
                                                      "NVIDIA H200", "NVIDIA B")):
            raise self._error(self.api.NVML_ERROR_NOT_SUPPORTED)
        mode = self.api.NVML_DEVICE_MIG_ENABLE if g["mig"] else self.api.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceIsMigDeviceHandle(self, handle: SimHandle) -> bool:
        self._gpu(handle)
        return handle.gi is not None

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: SimHandle) -> int:
        self._gpu(handle)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: SimHandle, index: int) -> SimHandle:
        g = self._gpu(handle)
        if index >= len(g["mig"]):
            raise self._error(self.api.NVML_ERROR_NOT_FOUND)
        return SimHandle(handle.index, g["mig"][index]["gi"])

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: SimHandle) -> SimHandle:
        self._gpu(handle)
        return SimHandle(handle.index)

    def nvmlDeviceGetGpuInstanceId(self, handle: SimHandle) -> int:
        mig = self._mig(handle)
        if mig is None:
            raise self._error(self.api.NVML_ERROR_INVALID_ARGUMENT)
        gi: int = mig["gi"]
        return gi

    def nvmlDeviceGetComputeInstanceId(self, handle: SimHandle) -> int:
        mig = self._mig(handle)
        if mig is None:
            raise self._error(self.api.NVML_ERROR_INVALID_ARGUMENT)
        ci: int = mig["ci"]
        return ci

    # ------------------------------------------------------------ processes
    def _processes(self, handle: SimHandle, kind: str, version: str) -> list[Any]:
        g = self._field(handle, "processes")
        if version > self._proc_api:  # this "driver" predates the struct version asked for
            raise self._error(self.api.NVML_ERROR_FUNCTION_NOT_FOUND)
        t = self.now()
        if g["mig"]:
            units = [(handle.index, m["gi"]) for m in g["mig"] if handle.gi in (None, m["gi"])]
        else:
            units = [(handle.index, None)]
        out = []
        for unit in units:
            ci = next((m["ci"] for m in g["mig"] if m["gi"] == unit[1]), 0xFFFFFFFF)
            for p, mem in self._live(unit, t):
                if kind in _TYPE_LISTS[p["type"]]:
                    fields = {"pid": p["pid"], "usedGpuMemory": int(value_at(mem, t))}
                    if version != "v1":
                        fields["gpuInstanceId"] = 0xFFFFFFFF if unit[1] is None else unit[1]
                        fields["computeInstanceId"] = ci
                    out.append(self.api.nvmlFriendlyObject(fields))
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "compute", "v3")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "compute", "v2")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "compute", self._proc_api)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "graphics", "v3")

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "graphics", "v2")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "graphics", self._proc_api)

    # Scenarios have no MPS clients: the lists are empty, with the same errors and versions.
    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "mps", "v3")

    def nvmlDeviceGetMPSComputeRunningProcesses_v2(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "mps", "v2")

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "mps", self._proc_api)

    # ------------------------------------------------------------ the host side of synthetic pids
    def host_process(self, pid: int) -> dict[str, Any] | None:
        """The scenario's own description of a synthetic pid (what /proc would say), else None."""
        return self._by_pid.get(pid)


def _slowed(fn: Callable[_P, _R], seconds: float) -> Callable[_P, _R]:
    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        time.sleep(seconds)
        return fn(*args, **kwargs)
    return wrapper

