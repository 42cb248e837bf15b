"""The pynvml shim: nvidia-ml-py's own `pynvml` running on the simulated NVML.

`write_shim(DIR)` writes DIR/pynvml.py. With DIR first on PYTHONPATH and VRAM_SIMULATE set,
`import pynvml` in any program (gpustat, nvitop, your own) loads that file, which
1. finds the real nvidia-ml-py `pynvml.py` on sys.path (DIR excluded) and runs its code in its
   own namespace, so constants, ctypes structs, NVMLError classes and helpers are pynvml's own;
2. calls `install(globals())` here, which puts the simulator's nvml* functions in their place,
   and replaces the C library: no libnvidia-ml is ever loaded. Process lists are the exception:
   pynvml's own wrappers run on the simulated C functions, for pynvml's exact version handling.

Programs that call NVML's C functions themselves through `pynvml._nvmlGetFunctionPointer` (nvitop
does, for process lists, memory and temperature) get Python functions with the C calling
convention (ctypes arguments in, return code out) for those; any other function the simulator
lacks exists but answers NOT_SUPPORTED, as a driver does for a feature the GPU does not have.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import stat
import sys
from collections.abc import Callable

from ..errors import VramkitError
from .scenario import ScenarioError, load
from .sim import SimulatedNvml

TYPE_CHECKING = False  # for mypy: every program on the shim would import typing (~2.5 ms)
if TYPE_CHECKING:
    from pathlib import Path  # write_shim's alone: every program that loads the shim imports this module
    from typing import Any, NoReturn

MARKER = "# pynvml shim written by `vram sim shim`"
_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE in an unsigned long long field

_TEMPLATE = '''\
{marker} (vramkit {version}). Rewrite it with that command; do not edit.
"""nvidia-ml-py's pynvml on vramkit's simulated NVML: the machine named by $VRAM_SIMULATE.

