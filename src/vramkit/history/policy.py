"""The idle-holder policy: what `vram record --policy FILE` tells users about, and may reclaim.

The file is TOML (default /etc/vramkit/policy.toml), for example:

    max_per_minute = 10          # notices a minute, all rules together (the rest wait)
    timeout = "30s"              # a notice command still running after this is killed

    [[rule]]
    name = "idle-big"
    min_memory = "10GiB"         # holding at least this on one GPU
    idle_for = "2h"              # ... and no kernels of its own for this long
    command = ["/usr/local/bin/notify-idle", "--lab"]   # the facts as JSON on its stdin
    repeat = "6h"                # at most one notice per process and GPU this often
    reclaim_after = "1h"         # optional: SIGTERM it this long after the first notice
    users = ["alice", "bob"]     # optional: only these users' processes
    exclude_users = ["root"]     # optional: never these

Everything is checked when the file is read, strictly: an unknown key, a size or duration that
does not parse, a command that is not an absolute path to an executable file, or (when vram
runs as root) a file or command another user could change, is one error naming the file, the
rule and the key. A policy that runs commands as root must not be a file someone else can edit.
"""

from __future__ import annotations

import importlib
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RequestError
from ..procs import sanitize
from ..units import parse_duration, parse_size

SYSTEM_POLICY = Path("/etc/vramkit/policy.toml")
MAX_BYTES = 64 * 1024  # a policy is a few rules; more than this is not one
MAX_RULES = 100
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
TOP_KEYS = ("max_per_minute", "timeout", "rule")
RULE_KEYS = ("name", "min_memory", "idle_for", "command", "repeat", "reclaim_after", "users", "exclude_users")
REQUIRED = ("name", "min_memory", "idle_for", "command")


class PolicyError(RequestError):
    """A policy file that cannot be used. One line naming the file, the rule and the key."""


@dataclass(frozen=True)
class Rule:
    name: str
    min_memory: int  # bytes on one GPU
    idle_for: float  # seconds
    command: tuple[str, ...]  # argv; command[0] an absolute path to an executable
    repeat: float = 6 * 3600.0  # seconds between two notices for one process on one GPU
    reclaim_after: float | None = None  # seconds after the first notice; None: never reclaim
    users: frozenset[str] | None = None  # None: every user
    exclude_users: frozenset[str] = frozenset()

    def covers(self, user: str | None) -> bool:
        """Whether this rule is about `user`'s processes (an unknown owner only without `users`)."""
        if user is not None and user in self.exclude_users:
            return False
        return self.users is None or (user is not None and user in self.users)


@dataclass(frozen=True)
class Policy:
    path: str
    rules: tuple[Rule, ...]
    max_per_minute: int = 10
    timeout: float = 30.0  # seconds a notice command may run


def _fail(path: str, where: str, message: str) -> PolicyError:
    return PolicyError(f"{sanitize(path)}: {where}{message}", param="policy")


