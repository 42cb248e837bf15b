"""Plain helpers the test modules share: run `vram` the way a user does (a child process, a clean
environment), build scenarios and compute what a scenario file says each GPU should show,
straight from the JSON (never from vram's own output), and start real processes.

Test modules import them with `from helpers import ...` (tests/ is on sys.path, as for
conftest.py); the fixtures that use them live in conftest.py.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import functools
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import sqlite3
import ssl
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import vramkit
from vramkit.units import parse_duration, parse_size

SCENARIO_DIR = Path(vramkit.__file__).parent / "nvml" / "scenarios"
ESCAPE = "\x1b"
BANNED_IMPORTS = ("torch", "textual", "psutil", "pynvml")


# ---------------------------------------------------------------- running the command

# The running test's own lease directory (conftest.py's autouse fixture `own_lease_dir` sets it
# before each test, and a session-wide one before collection): clean_env() points VRAM_LEASE_DIR at
# it, so no `vram pick` or `vram run` a test starts touches the machine's shared /tmp/vramkit-leases
# (run as root, then as nobody, they left it owned by nobody, and vram refuses such a directory).
# Sticky and world-writable, as vram makes a shared one, so vram run as another user can use it.
TEST_LEASE_DIR: str | None = None


def clean_env(**extra: str | None) -> dict[str, str]:
    """The caller's environment without anything that changes vram's behaviour, with the
    simulated clock pinned to t=0 and VRAM_LEASE_DIR the test's own lease directory (never the
    machine's shared one). `NAME=None` removes NAME."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VRAM_") and k not in ("NO_COLOR", "COLUMNS", "LINES", "FORCE_COLOR")}
    env["VRAM_LANG"] = os.environ.get("VRAM_LANG", "en")  # the suite's language (conftest pins English)
    env["VRAM_SIM_TIME"] = "0"
    if TEST_LEASE_DIR is not None:
        env["VRAM_LEASE_DIR"] = TEST_LEASE_DIR
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["TERM"] = "xterm-256color"
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def zh_env(**extra: str | None) -> dict[str, str]:
    """clean_env() for a test of the Chinese output: VRAM_LANG=zh_CN (the suite pins English)."""
    return clean_env(**{"VRAM_LANG": "zh_CN", **extra})


def vram_argv(*args: str, python_flags: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, *python_flags, "-m", "vramkit", *map(str, args)]


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.rc == 0, f"exit {self.rc}: {self.err}"
        return json.loads(self.out)

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


def run_vram(*args: str, env: dict[str, str] | None = None, timeout: float = 30,
             python_flags: tuple[str, ...] = ()) -> Result:
    """Run `vram ARGS` with stdout and stderr piped (not a terminal), stdin closed."""
    proc = subprocess.run(vram_argv(*args, python_flags=python_flags), capture_output=True, text=True,
                          env=env if env is not None else clean_env(), timeout=timeout,
                          stdin=subprocess.DEVNULL)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def read_until_closed(sock) -> bytes:
    """Everything a socket's peer sends until it closes the connection (or resets it)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def read_terminal(master: int, timeout: float, what: str) -> bytes:
    """Everything written to a pseudo-terminal until every process has closed its end."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError(f"`{what}` did not finish in {timeout}s")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every process closed its end of the terminal
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def run_sql(db: Path, sql: str) -> None:
    """Run a script on a SQLite file in a connection of its own, as the file's owner editing it would."""
    c = sqlite3.connect(db)
    try:
        c.executescript(sql)
    finally:
        c.close()


def line_of(path: str | Path, marker: str) -> int:
    """The number of the first line of `path` (a test's __file__) that holds `marker`, passing
    over the lines that ask for it (`line_of(__file__, "...")` holds the marker too)."""
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if marker in line and "line_of(" not in line:
            return number
    raise AssertionError(marker)


