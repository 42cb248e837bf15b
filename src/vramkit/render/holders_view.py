"""`vram ps --holders`: the processes that hold the GPU device files open, as `fuser -v
/dev/nvidia*` shows them, with whether NVML lists GPU memory for each."""

from __future__ import annotations

import os
import time
from typing import Any

from ..holders import Holder, HolderScan
from ..i18n import _, pgettext
from ..procs.namespaces import orphaned
from ..units import format_duration, format_size
from .style import Style, clip
from .text_width import cells, pad

HEADER = ("PID", "USER", "DEVICES", "GPU", "NVML", "ELAPSED", "FLAGS")
RIGHT = {"PID", "ELAPSED"}


def _headings() -> list[str]:
    """HEADER and COMMAND in the reader's language."""
    return [pgettext("column", "PID"), pgettext("column", "USER"), pgettext("column", "DEVICES"),
            pgettext("column", "GPU"), pgettext("column", "NVML"), pgettext("column", "ELAPSED"),
            pgettext("column", "FLAGS"), pgettext("column", "COMMAND")]


def devices_text(h: Holder) -> str:
    return ",".join(os.path.basename(d) for d in h.devices)


def _nvml(h: Holder) -> str:
    if not h.nvml_listed:
        return pgettext("holder", "not listed")
    known = [m for m in h.nvml_memory.values() if m is not None]
    return format_size(sum(known)) if known else "N/A"


def _flags(h: Holder) -> str:
    out = []
    if h.host.state == "zombie":
        out.append("zombie")
    if orphaned(h.pid, h.host.ppid, h.host.real):
        out.append("orphan")
    if h.host.container:
        out.append("container")
    return ",".join(out) or "-"


def _details(h: Holder) -> list[str]:
    if len(h.ns_pids) > 1:
        if h.host.container:
            return [_("runs in container {container} as pid {pid}").format(container=h.host.container,
                                                                           pid=h.ns_pids[-1])]
        return [_("runs in another PID namespace as pid {pid}").format(pid=h.ns_pids[-1])]
    return []


def render_holders(result: HolderScan, style: Style, width: int, now: float | None = None) -> str:
    now = time.time() if now is None else now
    if result.pattern is None:
        title = _("processes holding GPU device files open: {n}")
    else:
        title = _("processes holding {pattern} open (as fuser -v shows them): {n}")
    lines = [style.paint(title.format(pattern=result.pattern, n=len(result.holders)), "bold")]
    rows = [[str(h.pid), h.host.user or "?", clip(devices_text(h), 40), ",".join(map(str, h.gpus)) or "-",
             _nvml(h), format_duration(now - h.host.start_time), _flags(h)] for h in result.holders]
    if rows:
        shown = _headings()
        widths = [max([cells(head)] + [cells(r[i]) for r in rows]) for i, head in enumerate(shown[:-1])]

        def row(values: list[str]) -> str:  # padded by display width: a CJK user name is 2 columns a character
            return "  ".join(pad(v, w, right=hd in RIGHT) for v, w, hd in zip(values, widths, HEADER))

        lead = sum(widths) + 2 * len(widths)
        lines.append(style.paint(row(shown[:-1]) + "  " + shown[-1], "bold"))
        for h, r in zip(result.holders, rows):
            nvml = r[4]
            line = row(r) + "  " + clip(h.host.command, max(10, width - lead))
            if not h.nvml_listed:
                line = line.replace(nvml, style.paint(nvml, "yellow"), 1)
            lines.append(line)
            lines.extend(style.paint(" " * (widths[0] + 2) + d, "dim") for d in _details(h))
    lines.extend(style.paint(n, "dim") for n in result.notes)
    if result.skipped_self:
        lines.append(style.paint(_("(vram itself holds the device files while it reads NVML: not listed)"), "dim"))
    return "\n".join(lines)


def holder_dict(h: Holder, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    return {
        "pid": h.pid, "user": h.host.user, "uid": h.host.uid, "command": h.host.command, "name": h.host.name,
        "state": h.host.state, "ppid": h.host.ppid, "start_time": round(h.host.start_time, 3),
        "elapsed": round(max(0.0, now - h.host.start_time), 1), "container": h.host.container,
        "namespace_pids": list(h.ns_pids), "devices": list(h.devices), "gpus": list(h.gpus),
        "nvml_listed": h.nvml_listed,
        "nvml_memory": [{"gpu": g, "memory": m} for g, m in sorted(h.nvml_memory.items())],
        # the same under vendor-neutral names (whichever driver lists it: NVML, amdsmi, KFD)
        "driver_listed": h.nvml_listed,
        "driver_memory": [{"gpu": g, "memory": m} for g, m in sorted(h.nvml_memory.items())],
    }


def holders_json(result: HolderScan, now: float | None = None) -> dict[str, Any]:
    """The keys `vram ps --holders --json` adds to `vram ps --json`."""
    return {"device_nodes": result.pattern, "holders": [holder_dict(h, now) for h in result.holders],
            "holders_unreadable": result.unreadable, "holders_notes": list(result.notes)}
