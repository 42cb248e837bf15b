"""A Hugging Face Hub id's config.json from the local cache, never from the network.

The cache is huggingface_hub's layout (file_download.py): under the hub cache folder each model is
`models--{org}--{name}/` with `refs/main` (the commit the main branch pointed to when it was
downloaded), `snapshots/{commit}/config.json` and `blobs/{sha256}`; a snapshot's files are symlinks
into `blobs/` (or plain copies where the file system has no symlinks). The folder is, in order:
`HF_HUB_CACHE`, the older `HUGGINGFACE_HUB_CACHE`, `$HF_HOME/hub`, `$XDG_CACHE_HOME/huggingface/hub`,
`~/.cache/huggingface/hub` (huggingface_hub's constants.py).

A cache on a shared server is written by other users: the cache folder the environment names is
followed (its owner chose it), but below it every folder is opened without following a symlink,
refs/main is read bounded, and the one symlink the layout itself makes, snapshots/{commit}/config.json
-> ../../blobs/{sha256}, is read with readlink and resolved here, only to a file directly in the
same model's blobs/ folder (opened without following a link: no symlink games out of the cache).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import VramkitError
from ..i18n import _

# huggingface_hub's repo-id rule (utils/_validators.py): [org/]name of word characters, '-' and '.',
# at most 96 each, no '--' or '..'
_REPO_ID_RE = re.compile(r"^(?:[\w.-]{1,96}/)?[\w.-]{1,96}$", re.ASCII)
_REVISION_RE = re.compile(r"^[0-9A-Za-z._-]{1,128}$", re.ASCII)  # a commit hash (a branch name is a ref)
MAX_REF_BYTES = 256
MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KiB; a large or endless file is not one
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class CacheError(VramkitError):
    """The id is in the cache but its config cannot be read safely: one line saying why."""

    exit_code = 2


@dataclass(frozen=True)
class CachedConfig:
    data: bytes
    path: str  # snapshots/{revision}/config.json, for messages
    revision: str


def is_repo_id(text: str) -> bool:
    return bool(_REPO_ID_RE.match(text)) and "--" not in text and ".." not in text


def hub_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The hub cache folder huggingface_hub would use, from the environment."""
    env = os.environ if env is None else env
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(name):
            return Path(env[name]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    xdg = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(xdg).expanduser() / "huggingface" / "hub"


def read_bounded(fd: int, limit: int, what: str) -> bytes:
    """A regular file's bytes, at most `limit` (more is an error: not what it claims to be)."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise CacheError(_("{path} is not a regular file").format(path=what))
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise CacheError(_("{path} is larger than {limit:,} bytes: not a config").format(path=what, limit=limit))
    return b"".join(chunks)


def _open(name: str, flags: int, dir_fd: int, what: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise CacheError(_("{path} is a symlink or not a folder: not followed in a shared cache").format(
                path=what)) from None
        raise


def read_cached_config(repo_id: str, cache: Path | None = None) -> CachedConfig | None:
    """The config.json of `repo_id` at the revision refs/main names (or the only snapshot when there is
    no refs/main); None when the cache has no such model. CacheError when it has one that cannot be read."""
    if not is_repo_id(repo_id):
        return None
    root = hub_cache_dir() if cache is None else cache
    folder = "models--" + repo_id.replace("/", "--")
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the folder the user named
    except OSError:
        return None
    try:
        try:
            repo_fd = _open(folder, _DIR, root_fd, f"{root / folder}")
        except FileNotFoundError:
            return None
        try:
            return _read_snapshot(repo_fd, root / folder)
        finally:
            os.close(repo_fd)
    except OSError as e:
        raise CacheError(_("{path}: {error}").format(path=root / folder, error=e.strerror or e)) from None
    finally:
        os.close(root_fd)


def _revision(repo_fd: int, where: Path) -> str:
    """refs/main's commit; without refs/main, the only snapshot."""
    try:
        refs_fd = _open("refs", _DIR, repo_fd, f"{where}/refs")
    except FileNotFoundError:
        refs_fd = -1
    if refs_fd >= 0:
        try:
            fd = _open("main", _FILE, refs_fd, f"{where}/refs/main")
        except FileNotFoundError:
            fd = -1
        finally:
            os.close(refs_fd)
        if fd >= 0:
            try:
                text = read_bounded(fd, MAX_REF_BYTES, f"{where}/refs/main").decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            if not _REVISION_RE.match(text) or text in (".", ".."):
                raise CacheError(_("{path}/refs/main does not hold a commit hash").format(path=where))
            return text
    snaps_fd = _open("snapshots", _DIR, repo_fd, f"{where}/snapshots")
    try:
        names = sorted(n for n in os.listdir(snaps_fd) if _REVISION_RE.match(n) and n not in (".", ".."))
    finally:
        os.close(snaps_fd)
    if len(names) != 1:
        raise CacheError(_("{path} has no refs/main and {count} snapshots: give the path of the config.json you "
                           "mean").format(path=where, count=len(names)))
    return names[0]


def _read_snapshot(repo_fd: int, where: Path) -> CachedConfig:
    revision = _revision(repo_fd, where)
    shown = f"{where}/snapshots/{revision}/config.json"
    snaps_fd = _open("snapshots", _DIR, repo_fd, f"{where}/snapshots")
    try:
        try:
            rev_fd = _open(revision, _DIR, snaps_fd, f"{where}/snapshots/{revision}")
        except FileNotFoundError:
            raise CacheError(_("{path}/snapshots/{revision} (refs/main) is missing").format(
                path=where, revision=revision)) from None
    finally:
        os.close(snaps_fd)
    try:
        try:
            st = os.stat("config.json", dir_fd=rev_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise CacheError(_("{path} is missing: the snapshot holds no config.json").format(path=shown)) from None
        if stat.S_ISLNK(st.st_mode):  # huggingface_hub's link into blobs/, resolved by us (see above)
            target = os.readlink("config.json", dir_fd=rev_fd)
            blob = _blob_name(target, where, revision)
            if blob is None:
                raise CacheError(_("{path} links outside its model's blobs/ folder: not followed").format(path=shown))
            blobs_fd = _open("blobs", _DIR, repo_fd, f"{where}/blobs")
            try:
                fd = _open(blob, _FILE, blobs_fd, f"{where}/blobs/{blob}")
            finally:
                os.close(blobs_fd)
        else:
            fd = _open("config.json", _FILE, rev_fd, shown)
        try:
            data = read_bounded(fd, MAX_CONFIG_BYTES, shown)
        finally:
            os.close(fd)
    finally:
        os.close(rev_fd)
    return CachedConfig(data, shown, revision)


def _blob_name(target: str, where: Path, revision: str) -> str | None:
    """The blob a snapshot link names, if it is one file directly in the model's blobs/ folder: the
    relative '../../blobs/NAME' huggingface_hub writes, or the absolute path of the same file."""
    snapshot = os.path.join(str(where), "snapshots", revision)
    resolved = os.path.normpath(os.path.join(snapshot, target))  # lexically: no link is followed here
    for repo in {os.path.normpath(str(where)), os.path.realpath(str(where))}:
        parent, name = os.path.split(resolved)
        if parent == os.path.join(repo, "blobs") and name and name not in (".", ".."):
            return name
    return None


__all__ = ["CacheError", "CachedConfig", "hub_cache_dir", "is_repo_id", "read_bounded", "read_cached_config"]
