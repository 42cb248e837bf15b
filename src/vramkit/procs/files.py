"""Bounded reads of a process's own files in /proc: its command line and name (comm); its cgroup
is read by workload.py.
Another user's text, so bounded, and sanitized before it is returned as text."""

from __future__ import annotations

import os

from .text import sanitize

MAX_CMDLINE_BYTES = 256 * 1024  # a command line is another user's text: bounded (ARG_MAX is ~2 MiB)
MAX_CGROUP_BYTES = 64 * 1024
MAX_COMM_BYTES = 64  # comm is at most 16 bytes (TASK_COMM_LEN); a kernel thread's name up to 64


def read_proc_file(path: str, limit: int) -> bytes | None:
    """At most `limit` bytes of a /proc file (None: unreadable). Plain os reads: a one-shot
    `vram status` reads two such files per process, and open() costs twice as much."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            chunk = os.read(fd, min(limit - size, 8192))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def cmdline(pid: int) -> str:
    """The command line, its arguments joined by spaces, sanitized; "" when unreadable or empty
    (a kernel thread, a zombie)."""
    raw = read_proc_file(f"/proc/{int(pid)}/cmdline", MAX_CMDLINE_BYTES)
    return sanitize(raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")) if raw else ""


def comm(pid: int) -> str | None:
    """/proc/PID/comm as the kernel has it (not sanitized: the simulator hands it on as NVML
    would; sanitize before printing); None when there is no such process."""
    raw = read_proc_file(f"/proc/{int(pid)}/comm", MAX_COMM_BYTES)
    return None if raw is None else raw.decode(errors="replace").strip()

