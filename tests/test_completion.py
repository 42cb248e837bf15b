"""`vram completion bash|zsh|fish`: each script run in the real shell, asked what it completes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import assert_one_line_error, read_terminal, reap, run_vram

from vramkit.cli.commands import COMMANDS
from vramkit.nvml.scenario import bundled_names

CASES = [  # (words typed, the current word last) -> what must be offered; what must not
    (["vram", ""], set(COMMANDS), {"--help"}),
    (["vram", "s"], {"status", "serve", "sim"}, {"ps"}),
    (["vram", "--simulate", ""], set(bundled_names()), {"status"}),
    (["vram", "--simulate", "demo", "p"], {"ps", "pick", "plan"}, set()),
    (["vram", "sim", ""], {"list", "validate", "shim"}, {"status"}),
    (["vram", "sim", "list", "--"], {"--json", "--help"}, {"--sort"}),
    (["vram", "ps", "--so"], {"--sort"}, set()),
    (["vram", "ps", "--sort", ""], {"memory", "gpu", "pid", "user", "elapsed", "cpu", "rss"}, {"--json"}),
    (["vram", "report", "--by", ""], {"user", "gpu", "life", "day", "container", "pod", "namespace", "slurm-job"},
     {"--json", "job"}),
    (["vram", "j"], set(), {"job"}),  # the old name of `vram life` is not offered
    (["vram", "pick", "--prefer", ""], {"spread", "pack"}, set()),
    (["vram", "fleet", "pick", "--pr"], {"--prefer", "--prometheus"}, set()),
    (["vram", "pick", "-"], {"-n", "--count", "--explain"}, {"--user"}),  # pick's own, not fleet pick's
    (["vram", "--simulate", "ps", "s"], {"status", "serve", "sim"}, set()),  # 'ps' was --simulate's value
    (["vram", "completion", ""], set(), {"status"}),
    (["vram", "in"], {"info"}, set()),
    (["vram", "info", "--"], {"--json", "--simulate", "--help"}, {"--all", "--gpu"}),
    (["vram", "info", "2", "--j"], {"--json"}, set()),  # after a GPU index: still info's options
]


def _script(shell: str, tmp_path: Path) -> Path:
    result = run_vram("completion", shell)
    assert result.rc == 0, result.err
    path = tmp_path / f"vram.{shell}"
    path.write_text(result.out)
    return path


def _bash_complete(script: Path, words: list[str]) -> set[str]:
    """COMPREPLY of the script's _vram for `words` (the cursor at the end of the last one)."""
    program = (f"source {script}\nCOMP_WORDS=(\"$@\")\nCOMP_CWORD=$(( $# - 1 ))\n"
               "COMP_LINE=\"$*\"\nCOMP_POINT=${#COMP_LINE}\n_vram vram\nprintf '%s\\n' \"${COMPREPLY[@]}\"")
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", program, "bash", *words],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return set(proc.stdout.split())


@pytest.mark.parametrize("words, offered, not_offered", CASES)
def test_bash_completes_from_the_parser(tmp_path, words, offered, not_offered):
    got = _bash_complete(_script("bash", tmp_path), words)
    assert offered <= got, (words, sorted(got))
    assert not (not_offered & got), (words, sorted(got))


def test_bash_offers_every_option_of_every_command(tmp_path):
    # Generated from the parser, so a new option needs no change here: compare with argparse.
    import argparse

    from vramkit.cli.main import build_parser

    script = _script("bash", tmp_path)

    def walk(parser, words):
        own = {o for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS for o in a.option_strings}
        assert own <= _bash_complete(script, [*words, "-"]), words
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*words, name])

    walk(build_parser(), ["vram"])


