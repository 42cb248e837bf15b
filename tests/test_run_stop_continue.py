"""vram run stopped and continued (issue 26 item 4), with real processes: `kill -STOP/-CONT` of
the launcher (once, long past its watch's tick, in a tight loop, around the job's exit), Slurm's
suspend and resume of the whole job, `kill -TSTP` of the launcher, and Ctrl-Z / fg in a real
terminal under an interactive bash. The job's exit code must pass through every time, with no
"internal error" (CPython's sigtimedwait returned an uninitialised siginfo after a stop, and the
launcher passed its garbage signal number on)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import shlex
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from helpers import vram_argv, wait_for

pytestmark = pytest.mark.slow

PY = sys.executable

# The job: says it is ready (its pid and its parent's), then runs until `go` exists, then exits
# with the code asked for.
JOB = r"""
import os, sys, time
ready, go, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(ready + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {os.getppid()}")
os.rename(ready + ".tmp", ready)
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(code)
"""


def state(pid: int) -> str:
    """A process's state letter from /proc (R, S, T, Z, ...), '' once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return ""
    return stat[stat.rfind(b")") + 2:][:1].decode()


class Job:
    """`vram run -q --simulate demo -- python JOB` with its own lease directory."""

    def __init__(self, tmp_path: Path, code: int, start: bool = True, **popen: object):
        tmp_path.mkdir(exist_ok=True)
        self.ready, self.go = tmp_path / "ready", tmp_path / "go"
        env = {k: v for k, v in os.environ.items() if not k.startswith("VRAM_") or k == "VRAM_LANG"}
        env.update(VRAM_LEASE_DIR=str(tmp_path / "leases"), VRAM_SIM_TIME="0", PYTHONDONTWRITEBYTECODE="1")
        self.argv = vram_argv("run", "-q", "--simulate", "demo", "--", PY, "-c", JOB, str(self.ready),
                              str(self.go), str(code))
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        if start:
            self.proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, **popen)  # type: ignore[call-overload]
            self.launcher = self.proc.pid
            assert wait_for(self.ready.exists, timeout=30), self.proc.stderr
            self.child, parent = map(int, self.ready.read_text().split())
            assert parent == self.launcher

    def finish(self) -> None:
        self.go.touch()

    def result(self) -> tuple[int, str]:
        assert self.proc is not None
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err.decode()

    def cleanup(self) -> None:
        for pid in (getattr(self, "child", None), getattr(self, "launcher", None)):
            if pid:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.communicate(timeout=10)


@pytest.fixture
def jobs(tmp_path):
    started: list[Job] = []

    def start(code: int, **popen: object) -> Job:
        job = Job(tmp_path / str(len(started)), code, **popen)
        started.append(job)
        return job
    yield start
    for job in started:
        job.cleanup()


def assert_passed_through(job: Job, code: int) -> None:
    rc, err = job.result()
    assert "internal error" not in err and "Traceback" not in err, err
    assert rc == code, err
    assert err == ""


def test_stopped_longer_than_a_tick_then_continued(jobs):
    """The launcher's watch ticks every second: stopped past that, the wait came back with EINTR
    after its deadline (the case that gave 'internal error: OSError: [Errno 22]')."""
    job = jobs(7, start_new_session=True)
    for _ in range(3):
        os.kill(job.launcher, signal.SIGSTOP)
        assert wait_for(lambda: state(job.launcher) == "T")
        time.sleep(1.3)  # past the next tick of the lease watch
        os.kill(job.launcher, signal.SIGCONT)
        assert wait_for(lambda: state(job.launcher) not in ("T", ""))
    assert state(job.child) in ("R", "S")  # `kill -STOP PID` stops the launcher alone
    job.finish()
    assert_passed_through(job, 7)


def test_a_tight_loop_of_stops_and_continues_across_the_jobs_exit(jobs):
    job = jobs(3, start_new_session=True)
    for i in range(3000):
        os.kill(job.launcher, signal.SIGSTOP)
        os.kill(job.launcher, signal.SIGCONT)
        if i == 1500:
            job.finish()  # the job exits somewhere in the rest of the loop
    assert_passed_through(job, 3)


