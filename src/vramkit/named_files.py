"""Files a config names: certificates, keys and password files, for vram serve's web config
(serve/webconfig.py) and vram fleet --hosts-config (fleet_hosts.py).

Read bounded, and never a FIFO or a device (opened non-blocking, checked before reading). A symlink
is followed (/etc/ssl/certs and /etc/letsencrypt/live hold them), to a regular file only. A file
every user may write is refused (anyone could slip in their own CA, or their password), and a
secret (a password, a private key) every user may read, as ssh refuses a private key.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import VramkitError
from .i18n import _


class Refused(VramkitError):
    """Why a named file was not read, one line in the reader's language: the caller names the
    config and the key that named it."""


def read_named(path: Path, limit: int, secret: bool = False, trusted: bool = False) -> bytes:
    """`path`'s bytes (at most `limit` of them), or Refused. `trusted`: a file whose words vram
    acts on (a config naming the files to read, and where to send them): as root, only root's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise Refused(_("cannot read {path}: {error}").format(path=path, error=e.strerror)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(_("{path} is not a regular file").format(path=path))
        if trusted and os.geteuid() == 0 and st.st_uid != 0:
            # (its owner could name a file only root may read, a password sent to a host of their choice)
            raise Refused(_("{path} belongs to uid {uid}: as root, vram reads only a config of root's").format(
                path=path, uid=st.st_uid))
        if st.st_mode & stat.S_IWOTH:
            raise Refused(_("{path} is writable by every user: chmod o-w {path}").format(path=path))
        if secret and st.st_mode & stat.S_IROTH:
            raise Refused(_("{path} is readable by every user: chmod o-r {path}").format(path=path))
        if st.st_size > limit:
            raise Refused(_("{path} is larger than {size} KiB").format(path=path, size=limit // 1024))
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)[:limit]
    finally:
        os.close(fd)
