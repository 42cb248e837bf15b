"""A GPU in detail: its health as lines under its block of `vram status --all` (ECC errors,
retired pages or remapped rows, throttle reasons, clocks against their maxima, P-state, PCIe and
NVLink links), and `vram info`'s page per GPU (identity, memory, utilization, that health, its
topology, and its processes with their own utilization), as nvidia-smi -q lists them.

A field the driver does not support or refuses reads "N/A (why)"; a GPU whose memory errors are
handled by row remapping (Ampere and later) shows no page-retirement line, and the reverse.
"""

from __future__ import annotations

from ..gpu_state import Device, GpuProcess, Health, Snapshot, Topology
from ..units import format_size
from . import fmt
from .banner import banner
from .style import Style, clip
from .text_width import cells, pad

INDENT = " " * 6
LABEL_W = 13


def _na(h: Health, *names: str) -> str | None:
    """'N/A (why)' when any of `names` is N/A, else None."""
    for name in names:
        if getattr(h, name) is None:
            return f"N/A ({h.na.get(name, 'not read')})"
    return None


def _rate(value: int | None) -> str:
    return "N/A" if value is None else f"{format_size(value)}/s"


def _ecc(h: Health) -> tuple[str, str]:
    if h.ecc_enabled is False:
        return "ecc", "off"
    na = _na(h, "ecc_enabled", "ecc_uncorrected_volatile", "ecc_corrected_volatile")
    if na:
        return "ecc", na
    # since the driver loaded (volatile), then over the GPU's life (aggregate)
    return "ecc", (f"on  uncorrected {h.ecc_uncorrected_volatile}{_life(h.ecc_uncorrected_aggregate)}  "
                   f"corrected {h.ecc_corrected_volatile}{_life(h.ecc_corrected_aggregate)}")


def _life(count: int | None) -> str:
    return "" if count is None else f" (life {count})"


def _memory_repair(h: Health) -> list[tuple[str, str]]:
    """Row remapping where the GPU has it, else page retirement; both when neither answers."""
    rows = _na(h, "remapped_rows_uncorrectable", "remapped_rows_correctable", "remap_pending", "remap_failed")
    pages = _na(h, "retired_pages_double_bit", "retired_pages_single_bit", "retired_pages_pending")
    out = []
    if rows is None:
        state = ("FAILED (replace the GPU)" if h.remap_failed else "PENDING (reset the GPU)" if h.remap_pending
                 else "none pending")
        out.append(("rows remapped", f"{h.remapped_rows_uncorrectable} uncorrectable, "
                    f"{h.remapped_rows_correctable} correctable; {state}"))
    if pages is None:
        state = "PENDING (reset the GPU)" if h.retired_pages_pending else "none pending"
        out.append(("pages retired", f"{h.retired_pages_double_bit} double-bit, {h.retired_pages_single_bit} "
                    f"single-bit; {state}"))
    if rows is not None and pages is not None:
        # Not supported is what the other kind of GPU answers; say so only when it is something else.
        if "not supported" not in rows:
            out.append(("rows remapped", rows))
        if "not supported" not in pages:
            out.append(("pages retired", pages))
    return out


def _pair(value: int | None, top: int | None, unit: str = "") -> str:
    if value is None and top is None:
        return "N/A"
    return f"{'N/A' if value is None else value}/{'N/A' if top is None else top}{unit}"


def _clocks(h: Health) -> str:
    pstate = "P-state N/A" if h.performance_state is None else f"P{h.performance_state}"
    text = (f"sm {_pair(h.sm_clock, h.sm_clock_max, ' MHz')}  mem {_pair(h.memory_clock, h.memory_clock_max, ' MHz')}"
            f"  {pstate}")
    missing = sorted({h.na[n] for n in ("sm_clock", "memory_clock", "performance_state") if n in h.na})
    return text + (f"  (N/A: {', '.join(missing)})" if missing else "")


def _pcie(h: Health) -> str:
    link = _na(h, "pcie_gen", "pcie_width") or (
        f"gen {_pair(h.pcie_gen, h.pcie_gen_max)}  x{_pair(h.pcie_width, h.pcie_width_max)}")
    traffic = _na(h, "pcie_tx", "pcie_rx") or f"tx {_rate(h.pcie_tx)}  rx {_rate(h.pcie_rx)}"
    return f"{link}  {traffic}"


def _nvlink(h: Health) -> str:
    links = _na(h, "nvlink_links", "nvlink_links_up")
    if links:
        return links
    if not h.nvlink_links:
        return "none (the driver reports no link)"
    traffic = _na(h, "nvlink_tx", "nvlink_rx") or f"tx {_rate(h.nvlink_tx)}  rx {_rate(h.nvlink_rx)}"
    return f"{h.nvlink_links_up}/{h.nvlink_links} links up  {traffic}"


def _modes(h: Health) -> str:
    persistence = _na(h, "persistence_mode") or ("on" if h.persistence_mode else "off")
    compute = _na(h, "compute_mode") or h.compute_mode
    return f"persistence {persistence}  compute {compute}"


