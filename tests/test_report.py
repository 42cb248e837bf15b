"""vram report: the command line (windows, errors), the views (text, JSON, CSV) and the pictures
(--plot SVG without any library, PNG through matplotlib). The numbers themselves are checked
against simulated timelines in test_report_timelines.py."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

import pytest
from helpers import ESCAPE, assert_one_line_error, clean_env, plant, run_vram, run_vram_tty, strip_ansi

from vramkit.units import parse_time_point

EPOCH = 1767225600  # 2026-01-01 00:00 UTC
HOUR = 3600
GIB = 1024**3
HOSTILE = "eve\x1b[31m<b>&\"'</b>"  # another user's name: escapes, markup, quotes

SCENARIO = {
    "name": "report-views",
    "gpus": [{"memory_total": "80GiB", "utilization": 70}, {"memory_total": "40GiB", "utilization": 0}],
    "processes": [
        {"pid": 501, "user": "alice", "command": "python train.py --lr 3e-4 " + "x" * 300, "gpus": {"0": "30GiB"}},
        {"pid": 502, "user": HOSTILE, "command": "jupyter\x1b]0;pwned\x07-kernel", "gpus": {"1": "10GiB"}},
        {"pid": 503, "user": "张伟", "command": "python 训练.py", "start_at": 3600, "gpus": {"0": "5GiB"},
         "sm_util": 0},
    ],
}


def env(**extra: str | None) -> dict[str, str]:
    return clean_env(TZ="UTC", **extra)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two hours of SCENARIO recorded at 60 s on the stepped clock, with full command lines."""
    where = tmp_path_factory.mktemp("report")
    scenario = where / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    path = where / "history.db"
    result = run_vram("record", "--simulate", str(scenario), "--db", str(path), "--interval", "60",
                      "--duration", "2h", "--quiet", "--commands", "full",
                      env=env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME=None))
    assert result.rc == 0, result.err
    return path


WINDOW = ("--since", f"@{EPOCH}", "--until", f"@{EPOCH + 2 * HOUR}")


def report(db: Path, *args: str, **extra: str | None):
    return run_vram("report", "--db", str(db), *args, env=env(**extra))


# ---------------------------------------------------------------- WHEN
@pytest.mark.parametrize("text,want", [
    ("now", 1_800_000_000), ("7d", 1_800_000_000 - 7 * 86400), ("24h", 1_800_000_000 - 86400),
    ("90m", 1_800_000_000 - 5400), ("1h30m", 1_800_000_000 - 5400), ("@1767225600", 1767225600),
    ("@1767225600.5", 1767225600.5),
    # with a zone, as the JSON writes since_time and until_time (the local zone does not matter)
    ("2026-01-01T00:00:00+00:00", 1767225600), ("2026-01-01T00:00:00Z", 1767225600),
    ("2026-01-01 05:30+05:30", 1767225600), ("2025-12-31T19:00:00.5-0500", 1767225600.5),
])
def test_time_points(text, want):
    assert parse_time_point(text, 1_800_000_000) == want


def test_dates_are_local_time(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30: not a whole hour
    import time

    time.tzset()
    try:
        want = datetime(2026, 11, 1, 13, 0).timestamp()
        assert parse_time_point("2026-11-01 13:00", 0) == want
        assert parse_time_point("2026-11-01T13:00", 0) == want
        assert parse_time_point("2026-11-01 13:00:30", 0) == want + 30
        assert parse_time_point("2026-11-01", 0) == datetime(2026, 11, 1).timestamp()
        assert parse_time_point("2026-11-01", 0) == 1793471400  # 2026-10-31 18:30 UTC
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "2026-11-01 25:00", "@abc", "@-5", "@inf", "-5m",
                                  "", "7x", "1" * 500, "2026-11-01 13:00 UTC", "2026-11-31T13:00Z",
                                  "2026-11-01T13:00+25:00"])
def test_bad_time_points(text):
    with pytest.raises(ValueError) as e:
        parse_time_point(text, 1e9)
    assert "\n" not in str(e.value) and len(str(e.value)) < 200


