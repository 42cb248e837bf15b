"""A fake `amdsmi` module on a simulated AMD machine: the function names, dict shapes, units,
exceptions and status codes of ROCm's amdsmi Python package (7.0), so that the amdsmi reader
(smi.py) runs on it unchanged.

As the real library: amdsmi_init() before anything else (else AMDSMI_STATUS_NOT_INIT); one
processor handle per GPU, or per partition of a partitioned GPU (each partition is its own
processor, its BDF's function number its partition id); VRAM in MB (MiB) from
amdsmi_get_gpu_vram_usage, bytes per process; power in W, the power cap in microwatts;
engine time in ns; "N/A" in a dict for a value the GPU lacks, AmdSmiLibraryException for a call
it refuses (NOT_SUPPORTED, NO_PERM) and for a lost GPU (NOT_FOUND).
"""

from __future__ import annotations

from . import compat
from .compat import (
    AmdSmiException,
    AmdSmiInitFlags,
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiTemperatureMetric,
    AmdSmiTemperatureType,
)
from .sim import SimulatedAmd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MiB = 1 << 20
DEVICE_ID = 0x74A1  # MI300X's PCI device id, in every GPU's amdsmi UUID
_PCIE_COUNTERS = ("pcie_replay_count", "pcie_l0_to_recovery_count", "pcie_replay_roll_over_count",
                  "pcie_nak_sent_count", "pcie_nak_received_count", "pcie_lc_perf_other_end_recovery_count")


class amdsmi_processor_handle:  # noqa: N801 - the real package's ctypes class has this name
    """A processor handle: a GPU, or one partition of it."""

    def __init__(self, index: int, part: int | None):
        self.index, self.part = index, part

    def __repr__(self) -> str:
        return f"<amdsmi_processor_handle gpu {self.index}" + (f" partition {self.part}>" if self.part is not None
                                                               else ">")


