"""Where the history database is: the recorder's path, and the one readers find.

Kept apart from store.py (which imports sqlite3) so that a command that finds no database, the
live view most of all, pays nothing for it.

A database others may read (root's, in /var/lib/vramkit) is two files: the live one, which only
its owner can open (PRIVATE/NAME beside the name: /var/lib/vramkit/private/history.db), and a
read-only copy the recorder publishes under the name itself. Every path here is the name; store.py
opens the live file when the caller can reach it and the published copy otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

SYSTEM_DB = Path("/var/lib/vramkit/history.db")  # root's recorder: the service
PRIVATE = "private"  # the 0700 directory beside a published database that holds the live one


def user_db() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "vramkit" / "history.db"


def live_path(path: str | Path) -> Path:
    """Where the live database behind a published name is (whether or not there is one)."""
    path = Path(path)
    return path.parent / PRIVATE / path.name


def recorded(path: str | Path) -> bool:
    """Whether there is a database at `path` this user can see: the name, or a live database
    behind it (which only its owner can see)."""
    return os.path.lexists(path) or os.path.lexists(live_path(path))


def named_path(named: str | Path) -> Path:
    """A database path someone named (--db, $VRAM_DB), or a one-line RequestError for one no file
    can have: a name or path longer than the system allows (every file call on it would fail)."""
    raw = os.fsencode(named)
    if not raw or len(raw) >= 4096 or any(len(part) > 255 for part in raw.split(b"/")):
        from ..errors import RequestError
        from ..i18n import _
        from ..procs import sanitize

        raise RequestError(_("{path}: no file can have this name (too long, or empty)").format(
            path=sanitize(os.fsdecode(raw[:60])) + ("..." if len(raw) > 60 else "")), param="db")
    return Path(named)


def default_path() -> Path:
    """Where `vram record` writes: $VRAM_DB, else SYSTEM_DB for root, else the user's own."""
    env = os.environ.get("VRAM_DB")
    if env:
        return named_path(env)
    return SYSTEM_DB if os.geteuid() == 0 else user_db()


def reader_path(named: str | Path | None = None) -> Path:
    """The database readers (report, job, top, kill --idle, doctor) use: the one named (--db,
    then $VRAM_DB), else the recorder's default for this user if it exists, else the system's
    (the service root runs) if that exists, else the user's default (to say nothing is there)."""
    named = named or os.environ.get("VRAM_DB")
    if named:
        return named_path(named)
    own = default_path()
    if recorded(own) or not recorded(SYSTEM_DB):
        return own
    return SYSTEM_DB


def found_path(named: str | Path | None = None) -> Path | None:
    """reader_path, or None when nothing was named and no database exists (nothing to say)."""
    path = reader_path(named)
    if named or os.environ.get("VRAM_DB"):
        return path
    return path if recorded(path) else None
