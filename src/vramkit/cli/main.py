"""Entry point of `vram`: parse, dispatch, and turn every error into one line and an exit code.

Exit codes: 0 ok, 1 failure (no driver, could not do it), 2 bad usage or bad input,
130 interrupted. No traceback unless --debug.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import sys

from .. import i18n
from .._version import __version__
from ..errors import VramkitError
from ..i18n import N_, _
from .commands import COMMANDS, OLD_COMMANDS
from .common import TYPE_CHECKING, HelpFormatter, UsageError, add_global_options

if TYPE_CHECKING:
    from typing import Any, NoReturn

# argparse words its help ("usage: ", "options") and its errors through its module's own `_` and
# `ngettext`, looked up when it builds each one: pointed at vram's catalog they speak the reader's
# language (their msgids: argparse_words.py). Set here, in the command line's entry point only: a
# program that imports vramkit as a library keeps its own argparse.
setattr(argparse, "_", _)  # noqa: B010 (mypy: not in argparse's stubs)
setattr(argparse, "ngettext", i18n.ngettext)  # noqa: B010

DESCRIPTION = N_("See, free, share and plan NVIDIA GPU memory.")
# Translators: keep each command line as it is; translate what it does (after the command).
EPILOG = N_("""\
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
""")


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)  # argparse's own imports shutil to ask the width
        super().__init__(*args, **kwargs)
        # What the user typed that this parser refused, for did_you_mean: argparse's message says it,
        # but in the reader's language.
        self.bad_choice: tuple[argparse.Action, object] | None = None
        self.unrecognized: list[str] = []

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            self.bad_choice = (action, value)
        super()._check_value(action, value)

    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse's usage block is noise here)
        suggestion = did_you_mean(self, self.bad_choice, self.unrecognized)
        if suggestion:
            raise UsageError(_("{error}; did you mean {suggestion}? (see '{prog} --help')").format(
                error=message, suggestion=suggestion, prog=self.prog))
        raise UsageError(_("{error} (see '{prog} --help')").format(error=message, prog=self.prog))


def did_you_mean(parser: argparse.ArgumentParser, choice: tuple[argparse.Action, object] | None,
                 unrecognized: list[str]) -> str:
    """The command ("'status'") or option ("--gpu") `parser` offers that is closest to a misspelt
    choice (`choice`: the action and the value it refused) or to the first option among the
    unrecognized words, or ''. Hidden spellings (old names, suppressed options) are not offered."""
    import difflib

    if choice is not None:
        action, typed = choice
        words = [str(c) for c in action.choices or ()]
        close = difflib.get_close_matches(str(typed), words, n=1, cutoff=0.6)
        return f"'{close[0]}'" if close else ""
    option = next((w for w in unrecognized if w.startswith("--")), None)
    if option is None:
        return ""
    options = [o for a in parser._actions if a.help != argparse.SUPPRESS
               for o in a.option_strings if o.startswith("--")]
    close = difflib.get_close_matches(option.split("=", 1)[0], options, n=1, cutoff=0.6)
    return close[0] if close else ""


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """vram's parser. Without `argv`, every command's; with it, only the command `argv` names gets
    its options (its module imported), the others are listed by name and help line alone: so
    `vram --help` and `vram --version` import no command module and build no command's options."""
    wanted = None if argv is None else command_in(argv)
    common = _Parser(add_help=False)
    add_global_options(common)
    parser = _Parser(prog="vram", description=DESCRIPTION, epilog=EPILOG, formatter_class=HelpFormatter,
                     parents=[common])
    # The help given: argparse words it for translation only from Python 3.13 on.
    parser.add_argument("--version", action="version", version=f"vram {__version__}",
                        help=N_("show program's version number and exit"))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    unloaded = _Parser(add_help=False)  # every command not loaded: parsing one sets no `run`
    for name, help_line in COMMANDS.items():
        if argv is None or name == wanted:
            # __import__, not importlib.import_module: -X importtime (tests/test_vramkit_imports.py) sees it
            __import__(f"{__package__}.{name}", fromlist=["add_parser"]).add_parser(sub, [common])
        else:  # what sub.add_parser(name, help=...) records, without building a parser per command
            sub.choices[name] = unloaded
            sub._choices_actions.append(sub._ChoicesPseudoAction(name, (), help_line))
    _note_parsers(parser)
    return parser


