"""A GPU's health as lines under its block of `vram status --all`: ECC errors, retired pages or
remapped rows, throttle reasons, clocks against their maxima, P-state, PCIe and NVLink links.

A field the driver does not support or refuses reads "N/A (why)"; a GPU whose memory errors are
handled by row remapping (Ampere and later) shows no page-retirement line, and the reverse.
"""

from __future__ import annotations

from ..model import Device, Health
from ..units import format_size
from .style import Style, clip

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
    out = []
    for label, text in rows:
        line = clip(f"{INDENT}{label:<{LABEL_W}} {text}", width)
        out.append(style.paint(line, "yellow") if _worrying(label, h) else line)
    return out


def _worrying(label: str, h: Health) -> bool:
    """Whether a line shows something to look at (painted, as doctor flags it)."""
    if label == "ecc":
        return bool(h.ecc_uncorrected_volatile)
    if label == "rows remapped":
        return bool(h.remap_pending or h.remap_failed)
    if label == "pages retired":
        return bool(h.retired_pages_pending)
    if label == "throttled by":
        return bool(set(h.throttle_reasons or ()) - {"gpu idle", "applications clocks setting"})
    return False
