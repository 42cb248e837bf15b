"""The idle-holder policy file (history/policy.py): a good file reads into rules; every malformed
one is a single line naming the file, the rule and the key, exit 2, as `vram record --policy`
prints it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from vramkit.cli.main import one_line
from vramkit.history.notices import add_policy_options
from vramkit.history.policy import MAX_BYTES, PolicyError, load

FIXTURES = Path(__file__).parent / "fixtures"
GiB = 1024**3

RULE = '[[rule]]\nname = "idle-big"\nmin_memory = "10GiB"\nidle_for = "2h"\ncommand = ["/bin/true"]\n'


def shown(e: PolicyError) -> str:
    """What vram record prints: the library's `policy` parameter is its --policy flag."""
    parser = argparse.ArgumentParser()
    add_policy_options(parser)
    return one_line(e, parser)


def test_a_valid_policy_reads_into_rules():
    policy = load(FIXTURES / "policy_valid.toml", as_root=os.geteuid() == 0)
    assert (policy.max_per_minute, policy.timeout) == (5, 20.0)
    big, students = policy.rules
    assert (big.name, big.min_memory, big.idle_for, big.command, big.repeat, big.reclaim_after) == (
        "idle-big", 10 * GiB, 7200.0, ("/bin/true", "--lab", "gpu-lab"), 21600.0, 3600.0)
    assert big.covers("alice") and not big.covers("root") and big.covers(None)
    assert (students.min_memory, students.repeat, students.reclaim_after) == (GiB, 21600.0, None)
    assert students.covers("bob") and not students.covers("carol") and not students.covers(None)


# (the file's text, what its one line says after "error: --policy: FILE: ")
MALFORMED = [
    ("", "no rules: add at least one [[rule]] table"),
    ("max_per_minute = 10\n", "no rules: add at least one [[rule]] table"),
    ("rules = []\n" + RULE, "unknown key 'rules' (known: max_per_minute, timeout, rule)"),
    ("max_per_minute = 0\n" + RULE, "max_per_minute: must be a whole number from 1 to 1000, got 0"),
    ("max_per_minute = true\n" + RULE, "max_per_minute: must be a whole number from 1 to 1000, got True"),
    ("timeout = \"forever\"\n" + RULE, "timeout: not a duration: 'forever'"),
    ("timeout = \"2h\"\n" + RULE, "timeout: must be at most 3600 seconds, got '2h'"),
    ("[[rule]\nname = 1\n", "not valid TOML: "),
    ("rule = 3\n", "no rules: add at least one [[rule]] table"),
    ("rule = [1]\n", "rule 1: must be a table ([[rule]])"),
    (RULE + "colour = \"red\"\n", "rule 'idle-big': unknown key 'colour' (known: name, min_memory, "),
    (RULE.replace('idle_for = "2h"\n', ""), "rule 'idle-big': idle_for: missing (every rule needs name, "),
    (RULE.replace('"idle-big"', '"idle big!"'), "rule 1: name: letters, digits, '.', '_' or '-', at most 64, "
                                                "got 'idle big!'"),
    (RULE.replace('"10GiB"', '"ten gigs"'), "rule 'idle-big': min_memory: not a size: 'ten gigs'"),
    (RULE.replace('"10GiB"', '-5'), "rule 'idle-big': min_memory: "),
    (RULE.replace('"10GiB"', '0'), "rule 'idle-big': min_memory: must be more than 0 bytes"),
    (RULE.replace('"2h"', '"2 fortnights"'), "rule 'idle-big': idle_for: not a duration: '2 fortnights'"),
    (RULE.replace('"2h"', '["2h"]'), "rule 'idle-big': idle_for: not a duration: ['2h']"),
    (RULE + 'repeat = "10s"\n', "rule 'idle-big': repeat: must be at least 60 seconds, got '10s'"),
    (RULE + 'reclaim_after = "soon"\n', "rule 'idle-big': reclaim_after: not a duration: 'soon'"),
    (RULE + 'users = "alice"\n', "rule 'idle-big': users: a list of user names, e.g. [\"alice\"], got 'alice'"),
    (RULE + 'exclude_users = []\n', "rule 'idle-big': exclude_users: a list of user names"),
    (RULE.replace('["/bin/true"]', '"/bin/true"'), "rule 'idle-big': command: a list of strings"),
    (RULE.replace('["/bin/true"]', '[]'), "rule 'idle-big': command: a list of strings"),
    (RULE.replace('["/bin/true"]', '["true"]'), "rule 'idle-big': command: 'true' is not an absolute path"),
    (RULE.replace('/bin/true', '/no/such/notify'), "rule 'idle-big': command: '/no/such/notify': No such file"),
    (RULE.replace('/bin/true', '@PLAIN@'), "rule 'idle-big': command: '@PLAIN@' is not an executable file"),
    (RULE.replace('/bin/true', '/usr/bin'), "rule 'idle-big': command: '/usr/bin' is not an executable file"),
    (RULE + RULE, "rule 'idle-big': name: another rule has this name"),
]


