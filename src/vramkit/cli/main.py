"""Entry point of `vram`: parse, dispatch, and turn every error into one line and an exit code.

Exit codes: 0 ok, 1 failure (no driver, could not do it), 2 bad usage or bad input,
130 interrupted. No traceback unless --debug.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..nvml.backend import NvmlUnavailable
from ..nvml.scenario import ScenarioError
from . import doctor, estimate, kill, pick, plan, ps, run, sim, status, top
from .common import Failure, UsageError, add_global_options

COMMANDS = (status, ps, top, kill, pick, run, estimate, plan, doctor, sim)

EPILOG = """\
examples:
  vram status                      what is on each GPU, and who holds its memory
  vram ps --user alice             alice's GPU processes
  vram top                         the live view
  vram kill --zombie --dry-run     what defunct processes still hold, and what freeing it would do
  vram run -n 2 --wait -- python train.py   pick two free GPUs, reserve them, run the job
  vram estimate llama-3-8b --batch 4 --seq 2048 --lora 16   will it fit?
  vram doctor train.log            why did this job run out of memory?
  vram status --simulate demo      try it on the bundled simulated 8-GPU server

'vram COMMAND --help' shows each command's options and examples.
"""


# Errors a user can cause or meet: one line on stderr, and the exit code.
_ONE_LINE_ERRORS = ((UsageError, "error: ", 2), (ScenarioError, "bad scenario: ", 2),
                    (NvmlUnavailable, "", 1), (Failure, "", 1))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's usage block is noise here)
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    add_global_options(common)
    parser = _Parser(prog="vram", description="See, free, share and plan NVIDIA GPU memory.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                     parents=[common])
    parser.add_argument("--version", action="version", version=f"vram {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in COMMANDS:
        module.add_parser(sub, [common])
    return parser


def _offer_simulation(message: str, command: str) -> bool:
    """On a terminal, `vram status` offers the simulated server instead of just failing;
    every other command says how to try it."""
    print(f"vram: {message}", file=sys.stderr)
    if command != "status" or not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("vram: to try vram without a GPU, use the bundled simulated server: "
              f"vram {command} --simulate demo", file=sys.stderr)
        return False
    try:
        answer = input("Show the bundled simulated server (8x A100, scenario 'demo') instead? [Y/n] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("", "y", "yes")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            args = parser.parse_args([*argv, "status"])
        try:
            return args.run(args)
        except NvmlUnavailable as e:
            if getattr(args, "simulate", None) or os.environ.get("VRAM_SIMULATE"):
                raise
            # Every command says why it failed (`vram ps` used to exit 1 silently).
            if _offer_simulation(str(e), args.command):
                args.simulate = "demo"
                return args.run(args)
            return 1
    except (UsageError, ScenarioError, NvmlUnavailable, Failure) as e:
        prefix, code = next((p, c) for kind, p, c in _ONE_LINE_ERRORS if isinstance(e, kind))
        print(f"vram: {prefix}{e}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (vram ps | head): not an error. Silence the flush at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as e:
        if debug:
            raise
        print(f"vram: internal error: {type(e).__name__}: {e} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1
