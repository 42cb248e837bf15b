"""`vram top`: Ctrl-C quits as it stops every other long-running command (not a toast), from the
table and from the prompt; --user starts the table filtered to those users (issue 31, items 6, 15)."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import subprocess
import sys
import uuid

import pytest
from helpers import clean_env, scenario_data, wait_for

from vramkit.machine import open_machine
from vramkit.tui.app import TopApp
from vramkit.tui.rows import View


@pytest.fixture
def sim_env(monkeypatch):
    for key, value in clean_env().items():
        monkeypatch.setenv(key, value)


def _exits_on_ctrl_c(prompt: bool) -> bool:
    machine = open_machine("demo")
    app = TopApp(machine.snapshot, interval=3600)
    quit_ = {}

    async def main():
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause()
            if prompt:
                await pilot.press("slash")
                await pilot.pause()
            await pilot.press("ctrl+c")
            await pilot.pause()
            quit_["toasts"] = [n.message for n in app._notifications]
            quit_["running"] = app.is_running and not app._exit
    try:
        asyncio.run(main())
    finally:
        machine.close()
    assert not quit_["toasts"], quit_["toasts"]
    return not quit_["running"]


@pytest.mark.parametrize("prompt", [False, True])
def test_ctrl_c_quits(sim_env, prompt):
    assert _exits_on_ctrl_c(prompt)


def test_user_starts_the_table_filtered(sim_env):
    from vramkit.cli.main import _parse

    args = _parse(["top", "--simulate", "demo", "--user", "alice,bob"])
    from vramkit.cli.top import _users

    assert _users(args.user) == {"alice", "bob"}
    assert _users(_parse(["top", "--user"]).user) and _users(None) == set()
    machine = open_machine("demo")
    app = TopApp(machine.snapshot, interval=3600, view=View(users=_users(args.user)))
    shown = {}

    async def main():
        async with app.run_test(size=(200, 60)) as pilot:
            await pilot.pause()
            table = app.query_one("#procs")
            keys = [str(c.key.value) for c in table.ordered_columns]
            rows = [dict(zip(keys, (str(cell) for cell in table.get_row_at(i)))) for i in range(table.row_count)]
            shown["users"] = {r["user"] for r in rows}
            shown["line"] = app.query_one("#viewline").content.plain
    try:
        asyncio.run(main())
    finally:
        machine.close()
    expected = {p["user"] for p in scenario_data("demo")["processes"] if p.get("user") in ("alice", "bob")}
    assert shown["users"] == expected and "user alice,bob" in shown["line"]


def test_top_user_flag_is_accepted_by_the_command_line():
    from helpers import run_vram

    result = run_vram("top", "--user", "alice", "--simulate", "demo")  # not a terminal: refused after parsing
    assert result.rc == 1 and "needs a terminal" in result.err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_ctrl_c_quits_in_a_real_terminal(tmp_path):
    name = f"vramtop-{uuid.uuid4().hex[:8]}"
    env = clean_env(TMUX=None)
    env["TMUX_TMPDIR"] = str(tmp_path)
    rc_file = tmp_path / "rc"
    command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "vramkit", "top", "--simulate", "demo"))

    def tmux(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=20, env=env)
    try:
        assert tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "sh", "-c",
                    f"{command}; echo rc=$? > {shlex.quote(str(rc_file))}").returncode == 0
        screen = lambda: tmux("capture-pane", "-p", "-t", name).stdout  # noqa: E731
        assert wait_for(lambda: "GPU processes" in screen(), timeout=20), screen()
        tmux("send-keys", "-t", name, "C-c")
        assert wait_for(lambda: rc_file.exists() and rc_file.read_text().endswith("\n"), timeout=20), screen()
        assert rc_file.read_text().strip() == "rc=0"
    finally:
        tmux("kill-server")
