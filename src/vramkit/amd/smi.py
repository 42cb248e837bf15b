"""AMD GPUs through amdsmi (ROCm's own library, or the fake one on a simulated machine).

`AmdSmi(module)` reads every GPU, its partitions and the processes holding its memory into
gpu_state Devices. A value a call refuses is None with the reason in Device.na; a GPU whose
identity calls answer NOT_FOUND is lost. A partitioned GPU (MI300's DPX/QPX/CPX: each partition
a processor of its own, its BDF's function its partition id) is one Device with its partitions
as instances. A process's engine use is a counter (ns): its % needs two readings.
"""

from __future__ import annotations

import re

from ..errors import VramkitError
from ..gpu_state import Device, GpuProcess, MigDevice
from ..i18n import N_
from . import compat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MiB = 1 << 20
FIRST_READING = N_("a process's engine time is a counter: its share needs a second reading")


class AmdSmiUnavailable(VramkitError):
    """amdsmi cannot be used here (no library, no driver): one line saying why."""


def load_module() -> Any:
    """The real amdsmi package, or AmdSmiUnavailable. Importing it without libamd_smi.so prints
    two lines on stdout and raises KeyError (amdsmi_wrapper indexes the library it did not load),
    so its stdout is kept from ours and every exception of the import means 'not here'."""
    import contextlib
    import io

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import amdsmi  # type: ignore[import-not-found,unused-ignore]
    except Exception as e:  # KeyError without the library, ImportError without the package, OSError
        raise AmdSmiUnavailable(f"amdsmi cannot be loaded ({type(e).__name__}: {e})") from None
    return amdsmi


def _gen(mts: Any) -> int | None:
    """PCIe generation of a link speed in MT/s (2500: gen 1 ... 64000: gen 6); None unknown."""
    gens = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}
    return gens.get(mts) if isinstance(mts, int) else None


# amdsmi_get_gpu_device_uuid's form (amd_smi_uuid.cc, amdsmi_uuid_gen): an RFC 4122 version-1 layout
# around the unique id (asic_serial): its byte 7, the function 0xff and the PCI device id, then
# 0000-1000-80, its byte 6, its bytes 5-4 and 3-0. "4bff74a1-0000-1000-80a1-c0de7e570000" is unique
# id 4ba1c0de7e570000, which ROCm calls GPU-4ba1c0de7e570000.
_AMDSMI_UUID = re.compile(r"([0-9a-f]{2})[0-9a-f]{6}-0000-1000-80([0-9a-f]{2})-([0-9a-f]{12})")


def rocm_uuid(amdsmi_uuid: str) -> str:
    """ROCm's name for a GPU (GPU- and the unique id's 16 hex digits: what ROCR_VISIBLE_DEVICES,
    HIP_VISIBLE_DEVICES and HSA take) from amdsmi's UUID; a UUID of another form is kept as given."""
    m = _AMDSMI_UUID.fullmatch(amdsmi_uuid.strip().lower())
    return f"GPU-{m.group(1)}{m.group(2)}{m.group(3)}" if m else amdsmi_uuid


def _code(e: BaseException) -> int | None:
    code = getattr(e, "err_code", None)
    return code if isinstance(code, int) else None


def reason(e: BaseException) -> str:
    code = _code(e)
    if code == compat.AMDSMI_STATUS_NOT_SUPPORTED:
        return N_("not supported by this GPU or driver (amdsmi: NOT_SUPPORTED)")
    if code == compat.AMDSMI_STATUS_NO_PERM:
        return N_("no permission (amdsmi: NO_PERM): run as root or join the render group")
    info = getattr(e, "err_info", None) or str(e).replace("\n", " ").replace("\t", "")
    return f"amdsmi: {info}"


