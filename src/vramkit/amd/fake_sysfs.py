"""A simulated AMD machine written as the files amdgpu and KFD expose, under a root of its own:
sys/class/kfd/kfd/topology/nodes/N (node 0 the CPU, then a node per GPU or partition, in ROCm's
order), sys/class/kfd/kfd/proc/PID/vram_<gpu_id>, sys/class/drm/cardN/device (uevent, VRAM,
busy %, partition modes, hwmon: temperature in m°C, power in µW, fan as pwm1/pwm1_max) and
proc/PID/fdinfo (DRM clients: drm-memory-vram, drm-engine-gfx, drm-client-id, each client open on
two descriptors, as a dup'ed one is) with proc/PID/fd's links to the render node. A process of
"type": "graphics" is a graphics-only client: its fdinfo and links, no KFD entry. `write(t)`
brings every value to the scenario's time t; a lost GPU has a KFD node and no DRM device; a field
the scenario marks unsupported has no file (processes: no KFD process directory; no_permission
processes: one this user cannot list).
"""

from __future__ import annotations

import os
import shutil

from .sim import SimulatedAmd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _bdf(pci_bus_id: str, function: int = 0) -> tuple[int, int, int, int]:
    domain, bus, rest = pci_bus_id.split(":")
    return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16), function


