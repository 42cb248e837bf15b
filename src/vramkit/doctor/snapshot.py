"""PyTorch memory snapshots: read one safely and say what was live at the peak.

A snapshot is what `torch.cuda.memory._snapshot()` returns and `_dump_snapshot()` pickles: a dict
with `segments` (the allocator's cudaMalloc'd segments now, each split into blocks) and
`device_traces` (per device, the allocator's actions in order while `_record_memory_history()`
was on: alloc, free_requested, free_completed, segment_alloc/free, segment_map/unmap, oom,
snapshot). Forms read (docs/doctor.md):
- torch >= 2.1: a block's `frames` and `requested_size`; trace entries with `time_us` (2.2+),
  `compile_context`, `user_metadata`, `pool_id`, `forward_frames` (later versions; ignored);
- torch 2.0: a block's frames and real size under `history`;
- torch 1.13's `memory_snapshot()`: a bare list of segments (no trace: the state now only);
- `torch.cuda._memory_viz._profile_to_snapshot()`: entries carrying the profiler's `category`.

A pickle from another user is untrusted: it is read by an Unpickler that refuses every global
(a snapshot is plain dicts, lists, str, int, float, bool and None), from at most MAX_BYTES, and
walked with bounded depth and item count. Nothing here prints.

Categories: where the entries carry the profiler's, those; otherwise inferred from the frames and
the lifetime of each allocation, and "unknown" where neither says (never guessed):
- parameter: made under a module's construction, `reset_parameters`, `.to()`/`.cuda()`/`_apply`,
  `load_state_dict` or a `from_pretrained`;
- optimizer_state: made under an optimizer's step that outlives the step (its state tensors);
  temporary when freed before the step ends;
- gradient: made in the backward pass and still live when it ended (parameters' .grad);
  autograd_detail when freed inside it (gradients in flight);
- activation: made in a module's forward and still live when the backward pass began (saved for
  backward); temporary when freed before.
"""

from __future__ import annotations

import io
import os
import pickle
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import RequestError
from ..i18n import N_, _

MAX_BYTES = 512 * 1024**2
MAX_DEPTH = 40
MAX_ITEMS = 200_000_000

# The profiler's categories (torch.profiler._memory_profiler.Category, lower-cased), then ours.
CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation", "autograd_detail", "temporary", "input",
              "unknown")
CATEGORY_LABELS = {
    "parameter": N_("parameters"),
    "gradient": N_("gradients"),
    "optimizer_state": N_("optimizer state"),
    "activation": N_("activations (saved for backward)"),
    "autograd_detail": N_("autograd (gradients in flight)"),
    "temporary": N_("temporaries"),
    "input": N_("inputs"),
    "unknown": N_("unknown"),
}
FREE_IN_SEGMENTS = "free_in_segments"
FREE_LABEL = N_("free in segments (fragmentation)")  # the labels are marked: _() them where shown
# What a live block's line is when no frame of the user's code says (a key in the JSON; its label translated)
BEFORE_RECORDING = N_("allocated before recording began")
NO_USER_FRAME = N_("no frame of your code")
NO_FRAMES = N_("no frames recorded")
PICKLE_MAGIC = b"\x80"  # protocol 2 and later; torch writes 2 (C++) or the default (4/5)


class SnapshotError(RequestError):
    """Not a snapshot vramkit can read: exit 2, one line."""


# ---------------------------------------------------------------- reading

class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotError(_("refused: the pickle asks for {name}; a memory snapshot holds only dicts, lists, "
                              "strings and numbers").format(name=f"{module[:60]}.{name[:60]}"))

    def persistent_load(self, pid: Any) -> Any:
        raise SnapshotError(_("refused: the pickle uses persistent ids; a memory snapshot does not"))


def looks_like_snapshot(head: bytes, name: str = "") -> bool:
    """A pickle's first bytes (protocol 2+), or a .pickle/.pkl name: what `vram doctor FILE` reads as a
    snapshot. A log never starts with 0x80 (not a UTF-8 start byte)."""
    return head[:1] == PICKLE_MAGIC and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") \
        or name.lower().endswith((".pickle", ".pkl"))