# ---------------------------------------------------------------- bad input: one line, exit 2
@pytest.mark.parametrize("args,needles", [
    (("--since", "last tuesday"), ("--since", "not a time")),
    (("--until", "2026-02-30"), ("--until", "not a date")),
    (("--since", "1h", "--until", "2h"), ("must be before",)),
    (("--since", "@1767225600", "--until", "@1767225600"), ("must be before",)),
    (("--top", "0"), ("--top",)),
    (("--top", "ten"), ("--top",)),
    (("--top", "9" * 400), ("--top",)),
    (("--by", "team"), ("--by",)),
    (("--plot", "out.pdf"), ("--plot", ".svg or .png")),
    (("--json", "--csv"), ("not allowed",)),
])
def test_bad_arguments(db, args, needles):
    assert_one_line_error(report(db, *args), 2, *needles)


def test_missing_corrupt_newer_and_foreign_databases(tmp_path, db):
    assert_one_line_error(report(tmp_path / "none.db"), 2, "--db", "no history at")
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\0" + os.urandom(4000))
    assert_one_line_error(report(corrupt), 2, "--db")
    text = tmp_path / "notes.db"
    text.write_text("not a database at all\n" * 100)
    assert_one_line_error(report(text), 2, "--db", "not a readable vram history")
    newer = tmp_path / "newer.db"
    shutil.copy(db, newer)
    with sqlite3.connect(newer) as c:
        c.execute("PRAGMA user_version = 99")
    assert_one_line_error(report(newer), 2, "--db", "newer vramkit")
    link = tmp_path / "link.db"
    link.symlink_to(db)
    assert_one_line_error(report(link), 2, "--db", "symbolic link")


# ---------------------------------------------------------------- text
def test_text_report(db):
    result = report(db, *WINDOW, COLUMNS="120")
    assert result.rc == 0, result.err
    assert ESCAPE not in result.out  # piped: no colour
    lines = result.out.splitlines()
    assert lines[0] == "usage by user, 2026-01-01 00:00 to 2026-01-01 02:00 (2h00m)"
    assert lines[1] == f"recorded: 2h00m of it (100%), in {db}"
    rows = {line.split()[0]: line.split() for line in lines[4:7]}
    assert lines[3].split() == ["USER", "GPU-HOURS", "GiB-HOURS", "PEAK", "MEM", "IDLE", "HOURS", "PROCESSES"]
    assert rows["alice"][1:] == ["2.00", "60.0", "30.0GiB", "0.00", "1"]  # 30 GiB x 2 h
    assert rows["张伟"][1:] == ["1.00", "5.00", "5.0GiB", "1.00", "1"]  # from 1 h on, idle
    hostile = next(line for line in lines if line.startswith("eve"))
    assert hostile.split()[0] == "eve?[31m<b>&\"'</b>"  # the escape defused, the rest is text
    assert hostile.split()[1:] == ["2.00", "20.0", "10.0GiB", "2.00", "1"]  # GPU 1 at 0%: idle
    at = lines.index("top idle holders (memory held while running no kernels of its own)")
    holders = [line.split()[:4] for line in lines[at + 2:]]
    assert holders == [["502", "eve?[31m<b>&\"'</b>", "1", "2.00"], ["503", "张伟", "0", "1.00"]]


def test_columns_line_up_with_wide_characters(db):
    lines = report(db, *WINDOW, "--by", "life", COLUMNS="100").out.splitlines()
    from vramkit.render.report_view import cells

    table = lines[3:7]
    # The GPU-HOURS column ends at the same display column on every line.
    ends = {cells(line[: line.index(line.split()[3]) + len(line.split()[3])]) for line in table[1:]}
    assert len(ends) == 1, table
    assert all(cells(line) <= 100 for line in lines), [cells(line) for line in lines]
    command = next(line for line in table if line.lstrip().startswith("501"))
    assert command.endswith("…") and "python train.py" in command  # cut to the width, marked
    assert all(ESCAPE not in line and "\x07" not in line for line in lines)


def test_colour_only_on_a_terminal_without_no_color(db):
    tty = run_vram_tty("report", "--db", str(db), *WINDOW, env=env())
    assert tty.rc == 0 and ESCAPE in tty.out
    assert "top idle holders" in strip_ansi(tty.out)
    plain = run_vram_tty("report", "--db", str(db), *WINDOW, env=env(NO_COLOR="1"))
    assert plain.rc == 0 and ESCAPE not in plain.out
    assert strip_ansi(tty.out) == plain.out


