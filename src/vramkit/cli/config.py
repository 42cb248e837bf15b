"""vram config: the effective defaults and where each came from."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from ..i18n import N_, _, pgettext
from .commands import COMMANDS
from .common import HelpFormatter

if TYPE_CHECKING:
    from .common import Subparsers

HELP = COMMANDS["config"]
# Translators: keep the file's example and the command lines; translate the prose and what each
# example does.
DESCRIPTION = N_("""\
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
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("config", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("--json", action="store_true", help=N_("print JSON: {key: {value, source}} and the files read"))
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..config import KEYS, SYSTEM_FILE, load, show_value, user_file
    from ..procs import sanitize
    from ..render.style import style_for, terminal_width
    from ..render.text_width import cells, fit, pad

    config = load()
    if args.json:
        print(json.dumps({"keys": {k.name: {"value": _plain(config[k.name]), "source": config.sources[k.name],
                                           "env": k.env} for k in KEYS},
                          "files": {source: sanitize(str(path)) for source, path in config.files}},
                         indent=2, ensure_ascii=True))  # the path replaced as the text view shows it
        return 0
    style = style_for(sys.stdout, getattr(args, "no_color", False))
    read = {path for _source, path in config.files}
    for path in (SYSTEM_FILE, user_file()):
        shown = sanitize(str(path))  # $XDG_CONFIG_HOME may hold anything
        print(style.paint((_("{path}: read") if path in read else _("{path}: not there")).format(path=shown), "dim"))
    width = terminal_width()
    rows = [(k.name, show_value(k, config[k.name]), config.sources[k.name], _(k.help)) for k in KEYS]
    heading = (pgettext("config column", "KEY"), pgettext("config column", "VALUE"),
               pgettext("config column", "FROM"), pgettext("config column", "MEANING"))
    key_w = max(cells(r[0]) for r in [*rows, heading])
    value_w = max(cells(heading[1]), min(32, max(cells(r[1]) for r in rows)))
    from_w = max(7, cells(heading[2]))
    print(style.paint(f"{pad(heading[0], key_w)}  {pad(heading[1], value_w)}  {pad(heading[2], from_w)}  {heading[3]}",
                      "bold"))
    for name, value, source, meaning in rows:
        line = f"{pad(name, key_w)}  {pad(fit(value, value_w), value_w)}  {pad(source, from_w)}  {meaning}"
        print(style.paint(fit(line, width), "bold") if source != "default" else fit(line, width))
    return 0


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value
