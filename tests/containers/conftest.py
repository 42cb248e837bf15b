"""vram inside a container, for the tests in this folder: a real PID namespace (`unshare --pid
--fork --mount-proc`, needing root; entered with nsenter) whose processes hold fake device
nodes, and a scenario whose pids are the host's (`pid_namespace`: the tests' own namespace) with
a process of it numbered as a host pid NVML lists, so that a host pid taken for a pid here shows.

Fixtures: `container` (a new namespace; `new_container()` makes one in the environment the test
set), `dev` (the device nodes), `env` (vram's environment) and `scenario` (placements -> a
scenario file; `scenario.outside`: the host pid NVML lists for a process outside the container).
A namespace needs root: a test that makes one is marked `uid` (tests/conftest.py)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import Result, clean_env, real_gpu_scenario, vram_argv, wait_for

HERE = Path(__file__).parent

# pid 1 of the namespace: reads lines from stdin; "at N" makes the next process pid N here
# (/proc/sys/kernel/ns_last_pid), "run [PATH...]" starts a process holding PATHs open and prints
# its pid here. It reaps its children, as an init does.
INIT = r"""
import os, signal, sys
def reap(*_):
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
signal.signal(signal.SIGCHLD, reap)
HOLD = "import os, sys, time; f = [open(p) for p in sys.argv[1:]]; os.write(1, b'ready\\n'); time.sleep(600)"
for line in sys.stdin:
    word, *args = line.split()
    if word == "at":
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(int(args[0]) - 1))
        continue
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        os.execv(sys.executable, [sys.executable, "-c", HOLD, *args])
    os.close(w)
    while (chunk := os.read(r, 16)) and not chunk.endswith(b'\n'):  # 'ready\n': its files are open
        pass
    os.close(r)
    print(pid, flush=True)
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent == HERE and "new_container" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.uid)  # a namespace needs root: as anyone else these skip


