"""Text for the live view's GPU panels, alerts line and process detail (rich Text, no Textual).

Sparklines cover a fixed span of time (the last few minutes), one cell per slice of it: a slice
with no sample yet is blank, so a view that just started shows a short history, not an invented one.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text

from ..alerts import Alert, GpuSample
from ..gpu_state import Device, GpuProcess
from ..i18n import _, ngettext, pgettext
from ..procs import HostLoad
from ..render import fmt
from ..render.sparkline import buckets, spark
from ..render.text_width import cells, fit, pad
from ..units import format_size
from .look import PLAIN, Look
from .timeline import range_label

_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(fraction: float | None, width: int, color: str) -> Text:
    if width <= 0:
        return Text()
    if fraction is None:
        return Text("·" * width, style="dim")
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_EIGHTHS[part] if part else "")
    return Text.assemble((filled, color), ("░" * (width - len(filled)), "dim"))


def name_cells(devices: list[Device]) -> int:
    """The columns the GPU names take in every panel: the widest short name. The same for all, so
    that bars and numbers line up from one GPU to the next (an H100 above an L40S)."""
    return max((cells(fmt.short_gpu_name(d.name)) for d in devices if not d.lost), default=0)


# A GPU's history for its panel: samples, or a function that makes sparkline cells of them
# (cells -> memory shares, utilization shares: RangeChart.peaks, without a sample per slot)
History = list[GpuSample] | Callable[[int], tuple[list[float | None], list[float | None]]]


def gpu_panel(dev: Device, samples: History, now: float, width: int, two_lines: bool,
              span: float = 300.0, alerting: bool = False, names: int | None = None, look: Look = PLAIN,
              unhealthy: bool = False, extras: str = "") -> Text:
    """One GPU: line 1 memory bar, used/total, utilization, temperature, power (and on one-line
    layouts the history sparklines); line 2, when there is room, memory and utilization history.
    `names`: the columns for the GPU's name (name_cells of all panels); default its own name's.
    `look`: the colours (theme, memory thresholds). `unhealthy`: its health, when last read,
    showed what doctor flags: a '!' after the index (the alerts line says what). `extras`: the
    fan and video engines' use after the power, as `vram status` shows them (its extras_fit: the
    same columns on every panel). A GPU whose
    process list the driver would not give gets a line saying so, as `vram status` does: the
    table then lists none of its processes, and that is not "none"."""
    panel = _gpu_lines(dev, samples, now, width, two_lines, span, alerting, names, look, unhealthy, extras)
    unknown = None if dev.lost else dev.na.get("processes")
    if unknown is None:
        return panel
    words = _("processes unknown ({reason}): the table lists none of this GPU's").format(reason=fmt.reason(unknown))
    note = Text.assemble("    ", (words, look.palette.warn))
    note.truncate(width, overflow="ellipsis")
    return Text("\n").join([panel, note])


def _gpu_lines(dev: Device, samples: History, now: float, width: int, two_lines: bool,
               span: float, alerting: bool, names: int | None, look: Look, unhealthy: bool, extras: str) -> Text:
    critical, util_color = f"bold {look.palette.critical}", look.palette.util
    index = Text(f"{dev.index:>2}", style=critical if alerting else "bold")
    index.append("!" if unhealthy else " ", style=f"bold {look.palette.warn}")
    if dev.lost:
        line = Text.assemble(index, (_("LOST"), critical), "  " + (dev.error or _("GPU is lost")))
        line.truncate(width)
        return line
    frac = fmt.mem_fraction(dev)
    color = look.level(frac)
    pair = fmt.memory_pair(dev.memory_used, dev.memory_total)
    share = fmt.pct(None if frac is None else 100 * frac)
    util = dev.utilization
    total = dev.memory_total or 1

    def history(cells: int) -> tuple[list[float | None], list[float | None]]:
        """Memory (share of total) and utilization (share of 100) history at `cells` cells."""
        if callable(samples):
            return samples(cells)
        mem_pts = [(s.time, None if s.memory_used is None else s.memory_used / total) for s in samples]
        util_pts = [(s.time, None if s.utilization is None else s.utilization / 100) for s in samples]
        return buckets(mem_pts, now, span, cells), buckets(util_pts, now, span, cells)
    power = fmt.power(dev) if width >= 100 else (
        "N/A" if dev.power_draw is None else f"{dev.power_draw:.0f}W")
    power_w = 9 if width >= 100 else 5
    tail = f" {fmt.temp(dev.temperature):>5} {power:>{power_w}}{extras}"
    mem_text = f" {pair:>12} {share:>4}"
    name = fmt.short_gpu_name(dev.name)
    wanted = cells(name) if names is None else names
    # the labels' columns beyond the English ones' ("mem", "util"): a translation may be wider
    mem, util_word = pgettext("GPU panel", "mem"), pgettext("GPU panel", "util")
    wider = cells(mem) - 3 + cells(util_word) - 4
    if two_lines:
        fixed = 3 + 1 + 4 + len(mem_text) + 7 + 5 + cells(tail) + wider
        room = max(8, width - fixed)
        name_w = min(wanted, max(6, room // 3))
        bar_w = max(4, min(30, (room - name_w) * 2 // 3))
        util_w = max(0, min(12, room - name_w - bar_w))
        line1 = Text.assemble(index, (pad(fit(name, name_w), name_w), ""), f" {mem} ", bar(frac, bar_w, color),
                              (mem_text, color), f"  {util_word} ",
                              bar(None if util is None else util / 100, util_w, util_color),
                              f" {fmt.pct(util):>4}", tail)
        spark_w = max(4, (width - 3 - 4 - 7 - 6 - wider) // 2)
        label = range_label(span)
        mem_history, util_history = history(spark_w)
        line2 = Text.assemble(
            "   ", (f"{mem} ", "dim"), (spark(mem_history, 0, 1), color or look.palette.ok),
            (f"  {util_word} ", "dim"), (spark(util_history, 0, 1), util_color), (f" {label}", "dim"))
        line1.truncate(width)
        line2.truncate(width)
        return Text("\n").join([line1, line2])
    # One line: index, name, bar, used/total, %, memory history, util %, util history, temp, power.
    fixed = 3 + 1 + len(mem_text) + 1 + 7 + 4 + 1 + cells(tail) + cells(util_word) - 4
    room = max(12, width - fixed)
    name_w = min(wanted, max(5, room // 4))
    bar_w = max(3, min(20, (room - name_w) // 3))
    spark_w = max(2, (room - name_w - bar_w - 2) // 2)
    mem_history, util_history = history(spark_w)
    line = Text.assemble(index, pad(fit(name, name_w), name_w) + " ", bar(frac, bar_w, color), (mem_text, color), " ",
                         (spark(mem_history, 0, 1), color or look.palette.ok),
                         f" {util_word} {fmt.pct(util):>4} ", (spark(util_history, 0, 1), util_color),
                         tail)
    if line.cell_len > width:  # too narrow for the histories (beside a scrollbar at 60 columns): the power draw
        # stays. Measured, not estimated from `room`: 2-cell histories fit 58 to 60 columns (62 in Chinese).
        line = Text.assemble(index, pad(fit(name, name_w), name_w) + " ", bar(frac, bar_w, color), (mem_text, color),
                             f" {util_word} {fmt.pct(util):>4}", tail)
    line.truncate(width)
    return line


def users_text(procs: list[GpuProcess], width: int) -> Text:
    """The memory each user holds now on the GPUs shown (the sum of their processes), most first,
    on one line: as many users as fit, then how many more."""
    held: dict[str, int] = {}
    for p in procs:
        user = p.user or "?"
        held[user] = held.get(user, 0) + (p.memory or 0)
    out = Text(_("users") + " ", style="dim")
    if not held:
        out.append(_("none hold GPU memory"), style="dim")
        return out
    ranked = sorted(held.items(), key=lambda item: (-item[1], item[0]))
    for i, (user, memory) in enumerate(ranked):
        entry = Text.assemble((fit(user, 16), "bold"), f" {format_size(memory)}")
        more = "  " + _more(len(ranked) - i - 1) if i < len(ranked) - 1 else ""
        if i and out.cell_len + 2 + entry.cell_len + cells(more) > width:
            out.append("  " + _more(len(ranked) - i), style="dim")
            break
        if i:
            out.append("  ")
        out.append_text(entry)
    out.truncate(width)
    return out


def _more(n: int) -> str:
    """'+3 more': the users left out of the users line."""
    return ngettext("+{n} more", "+{n} more", n).format(n=n)


def alerts_text(alerts: list[Alert], width: int, max_lines: int, look: Look = PLAIN) -> Text:
    if not alerts:
        return Text(_("no alerts"), style="dim")
    lines = []
    shown = alerts if len(alerts) <= max_lines else alerts[: max(1, max_lines - 1)]
    for a in shown:
        mark, style = ("▲", f"bold {look.palette.critical}") if a.severity == "critical" else ("●", look.palette.warn)
        line = Text.assemble((mark + " ", style), a.message)
        line.truncate(width, overflow="ellipsis")
        lines.append(line)
    if len(shown) < len(alerts):
        hidden = len(alerts) - len(shown)
        lines.append(Text("  " + ngettext("+{n} more alert (a: list all)", "+{n} more alerts (a: list all)",
                                          hidden).format(n=hidden), style="dim"))
    return Text("\n").join(lines)


def host_text(load: HostLoad | None, cpu_percent: float | None, width: int, look: Look = PLAIN) -> Text:
    """The host's CPU, RAM and swap on one line (CPU % over the last refresh; N/A on the first)."""
    if load is None:
        return Text(_("host: /proc/stat cannot be read"), style="dim")
    used = None if load.mem_total is None or load.mem_available is None else load.mem_total - load.mem_available
    swap_used = None if load.swap_total is None or load.swap_free is None else load.swap_total - load.swap_free
    bars = width >= 100
    out = Text(_("host") + " ", style="dim")
    out.append(_("CPU {percent} of {cpus}").format(percent=f"{fmt.pct(cpu_percent):>4}", cpus=load.cpus))
    if bars:
        out.append(" ")
        out.append_text(bar(None if cpu_percent is None else cpu_percent / 100, 10, look.palette.util))
    ram = None if used is None or not load.mem_total else used / load.mem_total
    out.append("   " + _("RAM") + " ")
    out.append(fmt.memory_pair(used, load.mem_total), style=look.level(ram))
    if bars:
        out.append(" ")
        out.append_text(bar(ram, 10, look.level(ram)))
    if load.swap_total == 0:
        out.append("   " + _("swap none"), style="dim")
    else:
        swap = None if swap_used is None or not load.swap_total else swap_used / load.swap_total
        out.append("   " + _("swap") + " ")
        out.append(fmt.memory_pair(swap_used, load.swap_total), style=look.level(swap))
    out.truncate(width)
    return out
