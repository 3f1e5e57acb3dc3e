"""Every rank's graph of one algorithm as one flat graph: nodes of all ranks, their dependencies and message edges.

A family whose ranks run different graphs (a TACOS synthesis, most hand-written MSCCL-IR programs) cannot be
evaluated as one graph over a vector of ranks. Its ranks' graphs joined by their messages are still one directed
acyclic graph, and that graph can be evaluated a *level* at a time: a node's level is the length of the longest
path of dependencies and message edges (a send before the receive it meets) that leads to it, so every node of
a level depends only on nodes of earlier levels. :class:`UnionGraph` holds that graph in flat numpy columns —
node ``i`` of rank ``r`` is node ``offsets[r] + i`` — with the messages matched as the simulator matches them
(per ``(src, dst, tag)`` the k-th send meets the k-th receive, sends and receives numbered in node order) and the
nodes sorted by level. The fast path (``workload/bulk.py``) computes finish times over it a level at a time.

The static matching is the simulator's only when each channel's sends are issued, and its receives posted, in
node order; :attr:`UnionGraph.chan_prev` names each node's predecessor in its channel so that callers can check
that with the times they compute.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph
from etsim.cache import BoundedCache

if TYPE_CHECKING:
    import numpy as np

__all__ = ["UnionGraph", "union_graph", "union_of"]


@dataclass(eq=False)
class UnionGraph:
    """The ranks' graphs of one algorithm as one graph in levels (see the module docstring).

    Attributes:
        n: ranks (graphs).
        offsets: the first node of each rank, and the node count at the end (``n + 1`` entries).
        rank: each node's rank.
        kinds, chunks, tags: each node's kind, size (chunks or bytes) and tag.
        durations: each node's explicit duration in ns, NaN where it has none.
        peer: a SEND's or RECV's peer rank (absolute); -1 for COMP.
        match: a RECV's SEND and a SEND's RECV; -1 for COMP.
        deps_ptr, deps_idx: dependencies (CSR over the union's node numbers).
        order: the nodes by level (node order within a level); ``level_ptr[L] .. level_ptr[L+1]`` is level L.
        chan_prev: the previous node (in node order) of the node's channel and kind; -1 for the first and COMP.
        chain_after: the previous node of the channel is a direct dependency (the order is certain).
        exits: per rank, its exit nodes (ranks whose graph names none: empty).
    """

    n: int
    offsets: np.ndarray
    rank: np.ndarray
    kinds: np.ndarray
    chunks: np.ndarray
    tags: np.ndarray
    durations: np.ndarray
    peer: np.ndarray
    match: np.ndarray
    deps_ptr: np.ndarray
    deps_idx: np.ndarray
    order: np.ndarray
    level_ptr: np.ndarray
    chan_prev: np.ndarray
    chain_after: np.ndarray
    exits: list[np.ndarray]

    @property
    def num_nodes(self) -> int:
        """Nodes over all ranks."""
        return int(self.offsets[-1])

    @property
    def levels(self) -> int:
        """Levels (the longest path's node count)."""
        return len(self.level_ptr) - 1


#: The last union made by :func:`union_of` (the graphs kept with it, so that their ids are not reused).
_RECENT: BoundedCache[UnionGraph | str] = BoundedCache(1)


def union_of(graphs: Sequence[AlgoGraph]) -> UnionGraph | str:
    """:func:`union_graph` of *graphs*, made once for the last graphs asked about.

    The verifier and the simulator's fast path ask about the same family one after the other.
    """
    return _RECENT.get(tuple(map(id, graphs)), lambda: union_graph(graphs), keep=graphs)


def _column(graphs: Sequence[AlgoGraph], name: str, dtype: type, count: int) -> np.ndarray:
    import numpy as np

    return np.fromiter(itertools.chain.from_iterable(getattr(g, name) for g in graphs), dtype=dtype, count=count)


def union_graph(graphs: Sequence[AlgoGraph]) -> UnionGraph | str:
    """The :class:`UnionGraph` of *graphs* (rank *r* at index *r*), or why there is none.

    There is none when a graph has gated nodes, a peer outside the group, when the sends and receives do not
    pair up (per channel as many of each, of equal sizes), or when the messages close a cycle across ranks;
    the event path reports the last two as the deadlocks they are.
    """
    import numpy as np

    n = len(graphs)
    if any(g.gates for g in graphs):
        return "a graph has gated nodes"
    sizes = np.array([g.num_nodes for g in graphs], dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    rank = np.repeat(np.arange(n, dtype=np.int64), sizes)
    kinds = _column(graphs, "kinds", np.int64, total)
    peer = _column(graphs, "peers", np.int64, total)
    relative = np.repeat(np.array([g.relative_peers for g in graphs], dtype=bool), sizes)
    comm = kinds != COMP
    peer = np.where(relative & comm, (peer + rank) % max(n, 1), peer)
    peer[~comm] = -1
    if bool(((peer[comm] < 0) | (peer[comm] >= n)).any()):
        return "a peer lies outside the group"
    tags = _column(graphs, "tags", np.int64, total)
    chunks = _column(graphs, "chunks", np.float64, total)
    durations = np.full(total, np.nan)
    for r, g in enumerate(graphs):
        if g.durations_ns.count(None) != g.num_nodes:  # (most graphs give no durations: nothing to copy)
            durations[offsets[r] : offsets[r + 1]] = [np.nan if d is None else d for d in g.durations_ns]
    # Dependencies, renumbered into the union.
    counts = np.fromiter((len(g.deps_idx) for g in graphs), dtype=np.int64, count=n)
    deps_idx = _column(graphs, "deps_idx", np.int64, int(counts.sum())) + np.repeat(offsets[:-1], counts)
    local_ptr = [np.asarray(g.deps_ptr[1:], dtype=np.int64) for g in graphs]
    deps_ptr = np.zeros(total + 1, dtype=np.int64)
    if total:
        edge_base = np.zeros(n, dtype=np.int64)
        np.cumsum(counts[:-1], out=edge_base[1:])
        deps_ptr[1:] = np.concatenate(local_ptr) + np.repeat(edge_base, sizes)
    # Messages: per (src, dst, tag) channel the k-th send (node order) meets the k-th receive.
    match = np.full(total, -1, dtype=np.int64)
    chan_prev = np.full(total, -1, dtype=np.int64)
    send = np.flatnonzero(kinds == SEND)
    recv = np.flatnonzero(kinds == RECV)
    # By channel, then node order (lexsort is stable and the nodes are in node order already).
    s_sorted = send[np.lexsort((tags[send], rank[send] * n + peer[send]))]
    r_sorted = recv[np.lexsort((tags[recv], peer[recv] * n + rank[recv]))]
    if len(s_sorted) != len(r_sorted):
        return "its sends and receives do not pair up"
    src, dst, tag = rank[s_sorted], peer[s_sorted], tags[s_sorted]
    if not (np.array_equal(src, peer[r_sorted]) and np.array_equal(dst, rank[r_sorted])
            and np.array_equal(tag, tags[r_sorted])):  # fmt: skip
        return "its sends and receives do not pair up"
    if not np.array_equal(chunks[s_sorted], chunks[r_sorted]):
        return "a receive and its send differ in size"
    match[r_sorted] = s_sorted
    match[s_sorted] = r_sorted
    if len(s_sorted) > 1:
        same = (src[1:] == src[:-1]) & (dst[1:] == dst[:-1]) & (tag[1:] == tag[:-1])
        chan_prev[s_sorted[1:][same]] = s_sorted[:-1][same]
        chan_prev[r_sorted[1:][same]] = r_sorted[:-1][same]
    order, level_ptr = _levels(total, deps_ptr, deps_idx, match, kinds)
    if order is None:
        return "its message edges form a cycle across ranks"
    chain_after = _direct(chan_prev, deps_ptr, deps_idx)
    exits = [np.asarray(g.exits, dtype=np.int64) + offsets[r] for r, g in enumerate(graphs)]
    return UnionGraph(n, offsets, rank, kinds, chunks, tags, durations, peer, match, deps_ptr, deps_idx, order,
                      level_ptr, chan_prev, chain_after, exits)  # fmt: skip


def _levels(
    total: int, deps_ptr: np.ndarray, deps_idx: np.ndarray, match: np.ndarray, kinds: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray]:
    """Nodes by level (node order within one) and the level bounds; None if the edges close a cycle."""
    import numpy as np

    # Edges: each dependency, and each send to the receive it meets.
    ndeps = np.diff(deps_ptr)
    dst = np.repeat(np.arange(total, dtype=np.int64), ndeps)
    recv = np.flatnonzero((kinds == RECV) & (match >= 0))
    heads = np.concatenate([deps_idx, match[recv]])
    tails = np.concatenate([dst, recv])
    by_head = np.argsort(heads, kind="stable")
    succ = tails[by_head]
    succ_ptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(np.bincount(heads, minlength=total), out=succ_ptr[1:])
    indeg = np.bincount(tails, minlength=total)
    frontier = np.flatnonzero(indeg == 0)
    parts = []
    bounds = [0]
    seen = 0
    while len(frontier):
        parts.append(frontier)
        seen += len(frontier)
        bounds.append(seen)
        starts, ends = succ_ptr[frontier], succ_ptr[frontier + 1]
        lengths = ends - starts
        if not lengths.any():
            break
        # Every successor of the frontier, once per edge.
        idx = np.repeat(ends - np.cumsum(lengths), lengths) + np.arange(int(lengths.sum()))
        targets = succ[idx]
        np.subtract.at(indeg, targets, 1)
        ready = np.sort(targets[indeg[targets] == 0])  # (a node reached twice now appears twice)
        keep = np.ones(len(ready), dtype=bool)
        keep[1:] = ready[1:] != ready[:-1]
        frontier = ready[keep]  # (np.unique hashes: slower on these many small arrays)
    if seen != total:
        return None, np.zeros(1, dtype=np.int64)
    order = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return order, np.array(bounds, dtype=np.int64)


def _direct(chan_prev: np.ndarray, deps_ptr: np.ndarray, deps_idx: np.ndarray) -> np.ndarray:
    """Per node, whether its channel predecessor is one of its dependencies."""
    import numpy as np

    out = np.zeros(len(chan_prev), dtype=bool)
    nodes = np.flatnonzero(chan_prev >= 0)
    if not len(nodes):
        return out
    lengths = deps_ptr[nodes + 1] - deps_ptr[nodes]
    owner = np.repeat(nodes, lengths)
    idx = np.repeat(deps_ptr[nodes + 1] - np.cumsum(lengths), lengths) + np.arange(int(lengths.sum()))
    hit = owner[deps_idx[idx] == chan_prev[owner]]
    out[hit] = True
    return out