def _why_not() -> str | None:
    """Why a PID namespace cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root for a new PID namespace (unshare --pid)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs {tool}(1) (util-linux)"
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True,
                           timeout=30)
    if probe.returncode != 0:
        return f"unshare --pid --fork --mount-proc failed here: {probe.stderr.strip()[:200]}"
    return None


class Container:
    """A real PID namespace with its own /proc: processes started in it, vram run in it."""

    def __init__(self, children, own_proc: bool = True) -> None:
        """own_proc False: the namespace keeps the host's /proc (made without --mount-proc)."""
        self.unshare = subprocess.Popen(["unshare", "--pid", "--fork", *(["--mount-proc"] if own_proc else []),
                                         "--kill-child", sys.executable, "-c", INIT], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        children.procs.append(self.unshare)  # killed at teardown: --kill-child takes the namespace with it
        assert wait_for(lambda: self._kids(self.unshare.pid))
        self.init = self._kids(self.unshare.pid)[0]

    @staticmethod
    def _kids(pid: int) -> list[int]:
        try:
            return [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return []

    def start(self, *paths: Path, at: int | None = None) -> tuple[int, int]:
        """A process of the container holding `paths` open: (its pid here, its host pid)."""
        assert self.unshare.stdin is not None and self.unshare.stdout is not None
        if at is not None:
            self.unshare.stdin.write(f"at {at}\n")
        self.unshare.stdin.write(" ".join(["run", *map(str, paths)]) + "\n")
        self.unshare.stdin.flush()
        inner = int(self.unshare.stdout.readline())
        assert at is None or inner == at
        for host in self._kids(self.init):
            nspid = next(line for line in Path(f"/proc/{host}/status").read_text().splitlines()
                         if line.startswith("NSpid:")).split()[1:]
            if int(nspid[-1]) == inner:
                return inner, host
        raise AssertionError(f"no host pid for pid {inner} of the namespace")

    def argv(self, *args: str) -> list[str]:
        """`vram args...` entered into the namespace (its PID and mount namespaces: its /proc)."""
        return ["nsenter", "--target", str(self.init), "--pid", "--mount", "--", *vram_argv(*args)]

    def serve(self, *args: str, env: dict[str, str], children) -> str:
        """`vram serve args...` in the namespace on a free port: its base URL. The namespace's end
        (the container fixture's teardown) takes it with it."""
        proc = subprocess.Popen(self.argv("serve", "--listen", "127.0.0.1:0", "--interval", "0.2s", *args), env=env,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        children.procs.append(proc)
        assert proc.stderr is not None
        first_line = proc.stderr.readline()
        port = re.search(r"http://127\.0\.0\.1:(\d+)/", first_line)
        assert port, first_line
        return f"http://127.0.0.1:{port.group(1)}"

    def vram(self, *args: str, env: dict[str, str]) -> Result:
        proc = subprocess.run(self.argv(*args), capture_output=True, text=True, env=env, timeout=60,
                              stdin=subprocess.DEVNULL)
        return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def new_container(children) -> Callable[..., Container]:
    """Makes a container (its init inherits this process's environment as the test set it);
    new_container(own_proc=False): one that keeps the host's /proc."""
    why = _why_not()
    if why:
        pytest.skip(why)
    return lambda own_proc=True: Container(children, own_proc)


@pytest.fixture
def container(new_container) -> Container:
    return new_container()


@pytest.fixture
def dev(tmp_path) -> Path:
    d = tmp_path / "dev"
    d.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (d / name).write_text("")
    return d


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"), HOME=str(tmp_path), XDG_CONFIG_HOME=None,
                     COLUMNS="200")


class Scenarios:
    """{(host pid, pid here): {"0": "6GiB"}} as a scenario of real processes, numbered as the host
    numbers them, on two GPUs busy `utilization` %, plus the made-up process `outside` on GPU 1
    (another container's, held by none here)."""

    outside = 4242

    def __init__(self, write_scenario, dev: Path) -> None:
        self.write_scenario, self.dev = write_scenario, dev

    def __call__(self, placements: dict[tuple[int, int], dict[str, str]], utilization=(30, 0)) -> Path:
        data = real_gpu_scenario({host: gpus for (host, _), gpus in placements.items()}, utilization,
                                 device_nodes=f"{self.dev}/nvidia*", pid_namespace=os.readlink("/proc/self/ns/pid"))
        for entry, (_, here) in zip(data["processes"], placements):
            entry["ns_pid"] = here
        data["processes"].append({"pid": self.outside, "gpus": {"1": "3GiB"}, "user": "bob",
                                  "command": "python other.py"})
        path: Path = self.write_scenario(data)
        return path


@pytest.fixture
def scenario(write_scenario, dev) -> Scenarios:
    return Scenarios(write_scenario, dev)


class TopInTmux:
    """`vram top` of a scenario run in the container, in a tmux server of the test's own (a real
    terminal): `send(*keys)`, `screen()`, and `finish()` (q, then its exit status); `audit` is the
    audit log it writes."""

    def __init__(self, tmp_path: Path) -> None:
        self.audit = tmp_path / "audit.log"
        self.rc_file = tmp_path / "rc"
        self.name = f"vramtop-{uuid.uuid4().hex[:8]}"
        self.env = clean_env(TMUX=None, TMUX_TMPDIR=str(tmp_path), VRAM_AUDIT_LOG=str(self.audit),
                             HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "xdg"))

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=20, env=self.env)

    def start(self, container: Container, path: Path) -> TopInTmux:
        argv = container.argv("top", "--simulate", str(path), "--interval", "3600")
        script = f"{shlex.join(argv)}; echo rc=$? > {shlex.quote(str(self.rc_file))}"
        assert self.tmux("new-session", "-d", "-s", self.name, "-x", "160", "-y", "40", "sh", "-c",
                         script).returncode == 0
        return self

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name).stdout

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def finish(self) -> str:
        self.send("q")
        assert wait_for(lambda: self.rc_file.exists() and self.rc_file.read_text().endswith("\n"),
                        timeout=20), self.screen()
        return self.rc_file.read_text().strip()


@pytest.fixture
def top_in_tmux(tmp_path) -> Iterator[TopInTmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    view = TopInTmux(tmp_path)
    try:
        yield view
    finally:
        view.tmux("kill-server")
