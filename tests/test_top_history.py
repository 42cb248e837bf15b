"""`vram top` draws the recorded history: a real `vram record` on the stepped scenario clock
writes an hour that ends about now, then the view opens on it (Textual's pilot, and once in a real
terminal through tmux).

The scenario: GPU 0's memory is 8 GiB for the first half hour and 72 GiB for the second (a step);
the live view itself pins the clock at t=0, so live GPU 0 is at 8 GiB. The history line must show
both levels, the high one only where the recording put it. Expected ticks are computed here from
the scenario, not from vram's code.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import clean_env, minimal_scenario, run_vram, timeline_at, wait_for

from vramkit.history.store import APPLICATION_ID
from vramkit.machine import open_machine
from vramkit.tui.app import TopApp
from vramkit.units import parse_size

GIB = 1024**3
TICKS = "▁▂▃▄▅▆▇█"
LOW, HIGH, TOTAL = 8 * GIB, 72 * GIB, 80 * GIB
RECORDED = 3600  # seconds recorded, ending about now


def tick(used: int, total: int = TOTAL) -> str:
    return TICKS[round(used / total * (len(TICKS) - 1))]


def stepped_scenario() -> dict:
    data = minimal_scenario()
    data["processes"][0]["gpus"] = {"0": {"timeline": [[0, "8GiB"], [RECORDED / 2, "72GiB"]],
                                          "interpolate": "step"}}
    return data


@pytest.fixture
def sim_env(monkeypatch):
    for key in ("VRAM_SIMULATE", "VRAM_SIM_EPOCH", "VRAM_SIM_CLOCK", "VRAM_DB", "NO_COLOR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")


@pytest.fixture
def recorded(tmp_path) -> tuple[Path, Path]:
    """(scenario, database): an hour recorded every 60 s on the stepped clock, ending now."""
    scenario = tmp_path / "stepped.json"
    scenario.write_text(json.dumps(stepped_scenario()))
    db = tmp_path / "history.db"
    env = clean_env(VRAM_SIM_TIME=None, VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(int(time.time()) - RECORDED))
    result = run_vram("record", "--simulate", str(scenario), "--db", str(db), "--interval", "60",
                      "--duration", f"{RECORDED}s", "--quiet", env=env)
    assert result.rc == 0, result.err
    return scenario, db


def run_app(app: TopApp, body, size=(120, 40)) -> None:
    async def main():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await app.workers.wait_for_complete()  # every range read (or given up on)
            await pilot.pause()
            await body(pilot)
    asyncio.run(main())


def history_line(app: TopApp, gpu: int) -> str:
    """The memory part of GPU `gpu`'s history line (the line under its panel)."""
    lines = app.query_one("#gpus").content.plain.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(f"{gpu:>2} "))
    return lines[i + 1].split("util")[0].strip().removeprefix("mem ")


def banner(app: TopApp) -> str:
    return app.query_one("#banner").content.plain


def open_app(scenario: Path, db: Path | None, **kw) -> tuple[TopApp, object]:
    machine = open_machine(str(scenario))
    app = TopApp(machine.snapshot, interval=3600, history_db=db, **kw)
    app.first_read_wait = 60  # the test waits for the database whatever the machine's load
    return app, machine


