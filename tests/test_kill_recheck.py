"""The checks run again at the moment of signalling, on what the process is *now* (docs/safety.md:
"Ownership and protection are checked again ... an exec can change its name or owner").

Each test plans a kill of a real process through the public API (`make_plan`, then `execute`),
changes the process between the two steps so that a rule must now refuse it, and checks that it
is refused with that rule and not signalled. The pid and start time stay the same across an
exec or a setuid(), so the identity check alone cannot catch these: only the re-check can.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import pytest
from helpers import cmdline, needs_root, proc_state, real_gpu_scenario, wait_for

import vramkit
from vramkit.killing import Criteria, execute, make_plan

# A python child that says 'ready', then waits for a line on stdin before it changes.
EXEC_ON_LINE = ("import os, sys; print('ready', flush=True); sys.stdin.readline(); "
                "os.execv(sys.argv[1], [sys.argv[2], '600'])")
SETUID_ON_LINE = ("import os, sys, time; print('ready', flush=True); sys.stdin.readline(); "
                  "os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534); "
                  "print('changed', flush=True); time.sleep(600)")


pytestmark = pytest.mark.usefixtures("kill_sandbox")  # conftest: no protect list, audit log in tmp


def start_changer(children, code: str, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    children.procs.append(proc)  # killed and reaped at teardown
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def status_name(target) -> str:
    return str(getattr(target.status, "value", target.status))


def plan_change_execute(pid: int, write_scenario, change):
    """make_plan for `pid` (which the plan must accept), `change()`, then execute: the target."""
    machine = vramkit.open_machine(simulate=str(write_scenario(real_gpu_scenario({pid: {"0": "2GiB"}}))))
    try:
        plan = make_plan(machine, Criteria(pids=(pid,)))
        (target,) = plan.targets
        assert target.refusal is None, f"refused already when planned: {target.refusal}"
        change()
        report = execute(machine, plan, signal.SIGTERM, timeout=0.5)
    finally:
        machine.close()
    (after,) = report.targets
    return after, report


def test_a_process_that_execs_into_a_protected_name_after_planning_is_refused(children, write_scenario, tmp_path):
    sleep = shutil.which("sleep")
    assert sleep is not None
    # A login user's process named sshd is not the machine's sshd (tests/test_protect_names.py): as
    # root this one is root's and the built-in rule protects it; as a login user, their own rule.
    conf = tmp_path / ".config" / "vramkit" / "protected.conf"  # kill_sandbox: HOME is tmp_path
    conf.parent.mkdir(parents=True)
    conf.write_text("name sshd\n")
    sshd = tmp_path / "sshd"  # exec'd through this name, /proc/PID/comm says 'sshd' (and so does argv[0])
    sshd.symlink_to(sleep)
    proc = start_changer(children, EXEC_ON_LINE, str(sshd), "sshd")

    def exec_into_sshd():
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        assert wait_for(lambda: cmdline(proc.pid) == b"sshd\x00600\x00")

    target, report = plan_change_execute(proc.pid, write_scenario, exec_into_sshd)
    assert target.refusal is not None, "signalled although it is now sshd: the re-check did not run"
    assert status_name(target) == "refused"
    assert target.refusal.rule == "protected" and "sshd" in target.refusal.reason
    assert target.signals == [] and not report.ok
    assert proc_state(proc.pid) not in (None, "Z") and proc.poll() is None  # not signalled: still running


@needs_root("to start a process that changes its owner (setuid to nobody)")
def test_a_process_that_changes_owner_after_planning_is_refused(children, write_scenario):
    proc = start_changer(children, SETUID_ON_LINE)

    def become_nobody():
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == b"changed"
        with open(f"/proc/{proc.pid}/status") as f:
            uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
        assert uids == ["65534"] * 4

    # Root's own process when planned; another user's (nobody's) when signalled, and the plan
    # did not say all_users.
    target, report = plan_change_execute(proc.pid, write_scenario, become_nobody)
    assert target.refusal is not None, "signalled although it now belongs to nobody: the re-check did not run"
    assert status_name(target) == "refused"
    assert target.refusal.rule == "ownership"
    assert target.signals == [] and not report.ok
    assert proc_state(proc.pid) not in (None, "Z") and proc.poll() is None  # not signalled: still running
