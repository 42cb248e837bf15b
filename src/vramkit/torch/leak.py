"""LeakDetector: find tensors that outlive the training step that made them, autograd graphs that
grow across steps, and the user's line that made them.

    det = LeakDetector(model)
    with det:
        for batch in det.wrap(loader):        # or call det.step() at the end of each step
            loss = loss_fn(model(batch.x), batch.y)
            loss.backward(); opt.step(); opt.zero_grad()
            losses.append(loss)               # leak: keeps every loss and its autograd graph
            total_loss += loss                # leak: one tensor whose graph chains every step's graph
    print(det.report())

A tensor created during step k and still alive at the end of step k+1 survived its step.
Survivors are normal once (optimizer state, caches made in step 1); a line whose survivors keep
growing (never fewer, more in `window` of the last 2 x `window` steps) is a leak. So is a line
whose live tensors' autograd graph keeps growing (`total_loss += loss`). A flagged line that stops
growing for 2 x `window` steps (a bounded buffer, deque(maxlen=6)) is withdrawn. Tensors with a
grad_fn keep their autograd graph alive: the usual fix is `loss.item()` (a float) or `loss.detach()`.

Lines are the user's own code: frames in torch, vramkit and installed libraries (transformers'
modeling_bert.py) are passed over, and the innermost library line is shown beside the user's
(tensors are told apart by both: one model call makes tensors of many kinds).
Given the model, it also reports when the model is in eval mode while autograd records
(evaluation without torch.no_grad(): every activation is kept for a backward that never comes).
"""

from __future__ import annotations

import functools
import linecache
import sys
import warnings
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..i18n import _, ngettext
from ._common import Site, format_bytes, format_site, require_torch, storage_key
from ._graph import GraphSize, GraphWalker
from ._hostmem import heap_bytes, rss_bytes
from ._referrers import Holder, find_holder
from ._tracking import Tracker


class LeakWarning(UserWarning):
    """What LeakDetector(warn=True) warns with: a UserWarning, shown by default (a ResourceWarning is not)."""


