"""Start a command (argv, no shell) with its environment, pass signals on, and return its exit
code: the code it exited with, or 128+N when signal N killed it (as a shell reports it).

The launcher stays the child's parent (it holds the lease and watches NVML) but should be
invisible: a job under `vram run` must behave as it would without it.
- Signals another process sends to the launcher (kill, Slurm, timeout) are passed on. Those the
  terminal sends (Ctrl-C, Ctrl-\\, hang-up, Ctrl-Z) reach the whole foreground process group, the
  job included, so passing them on would deliver them twice: the kernel marks them SI_KERNEL and
  they are not passed on.
- Stop and continue, as a shell job: SIGTSTP, SIGTTIN and SIGTTOU stop the launcher as they
  would any program (nothing, in a process group without job control), after passing one another
  process sent on to the job. A SIGCONT continues the job when it is stopped (a shell's `fg`
  and Slurm's resume signal the whole group, so the job already runs and gets no second one).
  SIGSTOP cannot be caught: `kill -STOP` of the launcher's pid alone stops the launcher only,
  and the job's exit code waits for its SIGCONT; a shell (`kill -STOP %1`) and Slurm's suspend
  stop the whole group.
- The job gets the launcher's original signal mask and default SIGPIPE/SIGXFSZ (Python ignores
  those two; subprocess restores them the same way).
- Signals are taken synchronously (sigwaitinfo) with SIGCHLD, so the launcher wakes the moment
  the job exits, and no Python handler can interrupt it half-way. The watch ticks on a one-shot
  interval timer (SIGALRM, taken the same way), never on sigtimedwait's timeout: CPython's
  sigtimedwait returns an uninitialised siginfo when EINTR (a stop and continue) comes after its
  deadline, and a launcher that trusted it passed a garbage signal number on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence

from .errors import VramkitError
from .i18n import _

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGALRM)
STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)  # stop signals that can be caught
SI_KERNEL = 0x80  # si_code of a signal the kernel generated (tty Ctrl-C, hang-up, an interval timer), Linux


class LaunchError(VramkitError):
    """The command could not be started. `code` (also `exit_code`) is what a shell would exit
    with (127, 126)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = self.exit_code = code


def exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _resolve(program: str, env: dict[str, str]) -> str:
    if "/" in program:
        if not os.path.exists(program):
            raise LaunchError(_("{program}: no such file").format(program=program), 127)
        return program
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise LaunchError(_("{program}: command not found").format(program=program), 127)
    return found


def run(argv: Sequence[str], env: dict[str, str], *, pass_fds: Sequence[int] = (),
        on_start: Callable[[int], None] | None = None, tick: Callable[[], bool] | None = None,
        tick_interval: float = 1.0) -> int:
    """Run `argv` to completion. `pass_fds` stay open in the child (the lease lock); `on_start(pid)`
    runs once it started; `tick()` every `tick_interval` seconds until it returns False."""
    if not argv:
        raise LaunchError(_("no command given"), 2)
    path = _resolve(argv[0], env)
    watched = {*FORWARDED, *STOPS, signal.SIGCONT, signal.SIGCHLD}
    original = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        for fd in pass_fds:
            os.set_inheritable(fd, True)
        try:
            pid = os.posix_spawn(path, list(argv), env, setsigmask=original,
                                 setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        except OSError as e:
            code = 127 if isinstance(e, FileNotFoundError) else 126
            raise LaunchError(f"{argv[0]}: {e.strerror}", code) from None
        finally:
            for fd in pass_fds:
                with contextlib.suppress(OSError):
                    os.set_inheritable(fd, False)
        if on_start is not None:
            try:
                on_start(pid)
            except Exception:  # e.g. the lease could not note the job's pid: the job runs anyway
                pass
        return _supervise(pid, watched, tick, tick_interval)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        # Signals that came after the last wait would fire (KeyboardInterrupt) once unblocked. A zero
        # timeout never sleeps, so it cannot meet the EINTR after the deadline (see the module's doc).
        while signal.sigtimedwait(watched, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, original)


def _supervise(pid: int, watched: set[signal.Signals], tick: Callable[[], bool] | None, tick_interval: float) -> int:
    next_tick = time.monotonic() + tick_interval if tick else None
    while True:
        if next_tick is not None:  # re-armed every time: a timer that fired early cannot stop the ticks
            signal.setitimer(signal.ITIMER_REAL, max(0.001, next_tick - time.monotonic()))
        # sigwaitinfo retries on EINTR itself and fills the siginfo only from a signal it took.
        info = signal.sigwaitinfo(watched)
        signo = getattr(info, "si_signo", None)
        if signo in watched:
            _handle(pid, signal.Signals(signo), info.si_code, info.si_pid)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return exit_code(status)
        if next_tick is not None and time.monotonic() >= next_tick:
            signal.setitimer(signal.ITIMER_REAL, 0)
            try:
                more = tick() if tick is not None else False
            except Exception:  # watching is a courtesy: never let it hurt the job
                more = False
            next_tick = time.monotonic() + tick_interval if more else None


def _handle(pid: int, sig: signal.Signals, code: int, sender: int) -> None:
    """One signal the launcher took: pass it on, stop, or continue the job."""
    # Another process sent it to the launcher alone (a terminal's go to the whole group, the
    # interval timer's are the ticks, and the job's own are its business).
    passed_on = code != SI_KERNEL and sender != pid
    if sig in FORWARDED or sig in STOPS:
        if passed_on:
            _signal(pid, sig)
        if sig in STOPS:
            _stop_self(sig)
    elif sig == signal.SIGCONT and _stopped(pid):
        _signal(pid, signal.SIGCONT)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):  # gone (a zombie is still there), or became another user's
        os.kill(pid, sig)


def _stop_self(sig: signal.Signals) -> None:
    """Take the stop signal's own action: stop (the shell sees which signal), or nothing where it
    is ignored or the process group has no job control (an orphaned group)."""
    signal.raise_signal(sig)  # pending while blocked ...
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})  # ... delivered here; stopped until SIGCONT
    signal.pthread_sigmask(signal.SIG_BLOCK, {sig})


def _stopped(pid: int) -> bool:
    """The job is stopped by a signal (state T; not t, stopped by a debugger)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] == b"T"
