"""Walks of one dependency graph: the base walk and its two kinds, workload ranks and algorithm parts.

A :class:`GraphRun` walks one flat dependency graph: a rank's workload trace
(:class:`WorkloadRun`) or one chunk of one rank's part of a collective algorithm
(:class:`AlgoRun`, over an :class:`~etsim.algo.graph.AlgoGraph`). There is no SimPy process
per node or per message: nodes that take time schedule one event whose callback finishes them,
nodes that take none finish at once (through the engine's work list, so long zero-time chains do
not recurse).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from etsim.algo.graph import COMP, RECV, SEND
from etsim.chakra.dag import in_degrees
from etsim.chakra.graph import NodeType, Trace
from etsim.system.costs import compute_scale, window_factor

if TYPE_CHECKING:
    from etsim.system.collective import CollectivePart
    from etsim.system.config import SystemConfig
    from etsim.workload.collectives import CollectiveCall
    from etsim.workload.engine import Engine
    from etsim.workload.messages import Channel

__all__ = ["AlgoRun", "ExitAlgoRun", "GatedAlgoRun", "GraphRun", "WorkloadRun", "make_algo_run"]

# Slot classes of workload nodes.
FREE, CPU, COMPUTE, COMM = 0, 1, 2, 3

_T_COMP = int(NodeType.COMP_NODE)
_T_SEND = int(NodeType.COMM_SEND_NODE)
_T_RECV = int(NodeType.COMM_RECV_NODE)
_T_COLL = int(NodeType.COMM_COLL_NODE)
_T_LOAD = int(NodeType.MEM_LOAD_NODE)
_T_STORE = int(NodeType.MEM_STORE_NODE)


class GraphRun:
    """Walk one dependency graph; subclasses say how a node executes.

    The walk: :meth:`start` admits every dependency-free node; :meth:`finish` retires a node,
    releases its successors and admits each whose dependencies have all finished; after the last
    node, :meth:`completed` is called. The invariant: ``indeg[j]`` counts unfinished dependencies of
    node ``j`` (-1 once it finished); a node is admitted exactly once, when it reaches 0, and
    finished exactly once.

    Hooks for subclasses (the base class calls them; they never drive the walk themselves):

    - ``execute(j)`` (required): start node *j*; it must lead to ``finish(j)`` exactly once,
      directly, through ``engine.delay`` / ``engine.complete_now``, or by a delivered message.
    - ``admit(j)``: *j*'s dependencies have finished; the default executes it at once (workload
      runs queue it for a resource slot instead).
    - ``retire(j)``: *j* finished, before its successors are released (accounting, freeing a slot).
    - ``hold()`` / ``settle()``: bracket a batch of admissions (the start, the successors of one
      finished node, and everything that finishes at the same instant inside it); workload runs hand
      free slots to the smallest ready id when the outermost batch settles.
    - ``completed()``: every node has finished.
    - ``describe(j)`` and ``waits_for(j)``: where node *j* is and what it waits for, for messages
      and the deadlock report.

    Args:
        engine: the engine that owns the simulation.
        rank: the global rank this graph runs on.
        succs: successors of every node, as tuples.
        indeg: number of dependencies of every node (the run keeps it as its own: copy a shared list).
    """

    __slots__ = ("endpoint_delay", "engine", "indeg", "rank", "remaining", "succs")

    def __init__(self, engine: Engine, rank: int, succs: list[tuple[int, ...]], indeg: list[int]) -> None:
        self.engine = engine
        self.rank = rank
        self.succs = succs
        self.indeg = indeg
        self.remaining = len(indeg)
        self.endpoint_delay = engine.endpoint_delay

    # -- the walk --

    def start(self) -> None:
        """Admit every dependency-free node (or complete at once if the graph is empty)."""
        if self.remaining == 0:
            self.completed()
            return
        roots = [j for j, d in enumerate(self.indeg) if d == 0]
        self.hold()
        for j in roots:
            self.admit(j)
        self.settle()

    def finish(self, j: int) -> None:
        """Node *j* finished: retire it and release its successors."""
        self.retire(j)
        self.hold()
        self.release(j)
        self.settle()

    def release(self, j: int) -> None:
        """Mark *j* finished, admit the successors it was the last dependency of, complete when all are done."""
        indeg = self.indeg
        indeg[j] = -1
        for c in self.succs[j]:
            d = indeg[c] - 1
            indeg[c] = d
            if d == 0:
                self.admit(c)
        self.remaining -= 1
        if self.remaining == 0:
            self.completed()

    def _finish_event(self, j: int, _event: Any) -> None:
        self.finish(j)

    # -- hooks --

    def execute(self, j: int) -> None:
        """Start node *j* (see the class docstring)."""
        raise NotImplementedError

    def admit(self, j: int) -> None:
        """Node *j* has no unfinished dependencies: execute it at once."""
        self.execute(j)

    def retire(self, j: int) -> None:
        """Node *j* finished, before its successors are released (default: nothing)."""

    def hold(self) -> None:
        """A batch of admissions begins (default: nothing)."""

    def settle(self) -> None:
        """The batch of admissions begun by the matching :meth:`hold` is over (default: nothing)."""

    def completed(self) -> None:
        """Every node has finished (default: nothing)."""

    def describe(self, j: int) -> str:
        """Where node *j* is, for messages."""
        raise NotImplementedError

    def waits_for(self, j: int) -> str:
        """What issued node *j* waits for (deadlock report)."""
        return "completion"

    def queued(self) -> set[int]:
        """Ready nodes waiting for a slot (none outside workload runs)."""
        return set()

    def waiting(self) -> list[str]:
        """Issued-but-unfinished and blocked nodes, for the deadlock report."""
        out = []
        queued = self.queued()
        for j, d in enumerate(self.indeg):
            if d < 0:
                continue
            if d == 0 and j in queued:
                out.append(f"{self.describe(j)} is ready but queued for a busy slot")
            elif d == 0:
                out.append(f"{self.describe(j)} was issued and waits: {self.waits_for(j)}")
        blocked = [j for j, d in enumerate(self.indeg) if d > 0]
        if blocked:
            sample = ", ".join(self.describe(j) for j in blocked[:3])
            out.append(f"{len(blocked)} node(s) wait for unfinished dependencies, e.g. {sample}")
        return out


class AlgoRun(GraphRun):
    """One chunk of one rank's part of a collective algorithm.

    This is the hot path of collective-heavy runs: the graph's columns are bound to slots, ready
    nodes execute at once, and since none of the retire/hold/settle hooks does anything here,
    :meth:`finish` is bound straight to :meth:`GraphRun.release`.

    Args:
        engine: the engine.
        rank: the global rank.
        part: the chunk to walk (graph, group position, bytes per size unit, delays).
        chans: the point-to-point channels of the part's namespace.
        call: the collective call this part belongs to (told when the part completes).
    """

    __slots__ = (
        "call",
        "chans",
        "chunks",
        "comp_ns",
        "durs",
        "group",
        "kinds",
        "n",
        "names",
        "namespace",
        "part",
        "peers",
        "position",
        "reduction_time",
        "relative",
        "tags",
        "unit",
    )

    def __init__(
        self, engine: Engine, rank: int, part: CollectivePart, chans: dict[Any, Channel], call: CollectiveCall
    ) -> None:
        g = part.graph
        # Successors and in-degrees when the part starts (a part the fast path evaluates never does).
        super().__init__(engine, rank, [], [])
        self.remaining = g.num_nodes
        self.kinds = g.kinds
        self.peers = g.peers
        self.tags = g.tags
        self.chunks = g.chunks
        self.durs = g.durations_ns
        self.names = g.names
        self.relative = g.relative_peers
        self.position = part.position
        self.group = part.group
        self.n = len(part.group)
        self.unit = part.bytes_per_unit
        self.namespace = part.namespace
        self.part = part
        self.chans = chans
        self.call = call
        self.endpoint_delay = part.endpoint_delay
        self.comp_ns = part.comp_ns
        self.reduction_time = engine.costs.reduction_time

    def start(self) -> None:
        """Take the graph's successors and a copy of its in-degrees, then walk."""
        self._take_graph()
        GraphRun.start(self)

    def _take_graph(self) -> None:
        """The graph's successors, and its in-degrees as this run's own list."""
        graph = self.part.graph
        self.succs = graph.successor_lists()
        self.indeg = list(graph.in_degrees())

    def waiting(self) -> list[str]:
        """:meth:`GraphRun.waiting`, or that the part has not started (its nodes were never issued)."""
        if self.remaining and not self.indeg:
            chunk, phase = self.part.stream + 1, self.part.phase + 1
            return [f"rank {self.rank}: chunk {chunk}, phase {phase} of a collective has not started"]
        return GraphRun.waiting(self)

    def execute(self, j: int) -> None:
        """SEND/RECV through the engine's mailbox; COMP as a reduction."""
        kind = self.kinds[j]
        size = self.chunks[j] * self.unit
        if kind == COMP:
            dur = self.durs[j]
            if dur is None:
                if self.comp_ns is not None:
                    dur = self.comp_ns
                else:
                    dur = self.reduction_time(size)
                    if dur > 0 and self.engine.shared_reductions:
                        self.engine.reduce(self, j, dur)
                        return
            if dur > 0:
                self.engine.delay(self, j, dur)
            else:
                self.engine.complete_now(self, j)
            return
        peer = self.peers[j]
        if self.relative:
            peer = (self.position + peer) % self.n
        peer = self.group[peer]
        if kind == SEND:
            self.engine.mailbox.send(self, j, self.rank, peer, self.chans, self.tags[j], size)
        else:
            self.engine.mailbox.recv(self, j, peer, self.rank, self.chans, self.tags[j], size)

    #: Ready nodes run at once: no slots inside an algorithm.
    admit = execute
    #: No retire/hold/settle hooks: finishing is releasing.
    finish = GraphRun.release

    def completed(self) -> None:
        """Every node finished: the part is done for its namespace and, having no exit nodes, ended."""
        self.call.part_completed(self)
        self.call.part_exited(self)

    def peer_of(self, j: int) -> int:
        """Global rank node *j* talks to."""
        peer = self.peers[j]
        if self.relative:
            peer = (self.position + peer) % self.n
        return self.group[peer]

    def describe(self, j: int) -> str:
        """``rank R: algorithm node J (name) of a collective``."""
        name = self.names[j] if self.names else ""
        return f"rank {self.rank}: algorithm node {j} ({name}) of a collective"

    def waits_for(self, j: int) -> str:
        """A receive waits for its message; anything else for completion."""
        if self.kinds[j] == RECV:
            return f"a message from rank {self.peer_of(j)} (tag {self.tags[j]}) that has not been sent"
        return "completion"