@dataclass
class Leak:
    site: Site  # the user's line that created the surviving tensors (or the tensor whose graph grows)
    code: str  # that line's source
    survivors: int  # tensors from this line alive beyond their step
    bytes: int  # their own memory (views of one storage count once)
    keeps_graph: int  # how many of them hold an autograd graph
    grad_fn: str | None  # e.g. MseLossBackward0
    held_by: str | None  # who holds them, e.g. "losses (list of 12) in train", "metric.preds (list of 20) in run"
    first_step: int  # the step at which it was flagged
    library_site: Site | None = None  # the library line below the user's that made them (modeling_bert.py)
    graph_nodes: int = 0  # autograd nodes their graphs keep alive
    graph_bytes: int = 0  # tensors those nodes saved for backward (0 once backward has freed them)
    graph_steps: int = 0  # for a growing graph: how many steps it has grown by
    graph_walk_stopped: bool = False  # the walk's node budget ran out: the graph is larger than counted
    kind: str = "tensors"  # "tensors": more tensors every step; "graph": one tensor's graph grows
    # for a growing graph, what the whole process's host memory did over the steps it grew (None:
    # not known here); its nodes are C++ heap objects Python cannot size (see _hostmem)
    heap_growth: int | None = None
    rss_growth: int | None = None
    # what holds them, for the fix: "loss" (scalars with a graph), "activations" (larger tensors with
    # their graph: hidden states, logits), "hook" (kept by a forward hook), "tensors" (no graph: kept
    # batches, inputs, outputs), "graph" (kind "graph"), "bounded" (a deque(maxlen=N): not a leak)
    holds: str = "loss"
    on_gpu: bool = False  # the surviving tensors are on a GPU (not the host)

    @property
    def line(self) -> int:
        return self.site[1]

    def _graph_text(self) -> str:
        saved = (_("{size} of tensors saved for backward").format(size=format_bytes(self.graph_bytes))
                 if self.graph_bytes else _("their saved tensors freed by backward"))
        return (_("over {n:,} autograd nodes, {saved}") if self.graph_walk_stopped
                else _("{n:,} autograd nodes, {saved}")).format(n=self.graph_nodes, saved=saved)

    def _host_text(self) -> str:
        """For a graph whose saved tensors backward freed: the only bytes there are to show."""
        if self.graph_bytes:
            return ""
        heap, rss = self.heap_growth, self.rss_growth
        heap_grew, rss_grew = heap is not None and heap > 0, rss is not None and rss > 0
        if heap_grew and rss_grew:
            text = _("meanwhile the process's heap in use grew by {heap} and its resident memory grew by {rss}")
        elif heap_grew:
            text = _("meanwhile the process's heap in use grew by {heap}")
        elif rss_grew:
            text = _("meanwhile the process's resident memory grew by {rss}")
        else:
            return ""
        return "\n    " + _("{growth} (process-wide: the nodes live in host memory, and heap pages they share with "
                              "freed activations are not returned to the OS)").format(
            growth=text.format(heap=format_bytes(heap or 0), rss=format_bytes(rss or 0)))

    def __str__(self) -> str:
        if self.kind == "graph":
            text = _("{site}: the autograd graph of a tensor created here grows every step (graph of {steps} "
                     "steps: {graph})").format(site=format_site(self.site), steps=self.graph_steps,
                                               graph=self._graph_text())
            text += f"\n    {self.code}" + self._host_text()
        else:
            text = ngettext("{site}: {n} tensor ({size}) created here outlives its step, more every step",
                            "{site}: {n} tensors ({size}) created here outlive their step, more every step",
                            self.survivors).format(site=format_site(self.site), n=self.survivors,
                                                   size=format_bytes(self.bytes))
            text += f"\n    {self.code}"
        if self.library_site is not None:
            text += "\n    " + _("made in {site}").format(site=format_site(self.library_site))
        if self.held_by:
            text += "\n    " + _("held by {holder}").format(holder=self.held_by)
        return text + self._fix_text()

    def _fix_text(self) -> str:
        """What to change, for what is held (see `holds`)."""
        if self.kind == "graph":
            return "\n    " + _("accumulate loss.item() (a float) or loss.detach() instead of the tensor: every "
                                "step's graph stays chained to it")
        keeps = ""
        if self.keeps_graph:
            graph = self._graph_text() if self.graph_nodes else _("inside another tensor's graph, counted there")
            keeps = ngettext("{n} keeps an autograd graph alive ({grad_fn}; {graph})",
                             "{n} keep an autograd graph alive ({grad_fn}; {graph})", self.keeps_graph).format(
                n=self.keeps_graph, grad_fn=self.grad_fn, graph=graph)
        if self.holds == "hook":
            store = "output.detach()" + (".cpu()" if self.on_gpu else "")
            fix = _("kept by a hook on the model: remove the hook when done (handle = "
                    "module.register_forward_hook(...); handle.remove()) or store {store} inside it").format(
                        store=store)
            return "\n    " + (_("{keeps}; {fix}").format(keeps=keeps, fix=fix) if keeps else fix)
        if self.holds == "activations" and keeps:
            return "\n    " + _("{keeps}: activations or hidden states kept with their graph: cache h.detach() (or "
                                "compute them under torch.no_grad()) and clear the cache when the step is done"
                                ).format(keeps=keeps)
        if keeps:
            return "\n    " + _("{keeps}: store loss.item() (or .detach()) instead of the tensor").format(keeps=keeps)
        if self.on_gpu:
            return "\n    " + _("no autograd graph: the tensors themselves pile up (kept batches, inputs or outputs): "
                                "keep only what you need (a float with .item(), a running sum), a bounded "
                                "collections.deque(maxlen=N), .cpu() copies, or clear it")
        return "\n    " + _("no autograd graph: the tensors themselves pile up (kept batches, inputs or outputs): keep "
                            "only what you need (a float with .item(), a running sum), a bounded "
                            "collections.deque(maxlen=N), or clear it")

    def settled_text(self) -> str:
        """The line for a leak withdrawn (or never flagged: a deque(maxlen=N))."""
        values = {"site": format_site(self.site), "n": self.survivors,
                  "size": format_bytes(self.bytes + self.graph_bytes)}
        if self.holds == "bounded":
            text = ngettext("{site}: {n} tensor ({size}) in a bounded deque: not a leak",
                            "{site}: {n} tensors ({size}) in a bounded deque: not a leak", self.survivors)
        else:
            text = ngettext("{site}: stopped growing at {n} tensor ({size}): bounded, not a leak",
                            "{site}: stopped growing at {n} tensors ({size}): bounded, not a leak", self.survivors)
        text = text.format(**values)
        return _("{text}; held by {holder}").format(text=text, holder=self.held_by) if self.held_by else text


