"""Which AMD GPUs a ROCm program sees, read from its environment exactly as ROCm reads it, and the
variable vram sets for an AMD pick.

Two layers (ROCR-Runtime's amd_filter_device.cpp, then CLR's rocdevice.cpp):

- ROCR_VISIBLE_DEVICES (the runtime, for every ROCm program): unset: every GPU agent, in KFD's
  node order (a partition of a partitioned GPU is an agent of its own); set but empty: none.
  Each comma-separated entry is trimmed and upper-cased; only the first (number of GPUs) entries
  are looked at. An entry starting with "G" is a UUID prefix ("GPU-" + the 16 hex digits of the
  unique id, 5 to 20 characters) that must match exactly one agent; any other entry is a number
  as C's strtol reads it in base 0 (so "0x1" is 1 and "010" is 8), the whole entry. The first
  entry that names no agent, names one already listed or is not a number ends the list.
- HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES (HIP, on the agents ROCR_VISIBLE_DEVICES left,
  renumbered from 0): an empty value counts as unset. An entry containing "GPU-" is looked for
  inside each agent's UUID ("GPU-" + 16 lower-case hex digits) and becomes the first agent's
  index that contains it; then it must be a plain decimal index in range, written as C++'s
  to_string writes it ("01", " 1", "+1" are not). The first invalid entry ends the list; an
  agent named twice is listed once.
- GPU_DEVICE_ORDINAL is the same list for OpenCL programs: HIP programs ignore it (vram says so).

vram run sets HIP_VISIBLE_DEVICES to the picked agents' indices among those the inherited
ROCR_VISIBLE_DEVICES leaves (or, with --format uuid, their UUIDs), and never CUDA_VISIBLE_DEVICES
for an AMD pick.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .cuda_env import CERTAIN, CudaDevice, Entry, Numbering, Visible
from .errors import RequestError
from .i18n import _, join_words, ngettext
from .procs.text import excerpt

ROCR = "ROCR_VISIBLE_DEVICES"
HIP = "HIP_VISIBLE_DEVICES"
HIP_FALLBACK = "CUDA_VISIBLE_DEVICES"  # what HIP reads when HIP_VISIBLE_DEVICES is empty or unset
OPENCL = "GPU_DEVICE_ORDINAL"
VARIABLES = (HIP, ROCR, OPENCL)
ORDER_KFD = "KFD"  # ROCm numbers agents in KFD's node order; no variable changes it


def agents(devices: list[CudaDevice]) -> list[CudaDevice]:
    """The AMD GPU agents in ROCm's order: each whole GPU, or each partition of a partitioned one."""
    out = []
    for d in devices:
        if d.vendor != "amd" or d.is_mig:
            continue
        out.extend([m for m in devices if m.is_mig and m.index == d.index] if d.mig_mode else [d])
    return out


def _strtol0(text: str) -> int | None:
    """C's strtol(text, &end, 0) when it reads the whole text (else None): sign, 0x hex, 0 octal."""
    m = re.fullmatch(r"([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)?", text)
    if not m:
        return None
    body = m.group(2) or "0"  # "" and "+" read as 0 with nothing left over
    value = int(body, 16) if body[:2].lower() == "0x" else int(body, 8) if body.startswith("0") else int(body)
    return -value if m.group(1) == "-" else value


def _rocr(value: str, found: list[CudaDevice], vis: Visible) -> list[CudaDevice]:
    if value == "":
        vis.entries.append(Entry("", "invalid", why=_("it is set but empty: a ROCm program sees no GPU at all"),
                                 source=ROCR))
        return []
    uuids = [(d.uuid or "Invalid-UUID").upper() for d in found]
    chosen: list[CudaDevice] = []
    tokens = [t.strip().upper() for t in value.split(",")]
    for i, token in enumerate(tokens):
        why = None
        index: int | None
        if i >= len(found):
            why = _("ROCm looks at no more entries than there are GPUs ({n})").format(n=len(found))
            index = None
        elif token.startswith("G"):
            hits = [j for j, u in enumerate(uuids) if 5 <= len(token) <= 20 and u.startswith(token)]
            index = hits[0] if len(hits) == 1 else None
            why = None if index is not None else (_("{entry} matches several GPUs") if hits
                                                  else _("{entry} matches no GPU UUID")).format(entry=repr(token))
        else:
            index = _strtol0(token)
            if index is None:
                why = _("{entry} is not a number").format(entry=repr(token))
            elif not 0 <= index < len(found):
                why, index = _("index {index} is out of range ({n} GPUs)").format(index=token, n=len(found)), None
        if index is not None and found[index] in chosen:
            why, index = _("{device} is already listed").format(device=found[index].label), None
        if index is None:
            vis.entries.append(Entry(token, "invalid", why=why, source=ROCR))
            vis.entries.extend(Entry(t, "ignored", why=_("after the entry that ended the list"), source=ROCR)
                               for t in tokens[i + 1:])
            vis.pitfalls.append(_("{variable}: entry {entry} ends the list: {why}; ROCm leaves it and every later "
                                  "entry out").format(variable=ROCR, entry=repr(token), why=why))
            break
        vis.entries.append(Entry(token, "ok", found[index], source=ROCR))
        chosen.append(found[index])
    return chosen


