"""vram run with real processes: the environment the job gets, exit codes, signals passed on
(and not doubled by a terminal), a wait that gives up with the reason, a wait that succeeds."""

from __future__ import annotations

import fcntl
import os
import pty
import pwd
import select
import signal
import subprocess
import sys
import termios
import time

import pytest
from helpers import assert_one_line_error, run_vram, vram_argv, wait_for

PY = sys.executable


def run(leasing, *args: str, timeout: float = 60, **env: str | None):
    return run_vram("run", "--simulate", "demo", *args, env=leasing.env(**env), timeout=timeout)


@pytest.mark.slow
def test_the_job_gets_the_chosen_gpus_in_pci_order(leasing):
    code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['CUDA_DEVICE_ORDER'])"
    result = run(leasing, "-n", "2", "--", PY, "-c", code)
    assert result.rc == 0, result.err
    assert result.out == "4,7 PCI_BUS_ID\n"
    assert result.err_lines == ["vram: GPU 4 (A100-SXM4-80GB, 61.5GiB free), GPU 7 (A100-SXM4-80GB, 77.3GiB free) "
                                "→ CUDA_VISIBLE_DEVICES=4,7 [SIMULATED machine 'demo']"]
    assert run(leasing, "--ids", "uuid", "--", PY, "-c", code).out.split()[0] == (
        "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e67")
    assert run(leasing, "-q", "--", "true").err == ""
    assert leasing.leftovers() == []


def test_an_inherited_cuda_visible_devices_is_replaced_by_the_choice_within_it(leasing):
    code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    inherited = "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e63,1"  # GPU 3 by UUID, and GPU 1
    result = run(leasing, "--max-util", "any", "--", PY, "-c", code, CUDA_VISIBLE_DEVICES=inherited)
    assert result.out == "3\n", result.err  # 3 and 1 tie on memory; 3 is less busy (57% < 58%)


def test_argv_is_passed_as_is_without_a_shell(leasing):
    args = ["a b", "$HOME", "*", "--json", "-n", "'q'"]
    result = run(leasing, "-q", "--", PY, "-c", "import sys; print(sys.argv[1:])", *args)
    assert result.out == f"{args}\n"


def test_stdin_reaches_the_job(leasing):
    proc = subprocess.run(vram_argv("run", "-q", "--simulate", "demo", "--", "cat"), input="hello\n",
                          capture_output=True, text=True, env=leasing.env(), timeout=60)
    assert proc.stdout == "hello\n" and proc.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("code,rc", [
    ("raise SystemExit(0)", 0),
    ("raise SystemExit(3)", 3),
    ("raise SystemExit(255)", 255),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + 15),
    ("import os, signal; signal.signal(signal.SIGABRT, signal.SIG_DFL); os.abort()", 128 + 6),
])
def test_exit_codes_pass_through(leasing, code, rc):
    assert run(leasing, "-q", "--", PY, "-c", code).rc == rc
    assert leasing.leftovers() == []


def test_a_command_that_cannot_start(leasing, tmp_path):
    result = run(leasing, "-q", "--", "no-such-command-xyz")
    assert_one_line_error(result, 127, "vram: no-such-command-xyz: command not found")
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    result = run(leasing, "-q", "--", str(script))
    assert_one_line_error(result, 126, "Permission denied")
    assert leasing.leftovers() == []


@pytest.mark.parametrize("args,message", [
    ((), "no command: put it after '--'"),
    (("--",), "no command"),
    (("--wait", "python", "x.py"), "--wait: not a duration: 'python'"),
    (("--lease-timeout", "0", "--", "true"), "--lease-timeout: must be more than 0"),
    (("--min-free", "20", "--", "true"), "needs a unit"),
])
def test_bad_usage_is_exit_2(leasing, args, message):
    assert_one_line_error(run(leasing, *args), 2, message)


