"""procs.ProcessTable against a neighbour's process that changes what it is under the same pid and start time:
one that exec()s another program of the same name (a launcher that execs the training script, a
wrapper that execs python again), whose comm stays the same: the stack's new start address tells
(procs.Stat.exec_mark), where the reader may read it (its own processes, or root)."""

from __future__ import annotations

import os
import sys

from helpers import cmdline, wait_for

from vramkit import procs


def test_an_exec_of_the_same_program_shows_its_new_command_line(children):
    go_r, go_w = os.pipe()
    code = (f"import os, sys; os.read({go_r}, 1); "
            "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', 'after-exec'])")
    try:
        child = children.start([sys.executable, "-c", code, "before-exec"], pass_fds=(go_r, go_w))
        assert wait_for(lambda: cmdline(child.pid).endswith(b"before-exec\0"))
        table = procs.ProcessTable()
        try:
            before = table.read(child.pid)
            assert isinstance(before, procs.HostProcess) and before.command.endswith("before-exec")
            os.write(go_w, b"x")
            assert wait_for(lambda: cmdline(child.pid).endswith(b"after-exec\0"))
            now = table.read(child.pid)
            assert isinstance(now, procs.HostProcess) and now.start_ticks == before.start_ticks
            assert now.name == before.name  # the same comm: nothing in the stat line's name says it
            assert now.command.endswith("after-exec"), now.command
        finally:
            table.close()
    finally:
        os.close(go_r)
        os.close(go_w)
