"""`vram status`: a block per GPU (memory bar, used/total, utilization, temperature, power)
followed by who holds memory on it."""

from __future__ import annotations

from ..gpu_state import Device, Snapshot
from ..i18n import _, ngettext, pgettext, translation
from ..units import format_size
from . import fmt
from .banner import banner
from .style import Style, clip
from .text_width import cells, fit, pad


class Words:
    """The words of a GPU's lines in the reader's language, looked up once per screen (not per GPU
    or row: `vram status --watch` redraws them every second)."""

    __slots__ = ("mem", "util", "sm", "fan", "enc", "dec", "lost", "label_extra", "flags", "mig", "part",
                 "no_processes")

    def __init__(self) -> None:
        # Translators: short labels before a GPU's memory bar, its utilization, a process's own SM use
        self.mem = pgettext("status", "mem")
        self.util = pgettext("status", "util")
        self.sm = pgettext("status", "sm")
        self.fan = pgettext("status", "fan")
        self.enc = pgettext("status", "enc")
        self.dec = pgettext("status", "dec")
        self.lost = pgettext("status", "LOST")
        self.mig = pgettext("status", "MIG gi")
        self.part = pgettext("status", "part")
        self.no_processes = _("no processes")
        # the columns the labels take beyond the English ones' (layout() counts those)
        self.label_extra = cells(self.mem) - 3 + cells(self.util) - 4
        self.flags = fmt.flag_words()


_cached: tuple[object, Words] | None = None  # (the catalog they were looked up in, the words)


def screen_words() -> Words:
    """The Words of the process's language, looked up once (again only when the language changes:
    tests, i18n.reset()); `vram status --watch` and the live view redraw without a lookup."""
    global _cached
    catalog = translation()
    if _cached is None or _cached[0] is not catalog:
        _cached = (catalog, Words())
    return _cached[1]


def layout(width: int) -> tuple[int, int, int]:
    """(memory bar, utilization bar, name) widths that keep a GPU line within `width` columns:
    115 columns at full size, 80 with the utilization bar dropped and shorter bars."""
    if width >= 115:
        return 24, 10, 20
    if width >= 100:
        return 16, 6, 20
    return max(4, min(16, width - 71)), 0, 14


def _extras(dev: Device, video: bool, words: Words) -> str:
    """After the power: the fan where the GPU has one, and (`video`) the video encoder and decoder
    while either is in use. Nothing for what is N/A: most GPUs have no fan, most never encode."""
    text = f" {words.fan} {fmt.pct(dev.fan):>4}" if dev.fan is not None else ""
    if video and (dev.encoder_utilization or dev.decoder_utilization):
        text += (f"  {words.enc} {fmt.pct(dev.encoder_utilization):>4}"
                 f" {words.dec} {fmt.pct(dev.decoder_utilization):>4}")
    return text


MIN_LINE = 80  # a GPU line's columns without its extras: fan and video use show only beyond it


def extras_fit(gpus: list[Device], width: int, words: Words | None = None) -> tuple[dict[int, str], int]:
    """Each GPU's extras and the columns they take: fan and video use where both fit beside a line
    of MIN_LINE columns, else the fan only, else none; the same columns for every GPU, so the
    bars (which shrink to make room) line up down the page."""
    words = words or screen_words()
    for video in (True, False):
        extras = {g.index: _extras(g, video, words) for g in gpus if not g.lost}
        taken = max(map(cells, extras.values()), default=0)
        if width - taken >= MIN_LINE:
            return extras, taken
    return {}, 0


def _gpu_line(dev: Device, style: Style, width: int, extras: str, words: Words) -> str:
    """`width`: for the line without `extras`, which go after it."""
    index = style.paint(f"{dev.index:>2}", "bold")
    if dev.lost:
        return f"{index}  {style.paint(words.lost, 'red', 'bold')}  {fmt.reason(dev.error or '')}"
    mem_w, util_w, name_w = layout(width)
    if words.label_extra:  # longer labels than the English ones: the memory bar gives the room
        mem_w = max(2, mem_w - words.label_extra)
    frac = fmt.mem_fraction(dev)
    mem_bar = style.bar(frac, mem_w, style.level(frac))
    share = fmt.pct(None if frac is None else 100 * frac)
    mem_text = f"{fmt.memory_pair(dev.memory_used, dev.memory_total):>14} {share:>4}"
    util = dev.utilization
    util_bar = (style.bar(None if util is None else util / 100, util_w, "cyan") + " ") if util_w else ""
    name = pad(clip(fmt.short_gpu_name(dev.name), name_w), name_w)
    return (f"{index}  {name} {words.mem} {mem_bar} {style.paint(mem_text, style.level(frac))}"
            f"  {words.util} {util_bar}{fmt.pct(util):>4}  {fmt.temp(dev.temperature):>5} {fmt.power(dev):>9}{extras}")


