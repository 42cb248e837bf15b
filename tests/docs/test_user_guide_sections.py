"""The user guide covers every command `vram --help` lists (issue 31 item 12): a section whose
heading names `vram COMMAND`, with at least one example of it (a `$ ` line running it, in a
```console block, which tests/docs/test_docs_examples.py runs, or a ```text block where it cannot
run there: vram fleet needs a Prometheus)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import clean_env, run_vram

from vramkit.cli.commands import COMMANDS

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"


def sections(text: str) -> dict[str, str]:
    """Each `## ` heading with the text under it, up to the next `## ` heading (a `### ` stays inside)."""
    found: dict[str, str] = {}
    heading = None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            found[heading] = ""
        elif heading is not None:
            found[heading] += line + "\n"
    return found


def examples(body: str) -> list[str]:
    """The `$ ` lines of the section's console and text blocks."""
    out, inside = [], False
    for line in body.splitlines():
        if line.startswith("```"):
            inside = not inside and line.strip() in ("```console", "```text")
            continue
        if inside and line.startswith("$ "):
            out.append(line[2:])
    return out


def names(heading: str) -> set[str]:
    """The commands a heading names: 'vram estimate, vram plan: will it fit?' names both."""
    return set(re.findall(r"\bvram ([a-z]+)\b", heading))


def test_the_commands_are_the_ones_vram_help_lists():
    result = run_vram("--help", env=clean_env())
    assert result.rc == 0, result.err
    listed = re.findall(r"^    ([a-z]+)\s", result.out, re.M)
    assert listed == list(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_has_a_section_with_an_example(command):
    guide = sections(GUIDE.read_text(encoding="utf-8"))
    headed = [heading for heading in guide if command in names(heading)]
    assert headed, f"docs/user-guide.md has no '## vram {command}' section"
    runs = [ex for heading in headed for ex in examples(guide[heading])
            if re.search(rf"(^|[\s;&|(]|\$\(\s*)vram {command}\b", ex)]
    assert runs, f"the section on vram {command} has no example running it"


def test_the_rule_finds_a_missing_section():
    text = "## vram status\n```console\n$ vram status\n```\n## vram ps\nno example\n"
    guide = sections(text)
    assert names("vram estimate, vram plan: will it fit?") == {"estimate", "plan"}
    assert examples(guide["vram status"]) == ["vram status"]
    assert examples(guide["vram ps"]) == []
    assert not [h for h in guide if "record" in names(h)]


README = GUIDE.parent.parent / "README.md"


def test_the_readme_tours_first_and_lists_features_after():
    """Issue 31 item 12: set-up, then the short tour (what a newcomer runs first), then the features."""
    headings = [line[3:].strip() for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]
    assert headings[:3] == ["Set-up: two commands", "A short tour", "Features"], headings
    assert any(h.startswith("For admins") for h in headings)


def test_the_readme_states_no_test_counts_that_rot():
    """'~100 torch tests' was 281: counts of tests come from pytest's summary, not the README."""
    text = README.read_text(encoding="utf-8")
    assert not re.search(r"~?\d+\s+(torch\s+)?tests\b", text), re.search(r"~?\d+\s+(torch\s+)?tests\b", text)