@pytest.mark.slow
def test_impossible_requests_fail_at_once_even_with_wait(leasing):
    started = time.monotonic()
    result = run(leasing, "-n", "9", "--wait", "60", "--", "true")
    assert_one_line_error(result, 1, "cannot pick 9 GPUs: this machine has 8 GPUs (0-7)", "fitting now: GPU 4")
    result = run(leasing, "--min-free", "200GiB", "--wait", "--", "true")
    assert_one_line_error(result, 1, "no GPU here can ever fit", "too small (79.5GiB usable)")
    assert time.monotonic() - started < 30
    assert leasing.leftovers() == []


def test_the_wait_line_says_how_long_only_once_a_second_has_passed():
    """'waiting for 3 GPUs ...' at first, never 'waiting 0s'; 'waiting 1s for ...' from then on."""
    from vramkit.allocate import WaitStatus, build_policy
    from vramkit.cuda_env import devices_of
    from vramkit.gpu_choice import decide, units_of
    from vramkit.machine import open_machine

    machine = open_machine("demo")
    try:
        snap = machine.snapshot()
        devices = devices_of(snap)
        policy, _ = build_policy(devices, count=3, env={})
        decision = decide(policy, units_of(snap, devices))
    finally:
        machine.close()
    assert WaitStatus(decision, 0.0, 60, 0).text().startswith("waiting for 3 GPUs, ≥50% free, ≤50% busy: ")
    assert WaitStatus(decision, 0.99, 60, 0).text().startswith("waiting for 3 GPUs")
    assert WaitStatus(decision, 1.0, 60, 0).text().startswith("waiting 1s for 3 GPUs")
    assert WaitStatus(decision, 75, 120, 1).text().startswith("waiting 1m15s for 3 GPUs")


@pytest.mark.slow
def test_a_wait_that_times_out_says_what_it_waited_for(leasing):
    result = run(leasing, "-n", "3", "--wait", "2", "--", "true")
    assert result.rc == 1 and result.out == ""
    lines = result.err_lines
    assert lines[0].startswith("vram: waiting for 3 GPUs, ≥50% free, ≤50% busy: only GPUs 4, 7 fit")
    assert lines[-1].startswith("vram: gave up after waiting 2s: too few GPUs fit now (wanted 3 GPUs")
    assert "GPUs 1-3 are busy (58%, 55%, 57% utilization; limit 50%)" in lines[-1]
    assert leasing.leftovers() == []  # the ticket is gone


@pytest.mark.slow
def test_a_waiter_starts_when_the_gpu_is_released(leasing, groups):
    holder = groups.start(vram_argv("run", "--simulate", "demo", "--only", "7", "-q", "--", "sleep", "2"),
                          env=leasing.env())
    assert wait_for(lambda: any(n.endswith(".json") for n in leasing.leftovers()))
    started = time.monotonic()
    result = run(leasing, "--only", "7", "--wait", "60", "--", PY, "-c", "print('ran')")
    assert result.rc == 0 and result.out == "ran\n"
    assert holder.wait(timeout=10) == 0
    assert 0.5 < time.monotonic() - started < 30
    first = result.err_lines[0]
    assert first.startswith("vram: waiting for 1 GPU, ≥50% free, ≤50% busy: ")
    assert f"GPU 7 is reserved by a vram run of {pwd.getpwuid(os.getuid()).pw_name} (pid {holder.pid}," in first
    assert "GPUs 0-6 are not in --only" in first
    assert result.err_lines[-1].startswith("vram: GPU 7 (A100-SXM4-80GB, 77.3GiB free) after waiting")
    assert leasing.leftovers() == []