def _mig_lines(dev: Device, style: Style, words: Words) -> list[str]:
    lines = []
    for m in dev.mig_devices:
        frac = None if m.memory_used is None or not m.memory_total else m.memory_used / m.memory_total
        # an AMD partition (DPX, CPX): "part"
        label = pad(f"{words.mig if dev.vendor == 'nvidia' else words.part} {m.gi}", 9)
        profile = (m.name or "").rsplit(" ", 1)[-1]
        lines.append(f"      {label} {profile:<9} {words.mem} {style.bar(frac, 16, style.level(frac))} "
                     f"{fmt.memory_pair(m.memory_used, m.memory_total)}")
    return lines


def processes_unknown(dev: Device) -> str | None:
    """Why NVML could not list this GPU's processes ("no permission", "not supported"), or None
    when it could: an empty list then is not "no processes". In English (the JSON's): fmt.reason()
    for people."""
    return None if dev.lost else dev.na.get("processes")


USER_W = 10  # the user column's width, in terminal columns; longer names widen it for all GPUs...
USER_MAX = 20  # ...up to this, and are cut beyond it


def user_width(gpus: list[Device]) -> int:
    """One user column width for every GPU's holder lines, so the pids line up down the page."""
    return min(USER_MAX, max([USER_W] + [cells(p.user or "?") for dev in gpus for p in dev.processes]))


def _holder_lines(dev: Device, style: Style, width: int, wide: bool, user_w: int, words: Words) -> list[str]:
    procs = sorted(dev.processes, key=lambda p: -(p.memory or 0))
    lines = []
    for p in procs:
        user = pad(fit(p.user or "?", user_w), user_w)  # display width: a CJK name is twice its len()
        flags = ",".join(words.flags[f] for f in fmt.flags(p))
        owner = fmt.owner(p)
        if owner is not None and not wide:
            owner = fit(owner, fmt.OWNER_MAX)
        # after the command: its flags, then whom it works for
        tail = [(f" [{flags}]", "yellow")] if flags else []
        if owner is not None:
            tail.append((f" [{owner}]", "cyan"))
        mig = f" gi{p.mig_gi}" if p.mig_gi is not None else ""
        # sm: the process's own share of the time kernels ran (its GPU's is "util" above)
        head = (f"      {format_size(p.memory):>8}  {user} {fmt.pid(p):>7}{mig}  {fmt.elapsed(p):>7}"
                f"  {words.sm} {fmt.pct(p.sm_utilization):>4}  ")
        command = p.command if p.command is not None else f"({fmt.missing(p)})"
        if wide:
            lines.append(head + command + "".join(style.paint(text, color) for text, color in tail))
            continue
        # the command gets the room the tail leaves, but at least 10 columns; the tail is cut to
        # what the command then leaves (longer words than English's can leave it short of room)
        command = clip(command, max(10, width - cells(head) - sum(cells(text) for text, _color in tail)))
        room = width - cells(head) - cells(command)
        for text, color in tail:
            text = fit(text, room) if room >= 2 else ""  # " …" at least, never a … stuck to the command
            room -= cells(text)
            command += style.paint(text, color) if text else ""
        lines.append(head + command)
    lines.extend(style.paint(clip(f"      {note}", width), "yellow") for note in fmt.namespace_notes(procs))
    unknown = processes_unknown(dev)
    if unknown is not None:
        lines.append(style.paint("      " + _("processes unknown ({reason})").format(reason=fmt.reason(unknown)),
                                 "yellow"))
    elif not procs and not dev.lost:
        lines.append(style.paint(f"      {words.no_processes}", "dim"))
    return lines


def _holders_by_user(dev: Device) -> str:
    """Who holds memory on a GPU, per user, largest first: 'bob 70.6GiB, alice 2.0GiB'."""
    unknown = processes_unknown(dev)
    if unknown is not None:
        return _("processes unknown ({reason})").format(reason=fmt.reason(unknown))
    held: dict[str, int] = {}
    for p in dev.processes:
        held[p.user or "?"] = held.get(p.user or "?", 0) + (p.memory or 0)
    if not held:
        return "-"
    return ", ".join(f"{user} {format_size(size)}" for user, size in sorted(held.items(), key=lambda kv: -kv[1]))


