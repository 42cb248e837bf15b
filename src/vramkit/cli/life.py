"""vram life PID: one process's memory over its life, from the history `vram record` keeps.
(`vram job PID`, its old name, still works: cli/main.py OLD_COMMANDS.)"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..i18n import N_, _
from .commands import COMMANDS
from .common import HelpFormatter, UsageError, add_old_spelling

if TYPE_CHECKING:
    from .common import Subparsers

HELP = COMMANDS["life"]
DESCRIPTION = N_("""\
Show what 'vram record' kept about a process life (one process, from its start to its end):
whom it worked for (its container, Kubernetes pod or Slurm job, when it was in one), when it
was first and last seen, its GPU-hours, memory GiB-hours, peak memory and idle time, its
memory on each GPU over its life as a sparkline, and a short table of how it went. A pid used
again by a later process shows each life, newest first (--every-life), else only the newest.
Inside a container, a holder NVML lists under a host pid that no process here could be told to
be is kept by that host pid, apart from this container's pids: --host-pid shows it.
('vram job', the old name of this command, still works until the next release.)

examples:
  vram life 38817                  the newest recorded life of pid 38817
  vram life 38817 --every-life     every recorded life of that pid
  vram life --host-pid 4242        a holder outside this container, by its host pid
  vram life 38817 --json | jq '.lives[0].points | length'
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("life", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("pid", metavar="PID", help=N_("the process id"))
    p.add_argument("--db", metavar="PATH", help=N_("the database (default: the recorder's; also $VRAM_DB)"))
    p.add_argument("--host-pid", action="store_true",
                   help=N_("PID is a host pid NVML listed for a holder outside this container"))
    every = p.add_argument("--every-life", action="store_true", help=N_("every recorded life of PID, newest first"))
    add_old_spelling(p, "--all", every)
    p.add_argument("--rows", metavar="N", type=int, default=12, help=N_("rows in the table (default 12)"))
    p.add_argument("--json", action="store_true", help=N_("print every recorded point as JSON"))
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..history.query import process_lives
    from ..history.store import Store
    from ..render.life_view import life_json, render_life
    from ..render.style import style_for, terminal_width

    text = str(args.pid).strip()
    if not text.isdigit() or len(text) > 10 or not 0 < int(text) < 2**31:
        shown = repr(text if len(text) <= 20 else text[:17] + "...")
        if args.host_pid:  # the flag that says what PID is names the error
            raise UsageError(_("--host-pid: not a host process id: {text}").format(text=shown))
        raise UsageError(_("PID: not a process id: {text}").format(text=shown))
    if not 1 <= args.rows <= 1000:
        raise UsageError(_("--rows: must be 1 to 1000, got {value}").format(value=args.rows))
    pid = int(text)
    store = Store.open(args.db)
    try:
        lives = process_lives(store, pid, outside=args.host_pid)
        database = str(store.path)
    finally:
        store.close()
    if not args.every_life:
        lives = lives[:1]
    if args.json:
        print(life_json(lives, pid, database, outside=args.host_pid))
    else:
        print(render_life(lives, pid, database, style_for(sys.stdout, getattr(args, "no_color", False)),
                          terminal_width(), rows=args.rows, outside=args.host_pid))
    return 0 if lives else 1
