"""Pick GPUs for a job, reserve them, wait in line: what `vram pick`, `vram run`,
`vramkit.select_gpus()` and `vramkit.use_gpus()` share.

One round: snapshot NVML, then under the lease directory's locks (its own, and every GPU's)
read the live leases and the queue, decide, and (when asked) write the lease; all within
milliseconds. Waiting repeats the
round whenever a lease comes or goes (the directory changes) and every `interval` seconds.
Rounds, and LeaseWatcher's looks, read the machine through a Collector (the caller's, or one
over its Machine), as every repeated reader does (docs/architecture.md, "The collector").
"""

from __future__ import annotations

import math
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from . import leases as L
from . import visible as visible_devices
from .collector import Collector
from .cuda_env import CudaDevice, Visible, cuda_index, devices_of
from .errors import RequestError, VramkitError
from .gpu_choice import (
    DEFAULT_MAX_UTIL,
    DEFAULT_MIN_FREE_PCT,
    PREFER,
    Block,
    Decision,
    Policy,
    Unit,
    decide,
    queue_blocks,
    reasons_words,
    resolve_selectors,
    shortfall_reasons,
    shortfall_text,
    units_of,
)
from .gpu_state import GpuProcess, Snapshot
from .i18n import _, ngettext
from .machine import Machine, open_machine
from .procs import descends_from
from .units import format_duration, parse_percent, parse_size

Selectors: TypeAlias = "str | Sequence[int | str] | None"  # exclude / only: "0,2", or a list


class NoGpusAvailable(VramkitError, RuntimeError):
    """The request cannot be met: now (`impossible` False) or ever (True). One-line message."""

    def __init__(self, message: str, impossible: bool = False, decision: Decision | None = None):
        super().__init__(message)
        self.impossible = impossible
        self.decision = decision


class WaitTimedOut(NoGpusAvailable):
    """Waited as long as allowed; the message says what was still missing."""


class CudaAlreadyInitialized(VramkitError, RuntimeError):
    """use_gpus() came too late: CUDA has read CUDA_VISIBLE_DEVICES already in this process."""


# ---------------------------------------------------------------- building a policy

def parse_min_free(value: str | int | None) -> tuple[int | None, float | None]:
    """'20GiB' -> (bytes, None); '60%' -> (None, 60.0); None -> the default (None, 50.0).
    A bare number is refused (20 would be 20 bytes, surely not what was meant)."""
    if value is None:
        return None, DEFAULT_MIN_FREE_PCT
    if isinstance(value, str) and value.strip().endswith("%"):
        return None, parse_percent(value)
    if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit() and float(value) != 0:
        raise RequestError(_("{value} needs a unit, e.g. {number}GiB (or a share: 50%)").format(
            value=repr(value), number=value.strip()), param="min_free")
    return parse_size(value), None


def parse_max_util(value: str | float | None) -> float | None:
    if value is None:
        return DEFAULT_MAX_UTIL
    if isinstance(value, str) and value.strip().lower() in ("any", "none"):
        return None
    return parse_percent(value)


