"""A process's own view of the GPUs: the ones it was told to use (the variables of its environment
each vendor's runtime reads, read as that runtime reads them: visible.py) beside the ones it holds
memory on, so that "my job runs on the wrong GPU" shows at a glance.

/proc/PID/environ is the environment the process started with: a value it set itself later
(os.environ[...] = ... in Python before CUDA starts) is not there. So a mismatch is a reason to
look, and says so, not a verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import procs
from . import visible as visible_devices
from .cuda_env import CudaDevice, Visible, devices_of
from .errors import RequestError
from .gpu_state import Snapshot
from .i18n import N_, _

ENV_NAMES = visible_devices.VARIABLES
# In the reader's language where they are made: `vram ps --env --json` is English (the CLI's JSON).
SIMULATED_ENV = N_("a simulated scenario's made-up process: it has no environment")
PIDS_UNMAPPED = N_("not read: vram runs in its own PID namespace, where NVML's pid names another process "
                   "(or none)")
PID_REUSED = N_("not read: its pid now belongs to another process (the one NVML listed exited and the pid "
                "was reused)")
STARTED_WITH = N_("this is its environment as it started: a value the process set itself later "
                  "(os.environ in Python) is not seen")

EnvReader = Callable[[int, tuple[str, ...]], procs.Environ]


@dataclass
class ProcessGpus:
    """What one process was told about GPUs, and what it holds."""

    pid: int
    user: str | None
    command: str | None
    holds: list[CudaDevice]  # where it holds memory, in NVML order
    env: dict[str, str]  # the ENV_NAMES that are set in its environment
    env_problem: str | None = None  # why its environment is unknown (then told is None)
    told: Visible | None = None  # its environment as its GPUs' runtime reads it on this machine
    mismatch: str | None = None  # "told GPU 1, holds memory on GPU 0"
    notes: list[str] = field(default_factory=list)  # pitfalls of its value, a cut environment

    @property
    def told_text(self) -> str:
        """The GPUs its environment lets it use, as vram names them, with the runtime's numbers."""
        if self.told is None:
            return _("unknown")
        if self.told.error:
            return _("none: CUDA refuses to start with this value")
        if not self.told.is_set:
            return _("every GPU ({variable} is not set)").format(variable=self.told.variable)
        if not self.told.devices:
            return _("no GPU")
        return ", ".join(_("{gpu} as cuda:{index}").format(
            gpu=d.label, index=i) for i, d in enumerate(self.told.devices))

    @property
    def holds_text(self) -> str:
        return ", ".join(d.label for d in self.holds) if self.holds else _("no GPU memory")

    def to_json(self) -> dict[str, Any]:
        told = None
        if self.told is not None:
            told = {"value": self.told.value, "order": self.told.order.order, "error": self.told.error,
                    "gpus": [_unit_json(d) for d in self.told.devices]}
        return {"pid": self.pid, "user": self.user, "command": self.command, "environment": self.env,
                "environment_problem": self.env_problem, "told": told,
                "holds": [_unit_json(d) for d in self.holds], "mismatch": self.mismatch, "notes": self.notes}


def _unit_json(d: CudaDevice) -> dict[str, Any]:
    return {"gpu": d.index, "mig_gi": d.gi, "uuid": d.uuid}