def _hip(name: str, value: str, found: list[CudaDevice], vis: Visible) -> list[CudaDevice]:
    chosen: list[CudaDevice] = []
    tokens = value.split(",")
    for i, token in enumerate(tokens):
        text = token
        if "GPU-" in text:
            hit = next((j for j, d in enumerate(found) if d.uuid and text in d.uuid), None)
            text = str(hit) if hit is not None else text
        ok = text.isascii() and text.isdigit() and str(int(text)) == text and int(text) < len(found)
        if not ok:
            why = (_("{entry} names no GPU here").format(entry=repr(token)) if "GPU-" in token else
                   ngettext("{entry} is not an index of the {n} GPU ROCm shows (written as 0, 1, 2, ...)",
                            "{entry} is not an index of the {n} GPUs ROCm shows (written as 0, 1, 2, ...)",
                            len(found)).format(entry=repr(token), n=len(found)))
            vis.entries.append(Entry(token, "invalid", why=why, source=name))
            vis.entries.extend(Entry(t, "ignored", why=_("after the entry that ended the list"), source=name)
                               for t in tokens[i + 1:])
            vis.pitfalls.append(_("{variable}: entry {entry} ends the list: {why}; HIP leaves it and every later "
                                  "entry out").format(variable=name, entry=repr(token), why=why))
            break
        dev = found[int(text)]
        if dev in chosen:
            vis.entries.append(Entry(token, "duplicate", dev, why=_("{device} is already listed").format(
                device=dev.label), source=name))
            continue
        vis.entries.append(Entry(token, "ok", dev, source=name))
        chosen.append(dev)
    return chosen


def parse_env(env: Mapping[str, str], devices: list[CudaDevice]) -> Visible:
    """What a HIP program started with `env` sees of these devices' AMD GPUs, in its order."""
    found = agents(devices)
    rocr, hip, fallback = env.get(ROCR), env.get(HIP) or None, env.get(HIP_FALLBACK) or None
    hip_name = HIP if hip is not None else HIP_FALLBACK
    hip_value = hip if hip is not None else fallback
    shown = [f"{n}={excerpt(v)}" for n, v in ((ROCR, rocr), (hip_name, hip_value)) if v is not None]
    described = " ".join(shown) if shown else None
    vis = Visible(value=described, order=Numbering(ORDER_KFD, found, CERTAIN), variable=HIP, vendor="amd",
                  described=described)
    if rocr is not None:
        found = _rocr(rocr, found, vis)
    if hip_value is not None:
        if hip is None:
            vis.pitfalls.append(_("{variable} is not set, so HIP reads {fallback} as AMD GPU indices").format(
                variable=HIP, fallback=f"{HIP_FALLBACK}={fallback}"))
        found = _hip(hip_name, hip_value, found, vis)
    if env.get(OPENCL):
        vis.pitfalls.append(_("{setting} is for OpenCL programs: HIP programs (PyTorch on ROCm) ignore it; set "
                              "{variable}").format(setting=f"{OPENCL}={env[OPENCL]}", variable=HIP))
    vis.devices = found
    for d in found:
        if d.lost:
            vis.pitfalls.append(_("{device} is lost: ROCm cannot use it").format(device=d.label))
    return vis


def child_env(units: list[CudaDevice], devices: list[CudaDevice], env: Mapping[str, str],
              ids: str = "auto") -> dict[str, str]:
    """HIP_VISIBLE_DEVICES showing exactly `units`, in this order. ids "auto" or "index": their
    indices among the agents the inherited ROCR_VISIBLE_DEVICES leaves (all when it is unset);
    "uuid": each agent's UUID (GPU-<unique id>, a partition's own), which HIP matches against the
    agents it has, so the list means the same GPUs whatever ROCR_VISIBLE_DEVICES renumbered."""
    rocr = env.get(ROCR)
    base = agents(devices)
    if rocr is not None:
        base = _rocr(rocr, base, Visible(value=rocr, order=Numbering(ORDER_KFD, base, CERTAIN)))
    for u in units:
        if u not in base:
            raise RequestError(_("{device} is hidden by {setting}: HIP cannot be told to use it").format(
                device=u.label, setting=f"{ROCR}={rocr}"))
    if ids != "uuid":
        return {HIP: ",".join(str(base.index(u)) for u in units)}
    nameless = [u.label for u in units if not (u.uuid and u.uuid.startswith("GPU-"))]
    if nameless:
        raise RequestError(ngettext("{devices} has no UUID in ROCm's form (GPU-...) here: name it by index "
                                    "(--format index)",
                                    "{devices} have no UUID in ROCm's form (GPU-...) here: name them by index "
                                    "(--format index)", len(nameless)).format(
                                        devices=join_words(nameless)))
    value = ",".join(str(u.uuid) for u in units)
    # HIP takes the first agent whose UUID contains an entry: make sure each names its own
    if _hip(HIP, value, base, Visible(value=value, order=Numbering(ORDER_KFD, base, CERTAIN))) != units:
        raise RequestError(_("HIP would not read {setting} as the GPUs chosen: name them by index (--format "
                             "index)").format(setting=f"{HIP}={value}"))
    return {HIP: value}