class ExitAlgoRun(AlgoRun):
    """An algorithm part whose graph names exit nodes (:attr:`~etsim.algo.graph.AlgoGraph.exits`).

    The part ends for its collective when the exit nodes have finished; the rest (sends still in
    flight) completes in the background, and only then is the part done for its namespace.
    """

    __slots__ = ("exit_nodes", "exits_left")

    def __init__(
        self, engine: Engine, rank: int, part: CollectivePart, chans: dict[Any, Channel], call: CollectiveCall
    ) -> None:
        super().__init__(engine, rank, part, chans, call)
        self.exit_nodes = frozenset(part.graph.exits)
        self.exits_left = len(self.exit_nodes)

    def release(self, j: int) -> None:
        """Release *j*; the part ends when its last exit node has finished."""
        if j in self.exit_nodes:
            self.exits_left -= 1
            if self.exits_left == 0:
                self.call.part_exited(self)
        GraphRun.release(self, j)

    finish = release

    def completed(self) -> None:
        """Every node finished (the exit came earlier)."""
        self.call.part_completed(self)


class GatedAlgoRun(ExitAlgoRun):
    """An algorithm part with gated nodes (:attr:`~etsim.algo.graph.AlgoGraph.gates`).

    A gated node is never released by counting its dependencies; instead, at each completion of one of
    them, it becomes ready if its arming node has finished and at least *k* of its dependencies have.
    """

    __slots__ = ("armed", "counts", "fired", "gated_by_arm", "gated_by_dep", "needed")

    def __init__(
        self, engine: Engine, rank: int, part: CollectivePart, chans: dict[Any, Channel], call: CollectiveCall
    ) -> None:
        super().__init__(engine, rank, part, chans, call)
        g = part.graph
        self.needed, self.gated_by_arm, self.gated_by_dep = g.gate_index()
        self.counts = dict.fromkeys(g.gates, 0)
        self.armed = dict.fromkeys(g.gates, False)
        self.fired: set[int] = set()
        self.exits_left = len(self.exit_nodes) if self.exit_nodes else -1

    def start(self) -> None:
        """Take the successors, copy the in-degrees, make gated nodes unreachable by counting, then walk."""
        self._take_graph()
        for x in self.part.graph.gates:
            self.indeg[x] = 1 << 40  # counting never makes it ready
        GraphRun.start(self)

    def release(self, j: int) -> None:
        """Arm and count the gates *j* takes part in, then release *j* as usual."""
        for x in self.gated_by_arm.get(j, ()):
            self.armed[x] = True
        ready = []
        for x in self.gated_by_dep.get(j, ()):
            self.counts[x] += 1
            if self.armed[x] and self.counts[x] >= self.needed[x] and x not in self.fired:
                self.fired.add(x)
                ready.append(x)
        if j in self.exit_nodes:
            self.exits_left -= 1
            if self.exits_left == 0:
                self.call.part_exited(self)
        GraphRun.release(self, j)
        for x in ready:
            self.indeg[x] = 0
            self.admit(x)

    finish = release

    def completed(self) -> None:
        """Every node finished; without exit nodes the part also ends now."""
        self.call.part_completed(self)
        if not self.exit_nodes:
            self.call.part_exited(self)


