"""Every console example in README.md and docs/*.md is the command's real output (issue 14).

Every ```console block is read as `$ command` lines followed by the output they print. Each command
runs through bash with the project's `vram` first on PATH, on a 120-column pseudo-terminal (what a
person sees: block-character bars, long explanations wrapped, a redrawn line as it is left), and
what it prints (stdout and stderr) is compared line by line with the example: dates and times
(`2026-11-29 17:04:43`) are normalised, and a line `...` (indented or not) stands for any number of
lines, an elision the doc makes on purpose. The commands of one block run in one directory, in
order, so an example can show what an earlier one wrote.

How the examples are run:
- VRAM_SIM_TIME=0 pins the simulated clock, so utilization that moves (demo's 12 s cycle) reads
  the same every run; NO_COLOR=1, as the docs show no colour.
- HOME is the test's temporary directory (kill's audit log and the shim land there; shown as root's
  /root), and the lease directory is the test's own (shown as the default /tmp/vramkit-leases).
- The files an example reads (bad.json, my-lab.json, train.log) are tests/fixtures/docs/, copied
  into that directory.
- ON_DEMO: the examples a doc shows without --simulate but on the simulated demo server (e.g.
  gpu-numbering.md's `vram pick -n 2 --explain`) run with VRAM_SIMULATE=demo.
- AS_ROOT: the examples shown run as root are skipped for an ordinary user, with the reason.
- NOT_RUN: the few examples that cannot run here, each with its reason; everything else runs.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import pty
import re
import secrets
import shutil
import struct
import subprocess
import sys
import termios
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers import read_terminal

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [*sorted(ROOT.glob("README*.md")), *sorted((ROOT / "docs").glob("*.md"))]  # README.zh_CN.md too
GIVEN_FILES = ROOT / "tests" / "fixtures" / "docs"

# (document, command prefix): why those examples are not run here. Keep it short: each needs what a
# test machine does not have.
NOT_RUN = {
    ("docs/fleet.md", "vram fleet"):
        "needs a Prometheus server scraping two `vram serve` hosts and a dead target "
        "(tests/e2e/test_serve_prometheus.py runs that set-up and checks vram fleet's numbers)",
    ("docs/user-guide.md", "vram top"):
        "the live view needs an interactive terminal (tests/e2e/test_top_tmux.py drives it in tmux)",
}
# Shown without --simulate, on the simulated demo server (the doc says so, or shows demo's GPUs):
# these run with VRAM_SIMULATE=demo.
ON_DEMO = [
    ("docs/gpu-numbering.md", "vram pick -n 2 --explain"),
    ("docs/gpu-numbering.md", "CUDA_VISIBLE_DEVICES=7,0 vram pick --explain"),
    ("docs/user-guide.md", "vram doctor train.log"),
]
# Shown run as root: kill's ownership refusal and root's audit-log path, spawn's placeholders' user.
AS_ROOT = [
    ("docs/user-guide.md", "vram kill"),
    ("README.zh_CN.md", "vram kill"),
    ("docs/user-guide.md", "PYTHONPATH=~/shim vram sim spawn"),
]
SHOWN_HOME = "/root"
DEFAULT_LEASE_DIR = "/tmp/vramkit-leases"
# Programs other than vram that an example pipes into or runs: skipped with the reason where missing.
OTHER_PROGRAMS = ("jq", "gpustat", "curl")
# The docs' examples are what a 120-column terminal shows (without colour: NO_COLOR is set).
TERMINAL_SIZE = (50, 120)
ERASE = "\x1b[K"
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
DATE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


class Example(NamedTuple):
    document: str  # relative to the project root
    line: int
    command: str
    expected: list[str]
    before: list[str]  # the commands before it in its console block


def examples(path: Path) -> list[Example]:
    """Every `$ ` line of the file's ```console blocks, with the lines it prints."""
    document = path.relative_to(ROOT).as_posix()
    found: list[Example] = []
    inside = False
    block: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            inside = not inside and line.strip() == "```console"
            block = []
            continue
        if not inside:
            continue
        if line.startswith("$ "):
            found.append(Example(document, number, line[2:], [], list(block)))
            block.append(line[2:])
        elif found:
            found[-1].expected.append(line)
    return [ex._replace(expected=_trim(ex.expected)) for ex in found]


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _norm(line: str) -> str:
    return DATE.sub("<date>", line).rstrip()


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line; an expected `...` line (indented or not) matches any run of lines (none included),
    and an expected line ending in ` ...` matches a line that begins with what comes before."""
    exp = [_norm(x) for x in expected]
    act = [_norm(x) for x in actual]

    def go(i: int, j: int) -> bool:
        if i == len(exp):
            return j == len(act)
        if exp[i].strip() == "...":
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and same_line(exp[i], act[j]) and go(i + 1, j + 1)

    return go(0, 0)


def listed(entries: Iterable[tuple[str, str]], example: Example) -> bool:
    return any(example.document == document and example.command.startswith(prefix) for document, prefix in entries)


def same_line(expected: str, actual: str) -> bool:
    if expected.endswith(" ...") and expected.strip() != "...":
        return actual.startswith(expected[:-3])
    return expected == actual


def why_not_run(example: Example) -> str | None:
    return next((why for entry, why in NOT_RUN.items() if listed([entry], example)), None)


ALL = [ex for path in DOCUMENTS for ex in examples(path)]


def on_terminal(command: str, cwd: Path, env: dict[str, str], timeout: float = 60) -> str:
    """What `bash -c COMMAND` prints on a TERMINAL_SIZE terminal (stdout and stderr; stdin closed),
    as the docs show it: a person runs these commands in a terminal."""
    rows, columns = TERMINAL_SIZE
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        chunks = [read_terminal(master, timeout, command)]
        proc.wait(timeout=timeout)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")  # the terminal's own \r
    text = COLOUR.sub("", text)  # other programs' colours (jq 1.6 ignores NO_COLOR); the docs show none
    return "\n".join(_as_seen(line) for line in text.split("\n"))


def _as_seen(line: str) -> str:
    """A line as the terminal leaves it: \r goes back to its start and ESC[K erases what follows
    (how vram run --wait redraws its waiting line)."""
    seen = ""
    for part in line.split("\r"):
        erase = part.startswith(ERASE)
        part = part.replace(ERASE, "")
        seen = part if erase else part + seen[len(part):]
    return seen


def example_env(home: Path, leases: Path, on_demo: bool = False, language: str = "en") -> dict[str, str]:
    """The environment an example runs in: this vram first on PATH, `home` as HOME (so kill's audit
    log and vram's per-user files are the test's own), its own lease directory, no colour, and the
    document's language (VRAM_LANG: a *.zh_CN.md shows Chinese output, every other doc English,
    whatever the machine's LANG)."""
    drop = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VRAM_", "CUDA_", "XDG_")) and k not in drop}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(home),
        VRAM_SIM_TIME="0",
        VRAM_LEASE_DIR=str(leases),
        NO_COLOR="1",
        TERM="xterm-256color",
        VRAM_LANG=language,
    )
    if on_demo:
        env["VRAM_SIMULATE"] = "demo"
    return env


def own_lease_dir() -> Path:
    """A lease directory not made yet (vram makes it as it makes the default one), its path as long
    as the default's, so that a line naming it wraps where the docs show it."""
    while True:
        path = Path(DEFAULT_LEASE_DIR).with_name(f"vramkit-{secrets.token_hex(3)}")
        assert len(str(path)) == len(DEFAULT_LEASE_DIR)
        if not os.path.lexists(path):
            return path


def as_shown(printed: str, home: Path, leases: Path) -> str:
    """The output with the test's own paths written as the docs show them: the default lease
    directory, and root's home (the guide's examples run as root)."""
    return printed.replace(str(leases), DEFAULT_LEASE_DIR).replace(str(home), SHOWN_HOME)


def real_output(example: Example, directory: Path) -> list[str]:
    """What the example's command prints, run in `directory` after the commands before it in its
    block (their own output is checked by their own tests)."""
    if GIVEN_FILES.is_dir():
        shutil.copytree(GIVEN_FILES, directory, dirs_exist_ok=True)
    leases = own_lease_dir()
    language = "zh_CN" if example.document.endswith(".zh_CN.md") else "en"
    env = example_env(directory, leases, on_demo=listed(ON_DEMO, example), language=language)
    try:
        for earlier in example.before:
            subprocess.run(["bash", "-c", earlier], cwd=directory, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        printed = on_terminal(example.command, directory, env)
    finally:
        shutil.rmtree(leases, ignore_errors=True)
    return _trim(as_shown(printed, directory, leases).splitlines())


def installed(program: str) -> bool:
    """Whether an example finds `program` on the PATH it runs with: this interpreter's bin first
    (gpustat, nvitop installed into the venv by the test extra), then the system's."""
    return shutil.which(program, path=example_env(Path("/"), Path(DEFAULT_LEASE_DIR))["PATH"]) is not None


def traces(example: Example) -> bool:
    """The example runs a model step on fake tensors: --trace, or a family the formulas do not know."""
    return "--trace" in example.command.split() or any("estimated by tracing" in line for line in example.expected)


def example_id(example: Example) -> str:
    return f"{example.document}:{example.line}"


# The pids of the demo scenario's processes: a pynvml program on the shim (gpustat) looks each up in
# /proc, and lists the ones it finds. None is found on a test machine, unless a process of the suite
# (or anyone's) happens to have that pid at that moment.
DEMO_PIDS = [p["pid"] for p in json.loads(
    (ROOT / "src" / "vramkit" / "nvml" / "scenarios" / "demo.json").read_text())["processes"]]


def peer_on_demo(example: Example) -> bool:
    """A peer program (gpustat) on the shim, over the demo scenario's processes (not spawned ones)."""
    return "VRAM_SIMULATE=demo" in example.command and "sim spawn" not in example.command and any(
        re.search(rf"(^|[|;&]\s*|\s){program}\b", example.command) for program in OTHER_PROGRAMS)


def who_runs_it_marks(example: Example) -> tuple[pytest.MarkDecorator, ...]:
    """The examples that only trace a model on fake tensors (`vram estimate --trace`, a family the
    formulas do not know) are marked any_user: they read a config and print a computed estimate, with
    no process, lease, user or file of anyone's in it, so they print the same whoever runs them, and
    CI need not run them again as an ordinary user (they are a third of this file's time)."""
    return (pytest.mark.any_user,) if traces(example) and not listed(AS_ROOT, example) else ()


@pytest.mark.parametrize("example", [pytest.param(ex, marks=who_runs_it_marks(ex), id=example_id(ex))
                                     for ex in ALL if why_not_run(ex) is None])
def test_console_example_is_the_real_output(example: Example, tmp_path: Path) -> None:
    if listed(AS_ROOT, example) and os.geteuid() != 0:
        pytest.skip("the guide shows this example run as root")
    for program in OTHER_PROGRAMS:
        if re.search(rf"(^|[|;&]\s*|\s){program}\b", example.command) and not installed(program):
            pytest.skip(f"the example runs {program}, which is not installed")
    if peer_on_demo(example):
        live = [pid for pid in DEMO_PIDS if os.path.exists(f"/proc/{pid}")]
        if live:  # the peer finds that real process by the scenario's pid and lists it, as it would on a GPU
            pytest.skip(f"pid {live[0]} of the demo scenario is a real process on this machine now: the "
                        "peer program would list it as a holder, which the example does not show")
    if traces(example):
        for module in ("torch", "transformers"):
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"the example traces a model, which needs {module} (not installed: make test "
                            "installs the core's test tools only; CI adds torch and the trainers extra)")
    actual = real_output(example, tmp_path)
    assert matches(example.expected, actual), (
        f"{example.document}:{example.line}: `{example.command}` printed:\n" + "\n".join(actual)
        + "\n\nthe example says:\n" + "\n".join(example.expected)
    )


