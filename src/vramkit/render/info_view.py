"""A GPU in detail: its health as lines under its block of `vram status --all` (ECC errors,
retired pages or remapped rows, throttle reasons, clocks against their maxima, P-state, PCIe and
NVLink links), and `vram info`'s page per GPU (identity, memory, utilization, that health, its
topology, and its processes with their own utilization), as nvidia-smi -q lists them.

A field the driver does not support or refuses reads "N/A (why)"; a GPU whose memory errors are
handled by row remapping (Ampere and later) shows no page-retirement line, and the reverse.
"""

from __future__ import annotations

from ..gpu_state import Device, GpuProcess, Health, Snapshot, Topology
from ..i18n import N_, _, pgettext
from ..units import format_size
from . import fmt
from .banner import banner
from .style import Style, clip
from .text_width import cells, pad

INDENT = " " * 6
NOT_READ = N_("not read")  # a field the reader gave no reason for
LABEL_W = 13


def _na_reason(h: Health, *names: str) -> str | None:
    """Why the first of `names` that is N/A is (in English, as stored), else None."""
    for name in names:
        if getattr(h, name) is None:
            return h.na.get(name, NOT_READ)
    return None


def _na(h: Health, *names: str) -> str | None:
    """'N/A (why)' when any of `names` is N/A, else None."""
    why = _na_reason(h, *names)
    return None if why is None else na_text(why)


def na_text(reason: str) -> str:
    """'N/A (why)', the reason in the reader's words."""
    return _("N/A ({reason})").format(reason=fmt.reason(reason))


def _on_off(value: bool | None) -> str:
    return pgettext("state", "on") if value else pgettext("state", "off")


def _rate(value: int | None) -> str:
    return "N/A" if value is None else f"{format_size(value)}/s"


def _ecc(h: Health) -> tuple[str, str]:
    if h.ecc_enabled is False:
        return "ecc", _on_off(False)
    na = _na(h, "ecc_enabled", "ecc_uncorrected_volatile", "ecc_corrected_volatile")
    if na:
        return "ecc", na
    # since the driver loaded (volatile), then over the GPU's life (aggregate)
    return "ecc", _("on  uncorrected {uncorrected}{uncorrected_life}  corrected {corrected}{corrected_life}").format(
        uncorrected=h.ecc_uncorrected_volatile, uncorrected_life=_life(h.ecc_uncorrected_aggregate),
        corrected=h.ecc_corrected_volatile, corrected_life=_life(h.ecc_corrected_aggregate))


def _life(count: int | None) -> str:
    # Translators: after an ECC error count since the driver loaded: the count over the GPU's life
    return "" if count is None else _(" (life {count})").format(count=count)


def _memory_repair(h: Health) -> list[tuple[str, str]]:
    """Row remapping where the GPU has it, else page retirement; both when neither answers."""
    rows = _na_reason(h, "remapped_rows_uncorrectable", "remapped_rows_correctable", "remap_pending", "remap_failed")
    pages = _na_reason(h, "retired_pages_double_bit", "retired_pages_single_bit", "retired_pages_pending")
    out = []
    pending = _("PENDING (reset the GPU)")
    if rows is None:
        state = (_("FAILED (replace the GPU)") if h.remap_failed else pending if h.remap_pending
                 else _("none pending"))
        out.append(("rows remapped", _("{uncorrectable} uncorrectable, {correctable} correctable; {state}").format(
            uncorrectable=h.remapped_rows_uncorrectable, correctable=h.remapped_rows_correctable, state=state)))
    if pages is None:
        state = pending if h.retired_pages_pending else _("none pending")
        out.append(("pages retired", _("{double} double-bit, {single} single-bit; {state}").format(
            double=h.retired_pages_double_bit, single=h.retired_pages_single_bit, state=state)))
    if rows is not None and pages is not None:
        # Not supported is what the other kind of GPU answers; say so only when it is something else.
        if "not supported" not in rows:
            out.append(("rows remapped", na_text(rows)))
        if "not supported" not in pages:
            out.append(("pages retired", na_text(pages)))
    return out


def _pair(value: int | None, top: int | None, unit: str = "") -> str:
    if value is None and top is None:
        return "N/A"
    return f"{'N/A' if value is None else value}/{'N/A' if top is None else top}{unit}"


def _clocks(h: Health) -> str:
    pstate = _("P-state N/A") if h.performance_state is None else f"P{h.performance_state}"
    text = _("sm {sm}  mem {mem}  {pstate}").format(sm=_pair(h.sm_clock, h.sm_clock_max, " MHz"),
                                                   mem=_pair(h.memory_clock, h.memory_clock_max, " MHz"), pstate=pstate)
    missing = sorted({h.na[n] for n in ("sm_clock", "memory_clock", "performance_state") if n in h.na})
    if not missing:
        return text
    return text + "  " + _("(N/A: {reasons})").format(reasons=", ".join(fmt.reason(m) for m in missing))


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
        return _("none (the driver reports no link)")
    traffic = _na(h, "nvlink_tx", "nvlink_rx") or f"tx {_rate(h.nvlink_tx)}  rx {_rate(h.nvlink_rx)}"
    return _("{up}/{links} links up  {traffic}").format(up=h.nvlink_links_up, links=h.nvlink_links, traffic=traffic)


