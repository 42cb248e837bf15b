"""A process's DRM clients, from /proc/PID/fdinfo: what each open GPU file holds and has run.

The kernel's DRM client usage stats (Documentation/gpu/drm-usage-stats.rst): each DRM file a
process holds open has fdinfo lines `drm-driver`, `drm-pdev` (the PCI device), `drm-client-id`
(one per open of the device: dup'ed or inherited descriptors share it, so a client is counted
once), `drm-memory-<region>: N KiB` and `drm-engine-<engine>: N ns` (busy time, a counter).
Another user's fdinfo needs ptrace access (root): PermissionError says so. Read under `root` so
tests and the simulated AMD machine can give a tree of their own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

MAX_FDS = 4096  # a process's descriptors looked at (a server with more is not a GPU client's)
MAX_FDINFO_BYTES = 4096  # an fdinfo file is a few hundred bytes
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


@dataclass
class DrmClient:
    """One DRM client (an open of a GPU's device file) of a process."""

    client_id: str
    driver: str
    pdev: str  # PCI address, lower case ("0000:0c:00.0")
    memory: dict[str, int] = field(default_factory=dict)  # region (vram, gtt, cpu) -> bytes
    engines: dict[str, int] = field(default_factory=dict)  # engine (gfx, compute, dec, ...) -> busy ns


def _parse(text: str) -> DrmClient | None:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    if "drm-client-id" not in values or "drm-pdev" not in values:
        return None
    client = DrmClient(values["drm-client-id"], values.get("drm-driver", ""), values["drm-pdev"].lower())
    for key, value in values.items():
        number, _, unit = value.partition(" ")
        if not number.isdigit():
            continue
        if key.startswith("drm-memory-") and unit in _UNITS:
            client.memory[key[len("drm-memory-"):]] = int(number) * _UNITS[unit]
        elif key.startswith("drm-engine-") and unit == "ns" and not key.startswith("drm-engine-capacity"):
            client.engines[key[len("drm-engine-"):]] = int(number)
    return client


def drm_clients(pid: int, root: str = "/", driver: str | None = None) -> list[DrmClient]:
    """The process's DRM clients (of `driver` only, when given), one per client id. Raises
    PermissionError when its fdinfo is not ours to read; [] when it is gone or holds none."""
    base = os.path.join(root, "proc", str(pid), "fdinfo")
    try:
        names = os.listdir(base)[:MAX_FDS]
    except PermissionError:
        raise
    except OSError:
        return []
    found: dict[str, DrmClient] = {}
    for name in names:
        try:
            fd = os.open(os.path.join(base, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except PermissionError:
            raise
        except OSError:
            continue  # closed since the listing
        try:
            text = os.read(fd, MAX_FDINFO_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        finally:
            os.close(fd)
        client = _parse(text)
        if client is not None and (driver is None or client.driver == driver):
            found.setdefault(client.client_id, client)
    return list(found.values())


MAX_PIDS = 65536  # processes looked at in one scan


def pids_holding(prefixes: tuple[str, ...], root: str = "/") -> list[int]:
    """The pids under root/proc with a descriptor open on a file whose path starts with one of
    `prefixes` (the links are read, never followed). Processes whose descriptors are not ours to
    read (another user's, without root) are left out: the caller says so where it matters."""
    base = os.path.join(root, "proc")
    try:
        pids = [int(n) for n in os.listdir(base)[:MAX_PIDS] if n.isdigit()]
    except OSError:
        return []
    out = []
    for pid in pids:
        fds = os.path.join(base, str(pid), "fd")
        try:
            names = os.listdir(fds)[:MAX_FDS]
        except OSError:  # gone, or not ours
            continue
        for name in names:
            try:
                target = os.readlink(os.path.join(fds, name))
            except OSError:
                continue
            if target.startswith(prefixes):
                out.append(pid)
                break
    return out
