"""vram pick: choose GPUs by policy and print their ids (and, with --explain, why and how CUDA
will number them). The policy options are shared with vram run."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import VramkitError
from ..i18n import N_, _, ngettext
from .commands import COMMANDS
from .common import HelpFormatter, UsageError, add_duration, open_for

if TYPE_CHECKING:
    from ..allocate import Selection, WaitStatus
    from ..cuda_env import CudaDevice, Visible
    from ..gpu_choice import Decision, Policy
    from ..gpu_state import Snapshot
    from ..leases import LeaseDir
    from ..machine import Machine
    from .common import Subparsers

    Prepared = tuple[Machine, Snapshot, list[CudaDevice], Policy, Visible, LeaseDir]

HELP = COMMANDS["pick"]
DESCRIPTION = N_("""\
Choose GPUs by policy and print their ids, ready for CUDA_VISIBLE_DEVICES.

By default a GPU qualifies when at least half its memory is free and it is busy (utilization)
at most half the time, and nobody's `vram run` holds a lease on it; the emptiest come first
(--prefer pack: the fullest that still fits). In MIG mode the MIG instances are the units.
An existing CUDA_VISIBLE_DEVICES (from Slurm, a container, or you) is the set to choose from.
The ids are CUDA indices in PCI order (the numbers nvidia-smi and vram status show), or UUIDs
where a GPU in MIG mode or a lost GPU makes indices unclear: use them with
CUDA_DEVICE_ORDER=PCI_BUS_ID, which --format env includes and vram run sets.

pick only looks: nothing is reserved unless you --hold. To start a job safely (the GPUs stay
reserved until it shows up on them), use `vram run`.

examples:
  vram pick                                 one GPU, e.g. 4
  vram pick -n 2 --min-free 30GiB           two GPUs with 30 GiB free each, e.g. 4,7
  vram pick -n 2 --explain                  ...and why, and which cuda:N each one will be
  export $(vram pick --format env)          CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=4
  env $(vram pick --format env --hold 2m) python train.py   held 2 minutes or until it shows up
  vram pick --json | jq '.gpus[].uuid'
""")

def add_policy_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(N_("policy"))
    g.add_argument("-n", "--count", type=int, default=1, metavar="N", help=N_("how many GPUs (default 1)"))
    g.add_argument("--min-free", "--need", dest="min_free", metavar="SIZE|PCT",
                   help=N_("free memory each GPU must have: 20GiB, 30GB, or a share of the GPU like 60%% "
                        "(default 50%%)"))
    g.add_argument("--max-util", metavar="PCT",
                   help=N_("busiest allowed utilization, 0-100 (default 50; 100 or 'any' for no limit)"))
    g.add_argument("--exclude", metavar="LIST", help=N_("never these: 0,2 | 0-3 | 0/9 (MIG) | GPU-uuid prefix"))
    g.add_argument("--only", metavar="LIST", help=N_("only these (same forms as --exclude)"))
    g.add_argument("--prefer", choices=("spread", "pack"), default=None,
                   help=N_("spread: the emptiest GPUs (default); pack: the fullest that fit"))
    g.add_argument("--exclusive", action="store_true", default=None,
                   help=N_("only GPUs with no other user's process on them"))
    # Flags left out take the [pick] defaults of the config file (vram config shows them).


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("pick", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    add_policy_options(p)
    out = p.add_argument_group(N_("output"))
    out.add_argument("--format", choices=("auto", "index", "uuid", "env"), default="auto",
                     help=N_("auto (default): indices like 4,7, or UUIDs where a GPU in MIG mode or a lost GPU "
                          "makes indices unclear; index; uuid: GPU-...; env: CUDA_DEVICE_ORDER=... "
                          "CUDA_VISIBLE_DEVICES=... (a MIG instance is always named by its UUID)"))
    out.add_argument("--json", action="store_true", help=N_("print JSON: the GPUs, their ids and the environment"))
    out.add_argument("--explain", action="store_true",
                     help=N_("show every GPU's verdict and the cuda:N numbering, on stderr"))
    add_duration(p, "--hold", low=0.001, high=24 * 3600, bounds=N_("must be more than 0 seconds and at most 24h"),
                 help=N_("reserve the GPUs for DURATION (e.g. 2m) or until a new process shows up on them"))
    add_wait_option(p)
    p.set_defaults(run=run)


def add_wait_option(p: argparse.ArgumentParser) -> None:
    """--wait [DURATION], as pick and run take it: bare (or 'forever'), no limit."""
    add_duration(p, "--wait", nargs="?", const=math.inf, words={"forever": math.inf},
                 hint=N_("put the command after '--': vram run --wait -- CMD"),
                 help=N_("wait in line until GPUs fit: at most DURATION (e.g. 600, 10m, 2h), or without a value "
                      "for as long as it takes"))


def parse_wait(value: float | None) -> float | None:
    """--wait's seconds (math.inf: no limit), None when not given."""
    return value


