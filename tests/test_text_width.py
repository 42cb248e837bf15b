"""Display width (render/text_width.py): CJK and most emoji take two terminal columns, combining
marks, variation selectors and the zero-width joiner none. `vram status` and `vram ps` align and
cut their columns by it, so a user name or a command line in Chinese, Japanese or with emoji
neither shifts the columns after it nor runs past the terminal (issue 14 item 17)."""

from __future__ import annotations

import os
import sys

import pytest
from helpers import clean_env, minimal_scenario, run_vram

from vramkit.render.style import clip
from vramkit.render.text_width import cells, fit, pad

SAMPLES = ["张伟", "データ処理.py", "🚀train.py", "e\u0301", "caf\u00e9", "👩\u200d💻 dev", "❤\ufe0f", "plain"]


@pytest.mark.parametrize(("text", "width"), [
    ("plain", 5), ("", 0), ("张伟", 4), ("データ処理.py", 13), ("🚀train.py", 10),
    ("e\u0301", 1),  # e + combining acute accent: one column
    ("\u00e9", 1),  # the same letter precomposed
    ("👩\u200d💻", 4),  # a ZWJ sequence: the sum of its parts, the joiner none
    ("❤\ufe0f", 1),  # U+FE0F (emoji presentation) takes none
    ("ｆｕｌｌ", 8),  # full-width Latin
    ("한국어", 6),
])
def test_cells_counts_terminal_columns(text, width):
    assert cells(text) == width


@pytest.mark.parametrize("text", SAMPLES)
def test_fit_never_passes_the_width_and_keeps_a_prefix(text):
    for width in range(0, cells(text) + 2):
        cut = fit(text, width)
        assert cells(cut) <= width, (text, width, cut)
        if cells(text) <= width:
            assert cut == text
        elif width > 0:
            assert cut.endswith("…") and text.startswith(cut[:-1]) and cells(cut) >= width - 1, (width, cut)
        assert clip(text, width) == cut  # style.clip, used by every text view, cuts the same way


def test_fit_keeps_a_combining_mark_with_its_letter():
    assert fit("e\u0301e\u0301xyz", 3) == "e\u0301e\u0301…"


@pytest.mark.parametrize("text", SAMPLES)
def test_pad_fills_to_the_width_on_either_side(text):
    assert cells(pad(text, 16)) == 16 and pad(text, 16).startswith(text)
    assert cells(pad(text, 16, right=True)) == 16 and pad(text, 16, right=True).endswith(text)
    assert pad("toolong", 3) == "toolong"


# ------------------------------------------------------------------ the views
WIDTH = 100
ROWS = [  # (pid, user, command): each command starts with "python", long enough to be cut at 100 columns
    (201, "张伟", "python データ処理.py --epochs 100 --data /mnt/共享/数据集/imagenet-21k --lr 0.1 --batch 256"),
    (202, "ann", "python a.py --config configs/baseline-with-a-rather-long-name.yaml --seed 1234 --run x"),
    (203, "田中太郎", "python 🚀train.py --model llama-7b --steps 100000 --note 🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀"),
    (204, "e\u0301mile", "python e\u0301value\u0301.py " + "e\u0301" * 80),
    (205, "bob", "python b.py"),
]


@pytest.fixture
def wide_scenario(write_scenario):
    data = minimal_scenario()
    data["processes"] = [{"pid": pid, "user": user, "command": command, "gpus": {str(i % 2): f"{i + 1}GiB"}}
                         for i, (pid, user, command) in enumerate(ROWS)]
    return write_scenario(data)


def _lines(*args: str) -> list[str]:
    result = run_vram(*args, env=clean_env(COLUMNS=str(WIDTH)))
    assert result.rc == 0, result.err
    return result.out.splitlines()


def _row(lines: list[str], pid: int) -> str:
    [line] = [line for line in lines if f" {pid} " in line]
    return line


@pytest.mark.parametrize("command", ["status", "ps"])
def test_no_line_is_wider_than_the_terminal(wide_scenario, command):
    lines = _lines(command, "--simulate", str(wide_scenario))
    assert all(cells(line) <= WIDTH for line in lines), [(cells(line), line) for line in lines if cells(line) > WIDTH]
    for pid, _, command_line in ROWS:
        if cells(command_line) > WIDTH // 2:
            assert "…" in _row(lines, pid)  # cut, by display width (flags such as [idle] may follow)


def _column_of(line: str, text: str) -> int:
    """The terminal column `text` starts at in `line`."""
    return cells(line[: line.index(text)])


