"""XID errors from the kernel log, for the GPUs whose driver refuses NVML's XID events (vram
serve's fallback: NVML's event API is the first choice, nvml/backend.py's XidWatcher).

The NVIDIA driver writes each XID to the kernel log as

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.

`/dev/kmsg` is read from its end (what came before serve started is not counted, as NVML's events
are not replayed), one record per read, by a daemon thread that waits half a second when there
is nothing new. It is readable by root (or by everyone where kernel.dmesg_restrict is 0); where
it is not, nothing is counted and the GPUs' XID series stay absent (N/A, never 0).

The log is the kernel's, but a line in it can come from any process that may write to
/dev/kmsg (root's): only the XID number and the PCI address are taken from a line, each bounded.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from pathlib import Path

READ_BYTES = 8192  # a /dev/kmsg record is at most ~1 KB; a read of a plain file (tests) takes lines
MAX_PENDING = 65536  # bytes of a line not yet ended, at most (a plain file's)
WAIT = 0.5  # seconds between looks when there is nothing new
_XID = re.compile(rb"NVRM: Xid \(PCI:([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?\): (\d{1,5})\b")

PciKey = tuple[int, int, int]  # PCI domain, bus, device


def pci_key(bus_id: str | None) -> PciKey | None:
    """NVML's PCI bus id ('00000000:3B:00.0') as the kernel log's address names it."""
    found = re.fullmatch(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.[0-7]", bus_id or "")
    return None if found is None else (int(found[1], 16), int(found[2], 16), int(found[3], 16))


class KernelXids:
    """The XIDs the kernel log reports after `start()`, per GPU (by PCI address): how many of each
    number, and the last one with when it was read. `watching` is False (and `error` says why)
    where the log cannot be read."""

    def __init__(self, path: Path):
        self.path = path
        self.watching = False
        self.error: str | None = None
        self.counts: dict[PciKey, dict[int, int]] = {}
        self.last: dict[PciKey, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._fd: int | None = None

    def start(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            self.error = f"{self.path}: {e.strerror or e}"
            return
        try:
            os.lseek(fd, 0, os.SEEK_END)  # from now on
        except OSError as e:
            os.close(fd)
            self.error = f"{self.path}: {e.strerror or e}"
            return
        self._fd = fd
        self.watching = True
        threading.Thread(target=self._read, name="vram-xid-kernel-log", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def read(self) -> tuple[dict[PciKey, dict[int, int]], dict[PciKey, tuple[int, float]]]:
        with self._lock:
            return {k: dict(c) for k, c in self.counts.items()}, dict(self.last)

    def _read(self) -> None:
        fd = self._fd
        assert fd is not None
        pending = b""
        try:
            while not self._stop.is_set():
                try:
                    chunk = os.read(fd, READ_BYTES)
                except BlockingIOError:
                    self._stop.wait(WAIT)
                    continue
                except OSError as e:
                    if e.errno == errno.EPIPE:  # records overwritten before they were read: go on
                        continue
                    self.error = f"{self.path}: {e.strerror or e}"
                    return
                if not chunk:  # a plain file's end
                    self._stop.wait(WAIT)
                    continue
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                if len(pending) > MAX_PENDING:
                    pending = b""
                for line in lines:  # (a /dev/kmsg record ends with its newline)
                    self._take(line)
        finally:
            self.watching = False
            os.close(fd)

    def _take(self, line: bytes) -> None:
        found = _XID.search(line[:1024])
        if found is None:
            return
        key = (int(found[1], 16), int(found[2], 16), int(found[3], 16))
        xid = int(found[4])
        with self._lock:
            per = self.counts.setdefault(key, {})
            per[xid] = per.get(xid, 0) + 1
            self.last[key] = (xid, time.time())
