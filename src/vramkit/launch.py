"""Start a command (argv, no shell) with its environment, pass signals on, and return its exit
code: the code it exited with, or 128+N when signal N killed it (as a shell reports it).

The launcher stays the child's parent (it holds the lease and watches NVML) but should be
invisible: a job under `vram run` must behave as it would without it.
- Signals another process sends to the launcher (kill, Slurm, timeout) are passed on. Those the
  terminal sends (Ctrl-C, Ctrl-\\, hang-up) reach the whole foreground process group, the job
  included, so passing them on would deliver them twice: the kernel marks them SI_KERNEL and
  they are not passed on.
- The job gets the launcher's original signal mask and default SIGPIPE/SIGXFSZ (Python ignores
  those two; subprocess restores them the same way).
- Signals are taken synchronously (sigtimedwait) with SIGCHLD, so the launcher wakes the moment
  the job exits, and no Python handler can interrupt it half-way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence

from .errors import VramkitError

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
SI_KERNEL = 0x80  # si_code of a signal the kernel generated (tty Ctrl-C, hang-up), Linux


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
            raise LaunchError(f"{program}: no such file", 127)
        return program
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise LaunchError(f"{program}: command not found", 127)
    return found


def run(argv: Sequence[str], env: dict[str, str], *, pass_fds: Sequence[int] = (),
        on_start: Callable[[int], None] | None = None, tick: Callable[[], bool] | None = None,
        tick_interval: float = 1.0) -> int:
    """Run `argv` to completion. `pass_fds` stay open in the child (the lease lock); `on_start(pid)`
    runs once it started; `tick()` every `tick_interval` seconds until it returns False."""
    if not argv:
        raise LaunchError("no command given", 2)
    path = _resolve(argv[0], env)
    watched = {*FORWARDED, signal.SIGCHLD}
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
        # Signals that came after the last wait would fire (KeyboardInterrupt) once unblocked.
        while signal.sigtimedwait(watched, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, original)


def _supervise(pid: int, watched: set[signal.Signals], tick: Callable[[], bool] | None, tick_interval: float) -> int:
    next_tick = time.monotonic() + tick_interval if tick else None
    while True:
        info: signal.struct_siginfo | None
        if next_tick is None:
            info = signal.sigwaitinfo(watched)
        else:
            info = signal.sigtimedwait(watched, max(0.0, next_tick - time.monotonic()))
        if info is not None and info.si_signo != signal.SIGCHLD:
            if info.si_code != SI_KERNEL and info.si_pid != pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, info.si_signo)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return exit_code(status)
        if tick is not None and next_tick is not None and time.monotonic() >= next_tick:
            try:
                more = tick()
            except Exception:  # watching is a courtesy: never let it hurt the job
                more = False
            next_tick = time.monotonic() + tick_interval if more else None