def _read(path: Path, as_root: bool) -> str:
    """The file's text: never through a symlink, never blocking (a FIFO), at most MAX_BYTES; as
    root, only a file that root owns and nobody else may write."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise _fail(name, "", "no such file") from None
    except OSError as e:
        if e.errno == 40:  # ELOOP: the last component is a symlink
            raise _fail(name, "", "is a symbolic link; give the file it points to") from None
        raise _fail(name, "", f"cannot read: {e.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _fail(name, "", "not a regular file")
        if as_root and (info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            raise _fail(name, "", "another user can change it, and its commands run as root: "
                                  "chown root and chmod go-w it")
        unsafe = _changeable_by_others(path.absolute().parent) if as_root else None
        if unsafe is not None:  # they could replace the file
            raise _fail(name, "", f"its directory {_show(unsafe, 300)} can be changed by a user other than root, "
                                  "and its commands run as root: chown root and chmod go-w it")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise _fail(name, "", f"larger than {MAX_BYTES // 1024} KiB: not a policy file")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise _fail(name, "", "not UTF-8 text") from None


def _toml(text: str, path: str) -> dict[str, Any]:
    # tomllib is in the standard library from Python 3.11; on 3.10 the tomli package is the same.
    module_name = "tomllib" if sys.version_info >= (3, 11) else "tomli"
    try:
        toml = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise _fail(path, "", "reading a policy needs Python 3.11, or the tomli package on 3.10") from None
    try:
        data: dict[str, Any] = toml.loads(text)
    except toml.TOMLDecodeError as e:
        raise _fail(path, "", f"not valid TOML: {e}") from None
    except RecursionError:  # arrays or inline tables nested thousands deep: the parser recurses
        raise _fail(path, "", "not a policy: values nested too deeply") from None
    except ValueError as e:  # an integer of over 4300 digits (int()'s own limit)
        raise _fail(path, "", f"not a policy: {str(e).split(';')[0]}") from None
    return data


def load(path: Path | str = SYSTEM_POLICY, as_root: bool | None = None) -> Policy:
    """Read and check a policy file; PolicyError (exit 2, one line) when anything is wrong."""
    as_root = os.geteuid() == 0 if as_root is None else as_root
    name = str(path)
    return parse(_toml(_read(Path(path), as_root), name), name, as_root)


def parse(data: dict[str, Any], path: str, as_root: bool) -> Policy:
    for key in data:
        if key not in TOP_KEYS:
            raise _fail(path, "", f"unknown key {sanitize(str(key))!r} (known: {', '.join(TOP_KEYS)})")
    max_per_minute = data.get("max_per_minute", 10)
    if isinstance(max_per_minute, bool) or not isinstance(max_per_minute, int) or not 1 <= max_per_minute <= 1000:
        raise _fail(path, "", f"max_per_minute: must be a whole number from 1 to 1000, got {_show(max_per_minute)}")
    timeout = _duration(data.get("timeout", "30s"), path, "", "timeout", minimum=1, maximum=3600)
    rules_data = data.get("rule")
    if not isinstance(rules_data, list) or not rules_data:
        raise _fail(path, "", "no rules: add at least one [[rule]] table")
    if len(rules_data) > MAX_RULES:
        raise _fail(path, "", f"{len(rules_data)} rules: at most {MAX_RULES}")
    rules: list[Rule] = []
    for number, raw in enumerate(rules_data, 1):
        rule = _rule(raw, number, path, as_root)
        if any(r.name == rule.name for r in rules):
            raise _fail(path, f"rule {rule.name!r}: ", "name: another rule has this name")
        rules.append(rule)
    return Policy(path=path, rules=tuple(rules), max_per_minute=max_per_minute, timeout=timeout)


def _show(value: object, limit: int = 40) -> str:
    """A value from the file, quoted, cut short and stripped of control characters."""
    return sanitize(repr(value)[:limit])


def _rule(raw: object, number: int, path: str, as_root: bool) -> Rule:
    where = f"rule {number}: "
    if not isinstance(raw, dict):
        raise _fail(path, where, "must be a table ([[rule]])")
    name = raw.get("name")
    if isinstance(name, str) and NAME.fullmatch(name):
        where = f"rule {name!r}: "
    for key in raw:
        if key not in RULE_KEYS:
            raise _fail(path, where, f"unknown key {sanitize(str(key))!r} (known: {', '.join(RULE_KEYS)})")
    for key in REQUIRED:
        if key not in raw:
            raise _fail(path, where, f"{key}: missing (every rule needs {', '.join(REQUIRED)})")
    if not (isinstance(name, str) and NAME.fullmatch(name)):
        raise _fail(path, where, "name: letters, digits, '.', '_' or '-', at most 64, got " + _show(name))
    try:
        min_memory = parse_size(raw["min_memory"])
    except ValueError as e:
        raise _fail(path, where, f"min_memory: {e}") from None
    if min_memory < 1:
        raise _fail(path, where, "min_memory: must be more than 0 bytes")
    idle_for = _duration(raw["idle_for"], path, where, "idle_for", minimum=1)
    repeat = _duration(raw.get("repeat", "6h"), path, where, "repeat", minimum=60)
    reclaim_after = None
    if "reclaim_after" in raw:
        reclaim_after = _duration(raw["reclaim_after"], path, where, "reclaim_after", minimum=0)
    return Rule(name=name, min_memory=min_memory, idle_for=idle_for,
                command=_command(raw["command"], path, where, as_root), repeat=repeat,
                reclaim_after=reclaim_after, users=_users(raw, "users", path, where),
                exclude_users=_users(raw, "exclude_users", path, where) or frozenset())


def _duration(value: object, path: str, where: str, key: str, minimum: float,
              maximum: float | None = None) -> float:
    if not isinstance(value, (str, int, float)):
        raise _fail(path, where, f"{key}: not a duration: {_show(value)} (e.g. \"90s\", \"2h\", \"1d\")")
    try:
        seconds = parse_duration(value)
    except ValueError as e:
        raise _fail(path, where, f"{key}: {e}") from None
    if seconds < minimum:
        raise _fail(path, where, f"{key}: must be at least {minimum:g} seconds, got {_show(value)}")
    if maximum is not None and seconds > maximum:
        raise _fail(path, where, f"{key}: must be at most {maximum:g} seconds, got {_show(value)}")
    return seconds


def _users(raw: dict[str, Any], key: str, path: str, where: str) -> frozenset[str] | None:
    if key not in raw:
        return None
    value = raw[key]
    if not isinstance(value, list) or not value or not all(isinstance(u, str) and u for u in value):
        raise _fail(path, where, f"{key}: a list of user names, e.g. [\"alice\"], got {_show(value)}")
    return frozenset(value)


def _command(value: object, path: str, where: str, as_root: bool) -> tuple[str, ...]:
    """argv, run without a shell. As root the program runs as root: it must be a file only root
    can change, in directories only root can change."""
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise _fail(path, where, "command: a list of strings, e.g. [\"/usr/local/bin/notify-idle\"] "
                                 f"(no shell), got {_show(value)}")
    if any("\x00" in a for a in value) or len(value) > 64 or sum(map(len, value)) > 4096:
        raise _fail(path, where, "command: too long, or contains a NUL character")
    program = value[0]
    if not program.startswith("/"):
        raise _fail(path, where, f"command: {_show(program, 300)} is not an absolute path (no $PATH lookup: "
                                 "name the file, e.g. /usr/local/bin/notify-idle)")
    try:
        info = os.stat(program)
    except OSError as e:
        raise _fail(path, where, f"command: {_show(program, 300)}: {e.strerror}") from None
    if not stat.S_ISREG(info.st_mode) or not info.st_mode & 0o111 or not os.access(program, os.X_OK):
        raise _fail(path, where, f"command: {_show(program, 300)} is not an executable file")
    if as_root:
        unsafe = _changeable_by_others(Path(program))
        if unsafe is not None:
            raise _fail(path, where, f"command: {_show(unsafe, 300)} can be changed by a user other than root, and "
                                     "the command runs as root: chown root and chmod go-w it")
    return tuple(value)


def _changeable_by_others(program: Path) -> str | None:
    """The first of program (symlinks resolved) and its directories that a user other than root
    could change, or None."""
    real = Path(os.path.realpath(program))
    for part in (real, *real.parents):
        try:
            info = os.stat(part)
        except OSError:
            return str(part)
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        sticky_dir = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
        if info.st_uid != 0 or (writable and not sticky_dir):
            return str(part)
    return None
