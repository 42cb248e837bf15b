"""vram record: sample the machine through the collector and keep its history (history/)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING

from ..errors import VramkitError
from ..i18n import N_, _, ngettext
from .commands import COMMANDS
from .common import HelpFormatter, UsageError, add_duration, add_old_spelling, duration_flag, open_for

if TYPE_CHECKING:
    from typing import Any

    from ..collector import Collector
    from ..gpu_state import Snapshot
    from .common import Subparsers

HELP = COMMANDS["record"]
DESCRIPTION = N_("""\
Sample every GPU and every process holding GPU memory every INTERVAL, and keep it in an
SQLite database: memory, utilization, temperature and power per GPU; memory, own SM
utilization and idle time per process; one row per process life with its totals.
'vram report', 'vram life', 'vram kill --idle' and 'vram doctor' read it.

The database is /var/lib/vramkit/history.db for root, else ~/.local/state/vramkit/history.db
(--db, $VRAM_DB). Where others may enter the database's directory (root's), the live file is
private/history.db beside it, which only its owner can open, and root publishes a read-only
copy for other users every --publish-every (60s) when something changed. Raw samples are
kept a day, 1-minute averages 30 days, 15-minute averages a year (--keep-raw, --keep-minute,
--keep-quarter), and the file stays under --max-size.
It keeps going through a lost GPU or a driver reload, stops cleanly on SIGTERM or Ctrl-C, and
continues where it stopped when started again. docs/history.md says how to run it as a service.

