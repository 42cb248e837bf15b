"""Whom a process works for, from its cgroup: a container (docker, containerd/CRI, CRI-O, podman,
LXC), a Kubernetes pod (its UID) or a Slurm job step; and the container's name from the runtime's
own state files. Read once per process (ProcessTable keeps it with the process's identity).

/proc/PID/cgroup is text the kernel writes, but the path in it is made of cgroup names, and a user
with a delegated subtree (systemd's user@UID.service, a Slurm job's user/ directory) names those:
a newline in a name makes a line of its own. So each hierarchy must appear once, the leftmost
match wins (the part the runtime or slurmd made, above anything delegated), nothing below a
user@UID.service counts but rootless podman, and every name read back is bounded and sanitized.
Other delegated trees (a machined container's, a subtree an admin gave a user) can make any name,
so for a live process a match is believed only where the directory that names it is root's
(CgroupMounts: where each hierarchy is mounted here), and Slurm's v1 path only at its root.
The pod's name, namespace and container come from the kubelet (kube/podresources.py), not here.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from dataclasses import replace

from ..errors import VramkitError
from ..gpu_state import Workload
from ..i18n import N_, _
from .files import MAX_CGROUP_BYTES, read_proc_file
from .text import sanitize

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path
if TYPE_CHECKING:
    from collections.abc import Callable

# Runtime state files are root's, but a name in them is a user's text: bounded, sanitized, cut.
MAX_STATE_BYTES = 4 * 1024 * 1024  # docker's config.v2.json holds the environment: tens of KiB
MAX_PODMAN_STATE_BYTES = 16 * 1024 * 1024  # containers.json lists every container of the host
MAX_NAME_CHARS = 128
PODMAN_REREAD_S = 10.0  # a container podman's list does not name yet: its list read again at most this often
STATE_ROOT_ENV = "VRAM_STATE_ROOT"  # where / is for the runtimes' state (tests, a host mounted elsewhere)

# A process in none of them (most of a GPU server's) costs one search of its cgroup text: each
# pattern below needs one of these words, or an id as a directory of its own.
_ANY = re.compile(r"docker|crio|libpod|nerdctl|kubepods|lxc|slurm|/[0-9a-f]{64}")
_HEX64 = r"[0-9a-f]{64}"
# Pod UIDs: a UUID (dashes; underscores in a systemd slice name) or a static pod's 32-digit hash.
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_SCOPE_RUNTIME = {"docker": "docker", "cri-containerd": "containerd", "crio": "cri-o", "libpod": "podman",
                  "nerdctl": "containerd"}
_CGROUPFS_PARENT = {"docker": "docker", "moby": "docker", "libpod_parent": "podman"}


class _Patterns:
    """Compiled on first use: `vram status` on a host without workloads never needs them."""

    def __init__(self) -> None:
        # systemd driver: <prefix>-<id>.scope; conmon scopes (crio-conmon-, libpod-conmon-) are not the container.
        self.scope = re.compile(rf"(docker|cri-containerd|crio|libpod|nerdctl)-({_HEX64})\.scope")
        self.bare = re.compile(rf"(?:(crio|libpod)-)?({_HEX64})")  # cgroupfs driver: the id as a directory
        # A kubelet with --cgroup-root (kind's /kubelet.slice) names its slices below it with the root's
        # own name first: kubelet-kubepods-besteffort-pod<uid>.slice
        self.pod_slice = re.compile(rf"(?:[a-z0-9_]+-)*kubepods(?:-[a-z]+)?-pod({_UID})\.slice")
        self.pod_dir = re.compile(rf"pod({_UID})")
        self.lxc = re.compile(r"lxc\.payload\.(.+)")
        self.lxc_name = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
        self.slurm_v1 = re.compile(r"slurm(?:_[A-Za-z0-9_.-]+)?")
        self.slurm_v2 = re.compile(r"(?:[A-Za-z0-9_.-]+_)?slurmstepd\.scope")
        self.job = re.compile(r"job_([0-9]{1,10})")
        self.step = re.compile(r"step_([a-z0-9]{1,16})")
        self.task = re.compile(r"task_([0-9]{1,7})")
        self.user_id = re.compile(r"uid_([0-9]{1,10})")
        self.user_manager = re.compile(r"user@[0-9]+\.service")


_compiled: list[_Patterns] = []


def _patterns() -> _Patterns:
    if not _compiled:
        _compiled.append(_Patterns())
    return _compiled[0]


class CgroupError(VramkitError, ValueError):
    """A cgroup file that is not what the kernel writes (a name with a newline made a line)."""


def parse(text: str, believed: Callable[[str, str], bool] | None = None) -> Workload | None:
    """The workload a /proc/PID/cgroup text names, or None (a process in none). Raises
    CgroupError on a file that cannot be the kernel's own. `believed(controllers, directory)`:
    whether a directory a match read was made by root (a live process's: read())."""
    if not _ANY.search(text):
        return None
    paths: dict[str, tuple[str, str]] = {}
    for line in text.split("\n"):
        if not line:
            continue
        parts = line.split(":", 2)
        # ASCII digits: str.isdigit() also takes '²' (int() refuses it) and '٣' (a second 3)
        if len(parts) != 3 or not (parts[0].isascii() and parts[0].isdigit()) or not parts[2].startswith("/"):
            raise CgroupError(f"a line that is not 'id:controllers:/path' ({sanitize(line[:40])!r}...)")
        if parts[0] in paths:  # one line per hierarchy: a second is a name with a newline in it
            raise CgroupError(f"hierarchy {parts[0]} listed twice (a cgroup name with a newline in it)")
        paths[parts[0]] = (parts[1], parts[2])
    # The unified hierarchy first (cgroup v2), then v1's in the kernel's order.
    refused: Workload | None = None  # the first hierarchy's match not believed, said if none is
    for hierarchy in sorted(paths, key=lambda h: (h != "0", int(h))):
        controllers, path = paths[hierarchy]
        found = parse_path(path, None if believed is None else _in_hierarchy(believed, controllers))
        if found is not None and (found.container_id or found.pod_uid or found.slurm_job is not None):
            return found
        refused = refused or found
    return refused


def _in_hierarchy(believed: Callable[[str, str], bool], controllers: str) -> Callable[[str], bool]:
    return lambda directory: believed(controllers, directory)


def parse_path(path: str, believed: Callable[[str], bool] | None = None) -> Workload | None:
    """The workload one cgroup path names, or None. `believed(directory)`: whether a directory a
    match read was made by root; a match in one that was not ends the search in this path
    (what lies below it was made by the same hand), keeping what was found above it, and is said
    in the workload's note (one without an owner when nothing above it was found)."""
    pat = _patterns()
    segments = path.split("/")
    fields: dict[str, object] = {}
    kubepods = False  # below a kubepods slice or directory: pod<uid> is a pod

    def made_by_root(*ends: int) -> bool:  # the directories ending at these segments
        return believed is None or all(believed("/".join(segments[:end + 1])) for end in ends)

    for i, seg in enumerate(segments):
        kubepods = kubepods or seg.startswith("kubepods")
        if pat.user_manager.fullmatch(seg):  # a user's own systemd: only rootless podman is real below it
            return _rootless_podman(segments[i + 1:])
        if "pod_uid" not in fields and (m := pat.pod_slice.fullmatch(seg) or (
                pat.pod_dir.fullmatch(seg) if kubepods else None)):
            if not made_by_root(i):
                fields["note"] = POD_NOT_BELIEVED
                break
            fields["pod_uid"] = m.group(1).replace("_", "-")
            continue
        if "container_id" not in fields:
            container = _container(seg, segments[i - 1] if i else "", "pod_uid" in fields)
            if container is not None:
                if made_by_root(i):
                    fields["runtime"], fields["container_id"] = container
                else:
                    fields["note"] = CONTAINER_NOT_BELIEVED
                break  # anything below is the container's own (nested runtimes, its delegated cgroups)
        if "slurm_job" not in fields and (m := pat.job.fullmatch(seg)) and i > 0 and (
                pat.slurm_v2.fullmatch(segments[i - 1]) or (  # v1: /slurm/uid_N/job_N at the hierarchy's root
                    i == 3 and pat.user_id.fullmatch(segments[2]) and pat.slurm_v1.fullmatch(segments[1]))):
            fields.update(_slurm(segments, i, m, made_by_root))
            break
    return Workload(**fields) if fields else None  # type: ignore[arg-type]


def _container(seg: str, parent: str, in_pod: bool) -> tuple[str | None, str] | None:
    pat = _patterns()
    if m := pat.scope.fullmatch(seg):
        return _SCOPE_RUNTIME[m.group(1)], m.group(2)
    if m := pat.bare.fullmatch(seg):
        prefix = m.group(1)
        if prefix:
            return ("cri-o" if prefix == "crio" else "podman"), m.group(2)
        return (_CGROUPFS_PARENT.get(parent) or ("containerd" if in_pod else None)), m.group(2)
    if m := pat.lxc.fullmatch(seg):
        return ("lxc", m.group(1)) if pat.lxc_name.fullmatch(m.group(1)) else None
    if parent == "lxc" and pat.lxc_name.fullmatch(seg):
        return "lxc", seg
    return None


def _rootless_podman(segments: list[str]) -> Workload | None:
    pat = _patterns()
    for seg in segments:
        if (m := pat.scope.fullmatch(seg)) and m.group(1) == "libpod":
            return Workload(runtime="podman", container_id=m.group(2))
    return None


def _slurm(segments: list[str], i: int, job: re.Match[str], made_by_root: Callable[..., bool]) -> dict[str, object]:
    """The job (its v1 uid_N and job_N directories root's), then its step and task, each as far
    as its directory is root's. On v1 a name is also root's where its parent is: slurmd makes
    step_N in root's job_N and task_N in step_N, and gives both to the job's user (unless
    RootOwnedCgroups); that user cannot make or rename an entry of root's job_N, but may make
    task_N directories of its own in its step_N, so a task there is left out, without a note
    (that is every job's layout on a stock node)."""
    pat = _patterns()
    v1 = bool(pat.user_id.fullmatch(segments[i - 1]))
    if not made_by_root(*((i - 1, i) if v1 else (i,))):
        return {"note": JOB_NOT_BELIEVED}
    out: dict[str, object] = {"slurm_job": int(job.group(1))}
    if v1:
        out["slurm_uid"] = int(segments[i - 1][4:])
    rest = segments[i + 1:i + 4]
    if rest and (m := pat.step.fullmatch(rest[0])):
        if not (v1 or made_by_root(i + 1)):
            out["note"] = STEP_NOT_BELIEVED
            return out
        out["slurm_step"] = m.group(1)
        # v1: step_N/task_N; v2: step_N/user/task_N
        at = i + 2 if len(rest) > 1 and rest[1] != "user" else i + 3
        task = segments[at] if at < len(segments) else ""
        if m := pat.task.fullmatch(task):
            if made_by_root(*range(i + 2, at + 1)) or (v1 and made_by_root(i + 1)):
                out["slurm_task"] = int(m.group(1))
            elif not v1:
                out["note"] = STEP_NOT_BELIEVED
    return out


# ---------------------------------------------------------------- who made a cgroup directory

MOUNTINFO = "/proc/self/mountinfo"
MAX_MOUNTINFO_BYTES = 4 * 1024 * 1024  # a node with many pods mounts thousands of things; cgroup's come first
_OCTAL = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a path as \040


class CgroupMounts:
    """Where each cgroup hierarchy is mounted here (/proc/self/mountinfo, read on first need: a
    host without workloads never reads it), and who made a cgroup directory in it."""

    def __init__(self, mountinfo: str = MOUNTINFO):
        self._mountinfo = mountinfo
        # (v1 controllers, None for cgroup2; the mount's root in the hierarchy; where it is mounted)
        self._mounts: list[tuple[frozenset[str] | None, str, str]] | None = None

    def directory(self, controllers: str, path: str) -> str | None:
        """Where the cgroup `path` of the hierarchy with `controllers` ('': the unified one) is
        here; None where that part of the hierarchy is not mounted, or `path` climbs out of this
        cgroup namespace (/../: another namespace's path, never looked up)."""
        if self._mounts is None:
            self._mounts = _cgroup_mounts(read_proc_file(self._mountinfo, MAX_MOUNTINFO_BYTES) or b"")
        if "/../" in path + "/" or "/./" in path + "/":
            return None
        wanted = frozenset(controllers.split(",")) if controllers else None
        for kind, root, point in self._mounts:
            if not (kind is None if wanted is None else kind is not None and wanted <= kind):
                continue  # another hierarchy
            if root == "/":
                return point.rstrip("/") + path
            if path == root or path.startswith(root + "/"):
                return point.rstrip("/") + path[len(root):]
        return None

    def owner(self, controllers: str, path: str) -> int | None:
        """The uid that owns the cgroup directory (not following a symbolic link); None where it
        is not here (not mounted here, removed, another namespace's). Raises OSError where it
        cannot be looked at (a directory on the way another user closed): not believed."""
        directory = self.directory(controllers, path)
        if directory is None:
            return None
        try:
            return os.lstat(directory).st_uid
        except FileNotFoundError:
            return None


def _cgroup_mounts(raw: bytes) -> list[tuple[frozenset[str] | None, str, str]]:
    out: list[tuple[frozenset[str] | None, str, str]] = []
    for line in raw.decode(errors="replace").split("\n"):
        mount, sep, source = line.partition(" - ")
        fields, about = mount.split(), source.split()
        if not sep or len(fields) < 5 or len(about) < 3 or about[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = (_OCTAL.sub(lambda m: chr(int(m.group(1), 8)), f) for f in fields[3:5])
        out.append((None if about[0] == "cgroup2" else frozenset(about[2].split(",")), root, point))
    return out


_mounts: list[CgroupMounts] = []


def cgroup_mounts() -> CgroupMounts:
    """This process's view of the cgroup mounts, read once (they do not move while vram runs)."""
    if not _mounts:
        _mounts.append(CgroupMounts())
    return _mounts[0]


# ---------------------------------------------------------------- the runtimes' own state

def state_root() -> str:
    return os.environ.get(STATE_ROOT_ENV) or "/"


def read_state_file(root: str, relative: str, limit: int) -> bytes:
    """The file at root/relative, each directory and the file itself opened without following a
    symlink and the file without blocking (a FIFO is refused, not waited on), at most `limit`
    bytes; each of them root's or this user's and writable by no one else (a sticky directory
    excepted: what is in it is checked in turn), as the runtimes' own state is: a state root
    another user handed in (VRAM_STATE_ROOT) must not name containers. Raises OSError, or
    ValueError (not a regular file; another user's; too large), with the reason."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        _check_owner(fd, root)
        *dirs, name = relative.strip("/").split("/")
        for part in dirs:
            nxt = _open_at(part, flags | os.O_DIRECTORY, fd)
            os.close(fd)
            fd = nxt
            _check_owner(fd, part)
        file_fd = _open_at(name, flags | os.O_NONBLOCK | os.O_NOCTTY, fd)
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as f:
        st = _check_owner(f.fileno(), name)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{st.st_size} bytes, more than the {limit} read")
        return f.read(limit)


def _check_owner(fd: int, name: str) -> os.stat_result:
    st = os.fstat(fd)
    if st.st_uid not in (0, os.geteuid()):
        raise ValueError(f"{name} belongs to uid {st.st_uid}, not to root or you")
    if st.st_mode & 0o002 and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        raise ValueError(f"{name} may be changed by any user")
    return st


def _open_at(name: str, flags: int, dir_fd: int) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as e:  # O_NOFOLLOW says ELOOP, or ENOTDIR with O_DIRECTORY: say which it was
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
            raise OSError(errno.ELOOP, "a symbolic link (not followed)") from None
        raise


def _clean_name(value: object) -> str | None:
    if not isinstance(value, str) or not value.strip("/"):
        return None
    return sanitize(value.strip("/"))[:MAX_NAME_CHARS]


class RuntimeNames:
    """Container names (and images) from the runtimes' state files, each file read once: docker's
    containers/ID/config.v2.json, podman's containers.json. A file that cannot be read leaves the
    name unknown and says why in `problem`, once per file."""

    DOCKER = "var/lib/docker/containers/{id}/config.v2.json"
    PODMAN = "var/lib/containers/storage/overlay-containers/containers.json"

    def __init__(self, root: str | None = None):
        self.root = root or state_root()
        self._podman: dict[str, tuple[str | None, str | None]] | None = None
        self._podman_read = 0.0  # when (time.monotonic) it was read
        self.problems: dict[str, str] = {}  # file -> why it was not read (FIFO, symlink, garbage)

    def name(self, runtime: str | None, container_id: str) -> tuple[str | None, str | None, str | None]:
        """(name, image, problem) of a container."""
        if runtime == "docker":
            return self._docker(container_id)
        if runtime == "podman":
            # One list for every container: read once, and again for one started since (a long view)
            if self._podman is None or (container_id not in self._podman
                                        and time.monotonic() - self._podman_read >= PODMAN_REREAD_S):
                self._podman, self._podman_read = self._read_podman(), time.monotonic()
            name, image = self._podman.get(container_id, (None, None))
            return name, image, self.problems.get(self.PODMAN)
        return None, None, None

    def _docker(self, container_id: str) -> tuple[str | None, str | None, str | None]:
        import json  # only where a container is: `vram status` elsewhere does not load it

        relative = self.DOCKER.format(id=container_id)
        try:
            doc = json.loads(read_state_file(self.root, relative, MAX_STATE_BYTES))
        except FileNotFoundError:
            return None, None, None  # not readable here is no problem: not root, or another data-root
        except PermissionError:
            return None, None, None
        except (OSError, ValueError) as e:  # json's errors are ValueErrors
            return None, None, self._problem(relative, e)
        if not isinstance(doc, dict):
            return None, None, self._problem(relative, ValueError("not a JSON object"))
        config = doc.get("Config")
        return _clean_name(doc.get("Name")), _clean_name(config.get("Image") if isinstance(config, dict) else None), \
            None

    def _read_podman(self) -> dict[str, tuple[str | None, str | None]]:
        import json

        try:
            doc = json.loads(read_state_file(self.root, self.PODMAN, MAX_PODMAN_STATE_BYTES))
        except (FileNotFoundError, PermissionError):
            return {}
        except (OSError, ValueError) as e:
            self._problem(self.PODMAN, e)
            return {}
        out: dict[str, tuple[str | None, str | None]] = {}
        for entry in doc if isinstance(doc, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                names = entry.get("names")
                out[entry["id"]] = (_clean_name(names[0]) if isinstance(names, list) and names else None,
                                    _clean_name(entry.get("image")))
        return out

    def _problem(self, relative: str, error: Exception) -> str:
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        text = sanitize(NAME_UNKNOWN.format(path=relative, why=why[:120]))
        self.problems[relative] = text
        return text


def read(pid: int, names: RuntimeNames | None = None, mounts: CgroupMounts | None = None,
         raw: bytes | None = None) -> Workload | str | None:
    """The workload of a live process (None: in none), its container named from the runtime's
    state; a string: why its cgroup cannot be trusted (one line). A match is believed only where
    the cgroup directory that names it is root's (a missing one, not mounted here or gone with
    the process, as before: its cgroup file read again must name it still). `raw`: the cgroup
    file as the caller has just read it (None: read here)."""
    return read_in(f"/proc/{int(pid)}/cgroup", names, mounts or cgroup_mounts(), raw)


def read_in(cgroup_path: str, names: RuntimeNames | None = None,
            mounts: CgroupMounts | None = None, raw: bytes | None = None) -> Workload | str | None:
    """read() of a cgroup file (a process's, or a test's fixture); without `mounts`, no
    directory is looked at."""
    if raw is None:
        raw = read_proc_file(cgroup_path, MAX_CGROUP_BYTES)
    if raw is None:
        return None
    text = raw.decode(errors="replace")
    if mounts is None:
        return from_text(text, names)
    again: list[str | None] = []  # the file read a second time, at most once

    def believed(controllers: str, directory: str) -> bool:
        try:
            uid = mounts.owner(controllers, directory)
        except OSError:
            return False
        if uid is not None:
            return uid == 0
        # Not here. A cgroup with a process in it cannot be removed: if the file still names it,
        # it is out of sight (another namespace, not mounted); if not, the process moved out of
        # a directory removed meanwhile, and what named it is not believed. Gone: as before.
        if not again:
            second = read_proc_file(cgroup_path, MAX_CGROUP_BYTES)
            again.append(None if second is None else second.decode(errors="replace"))
        return again[0] is None or again[0] == text

    return from_text(text, names, believed)


def from_text(text: str, names: RuntimeNames | None = None,
              believed: Callable[[str, str], bool] | None = None) -> Workload | str | None:
    try:
        found = parse(text, believed)
    except CgroupError as e:
        return CGROUP_UNREADABLE.format(error=e)
    if found is None or found.container_id is None or names is None or found.runtime == "lxc":
        return found
    if found.runtime == "podman" and _patterns().user_manager.search(text):
        # rootless: its id is its user's choice (a cgroup name) and its name in that user's own
        # storage; root's list must not lend it the name of root's container of that id
        return found
    name, image, problem = names.name(found.runtime, found.container_id)
    if name is None and image is None and problem is None:
        return found
    return replace(found, container_name=name, image=image, note=problem or found.note)


# A Slurm job's processes: what their environment says of the job beyond its cgroup path.
SLURM_JOB_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")


def slurm_gpu_variables() -> tuple[str, ...]:
    """The variables that list a job's GPUs, most telling first: the step's (srun), the job's
    (batch, salloc), then CUDA's own list, which Slurm numbers from 0 inside a job whose devices
    it constrains (ConstrainDevices=yes). Loaded for a Slurm job's process only."""
    from ..cuda_env import VISIBLE  # the vendor's variable is named below the seam

    return ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", VISIBLE)


def slurm_variables() -> tuple[str, ...]:
    """What is read of a Slurm job's process's environment (with_environment)."""
    return SLURM_JOB_VARIABLES + slurm_gpu_variables()


MAX_SLURM_GPUS = 64  # entries of a GPU list believed: a node has a handful of GPUs, 7 MIG instances each
_GPU_ID = re.compile(r"[0-9]{1,4}|(?:GPU|MIG)-[0-9A-Za-z/-]{1,80}")


def with_environment(w: Workload, env: dict[str, str]) -> Workload:
    """A Slurm job's array job and task and its GPUs, from its environment (the cgroup names the
    job's own id only); unchanged where SLURM_JOB_ID there is not the job the cgroup names
    (variables inherited from another job). The process sets its environment itself, so this is
    its claim: the array task shown beside the job id, never instead of it (describe); a value
    that is not numbers (an array's), or not a list of GPU ids or UUIDs, is left out."""
    if env.get("SLURM_JOB_ID") != str(w.slurm_job):
        return w
    job, task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if job.isascii() and job.isdigit() and task.isascii() and task.isdigit() and len(job + task) < 20:
        w = replace(w, slurm_array_job=int(job), slurm_array_task=int(task))
    for variable in slurm_gpu_variables():
        gpus = env.get(variable, "").split(",")
        if 0 < len(gpus) <= MAX_SLURM_GPUS and all(_GPU_ID.fullmatch(g) for g in gpus):
            return replace(w, slurm_gpus=tuple(gpus), slurm_gpus_from=variable)
    return w


def short_id(w: Workload) -> str | None:
    """The container's id as people see it: 12 digits (an LXC name whole)."""
    if w.container_id is None:
        return None
    return w.container_id if w.runtime == "lxc" else w.container_id[:12]


# A workload's note is kept in English (JSON, the history): each is made from one of these forms,
# and local_note() says it in the reader's words where it is shown.
NAME_UNKNOWN = N_("container name unknown: /{path} not read ({why})")
CGROUP_UNREADABLE = N_("its cgroup cannot be read as the kernel's: {error}")
PID_NOTE = N_("pid {pid}: {why}")
POD_NAMES_UNKNOWN = N_("pod names unknown: {error}")
POD_RIVAL = N_("pod {uid}: the processes of pod {other} run on its pod's GPUs too: which is that pod cannot be told")
POD_RIVALS = N_("pod {uid}: the processes of pod {others} run on the GPUs ({gpus}) of the pod it may be: which is "
                "that pod cannot be told")
POD_NONE = N_("pod {uid}: the kubelet lists no pod holding {gpus}")
POD_SHARED = N_("pod {uid}: {n} pods share {gpus}: its name is not guessed")
# A match in a cgroup directory that is not root's (parse_path): not believed, and said once (no
# pid or path in it: every process such a directory holds shows the same line).
CONTAINER_NOT_BELIEVED = N_("a container named by a cgroup directory not known to be root's is not believed (whoever "
                            "owns the directory may name it so)")
POD_NOT_BELIEVED = N_("a pod named by a cgroup directory not known to be root's is not believed (whoever owns the "
                      "directory may name it so)")
JOB_NOT_BELIEVED = N_("a Slurm job named by a cgroup directory not known to be root's is not believed (whoever owns "
                      "the directory may name it so)")
STEP_NOT_BELIEVED = N_("a Slurm step or task named by a cgroup directory not known to be root's is not believed "
                       "(whoever owns the directory may name it so)")
NOTE_FORMS = (NAME_UNKNOWN, CGROUP_UNREADABLE, POD_NAMES_UNKNOWN, POD_RIVAL, POD_RIVALS, POD_NONE, POD_SHARED,
              PID_NOTE, CONTAINER_NOT_BELIEVED, POD_NOT_BELIEVED, JOB_NOT_BELIEVED, STEP_NOT_BELIEVED)
_note_patterns: list[tuple[str, re.Pattern[str]]] = []


def local_note(note: str) -> str:
    """A note made from NOTE_FORMS in the reader's language (a part that is itself a note too);
    any other text as it is."""
    if not _note_patterns:
        for form in NOTE_FORMS:
            parts = re.split(r"\{(\w+)\}", form)
            source = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.*?)" for i, p in enumerate(parts))
            _note_patterns.append((form, re.compile(source + r"\Z", re.S)))
    for form, pattern in _note_patterns:
        m = pattern.match(note)
        if m:
            return _(form).format(**{k: local_note(v) for k, v in m.groupdict().items()})
    return note


