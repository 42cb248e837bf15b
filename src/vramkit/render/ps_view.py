"""`vram ps`: one row per (process, GPU)."""

from __future__ import annotations

from ..gpu_state import Device, GpuProcess, Snapshot
from ..i18n import _, pgettext
from ..units import format_size
from . import fmt
from .banner import banner
from .status_view import processes_unknown
from .style import Style, clip
from .text_width import cells, fit, pad

# %GPU: the share of the GPU's memory the process holds (of its MIG instance's, in one). SM% MBW%
# ENC% DEC%: the process's own utilization (kernels, memory bandwidth, video encoder and decoder);
# its GPU's is on `vram status`.
HEADER = ("GPU", "PID", "USER", "MEMORY", "%GPU", "SM%", "MBW%", "ENC%", "DEC%", "CPU%", "RSS", "ELAPSED",
          "FLAGS", "COMMAND")
# OWNER (container, pod, Slurm job: fmt.owner) stands before COMMAND when a listed process has one.
OWNER_HEADER = (*HEADER[:-1], "OWNER", HEADER[-1])
RIGHT = {"GPU", "PID", "MEMORY", "%GPU", "SM%", "MBW%", "ENC%", "DEC%", "CPU%", "RSS", "ELAPSED"}


def headings() -> dict[str, str]:
    """The columns' headings in the reader's words (HEADER's names stay the columns' keys)."""
    # Translators: vram ps's column headings. %GPU: the share of the GPU's memory a process holds;
    # SM% MBW% ENC% DEC%: its own use of the GPU's kernels, memory bandwidth, video encoder, decoder;
    # RSS: its host memory; ELAPSED: how long it has run
    return {"GPU": pgettext("column", "GPU"), "PID": pgettext("column", "PID"), "USER": pgettext("column", "USER"),
            "MEMORY": pgettext("column", "MEMORY"), "%GPU": pgettext("column", "%GPU"),
            "SM%": pgettext("column", "SM%"), "MBW%": pgettext("column", "MBW%"), "ENC%": pgettext("column", "ENC%"),
            "DEC%": pgettext("column", "DEC%"), "CPU%": pgettext("column", "CPU%"), "RSS": pgettext("column", "RSS"),
            "ELAPSED": pgettext("column", "ELAPSED"), "FLAGS": pgettext("column", "FLAGS"),
            "OWNER": pgettext("column", "OWNER"), "COMMAND": pgettext("column", "COMMAND")}


def _row(snap_gpus: dict[int, Device], p: GpuProcess, owners: bool, flag_words: dict[str, str]) -> list[str]:
    share = fmt.memory_share(p, snap_gpus.get(p.gpu))
    gpu = f"{p.gpu}" if p.mig_gi is None else f"{p.gpu}/{p.mig_gi}"
    return [
        gpu, fmt.pid(p), p.user or "?", format_size(p.memory), fmt.pct(share), fmt.pct(p.sm_utilization),
        fmt.pct(p.memory_utilization), fmt.pct(p.encoder_utilization), fmt.pct(p.decoder_utilization),
        "N/A" if p.cpu_percent is None else f"{p.cpu_percent:.0f}", format_size(p.rss), fmt.elapsed(p),
        ",".join(flag_words[f] for f in fmt.flags(p)) or "-",
        *([fmt.owner(p) or "-"] if owners else []),
        p.command if p.command is not None else f"({fmt.missing(p)})",
    ]


def utilization_unknown(procs: list[GpuProcess]) -> list[str]:
    """A line per GPU (and reason) whose processes' own utilization is N/A: why it is."""
    reasons: dict[tuple[int, str], None] = {}
    for p in procs:
        if p.utilization_na is not None:
            reasons[(p.gpu, p.utilization_na)] = None
    return [_("GPU {index}: per-process utilization N/A ({reason})").format(index=gpu, reason=fmt.reason(why))
            for gpu, why in sorted(reasons)]


# A user name longer than this (a 31-character LDAP name) is cut with an ellipsis, measured in
# display columns, so the command keeps its room; --wide shows it whole, --json and --csv always do.
USER_MAX = 12

# Columns given up, in this order, when the terminal is too narrow for a readable command.
DROP_ORDER = ("DEC%", "ENC%", "RSS", "MBW%", "CPU%", "%GPU", "SM%")
MIN_COMMAND = 24


def render_ps(snap: Snapshot, procs: list[GpuProcess], style: Style, width: int, total: int | None = None,
              wide: bool = False) -> str:
    """`snap.gpus`: the GPUs shown (--gpu); `total`: the machine's GPU count when that is a subset;
    `wide`: never cut the command (else it is cut at `width`)."""
    by_index = {g.index: g for g in snap.gpus}
    owners = any(fmt.owner(p) is not None for p in procs)
    header = OWNER_HEADER if owners else HEADER
    words = headings()
    rows = [_row(by_index, p, owners, fmt.flag_words()) for p in procs]
    if not wide:
        user = header.index("USER")
        for r in rows:
            r[user] = fit(r[user], USER_MAX)
            if owners:
                r[-2] = fit(r[-2], fmt.OWNER_MAX)
    # Display widths, not len(): a user name in CJK takes two columns a character.
    widths = {h: max([cells(words[h])] + [cells(r[i]) for r in rows]) for i, h in enumerate(header[:-1])}
    shown = list(header[:-1])
    for column in DROP_ORDER:
        if sum(widths[h] + 2 for h in shown) + MIN_COMMAND <= width:
            break
        shown.remove(column)
    keep = [header.index(h) for h in shown]

    def line(values: list[str]) -> str:
        parts = [pad(values[i], widths[header[i]], header[i] in RIGHT) for i in keep]
        head = "  ".join(parts) + "  "
        return head + (values[-1] if wide else clip(values[-1], max(1, width - cells(head))))

    out = [banner(snap, style, width, total), style.paint(line([words[h] for h in header]), "bold")]
    out.extend(line(r) for r in rows)
    # A GPU whose process list NVML cannot give has no rows: that is not "no processes".
    unknown = [(g.index, reason) for g in snap.gpus if (reason := processes_unknown(g)) is not None]
    out.extend(style.paint(_("GPU {index}: processes unknown ({reason})").format(
        index=index, reason=fmt.reason(reason)), "yellow") for index, reason in unknown)
    out.extend(style.paint(clip(line, width), "dim") for line in utilization_unknown(procs))
    out.extend(style.paint(clip(line, width), "dim") for line in fmt.workload_notes(procs))
    out.extend(style.paint(clip(line, width), "yellow") for line in fmt.namespace_notes(procs))
    if not rows and not unknown:
        out.append(style.paint(_("no GPU processes"), "dim"))
    elif not rows and len(unknown) < len(snap.gpus):
        out.append(style.paint(_("no GPU processes on the other GPUs"), "dim"))
    return "\n".join(out)
