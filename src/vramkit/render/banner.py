"""The line above every view: what machine this is, and plainly whether it is simulated."""

from __future__ import annotations

import time

from ..model import Snapshot
from .style import Style


def banner(snap: Snapshot, style: Style) -> str:
    parts = []
    if snap.simulated:
        parts.append(style.paint(f"SIMULATED machine (scenario '{snap.scenario}'), not real GPUs",
                                 "magenta", "bold"))
    if snap.driver_version:
        parts.append(f"driver {snap.driver_version}")
    if snap.cuda_version:
        parts.append(f"CUDA {snap.cuda_version}")
    parts.append(f"{len(snap.gpus)} GPU{'s' if len(snap.gpus) != 1 else ''}")
    parts.append(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snap.time)))
    return "  ·  ".join(parts)
