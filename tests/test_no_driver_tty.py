"""On a terminal, a machine without a driver is offered the simulated server (a real pty)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest


def _run_on_pty(answer: bytes, timeout: float = 20.0) -> tuple[int, str]:
    main, sub = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAM_")}
    env.update(VRAM_SIM_TIME="0", TERM="xterm", COLUMNS="140")
    proc = subprocess.Popen([sys.executable, "-m", "vramkit", "status"], stdin=sub, stdout=sub, stderr=sub,
                            env=env, close_fds=True)
    os.close(sub)
    out, answered, deadline = b"", False, time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        if not answered and b"[Y/n]" in out:
            os.write(main, answer)
            answered = True
        if proc.poll() is not None and not ready:
            break
    os.close(main)
    return proc.wait(timeout=5), out.decode(errors="replace")


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA driver")
def test_yes_shows_the_simulated_server():
    code, out = _run_on_pty(b"\n")
    assert "no NVIDIA driver found" in out
    assert "SIMULATED machine (scenario 'demo')" in out
    assert "41234" in out and code == 0


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA driver")
def test_no_exits_1_without_a_traceback():
    code, out = _run_on_pty(b"n\n")
    assert "no NVIDIA driver found" in out and "SIMULATED" not in out
    assert "Traceback" not in out and code == 1
