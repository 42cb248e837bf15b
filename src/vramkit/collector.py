"""The collector: the one owner of a Machine, and the fan-out of its snapshots.

A Machine's readings are stateful where the driver and the kernel are: NVML hands out each
per-process utilization sample once ("since the last call"), and CPU % is a difference between
two reads. Two readers of one Machine would split those between them, so every repeated reader
(the live view, watch loops, kill --idle, and the recorder, exporter and web page to come)
reads through a Collector: it samples the machine, stamps each process with how long it has
been idle (idle.IdleClock, the one idle rule), keeps a ring of recent snapshots and hands each
snapshot to every consumer. Consumers must not change the snapshots they are given.

    collector = Collector(open_machine(), interval=2.0)
    collector.subscribe(lambda snap: print(len(snap.processes)))
    collector.start()          # a background thread samples every `interval` seconds
    ...
    collector.close()          # stops the thread and closes the machine

A Collector stands wherever a Machine is expected: it has `snapshot()` (a fresh sample, handed
to every consumer too), `backend` and `audit_context()`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .backends import EXTRAS, Backend
from .errors import RequestError
from .gpu_state import GpuProcess, Snapshot
from .idle import IdleClock
from .machine import Machine

Consumer = Callable[[Snapshot], None]


class Collector:
    def __init__(self, machine: Machine, interval: float = 2.0, keep: int = 16, extras: frozenset[str] = EXTRAS):
        if not interval > 0:
            raise RequestError("interval: must be more than 0 seconds", param="interval")
        self.machine = machine
        self.interval = interval
        # Which of backends.EXTRAS each reading reads: the ones its consumers use (all by default;
        # the recorder's Recorder.EXTRAS, none). Kept here, so a reopened machine reads the same.
        self.extras = extras
        # Whose state, CPU and RSS each reading reads again (None: every process's; an empty set:
        # none, the recorder's): the live view names the rows on screen and a page either side.
        # The others (but a process new to the reading) cost no /proc read while they run.
        self.usage_pids: set[int] | None = None
        # The newest last. Short: a snapshot of a busy machine holds thousands of objects, and
        # consumers that want a longer past keep their own compact history (alerts.History).
        self.recent: deque[Snapshot] = deque(maxlen=keep)
        self.idle = IdleClock()
        self.errors = 0  # samples that raised (the exception goes to the caller / on_error)
        self.last_read_seconds: float | None = None  # how long the newest reading took
        self._consumers: list[Consumer] = []
        self._read_lock = threading.Lock()  # one reading of the machine at a time
        self._deliver_lock = threading.Lock()  # consumers get snapshots one at a time, in order
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_error: Callable[[Exception], None] | None = None  # for the background thread

    # ------------------------------------------------------------ what a Machine offers
    @property
    def backend(self) -> Backend:
        return self.machine.backend

    def audit_context(self, via: str) -> dict[str, Any]:
        return self.machine.audit_context(via)

    @property
    def reading(self) -> bool:
        """Whether a sample is being read from the machine right now."""
        return self._read_lock.locked()

    def snapshot(self) -> Snapshot:
        """Sample now; every consumer gets this snapshot too."""
        return self.sample()

    def read_usage(self, procs: list[GpuProcess]) -> list[GpuProcess] | None:
        """Machine.read_usage: copies of rows a reading left unread with their state, CPU and RSS
        read now; None while a sample is being read (the caller does not wait on a slow driver)."""
        if not self._read_lock.acquire(blocking=False):
            return None
        try:
            return self.machine.read_usage(procs)
        finally:
            self._read_lock.release()

    def read_usage_of(self, pids: set[int] | None) -> None:
        """From the next reading on, read the state, CPU and RSS of `pids` only (None: of all;
        an empty set: of none but the processes new to a reading)."""
        self.usage_pids = pids

    # ------------------------------------------------------------ sampling and fan-out
    def subscribe(self, consumer: Consumer) -> Callable[[], None]:
        """Call consumer(snapshot) after every sample, in the thread that took it (the background
        loop's, or the caller of sample()), one snapshot at a time and in order. A consumer that
        raises is reported to on_error and the others still get the snapshot. Returns a function
        that unsubscribes."""
        with self._deliver_lock:
            self._consumers = [*self._consumers, consumer]

        def unsubscribe() -> None:
            with self._deliver_lock:
                self._consumers = [c for c in self._consumers if c is not consumer]
        return unsubscribe

    def sample(self) -> Snapshot:
        with self._read_lock:
            began = time.perf_counter()
            try:
                snap = self.machine.snapshot(self.extras, self.usage_pids)
            except Exception:
                self.errors += 1
                raise
            self.last_read_seconds = time.perf_counter() - began
            self.idle.update(snap, snap.monotonic)  # idle time on a clock that does not jump
            self.recent.append(snap)
            # Taken while still reading, so snapshots reach consumers in the order they were taken.
            self._deliver_lock.acquire()
        try:
            for consumer in self._consumers:
                try:
                    consumer(snap)
                except Exception as e:  # one consumer's failure is not the sampler's
                    self.errors += 1
                    if self.on_error is not None:
                        self.on_error(e)
        finally:
            self._deliver_lock.release()
        return snap

    @property
    def latest(self) -> Snapshot | None:
        return self.recent[-1] if self.recent else None

    # ------------------------------------------------------------ the background loop
    def start(self) -> None:
        """Sample every `interval` seconds in a daemon thread until close()."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="vramkit-collector", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as e:  # the loop goes on; the consumer of errors decides what to show
                if self.on_error is not None:
                    self.on_error(e)
            self.machine.backend.sleep(self._stop, self.interval)

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def replace_machine(self, machine: Machine) -> None:
        """Read `machine` from now on (a driver reload invalidates the old one's handles); the old
        one is closed. Idle clocks go on: a process keeps its identity across the reopening."""
        with self._read_lock:
            old, self.machine = self.machine, machine
        try:
            old.close()
        except Exception:  # noqa: BLE001 - a dead driver may fail to close; the new one is open
            pass

    def close(self) -> None:
        self.stop()
        with self._read_lock:  # not while a sample is being read
            self.machine.close()