def make_algo_run(
    engine: Engine, rank: int, part: CollectivePart, chans: dict[Any, Channel], call: CollectiveCall
) -> AlgoRun:
    """The walk for *part*: the plain hot path unless its graph has exit nodes or gated nodes."""
    graph = part.graph
    if graph.gates:
        return GatedAlgoRun(engine, rank, part, chans, call)
    if graph.exits:
        return ExitAlgoRun(engine, rank, part, chans, call)
    return AlgoRun(engine, rank, part, chans, call)


class WorkloadRun(GraphRun):
    """One rank's workload trace, with per-NPU slots and time accounting.

    Ready nodes queue per slot class (CPU, compute, communication; receives, metadata and invalid
    nodes take none) and are issued smallest id first, whatever their order in the file (lowest
    :attr:`SystemConfig.node_priorities` first where the system sets them).

    Args:
        engine: the engine.
        trace: the rank's trace.
        rank: the rank.
        config: system parameters (slots, control dependencies).
    """

    __slots__ = (
        "comm_ns",
        "compute_ns",
        "exposed_ns",
        "extra",
        "finish_ns",
        "heaps",
        "holding",
        "in_use",
        "jitter",
        "keys",
        "limits",
        "n_comm",
        "n_comp",
        "node_class",
        "slowdown",
        "t_last",
        "trace",
        "windows",
    )

    def __init__(self, engine: Engine, trace: Trace, rank: int, config: SystemConfig) -> None:
        sources = trace.dependency_csrs(include_ctrl=not config.ignore_ctrl_deps)
        succ_ptr, succ = trace.successors(include_ctrl=not config.ignore_ctrl_deps)
        succs = [tuple(succ[succ_ptr[i] : succ_ptr[i + 1]]) for i in range(trace.num_nodes)]
        super().__init__(engine, rank, succs, in_degrees(trace.num_nodes, sources))
        self.trace = trace
        r = config.resources
        self.limits = [0, r.cpu_ops, r.compute_streams, r.comm_streams]
        self.in_use = [0, 0, 0, 0]
        self.heaps: list[list[tuple[Any, int]]] = [[], [], [], []]
        # Issue order among ready nodes: the node id, or (priority, id) where the system sets priorities.
        self.keys: list[Any] = trace.ids
        mine = {int(k.split(":")[1]): p for k, p in config.node_priorities.items() if int(k.split(":")[0]) == rank}
        if mine:
            self.keys = [(mine.get(i, 0), i) for i in trace.ids]
        self.holding = 0
        self.slowdown, self.jitter, self.windows, self.extra = compute_scale(config, rank, trace.num_nodes)
        classes = []
        for j, t in enumerate(trace.types):
            if trace.is_cpu_op[j] and t in (_T_COMP, _T_COLL):
                classes.append(CPU)
            elif t == _T_COMP:
                classes.append(COMPUTE)
            elif t in (_T_COLL, _T_SEND, _T_LOAD, _T_STORE):
                classes.append(COMM)
            else:
                classes.append(FREE)
        self.node_class = classes
        self.n_comp = self.n_comm = 0
        self.t_last = 0.0
        self.compute_ns = self.comm_ns = self.exposed_ns = 0.0
        self.finish_ns = 0.0

    # -- slots --

    def admit(self, j: int) -> None:
        """Queue *j* on its slot class and issue what the slots allow (smallest id first)."""
        cls = self.node_class[j]
        if cls == FREE:
            self.execute(j)
            return
        heapq.heappush(self.heaps[cls], (self.keys[j], j))
        if not self.holding:
            self._dispatch(cls)

    def hold(self) -> None:
        """Ready nodes only join the queues until the outermost batch settles."""
        self.holding += 1

    def settle(self) -> None:
        """When the outermost batch ends, hand every free slot to the smallest ready id."""
        self.holding -= 1
        if self.holding:
            return
        for cls in (CPU, COMPUTE, COMM):
            if self.heaps[cls]:
                self._dispatch(cls)

    def _dispatch(self, cls: int) -> None:
        heap = self.heaps[cls]
        limit = self.limits[cls]
        while heap and (limit == 0 or self.in_use[cls] < limit):
            _, j = heapq.heappop(heap)
            self.in_use[cls] += 1
            self.execute(j)

    def queued(self) -> set[int]:
        """Ready nodes waiting for a slot."""
        return {j for heap in self.heaps for _, j in heap}

    def retire(self, j: int) -> None:
        """Close the time accounting of *j* and release its slot."""
        t = self.trace.types[j]
        if t == _T_COMP or (t == _T_COLL and self.node_class[j] == CPU):
            self.account()
            self.n_comp -= 1
        elif t in (_T_COLL, _T_SEND, _T_RECV):
            self.account()
            self.n_comm -= 1
        cls = self.node_class[j]
        if cls != FREE:
            self.in_use[cls] -= 1
        if self.engine.observer is not None:
            self.engine.observer.node_finished(self, j)

    def account(self) -> None:
        """Add the time since the last change to compute, communication and exposed communication."""
        now = self.engine.env.now
        dt = now - self.t_last
        if dt > 0:
            if self.n_comp:
                self.compute_ns += dt
            if self.n_comm:
                self.comm_ns += dt
                if not self.n_comp:
                    self.exposed_ns += dt
        self.t_last = now

    def completed(self) -> None:
        """The rank's last node finished."""
        self.engine.rank_done(self)

    # -- execution --

    def execute(self, j: int) -> None:
        """Run workload node *j* by type."""
        tr = self.trace
        t = tr.types[j]
        eng = self.engine
        if eng.observer is not None:
            eng.observer.node_started(self, j)
        if t == _T_COMP or (t == _T_COLL and self.node_class[j] == CPU):
            self.account()
            self.n_comp += 1
            duration = eng.costs.compute_time(tr, j) * self.slowdown
            if self.jitter is not None:
                duration *= self.jitter[j]
            if self.windows:
                duration *= window_factor(self.windows, eng.env.now)
            eng.delay(self, j, duration + self.extra)
        elif t == _T_SEND:
            self.account()
            self.n_comm += 1
            # The pre-flight check guaranteed peer, tag and size before the run.
            dst, size = tr.comm_dst[j], tr.comm_size[j]
            if eng.p2p is None:
                eng.mailbox.send(self, j, self.rank, dst, eng.workload_channels, tr.comm_tag[j], size)  # type: ignore[arg-type]
            else:  # the runtime's send: its wire bytes and its own delay (NCCL's ncclSend)
                wire, delay = eng.p2p(self.rank, dst, size, tr, j)  # type: ignore[arg-type]
                eng.mailbox.send(self, j, self.rank, dst, eng.workload_channels, tr.comm_tag[j], size, delay, wire)  # type: ignore[arg-type]
        elif t == _T_RECV:
            self.account()
            self.n_comm += 1
            src, size = tr.comm_src[j], tr.comm_size[j]
            eng.mailbox.recv(self, j, src, self.rank, eng.workload_channels, tr.comm_tag[j], size)  # type: ignore[arg-type]
        elif t == _T_COLL:
            self.account()
            self.n_comm += 1
            eng.collective(self, j)
        elif t in (_T_LOAD, _T_STORE):
            eng.delay(self, j, eng.costs.memory_time(tr.tensor_size[j] or 0))
        else:  # METADATA, INVALID
            eng.complete_now(self, j)

    def describe(self, j: int) -> str:
        """``file, rank R: node ID (name)``."""
        return self.trace.describe(j)

    def waits_for(self, j: int) -> str:
        """A collective waits for its algorithm, a receive for its message."""
        t = self.trace.types[j]
        if t == _T_COLL:
            call = self.engine.open_calls.get((self.rank, j))
            lines = [w for r in (call.runs if call else []) for w in r.waiting()][:4]
            return "its collective never completes" + ("; " + "; ".join(lines) if lines else "")
        if t == _T_RECV:
            src, tag = self.trace.comm_src[j], self.trace.comm_tag[j]
            return f"a message from rank {src} with tag {tag} that has not been sent"
        return "completion"