def process_gpus(snap: Snapshot, pid: int, read: EnvReader = procs.read_environ,
                 pids_visible: bool = True) -> ProcessGpus:
    """The process's own view of this snapshot's GPUs (a pid that holds no GPU memory too).
    `pids_visible`: the backend's word that NVML's pids are this /proc's (Backend.pids_visible());
    in a container's own PID namespace they are not: only the rows pidmap matched to a process here
    are that process's (its pid here and start ticks are known), and a row under a host pid no
    process here could be told to be is nobody's here, whatever its number."""
    rows = [p for p in snap.processes if p.pid_here == pid]
    devices = devices_of(snap)
    held: list[CudaDevice] = []
    for p in sorted(rows, key=lambda r: (r.gpu, r.mig_gi if r.mig_gi is not None else -1)):
        unit = next((d for d in devices if d.index == p.gpu and d.gi == p.mig_gi), None)
        if unit is not None and unit not in held:
            held.append(unit)
    first = rows[0] if rows else None
    view = ProcessGpus(pid=pid, user=first.user if first else None, command=first.command if first else None,
                       holds=held, env={})
    if first is not None and not first.real:
        view.env_problem = _(SIMULATED_ENV)
        return view
    if first is not None and not pids_visible and first.nvml_pid is None:
        view.env_problem = _(PIDS_UNMAPPED)
        return view
    environ = read(pid, ENV_NAMES)
    if environ.problem is None and first is not None and first.start_ticks is not None:
        # Checked after the read: whatever was read is then known to be this process's environment.
        environ = _checked(environ, pid, first.start_ticks)
    if environ.problem is not None:
        view.env_problem = _problem(environ.problem)
        return view
    view.env = dict(environ.values)
    if environ.truncated:
        view.notes.append(_("its environment is longer than {size} MiB: only the start was read, and a variable "
                            "set after that is not seen").format(size=procs.MAX_ENVIRON_BYTES // 2**20))
    view.told = visible_devices.read(environ.values, devices)
    view.notes.extend(view.told.pitfalls)
    view.mismatch = _mismatch(view, devices)
    return view


def _problem(problem: str) -> str:
    """Why the environment was not read, in the reader's words (procs says it in English)."""
    from .procs.environ import CANNOT_READ

    if problem.startswith(CANNOT_READ):
        return _("cannot read its environment: {why}").format(why=problem[len(CANNOT_READ):])
    return _(problem)


def _checked(environ: procs.Environ, pid: int, start_ticks: int) -> procs.Environ:
    """`environ`, or why it is not the environment of the process (pid, start_ticks): the pid was
    reused by another process, or the process exited while it was read."""
    now = procs.read_stat(pid)
    if now is None:
        return procs.Environ({}, procs.NOT_VISIBLE)
    if now.start_ticks != start_ticks:
        return procs.Environ({}, PID_REUSED)
    return environ


def _mismatch(view: ProcessGpus, devices: list[CudaDevice]) -> str | None:
    told = view.told
    assert told is not None
    if not view.holds:
        return None
    if told.error:
        return _("holds memory on {gpus}, but CUDA would refuse its {variable} ({error})").format(
            gpus=view.holds_text, variable=told.variable, error=told.error)
    try:
        allowed = visible_devices.allowed_keys(told, devices)
    except RequestError as e:  # indices on a machine of mixed models without PCI_BUS_ID
        view.notes.append(_("which GPUs it was told cannot be known: {error}").format(error=e))
        return None
    if allowed is None:
        return None
    outside = [d for d in view.holds if d.key not in allowed]
    if not outside:
        return None
    told_text = ", ".join(d.label for d in told.devices) or _("no GPU")
    view.notes.insert(0, _(STARTED_WITH))
    return _("told {told}, holds memory on {gpus}").format(told=told_text, gpus=", ".join(d.label for d in outside))


def mismatches(snap: Snapshot, read: EnvReader = procs.read_environ, pids_visible: bool = True) -> list[ProcessGpus]:
    """Every process whose memory is on a GPU its environment did not tell it to use, among the
    ones whose environment this user may read (doctor's check); where NVML's pids are not this
    /proc's (`pids_visible` False), only the rows pidmap matched to a process here."""
    out: list[ProcessGpus] = []
    for pid in sorted({p.pid for p in snap.processes if p.real and p.host_missing is None
                       and (pids_visible or p.nvml_pid is not None)}):
        view = process_gpus(snap, pid, read, pids_visible)
        if view.mismatch is not None:
            out.append(view)
    return out
