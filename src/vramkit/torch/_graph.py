"""What autograd graphs keep alive: the nodes reachable from live tensors' grad_fn, and the tensors
those nodes saved for backward.

`total_loss += loss` keeps no extra tensor object alive, only one tensor whose grad_fn chain grows
by a whole step's graph every step. backward() frees the saved tensors of the nodes it ran (the
chain then holds only the nodes); a graph that never gets a backward (evaluation without
no_grad) keeps every activation it saved. The walk reads `_saved_*` attributes, which raise once
backward has freed them, and stops after a budget of nodes per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._common import storage_key

BUDGET = 100_000  # nodes walked per step, over all graphs together


@dataclass
class GraphSize:
    nodes: int = 0
    saved: set[tuple[int, int]] = field(default_factory=set)  # storages of tensors saved for backward
    truncated: bool = False  # the walk's budget ran out inside this graph


_SAVED_NAMES: dict[type, tuple[str, ...]] = {}


def _saved_names(node: Any) -> tuple[str, ...]:
    kind = type(node)
    names = _SAVED_NAMES.get(kind)
    if names is None:
        names = tuple(a for a in dir(kind) if a.startswith("_saved_"))
        if hasattr(kind, "saved_tensors"):  # a Python autograd.Function's node (ctx.save_for_backward)
            names += ("saved_tensors",)
        _SAVED_NAMES[kind] = names
    return names


class GraphWalker:
    """One step's look at every live graph. `add` walks from a tensor's grad_fn (each node once, at
    most `budget` nodes in all) and keeps what it found; a grad_fn that another node leads to is
    inside a larger graph (this step's loss inside `total_loss`'s chain); `claim` counts a root's
    graph, less what an earlier claim took."""

    def __init__(self, torch: Any, budget: int | None = None) -> None:
        self._tensor = torch.Tensor
        self.budget = BUDGET if budget is None else budget
        self._nodes: dict[int, tuple[list[int], list[tuple[int, int]]]] = {}  # id -> (next nodes, saved storages)
        self._inner: set[int] = set()  # nodes that another node leads to
        self._keep: list[Any] = []  # the visited nodes, so that no id is reused during the step
        self.parameters: set[tuple[int, int]] = set()  # storages of leaves that require grad
        self.saved: set[tuple[int, int]] = set()  # storages saved for backward by any node

    def add(self, grad_fn: Any) -> None:
        stack = [grad_fn]
        while stack:
            node = stack.pop()
            if id(node) in self._nodes or len(self._nodes) >= self.budget:
                continue
            self._keep.append(node)
            following = [n for n, _ in node.next_functions if n is not None]
            self._nodes[id(node)] = [id(n) for n in following], self._saved_by(node)
            self._inner.update(id(n) for n in following)
            stack.extend(following)

    def _saved_by(self, node: Any) -> list[tuple[int, int]]:
        found = []
        variable = getattr(node, "variable", None)  # AccumulateGrad: the parameter itself
        if isinstance(variable, self._tensor):
            self.parameters.add(storage_key(variable))
        for name in _saved_names(node):
            try:
                value = getattr(node, name)
            except Exception:  # freed by backward, or not a tensor this node kept
                continue
            for t in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(t, self._tensor):
                    if t.is_leaf and t.requires_grad:
                        self.parameters.add(storage_key(t))
                    else:
                        found.append(storage_key(t))
        self.saved.update(found)
        return found

    def is_root(self, grad_fn: Any) -> bool:
        return id(grad_fn) in self._nodes and id(grad_fn) not in self._inner

    def claim(self, grad_fn: Any, size: GraphSize, claimed: set[int]) -> int:
        """Add the nodes of grad_fn's graph not yet claimed, and what they saved, to size; how many."""
        stack, count = [id(grad_fn)], 0
        while stack:
            key = stack.pop()
            if key in claimed:
                continue
            found = self._nodes.get(key)
            if found is None:  # past the budget
                size.truncated = True
                continue
            claimed.add(key)
            count += 1
            following, saved = found
            size.saved.update(saved)
            stack.extend(following)
        size.nodes += count
        return count
