"""Real processes standing in for a scenario's made-up ones (`vram sim spawn`).

A bundled scenario's processes are synthetic: pids no process has. vram shows them from the
scenario's own fields, but gpustat and nvitop look each pid up in /proc (psutil) and drop the
ones they cannot find, so through the shim they list no processes. `Placeholders` starts one
real process per synthetic pid (a `sleep`; where the scenario says zombie, a process whose main
thread has exited while another runs, as the zombies holding GPU memory on real servers are; a
stopped process where it says stopped) and rewrites the scenario with their pids as `source: real`: the
memory, GPUs and timelines stay the scenario's, the host side (user, command, age, CPU, RSS) is
now the placeholder's own, read from /proc by every program alike.

Each placeholder dies with the process that started it (PR_SET_PDEATHSIG), and `close()` ends
and reaps them all.
"""

from __future__ import annotations

import copy
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from ..procs import read_stat

# What a synthetic process says about its host side; a real one's comes from /proc.
HOST_FIELDS = ("user", "uid", "command", "age", "state", "cpu_percent", "rss", "ppid", "container", "cgroup")
SLEEP_SECONDS = "2147483647"  # as long as sleep can count: the placeholder ends when we end it
STATE_WAIT_S = 5.0  # how long a zombie or stopped placeholder may take to reach its state
# A synthetic zombie runs no kernels (nvml/sim.py samples none for it). Its placeholder is a real
# pid, whose state the simulator does not read, so it would default to its GPU's utilization: say 0.
ZOMBIE_ENGINES = {"sm_util": 0, "mem_util": 0, "enc_util": 0, "dec_util": 0}


# A zombie that holds GPU memory, as they do on real servers: its main thread has exited ('Z' in
# /proc/PID/stat, <defunct> in ps) while another thread still runs, so the driver (and the
# simulator, procs.is_defunct) keep its memory. A fully exited, unreaped child would free it.
_ZOMBIE = ("import ctypes, threading, time\n"
           "threading.Thread(target=time.sleep, args=(2**31,)).start()\n"
           "ctypes.CDLL(None).pthread_exit(None)\n")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _sleep_command() -> list[str]:
    sleep = shutil.which("sleep")
    return [sleep, SLEEP_SECONDS] if sleep else [sys.executable, "-c", "import signal; signal.pause()"]


def _proc_state(pid: int) -> str | None:
    stat = read_stat(pid)
    return None if stat is None else stat.state


class Placeholders:
    """`with Placeholders(data) as p:` p.scenario is `data` (a scenario's JSON object) with every
    synthetic process replaced by a real one; p.pids maps each scenario pid to its placeholder's."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.source = data
        self.scenario: dict[str, Any] = {}
        self.pids: dict[int, int] = {}
        self._children: list[subprocess.Popen[bytes]] = []
        self._wanted: dict[int, tuple[str, ...]] = {}  # pid -> the /proc state it must reach

    def start(self) -> Placeholders:
        scenario = copy.deepcopy(self.source)
        try:
            for process in scenario.get("processes", []):
                if process.get("source", "synthetic") != "synthetic":
                    continue  # real already, or 'missing' (a pid /proc must not see)
                pid = int(process["pid"])
                if pid not in self.pids:
                    self.pids[pid] = self._spawn(str(process.get("state", "running")))
                process["pid"] = self.pids[pid]
                process["source"] = "real"
                if process.get("state") == "zombie":  # its state goes below: its idleness must not
                    process.update(ZOMBIE_ENGINES)
                for key in HOST_FIELDS:
                    process.pop(key, None)
            self._await_states()
        except BaseException:
            self.close()
            raise
        scenario["description"] = (f"{scenario.get('description', '')} [its processes are real placeholders "
                                   "started by vram sim spawn]").strip()
        self.scenario = scenario
        return self

    def _spawn(self, state: str) -> int:
        argv = [sys.executable, "-c", _ZOMBIE] if state == "zombie" else _sleep_command()
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent, close_fds=True)
        self._children.append(child)
        if state == "stopped":
            os.kill(child.pid, signal.SIGSTOP)
        if state in ("zombie", "stopped"):
            self._wanted[child.pid] = ("Z",) if state == "zombie" else ("T", "t")
        return child.pid

    def _await_states(self) -> None:
        """Back only once each zombie has exited and each stopped one is stopped: a reader that
        comes at once must see them so."""
        deadline = time.monotonic() + STATE_WAIT_S
        for pid, wanted in self._wanted.items():
            while _proc_state(pid) not in wanted and time.monotonic() < deadline:
                time.sleep(0.005)

    def close(self) -> None:
        for child in self._children:
            if child.returncode is None:
                try:
                    os.kill(child.pid, signal.SIGKILL)  # a stopped one too; a zombie ignores it
                except ProcessLookupError:
                    pass
        for child in self._children:
            child.wait()
        self._children = []

    def __enter__(self) -> Placeholders:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
