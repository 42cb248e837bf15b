"""`vram top` headless, driven by Textual's pilot on the simulated NVML.

Expected values come from the scenario JSON (conftest.expected_gpus), never from vram's output.
Async tests run with asyncio.run, so no pytest plugin is needed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from helpers import clean_env, expected_gpus, gib_pair, minimal_scenario, scenario_data

from vramkit.alerts import Thresholds
from vramkit.machine import open_machine
from vramkit.tui.app import TopApp
from vramkit.tui.screens import DetailScreen, HelpScreen
from vramkit.units import format_size


def machine_for(scenario):
    return open_machine(scenario if isinstance(scenario, str) else str(scenario))


def run_app(app: TopApp, body, size=(120, 40)):
    async def main():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await body(pilot)
    asyncio.run(main())


def gpus_text(app: TopApp) -> str:
    return app.query_one("#gpus").content.plain


def alerts_text(app: TopApp) -> str:
    return app.query_one("#alerts").content.plain


def table_rows(app: TopApp) -> list[dict[str, str]]:
    table = app.query_one("#procs")
    keys = [str(c.key.value) for c in table.ordered_columns]
    return [dict(zip(keys, (str(cell) for cell in table.get_row_at(i)))) for i in range(table.row_count)]


def scenario_clock(machine):
    """at(t): the machine's snapshot at scenario time t, stamped with that time (history follows
    the scenario clock)."""
    def at(t: float):
        machine.backend.sim._fixed_t = t
        snap = machine.snapshot()
        snap.time = 1_000_000.0 + t
        return snap
    return at


def demo_app(**kw) -> tuple[TopApp, object]:
    machine = machine_for("demo")
    return TopApp(machine.snapshot, interval=3600, **kw), machine


@pytest.mark.slow
def test_panels_and_table_show_the_scenario(sim_env):
    app, machine = demo_app()
    expected = expected_gpus(scenario_data("demo"))

    async def body(pilot):
        text = gpus_text(app)
        lines = text.splitlines()
        for g in expected:
            line = next(x for x in lines if x.startswith(f"{g['index']:>2} "))
            assert gib_pair(g["memory_used"], g["memory_total"]) in line
            assert f"{g['utilization']}%" in line
            assert f"{g['temperature']}°C" in line
            assert f"{g['power_draw']:.0f}/{g['power_limit']:.0f}W" in line
        rows = table_rows(app)
        want = {(pid, g["index"]): p for g in expected for pid, p in g["processes"].items()}
        assert {(int(r["pid"]), int(r["gpu"])) for r in rows} == set(want)
        for r in rows:
            p = want[(int(r["pid"]), int(r["gpu"]))]
            assert r["memory"] == format_size(p["memory"])
            assert r["user"] == p["user"]
        sizes = [want[(int(r["pid"]), int(r["gpu"]))]["memory"] for r in rows]
        assert sizes == sorted(sizes, reverse=True)  # memory, largest first, as vram ps
        banner = app.query_one("#banner").content.plain
        assert "SIMULATED machine (scenario 'demo')" in banner and "read-only" in banner
        # The defunct holder's command is shown as text, not eaten as markup.
        zombie = next(r for r in rows if r["pid"] == "29044")
        assert zombie["command"].startswith("[python] <defunct>")
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_alerts_show_the_demo_problems(sim_env):
    app, machine = demo_app()

    async def body(pilot):
        text = "\n".join(a.message for a in app.alerts)
        assert "GPU 6 nearly full" in text
        assert "pid 29044 (carol) is defunct and still holds 9.5GiB on GPU 5" in text
        assert "GPU 6 nearly full" in alerts_text(app)
    try:
        run_app(app, body)
    finally:
        machine.close()


@pytest.mark.slow
def test_sort_keys_and_reverse(sim_env):
    app, machine = demo_app()

    async def body(pilot):
        await pilot.press("s")  # memory -> gpu
        assert app.view.sort == "gpu"
        gpus = [int(r["gpu"]) for r in table_rows(app)]
        assert gpus == sorted(gpus)
        await pilot.press("r")
        gpus = [int(r["gpu"]) for r in table_rows(app)]
        assert gpus == sorted(gpus, reverse=True)
        await pilot.press("s")  # -> pid
        pids = [int(r["pid"]) for r in table_rows(app)]
        assert pids == sorted(pids, reverse=True)
        assert "sort pid (reversed)" in app.query_one("#viewline").content.plain
    try:
        run_app(app, body)
    finally:
        machine.close()


@pytest.mark.slow
def test_filter_by_user_and_gpu_and_search(sim_env):
    app, machine = demo_app()

    async def body(pilot):
        assert not app.query("#prompt")  # the prompt is made when first asked for: a widget less until then
        await pilot.press("u", *"carol", "enter")
        assert {r["user"] for r in table_rows(app)} == {"carol"}
        assert len(table_rows(app)) == 2
        assert "2 of 9 GPU processes" in app.query_one("#viewline").content.plain
        await pilot.press("escape")
        assert len(table_rows(app)) == 9
        await pilot.press("g", *"1-2", "enter")
        rows = table_rows(app)
        assert {(r["pid"], r["gpu"]) for r in rows} == {("41234", "1"), ("41234", "2")}
        await pilot.press("escape")
        await pilot.press("slash", *"finetune")  # live while typing
        assert [r["pid"] for r in table_rows(app)] == ["52001"]
        await pilot.press("enter")
        assert [r["pid"] for r in table_rows(app)] == ["52001"]
        await pilot.press("escape")
        assert len(table_rows(app)) == 9
        await pilot.press("g", *"x", "enter")  # a bad GPU list is refused, the filter unchanged
        assert len(table_rows(app)) == 9
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_tree_view_puts_children_under_parents(sim_env, write_scenario):
    data = minimal_scenario()
    data["processes"] = [
        {"pid": 201, "user": "ann", "command": "torchrun worker 0", "ppid": 200, "gpus": {"0": "10GiB"}},
        {"pid": 202, "user": "ann", "command": "torchrun worker 1", "ppid": 200, "gpus": {"1": "9GiB"}},
        {"pid": 301, "user": "ben", "command": "python main.py", "ppid": 1, "gpus": {"0": "1GiB"}},
        {"pid": 302, "user": "ben", "command": "python dataloader.py", "ppid": 301, "gpus": {"0": "2GiB"}},
    ]
    machine = machine_for(write_scenario(data))
    app = TopApp(machine.snapshot, interval=3600)

    async def body(pilot):
        await pilot.press("t")
        rows = table_rows(app)
        assert [(r["pid"], r["command"]) for r in rows] == [
            ("200", "(parent: holds no GPU memory)"),
            ("201", "├─ torchrun worker 0"),
            ("202", "└─ torchrun worker 1"),
            ("301", "python main.py"),
            ("302", "└─ python dataloader.py"),
        ]
        await pilot.press("t")
        assert [r["pid"] for r in table_rows(app)] == ["201", "202", "302", "301"]
    try:
        run_app(app, body)
    finally:
        machine.close()


@pytest.mark.slow
def test_detail_view_shows_the_whole_process(sim_env):
    app, machine = demo_app()
    command = next(p["command"] for p in scenario_data("demo")["processes"] if p["pid"] == 41234)

    async def body(pilot):
        await pilot.press("s", "s")  # sort by pid: 29044, 38817, 41234 x4, ...
        await pilot.press("home", "down", "down", "enter")  # the cursor followed its row: go to the top
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen) and app.screen.pid == 41234
        text = app.screen.query_one("#detail").content.plain
        assert command in text  # in full, not clipped as in the table
        assert "user bob (uid 1002)" in text and "age 5h12m" in text
        for gpu in (0, 1, 2, 3):
            assert f"GPU {gpu}" in text
        await app.refresh_data()  # a refresh while it is open keeps it current
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailScreen)
    try:
        run_app(app, body)
    finally:
        machine.close()


@pytest.mark.slow
def test_help_and_readonly_kill(sim_env):
    app, machine = demo_app()

    async def body(pilot):
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("k")
        await pilot.pause()
        assert any("read-only" in str(n.message) for n in app._notifications)
    try:
        run_app(app, body)
    finally:
        machine.close()


@pytest.mark.slow
def test_history_and_growth_alert_on_the_scenario_clock(sim_env):
    """The demo's evaluation job on GPU 7 grows from 1 to 14 GiB between t=20 and t=30."""
    machine = machine_for("demo")

    at = scenario_clock(machine)

    app = TopApp(lambda: at(0), interval=3600)

    async def body(pilot):
        for t in range(1, 26):
            app.apply(at(t))
        await pilot.pause()
        growing = [a for a in app.alerts if a.kind == "growing"]
        assert [a.gpu for a in growing] == [7]
        assert "full in ~" in growing[0].message and "(estimate)" in growing[0].message
        line7 = next(x for x in gpus_text(app).splitlines() if x.startswith(" 7 "))
        assert "util" in line7
        history_line = gpus_text(app).splitlines()[gpus_text(app).splitlines().index(line7) + 1]
        assert len(set(history_line.split("util")[0].strip().removeprefix("mem").strip())) > 1  # it moved
        for t in range(26, 70):
            app.apply(at(t))
        assert not [a for a in app.alerts if a.kind == "growing"]  # flat again since t=30
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_a_gpu_lost_mid_run_shows_as_lost_and_the_view_goes_on(sim_env):
    app, machine = demo_app()

    async def body(pilot):
        assert "LOST" not in gpus_text(app)
        machine.backend.sim.scenario.gpus[3]["lost"] = True
        await app.refresh_data()
        await pilot.pause()
        lines = gpus_text(app).splitlines()
        assert any(x.startswith(" 3 LOST") for x in lines)
        assert any(x.startswith(" 4 ") and "18.0/80.0GiB" in x for x in lines)
        assert "GPU 3 lost" in "\n".join(a.message for a in app.alerts)
        assert ("41234", "3") not in {(r["pid"], r["gpu"]) for r in table_rows(app)}
        assert app.refreshes == 2
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_a_failing_refresh_keeps_the_last_data(sim_env):
    machine = machine_for("demo")
    calls = {"n": 0}

    def collect():
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("driver went away")
        return machine.snapshot()

    app = TopApp(collect, interval=3600)

    async def body(pilot):
        await app.refresh_data()
        await pilot.pause()
        assert "refresh failed" in app.query_one("#banner").content.plain
        assert "driver went away" in app.query_one("#banner").content.plain
        assert len(table_rows(app)) == 9
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_fits_80x24(sim_env):
    app, machine = demo_app()

    async def body(pilot):
        lines = gpus_text(app).splitlines()
        assert len(lines) == 8  # one line per GPU on a small terminal
        assert all(len(x) <= 78 for x in lines)
        for i in range(8):
            assert lines[i].startswith(f"{i:>2} ")
        assert "70.6/80.0GiB" in lines[0]
        table = app.query_one("#procs")
        # The process's own SM% stays at 80 columns (its GPU's UTIL, which misleads beside one process, goes)
        assert [str(c.key.value) for c in table.ordered_columns] == ["gpu", "pid", "user", "memory", "sm", "command"]
        assert table.row_count == 9
        # The table still gets rows on screen under the panels and alerts.
        assert table.size.height >= 5
    try:
        run_app(app, body, size=(80, 24))
    finally:
        machine.close()