def test_programs_in_the_venv_count_as_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A program installed next to this interpreter (the venv's gpustat) is found as the examples
    find it, although the test's own PATH (make test, not an activated venv) lacks that directory."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    program = fake_bin / "some-peer-tool"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake_bin / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert shutil.which("some-peer-tool") is None
    assert installed("some-peer-tool")
    assert not installed("no-such-program-anywhere")


def test_every_listed_example_exists() -> None:
    """An entry of NOT_RUN, ON_DEMO or AS_ROOT that no longer names an example would only rot."""
    for entry in [*NOT_RUN, *ON_DEMO, *AS_ROOT]:
        assert any(listed([entry], ex) for ex in ALL), entry


def test_examples_are_found_in_readme_and_docs() -> None:
    documents = {ex.document for ex in ALL}
    assert {"README.md", "docs/user-guide.md", "docs/history.md", "docs/gpu-numbering.md"} <= documents


def test_matcher_wildcard_and_dates() -> None:
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert matches(["a", "    ...", "d"], ["a", "b", "d"])
    assert matches(["demo  A busy server: ..."], ["demo  A busy server: a DataParallel job"])
    assert not matches(["demo  A busy server: ..."], ["demo  An idle server"])
    assert not matches(["a", "d"], ["a", "b", "d"])
    assert not matches(["a"], ["a", "b"])
    assert matches(["at 2026-11-29 16:04:49"], ["at 2027-01-02 03:04:05"])


def test_the_trace_message_says_what_installs_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    from vramkit.estimator import trace

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(trace.TraceUnavailable) as err:
        trace._torch()
    text = str(err.value)
    # From this checkout: its own extra, into the interpreter that runs vram (install_hint.py).
    assert text.startswith("needs PyTorch: ") and f"{sys.executable} -m pip install -e " in text and "[torch]" in text
    assert "pip install 'vramkit[torch]'" not in text  # vramkit is not on an index
