"""procs.ProcessTable's readers that need only who each process is (usage=False: the recorder, and
the live view's rows far from the screen), which hand back a kept process while its pidfd says it
has not ended, against a neighbour's process that takes a pid the moment the process last read
under it exits: it must be read as the newcomer it is, never as the process that held the pid."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import clean_env

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
