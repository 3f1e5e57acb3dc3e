"""How a graph every rank shares is evaluated in bulk (:class:`GraphPlan`): computed once per graph and group size.

The orders the fast path (``workload/bulk.py``) must reproduce are decided here, before any member is deferred:
a node order that respects dependencies, message edges and channel order; each receive's send; the channel
chains; and the classes of nodes the walker issues together in a known order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph

__all__ = ["GraphPlan", "plan_graph"]


@dataclass(slots=True)
class GraphPlan:
    """What bulk evaluation needs to know about one shared graph for one group size (computed once).

    Attributes:
        reason: why the graph cannot be evaluated in bulk, or None.
        order: the nodes in an order that respects dependencies, message edges (send before its
            receive) and channel order; lowest index first among nodes available together.
        rel: every node's peer offset, modulo the group size.
        match: for a receive, the send it meets (the same graph, on the sending rank); else -1.
        chain_prev: the previous node of the node's channel (same kind, offset and tag); else -1.
        chain_after: the previous node of the channel is a dependency (their order is certain).
        tie_class, tie_pos: nodes of one class that become ready at one instant are issued by the walker
            in increasing ``tie_pos`` (siblings, gated nodes of one gate set, followers of such nodes'
            fixed-duration COMPs).
        uses: how many later steps read each node's finish times.
        signature: identifies the graph's structure within this process (a conflict excludes every part
            with the same signature from the fast path).
    """

    reason: str | None
    order: list[int] = field(default_factory=list)
    rel: list[int] = field(default_factory=list)
    match: list[int] = field(default_factory=list)
    chain_prev: list[int] = field(default_factory=list)
    chain_next: list[int] = field(default_factory=list)
    chain_after: list[bool] = field(default_factory=list)
    tie_class: list[int] = field(default_factory=list)
    tie_pos: list[int] = field(default_factory=list)
    uses: list[int] = field(default_factory=list)
    signature: int = 0


def plan_graph(graph: AlgoGraph, n: int) -> GraphPlan:
    """The :class:`GraphPlan` of *graph* for a group of *n* ranks (``reason`` says why not, if not)."""
    if not graph.relative_peers:
        return GraphPlan("its peers are not relative (one graph per rank)")
    count = graph.num_nodes
    kinds, tags, chunks = graph.kinds, graph.tags, graph.chunks
    rel = [(p % n) if k != COMP else 0 for p, k in zip(graph.peers, kinds, strict=True)]
    chains, chain_prev, chain_next = _channels(kinds, rel, tags)
    match = _pairs(chains, chunks, n)
    if isinstance(match, str):
        return GraphPlan(match)
    ordered = _order(graph, match, chain_prev)
    if isinstance(ordered, str):
        return GraphPlan(ordered)
    order, release, releases, uses = ordered
    tie_class, tie_pos = _ties(graph, order, release, releases)
    chain_after = [chain_prev[j] >= 0 and chain_prev[j] in graph.deps(j) for j in range(count)]
    signature = hash(
        (n, tuple(kinds), tuple(graph.peers), tuple(tags), tuple(chunks), tuple(graph.durations_ns),
         tuple(graph.deps_ptr), tuple(graph.deps_idx), graph.exits)
    )  # fmt: skip
    return GraphPlan(None, order, rel, match, chain_prev, chain_next, chain_after, tie_class, tie_pos, uses, signature)


def _channels(
    kinds: list[int], rel: list[int], tags: list[int]
) -> tuple[dict[tuple[int, int, int], list[int]], list[int], list[int]]:
    """The chains of nodes per channel ``(kind, relative peer, tag)``, in index order, and each node's neighbours."""
    count = len(kinds)
    chains: dict[tuple[int, int, int], list[int]] = {}
    chain_prev = [-1] * count
    chain_next = [-1] * count
    for j in range(count):
        if kinds[j] == COMP:
            continue
        chain = chains.setdefault((kinds[j], rel[j], tags[j]), [])
        if chain:
            chain_prev[j] = chain[-1]
            chain_next[chain[-1]] = j
        chain.append(j)
    return chains, chain_prev, chain_next


