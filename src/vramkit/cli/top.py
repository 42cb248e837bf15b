"""vram top: the live view. Textual is imported only here, inside `run`, so that every other
command stays fast."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..i18n import N_, _
from . import owners
from .commands import COMMANDS
from .common import (
    Failure,
    HelpFormatter,
    UsageError,
    add_duration,
    check_gpus,
    duration_text,
    help_values,
    open_for,
    parse_gpu_list,
)

if TYPE_CHECKING:
    from ..gpu_state import Snapshot
    from ..render.style import Style
    from .common import Subparsers

HELP = COMMANDS["top"]
DESCRIPTION = N_("""\
A live view of this machine's GPUs: a panel per GPU (memory bar, utilization, temperature,
power, and the last minutes of memory and utilization), alerts (a GPU nearly full, memory
growing toward full with an estimated time until full, a process holding memory on a GPU idle
for long, a defunct process still holding memory, a lost GPU), and the table of every process
holding GPU memory, as in `vram ps`: sort it, filter it by user or GPU, search it, see it as a
tree, open one process for its full command and memory over time.

The history lines start with what 'vram record' has recorded, when its database exists (--db,
$VRAM_DB, else the recorder's default), and go on with live samples; h switches their range:
5m, 1h, 24h, 7d.

A process's SM%, BW% (memory bandwidth), ENC and DEC are its own (NVML's per-process
samples); UTIL is its GPU's. OWNER, when some process has one, is its container, Kubernetes pod
or Slurm job, as in 'vram ps'. Under the banner, the host's CPU, RAM and swap; under the GPU
panels, the memory each user holds now. Enter on a process shows the GPUs its environment told
it to use (CUDA_VISIBLE_DEVICES, as it started) beside the ones it holds memory on.

Keys: ? help, q (or Ctrl-C) quit, s sort, r reverse, / search, u user, g GPU, t tree, Enter details,
k kill: SIGTERM, SIGINT, or SIGKILL after TERM (asks first; not with --readonly), a alerts,
p pause, h history range.

Defaults (interval, columns, theme, colour thresholds...) come from the config files: see
'vram config' and docs/config.md; a flag here overrides them.

