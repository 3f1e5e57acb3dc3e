"""Flat dependency-graph helpers shared by traces and algorithm graphs.

Graphs here are CSR arrays over node positions 0..n-1: the dependencies of node ``i`` are
``idx[ptr[i]:ptr[i+1]]``. These two functions are the only successor builder and the only
topological sort in etsim; :class:`~etsim.chakra.graph.Trace`,
:class:`~etsim.algo.graph.AlgoGraph`, validation and the MSCCL-IR tools all use them.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

__all__ = ["in_degrees", "topological_order", "transpose"]


def transpose(n: int, sources: Sequence[tuple[Sequence[int], Sequence[int]]]) -> tuple[list[int], list[int]]:
    """Successors of *n* nodes from one or more dependency CSRs: ``(succ_ptr, succ_idx)``.

    Successors appear source by source, and within a source in child order (the walker issues
    released nodes in this order, so it is part of the simulation's determinism).

    Args:
        n: number of nodes.
        sources: ``(dep_ptr, dep_idx)`` pairs, e.g. data then control dependencies.
    """
    counts = [0] * (n + 1)
    for _, idx in sources:
        for dep in idx:
            counts[dep + 1] += 1
    ptr = [0] * (n + 1)
    running = 0
    for i in range(n):
        running += counts[i + 1]
        ptr[i + 1] = running
    fill = ptr[:-1].copy()
    out = [0] * running
    for dep_ptr, idx in sources:
        for child in range(n):
            for k in range(dep_ptr[child], dep_ptr[child + 1]):
                parent = idx[k]
                out[fill[parent]] = child
                fill[parent] += 1
    return ptr, out


def in_degrees(n: int, sources: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[int]:
    """Number of dependencies of each node, summed over *sources* (``(dep_ptr, dep_idx)`` pairs)."""
    indeg = [0] * n
    for ptr, _ in sources:
        for i in range(n):
            indeg[i] += ptr[i + 1] - ptr[i]
    return indeg


def topological_order(
    succ_ptr: Sequence[int], succ: Sequence[int], indeg: Sequence[int], key: Sequence[int] | None = None
) -> list[int]:
    """Kahn's order: among ready nodes the smallest ``key`` first (default: the position).

    Nodes on or behind a cycle are left out, so ``len(result) < n`` means there is a cycle.

    Args:
        succ_ptr: successor CSR pointers (``n + 1`` entries).
        succ: successor CSR indices.
        indeg: dependency counts (not modified).
        key: sort key per node (e.g. Chakra node ids); ties and the default use the position.
    """
    n = len(indeg)
    remaining = list(indeg)
    if key is None:
        ready_pos = [i for i in range(n) if remaining[i] == 0]
        heapq.heapify(ready_pos)
        order: list[int] = []
        while ready_pos:
            v = heapq.heappop(ready_pos)
            order.append(v)
            for k in range(succ_ptr[v], succ_ptr[v + 1]):
                c = succ[k]
                remaining[c] -= 1
                if remaining[c] == 0:
                    heapq.heappush(ready_pos, c)
        return order
    ready = [(key[i], i) for i in range(n) if remaining[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, v = heapq.heappop(ready)
        order.append(v)
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            c = succ[k]
            remaining[c] -= 1
            if remaining[c] == 0:
                heapq.heappush(ready, (key[c], c))
    return order
