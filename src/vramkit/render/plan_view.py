"""`vram plan` as text: fits or not, the largest batch, the changes that make it fit, GPUs that fit."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..units import format_size
from .style import Style

if TYPE_CHECKING:
    from ..estimator.planner import Plan


def render_plan(p: Plan, style: Style) -> str:
    e = p.estimate
    verdict = style.paint("FITS", "green", "bold") if p.fits else style.paint("DOES NOT FIT", "red", "bold")
    lines = [f"{p.model} on {p.gpu} ({format_size(p.capacity_bytes)}): {verdict}  ·  needs ~"
             f"{format_size(e.total_bytes)} as nvidia-smi would show it (estimate)"]
    what = "micro-batch" if e.setup.mode == "train" else "batch"
    if p.max_batch:
        lines.append(f"largest {what} that fits: {p.max_batch}")
    else:
        lines.append(f"not even {what} 1 fits as set up")
    if p.changes:
        lines.append("")
        lines.append("changes, cheapest first (memory each needs):")
        for c in p.changes:
            mark = style.paint("fits", "green") if c.fits else style.paint("too big", "dim")
            lines.append(f"  {c.what:<52}{format_size(c.total_bytes):>9}  {mark}")
    lines.append("")
    if p.gpus_that_fit:
        names = ", ".join(f"{n} ({format_size(m)})" for n, m in p.gpus_that_fit[:8])
        lines.append(f"GPUs that fit it unchanged: {names}")
    else:
        lines.append("no single catalog GPU fits it unchanged")
    return "\n".join(lines)


def plan_json(p: Plan) -> str:
    return json.dumps(p.to_dict(), indent=2)