examples:
  vram top                         refresh every 2 seconds
  vram top --interval 1s --gpu 0-3 every second, GPUs 0 to 3 only
  vram top --pid 4242,4243         only these processes
  vram top --user alice,bob        start with alice's and bob's processes (u changes the filter)
  vram top --only-visible --compute  the GPUs this shell's CUDA_VISIBLE_DEVICES shows, compute only
  vram top --pod nlp/train-7f9c    only this Kubernetes pod's processes (also --container, --slurm-job)
  vram top --ascii --theme light   a terminal without Unicode blocks, on a white background
  vram top --readonly              no actions, only watching
  vram top --simulate demo         the bundled simulated 8-GPU server
  vram top --db /tmp/demo.db       history recorded by 'vram record --db /tmp/demo.db'
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("top", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    help_values(add_duration(p, "--interval",
                             help=N_("time between refreshes (default %(config)s; config top.interval)")),
                config=_config_default("top.interval"))
    p.add_argument("--readonly", action="store_true", help=N_("watch only: no kill action"))
    p.add_argument("--all-users", action="store_true",
                   help=N_("as root, allow killing other users' processes (as vram kill --all-users)"))
    p.add_argument("--gpu", metavar="LIST", help=N_("only these GPUs: 0 | 0,2 | 0-3"))
    help_values(add_duration(p, "--idle-after", help=N_("alert when a process holds memory on a GPU idle this long, "
                                                        "as observed (default %(config)s; config top.idle_after)")),
                config=_config_default("top.idle_after"))
    help_values(add_duration(p, "--history", low=10, bounds=N_("at least 10s"),
                             help=N_("time covered by the history lines at start (default %(config)s; h switches)")),
                config=_config_default("top.history"))
    p.add_argument("--pid", metavar="LIST", help=N_("only these processes (comma-separated pids)"))
    p.add_argument("--user", nargs="?", const="", metavar="NAMES",
                   help=N_("start with the table filtered to these users (comma-separated; alone: yours); "
                           "u changes it"))
    p.add_argument("--only-visible", action="store_true",
                   help=N_("only the GPUs (and MIG instances) CUDA_VISIBLE_DEVICES in vram's own environment shows"))
    owners.add_filters(p)
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--compute", action="store_const", const="compute", dest="kind",
                      help=N_("only compute processes (CUDA)"))
    kind.add_argument("--graphics", action="store_const", const="graphics", dest="kind",
                      help=N_("only graphics processes (a display, OpenGL, Vulkan)"))
    p.add_argument("--ascii", action="store_const", const=True,
                   help=N_("no Unicode blocks, box or tree characters (a terminal or font without them)"))
    p.add_argument("--theme", choices=("dark", "light"), help=N_("colours for a dark (default) or light background"))
    p.add_argument("--db", metavar="PATH",
                   help=N_("the recorded history to draw (default: the recorder's database; also $VRAM_DB)"))
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..config import load
    from ..install_hint import require

    require("textual", "tui", "vram top")
    if args.interval is not None and not args.interval > 0:
        raise UsageError(_("--interval: must be more than 0 seconds"))
    idle_after, span = args.idle_after, args.history
    pids = _pids(args.pid) if args.pid else set()
    users = _users(args.user)
    cfg = load()
    for name, value in (("interval", args.interval), ("idle_after", idle_after), ("history", span),
                        ("ascii", args.ascii), ("theme", args.theme)):
        cfg.flag(f"top.{name}", value)
    if cfg["top.history"] < 10:
        raise UsageError(_("top.history (from {source}): at least 10s").format(source=cfg.sources["top.history"]))
    wanted = parse_gpu_list(args.gpu) if args.gpu is not None else None
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise Failure(_("vram top needs a terminal; for a refreshing text view use 'vram status --watch'"))
    from ..collector import Collector

    _one_malloc_arena()
    machine = open_for(args)
    # The view and its kills share one reader; the view keeps its own history (alerts.History,
    # the charts), so the collector's ring holds only the newest snapshot, not 16 (MiBs at 500 processes).
    collector = Collector(machine, interval=cfg["top.interval"], keep=1)
    try:
        first = collector.snapshot()
        if wanted is not None:
            check_gpus(first, wanted)
        visible = _visible_units(first) if args.only_visible else None
        if visible is not None:  # the panels too: only the GPUs vram's environment shows
            gpus_shown = sorted({gpu for gpu, __ in visible})
            wanted = gpus_shown if wanted is None else [g for g in wanted if g in gpus_shown]
        if getattr(args, "no_color", False):
            os.environ["NO_COLOR"] = "1"  # Textual reads it when the app is created
        memory_levels = (cfg["thresholds.memory_warn"], cfg["thresholds.memory_critical"])
        with _screen_on_stderr(), _early_frame(first, wanted, getattr(args, "no_color", False), cfg["top.ascii"],
                                               memory_levels):
            from ..alerts import Thresholds
            from ..tui.app import TopApp  # imports Textual: ~0.2 s, while the early frame is on screen
            from ..tui.look import THEMES, Look
            from ..tui.rows import View

            if not args.readonly:
                from ..tui.actions import KillActions

            actions = None if args.readonly else KillActions(collector, all_users=args.all_users)
            look = Look(THEMES[cfg["top.theme"]], cfg["top.ascii"], cfg["thresholds.memory_warn"],
                        cfg["thresholds.memory_critical"])
            thresholds = Thresholds(idle_after=cfg["top.idle_after"], nearly_full=cfg["thresholds.nearly_full"] / 100)
            app = TopApp(collector.snapshot, interval=cfg["top.interval"], readonly=args.readonly, gpus=wanted,
                         thresholds=thresholds, history_span=cfg["top.history"], actions=actions,
                         history_db=history_db(args.db), look=look, columns=cfg["top.columns"],
                         view=View(pids=pids, kind=args.kind, visible=visible, users=users,
                                   workload=owners.wanted(args) or {}),
                         read_health=machine.read_health,
                         pids_visible=machine.backend.pids_visible(), usage=collector)
            del first  # drawn already (the early frame); the view keeps only what it samples
            app.run()
    finally:
        # A sample stuck in a slow driver call is left behind (its thread is a daemon): quitting
        # does not wait for it, and NVML is released when the process exits.
        if not collector.reading:
            machine.close()
    return app.return_code or 0


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def _one_malloc_arena() -> None:
    """glibc gives each thread that allocates an arena of its own: besides the main thread, the
    view has the sampler and Textual's input and output threads, and their arenas' free space
    grew over the first minutes of a view, and RSS with it. One arena for all, set before any of
    them starts; with glibc only (musl has one allocator for all threads anyway)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        if hasattr(libc, "gnu_get_libc_version"):
            libc.mallopt(M_ARENA_MAX, 1)
    except (OSError, AttributeError):
        pass


def _config_default(name: str) -> Callable[[], str]:
    """The built-in default of a config key, as a duration (for a help text)."""
    def shown() -> str:
        from ..config import BY_NAME

        return duration_text(BY_NAME[name].default)
    return shown


def _pids(text: str) -> set[int]:
    pids = set()
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()) or not 0 < int(part) <= 2**22:
            raise UsageError(_("--pid: not a process id: {text} (a list: 4242,4243)").format(text=repr(part[:40])))
        pids.add(int(part))
    return pids


def _users(text: str | None) -> set[str]:
    """--user NAMES as a set; --user alone: the caller's own name."""
    if text is None:
        return set()
    if text == "":
        from ..procs import user_name

        return {user_name(os.getuid())}
    names = {u.strip() for u in text.split(",") if u.strip()}
    if not names:
        raise UsageError(_("--user: name at least one user"))
    return names


