"""vram completion SHELL: a completion script for bash, zsh or fish, generated from vram's own parser.

The script is static (no `vram` runs at each Tab): the commands, their subcommands, options,
the values of options with a fixed set of them, and the bundled scenario names for --simulate.
The descriptions zsh and fish show beside each candidate are in the language vram speaks when
the script is generated.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..i18n import N_, _
from ..render.text_width import cells, fit
from .commands import COMMANDS
from .common import TYPE_CHECKING, HelpFormatter

if TYPE_CHECKING:
    from .common import Subparsers

HELP = COMMANDS["completion"]
# Translators: keep the command lines; translate the prose and what each example does.
DESCRIPTION = N_("""\
Print a completion script for SHELL on stdout. It completes commands, subcommands, options,
the values of options that take one of a few words (--by, --sort, --format, ...), the bundled
scenario names after --simulate, and file names elsewhere. Install it once, and again after
upgrading vram (the script is generated from this version's options).

examples:
  vram completion bash > ~/.local/share/bash-completion/completions/vram
  vram completion zsh > ~/.zfunc/_vram     with fpath=(~/.zfunc $fpath) before compinit in ~/.zshrc
  vram completion fish > ~/.config/fish/completions/vram.fish
  source <(vram completion bash)           this shell only
""")

SHELLS = ("bash", "zsh", "fish")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("completion", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help=N_("bash, zsh or fish"))
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..nvml.scenario import bundled_names
    from .main import build_parser

    tree = command_tree(build_parser())
    print(SCRIPTS[args.shell](tree, bundled_names()), end="")
    return 0


# ------------------------------------------------------------------ what the parser knows

@dataclass
class Option:
    names: list[str]
    help: str
    takes_value: bool
    choices: list[str]
    metavar: str = ""


@dataclass
class Command:
    path: str  # "" for vram itself, "sim list" for a subcommand
    help: str
    options: list[Option] = field(default_factory=list)
    subcommands: list[Command] = field(default_factory=list)
    positionals: list[str] = field(default_factory=list)  # their metavars: LOGFILE, DIR, NAME|FILE, ...


def command_tree(parser: argparse.ArgumentParser, path: str = "", help_text: str = "") -> Command:
    """Every command of `parser`, its options and subcommands, depth first (vram first)."""
    command = Command(path, help_text)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: (_(a.help) if a.help else "") for a in action._choices_actions}
            for name, child in action.choices.items():
                command.subcommands.append(command_tree(child, f"{path} {name}".strip(), helps.get(name, "")))
        elif action.option_strings and action.help != argparse.SUPPRESS:
            choices = [str(c) for c in action.choices] if action.choices else []
            # An optional value (--wait [SECONDS]) is not assumed: the next word may be anything.
            described = _first_clause(_(action.help)) if action.help else ""
            command.options.append(Option(list(action.option_strings), described, action.nargs not in (0, "?"),
                                          choices, str(action.metavar or "")))
        elif not action.option_strings and action.help != argparse.SUPPRESS:
            command.positionals.append(str(action.metavar or action.dest))
    return command


def _walk(command: Command) -> list[Command]:
    return [command, *(c for sub in command.subcommands for c in _walk(sub))]


def _first_clause(text: str, limit: int = 72) -> str:
    """A help text as a one-line description next to a candidate: up to its first '; ' (a second
    thought; '；' in Chinese), cut at a word to `limit` columns."""
    text = " ".join(text.replace("%%", "%").split()).split("; ", 1)[0].split("；", 1)[0]
    if cells(text) <= limit:
        return text
    if text.isascii():
        return text[:limit - 3].rsplit(" ", 1)[0].rstrip(",:(") + "..."
    return fit(text, limit)


def _value_options(tree: Command) -> list[str]:
    """Every option that takes a value: the word after it is that value, never a command."""
    return sorted({name for c in _walk(tree) for o in c.options if o.takes_value for name in o.names})


def _choices(tree: Command, scenarios: list[str]) -> list[tuple[str, str, list[str]]]:
    """(command path, option, its values) for every option with a fixed set of values."""
    rows: list[tuple[str, str, list[str]]] = []
    for c in _walk(tree):
        for o in c.options:
            values = o.choices or (scenarios if "--simulate" in o.names else [])
            rows.extend((c.path, name, values) for name in o.names if values)
    return rows


def _file_kind(metavar: str) -> str | None:
    """What a value named `metavar` completes to: 'd' directories (DIR), 'f' file names (FILE,
    PATH, LOGFILE), 's' a bundled scenario's name or a file (NAME|FILE); None: not a file name."""
    words = set(metavar.upper().replace("|", " ").split())
    if "DIR" in words:
        return "d"
    if words & {"FILE", "PATH", "LOGFILE"}:
        return "s" if "NAME" in words else "f"
    return None


def _file_rows(tree: Command) -> list[tuple[str, str]]:
    """('command path|option', kind) for every option whose value is a file name, and ('command
    path|', kind) for a command whose positional argument is one (kinds: _file_kind)."""
    rows: list[tuple[str, str]] = []
    for c in _walk(tree):
        for o in c.options:
            kind = _file_kind(o.metavar) if o.takes_value else None
            if kind and "--simulate" not in o.names:  # --simulate: once, for every command, below
                rows.extend((f"{c.path}|{name}", kind) for name in o.names)
        kinds = [k for k in map(_file_kind, c.positionals) if k]
        if kinds and not c.subcommands:
            rows.append((f"{c.path}|", kinds[0]))
    return [*rows, ("*|--simulate", "s")]


def _sq(text: str) -> str:
    """`text` in single quotes for bash and zsh (where a backslash inside them is literal)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _fish_q(text: str) -> str:
    """`text` in single quotes for fish (where backslash escapes a quote and itself)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ------------------------------------------------------------------ bash

_BASH = r"""# bash completion for vram, generated by `vram completion bash` (vram {version})
{functions}

_vram() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" path="" word i subs
    (( COMP_CWORD > 0 )) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for (( i = 1; i < COMP_CWORD; i++ )); do
        word="${{COMP_WORDS[i]}}"
        case "$word" in
            --) COMPREPLY=(); return 0 ;;  # what follows is another program's command line
            {value_options}) (( i++ )); continue ;;
            -*) continue ;;
        esac
        subs=" $(_vram_subcommands "$path") "
        [[ "$subs" == *" $word "* ]] && path="${{path:+$path }}$word"
    done
    local values kind
    if values="$(_vram_values "$path" "$prev")"; then
        COMPREPLY=($(compgen -W "$values" -- "$cur"))
        kind="$(_vram_file_kind "$path|$prev")" && _vram_files "$kind"
        return 0
    fi
    case "$prev" in
        {value_options})  # the word is this option's value: a file name, or nothing vram knows
            kind="$(_vram_file_kind "$path|$prev")" && _vram_files "$kind"
            return 0 ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_vram_options "$path")" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$(_vram_subcommands "$path")" -- "$cur"))
        (( ${{#COMPREPLY[@]}} )) || ! kind="$(_vram_file_kind "$path|")" || _vram_files "$kind"
    fi
    return 0
}}

# File names, each one word whatever it holds (spaces, quotes, globs): read a line each with
# mapfile, never split by $(...); readline quotes them as it inserts them (-o filenames). The
# word typed so far is unquoted first ("my l, 'my l and my\ l all mean `my l`): compgen does not.
_vram_files() {{
    local word="$cur" scenario
    local -a found
    case "$word" in
        \'*) word="${{word:1}}" ;;
        \"*) word="${{word:1}}"; word="${{word//\\\"/\"}}"; word="${{word//\\\$/\$}}"
             word="${{word//\\\`/\`}}"; word="${{word//\\\\/\\}}" ;;
        *\\*) IFS= read word <<< "$word" ;;  # read without -r removes each escaping backslash
    esac
    compopt -o filenames 2>/dev/null  # only inside a completion (not when a test calls _vram)
    if [[ "$1" == d ]]; then
        mapfile -t found < <(compgen -d -- "$word")
    else
        mapfile -t found < <(compgen -f -- "$word")
    fi
    if [[ "$1" == s && "$prev" != --simulate ]]; then  # a positional NAME|FILE: the bundled names too
        for scenario in $(_vram_values "" --simulate); do
            [[ "$scenario" == "$word"* ]] && found+=("$scenario")
        done
    fi
    COMPREPLY+=("${{found[@]}}")
}}

complete -o default -F _vram vram
"""


def bash_script(tree: Command, scenarios: list[str]) -> str:
    commands = _walk(tree)
    return _BASH.format(
        version=_version(),
        functions=_functions({
            "_vram_subcommands": ('"$1"', _case_rows((c.path, _sq(" ".join(_names(c)))) for c in commands
                                                     if c.subcommands)),
            "_vram_options": ('"$1"', _case_rows((c.path, _sq(" ".join(n for o in c.options for n in o.names)))
                                                 for c in commands)),
            "_vram_values": ('"$1|$2"', _case_rows((f"{path}|{option}", _sq(" ".join(values)))
                                                   for path, option, values in _value_rows(tree, scenarios))
                             + "\n        *) return 1 ;;"),
            "_vram_file_kind": ('"$1"', _case_rows(_file_rows(tree)) + "\n        *) return 1 ;;"),
        }),
        value_options="|".join(_value_options(tree)),
    )


def _functions(functions: dict[str, tuple[str, str]]) -> str:
    """Shell functions (bash and zsh alike) that each print the words of the `case` row their
    argument matches: {name: (the word cased on, the rows)}."""
    return "\n".join(f"{name}() {{\n    case {word} in\n{rows}\n    esac\n}}\n"
                     for name, (word, rows) in functions.items())


def _case_rows(rows: Iterable[tuple[str, str]], say: str = "echo") -> str:
    """Lines of a bash/zsh `case`: each PATTERN (quoted; '*' alone stays a glob) prints its words."""
    return "\n".join(f"        {_pattern(key)}) {say} {words} ;;" for key, words in rows)


def _pattern(key: str) -> str:
    """A case pattern matching `key` literally, but for a leading '*|', which matches any command."""
    return "*" + _sq(key[1:]) if key.startswith("*|") else _sq(key)


def _names(command: Command) -> list[str]:
    return [s.path.split()[-1] for s in command.subcommands]


def _value_rows(tree: Command, scenarios: list[str]) -> list[tuple[str, str, list[str]]]:
    """_choices for bash and zsh: --simulate once for every command ('*|--simulate')."""
    rows = [row for row in _choices(tree, scenarios) if row[1] != "--simulate"]
    return [*rows, ("*", "--simulate", scenarios)]


# ------------------------------------------------------------------ zsh

_ZSH = """\
#compdef vram
# zsh completion for vram, generated by `vram completion zsh` (vram {version})
_vram() {{
    local path_="" word i prev="${{words[CURRENT-1]}}"
    local -a candidates subs
    for (( i = 2; i < CURRENT; i++ )); do
        word="${{words[i]}}"
        case "$word" in
            --) _files; return ;;
            {value_options}) (( i++ )); continue ;;
            -*) continue ;;
        esac
        subs=(${{=$(_vram_names "$path_")}})
        (( ${{subs[(Ie)$word]}} )) && path_="${{path_:+$path_ }}$word"
    done
    candidates=(${{(f)"$(_vram_values "$path_" "$prev")"}})
    if (( ${{#candidates}} )); then
        compadd -a candidates
        if [[ "$prev" == --simulate ]]; then _files; fi
        return 0
    fi
    if [[ "$PREFIX" == -* ]]; then
        candidates=(${{(f)"$(_vram_options "$path_")"}})
        _describe -t options option candidates
    else
        candidates=(${{(f)"$(_vram_subcommands "$path_")"}})
        (( ${{#candidates}} )) && _describe -t commands command candidates || _files
    fi
}}

{functions}

if [[ "${{zsh_eval_context[-1]}}" == loadautofunc ]]; then
    _vram "$@"   # autoloaded from $fpath as _vram
else
    compdef _vram vram   # sourced
fi
"""


def _zsh_lines(items: Iterable[tuple[str, str]]) -> str:
    """NAME:DESCRIPTION lines, as _describe takes them (a colon in NAME escaped)."""
    return "\n".join(name.replace(":", "\\:") + ":" + text for name, text in items)


def zsh_script(tree: Command, scenarios: list[str]) -> str:
    commands = _walk(tree)
    say = "print -r --"
    return _ZSH.format(
        version=_version(),
        functions=_functions({
            "_vram_names": ('"$1"', _case_rows(((c.path, _sq(" ".join(_names(c)))) for c in commands
                                                if c.subcommands), say=say)),
            "_vram_subcommands": ('"$1"', _case_rows(((c.path, _sq(_zsh_lines((s.path.split()[-1], s.help)
                                                                               for s in c.subcommands)))
                                                      for c in commands if c.subcommands), say=say)),
            "_vram_options": ('"$1"', _case_rows(((c.path, _sq(_zsh_lines((n, o.help) for o in c.options
                                                                          for n in o.names)))
                                                  for c in commands), say=say)),
            "_vram_values": ('"$1|$2"', _case_rows(((f"{path}|{option}", _sq("\n".join(values)))
                                                    for path, option, values in _value_rows(tree, scenarios)),
                                                   say=say)),
        }),
        value_options="|".join(_value_options(tree)),
    )


# ------------------------------------------------------------------ fish

_FISH_HEAD = """\
# fish completion for vram, generated by `vram completion fish` (vram {version})
function __vram_path --description 'the command being completed: vram, vram ps, vram sim list, ...'
    set -l path vram
    set -l skip 0
    for word in (commandline -opc)[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        switch $word
            case --
                echo 'vram --'
                return
            case {value_options}
                set skip 1
            case '-*'
            case '*'
                if contains -- $word (__vram_subcommands $path)
                    set path "$path $word"
                end
        end
    end
    echo $path
end

function __vram_subcommands
    switch $argv[1]
{subcommands}
    end
end

complete -c vram -f
"""


def fish_script(tree: Command, scenarios: list[str]) -> str:
    commands = _walk(tree)
    lines = [_FISH_HEAD.format(
        version=_version(),
        value_options=" ".join(_fish_q(o) for o in _value_options(tree)),
        subcommands="\n".join(f"        case {_fish_q(_fish_path(c))}\n            printf '%s\\n' "
                              + " ".join(_fish_q(s.path.split()[-1]) for s in c.subcommands)
                              for c in commands if c.subcommands),
    )]
    values = {(path, option): v for path, option, v in _choices(tree, scenarios)}
    for c in commands:
        here = "-n " + _fish_q(f"test (__vram_path) = {_fish_q(_fish_path(c))}")
        for s in c.subcommands:
            lines.append(f"complete -c vram {here} -a {_fish_q(s.path.split()[-1])} -d {_fish_q(s.help)}")
        for o in c.options:
            flags = " ".join(f"-l {_fish_q(n[2:])}" if n.startswith("--") else f"-s {_fish_q(n[1:])}"
                             for n in o.names)
            choice = next((values[(c.path, n)] for n in o.names if (c.path, n) in values), None)
            if choice is not None:
                value = "-r -F" if "--simulate" in o.names else "-x"  # a scenario may be a file too
                lines.append(f"complete -c vram {here} {flags} {value} -a {_fish_q(' '.join(choice))} "
                             f"-d {_fish_q(o.help)}")
            else:
                value = " -r -F" if o.takes_value else ""
                lines.append(f"complete -c vram {here} {flags}{value} -d {_fish_q(o.help)}")
        if not c.subcommands:  # its positional arguments (a log, a scenario file, a directory): file names
            lines.append(f"complete -c vram {here} -F")
    return "\n".join(lines) + "\n"


def _fish_path(command: Command) -> str:
    return f"vram {command.path}".strip()


def _version() -> str:
    from .._version import __version__

    return __version__


SCRIPTS = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}