def test_the_view_opens_with_the_recorded_hour_drawn(sim_env, recorded):
    scenario, db = recorded
    app, machine = open_app(scenario, db, history_span=3600)
    loaded_at_first_sample = []

    def collect():
        loaded_at_first_sample.append(app.charts.shown.loaded)
        return machine.snapshot()
    app.collect = collect

    async def body(pilot):
        assert loaded_at_first_sample[0] is True  # drawn before the first live sample
        line = history_line(app, 0)
        low, high = tick(LOW), tick(HIGH)
        assert low != high and low in line and high in line, line
        # Low for the first half of the recorded hour, then high (the live sample, low, shares the
        # last cell with the last recorded one: a cell shows its highest value).
        first_high = line.index(high)
        assert line[0] == low  # the sample before the window stands for its start: no blank edge
        assert line[:first_high].strip(" ") == low * len(line[:first_high].strip(" ")), line
        assert abs(first_high - len(line) / 2) <= 2, (first_high, len(line), line)
        # GPU 1 held 5 GiB the whole hour.
        assert set(history_line(app, 1).strip()) == {tick(5 * GIB)}
        assert f"history 1h from {db}" in banner(app)
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_without_the_database_only_the_live_sample_is_drawn(sim_env, recorded):
    """The same view without history: what the test above sees comes from the database."""
    scenario, _ = recorded
    app, machine = open_app(scenario, None, history_span=3600)

    async def body(pilot):
        assert history_line(app, 0).strip() == tick(LOW)
        assert "history 1h live only" in banner(app)
        assert "database" not in banner(app)  # nothing recorded is not a problem
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_h_cycles_the_range_and_says_how_much_is_recorded(sim_env, recorded):
    scenario, db = recorded
    app, machine = open_app(scenario, db)  # --history 5m, the default

    async def body(pilot):
        # The last 5 minutes of the recording are all in the high half (the last cell may be the
        # live sample's alone, low), from the window's first cell: the sample before the window
        # stands for its start.
        line = history_line(app, 0)
        assert line[0] == tick(HIGH) and set(line[:-1].rstrip()) == {tick(HIGH)}, line
        seen = []
        for _ in range(5):
            seen.append(app.query_one("#gpus").content.plain.splitlines()[1].rsplit(" ", 1)[-1])  # its label
            text = banner(app)
            seen.append(next(part for part in text.split("  ·  ") if part.startswith("history")))
            await pilot.press("h")
        assert seen == ["5m", f"history 5m from {db}",
                        "1h", f"history 1h from {db}",
                        "24h", f"history 24h: 1h recorded, from {db}",
                        "7d", f"history 7d: 1h recorded, from {db}",
                        "5m", f"history 5m from {db}"]
        line = history_line(app, 0)  # the 1h range again: both halves
        assert tick(LOW) in line and tick(HIGH) in line, line
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_80_columns_draw_the_history_and_leave_out_the_path(sim_env, recorded):
    scenario, db = recorded
    app, machine = open_app(scenario, db, history_span=3600)

    async def body(pilot):
        memory = history_line(app, 0)
        assert tick(LOW) in memory and tick(HIGH) in memory, memory
        assert "history 1h recorded" in banner(app) and str(db) not in banner(app)
        assert len(banner(app).splitlines()) == 3  # as without a database: two banner lines and the host's
    try:
        run_app(app, body, size=(80, 24))
    finally:
        machine.close()


def test_ranges_keep_live_samples_and_the_help_names_the_key(sim_env, recorded):
    scenario, db = recorded
    app, machine = open_app(scenario, db)

    async def body(pilot):
        for chart in app.charts.ranges:
            assert chart.loaded
        before = {c.span: c.samples(0, TOTAL) for c in app.charts.ranges}
        machine.backend.sim._fixed_t = RECORDED  # the live machine moves on: GPU 0 is high now
        snap = machine.snapshot()
        snap.time = app.snap.time + 2 * 7 * 86400 / 600  # two slots of the widest range on: new in each
        app.apply(snap)
        for chart in app.charts.ranges:
            # every sample still inside the range is kept, and the live one comes after them
            kept = [s for s in before[chart.span] if s.time > snap.time - chart.span]
            recent = [s for s in chart.samples(0, TOTAL) if s.time > snap.time - chart.span]
            assert recent[:-1] == kept
            assert recent[-1].memory_used == HIGH
        assert len(before[7 * 86400.0]) > 1 and len(kept) == len(before[7 * 86400.0])  # the week kept them all
        await pilot.press("question_mark")
        text = str(app.screen.query_one("#help-text").render())
        assert "h   history range: 5m, 1h, 24h, 7d" in text
    try:
        run_app(app, body)
    finally:
        machine.close()


