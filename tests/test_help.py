"""Help texts: `vram help [COMMAND]`, flags that mean one thing everywhere, and every subcommand
with a description and examples."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error, run_vram


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


def test_kill_help_says_idle_watches_forward():
    # It said "idle for the last 30 minutes", but vram cannot see the past: it samples from now.
    out = run_vram("kill", "--help").out
    assert "the last 30 minutes" not in out
    assert "watches" in out and "--idle 30m takes up to 30 minutes" in out
