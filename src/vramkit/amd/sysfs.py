"""AMD GPUs through what the amdgpu driver exposes without ROCm: KFD's topology and per-process
memory (/sys/class/kfd/kfd), the DRM device's files (/sys/class/drm/cardN/device: VRAM, busy %,
hwmon sensors, partition modes) and each process's DRM clients (/proc/PID/fdinfo).

GPUs come in KFD's node order, the order ROCm numbers them (HIP device ids); a partition of a
partitioned GPU (MI300's DPX/QPX/CPX) is a KFD node of its own at the same PCI device, another
function. A KFD node whose DRM device is gone is a lost GPU. Processes are the pids KFD lists
(compute clients: every ROCm program), then the graphics-only clients: processes holding a DRM
device file (a render or card node) with VRAM in their fdinfo that never opened /dev/kfd, listed
as graphics processes (as NVML lists them; another user's only to root). Everything
is read under `root` ("/" on a real machine), every file bounded, none through a symlink's end
that vramkit did not make (the device link is not followed: its uevent names the PCI address).
"""

from __future__ import annotations

import os

from ..errors import VramkitError
from ..gpu_state import Device, GpuProcess, MigDevice
from ..i18n import N_
from ..procs.fdinfo import DrmClient, drm_clients, pids_holding

MAX_FILE = 64 * 1024
AMD_PCI_VENDOR = "1002"
FIRST_READING = "a process's engine time is a counter (fdinfo drm-engine-*): its share needs a second reading"


_PCIE_GEN = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}  # GT/s -> PCIe generation


class SysfsUnavailable(VramkitError):
    """No KFD topology under the root: the amdgpu driver is not loaded (one line)."""


def _read(path: str) -> str | None:
    """A small sysfs file's text; None when absent. Raises PermissionError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except PermissionError:
        raise
    except OSError:
        return None
    try:
        return os.read(fd, MAX_FILE).decode("utf-8", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def _properties(text: str | None) -> dict[str, int]:
    out = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def _uevent(device: str) -> dict[str, str]:
    """KEY=VALUE lines of a device's uevent (DRIVER, PCI_ID, PCI_SLOT_NAME)."""
    out = {}
    for line in (_read(os.path.join(device, "uevent")) or "").splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


