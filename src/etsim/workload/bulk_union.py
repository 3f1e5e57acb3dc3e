"""The fast path for algorithms whose ranks run different graphs: the union of the graphs, a level at a time.

A part whose positions run different graphs known ahead (``CollectivePart.graph_of``: a family read from files
whose ranks share no graph, such as a TACOS synthesis) is deferred like a shared graph's
(:class:`~etsim.workload.bulk.FastPath`) and evaluated when its last member starts — over the
:class:`~etsim.algo.union.UnionGraph` of its positions' graphs: every node of a level at once, with the event
path's float operations (``ready + dur``, ``max``, and the network model's :class:`~etsim.network.bulk.BulkTiming`
for the sends). The result is the event path's to the last bit when what the event path would decide by
its own orders is the same; what cannot be shown the same raises :class:`~etsim.errors.FastPathConflict`
and the part is run again on the event path:

- each channel's sends must be issued, and its receives posted, in node order (the union matches the k-th send
  of a channel with its k-th receive in node order, as the mailbox does in issue order): a node ready no later
  than its channel predecessor is refused, unless the predecessor is one of its dependencies or swapping the two
  changes nothing (two receives whose messages are delivered at the same instant);
- the network model's timing sees each call's messages from distinct senders (a rank's sends of one level go
  in separate calls, in node order) and refuses what it cannot order on a link (``network/bulk.py``);
- a rank's part must not end before the last member started.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from etsim.algo.graph import COMP, RECV, SEND
from etsim.errors import FastPathConflict

if TYPE_CHECKING:
    import numpy as np

    from etsim.algo.graph import AlgoGraph
    from etsim.algo.union import UnionGraph
    from etsim.network.bulk import BulkTiming

__all__ = ["UnionPlan", "plan_union", "union_times"]


@dataclass(eq=False)
class UnionPlan:
    """What evaluating one union of graphs needs, computed once (``reason`` says why not, if not).

    Attributes:
        union: the graphs joined by their messages, in levels.
        graphs: the graphs, by position (kept alive with the plan: it is cached by their identities).
        dep_flat, dep_ptr: the dependencies of ``union.order``'s nodes, in that order (CSR).
        sends_at: per level, the level's sends in node order, split into calls with one send per rank at most.
        signature: identifies the union within this process (a conflict excludes it from the fast path).
    """

    reason: str | None
    union: UnionGraph | None = None
    graphs: tuple[AlgoGraph, ...] = ()
    dep_flat: Any = None
    dep_ptr: Any = None
    sends_at: list[list[Any]] | None = None
    signature: int = 0

    def whole_bytes(self, unit: float) -> bool:
        """Whether every message is a whole number of bytes with *unit* bytes per size unit.

        The event path adds message sizes to its statistics in the order messages are sent, this path in level
        order; sums of whole numbers (below 2**53) are the same in any order, others may differ in the last bit.
        """
        import numpy as np

        assert self.union is not None
        sizes = self.union.chunks[self.union.kinds == SEND] * unit
        return bool((sizes == np.floor(sizes)).all()) and float(sizes.sum()) < 2.0**52


def plan_union(graphs: tuple[AlgoGraph, ...]) -> UnionPlan:
    """The :class:`UnionPlan` of *graphs* (rank *r* at index *r*)."""
    import numpy as np

    from etsim.algo.union import union_of

    union = union_of(graphs)
    if isinstance(union, str):
        return UnionPlan(union)
    order = union.order
    ndeps = np.diff(union.deps_ptr)[order]
    dep_ptr = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(ndeps, out=dep_ptr[1:])
    starts = union.deps_ptr[order]
    idx = np.repeat(starts + ndeps - dep_ptr[1:], ndeps) + np.arange(int(dep_ptr[-1]))
    dep_flat = union.deps_idx[idx]
    sends_at: list[list[Any]] = []
    kinds, rank = union.kinds[order], union.rank[order]
    for lo, hi in zip(union.level_ptr[:-1].tolist(), union.level_ptr[1:].tolist(), strict=True):
        where = np.flatnonzero(kinds[lo:hi] == SEND)
        if not len(where):
            sends_at.append([])
            continue
        nodes = order[lo:hi][where]
        # The k-th send of a rank in this level goes in call k (node order within a level is kept).
        by_rank = np.argsort(rank[lo:hi][where], kind="stable")
        ranks_sorted = rank[lo:hi][where][by_rank]
        first = np.ones(len(nodes), dtype=bool)
        first[1:] = ranks_sorted[1:] != ranks_sorted[:-1]
        run_start = np.maximum.accumulate(np.where(first, np.arange(len(nodes)), 0))
        occurrence = np.empty(len(nodes), dtype=np.int64)
        occurrence[by_rank] = np.arange(len(nodes)) - run_start
        if not occurrence.any():
            sends_at.append([nodes])
        else:
            sends_at.append([nodes[occurrence == k] for k in range(int(occurrence.max()) + 1)])
    signature = hash(("union", *map(id, graphs)))
    return UnionPlan(None, union, graphs, dep_flat, dep_ptr, sends_at, signature)


def union_times(
    namespace: Hashable,
    plan: UnionPlan,
    starts: np.ndarray,
    group: np.ndarray,
    timing: BulkTiming,
    *,
    unit: float,
    after: float,
    then: float,
    comp_ns: float | None,
    reduction_time: Callable[[float], float],
) -> tuple[np.ndarray, np.ndarray]:
    """Every rank's phase end and the sizes of the messages sent (in bytes, in the order they were timed)."""
    import numpy as np

    u = plan.union
    assert u is not None and plan.sends_at is not None
    order, level_ptr, dep_flat, dep_ptr = u.order, u.level_ptr, plan.dep_flat, plan.dep_ptr
    kinds, rank, match, chunks, durations = u.kinds, u.rank, u.match, u.chunks, u.durations
    total = u.num_nodes
    finish = np.empty(total)
    ready_all = np.empty(total)
    has_deps = dep_ptr[1:] > dep_ptr[:-1]
    sizes: list[Any] = []
    reduction: dict[float, float] = {}
    calls = 0
    for level in range(u.levels):
        lo, hi = int(level_ptr[level]), int(level_ptr[level + 1])
        nodes = order[lo:hi]
        ready = starts[rank[nodes]]
        with_deps = np.flatnonzero(has_deps[lo:hi])
        if len(with_deps):
            da = dep_ptr[lo]
            values = finish[dep_flat[da : dep_ptr[hi]]]
            ready[with_deps] = np.maximum.reduceat(values, dep_ptr[lo + with_deps] - da)
        ready_all[nodes] = ready
        kind = kinds[nodes]
        comp = kind == COMP
        if comp.any():
            dur = durations[nodes[comp]]
            missing = np.isnan(dur)
            if missing.any():
                if comp_ns is not None:
                    dur[missing] = comp_ns
                else:
                    for i in np.flatnonzero(missing).tolist():
                        c = float(chunks[nodes[comp][i]]) * unit
                        if c not in reduction:
                            reduction[c] = reduction_time(c)
                        dur[i] = reduction[c]
            r = ready[comp]
            finish[nodes[comp]] = np.where(dur > 0, r + dur, r)
        posted: list[tuple[Any, float]] = []  # (a model that times messages together: this level's sends)
        for sends in plan.sends_at[level]:
            size_of = chunks[sends] * unit
            uniform = bool(size_of.min() == size_of.max())
            for size in [float(size_of[0])] if uniform else np.unique(size_of).tolist():
                pick = sends if uniform else sends[size_of == size]
                calls += 1  # (a cause no other call shares: ties with other calls' messages are refused)
                args = (group[rank[pick]], group[u.peer[pick]], size, ready_all[pick], after, (-2 - calls, 0))
                if timing.batches:
                    timing.post(*args)
                    posted.append((pick, size))
                else:
                    _delivered(namespace, plan, [(pick, size)], [timing.send(*args)], finish, then, sizes)
        if posted:
            _delivered(namespace, plan, posted, timing.settle(), finish, then, sizes)
        recv = kind == RECV
        if recv.any():
            r_nodes = nodes[recv]
            posted = ready[recv] + then if then > 0 else ready[recv]  # (a receive posted late: handled a delay after)
            finish[r_nodes] = np.maximum(posted, finish[match[r_nodes]])
    _check_channels(namespace, plan, ready_all, finish, timing.stateful)
    ends = _rank_ends(u, finish, starts)
    return ends, (np.concatenate(sizes) if sizes else np.zeros(0))