def health_lines(dev: Device, style: Style, width: int) -> list[str]:
    """The lines of one GPU's health (none when it was not read or the GPU is lost)."""
    h = dev.health
    if h is None or dev.lost:
        return []
    throttle = _na(h, "throttle_reasons") or (", ".join(h.throttle_reasons or ()) or "none")
    rows = [_ecc(h), *_memory_repair(h), ("throttled by", throttle), ("clocks", _clocks(h)), ("pcie", _pcie(h)),
            ("nvlink", _nvlink(h)), ("modes", _modes(h))]
    return [field_line(label, text, style, width, "yellow" if _worrying(label, dev) else None) for label, text in rows]


def field_line(label: str, text: str, style: Style, width: int, colour: str | None = None) -> str:
    """'      label         text', cut to `width` (painted `colour` when something is wrong)."""
    line = clip(f"{INDENT}{label:<{LABEL_W}} {text}", width)
    return style.paint(line, colour) if colour else line


def health_problems(dev: Device) -> list[str]:
    """What the GPU's health shows that doctor flags (the lines painted yellow above), in a few
    words each ('uncorrected ECC errors', 'throttled: sw power cap', 'busy in P8'); none when its
    health was not read."""
    h = dev.health
    if h is None or dev.lost:
        return []
    words = {
        "ecc": "uncorrected ECC errors",
        "rows remapped": "row remap failed" if h.remap_failed else "row remap pending",
        "pages retired": "page retirement pending",
        "throttled by": "throttled: " + ", ".join(r for r in h.throttle_reasons or ()
                                                   if r not in ("gpu idle", "applications clocks setting")),
        "clocks": f"busy in P{h.performance_state}",
    }
    return [text for label, text in words.items() if _worrying(label, dev)]


def _worrying(label: str, dev: Device) -> bool:
    """Whether a line shows something to look at (painted, as doctor flags it)."""
    h = dev.health
    if h is None:
        return False
    if label == "ecc":
        return bool(h.ecc_uncorrected_volatile)
    if label == "rows remapped":
        return bool(h.remap_pending or h.remap_failed)
    if label == "pages retired":
        return bool(h.retired_pages_pending)
    if label == "throttled by":
        return bool(set(h.throttle_reasons or ()) - {"gpu idle", "applications clocks setting"})
    if label == "clocks" and h.performance_state is not None:
        from ..doctor.checklist import BUSY, LOW_PSTATE  # doctor's own rule; loaded only for health

        return h.performance_state >= LOW_PSTATE and (dev.utilization or 0) >= BUSY
    return False


# ------------------------------------------------------------------ vram info


def _value(dev: Device, name: str, text: str) -> str:
    """`text` for a field that has a value, else 'N/A (why)' (plain N/A where the reader gave no reason)."""
    if getattr(dev, name) is None:
        return f"N/A ({dev.na[name]})" if name in dev.na else fmt.NA
    return text


def _video(dev: Device) -> str:
    """The video encoder's and decoder's busy share; one N/A where both are N/A for one reason."""
    enc, dec = dev.encoder_utilization, dev.decoder_utilization
    if enc is None and dec is None and dev.na.get("encoder_utilization") == dev.na.get("decoder_utilization"):
        return _value(dev, "encoder_utilization", "")
    return (f"encoder {_value(dev, 'encoder_utilization', fmt.pct(enc))}  "
            f"decoder {_value(dev, 'decoder_utilization', fmt.pct(dec))}")


def _identity_and_load(dev: Device) -> list[tuple[str, str]]:
    frac = fmt.mem_fraction(dev)
    power = (f"N/A ({dev.na.get('power_draw') or dev.na.get('power_limit') or 'not read'})"
             if dev.power_draw is None and dev.power_limit is None else fmt.power(dev))
    return [
        ("uuid", dev.uuid or "N/A"),
        ("pci bus id", dev.pci_bus_id or "N/A"),
        ("mig" if dev.vendor == "nvidia" else "partitions",
         "not supported" if dev.mig_enabled is None and "mig_enabled" not in dev.na
         else _value(dev, "mig_enabled", "on" if dev.mig_enabled else "off")),
        ("memory used", _value(dev, "memory_used", f"{fmt.memory_pair(dev.memory_used, dev.memory_total)} "
                                                   f"({fmt.pct(None if frac is None else 100 * frac)})")),
        ("memory free", _value(dev, "memory_free", format_size(dev.memory_free))),
        ("reserved", _value(dev, "memory_reserved", format_size(dev.memory_reserved))),
        # the share of time a kernel ran, and memory was read or written: not how full it is
        ("utilization", f"gpu {_value(dev, 'utilization', fmt.pct(dev.utilization))}  "
                        f"memory {_value(dev, 'memory_utilization', fmt.pct(dev.memory_utilization))}"),
        ("temperature", _value(dev, "temperature", fmt.temp(dev.temperature))),
        ("power", power),
        ("fan", _value(dev, "fan", fmt.pct(dev.fan))),
        ("video", _video(dev)),
    ]