def _compact_line(dev: Device, style: Style, width: int, words: Words) -> str:
    """One GPU on one line: index, name, memory used/total and %, utilization, temperature,
    power, and its holders per user (cut to the width; never less than 10 columns of them)."""
    index = style.paint(f"{dev.index:>2}", "bold")
    if dev.lost:
        return f"{index}  {style.paint(words.lost, 'red', 'bold')}  {fmt.reason(dev.error or '')}"
    frac = fmt.mem_fraction(dev)
    share = fmt.pct(None if frac is None else 100 * frac)
    mem_text = f"{fmt.memory_pair(dev.memory_used, dev.memory_total):>14} {share:>4}"
    name = pad(clip(fmt.short_gpu_name(dev.name), 14), 14)
    head = (f"{fmt.pct(dev.utilization):>4} {words.util}  {fmt.temp(dev.temperature):>5} {fmt.power(dev):>9}  ")
    plain = f"{dev.index:>2}  {name} {mem_text}  {head}"
    holders = clip(_holders_by_user(dev), max(10, width - cells(plain)))
    return f"{index}  {name} {style.paint(mem_text, style.level(frac))}  {head}{holders}"


def _summary(snap: Snapshot, style: Style) -> str:
    total_used = sum(g.memory_used or 0 for g in snap.gpus)
    total = sum(g.memory_total or 0 for g in snap.gpus)
    lost = sum(1 for g in snap.gpus if g.lost)
    # A process on four GPUs is one process (snap.processes has a row per process and GPU); inside a
    # container a host pid no process here could be told to be is not the process here of that number.
    pids = len({p.pid_key for p in snap.processes})
    summary = ngettext("total {used} of {total} used by {n} process", "total {used} of {total} used by {n} processes",
                       pids).format(used=format_size(total_used), total=format_size(total), n=pids)
    unknown = sum(1 for g in snap.gpus if processes_unknown(g) is not None)
    if unknown:
        summary += ngettext(" (processes unknown on {n} GPU)", " (processes unknown on {n} GPUs)",
                            unknown).format(n=unknown)
    if lost:
        summary += style.paint(ngettext("; {n} GPU lost", "; {n} GPUs lost", lost).format(n=lost), "red")
    return style.paint(summary, "dim")


def render_compact(snap: Snapshot, style: Style, width: int, total: int | None = None) -> str:
    """`vram status --compact`: the banner, one line per GPU, the total."""
    lines = [banner(snap, style, width, total)]
    words = screen_words()
    lines.extend(_compact_line(dev, style, width, words) for dev in snap.gpus)
    lines.append(_summary(snap, style))
    return "\n".join(lines)


def render_status(snap: Snapshot, style: Style, width: int, total: int | None = None, wide: bool = False,
                  processes: bool = True) -> str:
    """`total`: the machine's GPU count when `snap.gpus` is filtered (--gpu); `wide`: never cut a
    command; `processes`: the holder lines under each GPU (--no-processes: none)."""
    lines = [banner(snap, style, width, total)]
    user_w = user_width(snap.gpus)
    words = screen_words()
    extras, taken = extras_fit(snap.gpus, width, words)
    for dev in snap.gpus:
        lines.append(_gpu_line(dev, style, width - taken, extras.get(dev.index, ""), words))
        lines.extend(_mig_lines(dev, style, words))
        if processes:
            lines.extend(_holder_lines(dev, style, width, wide, user_w, words))
        if dev.health is not None:  # read only under --all; info_view loads only then
            from .info_view import health_lines

            lines.extend(health_lines(dev, style, width))
        # "processes" is said on the holder line ("processes unknown (REASON)"), not twice.
        # a GPU without a fan or video engines is common, not worth a line
        quiet = ("fan", "encoder_utilization", "decoder_utilization", "memory_reserved")
        skip = (*quiet, "processes") if processes else quiet
        na = {k: v for k, v in dev.na.items() if k not in skip}
        if na:
            reasons = sorted(set(na.values()))
            # the fields' names are the JSON's (kept in English); the reasons in the reader's words
            text = "; ".join(f"{', '.join(sorted(k for k in na if na[k] == r))}: {fmt.reason(r)}" for r in reasons)
            lines.append(style.paint(f"      N/A  {text}", "dim"))
    if processes:
        lines.extend(style.paint(clip(note, width), "dim") for note in fmt.workload_notes(snap.processes))
    lines.append(_summary(snap, style))
    return "\n".join(lines)
