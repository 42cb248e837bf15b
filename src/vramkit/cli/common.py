"""What every subcommand shares: global options, opening the machine, errors, output."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from .. import units
from ..errors import VramkitError, no_such_gpu
from ..i18n import N_, _

# typing.TYPE_CHECKING without importing typing (~3 ms that `vram --help` need not pay); mypy
# reads any constant of this name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO, TypeAlias

    from ..gpu_state import Snapshot
    from ..machine import Machine

    # What each command's add_parser(sub, parents) gets: main's subparsers.
    Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class UsageError(VramkitError):
    """Bad input from the user: one line on stderr, exit 2. With `param` (an argparse dest, as a
    library parameter is), cli/main.py puts the command's flag for it first."""

    exit_code = 2


class Failure(VramkitError):
    """The command could not do its job: one line on stderr, exit 1."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written in the source, except that a paragraph of plain prose
    is re-wrapped to the terminal's width (hand-wrapped lines broke mid-sentence on a narrower or
    wider one). A paragraph with an indented or bulleted line (examples, lists) stays as it is.

    Every text is translated here, when the help is shown (descriptions, epilogs, section titles,
    each option's help): a command marks them N_() where it writes them, and building a parser,
    which every run does, translates nothing. Chinese has no spaces: lines are folded by display
    width (render/text_width.wrap), not at spaces by code points as textwrap does."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:  # as argparse's own default, without importing shutil (bz2, lzma, ...)
            width = _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)
        self._headings: list[str] = []  # the section titles shown, translated

    def _expand_help(self, action: argparse.Action) -> str:
        return expand_help(action, self._prog)

    def _format_text(self, text: str) -> str:
        return super()._format_text(_(text))

    def start_section(self, heading: str | None) -> None:
        if heading:
            heading = _(heading)
            self._headings.append(heading)
        super().start_section(heading)

    def format_help(self) -> str:
        text: str = super().format_help()
        # Python 3.10 to 3.13 end each section title with an ASCII colon of their own; 3.14 words it
        # through gettext ("%(heading)s:"), which Chinese writes "：" (and then this finds nothing).
        for heading in self._headings:
            titled = _("%(heading)s:") % {"heading": heading}
            if titled != f"{heading}:":
                text = text.replace(f"\n{heading}:\n", f"\n{titled}\n")
        return text

    def _format_usage(self, usage: str | None, actions: Any, groups: Any, prefix: str | None) -> str:
        # argparse indents the usage's next lines by len(prefix): a translated prefix takes more
        # columns than characters ("用法：" is 6 columns), so the lines get the difference too.
        prefix = _("usage: ") if prefix is None else prefix
        extra = _cells(prefix) - len(prefix)
        self._width -= extra
        try:
            text = super()._format_usage(usage, actions, groups, prefix)
        finally:
            self._width += extra
        if not extra:
            return text
        first, *rest = text.split("\n")
        return "\n".join([first, *(" " * extra + line if line.strip() else line for line in rest)])

    def _split_lines(self, text: str, width: int) -> list[str]:
        if text.isascii():
            lines: list[str] = super()._split_lines(text, width)
            return lines
        from ..render.text_width import wrap

        return wrap(" ".join(text.split()), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        paragraphs = []
        for paragraph in text.strip("\n").split("\n\n"):
            lines = paragraph.splitlines()
            if any(line.startswith((" ", "-", "*")) for line in lines):
                paragraphs.append("\n".join(indent + line if line else line for line in lines))
            elif paragraph.isascii():
                paragraphs.append(textwrap.fill(" ".join(line.strip() for line in lines), width,
                                                initial_indent=indent, subsequent_indent=indent,
                                                break_long_words=False, break_on_hyphens=False))
            else:
                from ..render.text_width import wrap

                paragraphs.append("\n".join(indent + line for line in wrap(_joined(lines), width - len(indent))))
        return "\n\n".join(paragraphs) + "\n"


def _cells(text: str) -> int:
    """Display width (render/text_width.cells), loaded only for text that is not ASCII: English
    help never imports the renderer."""
    if text.isascii():
        return len(text)
    from ..render.text_width import cells

    return cells(text)


def _joined(lines: list[str]) -> str:
    """Hand-wrapped lines as one paragraph: a space where a line ended between two words, none
    between two Chinese characters (the line break there was no space)."""
    text = ""
    for line in (line.strip() for line in lines):
        if text and line and _cells(text[-1]) == 1 and _cells(line[0]) == 1:
            text += " "
        text += line
    return text


def _terminal_columns() -> int:
    """$COLUMNS, else the terminal's width, else 80: what shutil.get_terminal_size() answers."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


