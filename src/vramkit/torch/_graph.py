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
    """One step's walk over every live graph: a node counts once, for the first graph that reaches it."""

    def __init__(self, torch: Any, budget: int | None = None) -> None:
        self._tensor = torch.Tensor
        self.budget = BUDGET if budget is None else budget
        self._seen: set[int] = set()
        self._keep: list[Any] = []  # the visited nodes, so that no id is reused during the walk
        self.parameters: set[tuple[int, int]] = set()  # storages of leaves that require grad

    def measure(self, grad_fn: Any, size: GraphSize) -> None:
        """Add the nodes of grad_fn's graph that no earlier call reached, and what they saved, to size."""
        stack = [grad_fn]
        while stack:
            node = stack.pop()
            if node is None or id(node) in self._seen:
                continue
            if len(self._seen) >= self.budget:
                size.truncated = True
                return
            self._seen.add(id(node))
            self._keep.append(node)
            size.nodes += 1
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
                            size.saved.add(storage_key(t))
            stack.extend(next_node for next_node, _ in node.next_functions)

    def saved_bytes(self, size: GraphSize) -> int:
        """Bytes of what the graph saved, less the parameters (they live on without the graph)."""
        return sum(nbytes for _, nbytes in size.saved - self.parameters)
