"""Other users' text (process names, command lines) may carry Unicode that reorders or hides what
is shown: U+202E (right-to-left override), U+2028/U+2029 (line/paragraph separators), zero-width
characters: Unicode categories Cf, Zl, Zp (issue 13 item 9). vram shows each as '?', as it does
control characters, in every view: text, CSV and JSON alike (JSON carries the replaced text, not
the original escaped: a program reading it must not pass the original on to a terminal either)."""

from __future__ import annotations

import json
import sys
import unicodedata

import pytest
from helpers import clean_env, cmdline, real_gpu_scenario, run_vram, wait_for

from vramkit.procs import sanitize

HIDDEN = "\u202e\u200b\u2028\u2029\u2066\ufeff\u00ad\U000e0041"
MARK = "evil\u202etxt.exe\u200bx\u2028y"
SHOWN = "evil?txt.exe?x?y"


def test_sanitize_replaces_every_format_and_separator_character():
    assert sanitize(HIDDEN) == "?" * len(HIDDEN)
    assert sanitize("a\x1b[31mb\nc") == "a?[31mb?c"
    assert sanitize("naïve café 日本語 🙂") == "naïve café 日本語 🙂"  # ordinary text untouched
    # every code point of those categories in this Python's Unicode database
    for c in range(sys.maxunicode + 1):
        if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp"):
            assert sanitize(chr(c)) == "?", hex(c)


@pytest.fixture
def scenario(children, write_scenario):
    proc = children.start([sys.executable, "-c", "import time; time.sleep(600)", MARK])
    assert wait_for(lambda: MARK.encode() in cmdline(proc.pid))
    return proc.pid, write_scenario(real_gpu_scenario({proc.pid: {"0": "1GiB"}}))


def _vram(*args: str) -> str:
    result = run_vram(*args, env=clean_env(COLUMNS="400"))
    assert result.rc == 0, result.err
    return result.out


@pytest.mark.parametrize("command", [("ps",), ("status",), ("ps", "--csv")])  # status --csv has no processes
def test_text_and_csv_views_replace_them(scenario, command):
    pid, path = scenario
    out = _vram(*command, "--simulate", str(path))
    assert not set(out) & set(HIDDEN), [c for c in out if c in HIDDEN]
    assert str(pid) in out and "evil?txt" in out


@pytest.mark.parametrize("command", ["ps", "status"])
def test_json_carries_the_replaced_text(scenario, command):
    pid, path = scenario
    out = _vram(command, "--simulate", str(path), "--json")
    assert not set(out) & set(HIDDEN) and "\\u202e" not in out.lower() and "\\u2028" not in out.lower()
    assert SHOWN in json.dumps(json.loads(out), ensure_ascii=False)


def test_a_lone_surrogate_in_a_user_name_is_shown_not_crashed_on(write_scenario):
    """JSON can carry "\\ud800", which no terminal encoding can print: it is replaced, as control
    characters are (it was an internal error, exit 1, in ps and status)."""
    from helpers import minimal_scenario, run_vram

    data = minimal_scenario()
    data["processes"][0]["user"] = "lone\ud800user"
    path = write_scenario(data)
    for command in ("ps", "status"):
        result = run_vram(command, "--simulate", str(path))
        assert result.rc == 0, result.err
        assert "lone?user" in result.out