def _visible_units(snap: Snapshot) -> set[tuple[int, int | None]] | None:
    """The (GPU, MIG instance) units vram's own environment lets through (CUDA_VISIBLE_DEVICES, or
    HIP's and ROCm's variables on AMD GPUs: visible.py; None: nothing set, so every GPU); a value a
    runtime would refuse is a usage error."""
    from .. import visible as visible_devices
    from ..cuda_env import devices_of

    devices = devices_of(snap)
    vis = visible_devices.read(os.environ, devices)
    try:
        keys = visible_devices.allowed_keys(vis, devices)
    except ValueError as e:
        raise UsageError(_("--only-visible: {error}").format(error=e)) from None
    if keys is None:
        return None
    units = {(d.index, d.gi) for d in devices if d.key in keys}
    # A whole GPU not in MIG mode holds its processes as (GPU, None); a GPU in MIG mode as (GPU, gi).
    return units


def history_db(named: str | None) -> Path | None:
    """The database to draw history from: the one named (--db, then $VRAM_DB), which the view
    reports on if it cannot be read, else the one readers find where one exists (None: no
    history, nothing to say)."""
    from ..history.paths import found_path

    return found_path(named)


def early_frame(snap: Snapshot, style: Style, width: int, height: int) -> str:
    """What `vram top` shows while Textual loads: the `vram status` view of the first snapshot,
    cut to the terminal's height, and a line saying the live view is coming."""
    from ..render.status_view import render_status

    lines = render_status(snap, style, width).splitlines()[: max(0, height - 1)]
    lines.append(style.paint(_("starting the live view…"), "dim"))
    return "\r\n".join(lines)


@contextlib.contextmanager
def _early_frame(snap: Snapshot, wanted: list[int] | None, no_color: bool, ascii: bool = False,
                 thresholds: tuple[float, float] | None = None) -> Iterator[None]:
    """Draw early_frame on the alternate screen (where Textual then draws) at once, keys not
    echoed meanwhile; on the way out, the terminal as it was (Textual restores what it found when
    it started, which is this frame's settings). `thresholds`: the memory colours' (warn,
    critical) % from the config already read (None: read it again if colour needs it)."""
    import termios

    from ..render.style import style_for
    from ..tui.look import Look

    fd = sys.stderr.fileno()
    try:
        saved = termios.tcgetattr(fd)
        size = os.get_terminal_size(fd)
    except (termios.error, OSError):
        yield
        return
    if wanted is not None:
        snap = dataclasses.replace(snap, gpus=[g for g in snap.gpus if g.index in wanted])
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | termios.ICANON)  # lflag: keys typed now wait for the view, unechoed
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    style = style_for(sys.stderr, no_color)
    style.unicode = style.unicode and not ascii
    style.thresholds = thresholds
    text = Look(ascii=ascii).plain(early_frame(snap, style, size.columns, size.lines))
    del snap  # the view takes its own: not a third snapshot held for the whole session (~0.5 MiB at 500 procs)
    os.write(fd, f"\x1b[?1049h\x1b[H\x1b[2J{text}".encode())  # the alternate screen, cleared
    try:
        yield
    except BaseException:  # before the view took the screen over (it leaves it itself on the way out)
        os.write(fd, b"\x1b[?1049l")
        raise
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _screen_on_stderr() -> Iterator[None]:
    """Textual draws on stderr; with stderr sent to a file (`vram top 2>log`) the screen would go
    there, so while the view runs stderr is the terminal stdout is on."""
    if sys.stderr.isatty():
        yield
        return
    saved = os.dup(2)
    os.dup2(sys.stdout.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
