"""vram ps: one row per GPU process, with its host side."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..gpu_state import GpuProcess
from ..i18n import N_, _
from ..render.data import ps_csv, ps_json
from ..render.ps_view import render_ps
from ..render.style import style_for, terminal_width
from . import owners
from .commands import COMMANDS
from .common import HelpFormatter, UsageError, add_data_options, check_gpus, open_for, parse_gpu_list

if TYPE_CHECKING:
    from ..gpu_state import Snapshot
    from ..machine import Machine
    from .common import Subparsers

HELP = COMMANDS["ps"]
DESCRIPTION = N_("""\
List every process that holds GPU memory: one row per process and GPU (a job spread over
four GPUs has four rows), with its user, GPU memory, share of that GPU, the GPU's
utilization, host CPU% and RSS, age, flags and command.

Flags: zombie (defunct, still listed by the driver), orphan (parent is pid 1), idle (holds
memory but ran no kernels lately: the driver's per-process samples where it keeps them,
else its GPU at 0% now), no-host (/proc cannot see the pid: it exited or
lives in another PID namespace), container (one the OWNER column does not name), graphics.

OWNER, shown when a process has one: its Kubernetes pod, Slurm job (JOB.STEP) or container,
from its cgroup (docs/containers.md).

CPU% is averaged over the process's lifetime, as ps does.

examples:
  vram ps                          everything, biggest first
  vram ps --user alice,bob         only these users' processes
  vram ps --gpu 0 --sort elapsed   GPU 0, oldest first
  vram ps --pod nlp/train-7f9c     one Kubernetes pod's processes (--container, --slurm-job 48211)
  vram ps --json | jq '.processes[] | select(.idle)'
  vram ps --holders                also every process holding /dev/nvidia* open (as fuser -v),
                                   with whether NVML lists GPU memory for it
  vram ps --env 4242               the GPUs pid 4242 was told to use (its CUDA_VISIBLE_DEVICES
                                   and CUDA_DEVICE_ORDER) beside the GPUs it holds memory on
