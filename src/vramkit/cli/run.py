"""vram run: pick GPUs, reserve them, and start a command on them with the right environment."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import TYPE_CHECKING

from ..i18n import N_, _
from .commands import COMMANDS
from .common import HelpFormatter, UsageError, add_duration, add_old_spelling, duration_text, help_values
from .pick import WaitPrinter, acquire_explained, add_policy_options, add_wait_option, parse_wait, prepare

if TYPE_CHECKING:
    from .common import Subparsers

HELP = COMMANDS["run"]
DESCRIPTION = N_("""\
Pick GPUs by policy (the same options as vram pick), reserve them, and run CMD on them with
CUDA_VISIBLE_DEVICES set and CUDA_DEVICE_ORDER=PCI_BUS_ID, so that cuda:0 is the first GPU
chosen and the numbers match nvidia-smi. CMD runs directly (no shell), gets signals sent to
vram (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2, SIGALRM), and vram exits with CMD's exit
code (128+N when signal N ended it; 127 when CMD is not found). Ctrl-Z or kill -TSTP stops
vram and CMD, fg or kill -CONT continues both (kill -STOP of vram's pid alone stops only vram:
signal its process group, as a shell's kill %1 and Slurm's suspend do).

The GPUs stay reserved until CMD (or a process it started) shows up on them in NVML, until it
exits, or for at most --lease-timeout, so two vram runs started together never get the same
GPU. With --wait, vram waits in line (first come, first served) and says on stderr what it
waits for; without it, vram fails at once when no GPU fits, saying what is available.

examples:
  vram run -- python train.py --epochs 3
  vram run -n 2 --min-free 30GiB -- torchrun --nproc_per_node=2 train.py
  vram run --wait 2h -n 4 --exclusive -- python big.py      queue for up to 2 hours
  vram run --wait -- ./eval.sh                              queue with no time limit
  vram run --explain --only 4-7 -- python serve.py          show the choice, then run
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter,
                       # Translators: argparse's usage line after "usage: "; translate only [options]
                       usage=_("%(prog)s [options] [--wait [DURATION]] -- CMD [ARGS...]"))
    add_policy_options(p)
    add_wait_option(p)
    help_values(add_duration(p, "--lease-timeout", low=0.001, high=24 * 3600,
                             bounds=N_("must be more than 0 seconds and at most 24h"),
                             help=N_("longest the GPUs stay reserved while CMD has not shown up on them "
                                  "(default %(lease)s, or $VRAM_LEASE_TIMEOUT)")), lease=_default_lease)
    fmt = p.add_argument("--format", choices=("auto", "index", "uuid"), default="auto",
                         help=N_("how CUDA_VISIBLE_DEVICES names the GPUs: auto (default): indices, but UUIDs where "
                              "a GPU in MIG mode or a lost GPU makes indices unclear; index; uuid"))
    add_old_spelling(p, "--ids", fmt)
    p.add_argument("--explain", action="store_true", help=N_("show every GPU's verdict and the numbering first"))
    p.add_argument("-q", "--quiet", action="store_true", help=N_("no status lines from vram on stderr"))
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]", help=N_("the command to run"))
    p.set_defaults(run=run)


def _default_lease() -> str:
    from ..leases import DEFAULT_TIMEOUT

    return duration_text(DEFAULT_TIMEOUT)


def run(args: argparse.Namespace) -> int:
    from .. import launch
    from ..allocate import LeaseWatcher
    from ..leases import MAX_LEASE, LeaseError, lease_timeout
    from ..render.pick_view import started_line

    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError(_("no command: put it after '--', e.g. vram run -n 1 -- python train.py"))
    wait = parse_wait(args.wait)
    if args.lease_timeout is not None:
        timeout = args.lease_timeout
        if not 0 < timeout <= MAX_LEASE:
            raise UsageError(_("must be more than 0 seconds and at most 24h"), param="lease_timeout")
    else:
        try:
            timeout = lease_timeout()  # $VRAM_LEASE_TIMEOUT, checked there
        except LeaseError as e:  # a bad value the user set: bad input, exit 2 (the message names it)
            raise UsageError(e.message) from e

    machine, snap, devices, policy, visible, leases = prepare(args)
    quiet = args.quiet
    if leases.note and not quiet:
        print(_("vram: note: {message}").format(message=leases.note), file=sys.stderr)
    waiter = WaitPrinter(quiet=quiet)
    selection = None
    try:
        selection = acquire_explained(args, machine, snap, policy, visible, leases, waiter, wait=wait,
                                      lease_kind="run", lease_timeout=timeout, command=shlex.join(command),
                                      ids=args.format)
        if not quiet:
            print(started_line(selection, selection.snapshot), file=sys.stderr, flush=True)
        env = {**os.environ, **selection.env}
        lease = selection.lease
        assert lease is not None  # lease_kind="run" always leases
        watcher: list[LeaseWatcher] = []

        def started(pid: int) -> None:
            lease.set_job(pid)
            watcher.append(LeaseWatcher(machine, lease, pid))

        # A LaunchError (not found: 127, not executable: 126) is a VramkitError: cli/main prints it.
        return launch.run(command, env, pass_fds=[lease.fd] if lease.fd is not None else [],
                          on_start=started, tick=lambda: bool(watcher) and watcher[0].tick(),
                          tick_interval=1.0)
    finally:
        if selection is not None:
            selection.release()
        machine.close()
        leases.close()
