"""vram config: the effective defaults and where each came from."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from .commands import COMMANDS
from .common import HelpFormatter

if TYPE_CHECKING:
    from .common import Subparsers

HELP = COMMANDS["config"]
DESCRIPTION = """\
Show the defaults vram uses and where each value came from: default (built in), /etc
(/etc/vramkit/config.toml, the machine's), ~ (~/.config/vramkit/config.toml, yours; also
$XDG_CONFIG_HOME), env (VRAM_<SECTION>_<KEY>, e.g. VRAM_TOP_INTERVAL=1). A later source
overrides an earlier one, key by key, and a command's flag overrides them all. The format and
every key: docs/config.md.

  [top]
  interval = 1              # seconds, or "1s"
  theme = "light"
  columns = ["gpu", "pid", "user", "memory", "util", "command"]
  [thresholds]
  memory_warn = 60
  [pick]
  prefer = "pack"

examples:
  vram config                      every key, its value and its source
  vram config --json               the same as JSON
  VRAM_TOP_THEME=light vram config the environment's value, shown as 'env'
"""


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("config", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON: {key: {value, source}} and the files read")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..config import KEYS, SYSTEM_FILE, load, show_value, user_file
    from ..procs import sanitize
    from ..render.style import style_for, terminal_width
    from ..render.text_width import fit

    config = load()
    if args.json:
        print(json.dumps({"keys": {k.name: {"value": _plain(config[k.name]), "source": config.sources[k.name],
                                           "env": k.env} for k in KEYS},
                          "files": {source: sanitize(str(path)) for source, path in config.files}},
                         indent=2, ensure_ascii=True))  # the path replaced as the text view shows it
        return 0
    style = style_for(sys.stdout, getattr(args, "no_color", False))
    read = {path for _, path in config.files}
    for path in (SYSTEM_FILE, user_file()):
        state = "read" if path in read else "not there"
        print(style.paint(f"{sanitize(str(path))}: {state}", "dim"))  # $XDG_CONFIG_HOME may hold anything
    width = terminal_width()
    rows = [(k.name, show_value(k, config[k.name]), config.sources[k.name], k.help) for k in KEYS]
    key_w = max(len(r[0]) for r in rows)
    value_w = min(32, max(len(r[1]) for r in rows))
    print(style.paint(f"{'KEY':<{key_w}}  {'VALUE':<{value_w}}  {'FROM':<7}  MEANING", "bold"))
    for name, value, source, meaning in rows:
        line = f"{name:<{key_w}}  {fit(value, value_w):<{value_w}}  {source:<7}  {meaning}"
        print(style.paint(fit(line, width), "bold") if source != "default" else fit(line, width))
    return 0


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value
