"""Processes `vram kill` never signals, whatever the flags, and the rule that says so.

Built in: pid 1, kernel threads, vram itself and the caller's shell and its parents, and a list
of names (display servers and desktop sessions, NVIDIA's daemons, sshd, container runtimes,
systemd, schedulers). Admins add rules in /etc/vramkit/protected.conf, users in
~/.config/vramkit/protected.conf ($XDG_CONFIG_HOME is honoured). A rule is one line:

    name     GLOB    process name (/proc/PID/comm) or the basename of argv[0]
    command  GLOB    the whole command line
    user     NAME    every process of that user (a glob too)
    exe      GLOB    the executable's path (/proc/PID/exe), a root-owned file in root's directories

A line with a single word is a `name` rule; `#` starts a comment. A line that cannot be read is
an error, not skipped: a protection the admin meant to add must not silently vanish.

Names and command lines are chosen by whoever starts a process (prctl(PR_SET_NAME), `exec -a`),
so a `name` or `command` rule protects a process only where the match is credible: the process
runs as a system account (real and effective uid at most SYS_UID_MAX of /etc/login.defs), or
(name rules) its executable, which its owner cannot forge, is a root-owned file in a system
directory whose base name matches too, or (rules of the caller's own file) it is the caller's
own process. Otherwise any user could make a GPU job unkillable through vram by calling it sshd.
`user` and `exe` rules need no such check.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import NamedTuple

from .errors import RequestError
from .i18n import N_, _, pgettext

SYSTEM_CONF = Path("/etc/vramkit/protected.conf")
KINDS = ("name", "command", "user", "exe")
MAX_CONF = 64 * 1024  # bytes: a protected.conf is a few lines; a larger file is refused
# Where a system's programs live: an executable counts only under one of these, in directories
# (and as a file) owned by root that no one else may change.
SYSTEM_DIRS = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/opt/", "/snap/")

# (group, why it matters, names, system-only; group and why are shown in the reader's language):
# matched against the process name and argv[0]'s
# basename. system-only: the real one runs as a system account, never as a login user (a user's
# own desktop session, rootless container runtime or systemd --user is run from the system's
# executable, which is checked instead).
BUILTIN: tuple[tuple[str, str, tuple[str, ...], bool], ...] = (
    (N_("display server"), N_("the graphical session of whoever sits at the machine runs on it"),
     ("Xorg", "X", "Xwayland", "xwayland", "gnome-shell", "gnome-session*", "gdm", "gdm3", "gdm-*",
      "sddm*", "lightdm*", "kwin_x11", "kwin_wayland", "kwin", "plasmashell", "ksmserver", "mutter",
      "cinnamon*", "xfwm4", "xfce4-session", "mate-session", "sway", "Hyprland", "weston", "gamescope*"), False),
    (N_("NVIDIA daemon"), N_("it keeps the driver, monitoring or the NVLink fabric of every GPU working"),
     ("nvidia-persistenced", "nvidia-persistence*", "nv-hostengine", "dcgm*", "nv-fabricmanager",
      "nvidia-fabricmanager*", "nvidia-powerd"), True),
    (N_("remote login"), N_("ending it drops everyone's SSH sessions"),
     ("sshd", "sshd-session", "sshd-auth"), True),
    (N_("container runtime"), N_("ending it takes whole containers down"),
     ("dockerd", "containerd", "containerd-shim*", "runc", "crun", "conmon", "podman", "crio", "cri-o",
      "kubelet", "docker-proxy", "nvidia-container-*", "buildkitd"), False),
    (N_("system service manager"), N_("the machine or the user's session depends on it"),
     ("systemd", "systemd-*", "init", "login", "agetty", "dbus-daemon", "dbus-broker*"), False),
    (N_("job scheduler"), N_("ending it loses every job it manages"),
     ("slurmd", "slurmctld", "slurmstepd", "slurmdbd", "pbs_mom", "sge_execd"), True),
)


class ProtectConfigError(RequestError):
    """A protected.conf line that cannot be understood. The message names the file and line."""


# NamedTuples, not dataclasses: each dataclass costs ~0.3 ms at import, and `import vramkit` is on
# the path of every `vram status`.
class Said(NamedTuple):
    """One sentence twice: in English (the audit log, which programs read) and in the reader's
    language. `said(N_("it belongs to {who}"), who=...)`; a placeholder may be a Said itself."""

    english: str
    text: str


def said(message: str, **values: object) -> Said:
    english = {k: v.english if isinstance(v, Said) else v for k, v in values.items()}
    shown = {k: v.text if isinstance(v, Said) else v for k, v in values.items()}
    return Said(message.format(**english), _(message).format(**shown))


class Refusal(NamedTuple):
    rule: str  # short id: pid-1, kernel-thread, caller, protected, ownership, ...
    reason: str  # one line for people, in English: the audit log and --json keep it
    shown: str = ""  # the same in the reader's language ("": the reason)

    @classmethod
    def of(cls, rule: str, words: Said) -> Refusal:
        return cls(rule, words.english, words.text)

    @property
    def text(self) -> str:
        """The reason as vram shows it to people."""
        return self.shown or self.reason

    def __str__(self) -> str:
        return f"{self.rule}: {self.reason}"


class Rule(NamedTuple):
    kind: str  # name, command, user, exe
    pattern: str
    origin: str  # "built-in: display server" or "/etc/vramkit/protected.conf:3"
    why: str = ""
    system_only: bool = False  # a name only a system account's process is credibly
    own: bool = False  # from the caller's own protected.conf: protects the caller's processes as written
    group: str = ""  # a built-in rule's group ("display server"): its origin in the reader's language

    def origin_said(self) -> Said:
        if self.group:
            return said(N_("built-in: {group}"), group=Said(self.group, _(self.group)))
        return Said(self.origin, self.origin)


class Executable(NamedTuple):
    """A process's executable as the kernel knows it (/proc/PID/exe): what its owner cannot forge."""

    path: str | None  # None: it cannot be read (why says so)
    system: bool  # a root-owned file, under SYSTEM_DIRS, in directories only root may change
    why: str = ""  # when not system: why not, for people