def test_by_gpu_and_day_views(db):
    lines = report(db, *WINDOW, "--by", "gpu").out.splitlines()
    gpu0 = next(line for line in lines if line.startswith("GPU 0"))
    assert gpu0.split()[2:] == ["2.00", "65.0", "35.0GiB", "1.00", "70%", "2"]  # 30 GiB x 2 h + 5 GiB x 1 h
    gpu1 = next(line for line in lines if line.startswith("GPU 1"))
    assert gpu1.split()[2:] == ["2.00", "20.0", "10.0GiB", "2.00", "0%", "1"]
    day = report(db, *WINDOW, "--by", "day").out.splitlines()
    assert day[4].split() == ["2026-01-01", "5.00", "85.0", "30.0GiB", "3.00", "3"]


def test_an_empty_window_says_so(db):
    result = report(db, "--since", "@1000000000", "--until", "@1000003600")
    assert result.rc == 0
    assert result.out.splitlines()[1].startswith("recorded: 0s of it (0%), in ")
    assert "no data recorded in this window (the database holds 2026-01-01 00:00 to 2026-01-01 02:00)" in result.out


# ---------------------------------------------------------------- data
def test_json_schema(db):
    doc = report(db, *WINDOW, "--json").json()
    assert set(doc) == {"schema", "database", "window", "coverage", "by", "total_rows", "rows", "idle_holders"}
    assert doc["schema"] == 1 and doc["by"] == "user" and doc["database"] == str(db)
    assert doc["window"] == {"since": EPOCH, "until": EPOCH + 2 * HOUR, "seconds": 2 * HOUR,
                             "since_time": "2026-01-01T00:00:00+00:00", "until_time": "2026-01-01T02:00:00+00:00"}
    assert doc["coverage"] == {"recorded_seconds": 2 * HOUR, "first_sample": EPOCH, "last_sample": EPOCH + 2 * HOUR}
    alice = next(r for r in doc["rows"] if r["user"] == "alice")
    assert alice == {"user": "alice", "gpu_seconds": 7200, "memory_byte_seconds": 30 * GIB * 7200,
                     "peak_memory": 30 * GIB, "idle_seconds": 0, "lives": 1, "jobs": 1}
    assert "\x1b" not in json.dumps(doc, ensure_ascii=False)
    assert [h["pid"] for h in doc["idle_holders"]] == [502, 503]
    assert doc["idle_holders"][1] == {"pid": 503, "nvml_pid": None, "user": "张伟", "command": "python 训练.py",
                                      "gpus": [0],
                                      "idle_seconds": 3600, "idle_memory_byte_seconds": 5 * GIB * 3600,
                                      "peak_memory": 5 * GIB, "first_seen": EPOCH + HOUR,
                                      "last_seen": EPOCH + 2 * HOUR}
    lives = report(db, *WINDOW, "--json", "--by", "life", "--top", "1").json()
    assert lives["total_rows"] == 3 and [r["pid"] for r in lives["rows"]] == [501]
    gpus = report(db, *WINDOW, "--json", "--by", "gpu").json()
    assert [(r["gpu"], r["utilization"]) for r in gpus["rows"]] == [(0, 70), (1, 0)]


@pytest.mark.parametrize("by", ["user", "gpu", "life", "day"])
def test_csv_has_a_row_per_group_matching_json(db, by):
    doc = report(db, *WINDOW, "--json", "--by", by).json()
    result = report(db, *WINDOW, "--csv", "--by", by)
    assert result.rc == 0
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert len(rows) == len(doc["rows"]) > 0
    for got, want in zip(rows, doc["rows"]):
        for key in ("gpu_seconds", "memory_byte_seconds", "idle_seconds"):
            assert float(got[key]) == want[key]
        assert int(got["peak_memory"]) == want["peak_memory"]


# ---------------------------------------------------------------- pictures
def _blocked_matplotlib(tmp_path: Path) -> dict[str, str]:
    """An environment in which `import matplotlib` fails, whether or not it is installed."""
    fake = tmp_path / "no-matplotlib" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('matplotlib is blocked for this test')\n")
    return env(PYTHONPATH=str(fake.parent))


def test_svg_needs_no_library_and_escapes_every_name(db, tmp_path):
    out = tmp_path / "gpus.svg"
    result = run_vram("report", "--db", str(db), *WINDOW, "--plot", str(out), env=_blocked_matplotlib(tmp_path))
    assert result.rc == 0, result.err
    assert f"memory per GPU over time drawn into {out}" in result.out
    text = out.read_text(encoding="utf-8")
    root = ET.fromstring(text)  # well-formed: the names could not break out of their elements
    ns = "{http://www.w3.org/2000/svg}"
    assert "<b>" not in text and "\x1b" not in text and "&lt;b&gt;" in text
    names = {t.text for t in root.iter(f"{ns}title")}
    assert names == {"alice", "张伟", "eve?[31m<b>&\"'</b>"}  # one layer per (GPU, user)
    labels = [t.text for t in root.iter(f"{ns}text")]
    assert "GPU 0" in labels and "GPU 1" in labels and "80 GiB" in labels and "40 GiB" in labels