class Sysfs:
    """The amdgpu driver's files under `root`; `read(t, first_index)` every GPU with its processes."""

    def __init__(self, root: str = "/"):
        self.root = root
        self.kfd = os.path.join(root, "sys/class/kfd/kfd")
        self.driver_version: str | None = None
        self._busy: dict[tuple[int, int, int | None], tuple[int, float]] = {}
        self.render_minors: dict[int, int] = {}  # /dev/dri/renderD<minor> -> GPU index
        self._devices: dict[int, str] = {}  # GPU index -> its DRM device directory, from the last reading

    def open(self) -> Sysfs:
        if not os.path.isdir(os.path.join(self.kfd, "topology/nodes")):
            raise SysfsUnavailable(f"no KFD topology under {os.path.join(self.kfd, 'topology')}: "
                                   "the amdgpu driver is not loaded")
        self.driver_version = _read(os.path.join(self.root, "sys/module/amdgpu/version"))
        return self

    def close(self) -> None:
        pass

    def _nodes(self) -> list[dict[str, int]]:
        """KFD's GPU nodes in node order, each with its properties and gpu_id."""
        base = os.path.join(self.kfd, "topology/nodes")
        out = []
        for name in sorted((n for n in os.listdir(base) if n.isdigit()), key=int):
            gpu_id = _read(os.path.join(base, name, "gpu_id"))
            if not gpu_id or not gpu_id.isdigit() or int(gpu_id) == 0:
                continue  # a CPU node
            props = _properties(_read(os.path.join(base, name, "properties")))
            props["gpu_id"] = int(gpu_id)
            props["node"] = int(name)
            bank = _properties(_read(os.path.join(base, name, "mem_banks/0/properties")))
            if "size_in_bytes" in bank:
                props["size_in_bytes"] = bank["size_in_bytes"]
            out.append(props)
        return out

    def _cards(self) -> dict[str, str]:
        """PCI address -> its DRM card's device directory (only AMD's)."""
        base = os.path.join(self.root, "sys/class/drm")
        out: dict[str, str] = {}
        try:
            names = os.listdir(base)
        except OSError:
            return out
        for name in names:
            if not (name.startswith("card") and name[4:].isdigit()):
                continue
            device = os.path.join(base, name, "device")
            uevent = _uevent(device)
            if uevent.get("PCI_ID", "").lower().startswith(AMD_PCI_VENDOR) and "PCI_SLOT_NAME" in uevent:
                out[uevent["PCI_SLOT_NAME"].lower()] = device
        return out

    def read(self, t: float, first_index: int = 0) -> list[Device]:
        nodes = self._nodes()
        cards = self._cards()
        groups: dict[tuple[int, int], list[dict[str, int]]] = {}
        for n in nodes:  # partitions of one GPU: one PCI device (domain, bus, device), other functions
            groups.setdefault((n.get("domain", 0), n.get("location_id", 0) >> 3), []).append(n)
        held, procs_na = self._kfd_processes()
        graphics = {} if procs_na else self._graphics_clients(held)
        out = []
        seen: set[tuple[int, int, int | None]] = set()
        for i, ((domain, busdev), parts) in enumerate(groups.items()):
            bdf = f"{domain:04x}:{busdev >> 5:02x}:{busdev & 0x1f:02x}.0"
            dev = Device(index=first_index + i, vendor="amd", pci_bus_id=bdf)
            self.render_minors.update({p["drm_render_minor"]: dev.index for p in parts if "drm_render_minor" in p})
            uid = parts[0].get("unique_id")
            dev.uuid = f"GPU-{uid:016x}" if uid else None
            if uid is None:
                dev.na["uuid"] = N_("KFD's topology gives this GPU no unique_id")
            device = cards.get(bdf)
            if device is None:
                dev.lost, dev.error = True, f"its DRM device ({bdf}) is gone from /sys/class/drm: the GPU is lost"
                out.append(dev)
                continue
            self._devices[dev.index] = device
            try:
                self._device(dev, device, parts)
            except PermissionError as e:
                dev.error = f"cannot read {e.filename}: permission denied"
            if procs_na:
                dev.na["processes"] = procs_na
            else:
                for j, part in enumerate(parts):
                    self._processes(dev, part, j if dev.mig_enabled else None, held, graphics, t, seen)
                if dev.mig_enabled:
                    for m in dev.mig_devices:
                        m.memory_used = sum(p.memory or 0 for p in dev.processes if p.mig_gi == m.gi)
                        m.memory_free = None if m.memory_total is None else m.memory_total - m.memory_used
            out.append(dev)
        self._busy = {k: v for k, v in self._busy.items() if k in seen}
        return out

    def read_health(self, gpus: list[Device]) -> None:
        """RAS's memory error counts (since the driver loaded) and the PCI device's link."""
        for g in gpus:
            device, health = self._devices.get(g.index), g.health
            if device is None or health is None:
                continue
            na = health.na
            try:
                ras = _read(os.path.join(device, "ras/umc_err_count"))
                links = {n: _read(os.path.join(device, n)) for n in
                         ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")}
            except PermissionError as e:
                for key in ("ecc_corrected_volatile", "ecc_uncorrected_volatile", "pcie_gen", "pcie_width"):
                    na[key] = f"cannot read {e.filename}: permission denied"
                continue
            counts = dict(line.split(":", 1) for line in (ras or "").splitlines() if ":" in line)
            if counts.get("ue", "").strip().isdigit() and counts.get("ce", "").strip().isdigit():
                health.ecc_enabled = True
                health.ecc_uncorrected_volatile, health.ecc_corrected_volatile = (
                    int(counts["ue"]), int(counts["ce"]))
                for key in ("ecc_enabled", "ecc_corrected_volatile", "ecc_uncorrected_volatile"):
                    na.pop(key, None)
                for key in ("ecc_corrected_aggregate", "ecc_uncorrected_aggregate"):
                    na[key] = N_("the amdgpu driver counts errors since it loaded, not over the GPU's life")
            else:
                for key in ("ecc_enabled", "ecc_corrected_volatile", "ecc_uncorrected_volatile"):
                    na[key] = N_("no RAS error counts (ras/umc_err_count): ECC off or not supported")
            for key, name in (("pcie_gen", "current_link_speed"), ("pcie_gen_max", "max_link_speed"),
                              ("pcie_width", "current_link_width"), ("pcie_width_max", "max_link_width")):
                text = links[name] or ""
                value = _PCIE_GEN.get(text.split(" ")[0]) if "speed" in name else (
                    int(text) if text.isdigit() else None)
                if value is None:
                    na[key] = f"the PCI device has no {name}"
                else:
                    setattr(health, key, value)
                    na.pop(key, None)

    def _number(self, dev: Device, device: str, name: str, field: str) -> int | None:
        text = _read(os.path.join(device, name))
        if text is None or not text.lstrip("-").isdigit():
            dev.na.setdefault(field, f"the amdgpu driver has no {name} for this GPU")
            return None
        return int(text)

    def _device(self, dev: Device, device: str, parts: list[dict[str, int]]) -> None:
        dev.name = _read(os.path.join(device, "product_name")) or None
        if dev.name is None:
            dev.name = f"AMD GPU {_uevent(device).get('PCI_ID', '').lower()}".strip()
        dev.memory_total = self._number(dev, device, "mem_info_vram_total", "memory_total")
        dev.memory_used = self._number(dev, device, "mem_info_vram_used", "memory_used")
        if dev.memory_total is not None and dev.memory_used is not None:
            dev.memory_free = dev.memory_total - dev.memory_used
        else:
            dev.na["memory_free"] = dev.na.get("memory_used") or dev.na.get("memory_total", "")
        dev.na["memory_reserved"] = N_("the amdgpu driver does not report memory it reserves")
        dev.utilization = self._number(dev, device, "gpu_busy_percent", "utilization")
        dev.memory_utilization = self._number(dev, device, "mem_busy_percent", "memory_utilization")
        self._hwmon(dev, device)
        mode = _read(os.path.join(device, "current_compute_partition"))
        dev.mig_enabled = len(parts) > 1
        for j, part in enumerate(parts if dev.mig_enabled else ()):
            uid = part.get("unique_id")
            # ROCm's name of a partition: the last 12 hex digits of the GPU's unique id, then the partition's 4
            uuid = f"GPU-{uid:016x}"[-12:] if uid else None
            dev.mig_devices.append(MigDevice(
                gi=j, ci=None, uuid=f"GPU-{uuid}{j:04x}" if uuid else None, name=f"{dev.name} {mode or ''}".strip(),
                memory_total=part.get("size_in_bytes"), memory_used=None, memory_free=None))

    def _hwmon(self, dev: Device, device: str) -> None:
        base = os.path.join(device, "hwmon")
        try:
            hwmon = [os.path.join(base, n) for n in sorted(os.listdir(base))]
        except OSError:
            hwmon = []
        if not hwmon:
            for field in ("temperature", "power_draw", "power_limit", "fan"):
                dev.na[field] = N_("the amdgpu driver exposes no hwmon sensors for this GPU")
            return
        h = hwmon[0]
        temps = {}
        for k in range(1, 4):
            label = _read(os.path.join(h, f"temp{k}_label"))
            value = _read(os.path.join(h, f"temp{k}_input"))
            if label and value and value.lstrip("-").isdigit():
                temps[label] = int(value) // 1000
        temp = temps.get("edge", temps.get("junction"))
        if temp is None:
            dev.na["temperature"] = N_("no edge or junction temperature in hwmon")
        dev.temperature = temp
        power = _read(os.path.join(h, "power1_average")) or _read(os.path.join(h, "power1_input"))
        if power and power.isdigit():
            dev.power_draw = int(power) / 1e6
        else:
            dev.na["power_draw"] = N_("no power1_average or power1_input in hwmon")
        cap = _read(os.path.join(h, "power1_cap"))
        if cap and cap.isdigit():
            dev.power_limit = int(cap) / 1e6
        else:
            dev.na["power_limit"] = N_("no power1_cap in hwmon")
        pwm, top = _read(os.path.join(h, "pwm1")), _read(os.path.join(h, "pwm1_max"))
        if pwm and top and pwm.isdigit() and top.isdigit() and int(top):
            dev.fan = round(100 * int(pwm) / int(top))
        else:
            dev.na["fan"] = N_("no fan (pwm1) in hwmon: a passively cooled GPU")

    def _kfd_processes(self) -> tuple[dict[int, dict[int, int]], str | None]:
        """pid -> {gpu_id: VRAM bytes} from /sys/class/kfd/kfd/proc, or why it cannot be read."""
        base = os.path.join(self.kfd, "proc")
        try:
            pids = [int(n) for n in os.listdir(base) if n.isdigit()]
        except PermissionError:
            return {}, "no permission to list KFD's processes (/sys/class/kfd/kfd/proc)"
        except OSError:
            return {}, "this kernel's KFD lists no processes (/sys/class/kfd/kfd/proc is missing)"
        out: dict[int, dict[int, int]] = {}
        for pid in pids:
            try:
                names = os.listdir(os.path.join(base, str(pid)))
            except OSError:
                continue  # exited since the listing, or not ours
            for name in names:
                if name.startswith("vram_") and name[5:].isdigit():
                    try:
                        text = _read(os.path.join(base, str(pid), name))
                    except PermissionError:
                        continue
                    if text and text.isdigit():
                        out.setdefault(pid, {})[int(name[5:])] = int(text)
        return out, None

    def _graphics_clients(self, held: dict[int, dict[int, int]]) -> dict[int, list[DrmClient]]:
        """pid -> its amdgpu DRM clients, for each process holding a DRM device file that KFD does
        not list (it never opened /dev/kfd: a graphics-only client, as NVML's graphics processes)."""
        out = {}
        for pid in pids_holding(("/dev/dri/",), self.root):
            if pid in held:
                continue
            try:
                clients = drm_clients(pid, self.root, "amdgpu")
            except PermissionError:
                continue
            if clients:
                out[pid] = clients
        return out

    def _share(self, key: tuple[int, int, int | None], clients: list[DrmClient], t: float,
               why: str | None) -> tuple[int | None, str | None]:
        """A process's engine share (gfx + compute busy ns over two readings), or why not yet."""
        if not clients:
            return None, why if why != FIRST_READING else "no DRM client of this GPU in its fdinfo"
        ns = sum(v for c in clients for k, v in c.engines.items() if k in ("gfx", "compute"))
        before = self._busy.get(key)
        self._busy[key] = (ns, t)
        if before is not None and t > before[1]:
            return max(0, min(100, round((ns - before[0]) / 1e9 / (t - before[1]) * 100))), None
        return None, why

    def _processes(self, dev: Device, part: dict[str, int], gi: int | None, held: dict[int, dict[int, int]],
                   graphics: dict[int, list[DrmClient]], t: float, seen: set[tuple[int, int, int | None]]) -> None:
        bdf = f"{part.get('domain', 0):04x}:{part.get('location_id', 0) >> 8:02x}:" \
              f"{(part.get('location_id', 0) >> 3) & 0x1f:02x}.{part.get('location_id', 0) & 7}"
        for pid, by_gpu in held.items():
            memory = by_gpu.get(part["gpu_id"])
            if memory is None:
                continue
            key = (pid, dev.index, gi)
            seen.add(key)
            why: str | None = FIRST_READING
            try:
                clients = [c for c in drm_clients(pid, self.root, "amdgpu") if c.pdev == bdf]
            except PermissionError:
                clients, why = [], "its fdinfo is not yours to read (engine time needs root or the same user)"
            util, why = self._share(key, clients, t, why)
            dev.processes.append(GpuProcess(pid=pid, gpu=dev.index, gpu_uuid=dev.uuid, memory=memory, mig_gi=gi,
                                            sm_utilization=util, utilization_na=why))
        for pid, all_clients in graphics.items():
            clients = [c for c in all_clients if c.pdev == bdf]
            memory = sum(c.memory.get("vram", 0) for c in clients)
            if not memory:
                continue  # a file held open with nothing in this GPU's memory
            key = (pid, dev.index, gi)
            seen.add(key)
            util, why = self._share(key, clients, t, FIRST_READING)
            dev.processes.append(GpuProcess(pid=pid, gpu=dev.index, gpu_uuid=dev.uuid, memory=memory, mig_gi=gi,
                                            types=("graphics",), sm_utilization=util, utilization_na=why))
