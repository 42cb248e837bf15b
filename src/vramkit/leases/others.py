"""Leases shared between users where no admin has acted (docs/leases.md, "Where leases live").

A directory every user writes to must belong to root: its owner could remove anyone's leases. On
a machine where no admin has created the shared /tmp/vramkit-leases, each user keeps their leases
in a directory of their own beside it, /tmp/vramkit-leases-UID (0755: only they write it), and
every vram reads every such directory, read-only, as another user's input: the directory opened
once without following a symlink, at most MAX_ENTRIES names listed, MAX_DIRS directories (and
MAX_DIRS_PER_OWNER of one owner) read per look. Nothing in them is removed: their owner's next
vram does that. A name another user took first (a squatted /tmp/vramkit-leases-UID) costs
nothing: this user's directory is then /tmp/vramkit-leases-UID-RANDOM, which readers find just
the same (any directory named vramkit-leases or vramkit-leases-*, whoever owns it: a lease
counts as its file's owner's, whatever directory or file says).

Without a lock every user shares, launchers of different users do not take turns; a GPU is still
never given twice, because every lease is checked after it is written (reserve.create_lease) by
reading every directory again: of two launchers that chose the same GPU, the second to write
finds the first's lease and chooses again.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from ..i18n import _
from .directory import made_dir
from .settings import MAX_DIRS, MAX_DIRS_PER_OWNER


def own_dir(shared_dir: Path) -> tuple[Path | None, str | None]:
    """This user's lease directory beside `shared_dir` (SHARED_DIR + "-UID"), created 0755 when
    missing; when another user took that name first, one of this user's with a random suffix
    (found again next time by its prefix and owner). (path, None), or (None, why not)."""
    root, base = shared_dir.parent, f"{shared_dir.name}-{os.getuid()}"
    path = root / base
    why = _ours(path, create=True)
    if why is None:
        return path, None
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if entry.name.startswith(base + "-") and _ours(root / entry.name, create=False) is None:
                    return root / entry.name, None
        made = Path(tempfile.mkdtemp(prefix=base + "-", dir=root))
        os.chmod(made, 0o755)
    except OSError as e:
        return None, _("{why}; cannot make another in {path}: {error}").format(why=why, path=root, error=e.strerror)
    return made, None


def _ours(path: Path, create: bool) -> str | None:
    """None when `path` is a real directory of this user that nobody else may write (made so when
    missing and `create`), else why not."""
    st = made_dir(path, 0o755, create)  # readable by every user, whatever the umask: that is the point
    if isinstance(st, str):
        return st
    if st.st_uid != os.getuid():
        from ..procs import user_name

        return _("{path} belongs to {user}").format(path=path, user=user_name(st.st_uid))
    if stat.S_IMODE(st.st_mode) != 0o755:
        with contextlib.suppress(OSError):
            os.chmod(path, 0o755)  # ours: others must read it, and nobody else write it
    return None


def foreign_dirs(root: Path, base: str, mine: Path) -> list[str]:
    """Names in `root` of the lease directories to read besides `mine`: `base` itself and every
    `base`-*, real directories only (not followed), in name order, at most MAX_DIRS_PER_OWNER of
    one owner and MAX_DIRS in all. A name can change into a symlink after this: the reader opens
    each with O_NOFOLLOW (state.read_state)."""
    found: list[tuple[str, int]] = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                name = entry.name
                if (name != base and not name.startswith(base + "-")) or len(name) > 255:
                    continue
                if mine.parent == root and name == mine.name:
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        found.append((name, st.st_uid))
    except OSError:
        return []
    names: list[str] = []
    per_owner: dict[int, int] = {}
    for name, owner in sorted(found):
        per_owner[owner] = per_owner.get(owner, 0) + 1
        if per_owner[owner] > MAX_DIRS_PER_OWNER:
            continue
        names.append(name)
        if len(names) >= MAX_DIRS:
            break
    return names