def describe(w: Workload | None, local: bool = False) -> str | None:
    """In words, the most telling first: 'pod nlp/train-7f9c', 'Slurm job 48211 step 0' (an array's
    task, as the process's environment says, after it),
    'container alice-dev' (or its short id), 'pod uid 0f3c...' when the kubelet did not say.
    In English (the audit log, JSON), or with `local` in the reader's language (a view)."""
    if w is None:
        return None
    say: Callable[[str], str] = _ if local else N_
    if w.pod is not None:
        if w.namespace:
            return say(N_("pod {namespace}/{pod}")).format(namespace=w.namespace, pod=w.pod)
        return say(N_("pod {pod}")).format(pod=w.pod)
    if w.pod_uid is not None:
        return say(N_("pod uid {uid}")).format(uid=w.pod_uid)
    if w.slurm_job is not None:
        job = (say(N_("Slurm job {job}")) if w.slurm_step is None else say(N_("Slurm job {job} step {step}"))).format(
            job=w.slurm_job, step=w.slurm_step)
        if w.slurm_array_task is None:
            return job
        return say(N_("{job} (array task {array}_{task}, as its environment says)")).format(
            job=job, array=w.slurm_array_job, task=w.slurm_array_task)
    if w.container_id is not None:
        what = w.container_name or short_id(w)
        if w.runtime:
            return say(N_("{runtime} container {name}")).format(runtime=w.runtime, name=what)
        return say(N_("container {name}")).format(name=what)
    return None


