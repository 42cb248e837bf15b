"""`vram plan` as text: fits or not, the largest batch, the changes that make it fit, GPUs that fit."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..i18n import _, join_words
from ..units import format_size
from .style import Style
from .text_width import pad

if TYPE_CHECKING:
    from ..estimator.planner import Plan


def render_plan(p: Plan, style: Style) -> str:
    e = p.estimate
    verdict = style.paint(_("FITS"), "green", "bold") if p.fits else style.paint(_("DOES NOT FIT"), "red", "bold")
    lines = [_("{model} on {gpu} ({capacity}): {verdict}  ·  needs ~{need} as nvidia-smi would show it (estimate)")
             .format(model=p.model, gpu=p.gpu, capacity=format_size(p.capacity_bytes), verdict=verdict,
                     need=format_size(e.total_bytes))]
    train = e.setup.mode == "train"
    if p.max_batch:
        lines.append((_("largest micro-batch that fits: {batch}") if train else
                      _("largest batch that fits: {batch}")).format(batch=p.max_batch))
    else:
        lines.append(_("not even micro-batch 1 fits as set up") if train else _("not even batch 1 fits as set up"))
    if p.changes:
        lines.append("")
        lines.append(_("changes, cheapest first (memory each needs):"))
        fits, too_big = style.paint(_("fits"), "green"), style.paint(_("too big"), "dim")
        for c in p.changes:
            lines.append(f"  {pad(c.what, 52)}{format_size(c.total_bytes):>9}  {fits if c.fits else too_big}")
    lines.append("")
    if p.gpus_that_fit:
        names = join_words([f"{n} ({format_size(m)})" for n, m in p.gpus_that_fit[:8]])
        lines.append(_("GPUs that fit it unchanged: {gpus}").format(gpus=names))
    else:
        lines.append(_("no single catalog GPU fits it unchanged"))
    return "\n".join(lines)


def plan_json(p: Plan) -> str:
    return json.dumps(p.to_dict(), indent=2)
