"""Where vram's config files are: the machine's, then the user's ($XDG_CONFIG_HOME honoured).

Apart from config.py (which reads them) because the language of vram's messages comes first from
the config's ui.language: i18n.py asks whether there is a file at all (two stat calls) without
importing the config reader (dataclasses, typing, the TOML parser), which `vram status` does not
otherwise need.
"""

from __future__ import annotations

import os

SYSTEM_PATH = "/etc/vramkit/config.toml"


def user_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "vramkit", "config.toml")