class Candidate(NamedTuple):
    """What the rules look at. Every text field is already stripped of control characters."""

    pid: int
    name: str
    argv0: str
    command: str
    user: str | None
    kernel_thread: bool = False
    real: bool = True  # a real process on this machine (False: a simulated one)
    uids: tuple[int, int, int] | None = None  # real, effective, saved; None: unknown
    exe: Executable | None = None  # None: read from /proc when a rule needs it (a real process)


def system_uid_max(path: str = "/etc/login.defs") -> int:
    """The highest uid of a system account: SYS_UID_MAX, else UID_MIN - 1, else 999."""
    global _SYS_UID_MAX
    if _SYS_UID_MAX is not None and path == "/etc/login.defs":
        return _SYS_UID_MAX
    values: dict[str, int] = {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        try:
            data = os.read(fd, MAX_CONF) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
        for line in data.decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in ("SYS_UID_MAX", "UID_MIN") and parts[1].isdigit():
                values[parts[0]] = int(parts[1])
    except OSError:
        pass
    found = values.get("SYS_UID_MAX", values.get("UID_MIN", 1000) - 1)
    found = min(max(found, 0), 60000)  # a login.defs that says every uid is a system one is not believed
    if path == "/etc/login.defs":
        _SYS_UID_MAX = found
    return found


_SYS_UID_MAX: int | None = None


def executable(pid: int, proc: str = "/proc") -> Executable:
    """What /proc/PID/exe says, and whether it is one of the system's own programs."""
    link = f"{proc}/{pid}/exe"
    try:
        path = os.readlink(link)
        info = os.stat(link)  # the file the process runs, even when deleted or in another mount namespace
    except OSError as e:
        return Executable(None, False, _("its executable cannot be read ({error})").format(error=e.strerror or e))
    deleted = path.endswith(" (deleted)")
    if deleted:
        path = path[: -len(" (deleted)")]
    shown = path[:200]
    if info.st_uid != 0:
        return Executable(path, False, _("its executable {path} belongs to uid {uid}, not root").format(
            path=shown, uid=info.st_uid))
    if not stat.S_ISREG(info.st_mode) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return Executable(path, False, _("its executable {path} can be changed by users other than root").format(
            path=shown))
    if not path.startswith(SYSTEM_DIRS):
        return Executable(path, False, _("its executable {path} is not in a system directory").format(path=shown))
    if not deleted:
        try:
            here = os.stat(path)
        except OSError:
            here = None
        if here is None or (here.st_dev, here.st_ino) != (info.st_dev, info.st_ino):
            return Executable(path, False, _("its executable {path} is not the file of that name here "
                                             "(another mount namespace, or replaced)").format(path=shown))
    for parent in Path(path).parents:
        try:
            st = os.lstat(parent)
        except OSError:
            return Executable(path, False, _("its executable's directory {path} cannot be read").format(path=parent))
        open_to_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or open_to_others:
            return Executable(path, False, _("its executable's directory {path} can be changed by users "
                                             "other than root").format(path=parent))
    return Executable(path, True)


@dataclass
class Protection:
    rules: list[Rule] = field(default_factory=list)
    caller_chain: tuple[int, ...] = ()  # vram's own pid, then its parents up to pid 1
    files: tuple[str, ...] = ()  # the configuration files that were read
    notes: list[str] = field(default_factory=list)  # files refused (not safely anyone's to obey), ...
    caller_uid: int = -1  # whose "own" rules (~/.config) protect their processes as written
    proc: str = "/proc"  # where executables are read (tests: a fake tree)
    uid_max: int = -1  # highest system uid (-1: from /etc/login.defs)

    def check(self, c: Candidate) -> Refusal | None:
        """The first rule that protects c, or None."""
        return self.judge(c)[0]

    def judge(self, c: Candidate) -> tuple[Refusal | None, str | None]:
        """The first rule that protects c (or None), and a note when a name or command rule matched
        but is not credible for c (a user's job called sshd), saying why it does not protect it."""
        if c.real and c.pid == 1:
            return Refusal.of("pid-1", said(N_("pid 1 is the system's (or container's) init: signalling it brings "
                                               "everything under it down"))), None
        if c.real and c.kernel_thread:
            return Refusal.of("kernel-thread", said(N_("{name} is a kernel thread, not a program that holds memory"),
                                                    name=c.name)), None
        if c.real and c.pid in self.caller_chain:
            if c.pid == self.caller_chain[0]:
                return Refusal.of("caller", said(N_("{name} (pid {pid}) is vram itself"), name=c.name, pid=c.pid)), None
            return Refusal.of("caller", said(N_("{name} (pid {pid}) is the caller's own shell or one of its parents"),
                                             name=c.name, pid=c.pid)), None
        note = None
        if c.exe is None and c.real and any(r.kind == "exe" for r in self.rules):
            c = c._replace(exe=self._exe(c))  # read once, for every rule below
        for rule in self.rules:
            if not self._matches(rule, c):
                continue
            if c.exe is None and c.real and rule.kind == "name" and not self.system_account(c):
                c = c._replace(exe=self._exe(c))
            doubt = self._doubt(rule, c)
            what, origin = _kind_words(rule.kind), rule.origin_said()
            if doubt:
                if note is None:
                    note = _("its {what} matches '{pattern}' ({origin}), but that does not protect it: {doubt}").format(
                        what=what.text, pattern=rule.pattern, origin=origin.text, doubt=doubt)
                continue
            if rule.why:
                why = Said(rule.why, _(rule.why) if rule.group else rule.why)
                return Refusal.of("protected", said(N_("{what} matches '{pattern}' ({origin}): {why}"), what=what,
                                                    pattern=rule.pattern, origin=origin, why=why)), None
            return Refusal.of("protected", said(N_("{what} matches '{pattern}' ({origin})"), what=what,
                                                pattern=rule.pattern, origin=origin)), None
        return None, note

    def system_account(self, c: Candidate) -> bool:
        limit = self.uid_max if self.uid_max >= 0 else system_uid_max()
        return c.uids is not None and c.uids[0] <= limit and c.uids[1] <= limit

    def _exe(self, c: Candidate) -> Executable:
        if c.exe is not None:
            return c.exe
        if not c.real:
            return Executable(None, False, _("a simulated process has no executable here"))
        return executable(c.pid, self.proc)

    def _doubt(self, rule: Rule, c: Candidate) -> str | None:
        """Why a matching rule does not credibly apply to c, or None when it does."""
        if rule.kind in ("user", "exe"):
            return None  # the owner and the executable cannot be chosen by the process
        if self.system_account(c):
            return None
        if rule.own and c.uids is not None and c.uids[0] == c.uids[1] == self.caller_uid:
            return None  # your own rule about your own process
        who = (_("its owner cannot be read") if c.uids is None else
               _("it runs as {user} (uid {uid}), not a system account").format(
                   user=c.user or f"uid {c.uids[0]}", uid=c.uids[0]))
        if rule.kind == "command":
            return _("{who}, and anyone can put any text in a command line").format(who=who)
        if rule.system_only:
            return _("{who}, and the real one runs as a system account").format(who=who)
        exe = self._exe(c)
        if not exe.system:
            return _("{who}, and {why}").format(who=who, why=exe.why)
        base = os.path.basename(exe.path or "")
        if not fnmatchcase(base, rule.pattern):
            return _("{who}, and its executable {path} is not '{pattern}'").format(
                who=who, path=exe.path, pattern=rule.pattern)
        return None

    def _matches(self, rule: Rule, c: Candidate) -> bool:
        if rule.kind == "name":
            return any(n and fnmatchcase(n, rule.pattern) for n in (c.name, c.argv0))
        if rule.kind == "command":
            return fnmatchcase(c.command, rule.pattern)
        if rule.kind == "exe":
            exe = self._exe(c)
            return exe.system and exe.path is not None and fnmatchcase(exe.path, rule.pattern)
        return c.user is not None and fnmatchcase(c.user, rule.pattern)


def _kind_words(kind: str) -> Said:
    """What a rule of this kind matches, as the subject of a sentence."""
    if kind == "name":
        return Said("name", pgettext("protect rule", "name"))
    if kind == "command":
        return Said("command line", pgettext("protect rule", "command line"))
    if kind == "user":
        return Said("user", pgettext("protect rule", "user"))
    return Said("executable", pgettext("protect rule", "executable"))


def user_conf() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "vramkit" / "protected.conf"


def builtin_rules() -> list[Rule]:
    return [Rule("name", name, f"built-in: {group}", why, system_only, group=group)
            for group, why, names, system_only in BUILTIN for name in names]


def parse(text: str, origin: str, own: bool = False) -> list[Rule]:
    rules = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        kind, pattern = ("name", parts[0]) if len(parts) == 1 else (parts[0], parts[1].strip())
        if kind not in KINDS:
            raise ProtectConfigError(_("{where}: unknown kind {kind} (use name, command, user or exe, "
                                       "then a pattern)").format(where=f"{origin}:{number}", kind=repr(kind)))
        if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in pattern):
            raise ProtectConfigError(_("{where}: the pattern contains control characters").format(
                where=f"{origin}:{number}"))
        rules.append(Rule(kind, pattern, f"{origin}:{number}", own=own))
    return rules


