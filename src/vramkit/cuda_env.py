"""NVIDIA's visible-devices rule: CUDA_VISIBLE_DEVICES exactly as CUDA reads it, and the numbering a
CUDA program sees (AMD's is hip_env.py; visible.py asks the rule of each vendor on the machine).

NVML (nvidia-smi, vram status) numbers GPUs in PCI bus order. CUDA numbers them fastest first
unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and then renumbers what CUDA_VISIBLE_DEVICES lets through
from 0. This module maps between the two. The rules it implements (docs/gpu-numbering.md):

- unset: every GPU is visible; set but empty: none is.
- a comma-separated list; each entry (spaces around it ignored) is a CUDA index (decimal digits),
  a GPU UUID or a unique prefix of one ("GPU-8932f937"), a MIG UUID or a unique prefix
  ("MIG-..."), or the older MIG form "MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance>".
- the first entry that names no device (out of range, negative, not an id, an unknown or
  ambiguous UUID prefix, "GPU-" alone, an empty entry) ends the list: only the entries before it
  count. The hex digits of a UUID may be in either case; "GPU-" / "MIG-" must be upper case.
- an entry that starts with an index ("1abc", "+1") is read as that index, as libcuda does (seen
  on an H200, driver 580); vram warns that it is a typo.
- a device named twice in the same form (two indices, or two UUIDs or prefixes) makes the whole
  value invalid: CUDA fails to initialise. Named once by index and once by UUID, CUDA lists it once.
- visible devices are numbered cuda:0, cuda:1, ... in the order of the list.
- an index means a position in CUDA's own order: PCI bus order with CUDA_DEVICE_ORDER=PCI_BUS_ID,
  otherwise "fastest first", which vram can only assume equals PCI order when all GPUs are the
  same model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import RequestError
from .gpu_state import Snapshot
from .i18n import _, join_words, ngettext, pgettext
from .procs.text import excerpt

VISIBLE = "CUDA_VISIBLE_DEVICES"
ORDER = "CUDA_DEVICE_ORDER"
VARIABLES = (VISIBLE, ORDER)
ORDER_PCI = "PCI_BUS_ID"
ORDER_FASTEST = "FASTEST_FIRST"

# How sure we are of what an index in CUDA_VISIBLE_DEVICES means.
CERTAIN, ASSUMED, UNKNOWN = "certain", "assumed", "unknown"


@dataclass(frozen=True)
class CudaDevice:
    """Something CUDA can run on: a whole GPU, or one MIG instance of a GPU in MIG mode."""

    key: str  # stable id: the UUID when NVML gives one
    index: int  # NVML index (of the parent GPU, for a MIG instance)
    uuid: str | None
    name: str | None
    pci_bus_id: str | None
    gi: int | None = None  # MIG GPU instance id
    ci: int | None = None  # MIG compute instance id
    parent_uuid: str | None = None
    mig_mode: bool = False  # a whole GPU in MIG mode: CUDA runs on its instances, not on it
    lost: bool = False
    vendor: str = "nvidia"  # whose rule names it in a program's environment (visible.py)

    @property
    def is_mig(self) -> bool:
        return self.gi is not None

    @property
    def label(self) -> str:
        """How vram names it to people: 'GPU 3', 'GPU 0 MIG 1g.10gb (gi 9)'."""
        if self.gi is None:
            return f"GPU {self.index}"
        if self.vendor == "amd":
            return f"GPU {self.index} partition {self.gi}"
        profile = (self.name or "").rsplit(" ", 1)[-1]
        return f"GPU {self.index} MIG {profile} (gi {self.gi})" if profile else f"GPU {self.index} MIG gi {self.gi}"

    @property
    def short_id(self) -> str:
        """'3' or '0/9' (GPU/GPU instance), as vram ps writes it."""
        return str(self.index) if self.gi is None else f"{self.index}/{self.gi}"


def devices_of(snap: Snapshot) -> list[CudaDevice]:
    """Every whole GPU (in NVML order), each followed by its MIG instances."""
    out: list[CudaDevice] = []
    for g in snap.gpus:
        mig_mode = bool(g.mig_enabled and g.mig_devices)
        out.append(CudaDevice(key=g.uuid or f"nvml-{g.index}", index=g.index, uuid=g.uuid, name=g.name,
                              pci_bus_id=g.pci_bus_id, mig_mode=mig_mode, lost=g.lost, vendor=g.vendor))
        for m in g.mig_devices:
            out.append(CudaDevice(key=m.uuid or f"nvml-{g.index}/{m.gi}", index=g.index, uuid=m.uuid,
                                  name=m.name, pci_bus_id=g.pci_bus_id, gi=m.gi, ci=m.ci,
                                  parent_uuid=g.uuid, lost=g.lost, vendor=g.vendor))
    return out


def _pci_key(dev: CudaDevice) -> tuple[int, ...]:
    """Sort key of a PCI bus id 'DDDDDDDD:BB:DD.F' (NVML pads the domain to 8 digits)."""
    m = re.fullmatch(r"([0-9A-Fa-f]+):([0-9A-Fa-f]+):([0-9A-Fa-f]+)\.([0-7])", dev.pci_bus_id or "")
    if not m:
        return (1, dev.index)  # unknown bus id: after the known ones, in NVML order
    return (0, *(int(x, 16) for x in m.groups()), dev.index)


def short_pci(bus_id: str | None) -> str:
    """'00000000:41:00.0' (NVML) -> '0000:41:00.0' (as lspci writes it)."""
    if not bus_id:
        return "N/A"
    domain, _, rest = bus_id.partition(":")
    if len(domain) > 4 and domain[:-4].strip("0") == "":
        domain = domain[-4:]
    return f"{domain}:{rest}".lower()


@dataclass
class Numbering:
    """The whole GPUs in the order CUDA numbers them (before CUDA_VISIBLE_DEVICES)."""

    order: str  # the effective CUDA_DEVICE_ORDER
    gpus: list[CudaDevice]
    confidence: str  # CERTAIN, ASSUMED or UNKNOWN
    note: str | None = None


def _pci_sorted(devices: list[CudaDevice]) -> list[CudaDevice]:
    gpus = [d for d in devices if not d.is_mig and d.vendor == "nvidia"]  # CUDA sees no other vendor's
    if any(not d.pci_bus_id for d in gpus):  # e.g. a lost GPU: NVML's own order is PCI order in practice
        return sorted(gpus, key=lambda d: d.index)
    return sorted(gpus, key=_pci_key)


def whole_gpus(devices: list[CudaDevice]) -> list[CudaDevice]:
    """Every whole GPU in vram's order: NVIDIA's in PCI order (NVML's), then another vendor's in its own."""
    return _pci_sorted(devices) + [d for d in devices if not d.is_mig and d.vendor != "nvidia"]


def numbering(devices: list[CudaDevice], order_env: str | None) -> Numbering:
    gpus = _pci_sorted(devices)
    if order_env == ORDER_PCI:
        return Numbering(ORDER_PCI, gpus, CERTAIN)
    note = ""
    if order_env not in (None, "", ORDER_FASTEST):
        note = _("CUDA_DEVICE_ORDER={value} is not a value CUDA knows, so it uses FASTEST_FIRST").format(
            value=excerpt(order_env)) + pgettext("clause separator", "; ")
    names = {d.name for d in gpus}
    if len(names) <= 1 and None not in names:
        return Numbering(ORDER_FASTEST, gpus, ASSUMED, note + _(
            "CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA numbers GPUs fastest first; all GPUs here are the "
            "same model, so that is taken to be PCI order (as nvidia-smi), but only PCI_BUS_ID guarantees it"))
    return Numbering(ORDER_FASTEST, gpus, UNKNOWN, note + _(
        "CUDA_DEVICE_ORDER is not PCI_BUS_ID and this machine mixes GPU models, so CUDA numbers them "
        "fastest first and a CUDA index may not be the GPU nvidia-smi shows with that number"))


@dataclass
class Entry:
    text: str  # the entry as written
    status: str  # "ok", "invalid" (ends the list), "duplicate", "ignored" (after the end)
    device: CudaDevice | None = None
    why: str | None = None  # for invalid/duplicate/ignored
    source: str | None = None  # the variable it is an entry of, where a rule reads several (ROCm's)


@dataclass
class Visible:
    """What CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER) make a CUDA program see."""

    value: str | None  # None: unset
    order: Numbering
    entries: list[Entry] = field(default_factory=list)
    devices: list[CudaDevice] = field(default_factory=list)  # cuda:0, cuda:1, ... (empty on error)
    error: str | None = None  # the value makes CUDA fail to initialise (a device named twice)
    pitfalls: list[str] = field(default_factory=list)
    variable: str = VISIBLE  # the variable vram sets to choose this vendor's GPUs
    vendor: str = "nvidia"  # or "amd", or "mixed" (visible.py: each vendor's rule, together)
    described: str | None = None  # what was set, as NAME=value (None: nothing)

    @property
    def is_set(self) -> bool:
        return self.value is not None


def _resolve(text: str, order: Numbering, devices: list[CudaDevice]) -> tuple[CudaDevice | None, str | None]:
    """One entry -> (device, None) or (None, why it names no device)."""
    t = text.strip()
    if not t:
        return None, _("an empty entry")
    if t.isascii() and t.isdigit():
        i = int(t) if len(t) <= 18 else None  # int() refuses 4,300 digits; no machine has 10**18 GPUs
        if i is None or i >= len(order.gpus):
            n = len(order.gpus)
            shown = t if len(t) <= 40 else f"{t[:37]}..."
            return None, ngettext("index {index} is out of range (CUDA sees {n} GPU)",
                                  "index {index} is out of range (CUDA sees {n} GPUs)", n).format(index=shown, n=n)
        return order.gpus[i], None
    if t.startswith("MIG-GPU-"):  # the R450/R460 form: MIG-GPU-<uuid>/<gi>/<ci>
        m = re.fullmatch(r"MIG-(GPU-[^/]+)/(\d+)/(\d+)", t)
        if m:
            for d in devices:
                if d.is_mig and d.parent_uuid == m.group(1) and d.gi == int(m.group(2)) and d.ci == int(m.group(3)):
                    return d, None
        return None, _("{entry} names no MIG instance here").format(entry=repr(t))
    if t.startswith(("GPU-", "MIG-")):
        want_mig = t.startswith("MIG-")
        rest = t[4:].lower()  # libcuda takes the hex digits in either case (seen on driver 580)
        if not rest:
            return None, _("{entry} is an empty UUID prefix").format(entry=repr(t))
        found = [d for d in devices if d.is_mig == want_mig and d.uuid and d.uuid[:4] == t[:4]
                 and d.uuid[4:].lower().startswith(rest)]
        if len(found) == 1:
            return found[0], None
        if found:
            return None, _("{entry} is ambiguous: it begins the UUIDs of {devices}").format(
                entry=repr(t), devices=join_words(d.label for d in found))
        return None, (_("{entry} matches no MIG instance UUID here") if want_mig
                      else _("{entry} matches no GPU UUID here")).format(entry=repr(t))
    lead = re.match(r"\+?(\d+)", t) if t.isascii() else None
    if lead:
        # libcuda reads the leading number of "0abc" or "+0" as the index (strtol-like; seen on an
        # H200, driver 580, scripts/cuda_visible_check.py), so vram reads it so too, and says so
        dev, why = _resolve(lead.group(1), order, devices)
        if dev is None:
            return None, _("{entry} is read by CUDA as index {index}, and {why}").format(
                entry=repr(t), index=lead.group(1)[:20], why=why)
        return dev, _("CUDA reads {entry} as index {index} (its leading number): write {index}").format(
            entry=repr(t), index=lead.group(1)[:20])
    if re.fullmatch(r"-\d+", t):
        return None, _("{entry} is not a valid index (indices are 0, 1, 2, ...)").format(entry=repr(t))
    return None, _("{entry} is not an index or a GPU/MIG UUID").format(entry=repr(t))


def parse_visible(value: str | None, devices: list[CudaDevice], order_env: str | None = None) -> Visible:
    """Read CUDA_VISIBLE_DEVICES `value` (None = unset) as CUDA would on these devices."""
    devices = [d for d in devices if d.vendor == "nvidia"]  # CUDA sees no other vendor's GPUs
    order = numbering(devices, order_env)
    vis = Visible(value=value, order=order, described=None if value is None else f"{VISIBLE}={excerpt(value)}")
    if value is None:
        for gpu in order.gpus:
            vis.devices.extend(_expand(gpu, devices))
        return vis
    if value.strip() == "":
        vis.pitfalls.append(_("CUDA_VISIBLE_DEVICES is set but empty: a CUDA program sees no GPU at all"))
        return vis
    ended = False
    uses_index = False
    named_as: dict[str, str] = {}  # device key -> "index" or "UUID", the form that listed it
    for text in value.split(","):
        if ended:
            vis.entries.append(Entry(text, "ignored", why=_("after the entry that ended the list")))
            continue
        dev, why = _resolve(text, order, devices)
        if dev is not None and why is not None:
            vis.pitfalls.append(_("entry {entry}: {why}").format(entry=repr(text.strip()), why=why))
        if dev is None:
            vis.entries.append(Entry(text, "invalid", why=why))
            vis.pitfalls.append(_(
                "entry {entry} ends the list: {why}; vram leaves it and every later entry out (CUDA's documented "
                "rule for an invalid entry)").format(entry=repr(text.strip()), why=why))
            ended = True
            continue
        form = "UUID" if text.strip().startswith(("GPU-", "MIG-")) else "index"
        uses_index = uses_index or form == "index"
        if dev.key in named_as:
            vis.entries.append(Entry(text, "duplicate", dev, why=_("{device} is already listed").format(
                device=dev.label)))
            if named_as[dev.key] == form:
                vis.error = _("CUDA_VISIBLE_DEVICES={value} names {device} twice: CUDA refuses to start with a "
                              "repeated device").format(value=excerpt(value), device=dev.label)
            else:  # seen on an H200, driver 580: "0,GPU-<its uuid>" and "GPU-<uuid>,0" start, with it once
                vis.pitfalls.append((_("entry {entry} names {device} again (by UUID; it was listed by index): CUDA "
                                       "lists it once") if form == "UUID" else
                                     _("entry {entry} names {device} again (by index; it was listed by UUID): CUDA "
                                       "lists it once")).format(entry=repr(text.strip()), device=dev.label))
            continue
        named_as[dev.key] = form
        vis.entries.append(Entry(text, "ok", dev))
        vis.devices.append(dev)
    if vis.error:
        vis.devices = []
        return vis
    if uses_index and order.confidence != CERTAIN and order.note:
        vis.pitfalls.append(order.note)
    for d in vis.devices:
        if d.mig_mode:
            vis.pitfalls.append(_("{device} is in MIG mode: CUDA runs on one of its MIG instances, not on the "
                                  "whole GPU; name the instance by its MIG UUID").format(device=d.label))
        if d.lost:
            vis.pitfalls.append(_("{device} is lost (fell off the bus): CUDA cannot use it").format(device=d.label))
    _mig_pitfalls(vis)
    return vis


def _expand(gpu: CudaDevice, devices: list[CudaDevice]) -> list[CudaDevice]:
    """A GPU in MIG mode stands for its MIG instances."""
    if not gpu.mig_mode:
        return [gpu]
    return [d for d in devices if d.is_mig and d.index == gpu.index]


def _mig_pitfalls(vis: Visible) -> None:
    migs = [d for d in vis.devices if d.is_mig]
    if len(migs) > 1:
        vis.pitfalls.append(_("{n} MIG instances are visible, but a CUDA process enumerates only one MIG device: "
                              "it would use {device}").format(n=len(migs), device=migs[0].label))


def parse_env(env: Mapping[str, str], devices: list[CudaDevice]) -> Visible:
    """What a CUDA program started with `env` sees of these devices (NVIDIA's only)."""
    return parse_visible(env.get(VISIBLE), devices, env.get(ORDER))


def allowed_keys(vis: Visible, devices: list[CudaDevice]) -> set[str] | None:
    """The units a scheduler's CUDA_VISIBLE_DEVICES allows (None: no restriction). A GPU in MIG
    mode named as a whole allows its MIG instances. Raises RequestError (a ValueError) when CUDA
    would refuse it."""
    if vis.error:
        raise RequestError(vis.error)
    if not vis.is_set:
        return None
    if vis.order.confidence == UNKNOWN and any(e.status == "ok" and e.text.strip().isdigit() for e in vis.entries):
        raise RequestError(_("CUDA_VISIBLE_DEVICES={value} uses indices, but CUDA_DEVICE_ORDER is not PCI_BUS_ID "
                             "and this machine mixes GPU models, so which GPUs CUDA means cannot be known; set "
                             "CUDA_DEVICE_ORDER=PCI_BUS_ID or use GPU UUIDs").format(value=vis.value))
    keys: set[str] = set()
    for d in vis.devices:
        keys.update(x.key for x in _expand(d, devices))
    return keys


def cuda_index(dev: CudaDevice, devices: list[CudaDevice]) -> int | None:
    """The index that names `dev` in CUDA_VISIBLE_DEVICES under CUDA_DEVICE_ORDER=PCI_BUS_ID
    (None for a MIG instance: those are named by UUID)."""
    if dev.is_mig or dev.vendor != "nvidia":
        return None
    return numbering(devices, ORDER_PCI).gpus.index(dev)


def visible_value(units: list[CudaDevice], devices: list[CudaDevice], ids: str = "auto") -> str:
    """The CUDA_VISIBLE_DEVICES value (to use with CUDA_DEVICE_ORDER=PCI_BUS_ID) that shows exactly
    `units`, in this order. ids: "index", "uuid", or "auto": indices, unless a GPU here is in MIG
    mode or lost (how CUDA counts those is driver-dependent) or has no known PCI id; then UUIDs,
    which cannot be misread."""
    devices = [d for d in devices if d.vendor == "nvidia"]
    if ids == "auto":
        unclear = any(d.mig_mode or d.is_mig or d.lost or not d.pci_bus_id for d in devices)
        ids = "uuid" if unclear and all(u.uuid for u in units) else "index"
    out = []
    for u in units:
        if u.is_mig or ids == "uuid":
            if u.uuid is None:
                raise RequestError(_("{device} has no UUID (NVML did not report one), so CUDA cannot be told about "
                                     "it").format(device=u.label))
            out.append(u.uuid)
        else:
            out.append(str(cuda_index(u, devices)))
    return ",".join(out)


def child_env(units: list[CudaDevice], devices: list[CudaDevice], ids: str = "auto") -> dict[str, str]:
    """What a launched program gets: the visible list, numbered in PCI order (as nvidia-smi)."""
    return {ORDER: ORDER_PCI, VISIBLE: visible_value(units, devices, ids)}