class AmdSmi:
    """An amdsmi-like module, opened; `read(t, first_index)` every GPU with its processes."""

    def __init__(self, smi: Any):
        self.smi = smi
        self.driver_version: str | None = None
        self._busy: dict[tuple[int, int, int | None], tuple[int, float]] = {}  # (pid, gpu, part) -> (ns, t)
        self.render_minors: dict[int, int] = {}  # /dev/dri/renderD<minor> -> GPU index
        self._handles: dict[int, Any] = {}  # GPU index -> its (first partition's) handle, from the last reading

    def open(self) -> AmdSmi:
        try:
            self.smi.amdsmi_init(self.smi.AmdSmiInitFlags.INIT_AMD_GPUS)
        except self.smi.AmdSmiException as e:
            raise AmdSmiUnavailable(f"amdsmi_init failed: {reason(e)}") from None
        handles = self.smi.amdsmi_get_processor_handles()
        for h in handles[:1]:
            try:
                self.driver_version = self.smi.amdsmi_get_gpu_driver_info(h)["driver_version"]
            except self.smi.AmdSmiException:
                pass
        return self

    def close(self) -> None:
        try:
            self.smi.amdsmi_shut_down()
        except self.smi.AmdSmiException:
            pass

    def _call(self, na: dict[str, str], key: str, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.smi, fn)(*args)
        except self.smi.AmdSmiException as e:
            na.setdefault(key, reason(e))
            return None

    def _groups(self) -> list[list[tuple[Any, str | None, Exception | None]]]:
        """The handles grouped into physical GPUs (a partition's BDF differs in its function)."""
        groups: dict[str, list[tuple[Any, str | None, Exception | None]]] = {}
        for i, h in enumerate(self.smi.amdsmi_get_processor_handles()):
            try:
                bdf = self.smi.amdsmi_get_gpu_device_bdf(h)
                groups.setdefault(bdf.rsplit(".", 1)[0], []).append((h, bdf, None))
            except self.smi.AmdSmiException as e:
                groups[f"?{i}"] = [(h, None, e)]
        return list(groups.values())

    def read(self, t: float, first_index: int = 0) -> list[Device]:
        out = []
        seen: set[tuple[int, int, int | None]] = set()
        for i, group in enumerate(self._groups()):
            index = first_index + i
            h, bdf, err = group[0]
            if err is not None:
                code = _code(err)
                lost = code in (compat.AMDSMI_STATUS_NOT_FOUND, compat.AMDSMI_STATUS_DRM_ERROR)
                out.append(Device(index=index, vendor="amd", lost=lost, error=reason(err)))
                continue
            dev = Device(index=index, vendor="amd", pci_bus_id=bdf)
            self._handles[index] = h
            na = dev.na
            # a partition's own id is HIP's name for it; the GPU's is the one its partitions share
            if len(group) == 1:
                dev.uuid = self._uuid(h, na)
            else:  # amdsmi's UUID of a partition is its GPU's (made with function 0xff)
                physical = self._call(na, "uuid", "amdsmi_get_gpu_device_uuid", h)
                dev.uuid = rocm_uuid(str(physical)) if physical else None
            asic = self._call(na, "name", "amdsmi_get_gpu_asic_info", h)
            dev.name = asic["market_name"] if asic and asic.get("market_name") != "N/A" else None
            mode = self._call({}, "partition", "amdsmi_get_gpu_compute_partition", h)
            parts = [(self._call({}, "partition", "amdsmi_get_gpu_kfd_info", g[0]) or {}).get("current_partition_id", j)
                     for j, g in enumerate(group)]
            if hasattr(self.smi, "amdsmi_get_gpu_enumeration_info"):  # ROCm 6.4+: each partition's render node
                for g in group:
                    info = self._call({}, "enumeration", "amdsmi_get_gpu_enumeration_info", g[0]) or {}
                    minor = info.get("drm_render")
                    if isinstance(minor, int):
                        self.render_minors[minor] = index
            dev.mig_enabled = len(group) > 1
            total: int | None = 0
            used = 0
            for (ph, _, _), part in zip(group, parts):
                vram = self._call(na, "memory", "amdsmi_get_gpu_vram_usage", ph)
                if vram is None or total is None:
                    total = None
                    continue
                total += vram["vram_total"] * MiB
                used += vram["vram_used"] * MiB
                if dev.mig_enabled:
                    dev.mig_devices.append(MigDevice(
                        gi=part, ci=None, uuid=self._uuid(ph, {}), name=f"{dev.name or 'AMD GPU'} {mode or ''}".strip(),
                        memory_total=vram["vram_total"] * MiB, memory_used=vram["vram_used"] * MiB,
                        memory_free=(vram["vram_total"] - vram["vram_used"]) * MiB))
            if total is not None:
                dev.memory_total, dev.memory_used, dev.memory_free = total, used, total - used
            else:
                dev.mig_devices = []
            na["memory_reserved"] = N_("amdsmi does not report memory the driver reserves")
            self._activity(dev, h)
            dev.temperature = self._temperature(h, na)
            power = self._call(na, "power_draw", "amdsmi_get_power_info", h)
            if power is not None:
                watts = power.get("socket_power")
                watts = power.get("current_socket_power") if watts in (None, "N/A", 0) else watts
                if isinstance(watts, int):
                    dev.power_draw = float(watts)
                else:
                    na["power_draw"] = N_("amdsmi reports no socket power for this GPU")
            cap = self._call(na, "power_limit", "amdsmi_get_power_cap_info", h)
            if cap is not None:
                dev.power_limit = cap["power_cap"] / 1e6
            self._fan(dev, h)
            for (ph, _, _), part in zip(group, parts):
                self._processes(dev, ph, part if dev.mig_enabled else None, t, seen)
            out.append(dev)
        self._busy = {k: v for k, v in self._busy.items() if k in seen}
        return out

    def read_health(self, gpus: list[Device]) -> None:
        """ECC error counts (since the driver loaded) and the PCIe link, where amdsmi gives them."""
        for g in gpus:
            h, health = self._handles.get(g.index), g.health
            if h is None or health is None:
                continue
            na = health.na
            blocks = self._call(na, "ecc", "amdsmi_get_gpu_ecc_enabled", h)
            if isinstance(blocks, int):
                health.ecc_enabled = blocks != 0
                na.pop("ecc_enabled", None)
            ecc = self._call(na, "ecc", "amdsmi_get_gpu_total_ecc_count", h) if blocks else None
            if ecc is not None:
                health.ecc_corrected_volatile, health.ecc_uncorrected_volatile = (
                    ecc["correctable_count"], ecc["uncorrectable_count"])
                for key in ("ecc_corrected_volatile", "ecc_uncorrected_volatile"):
                    na.pop(key, None)
                for key in ("ecc_corrected_aggregate", "ecc_uncorrected_aggregate"):
                    na[key] = N_("amdsmi counts errors since the driver loaded, not over the GPU's life")
            else:
                for key in ("ecc_corrected_volatile", "ecc_uncorrected_volatile"):
                    na[key] = na.get("ecc", "ECC is off on this GPU")
            na.pop("ecc", None)
            pcie = self._call(na, "pcie", "amdsmi_get_pcie_info", h)
            if pcie is not None:
                static, metric = pcie["pcie_static"], pcie["pcie_metric"]
                read = {"pcie_gen": _gen(metric.get("pcie_speed")), "pcie_width": metric.get("pcie_width"),
                        "pcie_gen_max": _gen(static.get("max_pcie_speed")),
                        "pcie_width_max": static.get("max_pcie_width")}
                for key, value in read.items():
                    if isinstance(value, int):
                        setattr(health, key, value)
                        na.pop(key, None)
            elif "pcie" in na:
                for key in ("pcie_gen", "pcie_width", "pcie_gen_max", "pcie_width_max"):
                    na[key] = na["pcie"]
            na.pop("pcie", None)

    def _uuid(self, h: Any, na: dict[str, str]) -> str | None:
        """ROCm's name for the GPU (GPU-<unique id>, as HIP and ROCR_VISIBLE_DEVICES take it) where
        amdsmi gives it (enumeration info, ROCm 6.4+), else read back out of amdsmi's own UUID."""
        if hasattr(self.smi, "amdsmi_get_gpu_enumeration_info"):
            info = self._call({}, "uuid", "amdsmi_get_gpu_enumeration_info", h)
            if info and str(info.get("hip_uuid", "")).startswith("GPU-"):
                return str(info["hip_uuid"])
        value = self._call(na, "uuid", "amdsmi_get_gpu_device_uuid", h)
        return rocm_uuid(str(value)) if value else None

    def _activity(self, dev: Device, h: Any) -> None:
        act = self._call(dev.na, "utilization", "amdsmi_get_gpu_activity", h)
        if act is None:
            dev.na.setdefault("memory_utilization", dev.na["utilization"])
            return
        for key, field in (("gfx_activity", "utilization"), ("umc_activity", "memory_utilization")):
            if isinstance(act.get(key), int):
                setattr(dev, field, act[key])
            else:
                dev.na[field] = f"amdsmi reports no {key} for this GPU"

    def _temperature(self, h: Any, na: dict[str, str]) -> int | None:
        """The edge sensor, else the hotspot (MI200 and MI300 have no edge sensor)."""
        types, metric = self.smi.AmdSmiTemperatureType, self.smi.AmdSmiTemperatureMetric.CURRENT
        tried: dict[str, str] = {}
        for sensor in (types.EDGE, types.HOTSPOT):
            tried = {}
            value = self._call(tried, "temperature", "amdsmi_get_temp_metric", h, sensor, metric)
            if value is not None:
                return int(value)
        na["temperature"] = tried.get("temperature", "no temperature sensor")
        return None

    def _fan(self, dev: Device, h: Any) -> None:
        speed = self._call(dev.na, "fan", "amdsmi_get_gpu_fan_speed", h, 0)
        top = self._call(dev.na, "fan", "amdsmi_get_gpu_fan_speed_max", h, 0) if speed is not None else None
        if speed is not None and top:
            dev.fan = round(100 * speed / top)
        elif speed is not None:
            dev.na["fan"] = N_("amdsmi reports no maximum fan speed")

    def _processes(self, dev: Device, h: Any, part: int | None, t: float,
                   seen: set[tuple[int, int, int | None]]) -> None:
        procs = self._call(dev.na, "processes", "amdsmi_get_gpu_process_list", h)
        if procs is None:
            return
        for p in procs:
            key = (int(p["pid"]), dev.index, part)
            seen.add(key)
            ns = p.get("engine_usage", {}).get("gfx")
            util: int | None = None
            why: str | None = FIRST_READING
            before = self._busy.get(key)
            if isinstance(ns, int):
                self._busy[key] = (ns, t)
                if before is not None and t > before[1]:
                    util, why = max(0, min(100, round((ns - before[0]) / 1e9 / (t - before[1]) * 100))), None
            else:
                why = "amdsmi reports no engine time for this process"
            mem = p.get("memory_usage", {}).get("vram_mem", p.get("mem"))
            dev.processes.append(GpuProcess(
                pid=key[0], gpu=dev.index, gpu_uuid=dev.uuid, memory=mem if isinstance(mem, int) else None,
                mig_gi=part, sm_utilization=util, utilization_na=why))
