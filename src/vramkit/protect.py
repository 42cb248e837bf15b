"""Processes `vram kill` never signals, whatever the flags, and the rule that says so.

Built in: pid 1, kernel threads, vram itself and the caller's shell and its parents, and a list
of names (display servers and desktop sessions, NVIDIA's daemons, sshd, container runtimes,
systemd, schedulers). Admins add rules in /etc/vramkit/protected.conf, users in
~/.config/vramkit/protected.conf ($XDG_CONFIG_HOME is honoured). A rule is one line:

    name     GLOB    process name (/proc/PID/comm) or the basename of argv[0]
    command  GLOB    the whole command line
    user     NAME    every process of that user (a glob too)

A line with a single word is a `name` rule; `#` starts a comment. A line that cannot be read is
an error, not skipped: a protection the admin meant to add must not silently vanish.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import NamedTuple

from .errors import RequestError

SYSTEM_CONF = Path("/etc/vramkit/protected.conf")
KINDS = ("name", "command", "user")

# (group, why it matters, names): matched against the process name and argv[0]'s basename.
BUILTIN: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("display server", "the graphical session of whoever sits at the machine runs on it",
     ("Xorg", "X", "Xwayland", "xwayland", "gnome-shell", "gnome-session*", "gdm", "gdm3", "gdm-*",
      "sddm*", "lightdm*", "kwin_x11", "kwin_wayland", "kwin", "plasmashell", "ksmserver", "mutter",
      "cinnamon*", "xfwm4", "xfce4-session", "mate-session", "sway", "Hyprland", "weston", "gamescope*")),
    ("NVIDIA daemon", "it keeps the driver, monitoring or the NVLink fabric of every GPU working",
     ("nvidia-persistenced", "nvidia-persistence*", "nv-hostengine", "dcgm*", "nv-fabricmanager",
      "nvidia-fabricmanager*", "nvidia-powerd")),
    ("remote login", "ending it drops everyone's SSH sessions",
     ("sshd", "sshd-session", "sshd-auth")),
    ("container runtime", "ending it takes whole containers down",
     ("dockerd", "containerd", "containerd-shim*", "runc", "crun", "conmon", "podman", "crio", "cri-o",
      "kubelet", "docker-proxy", "nvidia-container-*", "buildkitd")),
    ("system service manager", "the machine or the user's session depends on it",
     ("systemd", "systemd-*", "init", "login", "agetty", "dbus-daemon", "dbus-broker*")),
    ("job scheduler", "ending it loses every job it manages",
     ("slurmd", "slurmctld", "slurmstepd", "slurmdbd", "pbs_mom", "sge_execd")),
)


class ProtectConfigError(RequestError):
    """A protected.conf line that cannot be understood. The message names the file and line."""


# NamedTuples, not dataclasses: each dataclass costs ~0.3 ms at import, and `import vramkit` is on
# the path of every `vram status`.
class Refusal(NamedTuple):
    rule: str  # short id: pid-1, kernel-thread, caller, protected, ownership, ...
    reason: str  # one line for people

    def __str__(self) -> str:
        return f"{self.rule}: {self.reason}"


class Rule(NamedTuple):
    kind: str  # name, command, user
    pattern: str
    origin: str  # "built-in (display server)" or "/etc/vramkit/protected.conf:3"
    why: str = ""


class Candidate(NamedTuple):
    """What the rules look at. Every text field is already stripped of control characters."""

    pid: int
    name: str
    argv0: str
    command: str
    user: str | None
    kernel_thread: bool = False
    real: bool = True  # a real process on this machine (False: a simulated one)


@dataclass
class Protection:
    rules: list[Rule] = field(default_factory=list)
    caller_chain: tuple[int, ...] = ()  # vram's own pid, then its parents up to pid 1
    files: tuple[str, ...] = ()  # the configuration files that were read

    def check(self, c: Candidate) -> Refusal | None:
        """The first rule that protects c, or None."""
        if c.real and c.pid == 1:
            return Refusal("pid-1", "pid 1 is the system's (or container's) init: signalling it brings "
                                    "everything under it down")
        if c.real and c.kernel_thread:
            return Refusal("kernel-thread", f"{c.name} is a kernel thread, not a program that holds memory")
        if c.real and c.pid in self.caller_chain:
            who = "vram itself" if c.pid == self.caller_chain[0] else "the caller's own shell or one of its parents"
            return Refusal("caller", f"{c.name} (pid {c.pid}) is {who}")
        for rule in self.rules:
            if self._matches(rule, c):
                what = {"name": "name", "command": "command line", "user": "user"}[rule.kind]
                why = f": {rule.why}" if rule.why else ""
                return Refusal("protected", f"{what} matches '{rule.pattern}' ({rule.origin}){why}")
        return None

    @staticmethod
    def _matches(rule: Rule, c: Candidate) -> bool:
        if rule.kind == "name":
            return any(n and fnmatchcase(n, rule.pattern) for n in (c.name, c.argv0))
        if rule.kind == "command":
            return fnmatchcase(c.command, rule.pattern)
        return c.user is not None and fnmatchcase(c.user, rule.pattern)


def user_conf() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "vramkit" / "protected.conf"


def builtin_rules() -> list[Rule]:
    return [Rule("name", name, f"built-in: {group}", why)
            for group, why, names in BUILTIN for name in names]


def parse(text: str, origin: str) -> list[Rule]:
    rules = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        kind, pattern = ("name", parts[0]) if len(parts) == 1 else (parts[0], parts[1].strip())
        if kind not in KINDS:
            raise ProtectConfigError(f"{origin}:{number}: unknown kind {kind!r} (use name, command or user, "
                                     "then a pattern)")
        if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in pattern):
            raise ProtectConfigError(f"{origin}:{number}: the pattern contains control characters")
        rules.append(Rule(kind, pattern, f"{origin}:{number}"))
    return rules


def load(system: Path | None = SYSTEM_CONF, user: Path | None = None,
         caller_chain: tuple[int, ...] = ()) -> Protection:
    """The built-in rules plus the admin's and the user's files (a missing file is fine)."""
    rules = builtin_rules()
    files = []
    for path in (system, user_conf() if user is None else user):
        if path is None:
            continue
        try:
            text = Path(path).read_text()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as e:
            raise ProtectConfigError(f"{path}: cannot read: {e}") from None
        rules.extend(parse(text, str(path)))
        files.append(str(path))
    return Protection(rules=rules, caller_chain=caller_chain, files=tuple(files))
