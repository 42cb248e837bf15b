"""What the page's event stream sends after a reading: what changed since the reading before, not
the whole status JSON again (at 8 GPUs x 200 processes that is ~760 KB every 2 s, most of it the
same numbers).

`Shown` holds the status JSON as every page following the stream holds it, and turns each new
one into a delta against it:

    {"base": 41, "dt": 2.001, "set": {top-level fields that changed},
     "gpus": {"0": {"set": {GPU fields that changed},
                    "add": [whole new processes], "del": [keys of processes gone],
                    "chg": {field: [[key, value], ...]}}}}

With `vram serve --hosts`, the doc also holds "hosts" (serve/hosts.py's entries): a delta's
"hosts" names by position each host that changed, with its own snapshot's delta (the same shape,
its own dt: {"0": {"set": {...}, "doc": {"dt": 2.0, "set": ..., "gpus": ...}}}); an unchanged host
is not sent.

GPUs are named by their position in the list (a delta is only made when the list has as many
GPUs as before); processes by `process_key` (the pid, with the MIG instance where there is one;
inside a container, a row with no pid here by its host pid).
A changed field is sent per process as a [key, value] pair: when only a process's SM% moved, that
is a dozen bytes, not its whole record.

Clocks (a process's `elapsed` and `idle_for`, the page's `watched_for`) run on between readings
by themselves: the page adds `dt` (the change of `timestamp`) to each known one, and this module
does the same to its copy, in the same floating-point sums; a clock is sent only when the
reading's value is SLACK or more away from where both have run it to (an idle holder that
stopped being idle, a process restarted under the same pid). So the page's copy and this one
stay equal (a process's start time, read again each reading, is sent only when it moves by
SLACK too), and a page that misses a delta (the server skips a stream that has not taken the
last event) is sent the whole copy instead (the server tracks which reading each stream holds).
"""

from __future__ import annotations

from typing import Any

from ..gpu_state import pid_key, pid_key_text

CLOCKS = ("elapsed", "idle_for")  # per process: seconds that run on between readings
TOP_CLOCKS = ("watched_for",)
STEADY = ("start_time",)  # per process: a time that stays, read again each reading (a few ms of jitter)
SLACK = 0.5  # seconds a clock or a steady time may be from the reading's value without being sent


def process_key(p: dict[str, Any]) -> str:
    """A process's name within its GPU's list (the same pid can hold memory on two MIG instances);
    a row with no pid here (inside a container: pid null, pidmap.py) by its host pid, nvml_pid."""
    pid = pid_key_text(pid_key(p.get("pid"), p.get("nvml_pid")))
    return pid if p.get("mig_gi") is None else f"{pid}/{p['mig_gi']}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _set(old: dict[str, Any], new: dict[str, Any], skip: tuple[str, ...], clocks: tuple[str, ...],
         dt: float) -> dict[str, Any]:
    """The fields of `new` that differ from `old` (a clock: from `old`'s value run on by `dt`, by
    SLACK or more). `new` is left holding the run-on value of each clock not sent, so that it
    becomes what the page holds; `old` is not changed."""
    changed = {}
    for name, value in new.items():
        if name in skip:
            continue
        before = old.get(name, _MISSING)
        if name in clocks and _number(before) and _number(value):
            if abs(before + dt - value) < SLACK:
                new[name] = before + dt  # the page's own sum, to the last bit
            else:  # (also a clock that stood still: the page ran it on)
                changed[name] = value
        elif name in STEADY and _number(before) and _number(value) and abs(before - value) < SLACK:
            new[name] = before
        elif before != value or type(before) is not type(value):
            changed[name] = value
    return changed


_MISSING = object()


def _gpu_delta(old: dict[str, Any], new: dict[str, Any], dt: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fields = _set(old, new, ("processes",), (), dt)
    if fields:
        out["set"] = fields
    before = {process_key(p): p for p in old.get("processes") or ()}
    after = new.get("processes") or []
    added: list[dict[str, Any]] = []
    changes: dict[str, list[list[Any]]] = {}
    for p in after:
        key = process_key(p)
        was = before.pop(key, None)
        if was is None:
            added.append(p)
            continue
        for name, value in _set(was, p, (), CLOCKS, dt).items():
            changes.setdefault(name, []).append([key, value])
    if added:
        out["add"] = added
    if before:
        out["del"] = list(before)
    if changes:
        out["chg"] = changes
    return out


class Shown:
    """The status JSON as the pages following the event stream hold it, and the reading (its
    sequence number) it stands for."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] | None = None
        self.seq = 0

    def advance(self, doc: dict[str, Any], seq: int) -> dict[str, Any] | None:
        """Take the reading `doc` (a fresh status JSON dict, now owned here: the clocks not sent
        are replaced by their run-on values) as reading `seq`; the delta from the reading shown
        before, or None where there is none to make (the first, or the list of GPUs changed
        length). The doc shown before is not changed: it may still be being sent whole."""
        old, base = self.doc, self.seq
        self.doc, self.seq = doc, seq
        if old is None or len(old.get("gpus") or ()) != len(doc.get("gpus") or ()):
            return None
        delta: dict[str, Any] = {"base": base, **_doc_delta(old, doc)}
        if doc.get("hosts") is not None or old.get("hosts") is not None:
            hosts = _hosts_delta(old.get("hosts") or [], doc.get("hosts") or [])
            if hosts is None:
                return None
            if hosts:
                delta["hosts"] = hosts
        return delta


def _doc_delta(old: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """A status JSON's changes from `old` (as many GPUs): dt, set, gpus."""
    now, then = doc.get("timestamp"), old.get("timestamp")
    dt = float(now - then) if isinstance(now, (int, float)) and isinstance(then, (int, float)) else 0.0
    delta: dict[str, Any] = {"dt": dt}
    top = _set(old, doc, ("gpus", "hosts"), TOP_CLOCKS, dt)
    if top:
        delta["set"] = top
    gpus = {}
    for i, (was, now_gpu) in enumerate(zip(old["gpus"], doc["gpus"])):
        change = _gpu_delta(was, now_gpu, dt)
        if change:
            gpus[str(i)] = change
    if gpus:
        delta["gpus"] = gpus
    return delta


def _hosts_delta(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The other hosts' changes (vram serve --hosts), by position: for each host that changed,
    "set" (its entry's fields, a whole snapshot where it came or went or its GPUs changed in
    number) and "doc" (its snapshot's delta, with that host's own dt). A host unchanged is not
    sent. None: the list changed length (never, with one --hosts)."""
    if len(old) != len(new):
        return None
    out = {}
    for i, (was, now) in enumerate(zip(old, new)):
        change: dict[str, Any] = {}
        fields = _set(was, now, ("snapshot",), (), 0.0)
        before, after = was.get("snapshot"), now.get("snapshot")
        if isinstance(before, dict) and isinstance(after, dict) \
                and len(before.get("gpus") or ()) == len(after.get("gpus") or ()):
            doc = _doc_delta(before, after)
            if len(doc) > 1 or doc["dt"]:
                change["doc"] = doc
        elif before != after:
            fields["snapshot"] = after
        if fields:
            change["set"] = fields
        if change:
            out[str(i)] = change
    return out