def test_no_color_is_honoured(sim_env, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app, machine = demo_app()
    assert app.no_color
    machine.close()


def test_only_some_gpus_and_idle_alert_threshold(sim_env):
    machine = machine_for("demo")
    app = TopApp(machine.snapshot, interval=3600, gpus=[4, 5], thresholds=Thresholds(idle_after=0))

    async def body(pilot):
        lines = gpus_text(app).splitlines()
        assert [x[:3] for x in lines if x[:2].strip().isdigit()] == [" 4 ", " 5 "]
        assert {r["gpu"] for r in table_rows(app)} == {"4", "5"}
        idle = [a for a in app.alerts if a.kind == "idle_holder"]
        assert [a.pid for a in idle] == [38817]
    try:
        run_app(app, body)
    finally:
        machine.close()


@pytest.mark.slow
def test_many_gpus_and_processes(sim_env, tmp_path):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _machine import scenario

    path = tmp_path / "big.json"
    path.write_text(json.dumps(scenario(list(range(10_000, 10_500)), real=False)))
    machine = machine_for(path)
    app = TopApp(machine.snapshot, interval=3600)

    async def body(pilot):
        table = app.query_one("#procs")
        assert table.row_count == 550  # every 10th process is on two GPUs
        await app.refresh_data()
        await pilot.press("s", "end")
        assert app.refreshes == 2
    try:
        run_app(app, body)
    finally:
        machine.close()


@pytest.mark.slow
def test_quitting_does_not_wait_for_a_snapshot_stuck_in_the_driver():
    """A refresh stuck in a slow NVML call (it cannot be interrupted) must not keep `q` from
    quitting: the view leaves it behind. With asyncio.to_thread, leaving the app would wait for
    the stuck call (here up to 60 s) before returning."""
    import threading

    machine = machine_for("demo")
    first = machine.snapshot()
    release = threading.Event()
    state = {"calls": 0, "finished": False}

    def collect():
        state["calls"] += 1
        if state["calls"] > 1:  # every refresh after the first is stuck
            release.wait(60)
            state["finished"] = True
        return first

    app = TopApp(collect, interval=3600)

    async def body(pilot):
        asyncio.get_running_loop().create_task(app.refresh_data())
        await pilot.pause(0.2)
        assert state["calls"] == 2 and not state["finished"]
        await pilot.press("q")

    try:
        run_app(app, body)
        assert not state["finished"]  # the app and its loop are gone; the stuck call is not done
    finally:
        release.set()
        machine.close()


def test_the_table_draws_what_changed(sim_env):
    """Cells are rendered once per text (ProcTable): a refresh that changes a cell must draw the
    new text, and a re-sort must draw the rows in their new places."""
    machine = machine_for("demo")

    def at(t: float):
        machine.backend.sim._fixed_t = t
        return machine.snapshot()

    app = TopApp(lambda: at(20), interval=3600)

    def drawn() -> list[str]:
        table = app.query_one("#procs")
        return [table.render_line(y).text for y in range(table.size.height)]

    def erin(lines: list[str]) -> str:  # her evaluation job, started at t=20
        return next(line for line in lines if " 61905 " in line)

    async def body(pilot):
        before = {r["pid"]: r for r in table_rows(app)}["61905"]["memory"]
        assert before in erin(drawn())
        app.apply(at(30))  # erin's evaluation job grew from ~1 to 14 GiB
        await pilot.pause()
        after = {r["pid"]: r for r in table_rows(app)}["61905"]["memory"]
        assert after != before
        assert after in erin(drawn()) and before not in erin(drawn())
        order = [r["pid"] for r in table_rows(app)]
        app.action_reverse()
        await pilot.pause()
        pids = [line.split()[1] for line in drawn()[1:] if line.strip()]
        assert pids == order[::-1][: len(pids)] and len(pids) > 3
        # A click lands on the row drawn there, also on cells whose text other rows show too
        # (the row index is carried in the rendered cell); not the cursor's row (the cursor followed
        # the first process to the end): a click on it selects it (the detail screen)
        flags = drawn()[0].index("FLAGS")
        for y in (1, 2, len(pids)):
            await pilot.click("#procs", offset=(flags, y))
            assert app.selected_row().proc.pid == int(pids[y - 1])
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_cells_are_stored_as_text_and_drawn_by_column(sim_env):
    """The table holds plain strings (a Text per cell of every row held MiBs); the drawn cells
    keep their column's look: numbers right-justified, commands literal (never markup), flags in
    the palette's flag colour."""
    app, machine = demo_app()

    async def body(pilot):
        table = app.query_one("#procs")
        assert all(isinstance(cell, str) for i in range(table.row_count) for cell in table.get_row_at(i))
        header = table.render_line(0).text
        memory_end = header.index("MEMORY") + len("MEMORY")  # the header is right-justified too
        drawn = {}
        for y in range(1, table.size.height):
            strip = table.render_line(y)
            if strip.text.strip():
                drawn[strip.text.split()[1]] = strip
        rows = {r["pid"]: r for r in table_rows(app)}
        assert len(drawn) > 3
        for pid, strip in drawn.items():
            assert strip.text[:memory_end].endswith(" " + rows[pid]["memory"])
        zombie = drawn["29044"]
        assert "[python] <defunct>" in zombie.text
        flags = rows["29044"]["flags"]
        assert flags != "-"
        colours = {seg.style.color.name for seg in zombie
                   if seg.text.strip() == flags and seg.style and seg.style.color}
        assert colours == {app.look.palette.flag}
    try:
        run_app(app, body)
    finally:
        machine.close()


def test_the_view_keeps_the_trend_window_of_each_gpu_not_fifteen_minutes(sim_env):
    """Alerts read each GPU's samples of the last trend window only (growth): the view keeps
    about twice that many (not 15 minutes' worth, 1.6 MiB at 1 s on 8 GPUs), and a GPU whose
    memory grows is still flagged."""
    machine = machine_for("demo")

    at = scenario_clock(machine)

    app = TopApp(lambda: at(0), interval=1.0)

    async def body(pilot):
        app.paused = True  # only the samples given here
        for t in range(1, 30):  # erin's evaluation job grows from t=20 (GPU 7)
            app.apply(at(t))
        assert any(a.kind == "growing" and a.gpu == 7 for a in app.alerts), app.alerts
        for t in range(30, 400):
            app.apply(at(t))
        kept = {len(samples) for samples in app.history.gpus.values()}
        window = app.thresholds.trend_window
        assert window <= min(kept) and max(kept) <= 2 * window + 10, kept
    try:
        run_app(app, body)
    finally:
        machine.close()


@pytest.mark.slow
def test_the_view_imports_its_screens_only_when_one_opens():
    # The help, alerts and detail screens (and what the detail reads: environments, CUDA's and
    # ROCm's visible devices) stay resident once imported: ~0.3 MiB most sessions never use.
    code = ("import sys, vramkit.tui.app; "
            "print(*(m in sys.modules for m in ('vramkit.tui.screens', 'vramkit.process_view')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]
