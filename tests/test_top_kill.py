"""The kill action of `vram top`: the same checked path as `vram kill`, on a real spawned process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading

import pytest
from helpers import minimal_scenario, proc_state

from vramkit.machine import open_machine
from vramkit.tui.actions import KillActions
from vramkit.tui.app import TopApp


@pytest.fixture
def sim_env(monkeypatch, tmp_path):
    for key in ("VRAM_SIMULATE", "VRAM_SIM_EPOCH", "NO_COLOR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no personal protected.conf


@pytest.fixture
def sleeper():
    """A real process that a kill can end; reaped by a thread so it does not linger as a zombie."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdin=subprocess.DEVNULL)
    threading.Thread(target=proc.wait, daemon=True).start()
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


async def until(pilot, predicate, timeout: float = 15.0) -> bool:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return True
        await pilot.pause(0.05)
    return predicate()


def make_app(tmp_path, sleeper_pid: int | None):
    data = minimal_scenario()
    if sleeper_pid is not None:
        data["processes"].append({"pid": sleeper_pid, "source": "real", "gpus": {"0": "12GiB"}})
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data))
    machine = open_machine(str(path))
    audit = tmp_path / "audit.log"
    app = TopApp(machine.snapshot, interval=3600, readonly=False,
                 actions=KillActions(machine, audit_path=str(audit), timeout=5))
    return app, machine, audit


def kill_text(app) -> str:
    return app.screen.query_one("#kill-text").content.plain


@pytest.mark.slow
def test_kill_a_real_process_after_confirming(sim_env, tmp_path, sleeper):
    app, machine, audit = make_app(tmp_path, sleeper.pid)

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            assert app.selected_key() == f"{sleeper.pid}/0/"  # 12 GiB: the largest, first row
            await pilot.press("k")
            assert await until(pilot, lambda: getattr(app.screen, "state", None) == "confirm")
            text = kill_text(app)
            assert f"pid {sleeper.pid}" in text and "time.sleep(120)" in text and "GPU 0: 12.0GiB" in text
            assert "Send SIGTERM" in text
            await pilot.press("y")
            assert await until(pilot, lambda: app.screen.state == "done")
            text = kill_text(app)
            assert f"pid {sleeper.pid} exited" in text and "SIGTERM" in text
            assert "GPU 0: 12.0GiB freed" in text
            assert str(audit) in text
            await pilot.press("escape")
            await pilot.pause()
            table = app.query_one("#procs")
            pids = [table.get_row_at(i)[1] for i in range(table.row_count)]
            assert pids and str(sleeper.pid) not in pids
    try:
        asyncio.run(main())
    finally:
        machine.close()
    assert sleeper.wait(timeout=5) == -15
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(e["event"], e.get("signal"), e.get("result")) for e in events] == [
        ("signal", "SIGTERM", "sending"), ("outcome", "SIGTERM", "exited")]
    assert all(e["target"]["pid"] == sleeper.pid and e["via"] == "vram top" for e in events)


@pytest.mark.slow
def test_answering_no_signals_nothing(sim_env, tmp_path, sleeper):
    app, machine, audit = make_app(tmp_path, sleeper.pid)

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("k")
            assert await until(pilot, lambda: getattr(app.screen, "state", None) == "confirm")
            await pilot.press("n")
            await pilot.pause()
            assert not hasattr(app.screen, "state")
    try:
        asyncio.run(main())
    finally:
        machine.close()
    assert proc_state(sleeper.pid) in ("S", "R")
    assert not audit.exists() or audit.read_text() == ""


@pytest.mark.slow
def test_a_refusal_is_shown_with_its_reason(sim_env, tmp_path):
    app, machine, audit = make_app(tmp_path, None)  # only synthetic processes: nothing real to signal

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("k")
            assert await until(pilot, lambda: getattr(app.screen, "state", None) == "refused")
            text = kill_text(app)
            assert "refused (ownership): it belongs to ann" in text and "nothing was signalled" in text
            await pilot.press("y")  # no confirming a refusal
            await pilot.pause()
            assert app.screen.state == "refused"
            await pilot.press("escape")
    try:
        asyncio.run(main())
    finally:
        machine.close()


def test_the_kill_path_is_imported_at_the_first_kill_not_with_the_view():
    """vramkit.killing and the audit log stay out of a view that never kills (resident memory)."""
    code = ("import sys\n"
            "from vramkit.tui.app import TopApp\n"
            "from vramkit.tui.actions import KillActions\n"
            "KillActions(None)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('vramkit.killing', 'vramkit.audit'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout
