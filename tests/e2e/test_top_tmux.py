"""`vram top` in a real terminal: tmux runs it, capture-pane reads the screen, `q` quits with 0."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shlex
import shutil
import struct
import subprocess
import sys
import termios
import time
import uuid

import pytest
from helpers import clean_env, scenario_data, wait_for

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _tmux(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=20, env=env)


@pytest.fixture
def session(tmp_path):
    name = f"vramtop-{uuid.uuid4().hex[:8]}"
    env = clean_env(TMUX=None)  # a tmux server of our own, on a socket under tmp_path
    env["TMUX_TMPDIR"] = str(tmp_path)
    yield name, env
    _tmux("kill-server", env=env)


def _start(session, tmp_path, width: int, height: int, *args: str) -> tuple:
    name, env = session
    rc_file = tmp_path / "rc"
    command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "vramkit", "top", *args))
    script = f"{command}; echo rc=$? > {shlex.quote(str(rc_file))}"
    proc = _tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), "sh", "-c", script, env=env)
    assert proc.returncode == 0, proc.stderr

    def screen() -> str:
        return _tmux("capture-pane", "-p", "-t", name, env=env).stdout
    return name, env, rc_file, screen


@pytest.mark.slow
@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_top_runs_in_a_real_terminal_and_q_quits_with_0(session, tmp_path, size):
    name, env, rc_file, screen = _start(session, tmp_path, *size, "--simulate", "demo", "--interval", "0.5")
    # "GPU processes": the view's own line (the early frame, `vram status`, shows GPUs and commands too)
    assert wait_for(lambda: "train_dp.py" in screen() and "GPU processes" in screen(), timeout=20), screen()
    text = screen()
    lines = text.splitlines()
    assert "SIMULATED machine" in text
    for i in range(8):  # every GPU has its panel line
        assert any(line.strip().startswith(f"{i} ") and "/80.0GiB" in line for line in lines), (i, text)
    assert "70.6/80.0GiB" in text and "78.2/80.0GiB" in text
    for p in scenario_data("demo")["processes"]:
        if "start_at" not in p and size[1] >= 40:
            assert str(p["pid"]) in text, (p["pid"], text)
    assert "41234" in text and "bob" in text
    assert all(len(line) <= size[0] for line in lines)
    _tmux("send-keys", "-t", name, "q", env=env)
    assert wait_for(lambda: rc_file.exists() and rc_file.read_text().endswith("\n"), timeout=20), screen()
    assert rc_file.read_text().strip() == "rc=0"


def test_top_refuses_a_pipe_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "vramkit", "top", "--simulate", "demo"], capture_output=True,
                          text=True, env=clean_env(), stdin=subprocess.DEVNULL, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "needs a terminal" in proc.stderr and "Traceback" not in proc.stderr


def test_top_bad_interval_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "vramkit", "top", "--interval", "0"], capture_output=True,
                          text=True, env=clean_env(), stdin=subprocess.DEVNULL, timeout=30)
    assert proc.returncode == 2 and proc.stderr.startswith("vram: error: --interval")


def _run_top_on_a_pty(args: list[str], size: tuple[int, int], frames: int) -> tuple[bytes, list, list]:
    """`vram top ARGS` on a pseudo-terminal of (rows, columns) until it has drawn `frames` frames,
    then 'q': (everything it wrote, the terminal's modes before, after)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    before = termios.tcgetattr(slave)
    proc = subprocess.Popen([sys.executable, "-m", "vramkit", "top", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=clean_env(), start_new_session=True)
    out = b""
    try:
        deadline = time.monotonic() + 30
        while out.count(b"GPU processes") < frames and time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                out += os.read(master, 65536)
        assert b"GPU processes" in out, out[-2000:]
        os.write(master, b"q")
        while proc.poll() is None and time.monotonic() < deadline + 20:  # reading, so it never blocks writing
            if select.select([master], [], [], 0.1)[0]:
                out += os.read(master, 65536)
        assert proc.wait(timeout=1) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        after = termios.tcgetattr(slave)
        os.close(master)
        os.close(slave)
    return out, before, after


@pytest.mark.slow
def test_top_draws_the_status_view_before_textual_and_leaves_the_terminal_as_it_was():
    """The first frame comes before Textual is loaded: `vram status` of the first snapshot on the
    alternate screen, then the view takes the screen over; keys typed meanwhile are not echoed,
    and after quitting the terminal's modes are what they were (echo, line editing)."""
    out, before, after = _run_top_on_a_pty(["--simulate", "demo"], (40, 120), frames=1)
    early_end = out.index("starting the live view…".encode())
    early = out[:early_end].decode()
    assert early.startswith("\x1b[?1049h"), early[:40]  # drawn on the alternate screen, Textual's too
    assert "train_dp.py" in early and "A100" in early and "70.6/80.0GiB" in early  # the status view
    assert "GPU processes" not in early  # the view came after it
    assert after[3] & (termios.ECHO | termios.ICANON) == before[3] & (termios.ECHO | termios.ICANON)
    assert after[3] == before[3]


@pytest.mark.slow
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_new_columns_host_line_and_ascii_in_a_real_terminal(session, tmp_path, size):
    """Issue 17's columns and lines at both sizes: the process's own SM% (and at 200 columns its
    BW%, ENC, DEC beside the GPU's UTIL), the host line, the filter in the view line, no line past
    the width, and with --ascii (here from the config file) nothing but ASCII on the screen."""
    config = tmp_path / "xdg" / "vramkit" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[top]\nascii = true\ninterval = "0.5s"\n')
    session[1]["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    name, env, rc_file, screen = _start(session, tmp_path, *size, "--simulate", "demo", "--pid", "41234,52001")
    # the footer's last key drawn too (its separator was a Unicode block)
    assert wait_for(lambda: "GPU processes" in screen() and "palette" in screen(), timeout=20), screen()
    text = screen()
    lines = text.splitlines()
    assert all(len(line) <= size[0] for line in lines)
    assert text.isascii(), sorted({c for c in text if not c.isascii()})
    assert "host CPU" in text and "RAM" in text
    assert "5 of 9 GPU processes" in text and "pid 41234,52001" in text  # 41234 on 4 GPUs, 52001 on 1
    header = next(line for line in lines if "PID" in line and "USER" in line)
    assert "SM%" in header
    if size[0] >= 200:
        for column in ("BW%", "ENC", "DEC", "UTIL", "CPU%", "RSS", "ELAPSED", "FLAGS", "COMMAND"):
            assert column in header, header
    assert "38817" not in text  # filtered out
    _tmux("send-keys", "-t", name, "q", env=env)
    assert wait_for(lambda: rc_file.exists() and rc_file.read_text().endswith("\n"), timeout=20), screen()
    assert rc_file.read_text().strip() == "rc=0"


@pytest.mark.slow
def test_ascii_from_the_first_frame_to_the_last_byte():
    """--ascii: the early frame (`vram status` before Textual loads) and everything Textual then
    draws are ASCII bytes, escape sequences included."""
    # two frames: a refresh drawn after the first
    out, _, _ = _run_top_on_a_pty(["--simulate", "demo", "--ascii", "--interval", "0.3"], (30, 100), frames=2)
    assert b"starting the live view~" in out and b"70.6/80.0GiB" in out  # the early frame, in ASCII
    assert b"GPU processes" in out
    assert out.isascii(), sorted({c for c in out.decode(errors="replace") if not c.isascii()})


@pytest.mark.slow
def test_the_search_prompt_in_a_real_terminal(session, tmp_path):
    """`/` opens the search prompt in a real terminal; what is typed filters the table live, Esc clears it."""
    name, env, rc_file, screen = _start(session, tmp_path, 120, 40, "--simulate", "demo")
    assert wait_for(lambda: "GPU processes" in screen(), timeout=20), screen()
    assert "search pid, user or command" not in screen()
    _tmux("send-keys", "-t", name, "/", env=env)
    assert wait_for(lambda: "search pid, user or command" in screen(), timeout=20), screen()
    _tmux("send-keys", "-t", name, "finetune", env=env)
    assert wait_for(lambda: "1 of 9 GPU processes" in screen() and "search 'finetune'" in screen(), timeout=20), \
        screen()
    _tmux("send-keys", "-t", name, "Escape", env=env)
    assert wait_for(lambda: any(line.strip().startswith("9 GPU processes") for line in screen().splitlines()),
                    timeout=20), screen()
    _tmux("send-keys", "-t", name, "q", env=env)
    assert wait_for(lambda: rc_file.exists() and rc_file.read_text().endswith("\n"), timeout=20), screen()
    assert rc_file.read_text().strip() == "rc=0"
