"""What every subcommand shares: global options, opening the machine, errors, output."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from .. import units
from ..errors import VramkitError, no_such_gpu
from ..model import Snapshot
from ..snapshot import Machine, open_machine

if TYPE_CHECKING:
    from typing import TypeAlias

    # What each command's add_parser(sub, parents) gets: main's subparsers.
    Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class UsageError(VramkitError):
    """Bad input from the user: one line on stderr, exit 2. With `param` (an argparse dest, as a
    library parameter is), cli/main.py puts the command's flag for it first."""

    exit_code = 2


class Failure(VramkitError):
    """The command could not do its job: one line on stderr, exit 1."""


def add_global_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("global options")
    g.add_argument("--simulate", metavar="NAME|FILE", default=argparse.SUPPRESS,
                   help="use a simulated machine: a bundled scenario (demo, mig, faulty, lab-day) or a scenario "
                        "JSON file; also $VRAM_SIMULATE")
    g.add_argument("--no-color", action="store_true", default=argparse.SUPPRESS,
                   help="no colours (also when $NO_COLOR is set or output is not a terminal)")
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the full traceback on errors")


def add_data_options(parser: argparse.ArgumentParser, csv_rows: str) -> None:
    """--json / --csv (one of them), and --gpu, as status and ps take them."""
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON (schema: docs/json.md)")
    out.add_argument("--csv", action="store_true", help=f"print CSV, one row per {csv_rows}")
    parser.add_argument("--gpu", metavar="LIST", help="only these GPUs: 0 | 0,2 | 0-3")


def parse_gpu_list(text: str) -> list[int]:
    """'0,2,5' or '0-3' or '1,4-6' -> sorted GPU indices, or a usage error naming --gpu."""
    try:
        return units.parse_gpu_list(text)
    except ValueError as e:
        raise UsageError(f"--gpu: {e}") from None


def check_gpus(snap: Snapshot, wanted: list[int]) -> None:
    """A RequestError (param gpu: --gpu) for the first wanted GPU this machine does not have."""
    have = [g.index for g in snap.gpus]
    missing = [i for i in wanted if i not in have]
    if missing:
        raise no_such_gpu(missing[0], have)


def open_for(args: argparse.Namespace) -> Machine:
    return open_machine(getattr(args, "simulate", None))


# --watch: shorter redraws only spin the CPU (and NVML); a longer one is a typo.
WATCH_MIN_S = 0.01
WATCH_MAX_S = 86400.0


def check_watch(interval: float) -> None:
    """A UsageError unless `interval` is a number of seconds --watch can wait (not nan, inf, 1e-9)."""
    if not (math.isfinite(interval) and WATCH_MIN_S <= interval <= WATCH_MAX_S):
        raise UsageError(f"--watch: the interval must be {WATCH_MIN_S:g} to {WATCH_MAX_S:g} seconds, "
                         f"got {interval:g}")


def watch_loop(interval: float, draw: Callable[[], str], tty: bool, out: TextIO | None = None,
               stream: bool = False) -> None:
    """Redraw every `interval` seconds until Ctrl-C. On a terminal the screen is cleared between
    frames; elsewhere frames follow each other, separated by a blank line. `stream`: frames are
    records of one stream (NDJSON lines, CSV rows): never a blank line or a cleared screen."""
    out = out or sys.stdout
    check_watch(interval)
    first = True
    while True:
        started = time.monotonic()
        frame = draw()
        if stream:
            if frame:
                out.write(frame + "\n")
        elif tty:
            out.write("\x1b[H\x1b[2J" + frame + "\n")
        else:
            out.write(("" if first else "\n") + frame + "\n")
        out.flush()
        first = False
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