def build_policy(devices: list[CudaDevice], *, count: int = 1, min_free: str | int | None = None,
                 max_util: str | float | None = None, exclude: Selectors = None,
                 only: Selectors = None, prefer: str = "spread", exclusive: bool = False,
                 env: Mapping[str, str] | None = None) -> tuple[Policy, Visible]:
    """A Policy from what a person typed. A bad value is a RequestError (a ValueError) whose
    `param` names the argument. The GPUs the environment lets a program use (CUDA_VISIBLE_DEVICES
    from Slurm, a container or you; HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES on AMD GPUs: each
    vendor's rule, visible.py) are the allowed set; one a runtime would refuse: ValueError."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise RequestError(_("must be a whole number of GPUs, at least 1 (got {value})").format(value=repr(count)),
                           param="count")
    if prefer not in PREFER:
        raise RequestError(_("must be spread or pack (got {value})").format(value=repr(prefer)), param="prefer")
    try:
        size, pct = parse_min_free(min_free)
    except RequestError:
        raise
    except ValueError as e:
        raise RequestError(str(e), param="min_free") from None
    try:
        util = parse_max_util(max_util)
    except ValueError as e:
        raise RequestError(str(e), param="max_util") from None

    def keys(value: Selectors, option: str) -> list[str] | None:
        if value is None:
            return None
        text = ",".join(str(v) for v in value) if isinstance(value, (list, tuple, set)) else str(value)
        return resolve_selectors(text, devices, option)

    env = os.environ if env is None else env
    visible = visible_devices.read(env, devices)
    allowed = visible_devices.allowed_keys(visible, devices)  # ValueError when a runtime would refuse it
    policy = Policy(count=count, min_free=size, min_free_pct=pct, max_util=util,
                    exclude=keys(exclude, "exclude") or [], only=keys(only, "only"),
                    allowed=None if allowed is None else sorted(allowed),
                    allowed_from=visible.described if allowed is not None else None,
                    prefer=prefer, exclusive=exclusive)
    return policy, visible


# ---------------------------------------------------------------- the result

@dataclass
class SelectedGpu:
    cuda_index: int  # what the program calls it: cuda:0, cuda:1, ...
    index: int  # NVML index (nvidia-smi, vram status)
    mig_gi: int | None
    uuid: str | None
    name: str | None
    pci_bus_id: str | None
    memory_total: int | None
    memory_free: int | None
    utilization: int | None


@dataclass
class Selection:
    """GPUs chosen for a job, the environment that gives them to it, and its lease if any."""

    gpus: list[SelectedGpu]
    env: dict[str, str]  # the chosen vendor's variables: CUDA_VISIBLE_DEVICES (+ CUDA_DEVICE_ORDER), or HIP's
    decision: Decision = field(repr=False)
    devices: list[CudaDevice] = field(repr=False)
    snapshot: Snapshot = field(repr=False)
    lease: L.HeldLease | None = field(default=None, repr=False)
    waited: float = 0.0  # seconds spent in the queue

    @property
    def variable(self) -> str:
        """The variable that names the chosen GPUs (CUDA_VISIBLE_DEVICES, or HIP_VISIBLE_DEVICES)."""
        return visible_devices.variable_of([u.dev for u in self.decision.chosen])

    @property
    def cuda_visible_devices(self) -> str:
        """The chosen GPUs as the variable names them (the name kept from before AMD GPUs)."""
        return self.env[self.variable]

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.gpus]

    @property
    def units(self) -> list[Unit]:
        return self.decision.chosen

    def release(self) -> None:
        """End the reservation now (it also ends when the process exits or the lease times out)."""
        if self.lease is not None:
            self.lease.release()


@dataclass
class WaitStatus:
    """Handed to on_wait() on every round spent waiting."""

    decision: Decision
    waited: float
    timeout: float  # math.inf: no limit
    ahead: int  # waiters before this one

    def reasons(self) -> str:
        return reasons_words(shortfall_reasons(self.decision))

    def text(self) -> str:
        """'waiting 12s for 1 GPU, ≥50% free, ≤50% busy: GPU 4 is reserved by ...; gives up in 1m48s'
        ('waiting for ...' in the first second: not 'waiting 0s')."""
        wanted = self.decision.policy.describe()
        if self.waited >= 1:
            parts = [_("waiting {waited} for {wanted}: {reasons}").format(
                waited=format_duration(self.waited), wanted=wanted, reasons=self.reasons())]
        else:
            parts = [_("waiting for {wanted}: {reasons}").format(wanted=wanted, reasons=self.reasons())]
        if self.ahead:
            parts.append(ngettext("{n} earlier waiter in line", "{n} earlier waiters in line", self.ahead).format(
                n=self.ahead))
        if math.isfinite(self.timeout):
            parts.append(_("gives up in {duration}").format(
                duration=format_duration(math.ceil(max(0.0, self.timeout - self.waited)))))
        return reasons_words(parts)


# ---------------------------------------------------------------- one round, and the loop

def pids_here(processes: list[GpuProcess]) -> list[int]:
    """The processes of this /proc among a unit's NVML rows, by their pids here: what a lease's job
    is looked for among. Inside a container a row NVML lists under a host pid that no process here
    could be told to be (pid_here None: pidmap.py) is none of them, whatever process here has that
    number; nor is a simulated scenario's made-up process. Its memory still counts as used."""
    return [p.pid_here for p in processes if p.pid_here is not None and p.real]