def renamed(argv: list[str]) -> list[str]:
    """argv with a renamed command's old name (OLD_COMMANDS) as its new one, said in one line on
    stderr. The old name is no choice of the parser, so help, completion, 'did you mean' and the
    error listing the commands never offer it."""
    words = argv[:argv.index("--")] if "--" in argv else argv
    at = next((i for i, word in enumerate(words) if word in COMMANDS or word in OLD_COMMANDS), None)
    if at is None or argv[at] not in OLD_COMMANDS:
        return argv
    old, new = argv[at], OLD_COMMANDS[argv[at]]
    print(_("vram: note: 'vram {old}' is now 'vram {new}' (the old name works until the next release)").format(
        old=old, new=new), file=sys.stderr)
    return [*argv[:at], new, *argv[at + 1:]]


def command_in(argv: list[str]) -> str | None:
    """The command argv names: its first word before '--' that is a command's name."""
    words = argv[:argv.index("--")] if "--" in argv else argv
    return next((word for word in words if word in COMMANDS), None)


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
    hint = _("vram: to try vram without a GPU, use the bundled simulated server: vram {command} --simulate demo"
             ).format(command=command)
    if command != "status" or not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(hint, file=sys.stderr)
        return False
    try:
        # Translators: the answer is read as English (Enter, y or yes: show it): keep [Y/n].
        answer = input(_("Show the bundled simulated server (8x A100, scenario 'demo') instead? [Y/n] "))
    except EOFError:
        answer = "n"
    if answer.strip().lower() in ("", "y", "yes"):
        return True
    print(hint, file=sys.stderr)  # declined: still say how to try it later
    return False


def _parse(argv: list[str]) -> argparse.Namespace:
    """argv parsed by a parser that knows only its command's options (vram alone is vram status)."""
    args = _parse_with(build_parser(argv), argv)
    if args.command is None:
        argv = [*argv, "status"]
        args = _parse_with(build_parser(argv), argv)
    if not hasattr(args, "run"):  # a command command_in did not see (never expected): all of them
        args = _parse_with(build_parser(), argv)
    return args