def _pairs(chains: dict[tuple[int, int, int], list[int]], chunks: list[float], n: int) -> list[int] | str:
    """Each receive's send (the k-th of the opposite channel; -1 elsewhere), or why they do not pair up."""
    match = [-1] * len(chunks)
    for (kind, offset, tag), recvs in chains.items():
        if kind != RECV:
            continue
        sends = chains.get((SEND, (-offset) % n, tag), [])
        if len(sends) != len(recvs):
            return f"its sends and receives at offset {offset}, tag {tag} do not pair up"
        for r, s in zip(recvs, sends, strict=True):
            if chunks[r] != chunks[s]:
                return "a receive and its send differ in size"
            match[r] = s
    for kind, offset, tag in chains:
        if kind == SEND and (RECV, (-offset) % n, tag) not in chains:
            return f"its sends at offset {offset}, tag {tag} are never received"
    return match


def _order(
    graph: AlgoGraph, match: list[int], chain_prev: list[int]
) -> tuple[list[int], list[int], int, list[int]] | str:
    """The evaluation order and what it needs, or why there is none (a cycle across ranks).

    Order: dependencies, a send before its receive, channel order; Kahn's with the lowest index first. Returns the
    order, each node's release class (nodes released by the same dependencies, or the same gate), the number of
    classes and how many nodes use each node's finish time.
    """
    count = graph.num_nodes
    succ: list[list[int]] = [[] for _ in range(count)]
    indeg = [0] * count
    releases: dict[tuple[Any, ...], int] = {}
    release = [0] * count
    uses = [0] * count
    for j in range(count):
        deps = graph.deps(j)
        gate = graph.gates.get(j)
        release[j] = releases.setdefault(("gate", gate[1], *deps) if gate else tuple(sorted(deps)), len(releases))
        extra = [d for d in (match[j], chain_prev[j], gate[1] if gate else -1) if d >= 0]
        for d in (*deps, *extra):
            succ[d].append(j)
            indeg[j] += 1
        for d in deps:
            uses[d] += 1
        if gate:
            uses[gate[1]] += 1
        if match[j] >= 0:
            uses[match[j]] += 1
    for j in graph.exits:
        uses[j] += 1
    ready = [j for j in range(count) if indeg[j] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        j = heapq.heappop(ready)
        order.append(j)
        for c in succ[j]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    if len(order) != count:
        return "its message edges form a cycle across ranks"
    return order, release, len(releases), uses


def _ties(graph: AlgoGraph, order: list[int], release: list[int], releases: int) -> tuple[list[int], list[int]]:
    """Which nodes the walker issues in a known order when they become ready at one instant.

    ``(tie_class, tie_pos)``: equal classes, increasing positions. Siblings (same dependencies) are admitted in index
    order; gated nodes of one gate set fire in index order (when their k grow with the index); a node whose only
    dependency is a fixed-duration COMP follows that COMP's order (the COMPs' timeouts were scheduled in it and fire
    in it).
    """
    count, kinds = graph.num_nodes, graph.kinds
    tie_class = release.copy()
    position: list[tuple[int, ...]] = [(j,) for j in range(count)]
    gate_k: dict[int, int] = {}
    for x in sorted(graph.gates):
        k = graph.gates[x][0]
        if k < gate_k.get(release[x], 0):
            tie_class[x] = releases + count + x  # k does not grow with the index: a class of its own
        gate_k[release[x]] = max(k, gate_k.get(release[x], 0))
    after_class: dict[int, int] = {}
    for j in order:
        deps = graph.deps(j)
        if len(deps) == 1 and j not in graph.gates:
            d = deps[0]
            dur = graph.durations_ns[d]
            if kinds[d] == COMP and dur is not None and dur > 0:
                tie_class[j] = after_class.setdefault(tie_class[d], releases + 2 * count + len(after_class))
                position[j] = (*position[d], j)  # after the COMP's order; one COMP's followers by index
    rank = {p: i for i, p in enumerate(sorted(set(position)))}
    return tie_class, [rank[p] for p in position]
