"""Defaults in a config file: /etc/vramkit/config.toml (the machine's), then
~/.config/vramkit/config.toml (yours; $XDG_CONFIG_HOME is honoured), then VRAM_<SECTION>_<KEY>
in the environment, then a command's flags; each later source overrides the earlier ones, key by
key. Every value remembers where it came from (`vram config` shows it).

The files are other people's text on a shared machine: read without following a symlink or
blocking, at most MAX_BYTES; as root both files, and every directory above them, must be root's
and writable by nobody else (sudo may keep $HOME; $XDG_CONFIG_HOME may point anywhere). A bad
file is one line naming the file and the key (a RequestError: exit 2). TOML through tomllib
(tomli on Python 3.10), imported only when a file exists.
"""

from __future__ import annotations

import importlib
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_paths import MAX_BYTES, SYSTEM_PATH, user_path
from .errors import RequestError
from .i18n import N_, _
from .procs import sanitize
from .units import parse_duration

SYSTEM_FILE = Path(SYSTEM_PATH)
DEFAULT, SYSTEM, USER, ENV, FLAG = "default", "/etc", "~", "env", "flag"

# The live view's process columns, in their default order (tui/rows.py draws them; a test keeps
# the two lists the same).
TOP_COLUMNS = ("gpu", "pid", "user", "memory", "share", "sm", "bw", "enc", "dec", "util", "cpu", "rss", "elapsed",
               "flags", "command")


def _seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(_("must be a number of seconds or a duration like 2s, 5m"))
    try:
        seconds = float(value) if isinstance(value, (int, float)) else parse_duration(str(value))
    except OverflowError:  # an integer of hundreds of digits: TOML allows it
        seconds = float("inf")
    if not 0 < seconds <= 7 * 86400:
        raise ValueError(_("must be more than 0 and at most 7 days"))
    return seconds


def _percent(value: Any) -> float:
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,6})?", value):
        value = float(value)  # from the environment (VRAM_THRESHOLDS_MEMORY_WARN=80)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise ValueError(_("must be a number from 0 to 100"))
    return float(value)


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.lower() in ("1", "true", "yes", "on")  # from the environment
    raise ValueError(_("must be true or false"))


