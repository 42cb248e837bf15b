"""procs.ProcessTable's readers that need only who each process is (usage=False: the recorder, and
the live view's rows far from the screen), which hand back a kept process while its pidfd says it
has not ended, against a neighbour's process that takes a pid the moment the process last read
under it exits (it must be read as the newcomer it is, never as the process that held the pid),
an environment that allows few open files, a process whose main thread exits while others run,
and processes that come onto the live view's screen between readings."""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import clean_env, minimal_scenario, proc_state, vram_argv, wait_for

import vramkit

# Run as pid 1 of a new PID namespace (in a user namespace of its own: no root needed) with its own
# /proc: there the next pid can be chosen (/proc/sys/kernel/ns_last_pid), so a pid is taken again at
# once, as on a busy machine it is by chance.
REUSED_PID = textwrap.dedent("""
    import json, subprocess, sys, time
    from vramkit import procs

    PID = 300

    def started_at(argv, ready):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(PID - 1))
        child = subprocess.Popen(argv)
        assert child.pid == PID, child.pid
        deadline = time.monotonic() + 10
        while open(f"/proc/{PID}/cmdline", "rb").read() != ready:  # exec'd: its command line is read and kept
            assert time.monotonic() < deadline, f"pid {PID} never ran {ready!r}"
            time.sleep(0.01)
        return child

    def who(host):
        return host if isinstance(host, str) else [host.uid, host.command, host.start_ticks]

    table = procs.ProcessTable()
    old = started_at(["sleep", "600"], b"sleep\\x00600\\x00")
    first = table.read(PID, usage=False)
    table.forget_all_but({PID})  # a reading ends
    kept = table.read(PID, usage=False)
    table.forget_all_but({PID})
    old.kill()
    old.wait()
    time.sleep(0.05)  # a later clock tick: the newcomer's start time differs, as it does but by chance
    new = started_at(["sleep", "700"], b"sleep\\x00700\\x00")
    after = table.read(PID, usage=False)
    table.forget_all_but({PID})
    again = table.read(PID, usage=False)
    print(json.dumps({"first": who(first), "kept": kept is first, "after": who(after), "again": who(again)}))
    new.kill()
    new.wait()
    table.close()
""")


def test_a_pid_taken_again_at_once_is_read_as_the_newcomer():
    if not shutil.which("unshare"):
        pytest.skip("needs unshare(1)")
    out = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", sys.executable,
                          "-c", REUSED_PID], capture_output=True, text=True, env=clean_env(), timeout=60)
    if out.returncode != 0 and "unshare failed" in out.stderr:
        pytest.skip(f"no user and PID namespaces here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["first"][1] == "sleep 600"
    assert seen["kept"]  # between its checks the old process was handed back unread: the path under attack
    assert seen["after"][1] == "sleep 700", seen  # not the old process's "sleep 600"
    assert seen["after"][2] != seen["first"][2]
    assert seen["again"] == seen["after"]


MAIN_THREAD_EXITS = textwrap.dedent("""
    import ctypes, sys, threading, time
    threading.Thread(target=time.sleep, args=(600,)).start()
    print("ready", flush=True)
    sys.stdin.readline()
    ctypes.CDLL(None).pthread_exit(None)  # end the main thread only: 'Z' in /proc/PID/stat
""")


def test_a_process_whose_main_thread_exits_is_said_defunct_at_its_check(children, write_scenario, monkeypatch):
    """Its pidfd does not poll readable while other threads run, so a reading that does not read
    its usage sees it as it was until its next check (within WORKLOAD_RECHECK_S), and from then
    on as the defunct leader it is ('Z': the idle rule leaves it out), as a full reading does."""
    from vramkit.procs import table as table_module

    child = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_EXITS], stdout=subprocess.PIPE,
                             stdin=subprocess.PIPE)
    children.procs.append(child)
    assert child.stdout.readline().strip() == b"ready"
    data = minimal_scenario()
    data["processes"].append({"pid": child.pid, "source": "real", "gpus": {"1": "3GiB"}})
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    later = [0.0]
    monkeypatch.setattr(table_module, "monotonic", lambda: time.monotonic() + later[0])
    machine = vramkit.open_machine(str(write_scenario(data)))
    try:
        def row(usage_pids):
            return next(p for p in machine.snapshot(usage_pids=usage_pids).processes if p.pid == child.pid)
        assert not row(None).zombie and not row(set()).zombie
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert wait_for(lambda: proc_state(child.pid) == "Z")
        later[0] = table_module.WORKLOAD_RECHECK_S  # its check
        lean = row(set())
        assert lean.zombie and not lean.idle and lean.state == "zombie"
        assert row(set()).zombie  # and it stays so: a zombie is not kept, each reading reads it
        full = row(None)
        assert full.zombie and not full.idle
    finally:
        machine.close()