@dataclass
class LeakReport:
    leaks: list[Leak]  # still growing
    live_bytes: list[int]  # tracked live tensor memory at the end of each step
    growing: bool  # live memory grew at every one of the last `window` steps
    # the user's lines that made tensors for autograd in eval mode, with how many
    eval_with_grad: list[tuple[Site, int]] = field(default_factory=list)
    eval_library: dict[Site, int] = field(default_factory=dict)  # the library lines below them
    settled: list[Leak] = field(default_factory=list)  # flagged once, then stopped growing (bounded buffers)

    def __str__(self) -> str:
        parts = [str(leak) for leak in self.leaks]
        if self.eval_with_grad:
            parts.append(eval_text(self.eval_with_grad, self.eval_library))
        if not parts:
            parts.append(ngettext("no leak found over {n} step", "no leak found over {n} steps",
                                  len(self.live_bytes)).format(n=len(self.live_bytes)))
        for leak in self.settled:
            parts.append(leak.settled_text())
        if self.growing:
            shown = self.live_bytes[-4:]  # the growth said in bytes: a few scalars a step round away in KiB
            parts.append(_("live tensor memory grew at every step, by {size} over the last {n}: {sizes}").format(
                size=format_bytes(shown[-1] - shown[0]), n=len(shown) - 1,
                sizes=" -> ".join(format_bytes(b) for b in shown)))
        return "\n".join(parts)


def eval_text(found: list[tuple[Site, int]], library: dict[Site, int], shown: int = 3) -> str:
    """One finding for every line that recorded autograd in eval mode."""
    total = sum(n for __, n in found)
    lines = ", ".join(format_site(site) for site, __ in found[:shown])
    if len(found) > shown:
        lines = _("{sites} and {n} more").format(sites=lines, n=len(found) - shown)
    if library:
        top = ", ".join(format_site(site) for site, __ in Counter(library).most_common(2))
        text = ngettext("the model is in eval mode but autograd is recording: {n} tensor made for a backward that "
                        "never comes, at {sites} (made in {count} library lines, most in {top}): wrap evaluation "
                        "in torch.no_grad() or torch.inference_mode()",
                        "the model is in eval mode but autograd is recording: {n} tensors made for a backward that "
                        "never comes, at {sites} (made in {count} library lines, most in {top}): wrap evaluation "
                        "in torch.no_grad() or torch.inference_mode()", total)
    else:
        text = ngettext("the model is in eval mode but autograd is recording: {n} tensor made for a backward that "
                        "never comes, at {sites}: wrap evaluation in torch.no_grad() or torch.inference_mode()",
                        "the model is in eval mode but autograd is recording: {n} tensors made for a backward that "
                        "never comes, at {sites}: wrap evaluation in torch.no_grad() or torch.inference_mode()",
                        total)
    return text.format(n=total, sites=lines, count=len(library), top=top if library else "")


def _grows(history: list[int], window: int) -> bool:
    """Never fewer, and more in at least `window` of the last 2 x `window` steps."""
    recent = history[-(2 * window + 1):]
    pairs = list(zip(recent, recent[1:]))
    return len(pairs) >= window and all(b >= a for a, b in pairs) and sum(b > a for a, b in pairs) >= window


def _settled(history: list[int], window: int) -> bool:
    """No growth over the last 2 x `window` steps."""
    recent = history[-(2 * window + 1):]
    return len(recent) == 2 * window + 1 and all(b <= a for a, b in zip(recent, recent[1:]))


def _growth(history: list[int | None], start: int) -> int | None:
    first, last = history[start], history[-1]
    return None if first is None or last is None else last - first


# Tensors are told apart by the user's line and the library line below it: under one user line
# (`trainer.train()`, `out = model(...)`) the library makes tensors of many kinds.
Origin = tuple[Site, Site | None]


@dataclass
class _Site:
    """What one origin has alive at the end of a step."""
    survivors: list[Any] = field(default_factory=list)
    bytes: int = 0
    graph: GraphSize = field(default_factory=GraphSize)
    root: Any = None  # the tensor whose graph is the largest
    root_nodes: int = 0


