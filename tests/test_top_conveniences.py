"""`vram top`'s conveniences (issue 17 item 5), headless through Textual's pilot: filters, --ascii,
the light theme, colour thresholds, the host line, columns from the config, SIGINT through the
checked kill path, and the detail screen's own view of a real process's environment."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import subprocess
import sys
import threading

import pytest
from helpers import clean_env, cmdline, minimal_scenario, run_vram, vram_argv, wait_for

from vramkit.machine import open_machine
from vramkit.procs import HostLoad
from vramkit.tui.actions import KillActions
from vramkit.tui.app import TopApp
from vramkit.tui.look import LIGHT, Look
from vramkit.tui.rows import View
from vramkit.tui.screens import DetailScreen


def _scenario(tmp_path, extra: list[dict] | None = None) -> str:
    data = minimal_scenario()
    data["processes"][0].update(sm_util=37)  # GPU 0 runs at 50 %: the process's own 37 % is not its GPU's
    data["processes"].append({"pid": 103, "user": "cy", "command": "Xorg :0", "type": "graphics",
                              "gpus": {"1": "1GiB"}})
    data["processes"] += extra or []
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data))
    return str(path)


def _run(app: TopApp, body, size=(200, 50)) -> None:
    async def main():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await body(pilot)
    asyncio.run(main())


def _rows(app: TopApp) -> list[dict[str, str]]:
    table = app.query_one("#procs")
    keys = [str(c.key.value) for c in table.ordered_columns]
    return [dict(zip(keys, (str(cell) for cell in table.get_row_at(i)))) for i in range(table.row_count)]


def _app(path: str, **kw) -> tuple[TopApp, object]:
    machine = open_machine(path)
    return TopApp(machine.snapshot, interval=3600, **kw), machine


@pytest.mark.parametrize("view, pids", [
    (View(pids={102}), {"102"}),
    (View(kind="graphics"), {"103"}),
    (View(kind="compute"), {"101", "102"}),
    (View(visible={(0, None)}), {"101"}),
])
def test_the_command_line_filters(sim_env, tmp_path, view, pids):
    app, machine = _app(_scenario(tmp_path), view=view)

    async def body(pilot):
        assert {r["pid"] for r in _rows(app)} == pids
        await pilot.press("escape")  # clears the typed filters, not the command line's
        assert {r["pid"] for r in _rows(app)} == pids
        line = app.query_one("#viewline").content.plain
        assert f"{len(pids)} of 3 GPU processes" in line
    try:
        _run(app, body)
    finally:
        machine.close()


def test_the_process_own_utilization_columns_beside_its_gpus(sim_env, tmp_path):
    app, machine = _app(_scenario(tmp_path))

    async def body(pilot):
        row = next(r for r in _rows(app) if r["pid"] == "101")
        assert row["sm"] == "37%" and row["util"] == "50%"  # its own, and its GPU's
        headers = [c.label.plain for c in app.query_one("#procs").ordered_columns]
        assert headers[:10] == ["GPU", "PID", "USER", "MEMORY", "%GPU", "SM%", "BW%", "ENC", "DEC", "UTIL"]
    try:
        _run(app, body)
    finally:
        machine.close()


def test_columns_from_the_config(sim_env, tmp_path):
    app, machine = _app(_scenario(tmp_path), columns=("pid", "memory", "sm", "command"))

    async def body(pilot):
        assert [str(c.key.value) for c in app.query_one("#procs").ordered_columns] == ["pid", "memory", "sm",
                                                                                       "command"]
    try:
        _run(app, body)
    finally:
        machine.close()


def _drawn(app: TopApp) -> str:
    statics = "\n".join(app.query_one(s).content.plain for s in ("#banner", "#gpus", "#alerts", "#viewline"))
    table = app.query_one("#procs")
    cells = "\n".join(" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count))
    return statics + "\n" + cells + "\n" + " ".join(c.label.plain for c in table.ordered_columns)


def test_ascii_draws_no_unicode(sim_env):
    app, machine = _app("demo", look=Look(ascii=True), history_span=300)

    async def body(pilot):
        await pilot.press("t")  # the tree's branches too
        text = _drawn(app)
        assert text.isascii(), sorted({c for c in text if not c.isascii()})
        assert "#" in app.query_one("#gpus").content.plain  # the bars are still there, in ASCII
        await pilot.press("question_mark")
        await pilot.pause()
        assert "ascii" in app.screen.classes  # the pop-up's border is ASCII too
        assert app.screen.query_one("#help-text").render().plain.isascii()
    try:
        _run(app, body, size=(120, 40))
    finally:
        machine.close()
    plain, machine = _app("demo")

    async def unicode(pilot):
        assert not _drawn(plain).isascii()  # the check above can fail
    try:
        _run(plain, unicode, size=(120, 40))
    finally:
        machine.close()


def _memory_style(app: TopApp, gpu: int) -> str:
    text = app.query_one("#gpus").content
    line_start = text.plain.index(f"{gpu:>2} ")
    pair = text.plain.index("GiB", line_start)
    return next(str(s.style) for s in text.spans if s.start <= pair < s.end and "GiB" in text.plain[s.start:s.end])


def test_light_theme_and_colour_thresholds(sim_env, tmp_path):
    # GPU 0 of the minimal scenario: 10 of 80 GiB in use (12.5 %)
    app, machine = _app(_scenario(tmp_path), look=Look(LIGHT, memory_warn=5, memory_critical=10))

    async def body(pilot):
        assert app.theme == "textual-light"
        assert _memory_style(app, 0) == LIGHT.critical
    try:
        _run(app, body, size=(120, 40))
    finally:
        machine.close()
    app, machine = _app(_scenario(tmp_path))

    async def default(pilot):
        assert app.theme == "textual-dark"
        assert _memory_style(app, 0) == "green"  # below 70 %
    try:
        _run(app, default, size=(120, 40))
    finally:
        machine.close()


def test_the_host_line(sim_env, tmp_path):
    readings = iter([HostLoad(100, 1000, 4, 64 * 2**30, 48 * 2**30, 8 * 2**30, 6 * 2**30),
                     HostLoad(400, 1500, 4, 64 * 2**30, 32 * 2**30, 8 * 2**30, 6 * 2**30)])
    app, machine = _app(_scenario(tmp_path), read_host=lambda: next(readings))

    async def body(pilot):
        banner = app.query_one("#banner").content.plain
        assert "host CPU  N/A of 4" in banner and "RAM 16.0/64.0GiB" in banner and "swap 2.0/8.0GiB" in banner
        await app.refresh_data()
        banner = app.query_one("#banner").content.plain
        assert "host CPU  60% of 4" in banner and "RAM 32.0/64.0GiB" in banner  # 300 of 500 ticks busy
    try:
        _run(app, body, size=(120, 40))
    finally:
        machine.close()


@pytest.fixture
def told_gpu_1(children):
    proc = children.start(["sleep", "600"], env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "1"})
    assert wait_for(lambda: cmdline(proc.pid) == b"sleep\x00600\x00")
    return proc


def test_the_detail_screen_shows_what_the_process_was_told(sim_env, tmp_path, told_gpu_1):
    path = _scenario(tmp_path, [{"pid": told_gpu_1.pid, "source": "real", "gpus": {"0": "20GiB"}}])
    app, machine = _app(path)

    async def body(pilot):
        assert app.selected_key() == f"{told_gpu_1.pid}/0/"  # the largest: first
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        text = app.screen.query_one("#detail").render().plain
        assert "told     GPU 1 as cuda:0" in text and "holds    GPU 0" in text
        assert "MISMATCH told GPU 1, holds memory on GPU 0" in text
        assert "SM N/A" in text or "SM " in text  # its own utilization has a line
    try:
        _run(app, body, size=(120, 40))
    finally:
        machine.close()


def test_sigint_goes_through_the_checked_kill_path(sim_env, tmp_path):
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # only SIGINT ends it
            "print('ready', flush=True)\n"
            "try:\n    time.sleep(120)\nexcept KeyboardInterrupt:\n    sys.exit(0)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    threading.Thread(target=proc.wait, daemon=True).start()
    path = _scenario(tmp_path, [{"pid": proc.pid, "source": "real", "gpus": {"0": "20GiB"}}])
    machine = open_machine(path)
    audit = tmp_path / "audit.log"
    app = TopApp(machine.snapshot, interval=3600, readonly=False,
                 actions=KillActions(machine, audit_path=str(audit), timeout=5))

    async def body(pilot):
        await pilot.press("k")
        for _ in range(300):
            if getattr(app.screen, "state", None) == "confirm":
                break
            await pilot.pause(0.05)
        assert "i: SIGINT" in app.screen.query_one("#kill-text").content.plain
        await pilot.press("i")
        for _ in range(300):
            if app.screen.state == "done":
                break
            await pilot.pause(0.05)
        text = app.screen.query_one("#kill-text").content.plain
        assert f"pid {proc.pid} exited" in text and "SIGINT" in text
    try:
        _run(app, body, size=(120, 40))
    finally:
        machine.close()
        if proc.poll() is None:
            proc.kill()
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(r.get("signal") == "SIGINT" and r["target"]["pid"] == proc.pid for r in records), records
    with pytest.raises(ValueError, match="SIGTERM or SIGINT"):
        KillActions(machine).execute(None, sig=signal.SIGHUP)  # type: ignore[arg-type]


@pytest.mark.parametrize("args, needle", [(("--pid", "12x"), "--pid: not a process id"),
                                          (("--theme", "blue"), "--theme"),
                                          (("--compute", "--graphics"), "not allowed with")])
def test_bad_flags_are_one_line_and_exit_2(args, needle):
    result = run_vram("top", "--simulate", "demo", *args)
    assert result.rc == 2 and needle in result.err and result.err.count("\n") == 1


def test_the_detail_screen_reads_its_gpus_health(sim_env):
    machine = open_machine("unhealthy")
    app = TopApp(machine.snapshot, interval=3600, read_health=machine.read_health, view=View(pids={91001, 91002}))
    calls = []

    def read_health(snap):
        calls.append(sorted(g.index for g in snap.gpus))
        machine.read_health(snap, settle=0)
    app.read_health = read_health

    async def body(pilot):
        keys = [r["pid"] for r in _rows(app)]
        await pilot.press(*["down"] * keys.index("91002"), "enter")  # judy's eval on GPU 2: ECC, a pending remap
        for _ in range(100):
            if isinstance(app.screen, DetailScreen) and "health" in app.screen.query_one("#detail").render().plain:
                break
            await pilot.pause(0.05)
        text = app.screen.query_one("#detail").render().plain
        assert "GPU 2 health" in text and "uncorrected 2 (life 3)" in text and "PENDING" in text
        assert calls == [[2]]  # only its GPU, only once the screen is open
        assert app.snap.gpus[2].health is None  # read on a copy: the collector's snapshot is not changed
    try:
        _run(app, body, size=(120, 40))
    finally:
        machine.close()


@pytest.mark.parametrize("env, units", [
    ({}, None),  # unset: every GPU
    ({"CUDA_VISIBLE_DEVICES": "1"}, {(1, None)}),
    ({"CUDA_VISIBLE_DEVICES": "6,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, {(6, None), (0, None)}),
    ({"CUDA_VISIBLE_DEVICES": ""}, set()),
])
def test_only_visible_reads_vrams_own_environment_as_cuda_does(sim_env, monkeypatch, env, units):
    from vramkit.cli.top import _visible_units

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    machine = open_machine("demo")
    try:
        assert _visible_units(machine.snapshot()) == units
    finally:
        machine.close()


def test_only_visible_with_a_value_cuda_refuses_is_exit_2():
    master, slave = pty.openpty()  # a terminal: the value is read once the view would start
    try:
        proc = subprocess.run(vram_argv("top", "--simulate", "demo", "--only-visible"), stdin=slave, stdout=slave,
                              stderr=subprocess.PIPE, text=True, timeout=30, env=clean_env(CUDA_VISIBLE_DEVICES="0,0"))
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 2 and "--only-visible" in proc.stderr and "twice" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_bad_config_file_stops_vram_top_with_one_line(tmp_path):
    path = tmp_path / "xdg" / "vramkit" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text('[top]\ntheme = "neon"\n')
    result = run_vram("top", "--simulate", "demo", env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert result.rc == 2 and f"{path}: top.theme: must be one of dark, light" in result.err
    assert result.err.count("\n") == 1


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_a_gpu_whose_health_was_read_unhealthy_is_marked_on_its_panel(sim_env, size):
    machine = open_machine("unhealthy")
    app = TopApp(machine.snapshot, interval=3600, read_health=lambda snap: machine.read_health(snap, settle=0))

    async def body(pilot):
        gpus = app.query_one("#gpus").content.plain.splitlines()
        assert not any(line[2:3] == "!" for line in gpus)  # nothing is said before health was read
        keys = [r["pid"] for r in _rows(app)]
        await pilot.press(*["down"] * keys.index("91002"), "enter")  # judy's eval on GPU 2
        for _ in range(100):
            if app.health_flags:
                break
            await pilot.pause(0.05)
        await pilot.press("escape")
        await pilot.pause()
        panels = app.query_one("#gpus").content.plain.splitlines()
        assert [line[:3] for line in panels if line[:2].strip().isdigit()] == [" 0 ", " 1 ", " 2!", " 3 "]
        assert all(len(line) <= size[0] for line in panels)
        alerts = app.query_one("#alerts").content.plain
        assert "GPU 2 health: uncorrected ECC errors, row remap pending (read " in alerts
    try:
        _run(app, body, size=size)
    finally:
        machine.close()