def test_ps_columns_line_up_with_wide_user_names(wide_scenario):
    lines = _lines("ps", "--simulate", str(wide_scenario))
    [header] = [line for line in lines if line.startswith("GPU")]
    memory_end = _column_of(header, "MEMORY") + len("MEMORY")  # a right-aligned column: ends line up
    for pid, user, _ in ROWS:
        line = _row(lines, pid)
        after_user = line[line.index(user) + len(user):]
        memory = after_user.lstrip().split("  ")[0]
        assert _column_of(line, user) + cells(user) + len(after_user) - len(after_user.lstrip()) + len(memory) \
            == memory_end, line
        assert _column_of(line, "python") == _column_of(header, "COMMAND"), line


def test_status_columns_line_up_with_wide_user_names(wide_scenario):
    lines = _lines("status", "--simulate", str(wide_scenario))
    pid_ends = {_column_of(_row(lines, pid), f" {pid} ") + len(f" {pid}") for pid, _, _ in ROWS}
    command_starts = {_column_of(_row(lines, pid), "python") for pid, _, _ in ROWS}
    assert len(pid_ends) == 1 and len(command_starts) == 1, [_row(lines, pid) for pid, _, _ in ROWS]


def test_ascii_output_does_not_load_unicodedata():
    """The fast path: all-ASCII text is measured with len(), so `vram status` on demo (ASCII
    throughout) does not import unicodedata at all."""
    result = run_vram("status", "--simulate", "demo", python_flags=("-X", "importtime"))
    assert result.rc == 0, result.err
    imported = {line.rsplit("|", 1)[1].strip() for line in result.err.splitlines() if line.startswith("import time:")}
    assert "vramkit.render.text_width" in imported and "unicodedata" not in imported


def _cells_by_the_rules(char):
    """The module's rules, asked of unicodedata for every character."""
    import unicodedata

    if char in "\u200b\u200c\u200d\u2060\ufeff" or "\ufe00" <= char <= "\ufe0f" \
            or unicodedata.category(char) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


@pytest.mark.parametrize("first,last", [(0x00, 0xFF), (0x2500, 0x259F)])  # Latin-1; box drawing, blocks
def test_the_characters_measured_without_unicodedata_measure_as_it_says(first, last):
    wrong = {chr(c): cells(chr(c)) for c in range(first, last + 1) if cells(chr(c)) != _cells_by_the_rules(chr(c))}
    assert not wrong


def test_the_live_views_bars_and_degrees_are_measured_without_unicodedata(monkeypatch):
    """A look-up in unicodedata touches its tables (~0.1 MiB of the live view's memory): the
    bars, charts and temperatures vram draws are measured without one."""
    monkeypatch.setitem(sys.modules, "unicodedata", None)  # importing it now fails
    text = "█████▎░░░ 40°C ▁▂▃▄▅▆▇ ├─ · …"
    assert cells(text) == len(text)  # a column each
    with pytest.raises(ImportError):
        cells("张")


def test_every_mark_the_live_view_draws_is_measured_without_unicodedata(monkeypatch):
    """The alerts' bullets (every alert line), the arrows, the bars: each character the view draws
    (its --ascii table) is one column by the rules and measured without a look-up."""
    from vramkit.tui.look import _ASCII

    drawn = "".join(map(chr, _ASCII))
    assert {char: _cells_by_the_rules(char) for char in drawn} == dict.fromkeys(drawn, 1)
    monkeypatch.setitem(sys.modules, "unicodedata", None)  # importing it now fails
    assert cells(drawn) == len(drawn)


def test_kill_plan_columns_line_up_with_wide_user_names(write_scenario):
    """vram kill's plan pads by display width too: the MEMORY column ends at one display column
    on every row, a Chinese user name's row included."""
    from vramkit.render.text_width import cells

    data = minimal_scenario()
    # The runner's uid: kill lists a user's own processes (as root and as an ordinary user).
    data["processes"][0].update(user="张伟", uid=os.getuid())
    data["processes"][1].update(user="bob", uid=os.getuid(), gpus={"0": "5GiB"})
    result = run_vram("kill", "--simulate", str(write_scenario(data)), "--gpu", "0", "--dry-run",
                      env=clean_env(COLUMNS="120"))
    assert result.rc in (0, 1), result.err
    rows = [line for line in result.out.splitlines() if "GiB" in line and ("张伟" in line or "bob" in line)]
    assert len(rows) == 2, result.out
    ends = {cells(line[:line.index("GiB") + 3]) for line in rows}
    assert len(ends) == 1, rows