@pytest.mark.parametrize("text, says", MALFORMED)
def test_a_malformed_policy_is_one_line_naming_file_rule_and_key(tmp_path, text, says):
    plain = tmp_path / "plain.sh"  # a file without execute permission
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    path = tmp_path / "policy.toml"
    path.write_text(text.replace("@PLAIN@", str(plain)))
    says = says.replace("@PLAIN@", str(plain))
    with pytest.raises(PolicyError) as caught:
        load(path, as_root=False)
    e = caught.value
    line = shown(e)
    assert e.exit_code == 2 and "\n" not in line
    assert line.startswith(f"error: --policy: {path}: {says}")


@pytest.mark.parametrize("name, says", [
    ("policy_unknown_key.toml", "rule 'idle-big': unknown key 'comand'"),
    ("policy_relative_command.toml", "rule 'idle-big': command: 'notify-idle' is not an absolute path"),
])
def test_malformed_fixture_files(name, says):
    path = FIXTURES / name
    with pytest.raises(PolicyError) as caught:
        load(path, as_root=False)
    assert shown(caught.value).startswith(f"error: --policy: {path}: {says}")


def _file_cases(tmp_path: Path) -> list[tuple[Path, str]]:
    good = tmp_path / "good.toml"
    good.write_text(RULE)
    link = tmp_path / "link.toml"
    link.symlink_to(good)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text(RULE + "#" * MAX_BYTES)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe" + RULE.encode())
    return [(link, "is a symbolic link; give the file it points to"),
            (fifo, "not a regular file"),
            (big, "larger than 64 KiB: not a policy file"),
            (binary, "not UTF-8 text"),
            (tmp_path / "missing.toml", "no such file"),
            (tmp_path, "not a regular file")]


def test_files_that_are_not_a_policy_are_refused_without_blocking(tmp_path):
    for path, says in _file_cases(tmp_path):
        with pytest.raises(PolicyError) as caught:
            load(path, as_root=False)
        assert shown(caught.value) == f"error: --policy: {path}: {says}", path


@pytest.mark.skipif(os.geteuid() != 0, reason="the root-only checks need root")
def test_as_root_a_policy_or_command_another_user_can_change_is_refused(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(RULE)
    path.chmod(0o664)
    with pytest.raises(PolicyError) as caught:
        load(path, as_root=True)
    assert shown(caught.value) == (f"error: --policy: {path}: another user can change it, and its commands run "
                                   "as root: chown root and chmod go-w it")
    path.chmod(0o644)
    os.chown(path, 65534, 0)
    with pytest.raises(PolicyError):
        load(path, as_root=True)
    os.chown(path, 0, 0)
    assert load(path, as_root=True).rules[0].command == ("/bin/true",)

    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "notify.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o757)
    path.write_text(RULE.replace("/bin/true", str(script)))
    with pytest.raises(PolicyError) as caught:
        load(path, as_root=True)
    assert shown(caught.value) == (f"error: --policy: {path}: rule 'idle-big': command: '{script}' can be changed "
                                   "by a user other than root, and the command runs as root: chown root and chmod "
                                   "go-w it")
    script.chmod(0o755)
    (tmp_path / "bin").chmod(0o777)  # a directory on its way that others may write
    with pytest.raises(PolicyError) as caught:
        load(path, as_root=True)
    assert f"command: '{tmp_path / 'bin'}' can be changed by a user other than root" in shown(caught.value)
    (tmp_path / "bin").chmod(0o755)
    assert load(path, as_root=True).rules[0].command == (str(script),)
    assert load(path, as_root=False).rules[0].command == (str(script),)

    shared = tmp_path / "shared"  # the policy in a directory others may write: they could swap it
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    moved = shared / "policy.toml"
    moved.write_text(RULE)
    with pytest.raises(PolicyError) as caught:
        load(moved, as_root=True)
    assert shown(caught.value) == (f"error: --policy: {moved}: its directory '{shared}' can be changed by a user "
                                   "other than root, and its commands run as root: chown root and chmod go-w it")
    assert load(moved, as_root=False).rules[0].name == "idle-big"