def _shown(path: Path | str) -> str:
    from .procs import sanitize

    return sanitize(str(path))[:300]


def read_conf(path: Path, system: bool, euid: int | None = None) -> tuple[str | None, str | None]:
    """(text, None), (None, None) when there is no file, or (None, note) when the file is refused:
    never through a symlink or into a FIFO (O_NOFOLLOW | O_NONBLOCK, then fstat: a regular file),
    at most MAX_CONF bytes, owned by root or the reader and not writable by others (as root: by
    its group either, and every directory above it root's: config.py's checks). A refused file's rules are not
    obeyed: another user must not choose what vram protects."""
    from . import config

    euid = os.geteuid() if euid is None else euid
    path = Path(path)

    def refused(why: str) -> tuple[None, str]:
        return None, _("protected list: {path} ignored: {why}").format(path=_shown(path), why=why)

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as e:
        if os.path.islink(path):
            return refused(_("it is a symbolic link, which vram does not follow"))
        if isinstance(e, PermissionError) and not config._searchable(path.parent):
            return None, None  # behind a directory this user cannot enter: not this user's file
        return refused(_("cannot read it ({error})").format(error=e.strerror))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return refused(_("not a regular file"))
        if info.st_uid not in (0, euid):
            return refused(_("it belongs to uid {uid}, not to root or you").format(uid=info.st_uid))
        # Others may never write it; its group only where vram runs as root (config.py's rule: a
        # login user's umask 002 with a group of their own is common, and their rules are theirs).
        if info.st_mode & (stat.S_IWOTH | (stat.S_IWGRP if euid == 0 else 0)):
            return refused(_("users other than its owner may change it (chmod go-w it)"))
        if euid == 0:
            try:
                config._check_directories(path)
            except RequestError as e:
                return refused(str(e).split(": ", 1)[-1])
        data = os.read(fd, MAX_CONF + 1)
    except OSError as e:
        return refused(_("cannot read it ({error})").format(error=e.strerror))
    finally:
        os.close(fd)
    if len(data) > MAX_CONF:
        raise ProtectConfigError(_("{path}: larger than {size} KiB: not a protected list").format(
            path=_shown(path), size=MAX_CONF // 1024))
    try:
        return data.decode(), None
    except UnicodeDecodeError:
        raise ProtectConfigError(_("{path}: not UTF-8 text").format(path=_shown(path))) from None


def load(system: Path | None = SYSTEM_CONF, user: Path | None = None,
         caller_chain: tuple[int, ...] = (), caller_uid: int | None = None) -> Protection:
    """The built-in rules plus the admin's and the user's files (a missing file is fine; a file
    that is not safely theirs is ignored with a note in Protection.notes)."""
    rules = builtin_rules()
    files = []
    notes = []
    euid = os.geteuid()
    for path, is_system in ((system, True), (user_conf() if user is None else user, False)):
        if path is None:
            continue
        if str(path) == os.devnull:
            continue
        text, note = read_conf(Path(path), is_system, euid)
        if note:
            notes.append(note)
        if text is None:
            continue
        rules.extend(parse(text, str(path), own=not is_system))
        files.append(str(path))
    me = (0 if euid == 0 else os.getuid()) if caller_uid is None else caller_uid
    return Protection(rules=rules, caller_chain=caller_chain, files=tuple(files), notes=notes, caller_uid=me)