""")

WIDE_HELP = N_("never cut the command. Without it the command is cut to fit the terminal's width; piped "
               "output uses $COLUMNS, or 120 columns when that is unset")

SORT_KEYS: dict[str, Callable[[GpuProcess], Any]] = {
    "memory": (lambda p: -(p.memory or 0)),
    "gpu": (lambda p: (p.gpu, -(p.memory or 0))),
    "pid": (lambda p: (p.pid, p.gpu)),
    "user": (lambda p: (p.user or "~", -(p.memory or 0))),
    "elapsed": (lambda p: -(p.elapsed or 0)),
    "cpu": (lambda p: -(p.cpu_percent or 0)),
    "rss": (lambda p: -(p.rss or 0)),
}


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ps", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    add_data_options(p, "process and GPU")
    p.add_argument("--user", metavar="NAMES", help=N_("only these users (comma-separated)"))
    owners.add_filters(p)
    # choices: what completion offers (it is generated from the parser)
    p.add_argument("--sort", default="memory", metavar="KEY", choices=tuple(SORT_KEYS),
                   help=N_("sort by %(choices)s (default memory, largest first)"))
    p.add_argument("--wide", action="store_true", help=WIDE_HELP)
    p.add_argument("--holders", action="store_true",
                   help=N_("also list processes holding /dev/nvidia* open, as fuser -v shows them; this finds "
                           "memory NVML does not attribute (crashed or containerised jobs, forked workers)"))
    p.add_argument("--env", metavar="PID", type=_pid,
                   help=N_("one process's own view: the GPUs its environment tells it to use (as it started; "
                           "readable for your own processes, or as root) beside the GPUs it holds memory on, "
                           "and a mismatch flagged (exit 1 on a mismatch)"))
    p.set_defaults(run=run)


def _pid(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**22 + 1:
        raise argparse.ArgumentTypeError(_("not a process id: {text}").format(text=repr(text[:40])))
    return int(text)


def select(procs: list[GpuProcess], users: set[str] | None, gpus: list[int] | None) -> list[GpuProcess]:
    return [p for p in procs if (users is None or p.user in users) and (gpus is None or p.gpu in gpus)]


def run(args: argparse.Namespace) -> int:
    if args.sort not in SORT_KEYS:
        raise UsageError(_("--sort: unknown key {key} (choose from {keys})").format(
            key=repr(args.sort), keys=", ".join(SORT_KEYS)))
    if getattr(args, "holders", False) and args.csv:
        raise UsageError(_("--holders has no CSV form (two tables): use --json, or the text view"))
    if getattr(args, "env", None) is not None and (args.csv or getattr(args, "holders", False)):
        raise UsageError(_("--env: one process's view has no CSV form, and is not shown with --holders"))
    gpus = parse_gpu_list(args.gpu) if args.gpu is not None else None
    users = {u.strip() for u in args.user.split(",") if u.strip()} if args.user is not None else None
    if users is not None and not users:
        raise UsageError(_("--user: name at least one user"))
    machine = open_for(args)
    try:
        snap = machine.snapshot()
    finally:
        machine.close()
    if gpus is not None:
        check_gpus(snap, gpus)
    if getattr(args, "env", None) is not None:
        return _env(args, snap, machine.backend.pids_visible())
    procs = sorted(owners.select(select(snap.processes, users, gpus), owners.wanted(args)), key=SORT_KEYS[args.sort])
    if getattr(args, "holders", False):
        return _with_holders(args, machine, snap, procs, users, gpus)
    if args.json:
        print(ps_json(snap, procs))
    elif args.csv:
        print(ps_csv(snap, procs), end="")
    else:
        style = style_for(sys.stdout, getattr(args, "no_color", False))
        shown, total = _shown(snap, gpus)
        print(render_ps(shown, procs, style, terminal_width(), total, wide=args.wide))
    return 0


def _shown(snap: Snapshot, gpus: list[int] | None) -> tuple[Snapshot, int | None]:
    """The snapshot with only the --gpu GPUs, and the machine's GPU count when that is a subset
    (the banner says "2 of 8 GPUs", as status does)."""
    if gpus is None:
        return snap, None
    return dataclasses.replace(snap, gpus=[g for g in snap.gpus if g.index in gpus]), len(snap.gpus)


def _env(args: argparse.Namespace, snap: Snapshot, pids_visible: bool) -> int:
    """--env PID: what the process was told beside what it holds; exit 1 on a mismatch, so a
    script can check its own job."""
    import json

    from ..process_view import process_gpus
    from ..render.env_view import render_env

    view = process_gpus(snap, args.env, pids_visible=pids_visible)
    if args.json:
        print(json.dumps(view.to_json(), indent=2))
    else:
        style = style_for(sys.stdout, getattr(args, "no_color", False))
        print(render_env(view, style, terminal_width(), wide=args.wide))
    return 1 if view.mismatch is not None else 0


def _with_holders(args: argparse.Namespace, machine: Machine, snap: Snapshot, procs: list[GpuProcess],
                  users: set[str] | None, gpus: list[int] | None) -> int:
    """The process table, then the device-file holders (heavier: every process's open files)."""
    import json

    from ..holders import scan
    from ..render.holders_view import holders_json, render_holders

    found = scan(snap, machine.backend)
    found.holders = [h for h in found.holders if (users is None or h.host.user in users)
                     and (gpus is None or set(h.gpus) & set(gpus))]
    if args.json:
        print(json.dumps({**json.loads(ps_json(snap, procs)), **holders_json(found, snap.time)}, indent=2))
        return 0
    style = style_for(sys.stdout, getattr(args, "no_color", False))
    width = terminal_width()
    shown, total = _shown(snap, gpus)
    print(render_ps(shown, procs, style, width, total, wide=args.wide))
    print()
    print(render_holders(found, style, width, snap.time))
    return 0