def causal_lm_step(net: Any, optimizer: Any, vocab: int, batch: int, seq: int) -> Callable[[int], None]:
    """One step of a transformers causal LM on random token ids, for trace_memory: a training step
    when there is an optimizer, else a prefill as generate() does it (no grad, one logit kept)."""
    import torch

    def step(_: int) -> None:
        ids = torch.randint(0, vocab, (batch, seq))
        if optimizer is None:
            with torch.no_grad():
                net(input_ids=ids, use_cache=True, logits_to_keep=1)
            return
        loss = net(input_ids=ids, labels=ids).loss
        loss.backward()
        del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def closed_after(make: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """For a fixture that starts what its test asks for (`yield from closed_after(FakeHost)`):
    yields start(*args), which makes one; each made is closed at teardown, in order."""
    made: list[Any] = []

    def start(*args: Any, **kwargs: Any) -> Any:
        made.append(make(*args, **kwargs))
        return made[-1]
    yield start
    for thing in made:
        thing.close()


def reap(proc: subprocess.Popen) -> None:
    """A child a test started, gone for sure: killed if still running, waited for, pipes closed."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def run_vram_tty(*args: str, env: dict[str, str] | None = None, columns: int = 160,
                 timeout: float = 30) -> Result:
    """Run `vram ARGS` with stdout on a real pseudo-terminal (stdin closed, stderr piped)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(vram_argv(*args), stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=subprocess.PIPE, env=env if env is not None else clean_env())
    os.close(slave)
    try:
        chunks = [read_terminal(master, timeout, f"vram {' '.join(args)}")]
        err = proc.stderr.read().decode()
        rc = proc.wait(timeout=timeout)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    return Result(rc, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n"), err)


def assert_one_line_error(result: Result, rc: int, *needles: str) -> str:
    """Exit code `rc`, nothing on stdout, exactly one line on stderr containing every needle."""
    assert result.rc == rc, f"exit {result.rc}, wanted {rc}; stderr: {result.err!r}"
    assert "Traceback" not in result.err
    assert result.out == ""
    lines = result.err_lines
    assert len(lines) == 1, f"wanted one line on stderr, got {lines!r}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


# ---------------------------------------------------------------- scenarios

def scenario_data(name: str) -> dict[str, Any]:
    return json.loads((SCENARIO_DIR / f"{name}.json").read_text())


def minimal_scenario() -> dict[str, Any]:
    """A small valid scenario: two GPUs, two processes. Tests break one thing in it."""
    return {
        "name": "tiny",
        "gpus": [
            {"uuid": "GPU-00000000-0000-4000-8000-000000000000", "pci_bus_id": "00000000:07:00.0",
             "memory_total": "80GiB", "utilization": 50},
            {"uuid": "GPU-00000000-0000-4000-8000-000000000001", "pci_bus_id": "00000000:0F:00.0",
             "memory_total": "80GiB", "utilization": 0},
        ],
        "processes": [
            {"pid": 101, "user": "ann", "command": "python a.py", "gpus": {"0": "10GiB"}},
            {"pid": 102, "user": "ben", "command": "python b.py", "gpus": {"1": "5GiB"}},
        ],
    }


def timeline_at(value: Any, t: float, convert=lambda v: v) -> Any:
    """A scenario value at time t, read independently of vram's code: static, or a
    {"timeline": [[t, v], ...], "repeat": s, "interpolate": "linear"|"step"}."""
    if not (isinstance(value, dict) and "timeline" in value):
        return convert(value)
    points = [(float(pt), convert(v)) for pt, v in value["timeline"]]
    if "repeat" in value:
        t = t % parse_duration(value["repeat"])
    if t <= points[0][0]:
        return points[0][1]
    step = value.get("interpolate", "linear") == "step"
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if step:
            if t < t1:  # a step's new value holds from its point's time on
                return v0
        elif t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def process_alive(proc: dict[str, Any], t: float) -> bool:
    start = parse_duration(proc.get("start_at", 0))
    exit_at = parse_duration(proc["exit_at"]) if "exit_at" in proc else None
    return start <= t and (exit_at is None or t < exit_at)


def expected_gpus(data: dict[str, Any], t: float = 0) -> list[dict[str, Any]]:
    """What `vram status --json` must show for each whole (non-MIG) GPU of a scenario whose
    GPUs give no memory_used: used = what its live processes hold."""
    out = []
    for i, g in enumerate(data["gpus"]):
        assert "memory_used" not in g and "mig" not in g, "expected_gpus() is for simple GPUs"
        procs = {}
        for p in data.get("processes", []):
            if str(i) in p["gpus"] and process_alive(p, t):
                procs[p["pid"]] = {"memory": int(timeline_at(p["gpus"][str(i)], t, parse_size)),
                                   "user": p.get("user"), "command": p.get("command")}
        total = parse_size(g["memory_total"])
        reserved = parse_size(g.get("memory_reserved", 0))
        used = sum(p["memory"] for p in procs.values())
        out.append({
            "index": i, "uuid": g["uuid"], "name": g["name"], "pci_bus_id": g["pci_bus_id"],
            "memory_total": total, "memory_reserved": reserved, "memory_used": used,
            "memory_free": total - reserved - used,
            "utilization": int(timeline_at(g["utilization"], t)),
            "memory_utilization": int(timeline_at(g["memory_utilization"], t)),
            "temperature": int(timeline_at(g["temperature"], t)),
            "power_draw": float(timeline_at(g["power"], t)),
            "power_limit": float(g["power_limit"]),
            "processes": procs,
        })
    return out


# ---------------------------------------------------------------- text output

GPU_LINE = re.compile(r"^ ?(\d+)  ")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def status_blocks(text: str) -> dict[int, list[str]]:
    """`vram status` text -> {GPU index: [its GPU line, then the lines under it]}."""
    blocks: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines()[1:]:  # [0] is the banner
        m = GPU_LINE.match(line)
        if m:
            current = blocks.setdefault(int(m.group(1)), [])
            current.append(line)
        elif line.startswith("      ") and current is not None:
            current.append(line)
        else:
            current = None  # the summary line
    return blocks


def gib_pair(used: int, total: int) -> str:
    """How the status view writes used/total."""
    return f"{used / 1024**3:.1f}/{total / 1024**3:.1f}GiB"


def sanitized(text: str) -> str:
    """Control characters (C0, DEL, C1) replaced by '?', as the design asks; written here
    independently of vramkit.procs.sanitize."""
    return "".join("?" if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 else ch for ch in text)


def has_nvidia_driver() -> bool:
    """Whether NVML can be loaded here (then the no-driver tests do not apply)."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# ---------------------------------------------------------------- real processes

class Children:
    """Real child processes for a test; every one is killed and reaped at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, **kwargs)
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - would be a kernel problem
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


def proc_state(pid: int) -> str | None:
    """The one-letter state of a pid from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2:].split()[0].decode()


def wait_for(predicate, timeout: float = 10, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# ---------------------------------------------------------------- vram kill: other users, answers, strays

# Run a command as `nobody` (uid/gid 65534, no supplementary groups): setpriv execs it, same pid.
AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def run_vram_as(prefix: tuple[str, ...], *args: str, env: dict[str, str] | None = None,
                timeout: float = 30) -> Result:
    """Run `vram ARGS` under a prefix such as AS_NOBODY (stdin closed, output piped)."""
    proc = subprocess.run([*prefix, *vram_argv(*args)], capture_output=True, text=True,
                          env=env if env is not None else clean_env(), timeout=timeout, stdin=subprocess.DEVNULL)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_vram_answering(*args: str, answer: str, env: dict[str, str] | None = None, timeout: float = 30) -> Result:
    """Run `vram ARGS` with stdin on a pseudo-terminal (so it may ask) and type `answer` into it;
    stdout and stderr are piped."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(vram_argv(*args), stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env if env is not None else clean_env(), start_new_session=True)
    os.close(slave)
    try:
        os.write(master, answer.encode())
        out, err = proc.communicate(timeout=timeout)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Result(proc.returncode, out.decode(), err.decode())


def start_ticks(pid: int) -> int | None:
    """Start time of pid in clock ticks (its identity with the pid), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return int(raw[raw.rfind(b")") + 2:].split()[19])


class Strays:
    """Processes a test starts that are not its children (orphans): killed at teardown if the pid
    still belongs to the same process (pid and start time)."""

    def __init__(self) -> None:
        self.known: list[tuple[int, int]] = []

    def add(self, pid: int) -> int:
        ticks = start_ticks(pid)
        assert ticks is not None, f"pid {pid} is gone already"
        self.known.append((pid, ticks))
        return pid

    def cleanup(self) -> None:
        for pid, ticks in self.known:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if start_ticks(pid) == ticks:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(fd)


def real_gpu_scenario(placements: dict[int, dict[str, str]], utilization=(30, 0), **top: Any) -> dict[str, Any]:
    """Two 40 GiB GPUs (utilization per GPU); {pid: {"0": "1GiB"}} puts real pids on them.
    `top` adds top-level fields, e.g. device_nodes."""
    return {
        "name": "kill-test",
        "gpus": [{"uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}", "pci_bus_id": f"00000000:0{i}:00.0",
                  "memory_total": "40GiB", "utilization": u} for i, u in enumerate(utilization)],
        "processes": [{"pid": pid, "source": "real", "gpus": gpus} for pid, gpus in placements.items()],
        **top,
    }


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def start_sleeper(children: Children) -> subprocess.Popen:
    """`sleep 600`, once it has exec'd (so /proc shows its own name and owner)."""
    proc = children.start(["sleep", "600"])
    assert wait_for(lambda: cmdline(proc.pid) == b"sleep\x00600\x00")
    return proc


IGNORE_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               "print('ready', flush=True); time.sleep(600)")


