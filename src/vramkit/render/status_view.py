"""`vram status`: a block per GPU (memory bar, used/total, utilization, temperature, power)
followed by who holds memory on it."""

from __future__ import annotations

from ..gpu_state import Device, Snapshot
from ..units import format_size
from . import fmt
from .banner import banner
from .style import Style, clip
from .text_width import cells, fit, pad


def layout(width: int) -> tuple[int, int, int]:
    """(memory bar, utilization bar, name) widths that keep a GPU line within `width` columns:
    115 columns at full size, 80 with the utilization bar dropped and shorter bars."""
    if width >= 115:
        return 24, 10, 20
    if width >= 100:
        return 16, 6, 20
    return max(4, min(16, width - 71)), 0, 14


def _extras(dev: Device, video: bool) -> str:
    """After the power: the fan where the GPU has one, and (`video`) the video encoder and decoder
    while either is in use. Nothing for what is N/A: most GPUs have no fan, most never encode."""
    text = f" fan {fmt.pct(dev.fan):>4}" if dev.fan is not None else ""
    if video and (dev.encoder_utilization or dev.decoder_utilization):
        text += f"  enc {fmt.pct(dev.encoder_utilization):>4} dec {fmt.pct(dev.decoder_utilization):>4}"
    return text


MIN_LINE = 80  # a GPU line's columns without its extras: fan and video use show only beyond it


def extras_fit(gpus: list[Device], width: int) -> tuple[dict[int, str], int]:
    """Each GPU's extras and the columns they take: fan and video use where both fit beside a line
    of MIN_LINE columns, else the fan only, else none; the same columns for every GPU, so the
    bars (which shrink to make room) line up down the page."""
    for video in (True, False):
        extras = {g.index: _extras(g, video) for g in gpus if not g.lost}
        taken = max(map(cells, extras.values()), default=0)
        if width - taken >= MIN_LINE:
            return extras, taken
    return {}, 0


def _gpu_line(dev: Device, style: Style, width: int, extras: str = "") -> str:
    """`width`: for the line without `extras`, which go after it."""
    index = style.paint(f"{dev.index:>2}", "bold")
    if dev.lost:
        return f"{index}  {style.paint('LOST', 'red', 'bold')}  {dev.error}"
    mem_w, util_w, name_w = layout(width)
    frac = fmt.mem_fraction(dev)
    mem_bar = style.bar(frac, mem_w, style.level(frac))
    share = fmt.pct(None if frac is None else 100 * frac)
    mem_text = f"{fmt.memory_pair(dev.memory_used, dev.memory_total):>14} {share:>4}"
    util = dev.utilization
    util_bar = (style.bar(None if util is None else util / 100, util_w, "cyan") + " ") if util_w else ""
    name = pad(clip(fmt.short_gpu_name(dev.name), name_w), name_w)
    return (f"{index}  {name} mem {mem_bar} {style.paint(mem_text, style.level(frac))}"
            f"  util {util_bar}{fmt.pct(util):>4}  {fmt.temp(dev.temperature):>5} {fmt.power(dev):>9}{extras}")


def _mig_lines(dev: Device, style: Style) -> list[str]:
    lines = []
    for m in dev.mig_devices:
        frac = None if m.memory_used is None or not m.memory_total else m.memory_used / m.memory_total
        label = f"MIG gi {m.gi}" if dev.vendor == "nvidia" else f"part {m.gi}"  # an AMD partition (DPX, CPX)
        profile = (m.name or "").rsplit(" ", 1)[-1]
        lines.append(f"      {label:<9} {profile:<9} mem {style.bar(frac, 16, style.level(frac))} "
                     f"{fmt.memory_pair(m.memory_used, m.memory_total)}")
    return lines


def processes_unknown(dev: Device) -> str | None:
    """Why NVML could not list this GPU's processes ("no permission", "not supported"), or None
    when it could: an empty list then is not "no processes"."""
    return None if dev.lost else dev.na.get("processes")


USER_W = 10  # the user column's width, in terminal columns; longer names widen it for all GPUs...
USER_MAX = 20  # ...up to this, and are cut beyond it


def user_width(gpus: list[Device]) -> int:
    """One user column width for every GPU's holder lines, so the pids line up down the page."""
    return min(USER_MAX, max([USER_W] + [cells(p.user or "?") for dev in gpus for p in dev.processes]))


