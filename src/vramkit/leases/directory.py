"""Which directory holds the leases: $VRAM_LEASE_DIR; the shared /tmp/vramkit-leases when it is
safe (root's or yours, a real directory; only root creates it); else this user's own
/tmp/vramkit-leases-UID, every other user's read beside it (others.py); else a private one."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ..i18n import N_, _
from ..procs import user_name
from .errors import LeaseError
from .locking import LeaseDir
from .settings import ENV_DIR, SHARED_DIR

ADMIN_FIX = N_("an admin can make one directory shared by all users: sudo scripts/install-system.sh, or "
                "sudo systemd-tmpfiles --create /etc/tmpfiles.d/vramkit.conf with contrib/tmpfiles.d/vramkit.conf")


def made_dir(path: Path, mode: int, create: bool, parents: bool = False) -> os.stat_result | str:
    """`path`'s own status (never through a symlink) when it is a real directory, made with `mode`
    (whatever the umask) when missing and `create` (`parents`: its parents too); else why not."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return _("{path} does not exist").format(path=path)
        try:
            if parents:
                os.makedirs(path.parent, exist_ok=True)
            os.mkdir(path, 0o700)
            os.chmod(path, mode)
            st = os.lstat(path)
        except FileExistsError:
            st = os.lstat(path)  # created by someone else just now
        except OSError as e:
            return _("cannot create {path}: {error}").format(path=path, error=e.strerror)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return _("{path} is not a directory").format(path=path)
    return st


def _usable(path: Path, shared: bool, create: bool = True) -> str | None:
    """None when `path` can hold leases, else why not (`create`: make it when missing)."""
    # sticky when shared: users can only remove their own
    st = made_dir(path, 0o1777 if shared else 0o700, create, parents=True)
    if isinstance(st, str):
        return st
    mine = st.st_uid == os.getuid()
    if shared and not mine and st.st_uid != 0:
        # Its owner could remove anyone's leases (a GPU then goes to two jobs) or lock others out:
        # a shared directory must be root's (contrib/tmpfiles.d/vramkit.conf creates it at boot).
        return _("{path} belongs to {user}, not to root or you (its owner could remove your leases; an admin "
                 "should create it root-owned)").format(path=path, user=user_name(st.st_uid))
    if not os.access(path, os.W_OK | os.X_OK):
        return _("{path} is not writable by you").format(path=path)
    return None


def lease_dir(env: Mapping[str, str] | None = None, shared_dir: Path = SHARED_DIR) -> LeaseDir:
    """$VRAM_LEASE_DIR, else the shared `shared_dir` (/tmp/vramkit-leases), else a per-user directory."""
    env = os.environ if env is None else env
    chosen = env.get(ENV_DIR)
    if chosen:
        path = Path(chosen)
        if not path.is_absolute():  # relative to each process's own directory: two runs, two lease sets
            raise LeaseError(_("{variable}: give an absolute path (a relative one names another directory for "
                               "each working directory), got {value}").format(variable=ENV_DIR, value=repr(chosen)))
        why = _usable(path, shared=True)
        if why:
            raise LeaseError(f"{ENV_DIR}: {why}")
        return LeaseDir(path, shared=True)
    # Only root creates the shared directory: one an ordinary user made would be theirs, and its
    # owner could remove every other user's leases (so others would not use it).
    why = _usable(shared_dir, shared=True, create=os.geteuid() == 0)
    if why is None:
        return LeaseDir(shared_dir, shared=True, others_in=shared_dir.parent, others_base=shared_dir.name)
    from .others import own_dir

    own, why_own = own_dir(shared_dir)
    if own is not None:
        return LeaseDir(own, shared=True, others_in=shared_dir.parent, others_base=shared_dir.name)
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        private = Path(runtime) / "vramkit-leases"
    else:
        try:
            private = Path.home() / ".cache" / "vramkit" / "leases"
        except RuntimeError:  # no HOME and no passwd entry
            raise LeaseError(_("no usable lease directory: {why}; {why_own}; set {variable}").format(
                why=why, why_own=why_own, variable=ENV_DIR)) from None
    why_private = _usable(private, shared=False)
    if why_private:
        raise LeaseError(_("no usable lease directory: {why}; {why_own}; {why_private}").format(
            why=why, why_own=why_own, why_private=why_private))
    return LeaseDir(private, shared=False,
                    note=_("leases are per-user ({path}): {why}; {why_own}; other users' vram runs cannot see "
                           "them ({fix})").format(path=private, why=why, why_own=why_own, fix=_(ADMIN_FIX)))