# ------------------------------------------------------------------ help that cannot go stale

def help_values(action: argparse.Action, **values: Callable[[], str]) -> argparse.Action:
    """Values for %(NAME)s in `action`'s help, computed from the code that owns them when the help
    is shown (a default that lives in the library or the config, the bundled scenarios): never
    a copy in the help text that goes stale, and nothing imported to build the parser."""
    action.help_values = values  # type: ignore[attr-defined]
    return action


def expand_help(action: argparse.Action, prog: str = "vram") -> str:
    """`action`'s help as --help prints it: %(default)s, %(choices)s, %(prog)s and the values
    help_values() names filled in (what argparse's HelpFormatter does, plus those)."""
    params: dict[str, object] = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    for name, value in list(params.items()):
        if hasattr(value, "__name__"):
            params[name] = value.__name__
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in action.choices or ())
    for name, compute in (getattr(action, "help_values", None) or {}).items():
        params[name] = compute()
    try:
        return (_(action.help) if action.help else "") % params
    except (ValueError, KeyError, TypeError):  # a translation that broke a %(name)s: the English, not a crash
        return (action.help or "") % params


def _scenario_names() -> str:
    from ..nvml.scenario import bundled_names

    return ", ".join(bundled_names())


# ------------------------------------------------------------------ durations: one parser

class Duration:
    """The one argparse type of every duration flag: 30, 90s, 10m, 2h, 1h30m -> seconds (float).
    A bad value is one line naming the flag ('--interval: not a duration: ...'), exit 2; `low`
    and `high` bound it (`bounds` says how), `words` are values with a meaning of their own
    ({'forever': math.inf}), `hint` is added to a value that is not a duration."""

    def __init__(self, flag: str, low: float | None = None, high: float | None = None, bounds: str = "",
                 words: dict[str, float] | None = None, hint: str = "") -> None:
        self.flag, self.low, self.high, self.bounds = flag, low, high, bounds
        self.words, self.hint = words or {}, hint
        self.__name__ = "duration"  # argparse names the type in its own messages

    def __call__(self, text: str) -> float:
        if text.strip().lower() in self.words:
            return self.words[text.strip().lower()]
        try:
            value = units.parse_duration(text)
        except ValueError as e:
            # argparse's own error (the parser's: the flag named, then where its help is)
            raise argparse.ArgumentTypeError(
                _("{error}; {hint}").format(error=e, hint=_(self.hint)) if self.hint else str(e)) from None
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            raise argparse.ArgumentTypeError(out_of_bounds(self.bounds, text))
        return value


def out_of_bounds(bounds: str, value: str) -> str:
    """'must be 0.1s to 1h, got 2d': `bounds` as a command marked it (N_), and the value given."""
    # Translators: {bounds} is a whole phrase such as "must be 0.1s to 1h", translated on its own.
    return _("{bounds}, got {value}").format(bounds=_(bounds), value=value)