class FakeSysfs:
    """The tree of one simulated machine under `root` (a directory vram made and owns)."""

    def __init__(self, sim: SimulatedAmd, root: str):
        self.sim = sim
        self.root = root
        self._written_pids: set[int] = set()

    def _put(self, path: str, text: Any) -> None:
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(f"{text}\n")

    def _drop(self, path: str) -> None:
        full = os.path.join(self.root, path)
        if os.path.isdir(full):
            shutil.rmtree(full)
        elif os.path.exists(full):
            os.unlink(full)

    def nodes(self) -> list[tuple[int, int | None, int]]:
        """(GPU index, partition, KFD gpu_id) in node order."""
        out: list[tuple[int, int | None, int]] = []
        for g in self.sim.gpus:
            for unit in self.sim.units(g["index"]):
                out.append((unit[0], unit[1], 0x1000 + len(out) + 1))
        return out

    def write(self, t: float) -> None:
        sim = self.sim
        kfd = "sys/class/kfd/kfd"
        self._put(f"{kfd}/topology/nodes/0/gpu_id", 0)
        self._put(f"{kfd}/topology/nodes/0/properties", "cpu_cores_count 64\nsimd_count 0")
        self._put("sys/module/amdgpu/version", sim.scenario.data.get("driver_version", "6.10.5"))
        nodes = self.nodes()
        for n, (index, part, gpu_id) in enumerate(nodes, start=1):
            g = sim.gpus[index]
            domain, bus, dev, fn = _bdf(g["pci_bus_id"], part or 0)
            uid = int(g["uuid"][4:20], 16) if g["uuid"][4:20].isalnum() else 0
            size = g["memory_total"] if part is None else next(m["memory_total"] for m in g["mig"] if m["gi"] == part)
            self._put(f"{kfd}/topology/nodes/{n}/gpu_id", gpu_id)
            self._put(f"{kfd}/topology/nodes/{n}/properties",
                      f"cpu_cores_count 0\nsimd_count 1216\ndomain {domain}\nlocation_id {bus << 8 | dev << 3 | fn}\n"
                      f"drm_render_minor {128 + n - 1}\nunique_id {uid}\nvendor_id 4098\ndevice_id 29857")
            self._put(f"{kfd}/topology/nodes/{n}/mem_banks/0/properties", f"heap_type 1\nsize_in_bytes {size}")
        for card, g in enumerate(sim.gpus):
            self._card(card, g, t)
        self._processes(nodes, t)

    def _card(self, card: int, g: dict[str, Any], t: float) -> None:
        base = f"sys/class/drm/card{card}/device"
        if g["lost"]:
            self._drop(f"sys/class/drm/card{card}")
            return
        domain, bus, dev, _ = _bdf(g["pci_bus_id"])
        files: dict[str, Any] = {
            "uevent": ("DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID=1002:74A1\n"
                       f"PCI_SLOT_NAME={domain:04x}:{bus:02x}:{dev:02x}.0"),
            "product_name": g["name"],
            "current_compute_partition": g["compute_partition"], "current_memory_partition": g["memory_partition"],
        }
        off = g["unsupported"] | g["no_permission"]
        value = self.sim.value
        if "memory" not in off:
            files["mem_info_vram_total"] = g["memory_total"]
            files["mem_info_vram_used"] = self.sim.gpu_used(g["index"], t)
        if "utilization" not in off:
            files["gpu_busy_percent"] = int(value(g["utilization"], t))
        if "memory_utilization" not in off:
            files["mem_busy_percent"] = int(value(g["memory_utilization"], t))
        hw = "hwmon/hwmon3"
        if "temperature" not in off:
            label = "junction" if "MI" in g["name"] else "edge"  # MI200/MI300: no edge sensor
            files[f"{hw}/temp2_label" if label == "junction" else f"{hw}/temp1_label"] = label
            files[f"{hw}/temp2_input" if label == "junction" else f"{hw}/temp1_input"] = int(
                value(g["temperature"], t) * 1000)
        if "power" not in off:
            files[f"{hw}/power1_average"] = int(value(g["power"], t) * 1_000_000)
        if "power_limit" not in off:
            files[f"{hw}/power1_cap"] = int(g["power_limit"] * 1_000_000)
        h = g["health"]
        if "pcie" not in off:  # the PCI device's own link attributes
            speeds = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}
            files["current_link_speed"] = f"{speeds.get(int(value(h['pcie_gen'], t)), 'Unknown')} GT/s PCIe"
            files["current_link_width"] = int(value(h["pcie_width"], t))
            files["max_link_speed"] = f"{speeds.get(h['pcie_gen_max'], 'Unknown')} GT/s PCIe"
            files["max_link_width"] = h["pcie_width_max"]
        if "ecc" not in off and h["ecc_enabled"]:  # RAS: the memory controller's error counts
            files["ras/umc_err_count"] = f"ue: {h['ecc_uncorrected_volatile']}\nce: {h['ecc_corrected_volatile']}"
        if g["fan"] is not None and "fan" not in off:
            files[f"{hw}/pwm1"] = round(value(g["fan"], t) * 255 / 100)
            files[f"{hw}/pwm1_max"] = 255
        self._drop(base)
        for name, text in files.items():
            self._put(f"{base}/{name}", text)

    def _processes(self, nodes: list[tuple[int, int | None, int]], t: float) -> None:
        kfd = "sys/class/kfd/kfd/proc"
        full = os.path.join(self.root, kfd)
        if os.path.isdir(full):
            os.chmod(full, 0o755)
        self._drop(kfd)
        gpus = self.sim.gpus
        if any("processes" in g["unsupported"] for g in gpus):
            return  # an older kernel's KFD: no per-process files at all
        os.makedirs(full, exist_ok=True)
        for pid in self._written_pids:
            self._drop(f"proc/{pid}")
        self._written_pids.clear()
        for n, (index, part, gpu_id) in enumerate(nodes):
            if gpus[index]["lost"]:
                continue
            g = self.sim.gpus[index]
            domain, bus, dev, fn = _bdf(g["pci_bus_id"], part or 0)
            for p, mem in self.sim.live((index, part), t):
                pid = p["pid"]
                self._written_pids.add(pid)
                if p.get("type") != "graphics":  # a graphics-only client never opened /dev/kfd: KFD has no entry
                    self._put(f"{kfd}/{pid}/vram_{gpu_id}", mem)
                    self._put(f"{kfd}/{pid}/pasid", 0x8000 + pid % 0x7fff)
                info = (f"pos:\t0\nflags:\t02100002\nmnt_id:\t24\ndrm-driver:\tamdgpu\n"
                        f"drm-pdev:\t{domain:04x}:{bus:02x}:{dev:02x}.{fn}\ndrm-client-id:\t{pid * 64 + n}\n"
                        f"drm-memory-vram:\t{mem // 1024} KiB\ndrm-memory-gtt:\t2048 KiB\ndrm-memory-cpu:\t0 KiB\n"
                        f"drm-engine-gfx:\t{self.sim.busy_ns(p, index, t)} ns\ndrm-engine-compute:\t0 ns")
                for fd in (10 + 2 * n, 11 + 2 * n):  # a client's two descriptors: one client, counted once
                    self._put(f"proc/{pid}/fdinfo/{fd}", info)
                    link = os.path.join(self.root, f"proc/{pid}/fd/{fd}")  # as the kernel's: the node's path
                    os.makedirs(os.path.dirname(link), exist_ok=True)
                    os.symlink(f"/dev/dri/renderD{128 + n}", link)
        if any("processes" in g["no_permission"] for g in gpus):
            os.chmod(full, 0)  # KFD's process list is not this user's to read