examples:
  vram record                          record every 5 s until stopped
  vram record --interval 1s --duration 1h
  sudo systemctl enable --now vram-record     the service (see docs/history.md)
  vram record --simulate demo --db /tmp/demo.db --duration 1m
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("record", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("--db", metavar="PATH", help=N_("the database (default: see above; also $VRAM_DB)"))
    _at_least(p, "--interval", 0.1, default="5s", help=N_("time between samples (default %(default)s)"))
    add_duration(p, "--duration", help=N_("stop after this long (default: run until stopped)"))
    p.add_argument("--samples", metavar="N", type=int,
                   help=N_("stop after N samples (attempts: one that could not be read or written counts)"))
    commands = p.add_argument("--process-commands", choices=("off", "name", "full"), nargs="?", const="full",
                              default="name", help=N_("what is kept of each process's command line: off, the "
                              "program name (default), or full (bare --process-commands: full)"))
    add_old_spelling(p, "--commands", commands)
    _at_least(p, "--keep-raw", 60, default="24h", help=N_("keep raw samples this long (%(default)s)"))
    _at_least(p, "--keep-minute", 60, default="30d", help=N_("keep 1-minute averages this long (%(default)s)"))
    _at_least(p, "--keep-quarter", 60, default="365d", help=N_("keep 15-minute averages this long (%(default)s)"))
    p.add_argument("--max-size", metavar="SIZE", default="2GiB",
                   help=N_("the most the database may hold; the oldest rows go first (%(default)s)"))
    _at_least(p, "--publish-every", 0.1, default="60s",
              help=N_("how often the copy other users read is refreshed, when something changed (%(default)s)"))
    p.add_argument("--quiet", action="store_true", help=N_("say nothing but errors"))
    from ..history.notices import add_policy_options

    add_policy_options(p)
    p.set_defaults(run=run)


# the shortest each duration may be, said as the error says it (translated where it is shown)
_BOUNDS = {0.0: N_("must be at least 0 seconds"), 0.1: N_("must be at least 0.1 seconds"),
           60: N_("must be at least 60 seconds")}


def _at_least(p: argparse.ArgumentParser, flag: str, minimum: float, **kwargs: Any) -> None:
    add_duration(p, flag, low=minimum, bounds=_BOUNDS[minimum], **kwargs)


def _duration(args: argparse.Namespace, name: str, minimum: float = 0.0) -> float:
    return duration_flag(args, name, minimum, None, _BOUNDS[minimum])


def run(args: argparse.Namespace) -> int:

    from ..collector import Collector
    from ..history.recorder import Recorder
    from ..history.store import Retention, Store
    from ..procs import sanitize
    from ..units import format_duration, parse_size

    interval = _duration(args, "interval", minimum=0.1)
    duration = _duration(args, "duration") if args.duration is not None else None
    if args.samples is not None and args.samples < 1:
        raise UsageError(_("--samples: must be at least 1, got {value}").format(value=args.samples))
    publish_every = _duration(args, "publish_every", minimum=0.1)
    keep = [_duration(args, n, minimum=60) for n in ("keep_raw", "keep_minute", "keep_quarter")]
    try:
        max_bytes = parse_size(args.max_size)
    except ValueError as e:
        raise UsageError(f"--max-size: {e}") from None
    if max_bytes < 1024**2:
        raise UsageError(_("--max-size: must be at least 1MiB, got {value}").format(value=args.max_size))
    retention = Retention(raw=keep[0], minute=max(keep[0], keep[1]), quarter=max(keep[0], keep[1], keep[2]),
                          max_bytes=max_bytes)

    def say(line: str) -> None:
        print(f"vram record: {line}", file=sys.stderr, flush=True)

    from ..history.notices import attach_policy

    machine = open_for(args)
    collector = Collector(machine, interval=interval, extras=Recorder.EXTRAS)
    collector.read_usage_of(set())  # who each process is, not its state, CPU and RSS: not kept
    close_policy = None
    try:
        # The policy first: it reads what the history says about idle time before this
        # process opens the database for writing.
        close_policy = attach_policy(collector, args, say)
        store = Store.open(args.db, write=True)
        try:
            recorder = Recorder(store, interval, args.process_commands, retention, say, publish_every)
        except BaseException:
            store.close(settle=False)
            raise
    except BaseException:
        if close_policy is not None:
            close_policy()
        collector.close()
        raise
    unreadable: list[str] = []  # why the newest snapshot could not be read at all

    def consume(snap: Snapshot) -> None:
        why = _unreadable(snap)
        if why is None:
            recorder(snap)
        else:
            unreadable.append(why)
    collector.subscribe(consume)
    said_errors: set[str] = set()

    def on_error(e: Exception) -> None:  # each distinct one once: a recorder runs for months
        line = _("internal error in the recorder: {kind}: {error}").format(kind=type(e).__name__,
                                                                         error=sanitize(str(e))[:300])
        if line not in said_errors and len(said_errors) < 100:
            said_errors.add(line)
            say(line)
    collector.on_error = on_error
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_args: stop.set())
    if not args.quiet:
        values = {"interval": _seconds(interval), "path": store.path, "published": store.published,
                  "every": _seconds(publish_every), "duration": None if duration is None else format_duration(duration)}
        if store.published is None:
            line = (_("recording every {interval} into {path} (Ctrl-C or SIGTERM stops)") if duration is None else
                    _("recording every {interval} into {path} for {duration} (Ctrl-C or SIGTERM stops)"))
        elif duration is None:
            line = _("recording every {interval} into {path}, published for other users at {published} every "
                     "{every} (Ctrl-C or SIGTERM stops)")
        else:
            line = _("recording every {interval} into {path}, published for other users at {published} every "
                     "{every} for {duration} (Ctrl-C or SIGTERM stops)")
        say(line.format(**values))
    # The machine's clock (a stepped scenario clock does not wait): collector.backend, the
    # machine's now, which a reopening after a driver reload replaces.
    began = collector.backend.monotonic()
    failing: str | None = None
    attempts = 0  # what --samples counts: a sample that could not be read or written too
    try:
        while not stop.is_set():
            attempts += 1
            started = collector.backend.monotonic()
            try:
                unreadable.clear()
                collector.sample()
                if unreadable:  # NVML answered, but with errors only: its handles are stale
                    raise _Unreadable(unreadable[0])
                if failing is not None:
                    say(_("reading the GPUs again"))
                    failing = None
            except Exception as e:  # noqa: BLE001 - a driver reload raises NVML's own errors too
                line = sanitize(str(e) or type(e).__name__)
                if failing != line:
                    say(_("cannot read the GPUs: {error}; retrying every interval").format(error=line))
                    failing = line
                _reopen(collector, args)
            if args.samples is not None and attempts >= args.samples:
                break
            if duration is not None and collector.backend.monotonic() - began >= duration:
                break
            collector.backend.sleep(stop, max(0.0, interval - (collector.backend.monotonic() - started)))
    finally:
        if close_policy is not None:
            close_policy()
        recorder.close(collector.backend.monotonic())
        collector.close()
    if not args.quiet:
        if recorder.dropped:
            say(ngettext("stopped: {n} sample recorded, {dropped} not written",
                         "stopped: {n} samples recorded, {dropped} not written", recorder.samples).format(
                n=recorder.samples, dropped=recorder.dropped))
        else:
            say(ngettext("stopped: {n} sample recorded", "stopped: {n} samples recorded", recorder.samples).format(
                n=recorder.samples))
    return 0


def _seconds(value: float) -> str:
    from ..units import format_duration

    return format_duration(value) if value >= 1 else f"{value:g}s"


class _Unreadable(Exception):
    pass


def _unreadable(snap: Snapshot) -> str | None:
    """Why no GPU of this snapshot could be read (a driver unloaded or reloaded under vram: NVML
    answers every call with an error), or None. Fields the GPU does not support or lets no one
    read are what it is, not a failure; a lost GPU is recorded as lost."""
    reasons = []
    for g in snap.gpus:
        why = g.na.get("memory_used")
        if g.lost or g.memory_used is not None or why is None or "support" in why or "permission" in why:
            return None
        reasons.append(why)
    return reasons[0] if reasons else None


def _reopen(collector: Collector, args: argparse.Namespace) -> None:
    """After a failed reading, open the machine afresh (a reloaded driver invalidates NVML's
    handles). If it cannot be opened yet, the old one stays and the next interval tries again."""
    try:
        fresh = open_for(args)
    except VramkitError:
        return
    collector.replace_machine(fresh)