def _modes(h: Health) -> str:
    persistence = _na(h, "persistence_mode") or _on_off(h.persistence_mode)
    compute = _na(h, "compute_mode") or h.compute_mode  # NVML's name of the mode (default, exclusive_process)
    return _("persistence {persistence}  compute {compute}").format(persistence=persistence, compute=compute)


def health_lines(dev: Device, style: Style, width: int) -> list[str]:
    """The lines of one GPU's health (none when it was not read or the GPU is lost)."""
    h = dev.health
    if h is None or dev.lost:
        return []
    # the throttle reasons are NVML's names (sw power cap, hw slowdown), as nvidia-smi -q shows them
    throttle = _na(h, "throttle_reasons") or (", ".join(h.throttle_reasons or ()) or pgettext("health", "none"))
    rows = [_ecc(h), *_memory_repair(h), ("throttled by", throttle), ("clocks", _clocks(h)), ("pcie", _pcie(h)),
            ("nvlink", _nvlink(h)), ("modes", _modes(h))]
    labels = field_labels()
    return [field_line(labels[label], text, style, width, "yellow" if _worrying(label, dev) else None)
            for label, text in rows]


def field_labels() -> dict[str, str]:
    """The labels of a GPU's fields in the reader's words, by their English names."""
    # Translators: labels of vram info's fields (and of the health lines of vram status --health)
    return {"uuid": pgettext("field", "uuid"), "pci bus id": pgettext("field", "pci bus id"),
            "mig": pgettext("field", "mig"), "partitions": pgettext("field", "partitions"),
            "memory used": pgettext("field", "memory used"), "memory free": pgettext("field", "memory free"),
            "reserved": pgettext("field", "reserved"), "utilization": pgettext("field", "utilization"),
            "temperature": pgettext("field", "temperature"), "power": pgettext("field", "power"),
            "fan": pgettext("field", "fan"), "video": pgettext("field", "video"), "ecc": pgettext("field", "ecc"),
            "rows remapped": pgettext("field", "rows remapped"), "pages retired": pgettext("field", "pages retired"),
            "throttled by": pgettext("field", "throttled by"), "clocks": pgettext("field", "clocks"),
            "pcie": pgettext("field", "pcie"), "nvlink": pgettext("field", "nvlink"),
            "modes": pgettext("field", "modes"), "numa node": pgettext("field", "numa node"),
            "links": pgettext("field", "links"), "processes": pgettext("field", "processes")}


def field_line(label: str, text: str, style: Style, width: int, colour: str | None = None) -> str:
    """'      label         text', cut to `width` (painted `colour` when something is wrong)."""
    line = clip(f"{INDENT}{pad(label, LABEL_W)} {text}", width)
    return style.paint(line, colour) if colour else line