def start_python(children: Children, code: str, *args: str) -> subprocess.Popen:
    """A python child running `code`, which prints 'ready' when set up (e.g. its signal handlers);
    its stdout stays readable through proc.stdout."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    children.procs.append(proc)  # killed and reaped at teardown
    assert proc.stdout.readline().strip() == b"ready"
    return proc


# ---------------------------------------------------------------- vram pick / vram run: leases, launchers

@dataclass
class Leasing:
    """A private lease directory for a test (never the machine's shared one)."""

    dir: Path

    def env(self, **extra: str | None) -> dict[str, str]:
        """clean_env() pointing VRAM_LEASE_DIR at this directory (unless `extra` says otherwise)."""
        return clean_env(**{"VRAM_LEASE_DIR": str(self.dir), **extra})

    def leftovers(self) -> list[str]:
        """Lease and queue files still there (the directory's own lock file does not count)."""
        if not self.dir.exists():
            return []
        return sorted(n for n in os.listdir(self.dir) if n.startswith(("lease-", "wait-", ".tmp-")))


class Groups:
    """Processes each started in a new session (its own process group). At teardown every group
    is killed whole, so what they started (a launcher's job, orphans of a killed launcher) dies
    too; then the leaders are reaped."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - would be a kernel problem
                pass


# ---------------------------------------------------------------- who runs the suite

IS_ROOT = os.geteuid() == 0

# The test files whose results depend on who runs the suite: conftest.py marks their tests `uid`
# (so do tests that skip for root or for everyone else, and those using shared_dir), and CI runs
# the marked tests a second time as an ordinary user (`make test-user`, `pytest -m uid`). A file
# that asks who it runs as (needs_root, IS_ROOT, run_vram_as, AS_NOBODY, os.geteuid/getuid,
# setpriv, su, chown) belongs here: tests/test_suite_rules.py checks it.
UID_FILES = frozenset({
    "test_backends_contract.py", "test_config.py", "test_docs_examples.py",
    "test_history_hostile.py", "test_history_workloads.py", "test_holders.py",
    "test_i18n_kill_pick.py", "test_idle_history.py", "test_kill.py", "test_killing.py", "test_kill_recheck.py",
    "test_kill_safety.py",
    "test_kill_zombie_busy.py", "test_leases_locks.py", "test_leases_security.py", "test_leases_swap.py",
    "test_leases_cross_user.py",
    "test_notices.py", "test_policy.py", "test_protect_names.py", "test_ps_env.py", "test_simulated_real_processes.py",
    "test_record_cli.py", "test_config_hostile.py", "test_workload_hostile.py", "test_holders_hostile.py",
    "test_kubelet_hostile.py",
    "test_run.py", "test_run_concurrency.py",
    "test_run_leases.py", "test_shim_security.py",
    "test_sim_spawn_output.py", "test_text_width.py", "test_top_history.py", "test_workload.py",
    "test_workload_trust.py", "test_procs_table_hostile.py", "test_output_files.py",
    "test_leases_directory_hostile.py", "test_kill_redteam_fixes.py", "test_history_redteam_fixes.py",
    "test_fleet_hosts.py",
})


def chromium_sandbox_args() -> list[str]:
    """Chromium refuses to start as root with its sandbox on: the flag that turns it off for root.
    It changes how the browser starts, not what a page does in it, so a test that starts Chromium
    does not depend on who runs it (its file need not be in UID_FILES for this)."""
    return ["--no-sandbox"] if IS_ROOT else []


def chromium_env(tmp_path_factory) -> dict[str, str]:
    """chromedriver's environment (Chromium's with it): their temporary files, among them the
    org.chromium.Chromium.* directories Chromium leaves behind, in a new directory of the test
    run's, not in /tmp (`webdriver.ChromeService(CHROMEDRIVER, env=chromium_env(tmp_path_factory))`).
    A short path (~50 bytes under xdist): Chromium does not start with a TMPDIR of 64 bytes or
    more (a socket of its, a few levels below, must fit a socket address), as a tmp_path named
    after a long test is."""
    return {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chr"))}


def plant(path: Path, kind: str) -> Path:
    """What another user could leave at an output path in a shared /tmp: a symlink to a file of root's
    (returned, holding "keep me"), or a FIFO (kind "fifo")."""
    victim = path.parent / "root-owned.txt"
    victim.write_text("keep me\n")
    if kind == "symlink":
        path.symlink_to(victim)
    else:
        os.mkfifo(path)
    return victim


@contextlib.contextmanager
def mounted_tmpfs(size: str, prefix: str):
    """A tmpfs of `size` (mount(8)'s "6m") mounted on a new directory for a test, mode 0700, and
    unmounted after; the test is skipped where it cannot be mounted (not root, no mount here)."""
    import tempfile

    import pytest

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = Path(tempfile.mkdtemp(prefix=prefix))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        path.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        path.rmdir()


def needs_root(why: str):
    """A skip mark for a test that needs root, e.g. `@needs_root("to run vram as another user")`:
    the suite runs as root (CI) and as an ordinary user, and says why a test did not run."""
    import pytest

    return pytest.mark.skipif(not IS_ROOT, reason=f"needs root {why}")


# ---------------------------------------------------------------- vram serve

def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a server that must be told its port (another process
    can take it before the server binds it: try again then); also a port where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"  # the server (Debian package 'prometheus')
PATIENCE = 90  # seconds to wait for Prometheus and its scrapes: the machine is shared (not a timing test)


def start_prometheus(groups: Groups, directory: Path, targets: list[str], interval: str = "1s") -> str:
    """A real Prometheus (started in `groups`) scraping `targets` ("127.0.0.1:PORT") as job vram
    every `interval`, its config, data and log in `directory`; its URL once it answers. A free
    port can be taken between asking and binding, by another test's Prometheus too: it is tried
    again on another, and a Prometheus counts as started only with this data directory."""
    config = directory / "prometheus.yml"
    config.write_text(f"global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n"
                      f"  evaluation_interval: {interval}\nscrape_configs:\n  - job_name: vram\n"
                      f"    static_configs:\n      - targets: [{', '.join(repr(t) for t in targets)}]\n")
    data = directory / "data"
    for _attempt in range(3):
        port = free_port()
        with (directory / f"prometheus-{port}.log").open("w") as log:
            proc = groups.start([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={data}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        wait_for(functools.partial(_started_or_gone, proc, url, data), timeout=PATIENCE, interval=0.1)
        if proc.poll() is None and _prometheus_with(url, data):
            return url
    raise AssertionError("Prometheus did not start: " + "\n".join(
        p.read_text()[-2000:] for p in directory.glob("prometheus-*.log")))


def _started_or_gone(proc: subprocess.Popen, url: str, data: Path) -> bool:
    return proc.poll() is not None or _prometheus_with(url, data)


def _prometheus_with(url: str, data: Path) -> bool:
    """Whether the Prometheus answering at `url` is the one started with this data directory."""
    try:
        with urllib.request.urlopen(url + "/api/v1/status/flags", timeout=5) as r:
            flags = json.loads(r.read())
    except (OSError, ValueError):
        return False
    return isinstance(flags, dict) and flags.get("data", {}).get("storage.tsdb.path") == str(data)


@contextlib.contextmanager
def serving(service: Any, **server_kwargs: Any) -> Iterator[Any]:
    """vram serve in this process: `service` (serve.service.Service) started, its HTTP server
    (serve.http.VramHTTPServer, with `server_kwargs`, e.g. authorize=) on a free port in a thread,
    yielded once the first reading is in; the server and the service closed after."""
    from vramkit.serve.http import VramHTTPServer

    service.start()
    server = VramHTTPServer(("127.0.0.1", 0), service, **server_kwargs)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        assert service.wait_for_first(30)
        yield server
    finally:
        server.shutdown()
        server.server_close()
        service.close()


class Served:
    """A `vram serve` process on a free port (--listen 127.0.0.1:0 unless `listen` says otherwise),
    reading every `interval`; `context` (an ssl.SSLContext) and `auth` ((user, password)) for a
    server with --web-config; `env`: variables added to clean_env() (e.g.
    {"VRAM_SERVE_CLIENT_TIMEOUT": "2"}; None removes one). It waits up to 5 s for the first reading."""

    def __init__(self, *args: str, listen: str = "127.0.0.1:0", context: ssl.SSLContext | None = None,
                 auth: tuple[str, str] | None = None, env: dict[str, str | None] | None = None,
                 interval: str = "0.2s"):
        self.proc = subprocess.Popen(vram_argv("serve", "--listen", listen, "--interval", interval, *args),
                                     env=clean_env(**(env or {})), stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        self.first_line = line = self.proc.stderr.readline()
        found = re.search(r"(https?)://(\[[0-9a-f:]+\]|[0-9.]+):(\d+)/", line)
        assert found, line
        self.port = int(found.group(3))
        host = found.group(2) if found.group(2) not in ("0.0.0.0", "[::]") else "127.0.0.1"
        self.base = f"{found.group(1)}://{host}:{self.port}"
        self.context = context
        self.auth = auth
        wait_for(self.has_read, timeout=5, interval=0.05)

    @property
    def url(self) -> str:
        """Its page's address (the base and a slash)."""
        return self.base + "/"

    def has_read(self) -> bool:
        """Whether it has its first reading: it prints its address once it listens, before it has
        read the machine (/healthz 503 until then; 200, or 401 when asked without a password)."""
        try:
            return self.get("/healthz")[0] != 503
        except OSError:
            return False

    def get(self, path: str, method: str = "GET", auth: tuple[str, str] | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
        request = urllib.request.Request(self.base + path, method=method, headers=headers or {})
        auth = auth or self.auth
        if auth:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.context) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=10)


