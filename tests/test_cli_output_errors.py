"""Output that cannot be written, a pid that does not exist, `doctor -` on a terminal
(issue 31, item 7)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time

import pytest
from helpers import clean_env, run_vram, vram_argv

OOM = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 1.25 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB memory in "
       "use. Of the allocated memory 70.12 GiB is allocated by PyTorch, and 6.27 GiB is reserved by PyTorch but "
       "unallocated.\n")


def _to_dev_full(*args: str) -> subprocess.CompletedProcess:
    with open("/dev/full", "w") as full:
        return subprocess.run(vram_argv(*args), stdout=full, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              text=True, env=clean_env(), timeout=60)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [("status", "--simulate", "demo"), ("ps", "--simulate", "demo", "--json"),
                                  ("--help",), ("status", "--help")])
def test_output_that_cannot_be_written_is_one_line_and_exit_1(args):
    result = _to_dev_full(*args)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == ["vram: cannot write the output: No space left on device"]


def test_a_closed_pipe_is_still_silent():
    proc = subprocess.Popen(vram_argv("ps", "--simulate", "demo"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=clean_env())
    proc.stdout.close()  # the reader went away before vram wrote
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""
    proc.stderr.close()


def test_a_pid_that_does_not_exist_is_no_such_process(tmp_path):
    with open("/proc/sys/kernel/pid_max") as f:
        missing = int(f.read())  # pids run up to pid_max - 1
    env = clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"))
    result = run_vram("kill", "--simulate", "demo", str(missing), "--yes", env=env)
    assert result.rc == 1, result.err
    row = next(line for line in result.out.splitlines() if line.lstrip().startswith(str(missing)))
    assert "no such process" in row and "not visible in /proc" not in result.out
    data = run_vram("kill", "--simulate", "demo", str(missing), "--yes", "--json", env=env)
    target = json.loads(data.out)["targets"][0]
    assert target["rule"] == "no-such-process" and target["reason"].startswith("no such process")


def test_doctor_dash_on_a_terminal_says_it_reads_until_ctrl_d():
    master, slave = pty.openpty()
    proc = subprocess.Popen(vram_argv("doctor", "-", "--no-live"), stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=clean_env())
    os.close(slave)
    try:
        deadline = time.monotonic() + 30
        err = b""
        while b"Ctrl-D" not in err and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 1)
            if ready:
                err += os.read(proc.stderr.fileno(), 4096)
        assert b"until Ctrl-D" in err, err
        os.write(master, OOM.replace("\n", "\r").encode() + b"\r\x04")
        out, rest = proc.communicate(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (err + rest).decode()
    assert b"2.00GiB" in out