def test_bash_after_a_double_dash_leaves_the_command_line_alone(tmp_path):
    # vram run -- CMD: what follows is another program's; the script offers nothing of vram's.
    assert _bash_complete(_script("bash", tmp_path), ["vram", "run", "--", "p"]) == set()


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
@pytest.mark.parametrize("words, offered, not_offered", CASES)
def test_zsh_completes_from_the_parser(tmp_path, words, offered, not_offered):
    # zsh's completion widgets need a terminal; the script's function runs for real with the
    # builtins it calls (compadd, _describe, _files) recording what they were given.
    script = _script("zsh", tmp_path)
    program = f"""
compdef() {{ :; }}
source {script}
compadd() {{ local a; for a in "$@"; do [[ $a == -* ]] || print -r -- "$a"; done;
            [[ $1 == -a ]] && print -rl -- ${{(P)2}}; }}
_describe() {{ print -rl -- ${{${{(P)4}}%%:*}}; }}
_files() {{ print -r -- FILES; }}
words=("$@"); CURRENT=$#; PREFIX="${{words[CURRENT]}}"
_vram
"""
    proc = subprocess.run(["zsh", "-f", "-c", program, "zsh", *words], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    got = {w for w in proc.stdout.split() if w.startswith(words[-1])}
    assert offered <= got, (words, sorted(got))
    assert not (not_offered & got), (words, sorted(got))


def test_zsh_script_parses(tmp_path):
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed")
    proc = subprocess.run(["zsh", "-n", str(_script("zsh", tmp_path))], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
@pytest.mark.parametrize("words, offered, not_offered", CASES)
def test_fish_completes_from_the_parser(tmp_path, words, offered, not_offered):
    script = _script("fish", tmp_path)
    line = " ".join(words)
    proc = subprocess.run(["fish", "--no-config", "-c", f"source {script}; complete -C {line!r}"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    got = {row.split("\t", 1)[0] for row in proc.stdout.splitlines()}
    assert offered <= got, (words, sorted(got))
    assert not (not_offered & got), (words, sorted(got))


def test_a_description_with_quotes_survives_every_shell(tmp_path):
    # Help texts hold apostrophes ("every host's GPUs"): each script quotes them for its shell.
    for shell in ("bash", "zsh", "fish"):
        if shutil.which(shell) is None:
            continue
        script = _script(shell, tmp_path)
        proc = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, (shell, proc.stderr)
    assert "every host'\\''s GPUs" in run_vram("completion", "zsh").out
    assert "every host\\'s GPUs" in run_vram("completion", "fish").out


def test_an_unknown_shell_is_one_line_exit_2():
    assert_one_line_error(run_vram("completion", "tcsh"), 2, "invalid choice: 'tcsh'")


# ---------------------------------------------------------------- file names with spaces (issue 26 item 9)

FILES = ["my lab.json", "my log.txt", "it's \"quoted\".json", "back\\slash.json", "dir with space/inner file.json"]


def _tree(tmp_path: Path) -> Path:
    where = tmp_path / "cwd"
    for name in FILES:
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text("{}")
    return where


def _bash_reply(script: Path, words: list[str], cwd: Path) -> list[str]:
    """COMPREPLY of _vram for `words`, one entry a line (not split at spaces)."""
    program = (f"source {script}\nCOMP_WORDS=(\"$@\")\nCOMP_CWORD=$(( $# - 1 ))\n"
               "_vram vram\nprintf '%s\\n' \"${COMPREPLY[@]}\"")
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", program, "bash", *words],
                          capture_output=True, text=True, timeout=30, cwd=cwd)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


@pytest.mark.parametrize("words, offered", [
    (["vram", "report", "--db", "my l"], ["my lab.json", "my log.txt"]),
    (["vram", "--simulate", "my l"], ["my lab.json", "my log.txt"]),  # beside the bundled names
    (["vram", "doctor", "\"my lo"], ["my log.txt"]),  # the word typed so far may be quoted
    (["vram", "record", "--policy", "'it"], ["it's \"quoted\".json"]),
    (["vram", "sim", "validate", "my\\ la"], ["my lab.json"]),
    (["vram", "sim", "shim", "dir\\ w"], ["dir with space"]),  # DIR: directories only
    (["vram", "sim", "spawn", "-o", "back"], ["back\\slash.json"]),
    (["vram", "serve", "--db", "dir with space/"], ["dir with space/inner file.json"]),
])
def test_bash_offers_file_names_with_spaces_as_one_word(tmp_path, words, offered):
    got = _bash_reply(_script("bash", tmp_path), words, _tree(tmp_path))
    assert sorted(got) == sorted(offered), (words, got)


def test_bash_still_offers_scenarios_after_simulate_and_only_words_for_choices(tmp_path):
    script, cwd = _script("bash", tmp_path), _tree(tmp_path)
    assert set(bundled_names()) <= set(_bash_reply(script, ["vram", "--simulate", ""], cwd))
    assert "my lab.json" in _bash_reply(script, ["vram", "--simulate", ""], cwd)
    assert _bash_reply(script, ["vram", "ps", "--sort", "my"], cwd) == []  # a choice, never a file
    assert "demo" in _bash_reply(script, ["vram", "sim", "validate", "de"], cwd)  # NAME|FILE


def test_real_bash_tab_completes_a_file_name_with_spaces_into_one_argument(tmp_path):
    """An interactive bash on a terminal: readline, the script, Tab, Enter; a `vram` function
    shows the arguments it was given, one [bracket] each."""
    import pty

    script, cwd = _script("bash", tmp_path), _tree(tmp_path)
    rc = tmp_path / "rc.sh"
    rc.write_text(f"PS1='$ '\nsource {script}\nvram() {{ printf '[%s]' \"$@\"; printf '\\n'; }}\ncd {cwd}\n")
    typed = [  # what is typed, Tab as \t -> the arguments vram gets
        ("vram --simulate my\\ la\t", "[--simulate][my lab.json]"),
        ("vram report --db my\\ la\t", "[report][--db][my lab.json]"),
        ("vram doctor \"my lo\t", "[doctor][my log.txt]"),
        ("vram record --policy 'my la\t", "[record][--policy][my lab.json]"),
        ("vram sim shim dir\\ w\t", "[sim][shim][dir with space/]"),
        ("vram serve --db dir\\ w\tin\t", "[serve][--db][dir with space/inner file.json]"),
        ("vram sim validate it\t", "[sim][validate][it's \"quoted\".json]"),
    ]
    master, slave = pty.openpty()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TERM": "dumb", "INPUTRC": "/dev/null"}
    proc = subprocess.Popen(["bash", "--rcfile", str(rc), "--noprofile", "-i"], stdin=slave, stdout=slave,
                            stderr=slave, env=env, cwd=cwd, start_new_session=True)
    os.close(slave)
    try:
        os.write(master, "".join(line + "\n" for line, _ in typed).encode() + b"exit\n")
        out = read_terminal(master, 60, "bash -i").decode(errors="replace")
        proc.wait(timeout=60)
    finally:
        os.close(master)
        reap(proc)
    got = [line.strip() for line in out.replace("\r", "").splitlines() if line.startswith("[")]
    assert got == [argv for _, argv in typed], out