PYTHONPATH=DIR VRAM_SIMULATE=demo gpustat    (DIR: this file's directory, _VRAM_SHIM_DIRECTORY)
"""
import sys as _vram_sys

_VRAM_SHIM_DIRECTORY = {directory!r}
_VRAMKIT_PARENT = {parent!r}


def _vram_real_pynvml():
    import importlib.machinery
    import os

    here = os.path.realpath(os.path.dirname(__file__))
    path = [p for p in _vram_sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("pynvml", path)
    if spec is None or spec.submodule_search_locations is not None or not str(spec.origin).endswith(".py"):
        found = "nothing" if spec is None else spec.origin
        _vram_sys.stderr.write("pynvml shim: nvidia-ml-py's pynvml.py is not installed for this Python "
                               f"({{_vram_sys.executable}}; found {{found}}): pip install nvidia-ml-py\\n")
        raise SystemExit(2)
    # get_code reuses pynvml's cached bytecode: compiling its 8000 lines would cost ~50 ms a run.
    return importlib.machinery.SourceFileLoader("pynvml", spec.origin).get_code("pynvml")


exec(_vram_real_pynvml(), globals())

try:
    from vramkit.nvml.shim import install as _vram_install
except ImportError:
    if _VRAMKIT_PARENT not in _vram_sys.path:
        _vram_sys.path.append(_VRAMKIT_PARENT)  # appended: it must not shadow this program's packages
    try:
        from vramkit.nvml.shim import install as _vram_install
    except ImportError as _vram_error:
        _vram_sys.stderr.write(f"pynvml shim: cannot import vramkit from {{_VRAMKIT_PARENT}}: {{_vram_error}}\\n")
        raise SystemExit(2) from None
_vram_install(globals())
'''


class ShimError(VramkitError):
    """The shim cannot be written there. The message is one line."""

    exit_code = 2


def write_shim(directory: str | os.PathLike[str]) -> Path:
    """Write DIRECTORY/pynvml.py (creating DIRECTORY), and return its path.

    An existing pynvml.py is replaced only when it is an earlier shim: never someone's real one.
    Whoever can write DIRECTORY decides what `import pynvml` runs there, for every program that
    puts it on PYTHONPATH (root's included), so the directory must belong to the caller or root
    and be writable by no one else (sticky or not: another user could add a `pynvml/` package or
    a `pynvml*.so` beside the shim, which Python prefers); a symlinked DIRECTORY is refused. The
    file is written to a new temporary name created with O_EXCL|O_NOFOLLOW inside the directory
    (opened once, everything relative to it) and renamed over pynvml.py.
    """
    from pathlib import Path

    from .._version import __version__

    target_dir = Path(directory).expanduser().absolute()
    target = target_dir / "pynvml.py"
    try:
        if os.path.islink(target_dir):
            raise ShimError(f"{target_dir} is a symlink: give the directory itself")
        if not target_dir.exists():
            target_dir.mkdir(mode=0o755, parents=True)
        dfd = os.open(target_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except NotADirectoryError:
        raise ShimError(f"{target_dir} exists and is not a directory") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ShimError(f"{target_dir} is a symlink: give the directory itself") from None
        raise ShimError(f"cannot write {target}: {e.strerror or e}") from None
    try:
        _check_owner(os.fstat(dfd), target_dir, "directory")
        try:
            info: os.stat_result | None = os.stat("pynvml.py", dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None:
            if not stat.S_ISREG(info.st_mode) or not _is_shim(dfd):
                raise ShimError(f"{target} exists and is not a shim written by vram: choose another directory")
            _check_owner(info, target, "file")
        parent = str(Path(__file__).resolve().parents[2])  # the directory that holds the vramkit package
        # Paths enter the code as repr() literals only, never pasted into it: a directory named
        # 'x"""; import os; ...' must not become code that runs at every `import pynvml`.
        text = _TEMPLATE.format(marker=MARKER, version=__version__, directory=str(target_dir), parent=parent)
        _replace(dfd, "pynvml.py", text.encode(), target)
    finally:
        os.close(dfd)
    return target


def _check_owner(info: os.stat_result, path: Path, what: str) -> None:
    """Refuse a directory or file that someone other than the caller or root owns or may write."""
    from ..procs import user_name

    if info.st_uid not in (os.geteuid(), 0):
        raise ShimError(f"{path}: the {what} belongs to {user_name(info.st_uid)}, not to you or root: "
                        "they could replace the pynvml that programs import; choose a directory of your own")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ShimError(f"{path}: the {what} is writable by others (mode {stat.S_IMODE(info.st_mode):04o}): "
                        "they could replace the pynvml that programs import; choose another directory "
                        "or chmod go-w it")


def _replace(dfd: int, name: str, data: bytes, target: Path) -> None:
    """Write `data` to a fresh temporary file in the directory `dfd`, then rename it to `name`
    (atomic: a program importing it meanwhile sees the old file or the new one, never half)."""
    import secrets  # here, not at the top: every program that loads the shim imports this module

    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = f".pynvml.py.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o644, dir_fd=dfd)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise ShimError(f"cannot write {target}: {e.strerror or e}") from None
    else:
        raise ShimError(f"cannot write {target}: no free temporary name in {target.parent}")
    try:
        try:
            os.fchmod(fd, 0o644)  # readable by the programs that import it, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise ShimError(f"cannot write {target}: {e.strerror or e}") from None


def _is_shim(dfd: int) -> bool:
    try:
        fd = os.open("pynvml.py", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        return f.readline(len(MARKER) + 1).decode("utf-8", "replace").startswith(MARKER)


# ---------------------------------------------------------------- inside the shimmed pynvml

class _Namespace:
    """Attribute access over a module's globals dict, live (pynvml's names, as `api`)."""

    def __init__(self, namespace: dict[str, Any]):
        self.__dict__ = namespace


def _fail(message: str) -> NoReturn:
    # We run inside `import pynvml` of someone else's program: one line, then exit 2.
    sys.stderr.write(f"pynvml shim: {message}\n")
    raise SystemExit(2)


def install(namespace: dict[str, Any]) -> SimulatedNvml:
    """Turn the real pynvml code executed in `namespace` into the simulated machine of $VRAM_SIMULATE."""
    name = os.environ.get("VRAM_SIMULATE", "").strip()
    if not name:
        from .scenario import bundled_names

        _fail("VRAM_SIMULATE is not set: set it to a bundled scenario "
              f"({', '.join(bundled_names())}) or a scenario JSON file")
    try:
        scenario = load(name)
    except ScenarioError as e:
        _fail(f"bad scenario: {e}")
    api = _Namespace(namespace)
    try:
        sim = SimulatedNvml(scenario, api=api)
    except ScenarioError as e:  # an AMD machine: nothing NVML could show
        _fail(str(e))
    # pynvml's own process-list wrappers stay: they reach the simulator through the C functions
    # below, so their version handling is pynvml's (on a driver without _v3, the unversioned call
    # raises NVMLLibraryMismatchError) and gpustat's v3 -> v2 fallback works as on such a driver.
    namespace.update({n: f for n, f in sim.functions().items() if "RunningProcesses" not in n})
    namespace["_nvmlGetFunctionPointer_cache"] = {}
    namespace["_nvmlGetFunctionPointer"] = _Library(sim, api, namespace["_nvmlGetFunctionPointer_cache"]).lookup
    namespace["_LoadNvmlLibrary"] = lambda: None
    namespace["vram_simulator"] = sim  # for the curious: pynvml.vram_simulator.scenario
    return sim


class _Library:
    """Stands in for libnvidia-ml: C functions by name, emulated on the simulator."""

    def __init__(self, sim: SimulatedNvml, api: Any, cache: dict[str, Callable[..., int]]):
        self.sim, self.api = sim, api
        # pynvml's own cache, as its _nvmlGetFunctionPointer has: gpustat fills it with fallbacks.
        self._cache = cache

    def lookup(self, name: str) -> Callable[..., int]:
        fn = self._cache.get(name)
        if fn is not None:
            return fn
        if not self.sim.driver_has(name):
            raise self.api.NVMLError(self.api.NVML_ERROR_FUNCTION_NOT_FOUND)
        body = _C_FUNCTIONS.get(name)
        if body is None and "RunningProcesses" in name:
            body = _running_processes
        if body is None:
            fn = functools.partial(self._not_supported, name)
        else:
            fn = functools.partial(self._call, body, name)
        self._cache[name] = fn
        return fn

    def _call(self, body: Callable[..., Any], name: str, *args: Any) -> Any:
        """Run a C function's body, NVML style: an NVMLError becomes its return code (what
        the C function returns: a return code, or nvmlErrorString's bytes)."""
        try:
            result = body(self.sim, name, *args)
        except self.api.NVMLError as e:
            return int(e.value)
        return self.api.NVML_SUCCESS if result is None else result

    def _not_supported(self, name: str, *args: Any) -> int:
        if not self.sim.initialized and name != "nvmlErrorString":
            return int(self.api.NVML_ERROR_UNINITIALIZED)
        return int(self.api.NVML_ERROR_NOT_SUPPORTED)


# C functions callers reach through _nvmlGetFunctionPointer, each `body(sim, name, *c_args)`:
# it writes results through the ctypes pointers it was given and returns None (success), or a
# return code, or raises NVMLError.

def _target(ref: Any) -> Any:
    """The object behind ctypes.byref(x) / ctypes.pointer(x), or x itself."""
    if hasattr(ref, "_obj"):
        return ref._obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def _fill(struct: Any, source: Any) -> None:
    """Copy `source`'s attributes into a ctypes struct by field name, whatever its version."""
    for field, *_ in struct._fields_:
        if field == "version":
            continue
        value = getattr(source, field, 0)
        if value is None:
            value = _NOT_AVAILABLE
        setattr(struct, field, value)


def _memory_info(sim: SimulatedNvml, name: str, handle: Any, ref: Any) -> None:
    out = _target(ref)
    if name.endswith("_v2"):
        result = sim.nvmlDeviceGetMemoryInfo(handle, version=out.version or sim.api.nvmlMemory_v2)
    else:
        result = sim.nvmlDeviceGetMemoryInfo(handle)
    _fill(out, result)


def _running_processes(sim: SimulatedNvml, name: str, handle: Any, count_ref: Any, array: Any) -> int | None:
    if not hasattr(type(sim), name):  # not on the instance: that would fall through to pynvml's wrapper
        return int(sim.api.NVML_ERROR_NOT_SUPPORTED)
    procs = getattr(sim, name)(handle)  # the instance's: slow_calls wrap it there
    count = _target(count_ref)
    if array is None or count.value < len(procs):
        # The two-call protocol: first ask how many, then pass an array that big.
        count.value = len(procs)
        return sim.api.NVML_ERROR_INSUFFICIENT_SIZE if procs else None
    for slot, proc in zip(array, procs):
        _fill(slot, proc)
    count.value = len(procs)
    return None


def _temperature(sim: SimulatedNvml, name: str, handle: Any, sensor: Any, ref: Any) -> None:
    _target(ref).value = sim.nvmlDeviceGetTemperature(handle, getattr(sensor, "value", sensor))


def _temperature_v(sim: SimulatedNvml, name: str, handle: Any, ref: Any) -> None:
    out = _target(ref)
    out.temperature = sim.nvmlDeviceGetTemperature(handle, out.sensorType)


def _field_values(sim: SimulatedNvml, name: str, handle: Any, count: Any, ref: Any) -> None:
    """nvitop calls the C function with its own array: answer each entry in place."""
    array = _target(ref)
    n = getattr(count, "value", count)
    asked = [(array[i].fieldId, array[i].scopeId) for i in range(n)]
    for slot, answer in zip(array, sim.nvmlDeviceGetFieldValues(handle, asked)):
        slot.timestamp, slot.valueType, slot.nvmlReturn = answer.timestamp, answer.valueType, answer.nvmlReturn
        slot.value.ullVal = answer.value.ullVal  # the union's widest member: uiVal lies within it


def _error_string(sim: SimulatedNvml, name: str, result: Any) -> bytes:
    return sim.nvmlErrorString(getattr(result, "value", result)).encode()


_C_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "nvmlDeviceGetMemoryInfo": _memory_info,
    "nvmlDeviceGetMemoryInfo_v2": _memory_info,
    "nvmlDeviceGetTemperature": _temperature,
    "nvmlDeviceGetTemperatureV": _temperature_v,
    "nvmlErrorString": _error_string,
    "nvmlDeviceGetFieldValues": _field_values,
}
