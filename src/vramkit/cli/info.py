"""vram info: every detail of some GPUs, as nvidia-smi -q lists them: identity, memory, utilization,
health, topology and the processes with their own utilization."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from .. import units
from ..i18n import N_, _
from .commands import COMMANDS
from .common import HelpFormatter, UsageError, check_gpus, open_for

if TYPE_CHECKING:
    from ..gpu_state import Snapshot
    from .common import Subparsers

HELP = COMMANDS["info"]
DESCRIPTION = N_("""\
Show each GPU in detail, a line per field, as nvidia-smi -q does: name, UUID, PCI bus id, MIG
mode; memory used, free and reserved; utilization of the GPU and of its memory, temperature,
power, fan; its health (ECC errors, remapped rows or retired pages, throttle reasons in words,
clocks against their maxima, P-state, PCIe link and traffic, NVLink, persistence and compute
mode); its NUMA node and how it reaches the other GPUs (nvidia-smi topo -m's words); and its
processes, each with its own SM, memory-bandwidth, encoder and decoder utilization.

A field the driver does not support or refuses is N/A with the reason, never 0. This reads some
twenty more driver calls a GPU than `vram status` (and waits a fifth of a second for NVLink rates).

examples:
  vram info                        every GPU
  vram info 2                      GPU 2 only (also: 0,2 | 0-3 | 0 2)
  vram info 2 --json               the same as JSON: vram status --all --json's GPU objects
  vram info --simulate unhealthy   a simulated server with a throttling GPU and a pending row remap
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("info", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("gpus", metavar="GPU", nargs="*", help=N_("the GPUs to show: 0 | 0,2 | 0-3 (default: all)"))
    p.add_argument("--json", action="store_true", help=N_("print JSON (schema: docs/json.md, as vram status --health)"))
    p.set_defaults(run=run, param_flags={"gpu": "GPU"})


def wanted_gpus(words: list[str]) -> list[int] | None:
    """The GPU indices the positional words name (None: all), or a usage error naming GPU."""
    if not words:
        return None
    wanted: set[int] = set()
    for word in words:
        try:
            wanted.update(units.parse_gpu_list(word))
        except ValueError as e:
            raise UsageError(_("GPU: {error}").format(error=e)) from None
    return sorted(wanted)


def run(args: argparse.Namespace) -> int:
    from ..render.info_view import render_info
    from ..render.style import style_for, terminal_width

    wanted = wanted_gpus(args.gpus)
    machine = open_for(args)
    try:
        machine.want_topology = True  # read once: NVLink peers, PCIe ancestors, NUMA nodes
        snap = machine.snapshot()
        every = [g.index for g in snap.gpus]
        if wanted is not None:
            check_gpus(snap, wanted)
            snap = dataclasses.replace(snap, gpus=[g for g in snap.gpus if g.index in wanted])
        machine.read_health(snap)
    finally:
        machine.close()
    if args.json:
        print(_json(snap))
    else:
        style = style_for(sys.stdout, getattr(args, "no_color", False))
        total = len(every) if wanted is not None else None
        print(render_info(snap, style, terminal_width(), total, every))
    return 0


def _json(snap: Snapshot) -> str:
    """vram status --all --json's document, and the topology the GPUs were read with."""
    from ..render.data import status_doc

    doc = status_doc(snap)
    topo = snap.topology
    if topo is not None:
        doc["topology"] = {
            "links": {f"{a}-{b}": link for (a, b), link in sorted(topo.links.items())},
            "numa_node": {str(i): node for i, node in sorted(topo.numa_node.items())},
            "na": topo.na,
        }
    return json.dumps(doc, indent=2)