def baseline_pids(processes: list[GpuProcess]) -> list[int]:
    """What a hold lease records as already on a unit, by pids here: each row's pid here, and for a
    row with none, the processes here that may hold it (pidmap's holders_here), so that one of
    them told apart later is not taken for a new process. A host pid is never recorded."""
    pids = {p.pid_here for p in processes if p.pid_here is not None}
    pids.update(h for p in processes if p.pid_here is None for h in p.holders_here)
    return sorted(pids)


def lease_blocks(state: L.State, units: list[Unit]) -> dict[str, Block]:
    pids = {u.key: pids_here(u.processes) for u in units}
    blocked: dict[str, Block] = {}
    now = time.time()
    for lease in state.leases:
        for key in lease.units:
            if key in pids and L.fulfilled(lease, key, pids[key]):
                continue  # its job shows on the GPU: NVML's numbers speak for it now
            blocked[key] = Block("lease", _("reserved by {who}").format(who=lease.who(now)))
    return blocked


def _policies(tickets: list[L.Ticket]) -> list[tuple[Policy, str]]:
    """The earlier waiters' policies; a ticket that does not hold one (written by hand) is ignored."""
    out = []
    for t in tickets:
        try:
            out.append((Policy.from_dict(t.policy), t.who()))
        except (TypeError, ValueError):
            continue
    return out


def _selection(decision: Decision, devices: list[CudaDevice], snap: Snapshot, ids: str) -> Selection:
    chosen = [u.dev for u in decision.chosen]
    gpus = [SelectedGpu(cuda_index=i, index=u.dev.index, mig_gi=u.dev.gi, uuid=u.dev.uuid, name=u.dev.name,
                        pci_bus_id=u.dev.pci_bus_id, memory_total=u.memory_total, memory_free=u.memory_free,
                        utilization=u.utilization)
            for i, u in enumerate(decision.chosen)]
    return Selection(gpus=gpus, env=visible_devices.child_env(chosen, devices, os.environ, ids), decision=decision,
                     devices=devices, snapshot=snap)


def _reader(machine: Machine | Collector, interval: float) -> Collector:
    """What repeated rounds read through: the caller's Collector, or one over its Machine (never
    closed here, nor started: each round samples it; the Machine stays the caller's to close)."""
    return machine if isinstance(machine, Collector) else Collector(machine, interval=interval if interval > 0 else 2.0)


