"""Console examples in docs/ are the commands' real output (issue 14: every example reproduces).

Each ```console block is read as `$ command` lines followed by the output they print (stdout and
stderr together). A command whose text starts with one of CHECKED is run through bash with the
project's `vram` first on PATH, and its output is compared line by line with the example: dates and
times (`2026-11-29 17:04:43`) are normalised, and a line `...` in the example stands for any
number of lines. The simulated clock starts at 0 in each run, so the output is reproducible.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"

# (file, command prefix): the examples this test runs.
CHECKED = [
    ("user-guide.md", "vram kill --simulate demo"),
    ("user-guide.md", "vram ps --simulate demo --holders"),
    ("user-guide.md", "VRAM_SIM_TIME=0 vram run --simulate demo -n 3 --wait"),
    ("gpu-numbering.md", "CUDA_VISIBLE_DEVICES=1abc,2 vram pick --simulate demo --explain"),
    ("history.md", "VRAM_SIM_CLOCK=stepped VRAM_SIM_EPOCH=1767225600 vram record --simulate lab-day"),
    ("history.md", "TZ=UTC vram report --db lab.db"),
    ("history.md", "TZ=UTC vram job --db lab.db"),
]
AS_ROOT = ("vram kill",)  # the guide shows these run as root (ownership and audit-log wording)
ROOT_AUDIT_LOG = "/var/log/vramkit/audit.log"
DATE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def examples(name: str) -> list[tuple[str, list[str], list[str]]]:
    """(command, expected output lines, the commands before it in its console block) for every `$ `
    line in the file's console blocks. The commands of one block run in one directory, in order,
    so an example can show what an earlier one recorded."""
    found: list[tuple[str, list[str], list[str]]] = []
    inside = False
    block: list[str] = []
    for line in (DOCS / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```console"
            block = []
            continue
        if not inside:
            continue
        if line.startswith("$ "):
            found.append((line[2:], [], list(block)))
            block.append(line[2:])
        elif found:
            found[-1][1].append(line)
    return [(cmd, _trim(out), before) for cmd, out, before in found]


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _norm(line: str) -> str:
    return DATE.sub("<date>", line).rstrip()


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line; an expected `...` line matches any run of lines (none included)."""
    exp = [_norm(x) for x in expected]
    act = [_norm(x) for x in actual]

    def go(i: int, j: int) -> bool:
        if i == len(exp):
            return j == len(act)
        if exp[i] == "...":
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and exp[i] == act[j] and go(i + 1, j + 1)

    return go(0, 0)


def selected() -> list[tuple[str, str, list[str], list[str]]]:
    out = []
    for name, prefix in CHECKED:
        hits = [(name, cmd, exp, before) for cmd, exp, before in examples(name) if cmd.startswith(prefix)]
        assert hits, f"docs/{name} has no console example starting {prefix!r}"
        out.extend(hits)
    return out


@pytest.mark.parametrize(("name", "command", "expected", "before"), selected(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_console_example_is_the_real_output(name: str, command: str, expected: list[str], before: list[str],
                                            tmp_path: Path) -> None:
    if command.startswith(AS_ROOT) and os.geteuid() != 0:
        pytest.skip("the guide shows this example run as root")
    audit = tmp_path / "audit.log"
    drop = ("COLUMNS", "LINES")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VRAM_", "CUDA_")) and k not in drop}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        VRAM_AUDIT_LOG=str(audit),
        VRAM_LEASE_DIR=str(tmp_path / "leases"),
        NO_COLOR="1",
    )
    for earlier in before:  # what the block did before this example (its own output is checked by its test)
        subprocess.run(["bash", "-c", earlier], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)
    proc = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=60,
    )
    actual = _trim(proc.stdout.replace(str(audit), ROOT_AUDIT_LOG).splitlines())
    assert matches(expected, actual), (
        f"docs/{name}: `{command}` printed:\n" + "\n".join(actual) + "\n\nthe example says:\n" + "\n".join(expected)
    )


def test_matcher_wildcard_and_dates() -> None:
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "d"], ["a", "b", "d"])
    assert matches(["at 2026-11-29 16:04:49"], ["at 2027-01-02 03:04:05"])


def test_the_trace_message_says_what_installs_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    from vramkit.estimate import trace

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(trace.TraceUnavailable) as err:
        trace._torch()
    text = str(err.value)
    assert "pip install torch" in text and ".venv/bin/pip install -e '.[torch]'" in text
    assert "pip install 'vramkit[torch]'" not in text  # vramkit is not on an index
