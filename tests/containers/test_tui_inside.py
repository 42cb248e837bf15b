"""`vram top` inside a real PID namespace (the fixtures: conftest.py here): the container's own
GPU process is numbered as a host pid NVML lists for a process outside, and the view never mixes
the two."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import uuid

import pytest
from helpers import clean_env, wait_for

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.mark.slow
def test_top_inside_a_container_keeps_a_host_pid_apart_from_the_same_number_here(
        container, scenario, dev, tmp_path):
    outside = scenario.outside
    # the container's GPU process is pid `outside` here: the number NVML gives a process outside it
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl", at=outside)
    path = scenario({(host, here): {"0": "6GiB"}})
    audit = tmp_path / "audit.log"
    env = clean_env(TMUX=None, TMUX_TMPDIR=str(tmp_path), VRAM_AUDIT_LOG=str(audit), HOME=str(tmp_path),
                    XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    name = f"vramtop-{uuid.uuid4().hex[:8]}"
    argv = container.argv("top", "--simulate", str(path), "--interval", "3600")
    rc_file = tmp_path / "rc"

    def tmux(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=20, env=env)

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", name).stdout

    script = f"{shlex.join(argv)}; echo rc=$? > {shlex.quote(str(rc_file))}"
    assert tmux("new-session", "-d", "-s", name, "-x", "160", "-y", "40", "sh", "-c", script).returncode == 0
    try:
        assert wait_for(lambda: "GPU processes" in screen() and "host pid" in screen(), timeout=30), screen()
        lines = screen().splitlines()
        [mine] = [line for line in lines if line.split()[:2] == ["0", str(outside)]]
        [theirs] = [line for line in lines if line.split()[:1] == ["1"] and f"host pid {outside}," in line]
        assert theirs.split()[1] == "-", theirs  # never the host pid in the PID column
        # the detail view of that pid here is the container's process: GPU 0 only
        tmux("send-keys", "-t", name, "Home", "Enter")
        assert wait_for(lambda: "its own utilization" in screen(), timeout=20), screen()
        detail = screen().splitlines()
        start = next(i for i, line in enumerate(detail) if "its own utilization" in line)
        section = detail[start + 1: next(i for i, line in enumerate(detail) if "GPU memory, last" in line)]
        assert any("GPU 0 " in line for line in section) and not any("GPU 1 " in line for line in section), detail
        # the row of the host pid: k refuses it; nothing signalled, nothing audited
        tmux("send-keys", "-t", name, "Escape", "Down", "k")
        assert wait_for(lambda: "not signalled" in screen(), timeout=20), screen()
        assert not audit.exists()
        assert wait_for(lambda: subprocess.run(["kill", "-0", str(host)]).returncode == 0)
        tmux("send-keys", "-t", name, "q")
        assert wait_for(lambda: rc_file.exists() and rc_file.read_text().endswith("\n"), timeout=20), screen()
        assert rc_file.read_text().strip() == "rc=0"
    finally:
        tmux("kill-server")