def acquire(machine: Machine | Collector, policy: Policy, *, wait: float | None = None, lease_kind: str | None = None,
            lease_timeout: float | None = None, command: str | None = None, ids: str = "auto",
            on_wait: Callable[[WaitStatus], None] | None = None, interval: float = 2.0,
            lease_dir: L.LeaseDir | None = None) -> Selection:
    """Choose GPUs for `policy`, honouring leases and the queue; lease them when `lease_kind` is
    "run", "api" or "hold" (`lease_timeout` seconds at most). `wait`: None fails at once, a number
    of seconds (math.inf: forever) queues first come, first served. Raises NoGpusAvailable
    (WaitTimedOut after a wait) and leases.LeaseError."""
    d = lease_dir or L.lease_dir()
    timeout = lease_timeout if lease_timeout is not None else L.lease_timeout()
    reader = _reader(machine, interval)
    started = time.monotonic()
    ticket: L.HeldTicket | None = None
    conflicts, conflicted = 0, False
    try:
        while True:
            snap = reader.snapshot()
            devices = devices_of(snap)
            units = units_of(snap, devices)
            free_run = decide(policy, units)
            if free_run.impossible:
                raise NoGpusAvailable(free_run.impossible, impossible=True, decision=free_run)
            # The lock of every GPU of the machine is taken (its file created) before choosing, so
            # that launchers take turns even on a GPU never leased here while the directory lock
            # is gone around (docs/leases.md, "Locks").
            with d.locked(units=[u.key for u in units]):
                state = L.read_state(d)
                earlier = [t for t in state.tickets if ticket is None or t.seq < ticket.seq]
                blocked = lease_blocks(state, units)
                blocked = queue_blocks(units, blocked, _policies(earlier))
                decision = decide(policy, units, blocked)
                if decision.ok:
                    selection = _selection(decision, devices, snap, ids)
                    if lease_kind is not None:
                        labels = [(u.key, u.dev.label) for u in decision.chosen]
                        baseline = {u.key: baseline_pids(u.processes) for u in decision.chosen}
                        try:
                            selection.lease = L.create_lease(d, labels, lease_kind, timeout, command=command,
                                                             baseline=baseline if lease_kind == "hold" else None)
                        except L.LeaseConflict:
                            conflicts += 1
                            conflicted = True
                    if not conflicted:
                        if ticket is not None:
                            ticket.leave()
                            ticket = None
                        selection.waited = time.monotonic() - started
                        return selection
                if not conflicted:
                    if wait is None:
                        raise NoGpusAvailable(shortfall_text(decision), decision=decision)
                    if ticket is None:
                        # Ctrl-C is held off until `ticket` is set, so the finally below removes the file.
                        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
                        try:
                            ticket = L.enqueue(d, state, policy.to_dict())
                        finally:
                            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            if conflicted:
                # Another launcher leased a chosen GPU meanwhile: choose again, after a short random
                # pause (outside the locks), so that two launchers that keep choosing alike (another
                # user's takes no turns with this one: docs/leases.md) do not back off in step.
                conflicted = False
                time.sleep(random.uniform(0.0, min(0.5, 0.01 * 2 ** min(conflicts, 6))))
                continue
            assert wait is not None  # (without a wait, a round that could not choose has raised)
            waited = time.monotonic() - started
            if waited >= wait:
                raise WaitTimedOut(_("gave up after waiting {duration}: {reasons}").format(
                    duration=format_duration(waited), reasons=shortfall_text(decision)),
                                   decision=decision)
            if on_wait is not None:
                on_wait(WaitStatus(decision, waited, wait, len(earlier)))
            _pause(d, min(interval, wait - waited))
    finally:
        if ticket is not None:
            ticket.leave()
        if lease_dir is None:
            d.close()  # (a lease handed out reopens the directory lock when it needs it)


def _pause(d: L.LeaseDir, seconds: float) -> None:
    """Sleep up to `seconds`, waking early when a lease or ticket comes or goes."""
    stamp = d.change_stamp()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))
        if d.change_stamp() != stamp:
            return


class LeaseWatcher:
    """While a launched job runs: end each unit's reservation once the job (or a descendant)
    shows on it in NVML, by its pid here (pids_here: inside a container, never a host pid), and
    the whole lease when it times out."""

    def __init__(self, machine: Machine | Collector, lease: L.HeldLease, job_pid: int, interval: float = 1.0):
        self.machine, self.lease, self.job_pid = machine, lease, job_pid
        self.reader = _reader(machine, interval)  # tick() is called every `interval` seconds

    def tick(self) -> bool:
        """One look; False when there is nothing left to watch."""
        if not self.lease.pending:
            return False
        if self.lease.expired():
            self.lease.release()
            return False
        if not L.proc_numbers_ours():
            return True  # /proc numbers another namespace's processes: the job cannot be told among them
        snap = self.reader.snapshot()
        units = {u.key: u for u in units_of(snap, devices_of(snap))}
        seen = [k for k in self.lease.pending if k in units and any(
            descends_from(pid, self.job_pid) for pid in pids_here(units[k].processes))]
        if seen:
            self.lease.release_units(seen)
        return bool(self.lease.pending)


# ---------------------------------------------------------------- the Python API

