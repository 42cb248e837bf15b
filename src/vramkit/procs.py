"""The host side of a process, read straight from /proc.

vramkit runs on Linux GPU servers; reading /proc directly costs a few file reads per pid and
keeps `vram status` fast (importing psutil alone costs ~30 ms). Process names and command
lines come from other users, so they are stripped of control characters here, once.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from dataclasses import dataclass

_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "Z": "zombie", "T": "stopped",
           "t": "tracing-stop", "X": "dead", "I": "idle", "W": "paging", "P": "parked"}
_CONTAINER_RE = re.compile(r"(?:docker|containerd|crio|libpod|cri-containerd)[-/:]?([0-9a-f]{64})"
                           r"|/([0-9a-f]{64})(?:\.scope)?$", re.M)
_CONTROL = dict.fromkeys([*range(0x00, 0x20), *range(0x7F, 0xA0)], "?")
NOT_VISIBLE = "not visible in /proc: the process exited, or runs in another PID namespace"


def sanitize(text: str) -> str:
    """Replace control characters (terminal escapes, newlines, tabs...) with '?'."""
    return text.translate(_CONTROL)


@dataclass
class HostProcess:
    pid: int
    user: str | None
    uid: int | None
    command: str
    name: str
    state: str
    start_time: float  # unix time
    cpu_time: float  # seconds of user + system CPU
    rss: int  # bytes
    ppid: int
    container: str | None


def _boot_time() -> float:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    return 0.0


class ProcessTable:
    """Reads processes from /proc, remembering what does not change between reads."""

    def __init__(self) -> None:
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._boot = _boot_time()
        self._users: dict[int, str] = {}
        self._previous_cpu: dict[tuple[int, float], tuple[float, float]] = {}

    def user_name(self, uid: int) -> str:
        name = self._users.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)  # a uid with no name here, e.g. from a container's /etc/passwd
            self._users[uid] = name
        return name

    def read(self, pid: int) -> HostProcess | str:
        """The process, or a one-line reason why its host side cannot be read."""
        base = f"/proc/{pid}"
        try:
            with open(f"{base}/stat", "rb") as f:
                stat = f.read()
            uid = os.stat(base).st_uid
        except FileNotFoundError:
            return NOT_VISIBLE
        except PermissionError:
            return "no permission to read /proc for this pid"
        except OSError as e:
            return f"cannot read /proc/{pid}: {e.strerror}"
        close = stat.rfind(b")")
        name = sanitize(stat[stat.find(b"(") + 1:close].decode(errors="replace"))
        fields = stat[close + 2:].split()
        # fields[0] is stat field 3 (state); see proc(5) for the numbering.
        state = _STATES.get(fields[0].decode(), fields[0].decode())
        ppid = int(fields[1])
        cpu_time = (int(fields[11]) + int(fields[12])) / self._ticks
        start_time = self._boot + int(fields[19]) / self._ticks
        rss = int(fields[21]) * self._page
        command = self._cmdline(base) or f"[{name}]"
        return HostProcess(pid=pid, user=self.user_name(uid), uid=uid, command=command, name=name,
                           state=state, start_time=start_time, cpu_time=cpu_time, rss=rss,
                           ppid=ppid, container=self._container(base))

    def cpu_percent(self, proc: HostProcess, now: float | None = None) -> float:
        """CPU % since the previous read of this process, else averaged over its lifetime (as ps)."""
        now = time.time() if now is None else now
        key = (proc.pid, proc.start_time)
        previous = self._previous_cpu.get(key)
        self._previous_cpu[key] = (proc.cpu_time, now)
        if previous is not None and now > previous[1]:
            return max(0.0, 100 * (proc.cpu_time - previous[0]) / (now - previous[1]))
        lifetime = now - proc.start_time
        return 100 * proc.cpu_time / lifetime if lifetime > 0 else 0.0

    @staticmethod
    def _cmdline(base: str) -> str:
        try:
            with open(f"{base}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            return ""
        return sanitize(raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace"))

    @staticmethod
    def _container(base: str) -> str | None:
        try:
            with open(f"{base}/cgroup") as f:
                text = f.read()
        except OSError:
            return None
        match = _CONTAINER_RE.search(text)
        if not match:
            return None
        return (match.group(1) or match.group(2))[:12]
