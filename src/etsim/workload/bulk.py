"""The fast path: a collective evaluated in bulk, one graph node at a time over every rank of its group.

When every member of a collective part (one instance, stream and phase) walks the same algorithm
graph with relative peers (the native ``ring`` and ``direct``, and any algorithm whose
``shares_graph`` is true), the event path's work is the same on every rank, shifted by the peer
offsets. :class:`FastPath` then defers each member's part when it starts; when the last member has
started it computes every node's finish time for all members at once — a longest path (max-plus)
over the graph plus its message edges, one numpy vector per node — with the delivery times the
network model's :class:`~etsim.network.bulk.BulkTiming` gives, and schedules each member's phase end
at its computed time (:meth:`~etsim.workload.engine.Engine.end_part_at`). No message, node or event
exists per rank: one 1024-rank ring all-reduce is ~8,000 vector operations instead of ~6 million
events.

The result is the event path's, to the last bit, because the computation repeats the event path's
float operations (``t + dur``, ``t + (delay + after)``, ``max``) and its orders:

- channels: the k-th send of a (src, dst, tag) channel meets the k-th receive. Both are numbered in
  index order here, so every channel's nodes must become ready in index order (or, at one instant,
  be siblings released by the same node, which the walker issues in index order);
- links: see :mod:`etsim.network.bulk`;
- what follows: a phase's end is handled in the late, ordered step of its instant on both paths.

Gated nodes (released at the k-th completion of their dependencies once armed) take the k-th of their
dependencies' sorted finish times that comes after the arming. Whatever cannot be shown equal is not
taken: a graph without relative peers or with unmatched sends stays on the event path (decided before
any member is deferred), as does one whose reductions queue at the NPUs' shared reduction units
(``shared_reductions``: other parts' reductions decide when they run). What can only be seen while
evaluating (a channel or link whose order the event path could decide differently, a member whose
phase would end before the last member started, other traffic on a claimed link) raises
:class:`~etsim.errors.FastPathConflict`; the run is then redone with that part (and parts of the same
graph) on the event path.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph
from etsim.errors import FastPathConflict
from etsim.workload.bulk_plan import GraphPlan, plan_graph
from etsim.workload.bulk_union import UnionPlan, plan_union, union_times
from etsim.workload.sums import add_all, add_repeated

if TYPE_CHECKING:
    from etsim.network.bulk import BulkTiming
    from etsim.system.collective import CollectivePart
    from etsim.workload.collectives import CollectiveCall
    from etsim.workload.engine import Engine
    from etsim.workload.runs import AlgoRun

__all__ = ["MIN_WORK", "FastPath", "GraphPlan", "plan_graph"]

#: Parts whose group size × graph nodes is below this run on the event path (cheaper there).
MIN_WORK = 4096


class _Pending:
    """A part whose members are starting: who has started, and when."""

    __slots__ = ("calls", "graph", "n", "plan", "runs", "started", "starts", "union")

    def __init__(self, graph: AlgoGraph, plan: GraphPlan | None, n: int, union: UnionPlan | None = None) -> None:
        self.graph = graph
        self.plan = plan
        self.union = union
        self.n = n
        self.started = 0
        self.runs: list[AlgoRun | None] = [None] * n
        self.calls: list[CollectiveCall | None] = [None] * n
        self.starts = [0.0] * n


class FastPath:
    """Defers the parts it can evaluate in bulk and evaluates each when its last member starts.

    Args:
        engine: the engine (time, mailbox, cost model, phase ends).
        excluded: what to leave on the event path after an earlier, conflicting attempt: ``("part",
            namespace)`` and ``("graph", signature)`` keys.
        min_work: parts with group size × graph nodes below this take the event path (default :data:`MIN_WORK`).
    """

    def __init__(self, engine: Engine, excluded: set[Hashable], min_work: int | None = None) -> None:
        self.engine = engine
        self.excluded = excluded
        self.min_work = MIN_WORK if min_work is None else min_work
        self.pending: dict[Hashable, _Pending] = {}
        self._plans: dict[tuple[int, int], tuple[AlgoGraph, GraphPlan]] = {}
        self._unions: dict[tuple[int, ...], UnionPlan] = {}
        self._link_verdicts: dict[tuple[int, tuple[int, ...]], bool] = {}
        self._stateful: bool | None = None  # asked of the model when a part first qualifies (imports numpy)
        #: Parts evaluated in bulk so far (each member counts once).
        self.parts = 0

    def plan(self, graph: AlgoGraph, n: int) -> GraphPlan:
        """The cached :class:`GraphPlan` of *graph* for *n* ranks."""
        key = (id(graph), n)
        found = self._plans.get(key)
        if found is None:
            found = self._plans[key] = (graph, plan_graph(graph, n))  # the graph kept alive with its id
        return found[1]

    def take(self, call: CollectiveCall, algo_run: AlgoRun) -> bool:
        """Defer *algo_run* (starting now) if its part is evaluated in bulk; False: walk it as usual."""
        part = algo_run.part
        namespace = part.namespace
        pending = self.pending.get(namespace)
        if pending is None:
            graph = part.graph
            n = len(part.group)
            if n * graph.num_nodes < self.min_work or ("part", namespace) in self.excluded:
                return False
            if self.engine.system.members_run(part.group) < n:
                return False  # members mirrored by others (replica folding) never start here
            plan = union = None
            graphs: tuple[AlgoGraph, ...]
            if graph.relative_peers:
                plan = self.plan(graph, n)
                reason, signature, graphs = plan.reason, plan.signature, (graph,)
            elif part.graph_of is not None:  # positions run different graphs: evaluated over their union
                union = self.union_plan(tuple(part.graph_of(q) for q in range(n)))
                reason, signature, graphs = union.reason, union.signature, union.graphs
                if reason is None and not union.whole_bytes(part.bytes_per_unit):
                    return False  # statistics add sizes in time order there, in level order here: equal if whole
            else:
                return False
            if reason is not None or ("graph", signature) in self.excluded:
                return False
            if self.engine.shared_reductions and part.comp_ns is None and any(g.priced_reductions for g in graphs):
                return False  # its reductions queue with other parts' at each NPU's reduction unit
            if self._stateful is None:
                timing = self.engine.network.bulk_timing()
                self._stateful = timing is not None and timing.stateful
            if self._stateful:
                if any(r.part.stream > 0 for r in call.runs):
                    return False  # streams of one collective share links at the same time
                if plan is not None and not self._fits_links(part.group, graph, plan):
                    return False
            pending = self.pending[namespace] = _Pending(graph, plan, n, union)
        elif part.graph is not (pending.graph if pending.union is None else pending.union.graphs[part.position]):
            raise FastPathConflict(f"the members of collective part {namespace} run different graphs", namespace)
        position = part.position
        pending.runs[position] = algo_run
        pending.calls[position] = call
        pending.starts[position] = self.engine.env.now
        pending.started += 1
        if pending.started == pending.n:
            del self.pending[namespace]
            self._evaluate(namespace, pending)
        return True

    def union_plan(self, graphs: tuple[AlgoGraph, ...]) -> UnionPlan:
        """The cached :class:`~etsim.workload.bulk_union.UnionPlan` of *graphs* (by position)."""
        key = tuple(map(id, graphs))
        found = self._unions.get(key)
        if found is None:
            found = self._unions[key] = plan_union(graphs)  # (the plan keeps the graphs alive with their ids)
        return found

    def _fits_links(self, group: tuple[int, ...], graph: AlgoGraph, plan: GraphPlan) -> bool:
        """Under a model with link state: links the timing can order (cached)."""
        key = (plan.signature, group)
        verdict = self._link_verdicts.get(key)
        if verdict is None:
            import numpy as np

            offsets = sorted({plan.rel[j] for j, kind in enumerate(graph.kinds) if kind == SEND})
            timing = self.engine.network.bulk_timing()
            verdict = self._link_verdicts[key] = (
                timing is not None and timing.refuses(np.array(group, dtype=np.int64), offsets) is None
            )
        return verdict

    def _evaluate(self, namespace: Hashable, pending: _Pending) -> None:
        import numpy as np

        engine = self.engine
        runs: list[AlgoRun] = pending.runs  # type: ignore[assignment]  # every member has started
        calls: list[CollectiveCall] = pending.calls  # type: ignore[assignment]
        first = runs[0].part
        shape = (first.bytes_per_unit, first.endpoint_delay, first.comp_ns)
        for r in runs:
            if (r.part.bytes_per_unit, r.part.endpoint_delay, r.part.comp_ns) != shape:
                raise FastPathConflict(f"members of collective part {namespace} differ in sizes or delays", namespace)
        timing = engine.network.bulk_timing()
        if timing is None:
            raise FastPathConflict("the network model gives no bulk timing", namespace)
        union = pending.union
        signature = union.signature if union is not None else pending.plan.signature  # type: ignore[union-attr]
        try:
            if union is None:
                exits, sends = self._times(namespace, pending, timing, np)
            else:
                exits, sizes = self._union_times(namespace, pending, union, timing, np)
        except FastPathConflict:
            timing.abort()
            raise
        now = engine.env.now
        if not bool((exits >= now).all()):
            timing.abort()
            raise FastPathConflict(
                f"collective part {namespace} would end on a rank before its last member started",
                namespace,
                signature,
            )
        timing.commit((namespace, signature))
        mailbox = engine.mailbox
        n = pending.n
        unit = first.bytes_per_unit
        if union is None:
            mailbox.messages += sends * n
            graph = pending.graph
            for j, kind in enumerate(graph.kinds):
                if kind == SEND:
                    mailbox.bytes = add_repeated(mailbox.bytes, graph.chunks[j] * unit, n)
        else:
            mailbox.messages += len(sizes)
            mailbox.bytes = add_all(mailbox.bytes, sizes)
        if mailbox.messages >= mailbox.progress_at and mailbox.progress is not None:
            mailbox.progress(mailbox)
        self.parts += n
        for position, when in enumerate(exits.tolist()):
            engine.end_part_at(when, calls[position], runs[position])
            calls[position].part_completed(runs[position])

    def _union_times(
        self, namespace: Hashable, pending: _Pending, union: UnionPlan, timing: BulkTiming, np: Any
    ) -> tuple[Any, Any]:
        """Every member's phase end over the union of the positions' graphs, and the sizes sent."""
        part = pending.runs[0].part  # type: ignore[union-attr]
        after, then = self._endpoint_delays(part)
        return union_times(
            namespace,
            union,
            np.array(pending.starts, dtype=float),
            np.array(part.group, dtype=np.int64),
            timing,
            unit=part.bytes_per_unit,
            after=after,
            then=then,
            comp_ns=part.comp_ns,
            reduction_time=self.engine.costs.reduction_time,
        )

    def _endpoint_delays(self, part: CollectivePart) -> tuple[float, float]:
        """A part's endpoint delay as (paid before sending, paid after arrival: ``endpoint_delay_at: receive``)."""
        if part.endpoint_delay > 0 and self.engine.config.endpoint_delay_at == "receive":
            return 0.0, part.endpoint_delay
        return part.endpoint_delay, 0.0

    @staticmethod
    def _gate_ready(
        namespace: Hashable,
        graph: AlgoGraph,
        plan: GraphPlan,
        cache: dict[tuple[tuple[int, ...], int], tuple[Any, Any]],
        j: int,
        done: list[Any],
        np: Any,
    ) -> Any:
        """When gated node *j* is released on each rank (:attr:`~etsim.algo.graph.AlgoGraph.gates`).

        The walker releases it at the first completion of one of its dependencies that comes after its
        arming node finished and is at least the k-th: with the dependencies' finish times sorted, the
        ``max(k, first after arming)``-th of them. A dependency finishing at the very instant of the arming
        is ordered by the walker's events, which cannot be seen here: refused.
        """
        k, arm = graph.gates[j]
        deps = tuple(graph.deps(j))
        found = cache.get((deps, arm))
        if found is None:
            times = np.sort(np.stack([done[d] for d in deps]), axis=0)
            armed = done[arm]
            if bool((times == armed).any()):
                raise FastPathConflict(
                    f"collective part {namespace}: a dependency of gated node {j} finishes as it is armed",
                    namespace,
                    plan.signature,
                )
            after = times > armed
            if not bool(after.any(axis=0).all()):
                raise FastPathConflict(
                    f"collective part {namespace}: gated node {j} is never released on some rank", namespace
                )
            found = cache[(deps, arm)] = (times, after.argmax(axis=0))
        times, first_after = found
        index = np.maximum(first_after, k - 1)
        return times[index, np.arange(times.shape[1])]

    def _times(self, namespace: Hashable, pending: _Pending, timing: BulkTiming, np: Any) -> tuple[Any, int]:
        """Every node's finish times over the members; returns (phase end per member, SEND nodes).

        Kept long on purpose: it is the fast path's loop over a graph's nodes (a million vector steps for a large
        family), with every column and plan list bound to a local once; split into calls, it costs a call per node.
        """
        graph, plan, n = pending.graph, pending.plan, pending.n
        assert plan is not None
        part = pending.runs[0].part  # type: ignore[union-attr]
        unit, comp_ns = part.bytes_per_unit, part.comp_ns
        after, then = self._endpoint_delays(part)
        reduction_time = self.engine.costs.reduction_time
        kinds, chunks, durs = graph.kinds, graph.chunks, graph.durations_ns
        rel, match, tie_class, tie_pos = plan.rel, plan.match, plan.tie_class, plan.tie_pos
        chain_prev, chain_next, chain_after = plan.chain_prev, plan.chain_next, plan.chain_after
        stateful = timing.stateful
        uses = plan.uses.copy()
        deps_ptr, deps_idx = graph.deps_ptr, graph.deps_idx
        starts = np.array(pending.starts, dtype=float)
        group = np.array(part.group, dtype=np.int64)
        positions = np.arange(n)
        peer_index: dict[int, Any] = {}
        peer_rank: dict[int, Any] = {}
        done: list[Any] = [None] * graph.num_nodes
        ready_of: dict[int, Any] = {}
        end = starts
        sends = 0
        maximum = np.maximum
        gates = graph.gates
        gated: dict[tuple[tuple[int, ...], int], tuple[Any, Any]] = {}
        batches = timing.batches
        posted: dict[int, None] = {}  # SEND nodes whose messages wait to be timed together (timing.settle)

        def settle() -> None:
            nonlocal end
            results = timing.settle()
            if results is None:
                raise FastPathConflict(f"part {namespace}: its messages meet other traffic", namespace, plan.signature)
            for k, delivered in zip(posted, results, strict=True):
                if then > 0:
                    delivered = delivered + then  # the event path's timeout at arrival + then
                if uses[k] > 0:
                    done[k] = delivered
                end = maximum(end, delivered)
            posted.clear()

        for j in plan.order:
            lo, hi = deps_ptr[j], deps_ptr[j + 1]
            if posted and (any(deps_idx[k] in posted for k in range(lo, hi)) or match[j] in posted or (
                j in gates and gates[j][1] in posted
            )):  # fmt: skip
                settle()
            if j in gates:
                ready = self._gate_ready(namespace, graph, plan, gated, j, done, np)
                for k in (*deps_idx[lo:hi], gates[j][1]):
                    uses[k] -= 1
                    if uses[k] == 0:
                        done[k] = None
            elif lo == hi:
                ready = starts
            else:
                ready = done[deps_idx[lo]]
                for k in range(lo + 1, hi):
                    ready = maximum(ready, done[deps_idx[k]])
                for k in range(lo, hi):
                    d = deps_idx[k]
                    uses[d] -= 1
                    if uses[d] == 0:
                        done[d] = None
            kind = kinds[j]
            if kind == COMP:
                dur = durs[j]
                if dur is None:
                    dur = comp_ns if comp_ns is not None else reduction_time(chunks[j] * unit)
                finish = ready + dur if dur > 0 else ready
            else:
                offset = rel[j]
                peers = peer_index.get(offset)
                if peers is None:
                    peers = peer_index[offset] = (positions + offset) % n
                    peer_rank[offset] = group[peers]
                delivered = done[match[j]][peers] if kind == RECV else None
                prev = chain_prev[j]
                if prev >= 0:
                    before, before_delivered = ready_of.pop(prev)
                    in_order = tie_class[prev] == tie_class[j] and tie_pos[prev] < tie_pos[j]
                    if not bool((before < ready).all()) and not chain_after[j] and not in_order:
                        # Ready together, in an order the walker decides: harmless only if swapping the two
                        # changes nothing (equal messages, or equal deliveries to the two receives).
                        tied = before == ready
                        harmless = (
                            delivered is not None and bool((before_delivered[tied] == delivered[tied]).all())
                        ) or (delivered is None and not stateful and chunks[prev] == chunks[j])
                        if not (bool((before <= ready).all()) and harmless):
                            raise FastPathConflict(
                                f"collective part {namespace}: node {j} may be issued before node {prev} of its "
                                "channel on some rank",
                                namespace,
                                plan.signature,
                            )
                if chain_next[j] >= 0:
                    ready_of[j] = (ready, delivered)
                if kind == SEND and batches:
                    timing.post(group, peer_rank[offset], chunks[j] * unit, ready, after, (tie_class[j], tie_pos[j]))
                    posted[j] = None
                    sends += 1
                    continue  # its finish (its messages' delivery) comes with the next settle
                if kind == SEND:
                    cause = (tie_class[j], tie_pos[j])
                    delivered = timing.send(group, peer_rank[offset], chunks[j] * unit, ready, after, cause)
                    if delivered is None:
                        raise FastPathConflict(
                            f"collective part {namespace}: messages of node {j} meet on a link in an order "
                            "the event path could decide differently",
                            namespace,
                            plan.signature,
                        )
                    if then > 0:
                        delivered = delivered + then  # the event path's timeout at arrival + then
                    finish = delivered
                    sends += 1
                else:
                    m = match[j]
                    # (with the delay at receive, a receive posted after its message arrived is handled a delay after)
                    finish = maximum(ready + then, delivered) if then > 0 else maximum(ready, delivered)
                    uses[m] -= 1
                    if uses[m] == 0:
                        done[m] = None
            if uses[j] > 0:
                done[j] = finish
            end = maximum(end, finish)
        if posted:
            settle()
        if graph.exits:
            exits = done[graph.exits[0]]
            for j in graph.exits[1:]:
                exits = maximum(exits, done[j])
            return exits, sends
        return end, sends