def crowded_scenario(gpus: int = 8, per_gpu: int = 200) -> dict[str, Any]:
    """A big shared server for `vram serve`'s page: `gpus` A100-80GB with `per_gpu` made-up
    processes each, of 23 users; every other process's SM% steps each half second (a busy
    server's per-process numbers move at every reading), the rest hold still."""
    processes = []
    for i in range(gpus * per_gpu):
        p: dict[str, Any] = {"pid": 100_000 + i, "user": f"user{i % 23:02d}", "command": f"python train_{i}.py",
                             "cpu_percent": float(i % 400), "age": f"{1 + i % 50}h",
                             "gpus": {str(i % gpus): f"{40 + (i * 37) % 300}MiB"}}
        if i % 2 == 0:
            p["sm_util"] = {"timeline": [[0, i % 100], [0.5, (i * 7) % 100]], "interpolate": "step", "repeat": 1}
        else:
            p["sm_util"] = 0 if i % 5 == 1 else 30
        processes.append(p)
    return {"name": "crowded", "processes": processes,
            "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "memory_total": "80GiB", "utilization": 90, "temperature": 60,
                      "power": 300, "power_limit": 400} for _ in range(gpus)]}


def in_demo_view(check, size: tuple[int, int] = (120, 40), **app_args) -> None:
    """Run `await check(app, pilot)` in the demo scenario's view (headless, of `size`), after its
    first frame."""
    import asyncio

    from vramkit.machine import open_machine
    from vramkit.tui.app import TopApp

    machine = open_machine("demo")
    app = TopApp(machine.snapshot, interval=3600, **app_args)

    async def main():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await check(app, pilot)

    try:
        asyncio.run(main())
    finally:
        machine.close()


async def settled(pilot, read, most: int = 40, wait: float = 0.05):
    """What read() gives once it gives the same three times, `wait` seconds apart (at most `most`
    pauses): on a loaded machine (the suite in parallel) a layout can take more than the pauses a
    quiet one needs, a fit asked for after the next refresh comes a refresh later, and a layout
    under way is not its end. A wrong layout that stays is still seen."""
    seen = [read()]
    for _ in range(most):
        await pilot.pause(wait)
        seen.append(read())
        if len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]:
            break
    return seen[-1]


async def click_after_the_wheel(pilot, footer, notches: int, word: str, x: int, y: int) -> None:
    """Turn the wheel down `notches` times over the keys line (at x, y), then click the first cell
    of `word` as the line now shows it (cells, not characters: CJK takes two)."""
    from rich.cells import cell_len
    from textual import events

    for _ in range(notches):
        await pilot._post_mouse_events([events.MouseScrollDown], offset=(x, y))
    await pilot.pause()
    line = footer.render_line(0).text
    assert word in line, line
    await pilot.click(offset=(cell_len(line[:line.index(word)]), y))
    await pilot.pause()