class LeakDetector:
    """Step hook or context manager; see the module docstring."""

    def __init__(self, model: Any = None, *, window: int = 3, warn: bool = True, min_bytes: int = 0,
                 cpu_floor: int = 1024) -> None:
        if window < 2:
            raise ValueError("window must be at least 2 steps")
        require_torch()
        self.model, self.window, self.warn, self.min_bytes = model, window, warn, min_bytes
        # host tensors without a graph smaller than this are not counted as survivors: a detached loss
        # (4 bytes) kept per step is a Python object, not the memory a leak hunt is after
        self.cpu_floor = cpu_floor
        self.withdrawn: list[Leak] = []  # the leaks withdrawn at the last step (they stopped growing)
        self._bounded: dict[Origin, Leak] = {}  # lines whose survivors a deque(maxlen=N) holds: never flagged
        self._tracker = Tracker(model)
        self._counts: dict[Origin, list[int]] = {}  # survivors per step
        self._nodes: dict[Origin, list[int]] = {}  # autograd nodes kept alive per step
        self._live: list[int] = []
        self._heap: list[int | None] = []  # the process's heap in use at the end of each step
        self._rss: list[int | None] = []  # and its resident memory
        self._leaks: dict[Origin, Leak] = {}
        self._holders: dict[Origin, Holder] = {}
        self._settled: dict[Origin, Leak] = {}
        self._eval_warned: set[Site] = set()

    # ---- context manager / explicit start-stop
    def start(self) -> LeakDetector:
        self._tracker.start()
        return self

    def stop(self) -> None:
        self._tracker.stop()

    def __enter__(self) -> LeakDetector:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def wrap(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield each item; the end of each loop body is the end of a step."""
        for item in iterable:
            yield item
            self.step()

    # ---- the step hook
    def step(self) -> list[Leak]:
        """Call at the end of each step. Returns the leaks first flagged at this step."""
        tracker = self._tracker
        paused, tracker.paused = tracker.paused, True  # tensor methods called here are torch functions too
        try:
            return self._step(sys._getframe(1))
        finally:
            tracker.paused = paused
            tracker.step += 1

    def _measure(self) -> dict[Origin, _Site]:
        torch = require_torch()
        current = self._tracker.step
        sites: dict[Origin, _Site] = {}
        walker = GraphWalker(torch)
        live: list[tuple[Any, Any, tuple[int, int], _Site]] = []
        for t, entry in self._tracker.live():
            origin = entry.site, entry.library
            at = sites.get(origin)
            if at is None:
                at = sites[origin] = _Site()
            live.append((t, entry, storage_key(t), at))
        self._live.append(sum(nbytes for __, nbytes in {key for __, __, key, __ in live}))
        roots = []
        for t, __, __, at in live:
            grad_fn = t.grad_fn
            if grad_fn is not None:
                walker.add(grad_fn)
                roots.append((t, grad_fn, at))
        # a graph counts for the tensor at its top (`total_loss`, not this step's loss inside its
        # chain; the logits, not the activations they saved), the oldest first where two share nodes
        claimed: set[int] = set()
        for t, grad_fn, at in roots:
            if walker.is_root(grad_fn):
                nodes = walker.claim(grad_fn, at.graph, claimed)
                if at.root is None or nodes > at.root_nodes:
                    at.root, at.root_nodes = t, nodes
        for at in sites.values():
            at.graph.saved -= walker.parameters
        floor = self.cpu_floor
        for t, entry, key, at in live:
            if entry.tag < current and key not in walker.saved:  # a saved tensor counts in its graph's memory
                if key[1] < floor and t.grad_fn is None and t.device.type == "cpu":
                    continue  # a small host tensor without a graph (a detached loss): not a leak's memory
                at.survivors.append(t)
                at.bytes += key[1]
        return sites

    def _step(self, frame: Any) -> list[Leak]:
        sites = self._measure()
        self._heap.append(heap_bytes())
        self._rss.append(rss_bytes())
        for origin in set(self._counts) | set(sites):
            at = sites.get(origin)
            self._counts.setdefault(origin, []).append(len(at.survivors) if at else 0)
            self._nodes.setdefault(origin, []).append(at.graph.nodes if at else 0)
        new = []
        self.withdrawn = []
        for origin, at in sites.items():
            leak = self._leaks.get(origin) or self._bounded.get(origin)
            counts, nodes = self._counts[origin], self._nodes[origin]
            if leak is not None:
                self._update(leak, at, nodes)
                continue
            kind = "tensors" if _grows(counts, self.window) else "graph" if _grows(nodes, self.window) else None
            if kind is None or (kind == "graph" and at.root is None):
                continue
            target = at.survivors[-1] if kind == "tensors" else at.root
            graphs = [t for t in at.survivors if t.grad_fn is not None]
            site, library = origin
            holding = graphs[-1] if graphs else target
            leak = Leak(site=site, code=linecache.getline(site[0], site[1]).strip(), survivors=len(at.survivors),
                        bytes=at.bytes, keeps_graph=len(graphs),
                        grad_fn=type(holding.grad_fn).__name__ if holding.grad_fn is not None else None,
                        held_by=None, first_step=self._tracker.step, kind=kind, library_site=library)
            self._update(leak, at, nodes)
            if leak.bytes + leak.graph_bytes < self.min_bytes:
                continue
            holder = find_holder(target, frame, {id(sites), id(at), id(at.survivors)})
            if holder is not None:
                self._holders[origin] = holder
            leak.on_gpu = target.device.type not in ("cpu", "meta")
            if holder is not None and holder.bound is not None and kind == "tensors":
                # a deque(maxlen=N) stops growing by construction: bounded, not a leak
                leak.holds = "bounded"
                self._bounded[origin] = leak
                self._name_holder(origin, leak, frame)
                continue
            leak.holds = self._holds(leak, at, target, holder)
            self._name_holder(origin, leak, frame)
            self._leaks[origin] = leak
            self._settled.pop(origin, None)
            new.append(leak)
            if self.warn:
                warnings.warn(_("vramkit: possible memory leak: {leak}").format(leak=leak), LeakWarning, stacklevel=3)
        self._name_holders(frame)
        for origin in list(self._leaks):  # flag growth, not presence: a buffer that stopped growing is bounded
            leak = self._leaks[origin]
            if leak.graph_walk_stopped:
                continue  # a graph counted up to the budget looks flat while it still grows
            if _settled(self._counts[origin], self.window) and _settled(self._nodes[origin], self.window):
                self._settled[origin] = self._leaks.pop(origin)
                self.withdrawn.append(leak)
                if self.warn:
                    warnings.warn(_("vramkit: withdrawn: {leak}").format(leak=leak.settled_text()), LeakWarning,
                                  stacklevel=3)
        self._warn_eval()
        return new

    def _holds(self, leak: Leak, at: _Site, target: Any, holder: Holder | None) -> str:
        """What holds the survivors, for the fix text (Leak.holds)."""
        if leak.kind == "graph":
            return "graph"
        if self.model is not None and _kept_by_hook(self.model, target, holder, leak.site):
            return "hook"
        graphs = [t for t in at.survivors if t.grad_fn is not None]
        if not graphs:
            return "tensors"
        return "loss" if all(t.numel() <= 1 for t in graphs) else "activations"

    def _update(self, leak: Leak, at: _Site, nodes: list[int]) -> None:
        """Bring a leak's numbers to this step's."""
        leak.survivors, leak.bytes = len(at.survivors), at.bytes
        leak.keeps_graph = sum(1 for t in at.survivors if t.grad_fn is not None)
        leak.graph_nodes = at.graph.nodes
        leak.graph_walk_stopped = at.graph.truncated
        leak.graph_bytes = sum(nbytes for __, nbytes in at.graph.saved)
        leak.graph_steps = 1 + sum(b > a for a, b in zip(nodes, nodes[1:]))
        if leak.kind == "graph":
            # from the step this origin's graph first held nodes (its history starts when it appeared)
            grown = next((i for i, n in enumerate(nodes) if n), len(nodes) - 1)
            start = len(self._heap) - len(nodes) + grown
            leak.heap_growth = _growth(self._heap, start)
            leak.rss_growth = _growth(self._rss, start)

    def _name_holders(self, frame: Any) -> None:
        """held_by for every leak, its container's length read again (cheap: no heap search)."""
        for leaks in (self._leaks, self._bounded):
            for origin, leak in leaks.items():
                self._name_holder(origin, leak, frame)

    def _name_holder(self, origin: Origin, leak: Leak, frame: Any) -> None:
        holder = self._holders.get(origin)
        if holder is not None:
            holder.refresh(frame)
            label = holder.label
            if leak.kind == "graph":
                memory = (format_bytes(leak.graph_bytes) if leak.graph_bytes
                          else (_("over {n:,} nodes") if leak.graph_walk_stopped else _("{n:,} nodes")).format(
                              n=leak.graph_nodes))
                label = _("{holder} (graph of {steps} steps, {memory})").format(
                    holder=label, steps=leak.graph_steps, memory=memory)
            leak.held_by = _("{holder} in {function}").format(holder=label, function=holder.func)

    def _warn_eval(self) -> None:
        found, library = self._eval_found()
        if self.warn and any(site not in self._eval_warned for site, __ in found):
            warnings.warn(f"vramkit: {eval_text(found, library)}", LeakWarning, stacklevel=4)
        self._eval_warned.update(site for site, __ in found)

    def _eval_found(self) -> tuple[list[tuple[Site, int]], dict[Site, int]]:
        library: Counter[Site] = Counter()
        for below in self._tracker.eval_grad_library.values():
            library.update(below)
        return sorted(self._tracker.eval_grad_sites.items()), dict(library)

    def report(self) -> LeakReport:
        """The leaks still growing (their holders' lengths read again where the caller can see them), and the rest."""
        self._name_holders(sys._getframe(1))
        recent = self._live[-(self.window + 1):]
        growing = len(recent) > self.window and all(b > a for a, b in zip(recent, recent[1:]))
        found, library = self._eval_found()
        return LeakReport(leaks=list(self._leaks.values()), live_bytes=list(self._live), growing=growing,
                          eval_with_grad=found, eval_library=library,
                          settled=list(self._settled.values()) + list(self._bounded.values()))


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _hook_functions(model: Any) -> list[Any]:
    """The hooks registered on the model's modules, and the global module hooks."""
    hooks: list[Any] = []
    modules = model.modules() if callable(getattr(model, "modules", None)) else ()
    for module in modules:
        for name in _HOOK_DICTS:
            hooks += list((getattr(module, name, None) or {}).values())
    from torch.nn.modules import module as torch_module
    for name in _HOOK_DICTS:
        hooks += list((getattr(torch_module, "_global" + name, None) or {}).values())
    return hooks


def _hook_reach(hook: Any, objects: list[Any], codes: set[tuple[str, str]]) -> None:
    """What a hook can store into: its partial's arguments, its instance's attributes, its closure
    and the globals its code names; and its code, where tensors made inside it are born."""
    if isinstance(hook, functools.partial):
        objects += [*hook.args, *hook.keywords.values()]
        hook = hook.func
    owner = getattr(hook, "__self__", None)
    if owner is None and not hasattr(hook, "__code__") and hasattr(hook, "__dict__"):
        owner, hook = hook, type(hook).__call__  # a callable object
    if owner is not None:
        objects.append(owner)
        objects += list(getattr(owner, "__dict__", {}).values())
        hook = getattr(hook, "__func__", hook)
    code = getattr(hook, "__code__", None)
    if code is None:
        return
    codes.add((code.co_filename, code.co_name))
    for cell in getattr(hook, "__closure__", None) or ():
        try:
            objects.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    names = getattr(hook, "__globals__", {})
    objects += [names[n] for n in code.co_names if n in names]


def _kept_by_hook(model: Any, target: Any, holder: Holder | None, site: Site) -> bool:
    """Whether a hook on the model made the tensor or stores it (in what the holder names, or
    directly in a container it can reach)."""
    objects: list[Any] = []
    codes: set[tuple[str, str]] = set()
    for hook in _hook_functions(model):
        _hook_reach(hook, objects, codes)
    if (site[0], site[2]) in codes:
        return True
    if holder is not None and any(id(o) == holder.shown_id for o in objects):
        return True
    for o in objects:
        if isinstance(o, (list, deque, tuple)) and any(x is target for x in o):
            return True
        if isinstance(o, dict) and any(x is target for x in o.values()):
            return True
    return False