def _policy_and_machine(simulate: str | None, count: int, min_free: str | int | None, max_util: str | float | None,
                        exclude: Selectors, only: Selectors, prefer: str,
                        exclusive: bool) -> tuple[Machine, Policy]:
    machine = open_machine(simulate)
    try:
        devices = devices_of(machine.snapshot())
        policy, _ = build_policy(devices, count=count, min_free=min_free, max_util=max_util, exclude=exclude,
                                 only=only, prefer=prefer, exclusive=exclusive)
    except BaseException:
        machine.close()
        raise
    return machine, policy


def select_gpus(count: int = 1, *, min_free: str | int | None = None, max_util: str | float | None = None,
                exclude: Selectors = None, only: Selectors = None, prefer: str = "spread",
                exclusive: bool = False, simulate: str | None = None) -> Selection:
    """Choose GPUs now, without reserving them (as `vram pick`).

    >>> sel = vramkit.select_gpus(2, min_free="20GiB", simulate="demo")
    >>> sel.indices, sel.env["CUDA_VISIBLE_DEVICES"]

    Sizes are bytes or strings ("20GiB", "50%" of each GPU's memory; default 50%); max_util is a
    percentage (default 50; "any" for no limit). GPUs leased by vram run / use_gpus elsewhere and
    those held for earlier waiters are skipped; an inherited CUDA_VISIBLE_DEVICES is the allowed
    set. Raises NoGpusAvailable (`.impossible` says whether waiting could help) and ValueError.
    """
    machine, policy = _policy_and_machine(simulate, count, min_free, max_util, exclude, only, prefer, exclusive)
    try:
        return acquire(machine, policy)
    finally:
        machine.close()


_held: list[L.HeldLease] = []  # leases of this process: their locks live as long as it does


def use_gpus(count: int = 1, *, min_free: str | int | None = None, max_util: str | float | None = None,
             exclude: Selectors = None, only: Selectors = None, prefer: str = "spread",
             exclusive: bool = False, wait: float | bool | None = None, lease_timeout: float | None = None,
             simulate: str | None = None) -> Selection:
    """Choose and reserve GPUs for this process, and set CUDA_VISIBLE_DEVICES (with
    CUDA_DEVICE_ORDER=PCI_BUS_ID) so that CUDA, once initialised, sees exactly them.

    Call it before anything initialises CUDA (torch.cuda, a model's .cuda()):

    >>> import vramkit
    >>> vramkit.use_gpus(2, min_free="20GiB", wait=600)
    >>> import torch; torch.cuda.device_count()   # 2

    The reservation ends when this process shows on the GPUs in NVML, when it exits, after
    `lease_timeout` seconds, or on selection.release(). `wait`: seconds to queue (True: no limit).
    Raises CudaAlreadyInitialized, NoGpusAvailable (WaitTimedOut), ValueError.
    """
    _check_cuda_not_initialised()
    if wait is True:
        wait = math.inf
    elif wait is False:
        wait = None
    machine, policy = _policy_and_machine(simulate, count, min_free, max_util, exclude, only, prefer, exclusive)
    try:
        selection = acquire(machine, policy, wait=wait, lease_kind="api", lease_timeout=lease_timeout,
                            command=L.program_name(sys.argv[:1]))
    finally:
        machine.close()
    if selection.lease is not None:
        _held.append(selection.lease)
    os.environ.update(selection.env)
    return selection


def _check_cuda_not_initialised() -> None:
    """Without importing torch: if the program has, ask it whether CUDA is up already."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    is_initialized = getattr(cuda, "is_initialized", None)
    if is_initialized is None:
        return
    try:
        initialised = bool(is_initialized())
    except Exception:  # a half-imported or mocked torch: nothing to protect
        return
    if initialised:
        raise CudaAlreadyInitialized(
            "CUDA is already initialised in this process (torch.cuda has been used), so a new "
            "CUDA_VISIBLE_DEVICES would be ignored: call vramkit.use_gpus() before the first torch.cuda "
            "call, or start the program with `vram run`")


__all__ = ["CudaAlreadyInitialized", "NoGpusAvailable", "Selection", "SelectedGpu", "WaitStatus",
           "WaitTimedOut", "acquire", "build_policy", "cuda_index", "select_gpus", "use_gpus"]