class FakeAmdSmi:
    """Module-like: `smi.amdsmi_init()`, `smi.AmdSmiLibraryException`, ..."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiParameterException = AmdSmiParameterException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    amdsmi_wrapper = compat  # the status codes: amdsmi.amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED

    def __init__(self, sim: SimulatedAmd):
        self.sim = sim
        self._initialized = 0

    # ------------------------------------------------------------ plumbing
    def _check(self, handle: Any, what: str | None = None) -> dict[str, Any]:
        if not isinstance(handle, amdsmi_processor_handle):
            raise AmdSmiParameterException(handle, amdsmi_processor_handle)
        if not self._initialized:
            raise AmdSmiLibraryException(compat.AMDSMI_STATUS_NOT_INIT)
        g = self.sim.gpus[handle.index]
        if g["lost"]:
            raise AmdSmiLibraryException(compat.AMDSMI_STATUS_NOT_FOUND)
        if what in g["unsupported"]:
            raise AmdSmiLibraryException(compat.AMDSMI_STATUS_NOT_SUPPORTED)
        if what in g["no_permission"]:
            raise AmdSmiLibraryException(compat.AMDSMI_STATUS_NO_PERM)
        return g

    def _unit(self, handle: amdsmi_processor_handle) -> tuple[int, int | None]:
        return handle.index, handle.part

    # ------------------------------------------------------------ the library
    def amdsmi_init(self, flag: Any = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag, AmdSmiInitFlags)
        self._initialized += 1

    def amdsmi_shut_down(self) -> None:
        if not self._initialized:
            raise AmdSmiLibraryException(compat.AMDSMI_STATUS_NOT_INIT)
        self._initialized -= 1

    def amdsmi_get_processor_handles(self) -> list[amdsmi_processor_handle]:
        if not self._initialized:
            raise AmdSmiLibraryException(compat.AMDSMI_STATUS_NOT_INIT)
        return [amdsmi_processor_handle(*unit) for g in self.sim.gpus for unit in self.sim.units(g["index"])]

    def amdsmi_get_gpu_device_bdf(self, handle: Any) -> str:
        g = self._check(handle, "pci_bus_id")
        domain, bus, rest = g["pci_bus_id"].split(":")
        dev = rest.split(".")[0]
        return f"{int(domain, 16):04x}:{bus.lower()}:{dev.lower()}.{handle.part or 0}"

    def amdsmi_get_gpu_device_uuid(self, handle: Any) -> str:
        """The physical GPU's id, the same for each of its partitions, as amdsmi_uuid_gen makes it
        from the unique id (asic_serial), the PCI device id and function 0xff:
        GPU-4ba1c0de7e570000 is "4bff74a1-0000-1000-80a1-c0de7e570000"."""
        serial = int(self._unique_id(self._check(handle, "uuid")), 16)
        return (f"{serial >> 56:02x}ff{DEVICE_ID:04x}-0000-1000-80{serial >> 48 & 0xFF:02x}-"
                f"{serial >> 32 & 0xFFFF:04x}{serial & 0xFFFFFFFF:08x}")

    @staticmethod
    def _unique_id(g: dict[str, Any]) -> str:
        """The GPU's unique id (16 hex digits, as /sys/class/drm/cardN/device/unique_id), from the
        scenario's ROCm-style uuid (GPU-<unique id>)."""
        hexid = str(g["uuid"]).removeprefix("GPU-").lower()
        return hexid if len(hexid) == 16 and all(c in "0123456789abcdef" for c in hexid) else "0" * 16

    def _hip_uuid(self, handle: amdsmi_processor_handle) -> str:
        g = self._check(handle, "uuid")
        if handle.part is None:
            return str(g["uuid"])
        return str(next(m["uuid"] for m in g["mig"] if m["gi"] == handle.part))

    def amdsmi_get_gpu_enumeration_info(self, handle: Any) -> dict[str, Any]:
        self._check(handle)
        handles = self.amdsmi_get_processor_handles()
        hip_id = next(i for i, h in enumerate(handles) if (h.index, h.part) == (handle.index, handle.part))
        return {"drm_render": 128 + hip_id, "drm_card": hip_id, "hsa_id": hip_id + 1, "hip_id": hip_id,
                "hip_uuid": self._hip_uuid(handle)}

    def amdsmi_get_gpu_kfd_info(self, handle: Any) -> dict[str, Any]:
        self._check(handle)
        handles = self.amdsmi_get_processor_handles()
        node = next(i for i, h in enumerate(handles) if (h.index, h.part) == (handle.index, handle.part)) + 1
        return {"kfd_id": 0x1000 + node, "node_id": node, "current_partition_id": handle.part or 0}

    def amdsmi_get_gpu_asic_info(self, handle: Any) -> dict[str, Any]:
        g = self._check(handle, "name")
        return {"market_name": g["name"], "vendor_id": "0x1002", "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
                "subvendor_id": "0x1002", "device_id": f"0x{DEVICE_ID:04x}", "rev_id": "0x00",
                "asic_serial": f"0x{self._unique_id(g).upper()}",  # the Python layer's 0x{:016X}
                "oam_id": handle.index, "num_compute_units": 304, "target_graphics_version": "gfx942",
                "subsystem_id": "0x74a1"}

    def amdsmi_get_gpu_driver_info(self, handle: Any) -> dict[str, Any]:
        self._check(handle)
        return {"driver_name": "amdgpu", "driver_version": self.sim.scenario.data.get("driver_version", "6.10.5"),
                "driver_date": "2015/01/01 00:00"}

    def amdsmi_get_gpu_vram_usage(self, handle: Any) -> dict[str, Any]:
        g = self._check(handle, "memory")
        t = self.sim.now()
        total = g["memory_total"] if handle.part is None else next(
            m["memory_total"] for m in g["mig"] if m["gi"] == handle.part)
        return {"vram_total": total // MiB, "vram_used": self.sim.used(self._unit(handle), t) // MiB}

    def amdsmi_get_gpu_activity(self, handle: Any) -> dict[str, Any]:
        g = self._check(handle, "utilization")
        t = self.sim.now()
        umc = "N/A" if "memory_utilization" in g["unsupported"] else int(self.sim.value(g["memory_utilization"], t))
        return {"gfx_activity": int(self.sim.value(g["utilization"], t)), "umc_activity": umc, "mm_activity": "N/A"}

    def amdsmi_get_temp_metric(self, handle: Any, sensor_type: Any, metric: Any) -> int:
        g = self._check(handle, "temperature")
        if not isinstance(sensor_type, AmdSmiTemperatureType):
            raise AmdSmiParameterException(sensor_type, AmdSmiTemperatureType)
        if not isinstance(metric, AmdSmiTemperatureMetric):
            raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
        # MI200/MI300 have no edge sensor: their temperature is the hotspot's (junction)
        if sensor_type == AmdSmiTemperatureType.EDGE and "MI" in g["name"]:
            raise AmdSmiLibraryException(compat.AMDSMI_STATUS_NOT_SUPPORTED)
        return int(self.sim.value(g["temperature"], self.sim.now()))

    def amdsmi_get_power_info(self, handle: Any) -> dict[str, Any]:
        g = self._check(handle, "power")
        watts = int(self.sim.value(g["power"], self.sim.now()))
        return {"socket_power": watts, "current_socket_power": watts, "average_socket_power": watts,
                "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A", "power_limit": int(g["power_limit"])}

    def amdsmi_get_power_cap_info(self, handle: Any) -> dict[str, Any]:
        g = self._check(handle, "power_limit")
        cap = int(g["power_limit"] * 1_000_000)
        return {"power_cap": cap, "default_power_cap": cap, "dpm_cap": 0, "min_power_cap": 0, "max_power_cap": cap}

    def amdsmi_get_gpu_fan_speed(self, handle: Any, sensor_idx: int) -> int:
        g = self._check(handle, "fan")
        if g["fan"] is None:
            raise AmdSmiLibraryException(compat.AMDSMI_STATUS_NOT_SUPPORTED)
        return int(self.sim.value(g["fan"], self.sim.now()) * 255 / 100)

    def amdsmi_get_gpu_fan_speed_max(self, handle: Any, sensor_idx: int) -> int:
        self.amdsmi_get_gpu_fan_speed(handle, sensor_idx)
        return 255

    def amdsmi_get_gpu_ecc_enabled(self, handle: Any) -> int:
        """The RAS blocks with ECC on, as a bit mask (UMC, SDMA, GFX, ...: all or none here)."""
        return 0x3FFF if self._check(handle, "ecc")["health"]["ecc_enabled"] else 0

    def amdsmi_get_gpu_total_ecc_count(self, handle: Any) -> dict[str, Any]:
        h = self._check(handle, "ecc")["health"]
        if not h["ecc_enabled"]:
            raise AmdSmiLibraryException(compat.AMDSMI_STATUS_NOT_SUPPORTED)
        return {"correctable_count": h["ecc_corrected_volatile"], "uncorrectable_count": h["ecc_uncorrected_volatile"],
                "deferred_count": 0}

    def amdsmi_get_pcie_info(self, handle: Any) -> dict[str, Any]:
        h = self._check(handle, "pcie")["health"]
        mts = {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}
        t = self.sim.now()
        gen, width = int(self.sim.value(h["pcie_gen"], t)), int(self.sim.value(h["pcie_width"], t))
        return {"pcie_static": {"max_pcie_width": h["pcie_width_max"], "max_pcie_speed": mts.get(h["pcie_gen_max"]),
                                "pcie_interface_version": h["pcie_gen_max"], "slot_type": "OAM"},
                "pcie_metric": {"pcie_width": width, "pcie_speed": mts.get(gen, "N/A"), "pcie_bandwidth": "N/A",
                                **dict.fromkeys(_PCIE_COUNTERS, 0)}}

    def amdsmi_get_gpu_compute_partition(self, handle: Any) -> str:
        return str(self._check(handle, "partitions")["compute_partition"])

    def amdsmi_get_gpu_memory_partition(self, handle: Any) -> str:
        return str(self._check(handle, "partitions")["memory_partition"])

    def amdsmi_get_gpu_process_list(self, handle: Any) -> list[dict[str, Any]]:
        self._check(handle, "processes")
        t = self.sim.now()
        out = []
        for p, mem in self.sim.live(self._unit(handle), t):
            if p.get("type") == "graphics":
                continue  # amdsmi lists KFD's compute processes only
            name = str(p.get("command", "")).split(" ")[0].rsplit("/", 1)[-1][:31] or "N/A"
            out.append({"name": name, "pid": p["pid"], "mem": mem,
                        "engine_usage": {"gfx": self.sim.busy_ns(p, handle.index, t), "enc": 0},
                        "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": mem}, "cu_occupancy": "N/A"})
        return out