def _topology(dev: Device, topo: Topology | None, others: list[int]) -> list[tuple[str, str]]:
    """Its NUMA node and how it reaches every other GPU (nvidia-smi topo -m's words), or why not."""
    if topo is None:
        return []
    numa = topo.numa_node.get(dev.index)
    numa_text = str(numa) if numa is not None else f"N/A ({topo.na.get('numa_node', 'not read')})"
    links = [(j, topo.between(dev.index, j)) for j in others if j != dev.index]
    known = [f"GPU {j} {link}" for j, link in links if link != "?"]
    if not links:
        link_text = "no other GPU"
    elif known:
        link_text = ", ".join(known) + ("" if len(known) == len(links) else ", others unknown")
    else:
        why = "; ".join(sorted(set(topo.na.values()))) or "not read"
        link_text = f"N/A ({why})"
    return [("numa node", numa_text), ("links", link_text)]


USER_MAX = 20  # a longer user name is cut (as in vram status)
PROCESS_HEADER = ("PID", "USER", "MEMORY", "SM%", "MBW%", "ENC%", "DEC%", "COMMAND")


def _process_rows(procs: list[GpuProcess]) -> list[list[str]]:
    return [[str(p.pid) + ("" if p.mig_gi is None else f" gi{p.mig_gi}"), clip(p.user or "?", USER_MAX),
             format_size(p.memory),
             fmt.pct(p.sm_utilization), fmt.pct(p.memory_utilization), fmt.pct(p.encoder_utilization),
             fmt.pct(p.decoder_utilization), p.command if p.command is not None else f"({p.host_missing})"]
            for p in sorted(procs, key=lambda p: -(p.memory or 0))]


def _process_lines(dev: Device, style: Style, width: int) -> list[str]:
    """Its processes, each with its own SM / memory-bandwidth / encoder / decoder %, or why none."""
    unknown = None if dev.lost else dev.na.get("processes")
    if unknown is not None:
        return [field_line("processes", f"unknown ({unknown})", style, width, "yellow")]
    if not dev.processes:
        return [field_line("processes", "none", style, width)]
    rows = _process_rows(dev.processes)
    widths = [max(cells(h), *(cells(r[i]) for r in rows)) for i, h in enumerate(PROCESS_HEADER[:-1])]

    def line(values: list[str] | tuple[str, ...]) -> str:
        head = INDENT + "  ".join(pad(v, w, right=i not in (1,)) for i, (v, w) in enumerate(zip(values, widths)))
        return clip(f"{head}  {values[-1]}", width)

    out = [field_line("processes", str(len(rows)), style, width), style.paint(line(PROCESS_HEADER), "bold")]
    out += [line(r) for r in rows]
    reasons = sorted({p.utilization_na for p in dev.processes if p.utilization_na is not None})
    out += [style.paint(clip(f"{INDENT}own utilization N/A ({why})", width), "dim") for why in reasons]
    return out


def _mig_lines(dev: Device, style: Style, width: int) -> list[str]:
    # the profile ("3g.40gb") is the last word of the instance's name
    return [field_line(f"mig gi {m.gi}" if dev.vendor == "nvidia" else f"partition {m.gi}",
                       f"{(m.name or 'N/A').rsplit(' ', 1)[-1]}  "
                                         f"{fmt.memory_pair(m.memory_used, m.memory_total)} used", style, width)
            for m in dev.mig_devices]


def info_lines(dev: Device, topo: Topology | None, others: list[int], style: Style, width: int) -> list[str]:
    """One GPU's page of `vram info`: a heading, then a line per field."""
    heading = style.paint(f"GPU {dev.index}", "bold") + ("" if dev.name is None else f"  {dev.name}")
    if dev.lost:
        return [heading + "  " + style.paint("LOST", "red", "bold") + f"  {dev.error or ''}".rstrip()]
    out = [heading]
    out += [field_line(label, text, style, width) for label, text in _identity_and_load(dev)]
    out += _mig_lines(dev, style, width)
    out += health_lines(dev, style, width)
    out += [field_line(label, text, style, width) for label, text in _topology(dev, topo, others)]
    out += _process_lines(dev, style, width)
    return out


def render_info(snap: Snapshot, style: Style, width: int, total: int | None = None,
                machine_gpus: list[int] | None = None) -> str:
    """`vram info`: the banner, then a page per GPU in `snap.gpus`. `total`: the machine's GPU count
    when `snap.gpus` is a subset; `machine_gpus`: every GPU index (the links a GPU has to the rest)."""
    others = machine_gpus if machine_gpus is not None else [g.index for g in snap.gpus]
    out = [banner(snap, style, width, total)]
    for dev in snap.gpus:
        out += ["", *info_lines(dev, snap.topology, others, style, width)]
    return "\n".join(out)
