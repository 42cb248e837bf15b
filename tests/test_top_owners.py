"""`vram top` catching up with the rest of vram (issues 30 and 31): the OWNER column and the
--container/--pod/--slurm-job filters `vram ps` has, rows inside a container whose NVML pid is a
host pid no process here could be told to be (never shown or signalled as a pid here), the
per-user total under the GPU panels, and the fan and video engines in the GPU panels.

Expected values are the scenarios' own facts (workloads.json names its container, pod and job)."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import uuid

import pytest
from helpers import clean_env, minimal_scenario, wait_for

from vramkit.machine import open_machine
from vramkit.tui.actions import KillActions
from vramkit.tui.app import TopApp
from vramkit.tui.rows import View
from vramkit.tui.screens import DetailScreen

# workloads.json: pid -> the owner `vram ps` shows (its docker container's name, the pod the
# kubelet names, the Slurm job and step of its cgroup); 7001 is in none
OWNERS = {4101: "docker alice-dev", 5230: "pod nlp/train-7f9c", 6120: "slurm 48211.0"}


def run_app(app: TopApp, body, size=(120, 40)):
    async def main():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await body(pilot)
    asyncio.run(main())


def table_rows(app: TopApp) -> list[dict[str, str]]:
    table = app.query_one("#procs")
    keys = [str(c.key.value) for c in table.ordered_columns]
    return [dict(zip(keys, map(str, table.get_row_at(i)))) for i in range(table.row_count)]


def text_of(app: TopApp, selector: str) -> str:
    return app.query_one(selector).content.plain


@pytest.mark.parametrize("width", [120, 200])
def test_owner_column_shows_each_process_workload(sim_env, write_scenario, width):
    machine = open_machine("workloads")
    app = TopApp(machine.snapshot, interval=3600, read_host=None)

    async def body(pilot):
        rows = table_rows(app)
        assert len(rows) == 4
        for row in rows:
            assert row["owner"] == OWNERS.get(int(row["pid"]), "-"), row
        header = [str(c.label) for c in app.query_one("#procs").ordered_columns]
        assert header.index("OWNER") == header.index("COMMAND") - 1
        # the detail view says it in words
        app.query_one("#procs").move_cursor(row=next(i for i, r in enumerate(rows) if r["pid"] == "6120"))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert "Slurm job 48211 step 0" in app.screen.query_one("#detail").content.plain
    run_app(app, body, size=(width, 40))
    # none of the processes has an owner: no column for it, its room the other columns'
    plain = TopApp(open_machine(str(write_scenario(minimal_scenario()))).snapshot, interval=3600, read_host=None)

    async def body_plain(pilot):
        assert "owner" not in table_rows(plain)[0]
    run_app(plain, body_plain, size=(width, 40))


@pytest.mark.parametrize(("filters", "pids"), [
    ({"container": "alice-dev"}, [4101]),
    ({"container": "3f9a1c2b"}, [4101]),  # an id prefix
    ({"pod": "nlp/train-7f9c"}, [5230]),
    ({"pod": "train-7f9c"}, [5230]),
    ({"slurm_job": "48211"}, [6120]),
    ({"slurm_job": "48211.0"}, [6120]),
    ({"slurm_job": "48211.1"}, []),
    ({"container": "alice-dev", "pod": "train-7f9c"}, []),  # all of them, as ps takes them
])
def test_workload_filters_as_ps_takes_them(sim_env, filters, pids):
    app = TopApp(open_machine("workloads").snapshot, interval=3600, read_host=None, view=View(workload=filters))

    async def body(pilot):
        assert [int(r["pid"]) for r in table_rows(app)] == pids
        line = text_of(app, "#viewline")
        assert f"{len(pids)} of 4 GPU processes" in line
        for key, value in filters.items():
            assert f"{key.replace('_', ' ')} {value}" in line
        await pilot.press("escape")  # a command-line filter: Esc does not clear it
        assert [int(r["pid"]) for r in table_rows(app)] == pids
    run_app(app, body)


# ---------------------------------------------------------------- inside a container

def namespaced(write_scenario, outside: int):
    """A scenario seen from another PID namespace than its pids' (the scenario names one that is
    not ours): NVML lists host pid `outside`, a number this /proc gives to a process of its own."""
    data = minimal_scenario()
    data["pid_namespace"] = "pid:[4026530000]" if os.readlink("/proc/self/ns/pid") != "pid:[4026530000]" else (
        "pid:[4026530001]")
    data["processes"].append({"pid": outside, "user": "bob", "command": "python other.py", "gpus": {"1": "3GiB"}})
    return write_scenario(data)


def test_a_host_pid_is_never_shown_or_signalled_as_a_pid_here(sim_env, write_scenario, tmp_path):
    outside = os.getpid()  # this test's own pid here: a mix-up would point at a real process
    machine = open_machine(str(namespaced(write_scenario, outside)))
    assert all(p.pid_here is None for p in machine.snapshot().processes)  # what the snapshot says
    audit = tmp_path / "audit.log"
    app = TopApp(machine.snapshot, interval=3600, readonly=False, read_host=None,
                 actions=KillActions(machine, audit_path=str(audit), timeout=5))

    async def body(pilot):
        rows = table_rows(app)
        assert [r["pid"] for r in rows] == ["-", "-", "-"], rows
        assert any(f"host pid {outside}," in r["command"] for r in rows)
        assert all(str(outside) not in r["pid"] for r in rows)
        # the row of host pid `outside`: kill refuses in one line, nothing opened, nothing signalled
        table = app.query_one("#procs")
        index = next(i for i, r in enumerate(rows) if f"host pid {outside}," in r["command"])
        table.move_cursor(row=index)
        await pilot.press("k")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen) and app.screen is app.screen_stack[0]
        [note] = [n.message for n in app._notifications]
        assert note.startswith(f"not signalled: host pid {outside}, of another PID namespace") and "\n" not in note
        assert "vram kill refuses it too" in note
        assert not audit.exists()
        await pilot.press("enter")  # no detail view of this /proc's process of that number
        await pilot.pause()
        assert app.screen is app.screen_stack[0]
        # the number is another namespace's: the tree does not take it for ours either
        await pilot.press("t")
        assert sorted(r["pid"] for r in table_rows(app)) == ["-", "-", "-"]
    run_app(app, body)


def test_pid_filter_does_not_take_a_host_pid_for_ours(sim_env, write_scenario):
    outside = os.getpid()
    machine = open_machine(str(namespaced(write_scenario, outside)))
    app = TopApp(machine.snapshot, interval=3600, read_host=None, view=View(pids={outside}))

    async def body(pilot):
        assert table_rows(app) == []
    run_app(app, body)


# ---------------------------------------------------------------- per-user total, fan, video

def test_users_line_sums_each_user_on_the_gpus_shown(sim_env, write_scenario):
    data = minimal_scenario()  # ann 10 GiB on GPU 0, ben 5 GiB on GPU 1
    data["processes"] += [
        {"pid": 103, "user": "ann", "command": "python c.py", "gpus": {"1": "20GiB"}},
        {"pid": 104, "user": "carol", "command": "python d.py", "gpus": {"0": "1GiB", "1": "2GiB"}},
    ]
    path = write_scenario(data)
    every = TopApp(open_machine(str(path)).snapshot, interval=3600, read_host=None)

    async def body(pilot):
        assert text_of(every, "#users") == "users ann 30.0GiB  ben 5.0GiB  carol 3.0GiB"
    run_app(every, body)
    one = TopApp(open_machine(str(path)).snapshot, interval=3600, read_host=None, gpus=[1])

    async def body_one(pilot):
        assert text_of(one, "#users") == "users ann 20.0GiB  ben 5.0GiB  carol 2.0GiB"
    run_app(one, body_one)


def test_users_line_says_how_many_more_at_80_columns(sim_env, write_scenario):
    data = minimal_scenario()
    data["processes"] = [{"pid": 200 + i, "user": f"user{i:02d}", "command": "python x.py",
                          "gpus": {"0": f"{i + 1}GiB"}} for i in range(12)]
    app = TopApp(open_machine(str(write_scenario(data))).snapshot, interval=3600, read_host=None)

    async def body(pilot):
        line = text_of(app, "#users")
        assert line.startswith("users user11 12.0GiB  user10 11.0GiB  user09 10.0GiB")
        shown = line.count("GiB")
        assert line.endswith(f"  +{12 - shown} more") and 3 <= shown < 12
        assert len(line) <= 78
    run_app(app, body, size=(80, 24))


def test_gpu_panels_show_fan_and_busy_video_engines_where_status_does(sim_env, write_scenario):
    data = minimal_scenario()
    data["gpus"][0].update(fan=45, encoder_utilization=30, decoder_utilization=0)
    data["gpus"][1].update(fan=38, encoder_utilization=0, decoder_utilization=0)
    path = write_scenario(data)
    wide = TopApp(open_machine(str(path)).snapshot, interval=3600, read_host=None)

    async def body(pilot):
        first, _, second, _ = text_of(wide, "#gpus").splitlines()
        assert first.endswith("fan  45%  enc  30% dec   0%")
        assert second.rstrip().endswith("fan  38%") and "enc" not in second
        assert len(first) == len(second.rstrip()) + len("  enc  30% dec   0%")  # the same columns
    run_app(wide, body, size=(120, 40))
    narrow = TopApp(open_machine(str(path)).snapshot, interval=3600, read_host=None)

    async def body_narrow(pilot):  # vram status shows neither below 80 columns of GPU line
        assert "fan" not in text_of(narrow, "#gpus")
    run_app(narrow, body_narrow, size=(80, 24))


# ---------------------------------------------------------------- the command, in a real terminal

@pytest.mark.slow
@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v tmux"], capture_output=True).returncode != 0,
                    reason="tmux is not installed")
@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_top_pod_filter_owner_and_users_in_a_real_terminal(tmp_path, size):
    name = f"vramtop-{uuid.uuid4().hex[:8]}"
    env = clean_env(TMUX=None, TMUX_TMPDIR=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    rc_file = tmp_path / "rc"
    command = shlex.join([sys.executable, "-m", "vramkit", "top", "--simulate", "workloads", "--pod",
                          "nlp/train-7f9c", "--readonly"])
    script = f"{command}; echo rc=$? > {shlex.quote(str(rc_file))}"

    def tmux(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=20, env=env)

    assert tmux("new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]), "sh", "-c",
                script).returncode == 0
    try:
        def screen() -> str:
            return tmux("capture-pane", "-p", "-t", name).stdout
        assert wait_for(lambda: "GPU processes" in screen() and "users " in screen(), timeout=20), screen()
        text = screen()
        lines = text.splitlines()
        assert all(len(line) <= size[0] for line in lines)
        assert "1 of 4 GPU processes" in text and "pod nlp/train-7f9c" in text
        assert any(line.strip() == "users root 60.0GiB  carol 40.0GiB  alice 31.0GiB  dave 10.0GiB"
                   for line in lines), text
        header = next(line for line in lines if "PID" in line and "USER" in line)
        assert ("OWNER" in header) == (size[0] >= 100), header  # given up last, after ELAPSED
        rows = [line for line in lines if line.split()[:2] == ["1", "5230"]]
        assert len(rows) == 1 and not any(" 4101 " in line for line in lines)
        tmux("send-keys", "-t", name, "q")
        assert wait_for(lambda: rc_file.exists() and rc_file.read_text().endswith("\n"), timeout=20), screen()
        assert rc_file.read_text().strip() == "rc=0"
    finally:
        tmux("kill-server")
