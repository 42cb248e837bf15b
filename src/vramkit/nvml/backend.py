"""The NVML layer: reads devices and GPU processes through a pynvml-like module.

It runs unchanged on nvidia-ml-py's `pynvml` (a real driver) and on `SimulatedNvml`.
Rules it keeps:
- a field the driver does not support or refuses is None plus a reason, never 0;
- a lost GPU is reported as lost and the other GPUs still read;
- newer structs first (process info v3, memory info v2), falling back to older drivers' ones,
  and remembering which worked so later snapshots make no failed calls;
- compute and graphics lists are merged: one row per (pid, GPU, MIG instance); on nvidia-ml-py
  each list is one call of NVML's C function, with pynvml's own entry struct (_c_lister);
- handles and static facts (name, uuid, PCI id, MIG layout) are cached between reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..errors import VramkitError
from ..gpu_state import Device, GpuProcess, Health, MigDevice, Topology
from ..i18n import N_, _

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from typing import Any

_UNSET = 0xFFFFFFFF  # what NVML puts in gpuInstanceId outside MIG
SLOW_CALL = 1.0  # seconds: an NVML call slower than this is skipped (N/A with the reason) for a while
SLOW_RETRY = 60.0  # seconds before a slow call is tried again


class NvmlUnavailable(VramkitError):
    """No usable NVML: no driver, no library, or no nvidia-ml-py. The message is one line."""


_PROCESS_FNS = {
    "compute": ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses"),
    "graphics": ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                 "nvmlDeviceGetGraphicsRunningProcesses"),
}


# The N/A reasons are stored in English (the JSON's `na`), marked here and translated where they are
# shown (render/fmt.reason).
NEEDS_TWO = N_("needs two readings (NVML keeps counters)")
NOT_SUPPORTED = N_("not supported")
NO_PERMISSION = N_("no permission")
OLD_PYNVML = N_("not supported by this nvidia-ml-py")
GPU_LOST = N_("GPU is lost (fell off the bus or needs a reset)")
NOT_READ = N_("not read: this reading does not use it")
_COMPUTE_MODES = {0: "default", 1: "exclusive thread", 2: "prohibited", 3: "exclusive process"}


# The fields a reading may go without (backends.EXTRAS): field -> (the NVML call, its value from
# what the call returns). Power in mW; the video engines' busy share as [%, sampling period in µs].
_EXTRA_CALLS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "power_limit": ("nvmlDeviceGetEnforcedPowerLimit", lambda milliwatts: milliwatts / 1000),
    "fan": ("nvmlDeviceGetFanSpeed", lambda percent: percent),
    "encoder_utilization": ("nvmlDeviceGetEncoderUtilization", lambda share: share[0]),
    "decoder_utilization": ("nvmlDeviceGetDecoderUtilization", lambda share: share[0]),
}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# One row of a process list: (pid, bytes used or None when the driver will not say, GPU instance or None).
ProcessRow = tuple[int, "int | None", "int | None"]
_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE in usedGpuMemory (pynvml: None)


def _public_lister(fn: Callable[[Any], list[Any]]) -> Callable[[int, Any], list[ProcessRow]]:
    """A process list through pynvml's own function (or the simulator's)."""
    def rows(index: int, handle: Any) -> list[ProcessRow]:
        return [(info.pid, info.usedGpuMemory, getattr(info, "gpuInstanceId", None)) for info in fn(handle)]
    return rows


def _c_lister(lib: Any, name: str, wrapper: Any) -> Callable[[int, Any], list[ProcessRow]] | None:
    """A process list through NVML's C function `name` itself, as nvitop calls it: one call with an
    array sized from the previous list, where pynvml's wrapper makes two (the first only asks how
    many) and turns each entry into a Python object field by field. The entry struct is the one
    pynvml's own wrapper of `name` passes (so the layout is nvidia-ml-py's choice, driver by driver);
    None where that cannot be told (another pynvml, the simulator without the shim): then pynvml's
    function is used."""
    get_pointer = getattr(lib, "_nvmlGetFunctionPointer", None)
    code = getattr(wrapper, "__code__", None)
    if get_pointer is None or code is None or name not in code.co_consts:
        return None
    structs = {n for n in code.co_names if n.startswith("c_nvmlProcessInfo")}
    entry = getattr(lib, structs.pop(), None) if len(structs) == 1 else None
    fields = {f[0] for f in getattr(entry, "_fields_", ())}
    if entry is None or not {"pid", "usedGpuMemory"} <= fields:
        return None
    import ctypes

    has_gi = "gpuInstanceId" in fields
    too_small, success = lib.NVML_ERROR_INSUFFICIENT_SIZE, lib.NVML_SUCCESS
    sizes: dict[int, int] = {}  # GPU -> entries its array has room for: twice the last list, and 5
    get = object.__getattribute__  # each field past pynvml's __getattribute__ (it only decodes bytes)

    def rows(index: int, handle: Any) -> list[ProcessRow]:
        fn = get_pointer(name)
        size = sizes.get(index, 16)
        for _attempt in range(4):  # a list that keeps outgrowing its array: processes starting meanwhile
            count = ctypes.c_uint(size)
            array = (entry * size)()
            ret = fn(handle, ctypes.byref(count), array)
            if ret != too_small:
                break
            size = sizes[index] = count.value * 2 + 5
        if ret != success:
            raise lib.NVMLError(ret)
        sizes[index] = max(16, count.value * 2 + 5)
        out: list[ProcessRow] = []
        for i in range(min(count.value, size)):  # one entry object at a time, not a list of them all
            info = array[i]
            memory = get(info, "usedGpuMemory")
            out.append((get(info, "pid"), None if memory == _NOT_AVAILABLE else memory,
                        get(info, "gpuInstanceId") if has_gi else None))
        return out
    return rows


# GpuProcess.types of a process in one list: one tuple for all of them, not one a process a reading
_KINDS = {"compute": ("compute",), "graphics": ("graphics",)}
_NO_WORK = (0, 0, 0, 0)  # the utilization of a process without samples since the last reading


class Nvml:
    def __init__(self, lib: Any):
        self.lib = lib
        self._codes = {name: getattr(lib, name) for name in (
            "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_GPU_IS_LOST",
            "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NOT_FOUND", "NVML_ERROR_LIBRARY_NOT_FOUND",
            "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_INVALID_ARGUMENT")}
        self._mismatch = getattr(lib, "NVMLLibraryMismatchError", ())
        self._handles: dict[int, Any] = {}
        self._static: dict[int, dict[str, Any]] = {}
        self._mem_v2 = hasattr(lib, "nvmlMemory_v2")
        self._process_fn: dict[str, str] = {}
        self._listers: dict[str, Callable[[int, Any], list[ProcessRow]]] = {}  # process-list call -> reader
        self._sample_since: dict[int, int] = {}  # GPU index -> newest process-utilization sample seen (µs)
        self._no_process_util: dict[int, str] = {}  # GPU index -> why its driver gives no process samples
        self._last_rows: dict[int, list[GpuProcess]] = {}  # GPU index -> its processes at the last reading
        self._nvlink_counters: dict[int, tuple[float, int, int]] = {}
        self._topology: Topology | None = None  # GPU -> (when, tx KiB, rx KiB)
        self._xids: XidWatcher | None = None
        self._slow: dict[tuple[str, ...], tuple[float, float]] = {}  # fields -> (seconds it took, when)
        self.slow_call = SLOW_CALL
        self.slow_retry = SLOW_RETRY
        self._open = False
        self.count = 0
        self.driver_version: str | None = None
        self.cuda_version: str | None = None

    # ------------------------------------------------------------ lifecycle
    def open(self) -> Nvml:
        lib = self.lib
        try:
            lib.nvmlInit()
        except lib.NVMLError as e:
            raise NvmlUnavailable(self._init_message(e)) from None
        except OSError as e:  # a broken libnvidia-ml.so
            raise NvmlUnavailable(_("NVML could not be loaded: {error}").format(error=e)) from None
        self._open = True
        self.count = lib.nvmlDeviceGetCount()
        try:
            self.driver_version = _text(lib.nvmlSystemGetDriverVersion())
        except lib.NVMLError:
            pass
        try:
            v = lib.nvmlSystemGetCudaDriverVersion()
            self.cuda_version = f"{v // 1000}.{v % 1000 // 10}"
        except (lib.NVMLError, AttributeError):
            pass
        return self

    def close(self) -> None:
        if self._xids is not None:
            self._xids.stop()
            self._xids = None
        if self._open:
            self._open = False
            try:
                self.lib.nvmlShutdown()
            except self.lib.NVMLError:
                pass

    def _init_message(self, e: Exception) -> str:
        code = getattr(e, "value", None)
        if code == self._codes["NVML_ERROR_LIBRARY_NOT_FOUND"]:
            return _("no NVIDIA driver found: the NVML library (libnvidia-ml.so.1) is not installed")
        if code == self._codes["NVML_ERROR_DRIVER_NOT_LOADED"]:
            return _("the NVIDIA driver is not loaded (no /dev/nvidia*, or the kernel module is missing)")
        if code == self._codes["NVML_ERROR_NO_PERMISSION"]:
            return _("no permission to use the NVIDIA driver (check the permissions of /dev/nvidia*)")
        return _("NVML failed to start: {error}").format(error=e)

    # ------------------------------------------------------------ one snapshot
    def read(self, extras: frozenset[str] | None = None) -> list[Device]:
        """Every GPU. Of the fields a reading may go without (backends.EXTRAS: power limit, fan,
        encoder and decoder use), only those in `extras` (None: all of them)."""
        return [self._read_device(i, extras) for i in range(self.count)]

    def _read_device(self, index: int, extras: frozenset[str] | None = None) -> Device:
        lib = self.lib
        dev = Device(index=index)
        try:
            handle = self._handles.get(index)
            if handle is None:
                handle = self._handles[index] = lib.nvmlDeviceGetHandleByIndex(index)
            self._read_static(dev, handle)
            self._read_memory(dev, handle)
            util = self._query(dev, ("utilization", "memory_utilization"), lib.nvmlDeviceGetUtilizationRates, handle)
            if util is not None:
                dev.utilization, dev.memory_utilization = util.gpu, util.memory
            dev.temperature = self._query(dev, ("temperature",), lib.nvmlDeviceGetTemperature, handle,
                                          lib.NVML_TEMPERATURE_GPU)
            power = self._query(dev, ("power_draw",), lib.nvmlDeviceGetPowerUsage, handle)
            dev.power_draw = None if power is None else power / 1000
            for field, (call, value) in _EXTRA_CALLS.items():
                if extras is None or field in extras:
                    got = self._query(dev, (field,), getattr(lib, call), handle)
                    setattr(dev, field, None if got is None else value(got))
                else:
                    dev.na[field] = NOT_READ
            self._read_mig(dev, handle)
            self._read_processes(dev, handle)
        except lib.NVMLError as e:
            if getattr(e, "value", None) != self._codes["NVML_ERROR_GPU_IS_LOST"]:
                raise
            self._handles.pop(index, None)
            dev.lost, dev.error = True, GPU_LOST
            dev.processes = []
        return dev

    def _query(self, dev: Device, fields: tuple[str, ...], fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call; an unsupported or refused field becomes None with the reason. A call
        that took longer than `slow_call` seconds is not made again for `slow_retry` seconds: a
        call cannot be interrupted, but a driver that takes 3 s per call must not make `vram
        status` take 3 s per GPU and field."""
        slow = self._slow.get(fields)
        if slow is not None:
            took, when = slow
            if time.monotonic() - when < self.slow_retry:
                for f in fields:
                    dev.na[f] = (f"skipped: reading it took {took:.1f}s (the driver is slow; tried again "
                                 f"{self.slow_retry:g}s later)")
                return None
            del self._slow[fields]
        start = time.monotonic()
        try:
            return fn(*args)
        except self.lib.NVMLError as e:
            code = getattr(e, "value", None)
            if code == self._codes["NVML_ERROR_GPU_IS_LOST"]:
                raise
            reason = self._why(e)
            for f in fields:
                dev.na[f] = reason
            return None
        finally:
            took = time.monotonic() - start
            if took > self.slow_call:
                self._slow[fields] = (took, time.monotonic())

    def _read_static(self, dev: Device, handle: Any) -> None:
        static = self._static.get(dev.index)
        if static is None:
            probe = Device(index=dev.index)
            lib = self.lib
            name = self._query(probe, ("name",), lib.nvmlDeviceGetName, handle)
            uuid = self._query(probe, ("uuid",), lib.nvmlDeviceGetUUID, handle)
            pci = self._query(probe, ("pci_bus_id",), lib.nvmlDeviceGetPciInfo, handle)
            static = {
                "name": None if name is None else _text(name),
                "uuid": None if uuid is None else _text(uuid),
                "pci_bus_id": None if pci is None else _text(pci.busId),
                "na": probe.na,
            }
            self._static[dev.index] = static
        dev.name, dev.uuid, dev.pci_bus_id = static["name"], static["uuid"], static["pci_bus_id"]
        dev.na.update(static["na"])

    def _memory(self, dev: Device, handle: Any) -> Any:
        """Memory info, v2 struct (used excludes driver-reserved memory) when the driver has it."""
        lib = self.lib
        if self._mem_v2:
            try:
                return lib.nvmlDeviceGetMemoryInfo(handle, version=lib.nvmlMemory_v2)
            except lib.NVMLError as e:
                if getattr(e, "value", None) not in (self._codes["NVML_ERROR_FUNCTION_NOT_FOUND"],
                                                     self._codes["NVML_ERROR_NOT_SUPPORTED"],
                                                     self._codes["NVML_ERROR_INVALID_ARGUMENT"]):
                    raise
                self._mem_v2 = False  # an older driver: use v1 from now on
        return lib.nvmlDeviceGetMemoryInfo(handle)

    def _read_memory(self, dev: Device, handle: Any) -> None:
        fields = ("memory_total", "memory_used", "memory_free", "memory_reserved")
        mem = self._query(dev, fields, self._memory, dev, handle)
        if mem is None:
            return
        dev.memory_total, dev.memory_used, dev.memory_free = mem.total, mem.used, mem.free
        reserved = getattr(mem, "reserved", None)
        dev.memory_reserved = reserved
        if reserved is None:
            dev.na["memory_reserved"] = N_("not reported by this driver (memory info v1)")

    def _read_mig(self, dev: Device, handle: Any) -> None:
        lib = self.lib
        static = self._static[dev.index]
        if "mig" not in static:
            probe = Device(index=dev.index)
            mode = self._query(probe, ("mig",), lib.nvmlDeviceGetMigMode, handle)
            enabled = None if mode is None else mode[0] == lib.NVML_DEVICE_MIG_ENABLE
            handles = []
            if enabled:
                for slot in range(lib.nvmlDeviceGetMaxMigDeviceCount(handle)):
                    try:
                        handles.append(lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
                    except lib.NVMLError as e:
                        if getattr(e, "value", None) != self._codes["NVML_ERROR_NOT_FOUND"]:
                            raise
            static["mig"] = (enabled, handles, probe.na.get("mig"))
        enabled, handles, reason = static["mig"]
        dev.mig_enabled = enabled
        if enabled is None and reason and reason != NOT_SUPPORTED:  # null alone means no MIG (docs/json.md)
            dev.na["mig_enabled"] = reason
        for h in handles:
            probe = Device(index=dev.index)
            gi = lib.nvmlDeviceGetGpuInstanceId(h)
            ci = self._query(probe, ("ci",), lib.nvmlDeviceGetComputeInstanceId, h)
            uuid = self._query(probe, ("uuid",), lib.nvmlDeviceGetUUID, h)
            name = self._query(probe, ("name",), lib.nvmlDeviceGetName, h)
            mem = self._query(probe, ("memory",), self._memory, probe, h)
            dev.mig_devices.append(MigDevice(
                gi=gi, ci=ci, uuid=None if uuid is None else _text(uuid),
                name=None if name is None else _text(name),
                memory_total=None if mem is None else mem.total,
                memory_used=None if mem is None else mem.used,
                memory_free=None if mem is None else mem.free))

    def _list_processes(self, kind: str, index: int, handle: Any) -> list[ProcessRow]:
        lib = self.lib
        chosen = self._process_fn.get(kind)
        for name in ([chosen] if chosen else _PROCESS_FNS[kind]):
            lister = self._listers.get(name)
            if lister is None:
                fn = getattr(lib, name, None)
                if fn is None:
                    continue
                lister = self._listers[name] = _c_lister(lib, name, fn) or _public_lister(fn)
            try:
                result = lister(index, handle)
            except self._mismatch:
                continue
            except lib.NVMLError as e:
                if getattr(e, "value", None) == self._codes["NVML_ERROR_FUNCTION_NOT_FOUND"]:
                    continue
                raise
            self._process_fn[kind] = name
            return result
        raise lib.NVMLError(self._codes["NVML_ERROR_FUNCTION_NOT_FOUND"])

    def _read_processes(self, dev: Device, handle: Any) -> None:
        """dev.processes: the driver's lists joined (a process in both is one row), each with its
        utilization. A row the driver says exactly the same of as at the last reading is the
        last reading's GpuProcess (machine.py then joins it with the host side only if that
        changed): an idle server's hundreds of rows are not built again every second."""
        rows: dict[tuple[int, int | None], list[Any]] = {}  # (pid, MIG instance) -> [memory, types]
        for kind in ("compute", "graphics"):
            listed = self._query(dev, ("processes",), self._list_processes, kind, dev.index, handle)
            for pid, memory, gi in listed or ():  # memory None: the driver would not say (e.g. no permission)
                gi = None if gi == _UNSET else gi
                row = rows.get((pid, gi))
                if row is None:
                    rows[(pid, gi)] = [memory, _KINDS[kind]]
                elif kind not in row[1]:
                    # One process in both lists holds one allocation, not two: keep the larger figure.
                    row[1] += (kind,)
                    if memory is not None and (row[0] is None or memory > row[0]):
                        row[0] = memory
        samples = self._process_utilization(dev, handle) if rows else None
        na = samples if isinstance(samples, str) else None
        last = {(p.pid, p.mig_gi): p for p in self._last_rows.pop(dev.index, ())}
        procs = []
        for (pid, gi), (memory, types) in rows.items():
            # The driver keeps a sample for each process that did some work: one with none since
            # the last reading did none (NVML's contract; nvitop reads 0 too). N/A: None, and why.
            use = (None, None, None, None) if na is not None else samples.get(pid, _NO_WORK)  # type: ignore[union-attr]
            p = last.get((pid, gi))
            if p is None or p.memory != memory or p.types != types or p.utilization_na != na \
                    or (p.sm_utilization, p.memory_utilization, p.encoder_utilization, p.decoder_utilization) != use \
                    or p.nvml_pid is not None or p.gpu != dev.index or p.gpu_uuid != dev.uuid:
                p = GpuProcess(pid=pid, gpu=dev.index, gpu_uuid=dev.uuid, memory=memory, types=types, mig_gi=gi,
                               sm_utilization=use[0], memory_utilization=use[1], encoder_utilization=use[2],
                               decoder_utilization=use[3], utilization_na=na)
            procs.append(p)
        dev.processes = self._last_rows[dev.index] = procs

    # ------------------------------------------------------------ health, when asked
    def read_health(self, gpus: list[Device], settle: float = 0.0) -> None:
        """Fill `health` on each GPU that is not lost: some twenty calls a GPU, so only `vram status
        --all` makes them. A field the driver does not support or refuses is None with the reason in
        health.na. NVLink traffic is a counter: a first reading waits `settle` seconds and reads
        the counters again for a rate (repeated readings use the previous one)."""
        self._read_all_health(gpus)
        first = [d for d in gpus if d.health is not None and d.health.na.get("nvlink_tx") == NEEDS_TWO]
        if first and settle > 0:
            time.sleep(settle)
            for dev in first:
                assert dev.health is not None
                probe = Device(index=dev.index)
                self._read_nvlink(dev.index, self._handles[dev.index], dev.health, probe)
                dev.health.na = {k: v for k, v in dev.health.na.items() if not k.startswith("nvlink_")} | probe.na

    def _read_all_health(self, gpus: list[Device]) -> None:
        for dev in gpus:
            handle = self._handles.get(dev.index)
            if dev.lost or handle is None:
                continue
            try:
                dev.health = self._read_health(dev.index, handle)
            except self.lib.NVMLError as e:  # lost between the snapshot and now
                if getattr(e, "value", None) != self._codes["NVML_ERROR_GPU_IS_LOST"]:
                    raise
                dev.lost, dev.error = True, GPU_LOST

    def _read_health(self, index: int, handle: Any) -> Health:
        from .scenario import THROTTLE_REASONS  # the words of the bits (a light module, loaded when asked)

        lib, h, probe = self.lib, Health(), Device(index=index)

        def ask(name: str, fn: str, *args: Any) -> Any:
            return self._query(probe, (name,), getattr(lib, fn), handle, *args)

        mode = ask("ecc_enabled", "nvmlDeviceGetEccMode")
        h.ecc_enabled = None if mode is None else bool(mode[0])
        for kind, error_type in (("corrected", lib.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                                 ("uncorrected", lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            for when, counter in (("volatile", lib.NVML_VOLATILE_ECC), ("aggregate", lib.NVML_AGGREGATE_ECC)):
                name = f"ecc_{kind}_{when}"
                setattr(h, name, ask(name, "nvmlDeviceGetTotalEccErrors", error_type, counter))
        single = ask("retired_pages_single_bit", "nvmlDeviceGetRetiredPages",
                     lib.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        double = ask("retired_pages_double_bit", "nvmlDeviceGetRetiredPages",
                     lib.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        h.retired_pages_single_bit = None if single is None else len(single)
        h.retired_pages_double_bit = None if double is None else len(double)
        pending = ask("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
        h.retired_pages_pending = None if pending is None else bool(pending)
        rows = self._query(probe, ("remapped_rows_correctable", "remapped_rows_uncorrectable", "remap_pending",
                                   "remap_failed"), lib.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            h.remapped_rows_correctable, h.remapped_rows_uncorrectable = rows[0], rows[1]
            h.remap_pending, h.remap_failed = bool(rows[2]), bool(rows[3])
        reasons_fn = ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(lib, "nvmlDeviceGetCurrentClocksEventReasons")
                      else "nvmlDeviceGetCurrentClocksThrottleReasons")  # the name before driver 535
        mask = ask("throttle_reasons", reasons_fn)
        h.throttle_reasons = None if mask is None else tuple(w for w, bit in THROTTLE_REASONS.items() if mask & bit)
        h.sm_clock = ask("sm_clock", "nvmlDeviceGetClockInfo", lib.NVML_CLOCK_SM)
        h.sm_clock_max = ask("sm_clock_max", "nvmlDeviceGetMaxClockInfo", lib.NVML_CLOCK_SM)
        h.memory_clock = ask("memory_clock", "nvmlDeviceGetClockInfo", lib.NVML_CLOCK_MEM)
        h.memory_clock_max = ask("memory_clock_max", "nvmlDeviceGetMaxClockInfo", lib.NVML_CLOCK_MEM)
        h.performance_state = ask("performance_state", "nvmlDeviceGetPerformanceState")
        h.pcie_gen = ask("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration")
        h.pcie_gen_max = ask("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration")
        h.pcie_width = ask("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth")
        h.pcie_width_max = ask("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")
        tx = ask("pcie_tx", "nvmlDeviceGetPcieThroughput", lib.NVML_PCIE_UTIL_TX_BYTES)
        rx = ask("pcie_rx", "nvmlDeviceGetPcieThroughput", lib.NVML_PCIE_UTIL_RX_BYTES)
        h.pcie_tx = None if tx is None else tx * 1024  # NVML counts KB/s
        h.pcie_rx = None if rx is None else rx * 1024
        persistence = ask("persistence_mode", "nvmlDeviceGetPersistenceMode")
        h.persistence_mode = None if persistence is None else bool(persistence)
        compute = ask("compute_mode", "nvmlDeviceGetComputeMode")
        h.compute_mode = None if compute is None else _COMPUTE_MODES.get(compute, f"mode {compute}")
        h.graphics_clock = ask("graphics_clock", "nvmlDeviceGetClockInfo", lib.NVML_CLOCK_GRAPHICS)
        h.graphics_clock_max = ask("graphics_clock_max", "nvmlDeviceGetMaxClockInfo", lib.NVML_CLOCK_GRAPHICS)
        h.energy_total = ask("energy_total", "nvmlDeviceGetTotalEnergyConsumption")  # mJ
        h.pcie_replays = ask("pcie_replays", "nvmlDeviceGetPcieReplayCounter")
        h.memory_temperature = self._field_value(probe, "memory_temperature", handle, lib.NVML_FI_DEV_MEMORY_TEMP)
        self._read_nvlink(index, handle, h, probe)
        h.na = probe.na
        return h

    def _field_value(self, probe: Device, name: str, handle: Any, field_id: int) -> int | None:
        """One of nvmlDeviceGetFieldValues' fields as a number (None with the reason in probe.na)."""
        values = self._query(probe, (name,), self.lib.nvmlDeviceGetFieldValues, handle, [field_id])
        if values is None:
            return None
        v = values[0]
        if v.nvmlReturn != 0:
            words = {self._codes["NVML_ERROR_NOT_SUPPORTED"]: NOT_SUPPORTED,
                     self._codes["NVML_ERROR_NO_PERMISSION"]: NO_PERMISSION}
            probe.na[name] = words.get(v.nvmlReturn, f"NVML error {v.nvmlReturn}")
            return None
        member = _VALUE_MEMBERS.get(v.valueType, "ullVal")
        return int(getattr(v.value, member))

    # ------------------------------------------------------------ XID errors, for vram serve
    def watch_xids(self) -> XidWatcher:
        """Start (once) a background thread that waits on NVML's events for XID errors on every
        GPU and counts them (vram serve's vram_gpu_xid_* series)."""
        if self._xids is None:
            self._xids = XidWatcher(self)
            self._xids.start()
        return self._xids

    def _read_nvlink(self, index: int, handle: Any, h: Health, probe: Device) -> None:
        """Links up, and their data rate since the previous reading (NVML keeps counters, not rates)."""
        lib = self.lib
        up: list[int] = []
        links = 0
        for link in range(getattr(lib, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                state = lib.nvmlDeviceGetNvLinkState(handle, link)
            except lib.NVMLError as e:
                code = getattr(e, "value", None)
                if code in (self._codes["NVML_ERROR_NOT_SUPPORTED"], self._codes["NVML_ERROR_INVALID_ARGUMENT"]):
                    break  # past the GPU's last link (on a GPU without NVLink: link 0)
                if code == self._codes["NVML_ERROR_GPU_IS_LOST"]:
                    raise
                reason = self._why(e)
                for name in ("nvlink_links", "nvlink_links_up", "nvlink_tx", "nvlink_rx"):
                    probe.na[name] = reason
                return
            links += 1
            if state:
                up.append(link)
        h.nvlink_links, h.nvlink_links_up = links, len(up)
        if not up:
            for name in ("nvlink_tx", "nvlink_rx"):
                probe.na[name] = N_("no NVLink link is up") if links else N_("no NVLink")
            return
        directions = (lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        fields = [(f, link) for f in directions for link in up]
        values = self._query(probe, ("nvlink_tx", "nvlink_rx"), lib.nvmlDeviceGetFieldValues, handle, fields)
        if values is None:
            return
        if any(v.nvmlReturn != 0 for v in values):
            for name in ("nvlink_tx", "nvlink_rx"):
                probe.na[name] = NOT_SUPPORTED
            return
        half = len(up)
        tx_kib = sum(v.value.ullVal for v in values[:half])
        rx_kib = sum(v.value.ullVal for v in values[half:])
        stamp = max(v.timestamp for v in values) / 1e6
        before = self._nvlink_counters.get(index)
        self._nvlink_counters[index] = (stamp, tx_kib, rx_kib)
        if before is None or stamp <= before[0]:
            why = NEEDS_TWO if before is None else N_("no time passed since the previous reading")
            probe.na["nvlink_tx"] = probe.na["nvlink_rx"] = why
            return
        seconds = stamp - before[0]
        h.nvlink_tx = round(max(0, tx_kib - before[1]) * 1024 / seconds)
        h.nvlink_rx = round(max(0, rx_kib - before[2]) * 1024 / seconds)

    # ------------------------------------------------------------ topology, when asked
    def read_topology(self) -> Topology:
        """How the GPUs are connected (`nvidia-smi topo -m`): NVLink peers through each active
        link's remote PCI id, else the closest common PCIe ancestor; each GPU's NUMA node. Read
        once (cabling does not change while the driver runs)."""
        if self._topology is not None:
            return self._topology
        lib, topo = self.lib, Topology()
        handles = {}
        for i in range(self.count):
            try:
                handles[i] = self._handles.get(i) or lib.nvmlDeviceGetHandleByIndex(i)
            except lib.NVMLError:
                continue  # a lost GPU: not a candidate anyway
        by_bus = {self._static[i]["pci_bus_id"].upper()[-12:]: i for i in handles
                  if self._static.get(i, {}).get("pci_bus_id")}
        nvlinks: dict[tuple[int, int], int] = {}
        for i, handle in handles.items():
            for peer in self._nvlink_peers(handle, topo):
                j = by_bus.get(peer.upper()[-12:])
                if j is not None and j != i:
                    nvlinks[(i, j)] = nvlinks.get((i, j), 0) + 1
            try:
                topo.numa_node[i] = lib.nvmlDeviceGetNumaNodeId(handle)
            except (lib.NVMLError, AttributeError) as e:  # AttributeError: a pynvml before 12.535
                topo.numa_node[i] = None
                topo.na.setdefault("numa_node", self._why(e))
        words = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
        for i in handles:
            for j in handles:
                if j <= i:
                    continue
                count = max(nvlinks.get((i, j), 0), nvlinks.get((j, i), 0))
                if count:
                    topo.links[(i, j)] = f"NV{count}"
                    continue
                try:
                    level = lib.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                except lib.NVMLError as e:
                    topo.links[(i, j)] = "?"
                    topo.na.setdefault("pcie", self._why(e))
                    continue
                topo.links[(i, j)] = words.get(level, "?")
        self._topology = topo
        return topo

    def _nvlink_peers(self, handle: Any, topo: Topology) -> list[str]:
        """The PCI bus ids at the other end of the GPU's active NVLink links."""
        lib, peers = self.lib, []
        for link in range(getattr(lib, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if not lib.nvmlDeviceGetNvLinkState(handle, link):
                    continue
                peers.append(_text(lib.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
            except lib.NVMLError as e:
                if getattr(e, "value", None) not in (self._codes["NVML_ERROR_NOT_SUPPORTED"],
                                                     self._codes["NVML_ERROR_INVALID_ARGUMENT"]):
                    topo.na.setdefault("nvlink", self._why(e))
                break  # past the last link, or a GPU without NVLink
        return peers

    def _why(self, e: Exception) -> str:
        """Why a call gave no value, in the words every N/A reason uses."""
        code = getattr(e, "value", None)
        if code == self._codes["NVML_ERROR_NOT_SUPPORTED"]:
            return NOT_SUPPORTED
        if code == self._codes["NVML_ERROR_NO_PERMISSION"]:
            return NO_PERMISSION
        return f"NVML error: {e}" if code is not None else OLD_PYNVML  # fmt.reason() translates the prefix

    def _process_utilization(self, dev: Device, handle: Any) -> dict[int, Utilization] | str:
        """pid -> its utilization since the last reading (_process_samples), or why there is none."""
        if dev.mig_enabled:
            return N_("MIG: the driver keeps no per-process samples")
        reason = self._no_process_util.get(dev.index)
        if reason is None:
            samples = _process_samples(self, dev, handle)
            if not isinstance(samples, str):
                return samples
            reason = samples
        dev.na["process_utilization"] = reason
        return reason


# nvmlDeviceGetFieldValues: the member of the value union each valueType uses
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}
XID_WAIT_MS = 500  # how long one nvmlEventSetWait blocks before the waiter checks whether to stop


class XidWatcher:
    """XID errors as NVML's event API reports them: one event set with every GPU registered for
    nvmlEventTypeXidCriticalError, waited on by a daemon thread. Per GPU: how many events, per
    XID number, and the last one (its number and when it came). A GPU whose driver refuses the
    registration has `refused[index]` (why) and no counts: its XID series are N/A, never 0."""

    def __init__(self, nvml: Nvml):
        self.nvml = nvml
        self.counts: dict[int, dict[int, int]] = {}  # GPU -> XID -> events since the watch started
        self.last: dict[int, tuple[int, float]] = {}  # GPU -> (XID, unix time it came)
        self.refused: dict[int, str] = {}  # GPU -> why it is not watched
        self.error: str | None = None  # why the waiter stopped, when it failed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any = None

    def start(self) -> None:
        lib = self.nvml.lib
        try:
            self._set = lib.nvmlEventSetCreate()
        except (lib.NVMLError, AttributeError) as e:
            self.error = self.nvml._why(e) if isinstance(e, lib.NVMLError) else OLD_PYNVML
            for i in range(self.nvml.count):
                self.refused[i] = self.error
            return
        for i in range(self.nvml.count):
            try:
                handle = self.nvml._handles.get(i) or lib.nvmlDeviceGetHandleByIndex(i)
                lib.nvmlDeviceRegisterEvents(handle, lib.nvmlEventTypeXidCriticalError, self._set)
            except lib.NVMLError as e:
                self.refused[i] = self.nvml._why(e)
                continue
            self.counts[i] = {}
        self._thread = threading.Thread(target=self._wait, name="vram-xid-events", daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        lib = self.nvml.lib
        timeout = self.nvml._codes.get("NVML_ERROR_TIMEOUT", getattr(lib, "NVML_ERROR_TIMEOUT", 10))
        while not self._stop.is_set():
            try:
                event = lib.nvmlEventSetWait(self._set, XID_WAIT_MS)
            except lib.NVMLError as e:
                if getattr(e, "value", None) == timeout:
                    continue
                self.error = f"NVML error: {e}"
                return
            try:
                index = int(lib.nvmlDeviceGetIndex(event.device))
            except lib.NVMLError:
                continue
            xid = int(event.eventData)
            with self._lock:
                per = self.counts.setdefault(index, {})
                per[xid] = per.get(xid, 0) + 1
                self.last[index] = (xid, time.time())

    def read(self) -> tuple[dict[int, dict[int, int]], dict[int, tuple[int, float]]]:
        """(GPU -> XID -> count, GPU -> (last XID, when)), copied: for the GPUs watched."""
        with self._lock:
            return {i: dict(c) for i, c in self.counts.items()}, dict(self.last)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * XID_WAIT_MS / 1000)
        if self._set is not None and (self._thread is None or not self._thread.is_alive()):
            try:
                self.nvml.lib.nvmlEventSetFree(self._set)
            except self.nvml.lib.NVMLError:
                pass
            self._set = None


Utilization = tuple[int, int, int, int]  # SM, memory, encoder, decoder %


def _process_samples(nvml: Nvml, dev: Device, handle: Any) -> dict[int, Utilization] | str:
    """pid -> mean (SM, memory, encoder, decoder) % over the samples since the last read (the last
    5 s on the first read); {} when no process did any work; why not, when this GPU's driver keeps
    no samples or refuses them (remembered: the call is not made again)."""
    lib = nvml.lib
    since = nvml._sample_since.get(dev.index, int(time.time() * 1e6) - 5_000_000)
    try:
        samples = lib.nvmlDeviceGetProcessUtilization(handle, since)
    except lib.NVMLError as e:
        code = getattr(e, "value", None)
        if code == nvml._codes["NVML_ERROR_GPU_IS_LOST"]:
            raise
        if code == nvml._codes["NVML_ERROR_NOT_FOUND"]:
            return {}  # no samples: nothing ran kernels in the window
        reason = nvml._no_process_util[dev.index] = nvml._why(e)
        return reason
    except AttributeError:  # a pynvml too old to have the call
        reason = nvml._no_process_util[dev.index] = OLD_PYNVML
        return reason
    per_pid: dict[int, list[Utilization]] = {}
    latest = None
    # Each field read once, and past pynvml's own __getattribute__ (a Python call per read that only
    # turns bytes into str; these are integers): ctypes' field descriptors directly, ~3x faster.
    get = object.__getattribute__
    for sample in samples:
        pid, stamp = get(sample, "pid"), get(sample, "timeStamp")
        row = (get(sample, "smUtil"), get(sample, "memUtil"), get(sample, "encUtil"), get(sample, "decUtil"))
        kept = per_pid.get(pid)
        if kept is None:
            per_pid[pid] = [row]
        else:
            kept.append(row)
        if latest is None or stamp > latest:
            latest = stamp
    if latest is not None:
        nvml._sample_since[dev.index] = max(nvml._sample_since.get(dev.index, 0), latest)
    # Mostly one sample a process (read every second or two): itself, without averaging.
    return {pid: v[0] if len(v) == 1 else _mean(v) for pid, v in per_pid.items()}


def _mean(samples: list[Utilization]) -> Utilization:
    n = len(samples)
    sm, mem, enc, dec = (round(sum(column) / n) for column in zip(*samples))
    return sm, mem, enc, dec


def open_real() -> Nvml:
    """NVML through nvidia-ml-py. Raises NvmlUnavailable with one clear line."""
    try:
        import pynvml
    except ImportError:
        from ..install_hint import install_hint

        raise NvmlUnavailable(_("nvidia-ml-py (pynvml) is not installed: {hint}").format(
            hint=install_hint("nvml"))) from None
    return Nvml(pynvml).open()
