"""Flags: one meaning per name across commands, renamed flags under both names, every duration
through one parser, did-you-mean for commands and flags, and docs/flags.md as the parsers define."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
from helpers import assert_one_line_error, clean_env, run_vram

from vramkit.cli import flags
from vramkit.cli.common import Duration, expand_help, is_old_spelling
from vramkit.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
NOTE = "is now"


@pytest.fixture(scope="module")
def parser():
    return build_parser()


def _parse(parser, *argv):
    return parser.parse_args(list(argv))


# ---------------------------------------------------------------- one meaning per name

# A long flag name whose actions may differ in dest or in taking a value, each with its reason.
ALLOWED_TWO_MEANINGS = {
    "--gpu": "plan's old spelling of --card (a catalog GPU), hidden for a release; everywhere else GPU indices",
    "--all": "the old spelling of status's --health and of life's --every-life, hidden for a release",
}
# Flags in MEANINGS that no parser defines yet, each with its reason.
PENDING: dict[str, str] = {}


def _signature(action: argparse.Action) -> tuple[str, bool]:
    return action.dest, action.nargs != 0


def test_no_flag_name_has_two_meanings(parser):
    seen: dict[str, dict[tuple[str, bool], list[str]]] = {}
    for name, command, action in flags.flag_uses(parser):
        seen.setdefault(name, {}).setdefault(_signature(action), []).append(command)
    two = {name: kinds for name, kinds in seen.items() if len(kinds) > 1}
    assert set(two) <= set(ALLOWED_TWO_MEANINGS), {n: two[n] for n in set(two) - set(ALLOWED_TWO_MEANINGS)}


def test_every_flag_has_its_one_meaning_written_down(parser):
    names = {name for name, _, _ in flags.flag_uses(parser)}
    assert names - set(flags.MEANINGS) == set(), "add each new flag's meaning to cli/flags.py MEANINGS"
    assert set(flags.MEANINGS) - names == set(PENDING)


def test_docs_flags_md_is_what_the_parsers_define(parser):
    assert (ROOT / "docs" / "flags.md").read_text() == flags.render(parser), (
        "regenerate it: python -m vramkit.cli.flags > docs/flags.md")


def test_old_spellings_are_hidden_from_help_and_completion(parser):
    for path, command in flags.command_parsers(parser):
        text = command.format_help()
        for action in command._actions:
            if is_old_spelling(action):
                assert not any(f"{o} " in text or f"{o}\n" in text or f"{o}," in text
                               for o in action.option_strings), (path, action.option_strings)
    bash = run_vram("completion", "bash").out
    for old in ("--ids", "--commands", "--card"):
        assert (old in bash) == (old == "--card"), old


# ---------------------------------------------------------------- renamed flags, both names

RENAMED = [
    # (command line before the flag, new, old, value, dest, parsed value)
    (("plan", "gpt2"), "--card", "--gpu", "rtx-4090", "card", "rtx-4090"),
    (("status",), "--health", "--all", None, "health", True),
    (("life", "1"), "--every-life", "--all", None, "every_life", True),
    (("run",), "--format", "--ids", "uuid", "format", "uuid"),
    (("record",), "--process-commands", "--commands", "full", "process_commands", "full"),
]


@pytest.mark.parametrize("before, new, old, value, dest, parsed", RENAMED)
def test_a_renamed_flag_works_under_both_names(parser, capsys, before, new, old, value, dest, parsed):
    tail = [value] if value is not None else []
    assert getattr(_parse(parser, *before, new, *tail), dest) == parsed
    assert capsys.readouterr().err == ""
    assert getattr(_parse(parser, *before, old, *tail), dest) == parsed
    err = capsys.readouterr().err
    assert err == f"vram: note: {old} is now {new} (the old name works until the next release)\n"


def test_the_old_name_runs_the_command_with_a_one_line_note():
    old = run_vram("plan", "gpt2", "--gpu", "rtx-4090", "--json")
    new = run_vram("plan", "gpt2", "--card", "rtx-4090", "--json")
    assert old.rc == new.rc == 0, old.err
    assert old.out == new.out and json.loads(old.out)["gpu"] == "rtx-4090"
    assert old.err_lines == ["vram: note: --gpu is now --card (the old name works until the next release)"]
    assert new.err == ""
    health = run_vram("status", "--simulate", "unhealthy", "--all", "--json")
    assert health.rc == 0 and health.json()["gpus"][0]["health"] is not None
    assert len(health.err_lines) == 1 and "--all is now --health" in health.err


def test_serve_and_record_take_process_commands_alike(parser):
    assert _parse(parser, "serve").process_commands == "name"
    assert _parse(parser, "serve", "--process-commands").process_commands == "full"
    assert _parse(parser, "record", "--process-commands").process_commands == "full"
    assert _parse(parser, "record", "--process-commands", "off").process_commands == "off"


def test_card_current_error_names_the_new_flag():
    # the library's "no GPU reports free memory" is not reachable on demo; an unknown card is
    result = run_vram("plan", "gpt2", "--card", "a101")
    assert_one_line_error(result, 2, "did you mean")


# ---------------------------------------------------------------- durations: one parser

def _duration_flags(parser):
    """(command, flag, action) of every flag whose value is a duration."""
    found = []
    for path, command in flags.command_parsers(parser):
        for action in command._actions:
            if action.metavar == "DURATION" and not is_old_spelling(action):
                found.append((path, flags.long_names(action)[0], action))
    return found


def test_every_duration_flag_goes_through_the_one_parser(parser):
    found = _duration_flags(parser)
    assert len(found) >= 17
    for path, flag, action in found:
        assert isinstance(action.type, Duration), (path, flag)
        assert action.type.flag == flag
    # and no option that takes seconds under another name
    for path, command in flags.command_parsers(parser):
        for action in command._actions:
            assert action.metavar != "SECONDS", (path, action.option_strings)
            assert action.type is not float, (path, action.option_strings)


@pytest.mark.parametrize("argv, dest, seconds", [
    (("status", "--watch", "1s"), "watch", 1.0),
    (("status", "--watch"), "watch", 2.0),
    (("status", "--watch", "0.5"), "watch", 0.5),
    (("top", "--interval", "1s"), "interval", 1.0),
    (("top", "--idle-after", "10m"), "idle_after", 600.0),
    (("top", "--history", "1h"), "history", 3600.0),
    (("kill", "--idle", "2h"), "idle", 7200.0),
    (("kill", "--timeout", "1m"), "timeout", 60.0),
    (("kill",), "timeout", 10.0),
    (("pick", "--hold", "2m"), "hold", 120.0),
    (("pick", "--wait", "10m"), "wait", 600.0),
    (("pick", "--wait"), "wait", math.inf),
    (("run", "--wait", "1h30m", "--", "true"), "wait", 5400.0),
    (("run", "--lease-timeout", "5m", "--", "true"), "lease_timeout", 300.0),
    (("record", "--interval", "1s"), "interval", 1.0),
    (("record", "--duration", "1d"), "duration", 86400.0),
    (("record", "--keep-raw", "2d"), "keep_raw", 172800.0),
    (("record", "--keep-minute", "60d"), "keep_minute", 60 * 86400.0),
    (("record", "--keep-quarter", "1h"), "keep_quarter", 3600.0),
    (("record", "--publish-every", "2m"), "publish_every", 120.0),
    (("record",), "interval", 5.0),
    (("serve", "--interval", "1m"), "interval", 60.0),
    (("fleet", "--timeout", "30s"), "timeout", 30.0),
    (("fleet", "pick", "--timeout", "1m"), "timeout", 60.0),
])
def test_durations_take_units(parser, argv, dest, seconds):
    assert getattr(_parse(parser, *argv), dest) == seconds


def test_every_duration_flag_is_in_the_units_test(parser):
    names = {(path.removeprefix("vram ").strip(), flag) for path, flag, _ in _duration_flags(parser)}
    assert names == {("status", "--watch"), ("top", "--interval"), ("top", "--idle-after"), ("top", "--history"),
                     ("kill", "--idle"), ("kill", "--timeout"), ("pick", "--hold"), ("pick", "--wait"),
                     ("run", "--wait"), ("run", "--lease-timeout"), ("record", "--interval"),
                     ("record", "--duration"), ("record", "--keep-raw"), ("record", "--keep-minute"),
                     ("record", "--keep-quarter"), ("record", "--publish-every"), ("serve", "--interval"),
                     ("serve", "--hosts-timeout"), ("fleet", "--timeout"), ("fleet pick", "--timeout")}


@pytest.mark.parametrize("argv, message", [
    (("status", "--watch", "1x"), "--watch: not a duration: '1x'"),
    (("top", "--interval", "soon"), "--interval: not a duration: 'soon'"),
    (("top", "--history", "5s"), "--history: at least 10s"),
    (("kill", "--timeout", "ten"), "--timeout: not a duration"),
    (("serve", "--interval", "2h"), "--interval: must be 0.1s to 1h, got 2h"),
    (("record", "--keep-raw", "10s"), "--keep-raw: must be at least 60 seconds"),
])
def test_a_bad_duration_is_one_line_naming_its_flag(argv, message):
    assert_one_line_error(run_vram(*argv, "--simulate", "demo"), 2, message)


def test_status_watch_1s_and_top_interval_1s_run():
    # status --watch 1s redraws until stopped: one frame is enough to show it ran
    import subprocess

    from helpers import vram_argv

    proc = subprocess.Popen(vram_argv("status", "--watch", "1s", "--simulate", "demo", "--json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        first = proc.stdout.readline()
    finally:
        proc.kill()
        proc.wait()
    assert json.loads(first)["gpus"], proc.stderr.read()
    # top parses and checks its flags before it asks for a terminal: 1s is accepted
    top = run_vram("top", "--interval", "1s", "--simulate", "demo")
    assert_one_line_error(top, 1, "vram top needs a terminal")


# ---------------------------------------------------------------- did you mean

def test_a_misspelt_command_gets_a_suggestion():
    assert_one_line_error(run_vram("stauts"), 2, "invalid choice: 'stauts'", "did you mean 'status'?")
    assert_one_line_error(run_vram("sim", "lst"), 2, "did you mean 'list'?", "see 'vram sim --help'")


def test_a_misspelt_flag_gets_a_suggestion_and_the_commands_own_help():
    result = run_vram("status", "--simulate", "demo", "--helth")
    assert_one_line_error(result, 2, "unrecognized arguments: --helth", "did you mean --health?",
                          "(see 'vram status --help')")
    result = run_vram("estimate", "gpt2", "--precison", "bf16")
    assert_one_line_error(result, 2, "did you mean --precision?", "(see 'vram estimate --help')")
    assert_one_line_error(run_vram("estimate", "gpt2", "--precision", "bf15"), 2, "did you mean 'bf16'?")


def test_an_old_spelling_is_never_suggested():
    result = run_vram("plan", "gpt2", "--gpuu", "t4")
    assert "did you mean --gpu?" not in result.err and "did you mean --gpus?" in result.err


# ---------------------------------------------------------------- help that cannot go stale

def test_help_fills_in_defaults_and_lists_from_the_code(parser):
    from vramkit.estimator.analytic import default_context
    from vramkit.nvml.scenario import bundled_names
    from vramkit.units import format_size

    simulate = next(a for a in parser._actions if "--simulate" in a.option_strings)
    assert all(name in expand_help(simulate) for name in bundled_names())
    estimate = dict(flags.command_parsers(parser))["vram estimate"]
    context = next(a for a in estimate._actions if "--context-overhead" in a.option_strings)
    assert format_size(default_context(12.4)).replace(" ", "") in expand_help(context)
    assert "512MiB" not in expand_help(context)


def test_every_default_a_help_names_is_the_flags_default(parser):
    # "(default X)" in a help, where the flag has a default of its own, is that default
    for path, command in flags.command_parsers(parser):
        for action in command._actions:
            default = action.default
            shown = action.help not in (None, argparse.SUPPRESS)
            if not (shown and isinstance(default, str) and default not in ("", argparse.SUPPRESS)):
                continue
            text = expand_help(action)
            if "default" in text:
                assert default in text, (path, action.option_strings, text)


def test_estimate_and_plan_help_come_in_groups():
    out = run_vram("estimate", "--help", env=clean_env(COLUMNS="100")).out
    for heading in ("model and input:", "training step:", "adapters (the base frozen):", "quantization:",
                    "library versions and the CUDA context:", "output:"):
        assert f"\n{heading}\n" in out, heading
    assert "\noptions:\n  -h, --help" in out and "\n  --precision" not in out.split("training step:")[0]
    assert "--card NAME|current" in run_vram("plan", "--help").out
