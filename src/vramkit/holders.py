"""Processes that hold a GPU's device nodes open: what `fuser -v /dev/nvidia*` (or /dev/kfd and
/dev/dri/renderD* on AMD) shows. Which nodes, and which GPU each stands for, is the backend's to say.

NVML lists the processes that have a CUDA context. Memory left behind by a crashed job, a
DataLoader worker that inherited its parent's device files, or a process in another container
is often held by a process NVML does not list; it still holds the device files open. Found by
reading the links in /proc/PID/fd. On a simulated machine the device nodes are the files the
scenario's `device_nodes` glob names (a file named nvidiaN stands for GPU N; on an AMD scenario
renderD<128+N> for ROCm's device N).
"""

from __future__ import annotations

import glob
import os
import stat
from dataclasses import dataclass, field

from .backends import Backend
from .gpu_state import Snapshot
from .i18n import _, ngettext
from .procs import HostProcess, ProcessTable, identity


@dataclass
class Holder:
    pid: int
    devices: tuple[str, ...]  # the device nodes it holds open (full paths): GPUs by number, then the rest
    host: HostProcess
    gpus: tuple[int, ...] = ()  # indices of the GPUs whose own nodes it holds (nvidiaN, renderDN)
    nvml_memory: dict[int, int | None] = field(default_factory=dict)  # GPU -> memory NVML lists
    ns_pids: tuple[int, ...] = ()  # NSpid: host pid, then its pid in each nested namespace

    @property
    def nvml_listed(self) -> bool:
        return bool(self.nvml_memory)


@dataclass
class HolderScan:
    pattern: str | None  # the device-node globs, space-separated; None: the machine has none (notes say why)
    nodes: tuple[str, ...]  # the nodes that exist
    holders: list[Holder]
    unreadable: int = 0  # processes whose open files this user may not read
    skipped_self: bool = False  # vram's own pid held nodes (NVML opens them): not listed
    notes: list[str] = field(default_factory=list)


def _file_key(st: os.stat_result) -> tuple[int, int]:
    """What a file is, whatever path names it: a device by its number (any node of it opens the
    GPU), anything else (a simulated machine's nodes) by its inode."""
    return (-1, st.st_rdev) if stat.S_ISCHR(st.st_mode) else (st.st_dev, st.st_ino)


def _nodes_by_key(paths: list[str]) -> dict[tuple[int, int], str]:
    """Each node's file key -> its path (the glob's spelling)."""
    by_key: dict[tuple[int, int], str] = {}
    for path in paths:
        try:
            by_key.setdefault(_file_key(os.stat(path)), path)
        except OSError:
            pass  # gone since the glob: no one holds it
    return by_key


def _open_nodes(pid: int, nodes: dict[str, tuple[int, int, str]],
                by_key: dict[tuple[int, int], str]) -> tuple[str, ...] | None:
    """The nodes pid holds open; None when its fd table cannot be read (not ours, or gone). A link's
    text is only the path as the process's own mount namespace spells it: a file of its own at
    /dev/nvidia0 in a tmpfs of its own reads the same, and a container given the host's nvidia1
    as its /dev/nvidia0 too. So the file it opened is the node it is (by device number), if any."""
    base = f"/proc/{pid}/fd"
    try:
        fds: list[str] | None = os.listdir(base)
    except PermissionError:
        fds = None
    except OSError:
        return ()
    if not fds:  # a main thread that exited while others run (a zombie leader) shows no table of its
        # own (or refuses it even to its owner): a live thread's is the process's
        refused = fds is None
        base, fds = _thread_fds(pid)
        if refused and not fds:
            return None
    held = set()
    for fd in fds:
        try:
            target = os.readlink(f"{base}/{fd}")
        except OSError:
            continue
        if target in nodes:
            try:
                node = by_key.get(_file_key(os.stat(f"{base}/{fd}")))
            except OSError:
                continue  # closed meanwhile
            if node is not None:
                held.add(node)
    return tuple(sorted(held, key=nodes.__getitem__))


MAX_THREADS_LOOKED = 64  # threads of a process whose own fd table reads empty that are looked at


def _thread_fds(pid: int) -> tuple[str, list[str]]:
    """The fd table as the first of pid's other threads that shows one has it (threads share one
    table): a zombie leader's own reads empty while its live threads hold the GPU. ("", []) when
    none does (a process with no descriptors open)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return "", []
    for tid in tids[:MAX_THREADS_LOOKED]:
        if tid == str(pid):
            continue
        base = f"/proc/{pid}/task/{tid}/fd"
        try:
            fds = os.listdir(base)
        except OSError:
            continue
        if fds:
            return base, fds
    return "", []


def scan(snap: Snapshot, backend: Backend, pids: list[int] | None = None,
         table: ProcessTable | None = None) -> HolderScan:
    """Every process (or only `pids`) that holds one of the backend's device nodes open."""
    patterns, why_none = backend.device_nodes()
    if not patterns:
        return HolderScan(None, (), [], notes=[why_none])
    pattern = " ".join(patterns)
    paths = sorted({p for glob_ in patterns for p in glob.glob(glob_)})
    result = HolderScan(pattern, tuple(paths), [])
    if not paths:
        result.notes.append(_("no device nodes match {pattern}").format(pattern=pattern))
        return result
    table = table or ProcessTable()
    node_gpu = backend.node_gpus(paths, snap.gpus)
    # A link in /proc/PID/fd names the real path: compare against both spellings. A GPU's own
    # nodes first, by GPU (nvidia0 ... nvidia10), then the rest (nvidiactl, kfd) by name.
    node_gpu.update({os.path.realpath(p): g for p, g in list(node_gpu.items())})
    nodes = {p: ((0, node_gpu[p], p) if p in node_gpu else (1, 0, p))
             for p in set(paths) | {os.path.realpath(p) for p in paths}}
    by_key = _nodes_by_key(paths)
    listed: dict[int, dict[int, int | None]] = {}
    for p in snap.processes:
        if p.pid_here is not None:  # a host pid a container's /proc does not have is no holder's here
            listed.setdefault(p.pid_here, {})[p.gpu] = p.memory
    me = os.getpid()
    candidates = pids if pids is not None else [int(d) for d in os.listdir("/proc") if d.isdigit()]
    for pid in candidates:
        held = _open_nodes(pid, nodes, by_key)
        if held is None:
            result.unreadable += 1
            continue
        if not held:
            continue
        if pid == me:
            result.skipped_self = True
            continue
        host = table.read(pid)
        if isinstance(host, str):
            continue  # it exited while we looked
        gpus = {node_gpu[path] for path in held if path in node_gpu}
        ident = identity(pid)
        result.holders.append(Holder(pid=pid, devices=held, host=host, gpus=tuple(sorted(gpus)),
                                     nvml_memory=listed.get(pid, {}),
                                     ns_pids=ident.ns_pids if ident else (pid,)))
    result.holders.sort(key=lambda h: h.pid)
    if result.unreadable:
        result.notes.append(ngettext("{n} process could not be inspected (its open files are not yours to read): "
                                     "run as root to see every holder",
                                     "{n} processes could not be inspected (their open files are not yours to "
                                     "read): run as root to see every holder", result.unreadable).format(
                                         n=result.unreadable))
    return result