def test_the_job_exits_while_the_launcher_is_stopped(jobs):
    job = jobs(42, start_new_session=True)
    os.kill(job.launcher, signal.SIGSTOP)
    assert wait_for(lambda: state(job.launcher) == "T")
    job.finish()
    assert wait_for(lambda: state(job.child) == "Z", timeout=30)  # exited; only its parent can reap it
    time.sleep(1.2)  # past the tick
    for _ in range(50):
        os.kill(job.launcher, signal.SIGCONT)
        os.kill(job.launcher, signal.SIGSTOP)
    os.kill(job.launcher, signal.SIGCONT)
    assert_passed_through(job, 42)


def test_slurm_suspend_and_resume_of_every_job_process(jobs):
    """scontrol suspend: SIGTSTP then SIGSTOP to every process of the job; resume: SIGCONT."""
    job = jobs(9, start_new_session=True)
    for _ in range(3):
        for sig in (signal.SIGTSTP, signal.SIGSTOP):
            os.killpg(job.launcher, sig)
        assert wait_for(lambda: state(job.launcher) == "T" and state(job.child) == "T")
        time.sleep(1.2)
        os.killpg(job.launcher, signal.SIGCONT)
        assert wait_for(lambda: state(job.launcher) not in ("T", "") and state(job.child) not in ("T", ""))
    job.finish()
    assert_passed_through(job, 9)


def test_kill_tstp_of_the_launcher_stops_the_job_too_and_kill_cont_continues_both(jobs):
    """With job control (the launcher's group has a parent in another group of its session, as
    under a shell), `kill -TSTP PID` stops vram and its job, as Ctrl-Z would; `kill -CONT PID`
    continues both."""
    job = jobs(5, process_group=0)
    os.kill(job.launcher, signal.SIGTSTP)
    assert wait_for(lambda: state(job.child) == "T"), "the job was not stopped"
    assert wait_for(lambda: state(job.launcher) == "T")
    pid, status = os.waitpid(job.launcher, os.WUNTRACED)
    assert pid == job.launcher and os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGTSTP
    time.sleep(1.2)
    os.kill(job.launcher, signal.SIGCONT)
    assert wait_for(lambda: state(job.child) not in ("T", "")), "the job was not continued"
    assert state(job.launcher) != "T"
    job.finish()
    assert_passed_through(job, 5)


# ---------------------------------------------------------------- Ctrl-Z and fg in a terminal

class Terminal:
    """An interactive bash (job control on) on a pseudo-terminal it controls."""

    def __init__(self, env: dict[str, str]):
        master, slave = pty.openpty()
        self.master = master

        def controlling_terminal() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(["bash", "--norc", "--noprofile", "--noediting", "-i"], stdin=slave,
                                     stdout=slave, stderr=slave, env={**env, "PS1": "$ ", "TERM": "dumb"},
                                     preexec_fn=controlling_terminal)
        os.close(slave)
        self.seen = b""

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait_for_text(self, needle: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while needle.encode() not in self.seen:
            ready, _, _ = select.select([self.master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                shown = self.seen.decode(errors="replace")
                raise AssertionError(f"{needle!r} never came; the terminal shows {shown!r}")
            try:
                self.seen += os.read(self.master, 65536)
            except OSError:
                break
        assert needle.encode() in self.seen, self.seen
        return self.seen.decode(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        os.close(self.master)


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="needs bash")
def test_ctrl_z_and_fg_in_a_terminal(tmp_path):
    job = Job(tmp_path, 5, start=False)
    term = Terminal(job.env)
    try:
        term.type(shlex.join(job.argv) + "\n")
        assert wait_for(job.ready.exists, timeout=30), term.seen
        child, launcher = map(int, job.ready.read_text().split())
        job.child, job.launcher = child, launcher
        term.type("\x1a")  # the terminal's suspend character
        term.wait_for_text("Stopped")
        assert wait_for(lambda: state(launcher) == "T" and state(child) == "T")
        time.sleep(1.2)  # past the lease watch's tick
        term.type("fg; echo rc=$?\n")
        assert wait_for(lambda: state(launcher) not in ("T", "") and state(child) not in ("T", ""))
        job.finish()
        shown = term.wait_for_text("rc=5")
        assert "internal error" not in shown
        term.type("exit\n")
    finally:
        job.cleanup()
        term.close()