@pytest.mark.parametrize("span", [3600, 7 * 86400])
def test_series_keeps_the_highest_value_of_each_slot(recorded, span):
    """history.series on its own: slot by slot, the highest of the samples recorded in it."""
    from vramkit.history.series import gpu_series
    from vramkit.history.store import Store

    _, db = recorded
    store = Store.open(db)
    try:
        epoch = store.conn.execute("SELECT min(t) FROM samples").fetchone()[0]  # the sample at t=0
        series = gpu_series(store, epoch + RECORDED, span, 600)
    finally:
        store.close()
    width = span / 600
    timeline = stepped_scenario()["processes"][0]["gpus"]["0"]  # GPU 0's only process
    expected: dict[int, int] = {}
    for k in range(RECORDED // 60 + 1):  # a sample every 60 s, t = 0..3600
        used = timeline_at(timeline, 60 * k, parse_size)
        slot = int((epoch + 60 * k) // width)
        expected[slot] = max(expected.get(slot, 0), used)
    got = {slot: used for slot, (used, _) in series.gpus[0].items() if slot in expected}
    assert got == expected
    assert series.first == epoch
    # Slots between samples hold the sample before them (it stands for the time up to the next).
    for slot, (used, _) in series.gpus[0].items():
        if slot not in expected:
            assert used == expected[max(s for s in expected if s < slot)]


def _broken_databases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not SQLite " * 300)
    newer = tmp_path / "newer.db"
    conn = sqlite3.connect(newer)
    conn.executescript(f"CREATE TABLE meta (key TEXT); PRAGMA user_version = 99; "
                       f"PRAGMA application_id = {APPLICATION_ID};")
    conn.close()
    link = tmp_path / "link.db"
    link.symlink_to(corrupt)
    return {"corrupt": (corrupt, "is not a readable vram history database"),
            "newer": (newer, "written by a newer vramkit (schema 99"),
            "missing": (tmp_path / "none.db", "no history at"),
            "symlink": (link, "is a symbolic link")}


@pytest.mark.parametrize("kind", ["corrupt", "newer", "missing", "symlink"])
def test_a_bad_database_leaves_a_live_view_and_one_line_why(sim_env, recorded, tmp_path, kind):
    scenario, _ = recorded
    db, reason = _broken_databases(tmp_path)[kind]
    app, machine = open_app(scenario, db)

    async def body(pilot):
        lines = banner(app).splitlines()
        problem = [line for line in lines if line.startswith("history database not used:")]
        assert len(problem) == 1 and reason in problem[0] and str(db) in problem[0], lines
        assert "history 5m live only" in banner(app)
        assert "Traceback" not in banner(app)
        assert app.query_one("#procs").row_count == 2  # the table and panels work
        assert history_line(app, 0).strip() == tick(LOW)
        await pilot.press("h")
        assert "history 1h live only" in banner(app)
    try:
        run_app(app, body, size=(250, 40))  # room for the long temporary path: the line is cut to fit
    finally:
        machine.close()


@pytest.mark.slow
def test_a_locked_database_does_not_hold_the_view(sim_env, recorded):
    """Another program holds an exclusive lock (a rollback-journal writer): the first frame goes
    on live, and the reason comes when SQLite gives up waiting."""
    scenario, db = recorded
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA journal_mode = DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    app, machine = open_app(scenario, db)
    app.first_read_wait = 0.01

    async def body(pilot):
        assert app.refreshes == 1
        assert "history database not used:" in banner(app) and "locked" in banner(app)
        assert history_line(app, 0).strip() == tick(LOW)
    try:
        run_app(app, body)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        machine.close()


def test_the_default_database_is_the_recorders(sim_env, tmp_path, monkeypatch):
    from vramkit.cli.top import history_db
    from vramkit.history.store import default_path

    if os.geteuid() == 0:  # root's is /var/lib/vramkit/history.db: compare without creating it
        assert default_path() == Path("/var/lib/vramkit/history.db")
        assert history_db(None) == (default_path() if default_path().exists() else None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a user's: under XDG_STATE_HOME
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert history_db(None) is None  # none recorded: live only, nothing to say
    path = default_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    assert history_db(None) == path
    monkeypatch.setenv("VRAM_DB", str(tmp_path / "env.db"))
    assert history_db(None) == default_path() == tmp_path / "env.db"  # named: reported even if missing
    assert history_db(str(tmp_path / "flag.db")) == tmp_path / "flag.db"


def test_a_view_without_a_database_does_not_import_sqlite(tmp_path):
    code = """
import asyncio, os, sys
os.geteuid = lambda: 1000  # as a user, whose default database is under XDG_STATE_HOME (none there)
from vramkit.cli.top import history_db
from vramkit.machine import open_machine
from vramkit.tui.app import TopApp
machine = open_machine("demo")
app = TopApp(machine.snapshot, interval=3600, history_db=history_db(None))
async def main():
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.refreshes == 1
asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith(("sqlite3", "_sqlite3", "vramkit.history."))
             and m != "vramkit.history.paths"))  # where a database would be: no sqlite3 in it
"""
    env = clean_env(XDG_STATE_HOME=str(tmp_path), HOME=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# ---------------------------------------------------------------- a real terminal

@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_top_in_tmux_draws_the_recorded_history_and_h_switches(recorded, tmp_path):
    scenario, db = recorded
    name = f"vramtop-{uuid.uuid4().hex[:8]}"
    env = clean_env(TMUX=None, TMUX_TMPDIR=str(tmp_path))
    rc_file = tmp_path / "rc"
    command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "vramkit", "top", "--simulate", str(scenario),
                                                 "--db", str(db), "--history", "1h"))

    def tmux(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=20, env=env)

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", name).stdout

    proc = tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "sh", "-c",
                f"{command}; echo rc=$? > {shlex.quote(str(rc_file))}")
    assert proc.returncode == 0, proc.stderr
    try:
        assert wait_for(lambda: "history 1h from" in screen() and "python a.py" in screen(), timeout=30), screen()
        lines = screen().splitlines()
        i = next(n for n, line in enumerate(lines) if line.strip().startswith("0 "))
        memory = lines[i + 1].split("util")[0]
        assert tick(LOW) in memory and tick(HIGH) in memory, memory
        tmux("send-keys", "-t", name, "h")
        assert wait_for(lambda: "history 24h: 1h recorded, from" in screen(), timeout=20), screen()
        tmux("send-keys", "-t", name, "q")
        assert wait_for(lambda: rc_file.exists() and rc_file.read_text().endswith("\n"), timeout=20), screen()
        assert rc_file.read_text().strip() == "rc=0"
    finally:
        tmux("kill-server")