def _holder_lines(dev: Device, style: Style, width: int, wide: bool = False, user_w: int = USER_W) -> list[str]:
    procs = sorted(dev.processes, key=lambda p: -(p.memory or 0))
    lines = []
    for p in procs:
        user = pad(fit(p.user or "?", user_w), user_w)  # display width: a CJK name is twice its len()
        flags = fmt.flags(p)
        flag_text = style.paint(" [" + ",".join(flags) + "]", "yellow") if flags else ""
        owner = fmt.owner(p)
        if owner is not None and not wide:
            owner = fit(owner, fmt.OWNER_MAX)
        if owner is not None:  # whom it works for: after the command, as the flags are
            flag_text += style.paint(f" [{owner}]", "cyan")
        mig = f" gi{p.mig_gi}" if p.mig_gi is not None else ""
        # sm: the process's own share of the time kernels ran (its GPU's is "util" above)
        head = (f"      {format_size(p.memory):>8}  {user} {fmt.pid(p):>7}{mig}  {fmt.elapsed(p):>7}"
                f"  sm {fmt.pct(p.sm_utilization):>4}  ")
        command = p.command if p.command is not None else f"({p.host_missing})"
        room = width - cells(head) - (len(",".join(flags)) + 3 if flags else 0) - (cells(owner) + 3 if owner else 0)
        lines.append(head + (command if wide else clip(command, max(10, room))) + flag_text)
    lines.extend(style.paint(clip(f"      {note}", width), "yellow") for note in fmt.namespace_notes(procs))
    unknown = processes_unknown(dev)
    if unknown is not None:
        lines.append(style.paint(f"      processes unknown ({unknown})", "yellow"))
    elif not procs and not dev.lost:
        lines.append(style.paint("      no processes", "dim"))
    return lines


def _holders_by_user(dev: Device) -> str:
    """Who holds memory on a GPU, per user, largest first: 'bob 70.6GiB, alice 2.0GiB'."""
    unknown = processes_unknown(dev)
    if unknown is not None:
        return f"processes unknown ({unknown})"
    held: dict[str, int] = {}
    for p in dev.processes:
        held[p.user or "?"] = held.get(p.user or "?", 0) + (p.memory or 0)
    if not held:
        return "-"
    return ", ".join(f"{user} {format_size(size)}" for user, size in sorted(held.items(), key=lambda kv: -kv[1]))


def _compact_line(dev: Device, style: Style, width: int) -> str:
    """One GPU on one line: index, name, memory used/total and %, utilization, temperature,
    power, and its holders per user (cut to the width; never less than 10 columns of them)."""
    index = style.paint(f"{dev.index:>2}", "bold")
    if dev.lost:
        return f"{index}  {style.paint('LOST', 'red', 'bold')}  {dev.error}"
    frac = fmt.mem_fraction(dev)
    share = fmt.pct(None if frac is None else 100 * frac)
    mem_text = f"{fmt.memory_pair(dev.memory_used, dev.memory_total):>14} {share:>4}"
    name = pad(clip(fmt.short_gpu_name(dev.name), 14), 14)
    head = (f"{fmt.pct(dev.utilization):>4} util  {fmt.temp(dev.temperature):>5} {fmt.power(dev):>9}  ")
    plain = f"{dev.index:>2}  {name} {mem_text}  {head}"
    holders = clip(_holders_by_user(dev), max(10, width - cells(plain)))
    return f"{index}  {name} {style.paint(mem_text, style.level(frac))}  {head}{holders}"


def _summary(snap: Snapshot, style: Style) -> str:
    total_used = sum(g.memory_used or 0 for g in snap.gpus)
    total = sum(g.memory_total or 0 for g in snap.gpus)
    lost = sum(1 for g in snap.gpus if g.lost)
    # A process on four GPUs is one process (snap.processes has a row per process and GPU).
    pids = len({p.pid for p in snap.processes})
    summary = (f"total {format_size(total_used)} of {format_size(total)} used by "
               f"{fmt.count(pids, 'process', 'processes')}")
    unknown = sum(1 for g in snap.gpus if processes_unknown(g) is not None)
    if unknown:
        summary += f" (processes unknown on {fmt.count(unknown, 'GPU')})"
    if lost:
        summary += style.paint(f"; {fmt.count(lost, 'GPU')} lost", "red")
    return style.paint(summary, "dim")


def render_compact(snap: Snapshot, style: Style, width: int, total: int | None = None) -> str:
    """`vram status --compact`: the banner, one line per GPU, the total."""
    lines = [banner(snap, style, width, total)]
    lines.extend(_compact_line(dev, style, width) for dev in snap.gpus)
    lines.append(_summary(snap, style))
    return "\n".join(lines)


def render_status(snap: Snapshot, style: Style, width: int, total: int | None = None, wide: bool = False,
                  processes: bool = True) -> str:
    """`total`: the machine's GPU count when `snap.gpus` is filtered (--gpu); `wide`: never cut a
    command; `processes`: the holder lines under each GPU (--no-processes: none)."""
    lines = [banner(snap, style, width, total)]
    user_w = user_width(snap.gpus)
    extras, taken = extras_fit(snap.gpus, width)
    for dev in snap.gpus:
        lines.append(_gpu_line(dev, style, width - taken, extras.get(dev.index, "")))
        lines.extend(_mig_lines(dev, style))
        if processes:
            lines.extend(_holder_lines(dev, style, width, wide, user_w))
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
            text = "; ".join(f"{', '.join(sorted(k for k in na if na[k] == r))}: {r}" for r in reasons)
            lines.append(style.paint(f"      N/A  {text}", "dim"))
    if processes:
        lines.extend(style.paint(clip(note, width), "dim") for note in fmt.workload_notes(snap.processes))
    lines.append(_summary(snap, style))
    return "\n".join(lines)