def duration_text(seconds: float) -> str:
    """Seconds as a duration flag takes them, in its largest whole unit: 2s, 5m, 24h, 30d, 0.5s."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def add_duration(parser: argparse._ActionsContainer, flag: str, *, low: float | None = None,
                 high: float | None = None, bounds: str = "", words: dict[str, float] | None = None,
                 hint: str = "", **kwargs: Any) -> argparse.Action:
    """A duration flag (metavar DURATION unless given), parsed by Duration."""
    kwargs.setdefault("metavar", "DURATION")
    return parser.add_argument(flag, type=Duration(flag, low, high, bounds, words, hint), **kwargs)


# ------------------------------------------------------------------ renamed flags

class _OldSpelling(argparse.Action):
    """A flag's old name, kept for a release: hidden from help and completion; it does what the
    new one does and says so on stderr, once a run."""

    def __init__(self, option_strings: list[str], dest: str, new: argparse.Action, **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        new_name = next(o for o in self.new.option_strings if o.startswith("--"))
        print(_("vram: note: {old} is now {new} (the old name works until the next release)").format(
            old=option_string, new=new_name), file=sys.stderr)
        self.new(parser, namespace, values, new_name)


def add_old_spelling(parser: argparse._ActionsContainer, old: str, new: argparse.Action) -> argparse.Action:
    """`old` as a hidden alias of the option `new`: same value, same dest, a one-line note."""
    kwargs: dict[str, Any] = {"nargs": new.nargs, "const": new.const, "choices": new.choices, "metavar": new.metavar}
    if new.type is not None:
        kwargs["type"] = new.type
    return parser.add_argument(old, action=_OldSpelling, new=new, dest=new.dest, default=argparse.SUPPRESS, **kwargs)


def is_old_spelling(action: argparse.Action) -> bool:
    return isinstance(action, _OldSpelling)


def add_global_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(N_("global options"))
    help_values(g.add_argument("--simulate", metavar="NAME|FILE", default=argparse.SUPPRESS,
                               help=N_("use a simulated machine: a bundled scenario (%(scenarios)s) or a scenario "
                                       "JSON file; also $VRAM_SIMULATE")), scenarios=_scenario_names)
    g.add_argument("--no-color", action="store_true", default=argparse.SUPPRESS,
                   help=N_("no colours (also when $NO_COLOR is set or output is not a terminal)"))
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help=N_("show the full traceback on errors"))


# --precision, as estimate, plan and doctor take it (each with its own default: see docs/flags.md)
PRECISION_HELP = N_("fp32, fp16/bf16 mixed precision with fp32 master weights, or bf16-pure")
PRECISIONS = ("fp32", "fp16", "bf16", "bf16-pure")


# --csv's help by what a row is (whole sentences, for the translator)
CSV_HELP = {"GPU": N_("print CSV, one row per GPU"),
            "process and GPU": N_("print CSV, one row per process and GPU")}


def add_data_options(parser: argparse.ArgumentParser, csv_rows: str) -> None:
    """--json / --csv (one of them), and --gpu, as status and ps take them; `csv_rows` a key of CSV_HELP."""
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help=N_("print JSON (schema: docs/json.md)"))
    out.add_argument("--csv", action="store_true", help=CSV_HELP[csv_rows])
    parser.add_argument("--gpu", metavar="LIST", help=N_("only these GPUs: 0 | 0,2 | 0-3"))


def parse_gpu_list(text: str) -> list[int]:
    """'0,2,5' or '0-3' or '1,4-6' -> sorted GPU indices, or a usage error naming --gpu."""
    try:
        return units.parse_gpu_list(text)
    except ValueError as e:
        raise UsageError(f"--gpu: {e}") from None


def duration_flag(args: argparse.Namespace, name: str, low: float | None = None, high: float | None = None,
                  bounds: str = "") -> float:
    """The seconds in --NAME (parsed by Duration already, or still text), or a one-line error
    naming the flag; `bounds` says the allowed range when the value is below `low` or above `high`."""
    flag = "--" + name.replace("_", "-")
    value: float = Duration(flag)(getattr(args, name)) if isinstance(getattr(args, name), str) else getattr(args, name)
    if (low is not None and value < low) or (high is not None and value > high):
        raise UsageError(f"{flag}: {out_of_bounds(bounds, duration_text(value))}")
    return value


def check_gpus(snap: Snapshot, wanted: list[int]) -> None:
    """A RequestError (param gpu: --gpu) for the first wanted GPU this machine does not have."""
    have = [g.index for g in snap.gpus]
    missing = [i for i in wanted if i not in have]
    if missing:
        raise no_such_gpu(missing[0], have)


def open_for(args: argparse.Namespace) -> Machine:
    from ..machine import open_machine  # here, not at the top: `vram --help` never opens a machine

    return open_machine(getattr(args, "simulate", None))


# --watch: shorter redraws only spin the CPU (and NVML); a longer one is a typo.
WATCH_MIN_S = 0.01
WATCH_MAX_S = 86400.0


def check_watch(interval: float) -> None:
    """A UsageError unless `interval` is a number of seconds --watch can wait (not nan, inf, 1e-9)."""
    if not (math.isfinite(interval) and WATCH_MIN_S <= interval <= WATCH_MAX_S):
        raise UsageError("--watch: " + _("the interval must be {low:g} to {high:g} seconds, got {value:g}").format(
            low=WATCH_MIN_S, high=WATCH_MAX_S, value=interval))


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
