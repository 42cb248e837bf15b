"""The line above every view: what machine this is, and plainly whether it is simulated."""

from __future__ import annotations

import os
import time

from ..gpu_state import Snapshot
from ..i18n import _, ngettext
from .style import Style
from .text_width import cells


def hostname(snap: Snapshot) -> str | None:
    """The machine a snapshot is of: this host's name, or None for a simulated machine (it is
    not this host)."""
    return None if snap.simulated else os.uname().nodename


def banner(snap: Snapshot, style: Style, width: int = 200, total: int | None = None) -> str:
    """One line, or more on a narrow terminal: parts are never cut, so nothing is lost.

    `total`: the machine's GPU count when `snap.gpus` is a filtered subset (--gpu), which is
    then shown as "2 of 8 GPUs"."""
    parts: list[tuple[str, tuple[str, ...]]] = []
    host = hostname(snap)
    if host:  # a real machine: which one (a simulated machine is not this host)
        parts.append((host, ("bold",)))
    if snap.simulated:
        parts.append((_("SIMULATED machine (scenario '{scenario}'), not real GPUs").format(scenario=snap.scenario),
                      ("magenta", "bold")))
    if snap.driver_version:
        parts.append((_("driver {version}").format(version=snap.driver_version), ()))
    if snap.cuda_version:
        parts.append((f"CUDA {snap.cuda_version}", ()))
    shown = len(snap.gpus)
    if total is not None and total != shown:
        parts.append((ngettext("{shown} of {total} GPU", "{shown} of {total} GPUs", total).format(
            shown=shown, total=total), ()))
    else:
        parts.append((ngettext("{n} GPU", "{n} GPUs", shown).format(n=shown), ()))
    parts.append((time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snap.time)), ()))
    lines: list[str] = []
    line, used = "", 0
    for text, styles in parts:
        if used and used + 5 + cells(text) > width:
            lines.append(line)
            line, used = "", 0
        line += ("  ·  " if used else "") + style.paint(text, *styles)
        used += (5 if used else 0) + cells(text)
    lines.append(line)
    return "\n".join(lines)
