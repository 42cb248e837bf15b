"""Entry point of `vram`: parse, dispatch, and turn every error into one line and an exit code.

Exit codes: 0 ok, 1 failure (no driver, could not do it), 2 bad usage or bad input,
130 interrupted. No traceback unless --debug.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import NoReturn

from .._version import __version__
from ..errors import VramkitError
from ..nvml.backend import NvmlUnavailable
from ..nvml.scenario import ScenarioError
from . import doctor, estimate, fleet, job, kill, pick, plan, ps, record, report, run, serve, sim, status, top
from .common import UsageError, add_global_options

COMMANDS = (status, ps, top, kill, pick, run, estimate, plan, doctor, record, report, job, serve, fleet, sim)

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

'vram COMMAND --help' (or 'vram help COMMAND') shows each command's options and examples.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse's usage block is noise here)
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
    _note_parsers(parser)
    return parser


def _note_parsers(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser records itself as args.command_parser (the deepest one parsed
    wins), so an error can be told in that command's flags."""
    parser.set_defaults(command_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _note_parsers(child)


def _offer_simulation(message: str, command: str) -> bool:
    """On a terminal, `vram status` offers the simulated server instead of just failing;
    every other command says how to try it."""
    print(f"vram: {message}", file=sys.stderr)
    hint = ("vram: to try vram without a GPU, use the bundled simulated server: "
            f"vram {command} --simulate demo")
    if command != "status" or not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(hint, file=sys.stderr)
        return False
    try:
        answer = input("Show the bundled simulated server (8x A100, scenario 'demo') instead? [Y/n] ")
    except EOFError:
        answer = "n"
    if answer.strip().lower() in ("", "y", "yes"):
        return True
    print(hint, file=sys.stderr)  # declined: still say how to try it later
    return False


def flag_for(parser: argparse.ArgumentParser | None, param: str, args: argparse.Namespace | None = None) -> str | None:
    """The command's flag for a library parameter: the one option whose dest is `param`
    (`min_free` -> --min-free, `count` -> --count, not -n), unless the command names it in
    `param_flags` (set_defaults(param_flags={"gpus": "--gpu"})). None when it has none, or when
    several options share the dest (--train/--infer set `mode`)."""
    explicit: dict[str, str] = getattr(args, "param_flags", None) or {}
    if param in explicit:
        return explicit[param]
    if parser is None:
        return None
    options = [a.option_strings for a in parser._actions if a.dest == param and a.option_strings]
    if len(options) != 1:
        return None
    return next((o for o in options[0] if o.startswith("--")), options[0][0])


def one_line(e: VramkitError, parser: argparse.ArgumentParser | None = None,
             args: argparse.Namespace | None = None) -> str:
    """What vram prints for an error: the kind's prefix ("bad scenario: "; "error: " for bad
    input, exit 2; none for a failure), then the message, with the parameter named by the
    command's flag for it where it has one ('error: --count: must be ...')."""
    prefix = "bad scenario: " if isinstance(e, ScenarioError) else "error: " if e.exit_code == 2 else ""
    flag = flag_for(parser, e.param, args) if e.param else None
    return f"{prefix}{flag}: {e.message}" if flag else f"{prefix}{e}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["help"]:  # vram help [COMMAND [SUBCOMMAND]]: that command's --help
        argv = [*argv[1:], "--help"]
    # Before parsing succeeds, and never from a command run after '--' (vram run -- x --debug).
    debug = "--debug" in (argv[:argv.index("--")] if "--" in argv else argv)
    args: argparse.Namespace | None = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            args = parser.parse_args([*argv, "status"])
        debug = getattr(args, "debug", False)
        try:
            code: int = args.run(args)
            return code
        except NvmlUnavailable as e:
            if getattr(args, "simulate", None) or os.environ.get("VRAM_SIMULATE"):
                raise
            if debug:
                traceback.print_exc()
            # Every command says why it failed (`vram ps` used to exit 1 silently).
            if _offer_simulation(str(e), args.command):
                args.simulate = "demo"
                code = args.run(args)
                return code
            return 1
    except VramkitError as e:  # NvmlUnavailable too, when no simulation is offered
        if debug:
            traceback.print_exc()
        print(f"vram: {one_line(e, getattr(args, 'command_parser', None), args)}", file=sys.stderr)
        return e.exit_code
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
