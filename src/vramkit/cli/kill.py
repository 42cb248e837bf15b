"""vram kill: free GPU memory by signalling GPU processes, with every safety check.

The library (vramkit.killing) is imported inside run(): `vram status` must not pay for it."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING, TextIO

from ..i18n import N_, _, ngettext
from .commands import COMMANDS
from .common import Failure, HelpFormatter, UsageError, add_duration, open_for, parse_gpu_list

if TYPE_CHECKING:
    from ..collector import Collector
    from ..killing import Criteria
    from ..machine import Machine
    from .common import Subparsers

HELP = COMMANDS["kill"]
DESCRIPTION = N_("""\
Signal the processes that hold GPU memory: SIGTERM, wait for them to exit (--timeout),
report who is still running (--force then sends SIGKILL), and show per GPU how much memory
was freed and what still holds memory.

Select by PID, --gpu, --user, --idle DURATION, --zombie (defunct or orphaned processes) and
--holders (also processes that hold /dev/nvidia* open but NVML does not list).
--idle DURATION keeps the processes that hold memory and run no kernels for DURATION (the
process's own utilization samples, else its GPU at 0%). Where 'vram record' watched that whole
time, its history answers at once (--db); otherwise vram watches from now, about once a second,
so --idle 30m takes up to 30 minutes, and drops a process as soon as it runs a kernel.
Selectors narrow each other. Without --user, selectors pick your own processes (root: root's,
or everyone's with --all-users).

Before anything is signalled vram shows each process (pid, user, GPU, memory, age, command)
and asks; --yes skips the question, --dry-run only shows. Every process is identified by pid
and start time; at the moment of signalling it is checked again (through a pidfd, so a
reused pid cannot be hit), and refused when it is not yours (root: without --all-users),
is protected (pid 1, kernel threads, your shell and its parents, display servers, NVIDIA
daemons, sshd, container runtimes, systemd, and what /etc/vramkit/protected.conf and
~/.config/vramkit/protected.conf add) or has already exited. Each refusal names its rule.
Every signal, refusal and outcome is appended to an audit log. See docs/safety.md.

Exit codes: 0 every target exited (or took the signal), 1 some were refused or are still
running (or you answered no), 2 bad usage, 130 interrupted (Ctrl-C; 129 SIGHUP, 143 SIGTERM
while it signals or waits): what was signalled and what is known so far is still reported, and
the audit log has each outcome.

examples:
  vram kill 41234                  SIGTERM pid 41234, wait 10 s, report
  vram kill --gpu 4 --idle 30m     your processes on GPU 4 idle for 30 minutes: from the recorded
                                   history, else vram watches them that long first
  vram kill --zombie --dry-run     what would be signalled, without signalling
  vram kill 41234 --force --timeout 20s --yes
                                   SIGTERM, and SIGKILL if still running after 20 s
  sudo vram kill --user bob --all-users
                                   as root: bob's GPU processes
  vram kill --holders 5150         a process that holds /dev/nvidia* open but NVML does not list
  vram kill 41234 --signal USR1    send another signal (no wait: it ends only a process that does
                                   not handle it)
""")


def _pid(text: str) -> int:
    # ASCII digits only: int() also takes "44_57", "+4457" and other scripts' digits, each another pid
    if not re.fullmatch(r"[0-9]{1,4000}", text, re.ASCII) or int(text) <= 0:
        raise argparse.ArgumentTypeError(_("not a pid: {text}").format(text=repr(text)))
    return int(text)


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("kill", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("pids", nargs="*", type=_pid, metavar="PID", help=N_("processes to signal"))
    sel = p.add_argument_group(N_("selecting"))
    sel.add_argument("--gpu", metavar="LIST", help=N_("processes on these GPUs: 0 | 0,2 | 0-3"))
    sel.add_argument("--user", metavar="NAMES", help=N_("processes of these users (comma-separated)"))
    # At least a second: at 0 (or 0.5s, shown as 0s) one sample at 0% would select a process
    add_duration(sel, "--idle", low=1, bounds=N_("must be at least 1 second"),
                 help=N_("processes holding memory that ran no kernels for the last DURATION (e.g. 2h), "
                         "answered at once from the history 'vram record' keeps when it watched that "
                         "whole time; else vram watches from now, up to DURATION, before it asks"))
    sel.add_argument("--db", metavar="PATH", help=N_("the history --idle reads (default: the recorder's; $VRAM_DB)"))
    sel.add_argument("--zombie", action="store_true", help=N_("defunct or orphaned processes holding memory"))
    sel.add_argument("--holders", action="store_true",
                     help=N_("include processes that hold /dev/nvidia* open but NVML lists no memory for"))
    act = p.add_argument_group(N_("signalling"))
    act.add_argument("--signal", default="TERM", metavar="SIG",
                     help=N_("signal to send (default TERM): name or number"))
    add_duration(act, "--timeout", default="10s",
                 help=N_("how long to wait for each process to exit (default %(default)s)"))
    act.add_argument("--force", action="store_true", help=N_("send SIGKILL to what is still running after the wait"))
    act.add_argument("--all-users", action="store_true", help=N_("as root: other users' processes too"))
    act.add_argument("-y", "--yes", action="store_true", help=N_("do not ask"))
    # No -n: it is --count in pick and run; kill's dry run is spelled out.
    act.add_argument("--dry-run", action="store_true", help=N_("show what would be signalled, signal nothing"))
    p.add_argument("--json", action="store_true", help=N_("print the plan or the results as JSON (needs --yes "
                   "or --dry-run)"))
    p.set_defaults(run=run)


def _criteria(args: argparse.Namespace) -> Criteria:
    from ..killing import Criteria
    from .common import duration_flag

    idle = None
    if args.idle is not None:
        idle = duration_flag(args, "idle")
    users = None
    if args.user is not None:
        users = tuple(u.strip() for u in args.user.split(",") if u.strip())
        if not users:
            raise UsageError(_("--user: name at least one user"))
    return Criteria(pids=tuple(args.pids), gpus=tuple(parse_gpu_list(args.gpu)) if args.gpu is not None else None,
                    users=users, idle=idle, zombie=args.zombie, holders=args.holders, all_users=args.all_users)


def _idle_source(machine: Machine, criteria: Criteria, db: str | None) -> tuple[Machine | Collector, bool, str]:
    """For --idle: a collector whose idle clock starts from what the recorder's history says
    (and whether that history watched the whole window), and a note saying which it was."""
    if criteria.idle is None:
        return machine, False, ""
    from ..history.recorded_idle import seeded_collector
    from ..units import format_duration

    collector, recorded = seeded_collector(machine, db)
    if recorded.covers(machine.backend.now(), criteria.idle):
        return collector, True, recorded.note
    if recorded.unbroken_since is not None:
        return collector, False, _("{history}, less than {duration}: watching from now for up to {duration}").format(
            history=recorded.note, duration=format_duration(criteria.idle))
    return collector, False, _("{history}: watching from now for up to {duration}").format(
        history=recorded.note, duration=format_duration(criteria.idle))


class _Progress:
    """One self-rewriting line on a terminal's stderr; nothing elsewhere (scripts stay quiet)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = False

    def __call__(self, stage: str, done: float, total: float, count: int) -> None:
        spent = f"{done:.1f}s" if total < 10 else f"{done:.0f}s"
        if stage == "idle":
            text = ngettext("sampling GPU utilization: {spent} of {total}s, {n} process idle so far",
                            "sampling GPU utilization: {spent} of {total}s, {n} processes idle so far", count)
        else:
            text = ngettext("waiting for {n} process to exit: {spent} of {total}s",
                            "waiting for {n} processes to exit: {spent} of {total}s", count)
        text = text.format(n=count, spent=spent, total=f"{total:g}")
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def _ask(question: str) -> bool:
    sys.stderr.write(question)
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:  # EOF
        sys.stderr.write("\n")
        return False
    # Translators: the answers that mean yes to "[y/N]", lower case, separated by "|" (y and yes always work)
    return answer.strip().lower() in ("y", "yes", *_("y|yes").split("|"))


def run(args: argparse.Namespace) -> int:
    from ..audit import AuditError, AuditLog
    from ..killing import KillInterrupted, Stopped, check_force, dry_report, execute, make_plan, parse_signal, stop_on
    from ..protect import ProtectConfigError
    from ..render.kill_view import kill_json, render_nothing, render_plan, render_report
    from ..render.style import style_for, terminal_width
    from .common import duration_flag

    sig = parse_signal(args.signal)
    timeout = duration_flag(args, "timeout")
    check_force(sig, args.force)
    criteria = _criteria(args)
    criteria.check()
    if args.json and not (args.yes or args.dry_run):
        raise UsageError(_("--json is for programs, which cannot answer a question: add --yes (or --dry-run)"))
    interactive = sys.stdin.isatty()
    if not (args.yes or args.dry_run or interactive):
        raise UsageError(_("vram kill asks before signalling and stdin is not a terminal: add --yes to go ahead, "
                           "or --dry-run to see what would be signalled"))

    style = style_for(sys.stdout, getattr(args, "no_color", False))
    width = terminal_width()
    progress = _Progress(sys.stderr) if sys.stderr.isatty() else None
    machine = open_for(args)
    try:
        source, idle_known, idle_note = _idle_source(machine, criteria, args.db)
        try:
            plan = make_plan(source, criteria, progress=progress, idle_known=idle_known)
        except ProtectConfigError as e:
            raise UsageError(_("protected list: {error}").format(error=e)) from None
        finally:
            if progress:
                progress.clear()
        if idle_note:
            plan.notes.insert(0, idle_note)
        if args.dry_run or not plan.targets:
            report = dry_report(plan)
            report.dry_run, report.signal = args.dry_run, sig.name
            if args.json:
                print(kill_json(report, sig.name, timeout, args.force))
            elif not plan.targets:
                print(render_nothing(plan, style, width))
            else:
                print(render_plan(plan, sig.name, timeout, args.force, style, width, dry_run=True))
            return 0 if report.ok else 1
        shown = False
        if plan.to_signal and not args.yes:
            shown = True
            print(render_plan(plan, sig.name, timeout, args.force, style, width))
            sys.stdout.flush()
            n = len(plan.to_signal)
            question = ngettext("Send {signal} to this process? [y/N] ", "Send {signal} to these {n} processes? [y/N] ",
                                n).format(signal=sig.name, n=n)
            if not _ask(question):
                print(_("nothing was signalled"))
                return 1
        context = {**machine.audit_context("vram kill"), "argv": ["vram", *sys.argv[1:]]}
        try:
            log = AuditLog(context=context).open()
        except AuditError as e:
            raise Failure(_("{error}; nothing was signalled (set VRAM_AUDIT_LOG to a file you can write)").format(
                error=e)) from None
        interrupted = 0  # the signal that stopped vram
        try:
            with stop_on():  # SIGHUP, SIGTERM: as Ctrl-C, every record closed
                report = execute(machine, plan, sig, timeout=timeout, force=args.force, audit=log,
                                 progress=progress)
        except AuditError as e:
            raise Failure(_("{error}; stopped signalling").format(error=e)) from None
        except KillInterrupted as e:  # Ctrl-C: the audit log has each outcome; say what is known
            report, interrupted = e.report, e.signum
        except Stopped as e:  # before the first record or after the last: nothing is left open
            return 128 + e.signum
        finally:
            log.close()
            if progress:
                progress.clear()
    finally:
        machine.close()
    if args.json:
        print(kill_json(report, sig.name, timeout, args.force))
    else:
        print(render_report(report, style, width, with_banner=not shown))
    if interrupted:
        sent = [t for t in report.targets if t.signals]
        exited = sum(1 for t in sent if t.status == "exited")
        print("vram: " + ngettext("interrupted: {n} process signalled, {exited} known to have exited; outcomes are "
                                  "in the audit log",
                                  "interrupted: {n} processes signalled, {exited} known to have exited; outcomes "
                                  "are in the audit log", len(sent)).format(n=len(sent), exited=exited),
              file=sys.stderr)
        return 128 + interrupted
    return 0 if report.ok else 1