def _choice(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(_("must be one of {choices}").format(choices=", ".join(choices)))
        return str(value)
    return check


def _language(value: Any) -> str:
    from .i18n import CATALOGS, ENGLISH, catalog_language

    known = ("auto", ENGLISH, *CATALOGS)
    if isinstance(value, str) and (value.strip().lower() in ("auto", ENGLISH) or catalog_language(value)):
        return value.strip()
    raise ValueError(_("must be one of {choices}").format(choices=", ".join(known)))


def _columns(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # from the environment: comma-separated
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(_("must be a list of column names from {columns}").format(columns=", ".join(TOP_COLUMNS)))
    unknown = [v for v in value if v not in TOP_COLUMNS]
    if unknown:
        raise ValueError(_("unknown column {name} (known: {columns})").format(
            name=repr(sanitize(unknown[0])[:40]), columns=", ".join(TOP_COLUMNS)))
    if len(set(value)) != len(value):
        raise ValueError(_("names a column twice"))
    return tuple(value)


def _printable(text: str, expected: str) -> str:
    """`text` without the white space around it; refused when it holds a character sanitize would
    replace: float() and the size parser skip some of them (\x1c-\x1f, U+2028), and `vram config`
    prints the value back as it was written."""
    text = text.strip()
    if sanitize(text) != text:
        raise ValueError(_("{expected}, without control or invisible characters").format(expected=expected))
    return text


def _min_free(value: Any) -> str:
    from .allocate import parse_min_free  # the pick's own parser: the value means what --min-free means

    expected = _("must be a size like 20GiB or a share like 60%")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(expected)
    text = _printable(str(value), expected)
    parse_min_free(text)
    return text


def _max_util(value: Any) -> str:
    from .allocate import parse_max_util

    expected = _("must be a percentage 0-100, or 'any'")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(expected)
    text = _printable(str(value), expected)
    parse_max_util(text)
    return text


@dataclass(frozen=True)
class Key:
    """One setting: its section.name, default, parser (raises ValueError with the reason) and meaning
    (marked N_: `vram config` translates it when it shows it)."""

    name: str
    default: Any
    parse: Callable[[Any], Any]
    help: str

    @property
    def env(self) -> str:
        return "VRAM_" + self.name.replace(".", "_").upper()


KEYS: tuple[Key, ...] = (
    Key("top.interval", 2.0, _seconds, N_("seconds between the live view's refreshes (--interval)")),
    Key("top.idle_after", 300.0, _seconds, N_("alert on a process idle this long (--idle-after)")),
    Key("top.history", 300.0, _seconds, N_("time the history lines cover at start (--history)")),
    Key("top.columns", TOP_COLUMNS, _columns, N_("the process columns, in order (narrow terminals drop some)")),
    Key("top.theme", "dark", _choice("dark", "light"), N_("colours for a dark or a light terminal (--theme)")),
    Key("top.ascii", False, _flag, N_("no Unicode blocks or box characters (--ascii)")),
    Key("thresholds.memory_warn", 70.0, _percent, N_("% of a GPU's memory in use drawn as a warning (yellow)")),
    Key("thresholds.memory_critical", 90.0, _percent, N_("% in use drawn as critical (red)")),
    Key("thresholds.nearly_full", 95.0, _percent, N_("% in use that raises the live view's 'nearly full' alert")),
    Key("pick.prefer", "spread", _choice("spread", "pack"), N_("vram pick's default --prefer")),
    Key("pick.min_free", "50%", _min_free, N_("vram pick's default --min-free")),
    Key("pick.max_util", "50", _max_util, N_("vram pick's default --max-util")),
    Key("pick.exclusive", False, _flag, N_("vram pick's default --exclusive")),
    Key("ui.language", "auto", _language, N_("the language of vram's messages (auto: $LANGUAGE, $LC_ALL, $LANG); "
                                             "$VRAM_LANG overrides it")),
)
BY_NAME = {k.name: k for k in KEYS}


@dataclass
class Config:
    """The effective values, and where each came from (DEFAULT, SYSTEM, USER, ENV or FLAG)."""

    values: dict[str, Any] = field(default_factory=lambda: {k.name: k.default for k in KEYS})
    sources: dict[str, str] = field(default_factory=lambda: {k.name: DEFAULT for k in KEYS})
    files: list[tuple[str, Path]] = field(default_factory=list)  # (source, path) of each file read

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def set(self, name: str, value: Any, source: str) -> None:
        self.values[name] = value
        self.sources[name] = source

    def flag(self, name: str, value: Any) -> None:
        """A command's flag, when one was given (None: not given)."""
        if value is not None:
            self.set(name, value, FLAG)

    def section(self, section: str) -> dict[str, Any]:
        """{key without the section: value} of one section, e.g. section('pick')['prefer']."""
        prefix = section + "."
        return {n[len(prefix):]: v for n, v in self.values.items() if n.startswith(prefix)}


def user_file() -> Path:
    return Path(user_path())


def _fail(path: Path | str, message: str) -> RequestError:
    return RequestError(f"{sanitize(str(path))[:300]}: {message}")


def _read(path: Path, source: str, euid: int) -> str | None:
    """The file's text (None: there is none). Never through a symlink or into a FIFO; as root,
    only a file no other user can change."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except PermissionError:
        if not _searchable(path.parent):  # behind a directory this user cannot enter (sudo -u with
            return None                   # the caller's $HOME): not this user's file, and none of theirs
        if os.path.islink(path):
            raise _fail(path, _("is a symbolic link: vram does not follow one; put the file there")) from None
        raise _fail(path, _("cannot read: permission denied")) from None
    except OSError as e:
        if os.path.islink(path):
            raise _fail(path, _("is a symbolic link: vram does not follow one; put the file there")) from None
        raise _fail(path, _("cannot read: {reason}").format(reason=e.strerror)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _fail(path, _("not a regular file"))
        owners = (0,) if source == SYSTEM else (0, euid)
        if euid == 0 and (info.st_uid not in owners or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            raise _fail(path, _("another user can change it, and vram runs as root: chown root and chmod go-w it"))
        if euid == 0:  # yours too: $XDG_CONFIG_HOME or a kept $HOME may lead into another user's directory
            _check_directories(path)
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise _fail(path, _("larger than {size} KiB: not a config file").format(size=MAX_BYTES // 1024))
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise _fail(path, _("not UTF-8 text")) from None


def _searchable(directory: Path) -> bool:
    """Whether this user may look up names in `directory` (and every directory above it)."""
    try:
        os.stat(directory)
    except PermissionError:
        return False
    except OSError:
        return True  # missing: the open said so already
    return os.access(directory, os.X_OK)


def _check_directories(path: Path) -> None:
    """Every directory above a file root reads must be root's and closed to others (or sticky):
    whoever may change one could put another file in its place, or a symlink to one."""
    for parent in Path(os.path.abspath(path)).parents:
        try:
            info = os.lstat(parent)
        except OSError:
            continue
        open_to_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX
        if stat.S_ISLNK(info.st_mode) or info.st_uid != 0 or open_to_others:
            raise _fail(path, _("its directory {directory} can be changed by a user other than root, and vram "
                                "runs as root: chown root and chmod go-w it").format(
                                    directory=sanitize(str(parent))[:200]))


def _toml(text: str, path: Path) -> dict[str, Any]:
    module_name = "tomllib" if sys.version_info >= (3, 11) else "tomli"  # the same parser
    try:
        toml = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise _fail(path, _("reading a config file needs Python 3.11, or the tomli package on 3.10")) from None
    try:
        data: dict[str, Any] = toml.loads(text)
    except toml.TOMLDecodeError as e:
        raise _fail(path, _("not valid TOML: {error}").format(error=e)) from None
    except RecursionError:  # arrays or inline tables nested thousands deep: the parser recurses
        raise _fail(path, _("not a config file: values nested too deeply")) from None
    except ValueError as e:  # an integer of over 4300 digits (int()'s own limit)
        raise _fail(path, _("not a config file: {error}").format(error=str(e).split(";")[0])) from None
    return data


def _apply_file(config: Config, data: dict[str, Any], path: Path, source: str) -> None:
    for section, table in data.items():
        if not isinstance(table, dict):
            raise _fail(path, _("{section}: must be a [table]: [top], [thresholds] or [pick]").format(
                section=sanitize(str(section))[:40]))
        for key, value in table.items():
            name = f"{section}.{key}"
            if name not in BY_NAME:
                raise _fail(path, _("{key}: unknown key (known: {keys})").format(
                    key=sanitize(name)[:80], keys=", ".join(BY_NAME)))
            config.set(name, _parsed(BY_NAME[name], value, path), source)


def _parsed(key: Key, value: Any, where: Path | str) -> Any:
    try:
        return key.parse(value)
    except (ValueError, TypeError) as e:
        reason = str(e) or _("not a valid value")
        raise _fail(where, f"{key.name}: {reason}") from None


def load(environ: Mapping[str, str] | None = None, system_file: Path | None = None,
         euid: int | None = None) -> Config:
    """The effective configuration: the defaults, then the machine's file, yours, the environment."""
    system_file = SYSTEM_FILE if system_file is None else system_file
    environ = os.environ if environ is None else environ
    euid = os.geteuid() if euid is None else euid
    config = Config()
    for source, path in ((SYSTEM, system_file), (USER, user_file())):
        text = _read(path, source, euid)
        if text is None:
            continue
        config.files.append((source, path))
        _apply_file(config, _toml(text, path), path, source)
    for key in KEYS:
        if key.env in environ:
            config.set(key.name, _parsed(key, environ[key.env], f"${key.env}"), ENV)
    _check(config)
    return config


def _check(config: Config) -> None:
    warn, critical = config["thresholds.memory_warn"], config["thresholds.memory_critical"]
    if warn > critical:
        where = config.sources["thresholds.memory_warn"]
        raise RequestError(_("thresholds.memory_warn ({warn:g}, from {warn_source}) is above "
                             "thresholds.memory_critical ({critical:g}, from {critical_source})").format(
                                 warn=warn, warn_source=where, critical=critical,
                                 critical_source=config.sources["thresholds.memory_critical"]))


def pick_defaults(config: Config | None = None) -> dict[str, Any]:
    """vram pick's policy defaults: {prefer, min_free, max_util, exclusive}, for the flags not given."""
    return (config or load()).section("pick")


def show_value(key: Key, value: Any) -> str:
    """A value as it would be written in the file (durations as "300s")."""
    if key.parse is _seconds:
        return f'"{value:g}s"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return f'"{value}"' if isinstance(value, str) else str(value)