def apply_config_defaults(args: argparse.Namespace) -> None:
    """The policy flags left out take the config file's [pick] values (vram config shows them)."""
    from ..config import pick_defaults

    for name, value in pick_defaults().items():
        if getattr(args, name, False) is None:
            setattr(args, name, value)


def prepare(args: argparse.Namespace) -> Prepared:
    """Open the machine, read the policy and the lease directory: (machine, snapshot, devices,
    policy, the environment's CUDA_VISIBLE_DEVICES as CUDA reads it, lease dir)."""
    from ..allocate import build_policy
    from ..cuda_env import devices_of
    from ..leases import lease_dir

    apply_config_defaults(args)
    machine = open_for(args)
    # Several GPUs: choose connected ones (NVLink, one PCIe switch, one NUMA node); the topology is
    # read once here and rides on every later snapshot of this machine (while waiting too).
    machine.want_topology = args.count > 1
    try:
        snap = machine.snapshot()
        devices = devices_of(snap)
        try:
            policy, visible = build_policy(devices, count=args.count, min_free=args.min_free,
                                           max_util=args.max_util, exclude=args.exclude, only=args.only,
                                           prefer=args.prefer, exclusive=args.exclusive)
        except VramkitError:
            raise
        except ValueError as e:  # build_policy's plain ValueErrors (they name the flag): exit 2
            raise UsageError(str(e)) from e
        leases = lease_dir()  # a LeaseError is a VramkitError (exit 1): cli/main prints it
        leases.on_warning = lambda line: print(_("vram: warning: {message}").format(message=line), file=sys.stderr,
                                              flush=True)
    except BaseException:
        machine.close()
        raise
    return machine, snap, devices, policy, visible, leases


def lease_note(leases: LeaseDir) -> str:
    from ..leases import read_state

    try:
        with leases.locked(patience=2):
            state = read_state(leases)
        # A GPU whose lock another process kept for the whole look is listed among the leases
        # (kind "lock", so that nothing chooses it), but it is not a lease: counted apart.
        locks = sum(lease.kind == "lock" for lease in state.leases)
        counts = _("{active} active, {waiting} waiting").format(active=len(state.leases) - locks,
                                                                waiting=len(state.tickets))
        if locks:
            counts = ngettext("{counts}, {n} GPU lock held by others", "{counts}, {n} GPU locks held by others",
                              locks).format(counts=counts, n=locks)
    except Exception as e:  # the note is a courtesy
        counts = _("unreadable: {error}").format(error=e)
    if not leases.shared:
        where = _("per-user")
    elif leases.others_in is not None and leases.path.name != leases.others_base:
        # No admin made the shared directory root's: each user's own, everyone's read.
        where = _("yours; every user's {pattern} read, no admin's shared directory").format(
            pattern=f"{leases.others_in / leases.others_base}-*")
    else:
        where = _("shared by all users")
    line = _("leases: {path} ({where}) · {counts}").format(path=leases.path, where=where, counts=counts)
    return line + (f" · {leases.note}" if leases.note else "")