def _parse_with(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parser.parse_args(argv), except that an option no parser knows is told by the command it
    was given to ('see vram status --help', with a did-you-mean from that command's options), not
    by vram's top-level parser, which argparse leaves the leftovers to."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        command_parser = getattr(args, "command_parser", parser)
        if isinstance(command_parser, _Parser):
            command_parser.unrecognized = extras
        command_parser.error(_("unrecognized arguments: %s") % " ".join(extras))  # argparse's own words
    return args


def machine_readable(argv: list[str]) -> bool:
    """Whether argv asks for JSON or CSV (before '--': the command `vram run` starts has its own
    flags). Such output, and every line said with it, is English: a program reads it."""
    words = argv[:argv.index("--")] if "--" in argv else argv
    return "--json" in words or "--csv" in words


def _no_driver(e: VramkitError) -> bool:
    from ..nvml.backend import NvmlUnavailable  # only once something failed: --help never loads NVML

    return isinstance(e, NvmlUnavailable)


def _print_traceback() -> None:
    import traceback

    traceback.print_exc()


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
    options = [a.option_strings for a in parser._actions
               if a.dest == param and a.option_strings and a.help != argparse.SUPPRESS]
    if len(options) != 1:
        return None
    return next((o for o in options[0] if o.startswith("--")), options[0][0])


def one_line(e: VramkitError, parser: argparse.ArgumentParser | None = None,
             args: argparse.Namespace | None = None) -> str:
    """What vram prints for an error: the kind's prefix ("bad scenario: "; "error: " for bad
    input, exit 2; none for a failure), then the message, with the parameter named by the
    command's flag for it where it has one ('error: --count: must be ...')."""
    from ..nvml.scenario import ScenarioError

    flag = flag_for(parser, e.param, args) if e.param else None
    # Translators: {flag} is the command's option the message is about ("--count"); {message} says what
    # is wrong with its value
    from ..procs import sanitize

    # sanitized once more here: a path or a value in the message may carry what another user typed
    message = sanitize(_("{flag}: {message}").format(flag=flag, message=e.message) if flag else str(e))
    if isinstance(e, ScenarioError):
        return _("bad scenario: {message}").format(message=message)
    return _("error: {message}").format(message=message) if e.exit_code == 2 else message


def _internal_error(e: BaseException) -> str:
    return _("vram: internal error: {kind}: {error} (run with --debug for the traceback)").format(
        kind=type(e).__name__, error=e)


def _freeze_at_exit() -> None:
    """Interpreter shutdown runs two full garbage collections over every object the process made
    (nvidia-ml-py alone defines some 250 ctypes classes): ~10 ms of a one-shot `vram status`, to
    free memory the operating system takes back anyway. Frozen, they are skipped; reference counting
    still frees what module teardown releases, as before. Only at exit: a long-running command
    collects as usual while it runs."""
    gc.freeze()


def _stdout_failed(e: OSError) -> bool:
    """Whether `e` came from writing standard output: it cannot take even an empty write (a
    device such as /dev/full, a broken pipe), or it is a file on a disk that filled up."""
    import errno
    import stat

    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    try:
        _probe_stdout()
    except OSError:
        return True
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False
    return regular and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _probe_stdout() -> None:
    """Raise the OSError of standard output when it cannot take even an empty write (/dev/full)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return
    os.write(fd, b"")


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor underneath (tests, embedding)
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    atexit.unregister(_freeze_at_exit)  # once, however often main() runs in one process (tests)
    atexit.register(_freeze_at_exit)
    if argv[:1] == ["help"]:  # vram help [COMMAND [SUBCOMMAND]]: that command's --help
        argv = [*argv[1:], "--help"]
    # Before anything is translated for the command: its parser's help lines are, as it is built.
    if machine_readable(argv):
        i18n.force_english()
    argv = renamed(argv)
    # Before parsing succeeds, and never from a command run after '--' (vram run -- x --debug).
    debug = "--debug" in (argv[:argv.index("--")] if "--" in argv else argv)
    args: argparse.Namespace | None = None
    try:
        try:
            args = _parse(argv)
        except SystemExit as done:  # --help, --version: argparse ignores a failed write, vram does not
            sys.stdout.flush()
            if not done.code:
                _probe_stdout()
            raise
        debug = getattr(args, "debug", False)
        if getattr(args, "simulate", None) == "":  # not "no simulation": a scenario left out of a script
            raise UsageError(_("--simulate: which scenario? (a bundled name such as demo, or a scenario JSON file)"))
        if getattr(args, "json", False) or getattr(args, "csv", False):  # also spelt --js, --cs
            i18n.force_english()
        try:
            code: int = args.run(args)
            sys.stdout.flush()  # a full disk or a closed reader shows here, not at exit
            return code
        except VramkitError as e:
            if not _no_driver(e) or getattr(args, "simulate", None) or os.environ.get("VRAM_SIMULATE"):
                raise
            if debug:
                _print_traceback()
            # Every command says why it failed (`vram ps` used to exit 1 silently).
            if _offer_simulation(str(e), args.command):
                args.simulate = "demo"
                code = args.run(args)
                return code
            return 1
    except VramkitError as e:  # no driver too, when no simulation is offered
        if debug:
            _print_traceback()
        print(f"vram: {one_line(e, getattr(args, 'command_parser', None), args)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (vram ps | head): not an error. Silence the flush at exit.
        _drop_stdout()
        return 0
    except OSError as e:
        if debug or not _stdout_failed(e):
            if debug:
                raise
            print(_internal_error(e), file=sys.stderr)
            return 1
        # vram status > /dev/full: the output could not be written. One line, exit 1.
        _drop_stdout()
        print(_("vram: cannot write the output: {reason}").format(reason=e.strerror or e), file=sys.stderr)
        return 1
    except Exception as e:
        if debug:
            raise
        print(_internal_error(e), file=sys.stderr)
        return 1