def test_png_without_matplotlib_is_one_line(db, tmp_path):
    result = run_vram("report", "--db", str(db), *WINDOW, "--plot", str(tmp_path / "g.png"),
                      env=_blocked_matplotlib(tmp_path))
    assert_one_line_error(result, 2, "--plot", "-m pip install -e ", "[plot]", ".svg")
    assert not (tmp_path / "g.png").exists()


def test_png_with_matplotlib(db, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "g.png"
    result = report(db, *WINDOW, "--plot", str(out))
    assert result.rc == 0, result.err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_memory_series_is_each_users_average_per_bucket(db):
    from vramkit.history.query import memory_series
    from vramkit.history.store import Store

    store = Store.open(db)
    try:
        series = memory_series(store, EPOCH + 1800, EPOCH + 5400, 900)  # four quarter hours
    finally:
        store.close()
    assert series.count == 4 and series.totals == {0: 80 * GIB, 1: 40 * GIB}
    assert series.memory[0]["alice"] == [30 * GIB] * 4
    assert series.memory[0]["张伟"] == [0, 0, 5 * GIB, 5 * GIB]  # starts at 1 h: none held before (not a gap)
    assert series.memory[1] == {"eve?[31m<b>&\"'</b>": [10 * GIB] * 4}  # as recorded (the views sanitize too)


def test_headings_fold_where_the_one_line_table_is_wider_than_the_terminal(db):
    """A heading wider than its column's values folds onto two lines (between words, by display
    width) rather than push the table past the width; where the table fits, it stays one line."""
    from vramkit.render.report_view import cells

    lines = report(db, *WINDOW, COLUMNS="60").out.splitlines()
    table = lines[3:lines.index("", 3)]
    assert lines[3].split() == ["GPU-", "GiB-", "IDLE"] and lines[4].split()[:3] == ["USER", "HOURS", "HOURS"]
    assert all(cells(line) <= 60 for line in table), table
    ends = {cells(line) for line in table[2:]}  # the numbers still end under their headings
    assert ends == {cells(table[1])}, table


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_a_plot_path_another_user_planted_is_refused_and_nothing_written_through_it(db, tmp_path, planted):
    """vram report often runs as root, and --plot into a shared /tmp: a symlink there is not followed
    (root's file behind it keeps its bytes), a FIFO is not waited on."""
    out = tmp_path / "gpus.svg"
    victim = plant(out, planted)
    result = run_vram("report", "--db", str(db), *WINDOW, "--plot", str(out), env=_blocked_matplotlib(tmp_path),
                      timeout=30)
    assert_one_line_error(result, 2, "--plot", "cannot write it")
    assert victim.read_text() == "keep me\n"


def test_a_plot_path_of_ones_own_is_written_afresh(db, tmp_path):
    out = tmp_path / "gpus.svg"
    out.write_text("an older plot\n")
    result = run_vram("report", "--db", str(db), *WINDOW, "--plot", str(out), env=_blocked_matplotlib(tmp_path))
    assert result.rc == 0, result.err
    assert out.read_text(encoding="utf-8").startswith("<svg") and oct(out.stat().st_mode & 0o777) == "0o644"


def test_the_recorded_time_shown_is_never_more_than_the_window():
    # A sample counts in the window it starts in: its span may reach past the window's end.
    from vramkit.history.query import Coverage
    from vramkit.render.report_view import Report, _headline

    window = Report("lab.db", EPOCH, EPOCH + 2 * HOUR, "gpu", [], [], Coverage(EPOCH, EPOCH + 2 * HOUR, 2 * HOUR + 4))
    assert _headline(window)[1] == "recorded: 2h00m of it (100%), in lab.db"
    half = Report("lab.db", EPOCH, EPOCH + 2 * HOUR, "gpu", [], [], Coverage(EPOCH, EPOCH + HOUR, HOUR))
    assert _headline(half)[1] == "recorded: 1h00m of it (50%), in lab.db"