def loads(data: bytes, source: str = "snapshot") -> Any:
    """Unpickle `data` refusing every global; SnapshotError for anything else."""
    if len(data) > MAX_BYTES:
        raise SnapshotError(_("{source}: larger than {size} MiB").format(source=source, size=MAX_BYTES // 1024**2))
    try:
        obj = _NoGlobals(io.BytesIO(data)).load()
    except SnapshotError as e:
        raise SnapshotError(f"{source}: {e.message}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, RecursionError, OverflowError, UnicodeDecodeError) as e:
        raise SnapshotError(_("{source}: not a readable pickle ({error})").format(
            source=source, error=f"{type(e).__name__}: {str(e)[:80]}")) from None
    _check_plain(obj, source)
    return obj


def _check_plain(obj: Any, source: str) -> None:
    """Only plain data, at most MAX_DEPTH deep and MAX_ITEMS values, counted as a reader walks them: a
    container the pickle shares (torch's frames are) counts each time it is reached but is looked into
    once, so shared containers built from a few bytes ("billion laughs") are refused at once, not
    after walking 200 million values; a container that holds itself is infinitely deep."""
    import sys

    def nested() -> SnapshotError:
        return SnapshotError(_("{source}: nested more than {depth} deep").format(source=source, depth=MAX_DEPTH))

    def children(value: Any) -> Any:
        return (x for kv in value.items() for x in kv) if isinstance(value, dict) else iter(value)

    done: dict[int, tuple[int, int]] = {}  # a shared container's (values, depth), by id
    # the containers being walked: [container, its children, values so far, depth so far]
    path: list[list[Any]] = []
    on_path: set[int] = set()
    result: tuple[int, int] | None = None  # the values and depth of what was just walked
    value = obj
    while True:
        if isinstance(value, (dict, list, tuple)):
            known = done.get(id(value))
            if known is not None:
                result = known
            elif id(value) in on_path or len(path) >= MAX_DEPTH:
                raise nested()
            else:
                path.append([value, children(value), 1, 0])
                on_path.add(id(value))
                result = None
        elif value is not None and not isinstance(value, (str, int, float, bytes)):
            raise SnapshotError(_("{source}: holds a {type}; a memory snapshot does not").format(
                source=source, type=type(value).__name__))
        else:
            result = (1, 0)
        while True:
            if result is not None:
                if not path:
                    return
                top = path[-1]
                top[2] += result[0]
                top[3] = max(top[3], result[1] + 1)
                if top[2] > MAX_ITEMS:
                    raise SnapshotError(_("{source}: more than {count:,} values").format(
                        source=source, count=MAX_ITEMS))
            top = path[-1]
            child = next(top[1], _END)
            if child is not _END:
                value = child
                break
            path.pop()
            on_path.discard(id(top[0]))
            result = (top[2], top[3])
            if sys.getrefcount(top[0]) > 3:  # held by more than its one parent: looked up, not walked, again
                done[id(top[0])] = result


_END = object()  # the end of a container's children


def read_file(path: str, display: str | None = None) -> Any:
    """The snapshot at `path` (a regular file, not followed through a symlink)."""
    name = display or path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise SnapshotError(_("cannot read {name}: {error}").format(name=name, error=e.strerror or e)) from None
    try:
        st = os.fstat(fd)  # before fdopen, which refuses a directory with its own error
        if not stat.S_ISREG(st.st_mode):
            raise SnapshotError(_("{name}: not a regular file").format(name=name))
        if st.st_size > MAX_BYTES:
            raise SnapshotError(_("{name}: {size} MiB, larger than the {limit} MiB read (record fewer entries: "
                                  "_record_memory_history(max_entries=...))").format(
                                      name=name, size=st.st_size // 1024**2, limit=MAX_BYTES // 1024**2))
        with os.fdopen(fd, "rb") as f:
            fd = -1
            data = f.read(MAX_BYTES + 1) or b""
    except OSError as e:  # a read that would block (a special file), an I/O error
        raise SnapshotError(_("cannot read {name}: {error}").format(name=name, error=e.strerror or e)) from None
    finally:
        if fd >= 0:
            os.close(fd)
    return loads(data, name)


# ---------------------------------------------------------------- the structures

@dataclass(frozen=True)
class Frame:
    filename: str
    line: int
    name: str

    def is_python(self) -> bool:
        return self.filename.endswith(".py")

    def site(self) -> str:
        return f"{self.filename.rsplit('/', 1)[-1]}:{self.line}"


@dataclass
class Allocation:
    addr: int
    size: int  # requested bytes, as the trace records them
    frames: tuple[Frame, ...]
    born: int | None  # index of the trace entry that made it; None: before recording began
    died: int | None = None  # index of its free_completed (or free); None: live at the snapshot
    category: str = "unknown"
    profiled: str | None = None  # the category the entry carried

    @property
    def source(self) -> str | None:
        return user_line(self.frames)

    @property
    def op(self) -> str | None:
        """The innermost Python call below the user's line (what allocated, e.g. `linear`)."""
        return next((f.name for f in self.frames if f.is_python()), None)


@dataclass
class Oom:
    index: int
    size: int
    device_free: int | None
    allocated: int  # live at that moment


@dataclass
class DeviceMemory:
    """One device's allocations over its recorded trace. Step i is the state after trace entry i-1
    (step 0: before the first entry)."""

    device: int
    allocations: list[Allocation]
    entries: int
    reserved_start: int | None  # None: no segments known
    reserved_steps: list[int] | None = None
    times_us: list[int | None] = field(default_factory=list)
    ooms: list[Oom] = field(default_factory=list)
    categories_from: str = "frames"  # "profiler" | "frames"
    # filled by analyse()
    peak_step: int = 0
    peak_allocated: int = 0

    def live_at(self, step: int) -> list[Allocation]:
        return [a for a in self.allocations if _alive(a, step)]


def _alive(a: Allocation, step: int) -> bool:
    born = -1 if a.born is None else a.born
    return born < step and (a.died is None or a.died >= step)


@dataclass
class Snapshot:
    devices: list[DeviceMemory]
    form: str  # which of the forms above
    notes: list[str] = field(default_factory=list)


def _int(v: Any, default: int = 0) -> int:
    """A snapshot's number: every one read here (an address, a size, a device, a line) is whole and
    not negative; anything else is not one (a hand-made pickle's -1 size was shown as -1B)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else default


def _frames(raw: Any) -> tuple[Frame, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for f in raw:
        if isinstance(f, dict):
            out.append(Frame(str(f.get("filename", "?"))[:500], _int(f.get("line")), str(f.get("name", "?"))[:300]))
    return tuple(out)


def _blocks(seg: dict[str, Any]) -> Iterable[tuple[int, int, str, tuple[Frame, ...]]]:
    """(address, requested size, state, frames) per block, in every form."""
    addr = _int(seg.get("address"))
    for b in seg.get("blocks") or []:
        if not isinstance(b, dict):
            continue
        size = _int(b.get("size"))
        at = _int(b.get("address"), addr)
        if "frames" in b:
            frames, requested = _frames(b.get("frames")), _int(b.get("requested_size"), size)
        elif isinstance(b.get("history"), list) and b["history"] and isinstance(b["history"][0], dict):
            h = b["history"][0]  # torch 2.0
            frames, requested = _frames(h.get("frames")), _int(h.get("real_size"), size)
        else:
            frames, requested = (), _int(b.get("requested_size"), size)
        yield at, requested, str(b.get("state", "")), frames
        addr = at + size


def parse(data: Any) -> Snapshot:
    """The devices of a snapshot in any of the forms; SnapshotError when it is none of them."""
    if isinstance(data, list):  # torch 1.13's memory_snapshot(): segments only
        data, form = {"segments": data, "device_traces": []}, "segments only (torch 1.13 memory_snapshot)"
    elif isinstance(data, dict) and isinstance(data.get("segments"), list):
        form = "torch >= 2.1 (_dump_snapshot)"
    else:
        raise SnapshotError(_("not a PyTorch memory snapshot (no 'segments': torch.cuda.memory._dump_snapshot "
                              "writes one)"))
    segments = [s for s in data["segments"] if isinstance(s, dict)]
    traces = data.get("device_traces") if isinstance(data.get("device_traces"), list) else []
    if any("history" in b for s in segments for b in s.get("blocks") or [] if isinstance(b, dict)):
        form = "torch 2.0 (block history)"
    profiled = any(isinstance(e, dict) and "category" in e for t in traces if isinstance(t, list) for e in t)
    if profiled:
        form = "profiler (_memory_viz._profile_to_snapshot)"
    devices = sorted({_int(s.get("device")) for s in segments} | {i for i, t in enumerate(traces) if t})
    out = Snapshot([], form)
    for dev in devices:
        trace = traces[dev] if dev < len(traces) and isinstance(traces[dev], list) else []
        out.devices.append(_device(dev, [s for s in segments if _int(s.get("device")) == dev],
                                   [e for e in trace if isinstance(e, dict)], profiled))
    if not out.devices:
        out.notes.append(_("the snapshot is empty: no segments and no trace (was CUDA used, and "
                           "_record_memory_history() on, in the process that wrote it?)"))
    elif not any(d.entries for d in out.devices):
        out.notes.append(_("no trace: recorded without _record_memory_history(), so this is the state when the "
                           "snapshot was taken, not its peak"))
    return out


def _device(dev: int, segments: list[dict[str, Any]], trace: list[dict[str, Any]], profiled: bool) -> DeviceMemory:
    allocs: list[Allocation] = []
    open_at: dict[int, Allocation] = {}
    reserved_delta = 0
    deltas: list[int] = []
    times: list[int | None] = []
    ooms: list[tuple[int, int, int | None]] = []
    for i, e in enumerate(trace):
        action = e.get("action")
        addr, size = _int(e.get("addr")), _int(e.get("size"))
        t = e.get("time_us")
        times.append(t if isinstance(t, int) and not isinstance(t, bool) else None)
        delta = 0
        if action == "alloc":
            cat = e.get("category")
            a = Allocation(addr, size, _frames(e.get("frames")), i,
                           profiled=str(cat) if cat is not None else ("unknown" if profiled else None))
            allocs.append(a)
            open_at[addr] = a
        elif action in ("free_completed", "free"):
            a2 = open_at.pop(addr, None)
            if a2 is None:  # allocated before recording began
                a2 = Allocation(addr, size, _frames(e.get("frames")), None, profiled="unknown" if profiled else None)
                allocs.append(a2)
            a2.died = i
        elif action in ("segment_alloc", "segment_map"):
            delta = size
        elif action in ("segment_free", "segment_unmap"):
            delta = -size
        elif action == "oom":
            df = e.get("device_free")
            ooms.append((i, size, df if isinstance(df, int) else None))
        reserved_delta += delta
        deltas.append(delta)
    # blocks live at the snapshot that the trace never saw allocated
    for addr, requested, state, frames in (b for s in segments for b in _blocks(s)):
        if state in ("active_allocated", "active_pending_free") and addr not in open_at:
            allocs.append(Allocation(addr, requested, frames, None, profiled="unknown" if profiled else None))
    reserved_end = sum(_int(s.get("total_size")) for s in segments)
    # the profiler's converter spans each device's addresses with one made-up segment: no reserved
    reserved_start: int | None = reserved_end - reserved_delta if segments and not profiled else None
    d = DeviceMemory(dev, allocs, len(trace), reserved_start, times_us=[None, *times],
                     categories_from="profiler" if profiled else "frames")
    if reserved_start is not None:
        steps, r = [reserved_start], reserved_start
        for delta in deltas:
            r += delta
            steps.append(r)
        d.reserved_steps = steps
    _categorise(d)
    _peak(d)
    for index, size, device_free in ooms:
        d.ooms.append(Oom(index, size, device_free, sum(a.size for a in d.live_at(index + 1))))
    return d


# ---------------------------------------------------------------- categories

_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "/torch/", "/vramkit/")


def user_line(frames: Iterable[Frame]) -> str | None:
    """The innermost Python frame of the user's own code: `file.py:LINE` (None: only library frames)."""
    for f in frames:
        if f.is_python() and not any(x in "/" + f.filename for x in _LIBRARY):
            return f"{f.site()} ({f.name})"
    return None


def _is(frame: Frame, paths: tuple[str, ...], names: tuple[str, ...] = ()) -> bool:
    return any(p in frame.filename for p in paths) and (not names or frame.name in names)


def _phase(frames: tuple[Frame, ...]) -> str | None:
    """Where an allocation was made, by its frames (innermost first): the innermost telling frame wins."""
    for f in frames:
        n, fn = f.name, "/" + f.filename  # torch records whole paths; the profiler shortens some
        if "AccumulateGrad" in n or "autograd::Engine" in n or "evaluate_function" in n \
                or "autograd::generated" in n or n == "_engine_run_backward" \
                or (n in ("backward", "grad") and ("/torch/autograd/" in fn or fn.endswith("/torch/_tensor.py"))):
            return "backward"
        if "/torch/optim/" in fn or n in ("zero_grad",) and "/optim" in fn:
            return "optimizer"
        if n in ("reset_parameters", "_apply", "load_state_dict", "_load_from_state_dict", "from_pretrained",
                 "to_empty") or (n == "__init__" and "/torch/nn/modules/" in fn) \
                or (n in ("to", "cuda") and fn.endswith("/torch/nn/modules/module.py")):
            return "parameter"
        if n in ("_call_impl", "_wrapped_call_impl") or (n == "forward" and f.is_python()):
            return "forward"
    return None


def _categorise(d: DeviceMemory) -> None:
    """Each allocation's category: the profiler's where given, else from frames and lifetime."""
    if d.categories_from == "profiler":
        for a in d.allocations:
            a.category = a.profiled if a.profiled in CATEGORIES else "unknown"
        return
    traced = sorted((a for a in d.allocations if a.born is not None), key=lambda a: a.born or 0)
    phases = [_phase(a.frames) for a in traced]
    # for each allocation, the index of the next allocation made in another phase, and the next backward
    next_other: list[int | None] = [None] * len(traced)
    next_backward: list[int | None] = [None] * len(traced)
    later_other: dict[str | None, int | None] = {}
    last_backward: int | None = None
    for i in range(len(traced) - 1, -1, -1):
        p = phases[i]
        next_backward[i] = last_backward
        # the first later allocation whose phase differs from p
        next_other[i] = later_other.get(p)
        born = traced[i].born
        for q in ("backward", "optimizer", "parameter", "forward", None):
            if q != p:
                later_other[q] = born
        if p == "backward":
            last_backward = born
    for i, a in enumerate(traced):
        p = phases[i]
        outlives = a.died is None or (next_other[i] is not None and a.died > (next_other[i] or 0))
        if p == "parameter":
            a.category = "parameter"
        elif p == "optimizer":
            a.category = "optimizer_state" if outlives else "temporary"
        elif p == "backward":
            a.category = "gradient" if outlives else "autograd_detail"
        elif p == "forward":
            nb = next_backward[i]
            if nb is not None:
                a.category = "activation" if a.died is None or a.died > nb else "temporary"
            else:
                a.category = "temporary" if a.died is not None else "activation"
        else:
            a.category = "unknown"


# ---------------------------------------------------------------- the peak

def _peak(d: DeviceMemory) -> None:
    """The step with the most allocated (the first, on a tie)."""
    n = d.entries
    change = [0] * (n + 2)
    for a in d.allocations:
        born = 0 if a.born is None else a.born + 1
        change[born] += a.size
        if a.died is not None:
            change[a.died + 1] -= a.size
    total, best, best_step = 0, -1, 0
    for step in range(n + 1):
        total += change[step]
        if total > best:
            best, best_step = total, step
    d.peak_step, d.peak_allocated = best_step, max(best, 0)


@dataclass
class Line:
    key: str
    label: str
    bytes: int
    count: int


@dataclass
class PeakReport:
    device: int
    step: int
    entries: int
    allocated: int
    reserved: int | None
    time_us: int | None
    by_category: list[Line]  # the categories, then free in segments where reserved is known
    by_source: list[Line]
    largest: list[Allocation]
    categories_from: str
    ooms: list[Oom]
    before_recording: int  # bytes live at the peak that were allocated before recording began
    source_lines: int  # how many source lines there were


def peak_report(d: DeviceMemory, top: int = 10) -> PeakReport:
    live = d.live_at(d.peak_step)
    cats: dict[str, list[int]] = {}
    for a in live:
        c = cats.setdefault(a.category, [0, 0])
        c[0] += a.size
        c[1] += 1
    by_category = [Line(c, CATEGORY_LABELS.get(c, c), cats[c][0], cats[c][1]) for c in CATEGORIES if c in cats]
    by_category.sort(key=lambda x: -x.bytes)
    reserved = d.reserved_steps[d.peak_step] if d.reserved_steps is not None else None
    if reserved is not None and reserved >= d.peak_allocated:
        by_category.append(Line(FREE_IN_SEGMENTS, FREE_LABEL, reserved - d.peak_allocated, 0))
    sources: dict[str, list[int]] = {}
    for a in live:
        key = a.source or (BEFORE_RECORDING if a.born is None and not a.frames
                           else NO_USER_FRAME if a.frames else NO_FRAMES)
        s = sources.setdefault(key, [0, 0])
        s[0] += a.size
        s[1] += 1
    by_source = sorted((Line(k, k, v[0], v[1]) for k, v in sources.items()), key=lambda x: (-x.bytes, x.key))
    largest = sorted(live, key=lambda a: (-a.size, a.born if a.born is not None else -1))[:top]
    t = d.times_us[d.peak_step] if d.peak_step < len(d.times_us) else None
    return PeakReport(d.device, d.peak_step, d.entries, d.peak_allocated, reserved, t, by_category,
                      by_source[:top], largest, d.categories_from, d.ooms,
                      sum(a.size for a in live if a.born is None), len(by_source))


# ---------------------------------------------------------------- the timeline

@dataclass
class Timeline:
    """Memory over the trace, stacked: `bands` (name, bytes per column) bottom first; `steps` the
    trace step each column shows (the one with the most allocated in its stretch, so the peak
    is a column); `free` the reserved-but-unallocated bytes per column (None: unknown)."""

    device: int
    by: str  # "category" | "source"
    steps: list[int]
    bands: list[tuple[str, list[int]]]
    free: list[int] | None
    peak_column: int
    times_us: list[int | None]


def timeline(d: DeviceMemory, by: str = "category", columns: int = 600, top: int = 8) -> Timeline:
    n = d.entries + 1
    if by == "category":
        key_of = {id(a): a.category for a in d.allocations}
        order = [c for c in CATEGORIES if any(a.category == c for a in d.allocations)]
    else:
        weight: dict[str, int] = {}
        for a in d.allocations:
            k = a.source or "other"
            weight[k] = weight.get(k, 0) + a.size * ((a.died if a.died is not None else n) - (a.born or 0))
        named = [name for name, __ in sorted(weight.items(), key=lambda kv: (-kv[1], kv[0])) if name != "other"][:top]
        key_of = {id(a): a.source if a.source in named else "other" for a in d.allocations}
        order = named + (["other"] if any(v == "other" for v in key_of.values()) else [])
    index = {k: i for i, k in enumerate(order)}
    change: list[dict[int, int]] = [{} for __ in range(n + 1)]
    for a in d.allocations:
        band = index[key_of[id(a)]]
        born = 0 if a.born is None else a.born + 1
        change[born][band] = change[born].get(band, 0) + a.size
        if a.died is not None:
            change[a.died + 1][band] = change[a.died + 1].get(band, 0) - a.size
    # the columns: stretches of steps, each shown by its highest step
    per = max(1, -(-n // columns))
    cur = [0] * len(order)
    total = 0
    chosen: list[int] = []
    values: list[list[int]] = []
    best_total, best_vals, best_step = -1, cur[:], 0
    for step in range(n):
        for band, v in change[step].items():
            cur[band] += v
            total += v
        if total > best_total:
            best_total, best_vals, best_step = total, cur[:], step
        if (step + 1) % per == 0 or step == n - 1:
            chosen.append(best_step)
            values.append(best_vals)
            best_total = -1
    bands = [(name, [col[i] for col in values]) for i, name in enumerate(order)]
    free = None
    if d.reserved_steps is not None:
        free = [max(0, d.reserved_steps[s] - sum(col)) for s, col in zip(chosen, values)]
    peak_column = next((i for i, s in enumerate(chosen) if s == d.peak_step), 0)
    return Timeline(d.device, by, chosen, bands, free, peak_column, [d.times_us[s] for s in chosen])
