"""The audit log of `vram kill`: one JSON object a line for every signal, refusal and outcome.

Where: $VRAM_AUDIT_LOG if set; as root /var/log/vramkit/audit.log; otherwise
$XDG_STATE_HOME/vramkit/audit.log (default ~/.local/state/vramkit/audit.log). The file is
created with mode 0600 (and tightened to 0600 if it was looser), its directory 0700, and it is
only ever appended to: one write() per line, so concurrent vram runs do not interleave lines.

The log is opened before anything is signalled: when it cannot be written, nothing is.
"""

from __future__ import annotations

import json
import os
import stat
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import VramkitError
from .procs import user_name

SYSTEM_LOG = Path("/var/log/vramkit/audit.log")


class AuditError(VramkitError, OSError):
    """The audit log cannot be opened or written. The message names the file."""


def default_path() -> Path:
    env = os.environ.get("VRAM_AUDIT_LOG")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return SYSTEM_LOG
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "vramkit" / "audit.log"


def caller() -> dict[str, Any]:
    """Who is acting: uid, user name, pid; and the sudo user behind root, when there is one."""
    uid = os.getuid()
    out: dict[str, Any] = {"uid": uid, "user": user_name(uid), "pid": os.getpid()}
    if os.geteuid() != uid:
        out["euid"] = os.geteuid()
    if uid == 0 and os.environ.get("SUDO_USER"):
        out["sudo_user"] = os.environ["SUDO_USER"]
    return out


class AuditLog:
    def __init__(self, path: Path | str | None = None, context: dict[str, Any] | None = None):
        self.path = Path(path) if path is not None else default_path()
        # Fields every line carries: caller, host, simulated scenario, the command line.
        self.context = {"caller": caller(), "host": os.uname().nodename, **(context or {})}
        self._fd: int | None = None

    def open(self) -> AuditLog:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # O_NOFOLLOW: as root, never append to whatever a planted symlink points at.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise AuditError(f"cannot write the audit log {self.path}: {e.strerror or e}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise AuditError(f"cannot write the audit log {self.path}: not a regular file")
        if stat.S_IMODE(info.st_mode) != 0o600 and info.st_uid == os.geteuid():
            os.fchmod(fd, 0o600)
        self._fd = fd
        return self

    def write(self, event: str, **fields: Any) -> None:
        fd = self._fd if self._fd is not None else self.open()._fd
        assert fd is not None  # open() set it, or raised
        now = time.time()
        record = {"time": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds"),
                  "timestamp": round(now, 3), "event": event, **self.context, **fields}
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        try:
            os.write(fd, line)
        except OSError as e:
            raise AuditError(f"cannot write the audit log {self.path}: {e.strerror or e}") from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> AuditLog:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def read(path: Path | str | None = None) -> list[dict[str, Any]]:
    """Every record of an audit log, oldest first (for tests and reports)."""
    p = Path(path) if path is not None else default_path()
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
