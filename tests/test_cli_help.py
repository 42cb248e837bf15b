"""Help texts: `vram help [COMMAND]`, flags that mean one thing everywhere, and every subcommand
with a description and examples."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import assert_one_line_error, clean_env, run_vram


def test_vram_help_is_the_top_level_help():
    result = run_vram("help")
    assert result.rc == 0, result.err
    assert result.out == run_vram("--help").out
    assert "vram help COMMAND" in result.out


@pytest.mark.parametrize("command", [("kill",), ("estimate",), ("sim",), ("sim", "list"), ("sim", "validate")])
def test_vram_help_command_is_its_help(command):
    result = run_vram("help", *command)
    assert result.rc == 0, result.err
    assert result.out == run_vram(*command, "--help").out
    assert result.out.startswith(f"usage: vram {' '.join(command)} ")


def test_vram_help_of_an_unknown_command_is_one_line_exit_2():
    assert_one_line_error(run_vram("help", "nosuch"), 2, "invalid choice: 'nosuch'")


@pytest.mark.parametrize("sub, example", [("list", "vram sim list --json"), ("validate", "vram sim validate my.json")])
def test_sim_subcommands_have_a_description_and_examples(sub, example):
    out = run_vram("sim", sub, "--help").out
    head = out.split("\n\n")[1]  # the paragraph after the usage block: the description
    assert not head.startswith(("positional arguments", "options")), out
    assert "examples:" in out and example in out


def test_n_is_count_in_pick_and_run_and_not_a_kill_flag():
    for command in ("pick", "run"):
        assert "-n N, --count N" in run_vram(command, "--help").out
    kill_help = run_vram("kill", "--help").out
    assert "--dry-run" in kill_help and "-n," not in kill_help and "[-n]" not in kill_help
    # -n is not dry-run in kill: an error that signals nothing, never a silent other meaning.
    result = run_vram("kill", "--simulate", "demo", "-n", "--zombie")
    assert_one_line_error(result, 2, "unrecognized arguments: -n")


def test_kill_help_says_where_idle_time_comes_from():
    # It said "vram cannot see the past" beside an --idle that reads the recorded history: both
    # ways are told, the history first, watching from now only without it.
    out = " ".join(run_vram("kill", "--help", env=clean_env(COLUMNS="1000")).out.split())
    assert "cannot see the past" not in out
    assert "its history answers at once" in out and "--idle 30m takes up to 30 minutes" in out


# ---------------------------------------------------------------- the parser built lazily

def _subparser(parser, name):
    import argparse

    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def test_the_top_level_help_lists_every_command_with_its_help_line():
    from vramkit.cli.commands import COMMANDS

    out = run_vram("--help", env=clean_env(COLUMNS="200")).out
    for name, help_line in COMMANDS.items():
        assert f"    {name:<20}{help_line}\n" in out or f"    {name}\n" in out, name
    assert run_vram("completion", "--help").rc == 0  # every listed command exists


def test_a_command_built_alone_has_the_same_options_and_help_as_in_the_whole_parser():
    from vramkit.cli.commands import COMMANDS
    from vramkit.cli.main import build_parser

    whole = build_parser()
    assert build_parser(["--help"]).format_help() == whole.format_help()
    for name in COMMANDS:
        alone = build_parser(["--simulate", "demo", name, "--json"])
        assert _subparser(alone, name).format_help() == _subparser(whole, name).format_help(), name


def test_help_and_version_import_no_command_module():
    # `vram --help` built every command's parser, importing every command module and through
    # them the library (~60 ms of CPU); only the table of names and help lines is needed.
    code = ("import sys\nfrom vramkit.cli.main import main\n"
            "try:\n    main([sys.argv[1]])\nexcept SystemExit:\n    pass\n"
            "print('MODULES', *sorted(sys.modules))")
    from vramkit.cli.commands import COMMANDS

    for flag in ("--help", "--version"):
        proc = subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True,
                              env=clean_env(), timeout=60)
        modules = set(proc.stdout.split("MODULES", 1)[1].split())
        loaded = {f"vramkit.cli.{name}" for name in COMMANDS} & modules
        assert not loaded, (flag, sorted(loaded))
        assert not {m for m in modules if m.startswith("vramkit.render")}, flag
        assert "shutil" not in modules, flag  # argparse's width lookup imports it (with bz2, lzma)


def test_a_command_imports_only_its_own_module():
    names = _imported_by_run("ps", "--help")
    assert "vramkit.cli.ps" in names
    assert not {"vramkit.cli.status", "vramkit.cli.kill", "vramkit.cli.top", "vramkit.cli.estimate"} & names


def _imported_by_run(*args):
    result = run_vram(*args, python_flags=("-X", "importtime"))
    assert result.rc == 0, result.err
    return {line.rsplit("|", 1)[1].strip() for line in result.err.splitlines() if line.startswith("import time:")}


def test_vram_alone_is_vram_status():
    alone, status = run_vram("--simulate", "demo"), run_vram("status", "--simulate", "demo")
    assert alone.rc == status.rc == 0, alone.err
    # The banner's first line ends with the wall-clock time: it may differ by a second.
    assert alone.out.split("\n", 1)[1] == status.out.split("\n", 1)[1]
    assert "GPU" in alone.out


# ---------------------------------------------------------------- prose re-wrapped, examples kept

def test_prose_paragraphs_are_rewrapped_to_the_width_and_examples_kept_as_written():
    wide = run_vram("ps", "--help", env=clean_env(COLUMNS="1000")).out
    narrow = run_vram("ps", "--help", env=clean_env(COLUMNS="60")).out
    # The flags paragraph was hand-wrapped at ~90 columns, one line broken short mid-sentence.
    flags_wide = next(p for p in wide.split("\n\n") if p.startswith("Flags:"))
    assert "\n" not in flags_wide and flags_wide.endswith("does not name), graphics.")
    flags_narrow = next(p for p in narrow.split("\n\n") if p.startswith("Flags:"))
    assert " ".join(flags_narrow.split()) == flags_wide
    assert max(len(line) for line in flags_narrow.splitlines()) <= 58
    # The examples block is kept line for line, its alignment too.
    examples = wide[wide.index("examples:"):].split("\n\n")[0]
    assert examples in narrow
    assert "  vram ps --gpu 0 --sort elapsed   GPU 0, oldest first\n" in examples