@pytest.mark.slow
def test_the_recorder_names_every_process_where_few_descriptors_are_allowed(children, write_scenario, tmp_path):
    """RLIMIT_NOFILE 64 (a container's, a hardened service's): the recorder's pidfds and its kept
    /proc/PID/stat descriptors share one quarter of it (procs.kept_fds_limit), beside the
    simulator's own, so every process's /proc files can still be opened: each of 100 process
    lives is recorded with its user and command, and the simulator lists them all."""
    sleepers = [children.start(["sleep", "600"]) for _ in range(100)]
    assert wait_for(lambda: all(proc_state(p.pid) == "S" and open(f"/proc/{p.pid}/cmdline", "rb").read()
                                == b"sleep\x00600\x00" for p in sleepers))
    data = minimal_scenario()
    data["processes"] = [{"pid": p.pid, "source": "real", "gpus": {str(i % 2): "100MiB"}}
                         for i, p in enumerate(sleepers)]
    db = tmp_path / "history.db"
    out = subprocess.run(vram_argv("record", "--simulate", str(write_scenario(data)), "--db", str(db),
                                   "--interval", "0.1s", "--samples", "3"),
                         capture_output=True, text=True, env=clean_env(), timeout=60, stdin=subprocess.DEVNULL,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
    assert out.returncode == 0, out.stderr
    assert "Too many open files" not in out.stderr
    with sqlite3.connect(db) as conn:
        jobs = conn.execute("SELECT pid, user, command FROM jobs").fetchall()
        rows = conn.execute("SELECT count(*) FROM proc_raw WHERE sample = (SELECT max(sample) FROM proc_raw)"
                            ).fetchone()[0]
    me = pwd.getpwuid(os.getuid()).pw_name
    assert sorted(jobs) == sorted((p.pid, me, "sleep") for p in sleepers), \
        [j for j in jobs if j[1:] != (me, "sleep")][:5]
    assert rows == 100


def test_a_process_that_comes_onto_the_screen_is_drawn_with_its_cpu_and_rss(sim_env, write_scenario):
    """The live view names the rows near the screen before a reading, from the previous reading's
    order; a process that comes onto the screen in this reading (a new job, sorted by memory to
    the top; one far down the list whose memory grew it there) is read when its row is drawn,
    never shown with CPU% and RSS N/A."""
    import asyncio

    from vramkit.collector import Collector
    from vramkit.machine import open_machine
    from vramkit.tui import rows as R
    from vramkit.tui.app import TopApp

    data = minimal_scenario()
    data["processes"] = [{"pid": 1000 + i, "user": "ann", "command": f"python w{i}.py", "cpu_percent": 50,
                          "rss": "1GiB", "gpus": {"0": f"{100 + i}MiB"}} for i in range(200)]
    data["processes"] += [
        {"pid": 5000, "user": "ben", "command": "python new.py", "cpu_percent": 90, "rss": "2GiB", "start_at": 10,
         "gpus": {"1": "60GiB"}},
        {"pid": 999, "user": "cy", "command": "python grows.py", "cpu_percent": 70, "rss": "3GiB",
         "gpus": {"1": {"timeline": [[0, "10MiB"], [10, "10GiB"]], "interpolate": "step"}}}]
    machine = open_machine(str(write_scenario(data)))
    collector = Collector(machine, interval=3600)
    at = [0.0]

    def sample():
        machine.backend.sim._fixed_t = at[0]
        return collector.snapshot()
    app = TopApp(sample, interval=3600, view=R.View(sort="memory"), usage=collector)

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await app.refresh_data()
            await pilot.pause()
            page = app.query_one("#procs").size.height
            assert [r.proc.pid for r in app._rows[-1:]] == [999] and 5000 not in {r.proc.pid for r in app._rows}
            at[0] = 20
            await app.refresh_data()
            await pilot.pause()
            top = {r.proc.pid: r.proc for r in app._rows[:2]}
            assert set(top) == {5000, 999} and page > 2
            read = {pid: (p.cpu_percent is not None, p.rss) for pid, p in top.items()}
            assert read == {5000: (True, 2 * 1024**3), 999: (True, 3 * 1024**3)}  # not N/A
    try:
        asyncio.run(main())
    finally:
        collector.close()
