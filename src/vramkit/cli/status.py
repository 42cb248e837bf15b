"""vram status: each GPU's memory, utilization, temperature and power, and who holds its memory."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ..i18n import N_, _
from ..render.status_view import render_status
from ..render.style import style_for, terminal_width
from . import owners
from .commands import COMMANDS
from .common import (
    HelpFormatter,
    UsageError,
    add_data_options,
    add_duration,
    add_old_spelling,
    check_gpus,
    check_watch,
    open_for,
    parse_gpu_list,
    watch_loop,
)

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from ..collector import Collector
    from ..machine import Machine
    from .common import Subparsers

HELP = COMMANDS["status"]
WATCH_DEFAULT_S = 2.0
DESCRIPTION = N_("""\
Show each GPU: a memory bar with used/total, utilization, temperature, power/limit,
and every process holding memory on it (size, user, pid, age, command).

Memory and utilization are different things and are shown side by side. Memory is how
much of the GPU's RAM is allocated; utilization is the share of recent time a kernel was
running. A GPU can be full and idle (someone's notebook holding 40 GiB, doing nothing) or
busy and nearly empty. Fields the driver does not support are shown as N/A, never as 0.

examples:
  vram status                      all GPUs, once
  vram status --gpu 0,2            only GPUs 0 and 2
  vram status --compact            one line per GPU, its holders per user
  vram status --no-processes       the GPUs alone
  vram status --watch 1s           redraw every second (Ctrl-C stops)
  vram status --json | jq '.gpus[].memory_used'
  vram status --slurm-job 48211    only one Slurm job's processes (--container NAME, --pod NS/NAME)
  vram status --health --gpu 2     GPU 2 with its health: ECC, remaps, throttling, clocks, PCIe, NVLink
  vram status --simulate demo      the bundled simulated 8-GPU server
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("status", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    add_data_options(p, "GPU")
    add_duration(p, "--watch", nargs="?", const=WATCH_DEFAULT_S,
                 help=N_("redraw every DURATION (1s, 0.5, 1m; bare --watch: %(const)gs) until Ctrl-C; with --json "
                         "one compact JSON object per line (NDJSON), with --csv the header once and then only rows"))
    p.add_argument("--wide", action="store_true",
                   help=N_("never cut commands. Without it a command is cut to fit the terminal's width; "
                           "piped output uses $COLUMNS, or 120 columns when that is unset"))
    health = p.add_argument("--health", action="store_true",
                   help=N_("also each GPU's health: ECC errors, retired pages or remapped rows, throttle "
                           "reasons, clocks, P-state, PCIe and NVLink links, persistence and compute mode (some "
                           "twenty more driver calls a GPU: read only when asked)"))
    add_old_spelling(p, "--all", health)
    owners.add_filters(p)
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--compact", action="store_true",
                       help=N_("one line per GPU: memory, utilization, temperature, power and who holds "
                               "memory, per user (as gpustat)"))
    shape.add_argument("--no-processes", action="store_true",
                       help=N_("the GPU lines without the processes under them"))
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    wanted = parse_gpu_list(args.gpu) if args.gpu is not None else None
    only_owners = owners.wanted(args)
    if (args.compact or args.no_processes) and (args.json or args.csv):
        flag = "--compact" if args.compact else "--no-processes"
        raise UsageError(_("{flag} shapes the text view: not with --json or --csv").format(flag=flag))
    if args.compact and args.health:
        raise UsageError(_("--compact is one line per GPU: --health needs the full view"))
    if args.watch is not None:
        check_watch(args.watch)  # before the collector: nan, inf, 1e-9 are one line, not a busy loop
    machine = open_for(args)
    style = style_for(sys.stdout, getattr(args, "no_color", False))
    source: Machine | Collector = machine
    if args.watch is not None:  # frames read through one collector: idle time adds up
        from ..collector import Collector

        source = Collector(machine, interval=args.watch)

    watching = args.watch is not None
    frames = 0

    def draw() -> str:
        nonlocal frames
        frames += 1
        snap = source.snapshot()
        if args.health:
            machine.read_health(snap)
        total = None
        if wanted is not None:
            check_gpus(snap, wanted)
            total = len(snap.gpus)
            # A copy: the snapshot also sits in the collector's ring.
            snap = dataclasses.replace(snap, gpus=[g for g in snap.gpus if g.index in wanted])
        if only_owners is not None:
            total = total or len(snap.gpus)
            snap = owners.only(snap, only_owners)
        if args.json:  # under --watch: NDJSON, one object per line
            from ..render.data import status_json  # (json, csv, datetime: only for data output)

            return status_json(snap, compact=watching)
        if args.csv:  # under --watch: one CSV table, its header once
            from ..render.data import status_csv

            return status_csv(snap, header=frames == 1).rstrip("\n")
        if args.compact:
            from ..render.status_view import render_compact

            return render_compact(snap, style, terminal_width(), total)
        return render_status(snap, style, terminal_width(), total, wide=args.wide, processes=not args.no_processes)

    try:
        if watching:
            data = bool(args.json or args.csv)
            watch_loop(args.watch, draw, tty=sys.stdout.isatty() and not data, stream=data)
        else:
            print(draw())
    finally:
        machine.close()
    return 0