def matches(w: Workload | None, container: str | None = None, pod: str | None = None,
            slurm_job: str | None = None) -> bool:
    """Whether a process's workload is the one each given filter names (all of them):
    `container` its name or an id prefix of 4+ digits; `pod` its name, NAMESPACE/NAME or UID;
    `slurm_job` JOB, JOB.STEP, or an array's ARRAYJOB_TASK."""
    if container is not None:
        if w is None or w.container_id is None:
            return False
        if container not in (w.container_name, w.container_id, w.pod_container) and not (
                len(container) >= 4 and w.runtime != "lxc" and w.container_id.startswith(container)):
            return False
    if pod is not None:
        if w is None or w.pod_uid is None:
            return False
        if pod not in (w.pod, w.pod_uid, f"{w.namespace}/{w.pod}"):
            return False
    if slurm_job is not None:
        if w is None or w.slurm_job is None:
            return False
        job, __, step = slurm_job.partition(".")
        jobs = {str(w.slurm_job)}
        if w.slurm_array_task is not None:  # an array's task: by its own id, ARRAY_TASK, or the array
            jobs |= {f"{w.slurm_array_job}_{w.slurm_array_task}", str(w.slurm_array_job)}
        if job not in jobs or (step and step != w.slurm_step):
            return False
    return True