def stderr_width() -> int:
    """The width of the terminal stderr is on (stdout may be a pipe: CUDA_VISIBLE_DEVICES=$(...))."""
    from ..render.style import terminal_width

    try:
        return max(60, os.get_terminal_size(sys.stderr.fileno()).columns)
    except (OSError, ValueError):
        return terminal_width()


def explain_to_stderr(args: argparse.Namespace, snap: Snapshot, policy: Policy, visible: Visible, leases: LeaseDir,
                      selection: Selection | None, decision: Decision | None = None) -> None:
    from ..cuda_env import devices_of
    from ..gpu_choice import decide, units_of
    from ..render.pick_view import explain
    from ..render.style import style_for

    if decision is None:
        decision = selection.decision if selection is not None else decide(policy, units_of(snap, devices_of(snap)))
    style = style_for(sys.stderr, getattr(args, "no_color", False))
    width = stderr_width() if sys.stderr.isatty() else None  # fold lines on a terminal only
    print(explain(snap, decision, visible, selection, lease_note(leases), style, width), file=sys.stderr)


def acquire_explained(args: argparse.Namespace, machine: Machine, snap: Snapshot, policy: Policy, visible: Visible,
                      leases: LeaseDir, waiter: WaitPrinter | None, **how: Any) -> Selection:
    """allocate.acquire(), as pick and run both need it: the wait line closed, and --explain shown
    for the choice or for the refusal (NoGpusAvailable, which cli/main prints in one line)."""
    from ..allocate import NoGpusAvailable, acquire

    try:
        selection = acquire(machine, policy, on_wait=waiter, lease_dir=leases, **how)
    except NoGpusAvailable as e:
        if waiter:
            waiter.done()
        if args.explain:
            explain_to_stderr(args, snap, policy, visible, leases, None, e.decision)
        raise
    if waiter:
        waiter.done()
    if args.explain:
        explain_to_stderr(args, selection.snapshot, policy, visible, leases, selection)
    return selection


def run(args: argparse.Namespace) -> int:
    from ..render.pick_view import ids_output, pick_json
    from .common import duration_flag

    hold = None
    if args.hold is not None:
        hold = duration_flag(args, "hold")
    wait = parse_wait(args.wait)
    machine, snap, devices, policy, visible, leases = prepare(args)
    if leases.note and not args.explain:  # (--explain shows it in its lease line)
        print(_("vram: note: {message}").format(message=leases.note), file=sys.stderr)
    waiter = WaitPrinter(quiet=False) if wait is not None else None
    try:
        selection = acquire_explained(args, machine, snap, policy, visible, leases, waiter, wait=wait,
                                      lease_kind="hold" if hold else None, lease_timeout=hold)
        if args.json:
            print(pick_json(selection, selection.snapshot))
        else:
            print(ids_output(selection, args.format))
    finally:
        machine.close()
        leases.close()
    return 0


class WaitPrinter:
    """The status line while waiting, on stderr: rewritten in place on a terminal; elsewhere a
    new line when what it waits for changes (at most every 10 s), so logs stay short."""

    def __init__(self, quiet: bool, stream: TextIO | None = None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last_text: str | None = None
        self.last_time = -math.inf
        self.shown = False

    def __call__(self, status: WaitStatus) -> None:
        import time

        from ..render.pick_view import wait_line
        from ..render.style import clip

        if self.quiet:
            return
        line = wait_line(status)
        if self.tty:
            self.stream.write("\r\x1b[K" + clip(line, stderr_width() - 1))
            self.stream.flush()
            self.shown = True
            return
        reason = status.reasons()  # what it waits for, without the running time
        now = time.monotonic()
        if self.last_text is None or (reason != self.last_text and now - self.last_time >= 10) \
                or now - self.last_time >= 60:
            print(line, file=self.stream, flush=True)
            self.last_text, self.last_time = reason, now

    def done(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
