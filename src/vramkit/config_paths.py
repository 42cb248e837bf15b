"""Where vram's config files are: the machine's, then the user's ($XDG_CONFIG_HOME honoured).

Apart from config.py (which reads them) because the language of vram's messages comes first from
the config's ui.language: i18n.py asks whether a file may set it at all without importing the
config reader (dataclasses, typing, the TOML parser: ~15 ms that `vram status` piped does not
otherwise pay).
"""

from __future__ import annotations

import os
import stat

SYSTEM_PATH = "/etc/vramkit/config.toml"
MAX_BYTES = 64 * 1024  # config.py refuses a larger file


def user_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "vramkit", "config.toml")


def may_mention(word: bytes) -> bool:
    """Whether a config file may set a key named `word`: one holds the word, or one is there that
    is not a plain regular file this user can read (the config reader decides about those, and
    says what is wrong). False when neither file mentions it, as when there are none."""
    for path in (SYSTEM_PATH, user_path()):
        try:  # as config.py opens it: never through a symlink, never waiting on a FIFO
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return True
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return True
            data = os.read(fd, MAX_BYTES + 1)
        except OSError:
            return True
        finally:
            os.close(fd)
        if word in data or len(data) > MAX_BYTES:
            return True
    return False