@pytest.mark.slow
def test_interrupting_a_waiter_leaves_no_ticket(leasing, groups):
    holder = groups.start(vram_argv("run", "--simulate", "demo", "--only", "7", "-q", "--", "sleep", "30"),
                          env=leasing.env())
    assert wait_for(lambda: any(n.endswith(".json") for n in leasing.leftovers()))
    waiter = groups.start(vram_argv("run", "--simulate", "demo", "--only", "7", "--wait", "--", "true"),
                          env=leasing.env(), stderr=subprocess.PIPE)
    assert wait_for(lambda: any(n.startswith("wait-") for n in leasing.leftovers()))
    # Its first "waiting" line comes once the ticket is its own (the file appears a moment before).
    assert wait_for(lambda: select.select([waiter.stderr], [], [], 0)[0])
    assert waiter.stderr.readline().startswith(b"vram: waiting")
    waiter.send_signal(signal.SIGINT)
    assert waiter.wait(timeout=10) == 130
    assert not any(n.startswith("wait-") for n in leasing.leftovers())
    holder.send_signal(signal.SIGTERM)  # passed on to sleep, which dies of it
    assert holder.wait(timeout=10) == 128 + signal.SIGTERM
    assert leasing.leftovers() == []


# ---------------------------------------------------------------- signals

HANDLER = r"""
import os, signal, sys, time
out, exit_code = sys.argv[1], int(sys.argv[2])
# Every delivery of a signal writes its number to the wakeup pipe (the Python-level handler may
# run once for two deliveries); count those.
r, w = os.pipe()
os.set_blocking(w, False)
signal.set_wakeup_fd(w)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
    signal.signal(s, lambda sig, frame: None)
open(out + ".ready", "w").close()
got = b""
deadline = time.monotonic() + 30
while not got and time.monotonic() < deadline:
    time.sleep(0.005)
    os.set_blocking(r, False)
    try:
        got = os.read(r, 100)
    except BlockingIOError:
        pass
time.sleep(0.5)  # a second copy of the signal would arrive in this time
try:
    got += os.read(r, 100)
except BlockingIOError:
    pass
with open(out, "w") as f:
    f.write(" ".join(signal.Signals(b).name for b in got))
sys.exit(exit_code)
"""


def start_handler_job(groups, leasing, tmp_path, exit_code: int = 42, **kwargs):
    out = tmp_path / "signals.txt"
    proc = groups.start(vram_argv("run", "-q", "--simulate", "demo", "--", PY, "-c", HANDLER, str(out),
                                  str(exit_code)), env=leasing.env(), **kwargs)
    assert wait_for(lambda: (tmp_path / "signals.txt.ready").exists(), timeout=20)
    return proc, out


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1])
def test_signals_sent_to_vram_reach_the_job_once(groups, leasing, tmp_path, sig):
    proc, out = start_handler_job(groups, leasing, tmp_path)
    os.kill(proc.pid, sig)
    assert proc.wait(timeout=20) == 42  # the job handled it and chose its exit code
    assert out.read_text() == sig.name
    assert leasing.leftovers() == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_job_killed_by_a_forwarded_signal_gives_128_plus_n(groups, leasing, sig):
    proc = groups.start(vram_argv("run", "-q", "--simulate", "demo", "--", "sleep", "30"), env=leasing.env())
    assert wait_for(lambda: any(n.endswith(".json") for n in leasing.leftovers()))
    time.sleep(0.2)  # let sleep exec
    os.kill(proc.pid, sig)
    assert proc.wait(timeout=20) == 128 + sig


@pytest.mark.slow
def test_ctrl_c_on_a_terminal_reaches_the_job_once(leasing, tmp_path):
    """In a real terminal Ctrl-C signals the whole foreground group, vram and its job: vram must
    not pass on a second copy."""
    master, slave = pty.openpty()
    out = tmp_path / "signals.txt"

    def controlling_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(vram_argv("run", "-q", "--simulate", "demo", "--", PY, "-c", HANDLER, str(out), "0"),
                            stdin=slave, stdout=slave, stderr=slave, env=leasing.env(),
                            preexec_fn=controlling_terminal)
    os.close(slave)
    try:
        assert wait_for(lambda: (tmp_path / "signals.txt.ready").exists(), timeout=20)
        os.write(master, b"\x03")  # the terminal's interrupt character
        assert proc.wait(timeout=20) == 0
        assert out.read_text() == "SIGINT"  # once
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    assert leasing.leftovers() == []
