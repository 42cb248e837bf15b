"""Where the history database is: the recorder's path, and the one readers find.

Kept apart from store.py (which imports sqlite3) so that a command that finds no database, the
live view most of all, pays nothing for it.
"""

from __future__ import annotations

import os
from pathlib import Path

SYSTEM_DB = Path("/var/lib/vramkit/history.db")  # root's recorder: the service


def user_db() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "vramkit" / "history.db"


def default_path() -> Path:
    """Where `vram record` writes: $VRAM_DB, else SYSTEM_DB for root, else the user's own."""
    env = os.environ.get("VRAM_DB")
    if env:
        return Path(env)
    return SYSTEM_DB if os.geteuid() == 0 else user_db()


def reader_path(named: str | Path | None = None) -> Path:
    """The database readers (report, job, top, kill --idle, doctor) use: the one named (--db,
    then $VRAM_DB), else the recorder's default for this user if it exists, else the system's
    (the service root runs) if that exists, else the user's default (to say nothing is there)."""
    named = named or os.environ.get("VRAM_DB")
    if named:
        return Path(named)
    own = default_path()
    if os.path.lexists(own) or not os.path.lexists(SYSTEM_DB):
        return own
    return SYSTEM_DB


def found_path(named: str | Path | None = None) -> Path | None:
    """reader_path, or None when nothing was named and no database exists (nothing to say)."""
    path = reader_path(named)
    if named or os.environ.get("VRAM_DB"):
        return path
    return path if os.path.lexists(path) else None