def _delivered(
    namespace: Hashable,
    plan: UnionPlan,
    picks: list[tuple[Any, float]],
    delivered: list[Any] | None,
    finish: np.ndarray,
    then: float,
    sizes: list[Any],
) -> None:
    """Each picked SEND's finish: its message's delivery (plus *then*); a refused delivery (None) is a conflict."""
    import numpy as np

    if delivered is None or any(times is None for times in delivered):
        raise FastPathConflict(
            f"collective part {namespace}: messages meet on a link in a way the fast path cannot time",
            namespace,
            plan.signature,
        )
    for (pick, size), times in zip(picks, delivered, strict=True):
        finish[pick] = times + then if then > 0 else times
        sizes.append(np.full(len(pick), size))


def _check_channels(
    namespace: Hashable, plan: UnionPlan, ready: np.ndarray, finish: np.ndarray, stateful: bool
) -> None:
    """Refuse when a channel's nodes may be issued out of node order (see the module docstring)."""
    import numpy as np

    u = plan.union
    assert u is not None
    nodes = np.flatnonzero((u.chan_prev >= 0) & ~u.chain_after)
    if not len(nodes):
        return
    prev = u.chan_prev[nodes]
    before, now = ready[prev], ready[nodes]
    tied = before == now
    harmless = np.zeros(len(nodes), dtype=bool)
    recv = u.kinds[nodes] == RECV
    # Two receives whose messages arrive at one instant: whichever is posted first, each finishes then.
    harmless |= recv & (finish[u.match[prev]] == finish[u.match[nodes]])
    if not stateful:
        harmless |= ~recv & (u.chunks[prev] == u.chunks[nodes])
    bad = (before > now) | (tied & ~harmless)
    if bad.any():
        j = int(nodes[np.flatnonzero(bad)[0]])
        r = int(u.rank[j])
        raise FastPathConflict(
            f"collective part {namespace}: node {j - int(u.offsets[r])} of rank {r} may be issued before the node "
            "before it in its channel",
            namespace,
            plan.signature,
        )


def _rank_ends(u: UnionGraph, finish: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each rank's phase end: its exits' last finish, or its start and every node's last finish."""
    import numpy as np

    ends = starts.copy()
    sizes = np.diff(u.offsets)
    busy = np.flatnonzero(sizes > 0)
    if len(busy):
        ends[busy] = np.maximum(starts[busy], np.maximum.reduceat(finish, u.offsets[busy]))
    for r, exits in enumerate(u.exits):
        if len(exits):
            ends[r] = finish[exits].max()
    return ends