def health_problems(dev: Device) -> list[str]:
    """What the GPU's health shows that doctor flags (the lines painted yellow above), in a few
    words each ('uncorrected ECC errors', 'throttled: sw power cap', 'busy in P8'); none when its
    health was not read."""
    h = dev.health
    if h is None or dev.lost:
        return []
    words = {
        "ecc": _("uncorrected ECC errors"),
        "rows remapped": _("row remap failed") if h.remap_failed else _("row remap pending"),
        "pages retired": _("page retirement pending"),
        "throttled by": _("throttled: {reasons}").format(reasons=", ".join(
            r for r in h.throttle_reasons or () if r not in ("gpu idle", "applications clocks setting"))),
        "clocks": _("busy in P{pstate}").format(pstate=h.performance_state),
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
        return na_text(dev.na[name]) if name in dev.na else fmt.NA
    return text


def _video(dev: Device) -> str:
    """The video encoder's and decoder's busy share; one N/A where both are N/A for one reason."""
    enc, dec = dev.encoder_utilization, dev.decoder_utilization
    if enc is None and dec is None and dev.na.get("encoder_utilization") == dev.na.get("decoder_utilization"):
        return _value(dev, "encoder_utilization", "")
    return _("encoder {encoder}  decoder {decoder}").format(encoder=_value(dev, "encoder_utilization", fmt.pct(enc)),
                                                          decoder=_value(dev, "decoder_utilization", fmt.pct(dec)))


def _identity_and_load(dev: Device) -> list[tuple[str, str]]:
    frac = fmt.mem_fraction(dev)
    power = (na_text(dev.na.get("power_draw") or dev.na.get("power_limit") or NOT_READ)
             if dev.power_draw is None and dev.power_limit is None else fmt.power(dev))
    return [
        ("uuid", dev.uuid or "N/A"),
        ("pci bus id", dev.pci_bus_id or "N/A"),
        ("mig" if dev.vendor == "nvidia" else "partitions",
         fmt.reason("not supported") if dev.mig_enabled is None and "mig_enabled" not in dev.na
         else _value(dev, "mig_enabled", _on_off(dev.mig_enabled))),
        ("memory used", _value(dev, "memory_used", f"{fmt.memory_pair(dev.memory_used, dev.memory_total)} "
                                                   f"({fmt.pct(None if frac is None else 100 * frac)})")),
        ("memory free", _value(dev, "memory_free", format_size(dev.memory_free))),
        ("reserved", _value(dev, "memory_reserved", format_size(dev.memory_reserved))),
        # the share of time a kernel ran, and memory was read or written: not how full it is
        ("utilization", _("gpu {gpu}  memory {memory}").format(
            gpu=_value(dev, "utilization", fmt.pct(dev.utilization)),
            memory=_value(dev, "memory_utilization", fmt.pct(dev.memory_utilization)))),
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
    numa_text = str(numa) if numa is not None else na_text(topo.na.get("numa_node", NOT_READ))
    links = [(j, topo.between(dev.index, j)) for j in others if j != dev.index]
    known = [f"GPU {j} {link}" for j, link in links if link != "?"]  # nvidia-smi topo -m's words: NV12, SYS
    if not links:
        link_text = _("no other GPU")
    elif known:
        link_text = ", ".join(known) if len(known) == len(links) else _("{links}, others unknown").format(
            links=", ".join(known))
    else:
        reasons = sorted(set(topo.na.values())) or [NOT_READ]
        link_text = _("N/A ({reason})").format(reason="; ".join(fmt.reason(r) for r in reasons))
    return [("numa node", numa_text), ("links", link_text)]


USER_MAX = 20  # a longer user name is cut (as in vram status)
PROCESS_HEADER = ("PID", "USER", "MEMORY", "SM%", "MBW%", "ENC%", "DEC%", "COMMAND")  # ps_view.headings()' keys


def _process_rows(procs: list[GpuProcess]) -> list[list[str]]:
    return [[fmt.pid(p) + ("" if p.mig_gi is None else f" gi{p.mig_gi}"), clip(p.user or "?", USER_MAX),
             format_size(p.memory),
             fmt.pct(p.sm_utilization), fmt.pct(p.memory_utilization), fmt.pct(p.encoder_utilization),
             fmt.pct(p.decoder_utilization),
             p.command if p.command is not None else f"({fmt.missing(p)})"]
            for p in sorted(procs, key=lambda p: -(p.memory or 0))]


def _process_lines(dev: Device, style: Style, width: int) -> list[str]:
    """Its processes, each with its own SM / memory-bandwidth / encoder / decoder %, or why none."""
    label = pgettext("field", "processes")
    unknown = None if dev.lost else dev.na.get("processes")
    if unknown is not None:
        return [field_line(label, _("unknown ({reason})").format(reason=fmt.reason(unknown)), style, width, "yellow")]
    if not dev.processes:
        return [field_line(label, pgettext("processes", "none"), style, width)]
    from .ps_view import headings

    words = headings()
    header = [words[h] for h in PROCESS_HEADER]
    rows = _process_rows(dev.processes)
    widths = [max(cells(h), *(cells(r[i]) for r in rows)) for i, h in enumerate(header[:-1])]

    def line(values: list[str] | tuple[str, ...]) -> str:
        head = INDENT + "  ".join(pad(v, w, right=i not in (1,)) for i, (v, w) in enumerate(zip(values, widths)))
        return clip(f"{head}  {values[-1]}", width)

    out = [field_line(label, str(len(rows)), style, width), style.paint(line(header), "bold")]
    out += [line(r) for r in rows]
    reasons = sorted({p.utilization_na for p in dev.processes if p.utilization_na is not None})
    out += [style.paint(clip(INDENT + _("own utilization N/A ({reason})").format(reason=fmt.reason(why)), width),
                        "dim") for why in reasons]
    return out


def _mig_lines(dev: Device, style: Style, width: int) -> list[str]:
    # the profile ("3g.40gb") is the last word of the instance's name
    return [field_line(_("mig gi {gi}").format(gi=m.gi) if dev.vendor == "nvidia"
                       else _("partition {gi}").format(gi=m.gi),
                       _("{profile}  {used_total} used").format(
                           profile=(m.name or "N/A").rsplit(" ", 1)[-1],
                           used_total=fmt.memory_pair(m.memory_used, m.memory_total)),
                       style, width)
            for m in dev.mig_devices]


def info_lines(dev: Device, topo: Topology | None, others: list[int], style: Style, width: int) -> list[str]:
    """One GPU's page of `vram info`: a heading, then a line per field."""
    heading = style.paint(f"GPU {dev.index}", "bold") + ("" if dev.name is None else f"  {dev.name}")
    if dev.lost:
        error = fmt.reason(dev.error) if dev.error else ""
        return [heading + "  " + style.paint(pgettext("status", "LOST"), "red", "bold") + f"  {error}".rstrip()]
    out = [heading]
    labels = field_labels()
    out += [field_line(labels[label], text, style, width) for label, text in _identity_and_load(dev)]
    out += _mig_lines(dev, style, width)
    out += health_lines(dev, style, width)
    out += [field_line(labels[label], text, style, width) for label, text in _topology(dev, topo, others)]
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
