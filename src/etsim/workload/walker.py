"""The one dependency-graph walker, and the engine that runs every rank with it.

A :class:`GraphRun` walks one flat dependency graph: a rank's workload trace, or one rank's
part of a collective algorithm (:class:`~etsim.producers.builder.AlgoGraph`). A node is
issued when all its dependencies have finished. There is no SimPy process per node or per
message: nodes that take time schedule one SimPy event whose callback finishes them, nodes
that take none finish at once (through a work list, so long zero-time chains do not recurse).

Workload runs respect per-NPU slots (compute, communication, CPU; receives take none), and
issue ready nodes of a slot class smallest-id first, as ASTRA-sim does. Algorithm runs issue
every ready node at once.

Point-to-point messages match on (namespace, src, dst, tag) in order: the k-th send matches
the k-th receive. The namespace keeps workload SEND/RECV (namespace -1) apart from every
collective instance and chunk. A send finishes when its message is delivered; a receive when
the matching message has arrived (at once if it already had).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from etsim.chakra.graph import CollectiveType, NodeType, Trace
from etsim.errors import SimulationError
from etsim.producers.builder import COMP, RECV, SEND

if TYPE_CHECKING:
    import simpy

    from etsim.network.model import NetworkModel
    from etsim.system.collective import CollectivePart, System
    from etsim.system.config import SystemConfig

__all__ = ["Engine", "GraphRun"]

# Slot classes of workload nodes.
FREE, CPU, COMPUTE, COMM = 0, 1, 2, 3

_T_COMP = int(NodeType.COMP_NODE)
_T_SEND = int(NodeType.COMM_SEND_NODE)
_T_RECV = int(NodeType.COMM_RECV_NODE)
_T_COLL = int(NodeType.COMM_COLL_NODE)
_T_LOAD = int(NodeType.MEM_LOAD_NODE)
_T_STORE = int(NodeType.MEM_STORE_NODE)


class GraphRun:
    """Walk one dependency graph; subclasses say how a node executes and what it describes.

    The walker's invariant: ``indeg[j]`` counts unfinished dependencies of node ``j``; a node
    is issued (``ready``) exactly once, when it reaches 0, and finished exactly once.
    """

    __slots__ = ("endpoint_delay", "engine", "indeg", "on_done", "rank", "remaining", "succs")

    def __init__(
        self,
        engine: Engine,
        rank: int,
        succs: list[tuple[int, ...]],
        indeg: list[int],
        on_done: Callable[[GraphRun], None],
    ) -> None:
        self.engine = engine
        self.rank = rank
        self.succs = succs
        self.indeg = indeg.copy()
        self.remaining = len(indeg)
        self.on_done = on_done
        self.endpoint_delay = engine.endpoint_delay

    def start(self) -> None:
        """Issue every dependency-free node (or finish at once if the graph is empty)."""
        if self.remaining == 0:
            self.on_done(self)
            return
        for j in [j for j, d in enumerate(self.indeg) if d == 0]:
            self.ready(j)

    def ready(self, j: int) -> None:
        """Node *j* has no unfinished dependencies: issue it."""
        self.execute(j)

    def execute(self, j: int) -> None:
        """Start node *j*; it must eventually call :meth:`finish` (directly or via the engine)."""
        raise NotImplementedError

    def finish(self, j: int) -> None:
        """Node *j* finished: release its successors."""
        indeg = self.indeg
        indeg[j] = -1  # finished
        for c in self.succs[j]:
            d = indeg[c] - 1
            indeg[c] = d
            if d == 0:
                self.ready(c)
        self.remaining -= 1
        if self.remaining == 0:
            self.on_done(self)

    def queued(self) -> set[int]:
        """Ready nodes waiting for a slot (none outside workload runs)."""
        return set()

    def _finish_event(self, j: int, _event: Any) -> None:
        self.finish(j)

    def describe(self, j: int) -> str:
        """Where node *j* is, for messages."""
        raise NotImplementedError

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
                out.append(f"{self.describe(j)} was issued and waits: {self.engine.why(self, j)}")
        blocked = [j for j, d in enumerate(self.indeg) if d > 0]
        if blocked:
            sample = ", ".join(self.describe(j) for j in blocked[:3])
            out.append(f"{len(blocked)} node(s) wait for unfinished dependencies, e.g. {sample}")
        return out


class AlgoRun(GraphRun):
    """One chunk of one rank's part of a collective algorithm.

    This is the hot path of collective-heavy runs, so the graph's columns are bound to slots
    and ready nodes are executed without the slot machinery of workload runs.
    """

    __slots__ = (
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
        "relative",
        "tags",
        "unit",
    )

    def __init__(
        self,
        engine: Engine,
        rank: int,
        part: CollectivePart,
        chans: dict[Any, Any],
        on_done: Callable[[GraphRun], None],
    ) -> None:
        g = part.graph
        super().__init__(engine, rank, g.successor_lists(), g.successors()[2], on_done)
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
        self.endpoint_delay = part.endpoint_delay
        self.comp_ns = part.comp_ns

    def execute(self, j: int) -> None:
        """SEND/RECV through the engine's channels; COMP as a reduction."""
        kind = self.kinds[j]
        size = self.chunks[j] * self.unit
        if kind == COMP:
            dur = self.durs[j]
            if dur is None:
                dur = self.comp_ns if self.comp_ns is not None else self.engine.reduction_time(size)
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
            self.engine.send(self, j, self.rank, peer, self.chans, self.tags[j], size)
        else:
            self.engine.recv(self, j, peer, self.rank, self.chans, self.tags[j], size)

    #: Ready nodes run at once: no slots inside an algorithm.
    ready = execute

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


class WorkloadRun(GraphRun):
    """One rank's workload trace, with per-NPU slots and time accounting."""

    __slots__ = (
        "comm_ns",
        "compute_ns",
        "exposed_ns",
        "finish_ns",
        "heaps",
        "holding",
        "in_use",
        "limits",
        "n_comm",
        "n_comp",
        "node_class",
        "t_last",
        "trace",
    )

    def __init__(self, engine: Engine, trace: Trace, rank: int, config: SystemConfig) -> None:
        include_ctrl = not config.ignore_ctrl_deps
        succ_ptr, succ = trace.successors(include_ctrl=include_ctrl)
        succs = [tuple(succ[succ_ptr[i] : succ_ptr[i + 1]]) for i in range(trace.num_nodes)]
        indeg = [trace.data_ptr[i + 1] - trace.data_ptr[i] for i in range(trace.num_nodes)]
        if include_ctrl:
            for i in range(trace.num_nodes):
                indeg[i] += trace.ctrl_ptr[i + 1] - trace.ctrl_ptr[i]
        super().__init__(engine, rank, succs, indeg, engine._rank_done)
        self.trace = trace
        r = config.resources
        self.limits = [0, r.cpu_ops, r.compute_streams, r.comm_streams]
        self.in_use = [0, 0, 0, 0]
        self.heaps: list[list[tuple[int, int]]] = [[], [], [], []]
        self.holding = False
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
        self.n_comp = 0
        self.n_comm = 0
        self.t_last = 0.0
        self.compute_ns = 0.0
        self.comm_ns = 0.0
        self.exposed_ns = 0.0
        self.finish_ns = 0.0

    # -- slots --

    def ready(self, j: int) -> None:
        """Queue *j* on its slot class and issue what the slots allow (smallest id first)."""
        cls = self.node_class[j]
        if cls == FREE:
            self.execute(j)
            return
        heapq.heappush(self.heaps[cls], (self.trace.ids[j], j))
        if not self.holding:
            self._dispatch(cls)

    def queued(self) -> set[int]:
        """Ready nodes waiting for a slot."""
        return {j for heap in self.heaps for _, j in heap}

    def start(self) -> None:
        """Queue every dependency-free node, then fill the slots smallest id first."""
        self._hold(GraphRun.start, self)

    def _hold(self, action: Callable[..., None], *args: Any) -> None:
        # While nodes finish (and zero-time successors finish with them) ready nodes only join the
        # queues; the outermost call then hands every free slot to the smallest ready id, whatever
        # the order nodes appear in the file.
        if self.holding:
            action(*args)
            return
        self.holding = True
        try:
            action(*args)
        finally:
            self.holding = False
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

    def finish(self, j: int) -> None:
        """Release the slot and the time accounting of *j*, then its successors."""
        t = self.trace.types[j]
        if t == _T_COMP or (t == _T_COLL and self.node_class[j] == CPU):
            self._account()
            self.n_comp -= 1
        elif t in (_T_COLL, _T_SEND, _T_RECV):
            self._account()
            self.n_comm -= 1
        cls = self.node_class[j]
        if cls != FREE:
            self.in_use[cls] -= 1
        self._hold(GraphRun.finish, self, j)

    def _account(self) -> None:
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

    # -- execution --

    def execute(self, j: int) -> None:
        """Run workload node *j* by type."""
        tr = self.trace
        t = tr.types[j]
        eng = self.engine
        if t == _T_COMP or (t == _T_COLL and self.node_class[j] == CPU):
            self._account()
            self.n_comp += 1
            eng.delay(self, j, eng.compute_time(tr, j))
        elif t == _T_SEND:
            self._account()
            self.n_comm += 1
            # check_workload guaranteed peer, tag and size before the run.
            eng.send(self, j, self.rank, tr.comm_dst[j], eng.workload_channels, tr.comm_tag[j], tr.comm_size[j])  # type: ignore[arg-type]
        elif t == _T_RECV:
            self._account()
            self.n_comm += 1
            eng.recv(self, j, tr.comm_src[j], self.rank, eng.workload_channels, tr.comm_tag[j], tr.comm_size[j])  # type: ignore[arg-type]
        elif t == _T_COLL:
            self._account()
            self.n_comm += 1
            eng.collective(self, j)
        elif t in (_T_LOAD, _T_STORE):
            eng.delay(self, j, eng.memory_time(tr.tensor_size[j] or 0))
        else:  # METADATA, INVALID
            eng.complete_now(self, j)

    def describe(self, j: int) -> str:
        """``file, rank R: node ID (name)``."""
        return self.trace.describe(j)


class Engine:
    """Runs every rank's workload with the shared walker, the system layer and a network model.

    Args:
        env: the SimPy environment.
        network: the network model (``transfer(src, dst, size)``).
        system: collective matching and expansion.
        traces: one trace per rank.
        config: system parameters.
    """

    def __init__(
        self,
        env: simpy.Environment,
        network: NetworkModel,
        system: System,
        traces: list[Trace],
        config: SystemConfig,
    ) -> None:
        self.env = env
        self.network = network
        self._transfer = network.transfer
        self._transfer_after = network.transfer_after
        self.system = system
        self.config = config
        self.reduction_bandwidth = config.reduction_bandwidth
        self.astra = config.astra
        self.endpoint_delay = config.endpoint_delay
        # Point-to-point channels: one dict per namespace, (src, dst, tag) -> channel state. A
        # collective's namespace is dropped when every rank of its group has finished its part.
        self._batches: dict[Any, list[tuple[Any, ...]]] = {}
        self.workload_channels: dict[tuple[int, int, int], list[Any]] = {}
        self.namespaces: dict[int, list[Any]] = {}
        self.messages = 0
        self.bytes = 0.0
        self.events = 0
        self.collectives: list[tuple[Any, ...]] = []
        self._instant: list[tuple[GraphRun, int]] = []
        self._draining = False
        self._depth = 0
        self.ranks_done = 0
        self.runs = [WorkloadRun(self, trace, rank, config) for rank, trace in enumerate(traces)]
        self.progress: Callable[[Engine], None] | None = None
        self.progress_at = 1 << 62  # message count of the next progress check (set by the caller)
        self._coll_waiting: dict[tuple[int, int], list[AlgoRun]] = {}

    # -- time --

    def complete_now(self, run: GraphRun, j: int) -> None:
        """Finish node *j* of *run* at the current time.

        Finishing directly is fastest but recurses (finish → successor → finish …); past a small
        depth the node goes on a work list drained by the outermost call, so arbitrarily long
        chains of zero-time nodes never overflow the stack.
        """
        if self._depth < 32:
            self._depth += 1
            try:
                run.finish(j)
            finally:
                self._depth -= 1
            return
        self._instant.append((run, j))
        if self._draining:
            return
        self._draining = True
        saved, self._depth = self._depth, 1 << 30  # everything below is queued, not recursed
        try:
            pending = self._instant
            while pending:
                r, k = pending.pop()
                r.finish(k)
        finally:
            self._draining = False
            self._depth = saved

    def delay(self, run: GraphRun, j: int, duration: float) -> None:
        """Finish node *j* of *run* after *duration* ns (at once if 0)."""
        if duration > 0:
            self.events += 1
            self.env.timeout(duration).callbacks.append(partial(run._finish_event, j))
        else:
            self.complete_now(run, j)

    def reduction_time(self, nbytes: float) -> float:
        """Ns of a reduction of *nbytes* (free unless a reduction bandwidth or ASTRA-sim policy is set)."""
        if self.astra is not None:
            return self.astra.reduction_time(nbytes)
        bw = self.reduction_bandwidth
        return nbytes / bw if bw else 0.0

    def compute_time(self, trace: Trace, j: int) -> float:
        """Ns of a COMP node: roofline for GPU ops when configured, else ``duration_micros``."""
        cfg = self.config
        if self.astra is not None and not (cfg.peak_flops and cfg.memory_bandwidth):
            return trace.duration_micros[j] * 1000.0 or 1.0  # ASTRA-sim: 0 µs takes 1 ns
        if cfg.peak_flops and cfg.memory_bandwidth and not trace.is_cpu_op[j]:
            ops, size = trace.num_ops[j], trace.tensor_size[j]
            if ops is not None and size:
                return max(ops / cfg.peak_flops, size / cfg.memory_bandwidth)
        return trace.duration_micros[j] * 1000.0

    def memory_time(self, size: int) -> float:
        """Ns of a MEM_LOAD/MEM_STORE of *size* bytes."""
        return self.config.remote_memory_latency + size / self.config.remote_memory_bandwidth

    # -- point to point --
    #
    # A channel is [next send seq, next recv seq, arrived {seq: (size, run, j)}, posted {seq: (size, run, j)}].

    def send(self, run: GraphRun, j: int, src: int, dst: int, chans: dict[Any, Any], tag: int, size: float) -> None:
        """Send *size* bytes; the SEND node finishes on delivery, and the matching RECV with it."""
        key = (src, dst, tag)
        ch = chans.get(key)
        if ch is None:
            ch = chans[key] = [0, 0, {}, {}]
        seq = ch[0]
        ch[0] = seq + 1
        self.messages += 1
        self.bytes += size
        if self.messages >= self.progress_at and self.progress is not None:
            self.progress(self)
        if run.endpoint_delay > 0:
            event = self._transfer_after(src, dst, size, run.endpoint_delay)
        else:
            event = self._transfer(src, dst, size)
        # Messages delivered by one event (models coalesce same-instant deliveries) form one batch,
        # handled by one callback: no callback object and no call per message.
        batch = self._batches.get(event)
        if batch is None:
            self.events += 1
            batch = self._batches[event] = []
            event.callbacks.append(self._deliver_batch)
        batch.append((run, j, ch, seq, size))

    def _deliver_batch(self, event: Any) -> None:
        for run, j, ch, seq, size in self._batches.pop(event):
            run.finish(j)
            posted = ch[3].pop(seq, None)
            if posted is None:
                ch[2][seq] = (size, run, j)
                continue
            rsize, rrun, rj = posted
            if rsize != size:
                self._size_mismatch(run, j, size, rrun, rj, rsize)
            rrun.finish(rj)

    def recv(self, run: GraphRun, j: int, src: int, dst: int, chans: dict[Any, Any], tag: int, size: float) -> None:
        """Post a receive; it finishes when the matching message has arrived."""
        key = (src, dst, tag)
        ch = chans.get(key)
        if ch is None:
            ch = chans[key] = [0, 0, {}, {}]
        seq = ch[1]
        ch[1] = seq + 1
        arrived = ch[2].pop(seq, None)
        if arrived is None:
            ch[3][seq] = (size, run, j)
            return
        ssize, srun, sj = arrived
        if ssize != size:
            self._size_mismatch(srun, sj, ssize, run, j, size)
        self.complete_now(run, j)

    @staticmethod
    def _size_mismatch(srun: GraphRun, sj: int, ssize: float, rrun: GraphRun, rj: int, rsize: float) -> None:
        raise SimulationError(
            f"size mismatch: {srun.describe(sj)} sends {ssize:g} bytes but the matching "
            f"{rrun.describe(rj)} receives {rsize:g} bytes"
        )

    # -- collectives --

    def collective(self, run: WorkloadRun, j: int) -> None:
        """Join the collective of node *j* and walk this rank's share of its algorithm."""
        tr = run.trace
        ctype = CollectiveType(tr.comm_type[j])  # type: ignore[arg-type]  # checked by check_workload
        size = tr.comm_size[j] or 0
        share = self.system.join(run.rank, ctype, size, tr.pg_name[j], tr.describe(j), tr.ids[j])
        start = self.env.now
        record = [run.rank, tr.ids[j], ctype.name, size, share.group, share.algorithm, start, start]
        self.collectives.append(record)  # type: ignore[arg-type]
        if not share.parts or size == 0:
            self.complete_now(run, j)
            return
        pending = [len(share.parts)]
        group_size = len(share.group)

        def part_done(done_run: GraphRun) -> None:
            ns = done_run.namespace  # type: ignore[attr-defined]
            state = self.namespaces[ns]
            state[1] -= 1
            if state[1] == 0:
                del self.namespaces[ns]
            pending[0] -= 1
            if pending[0] == 0:
                record[7] = self.env.now
                self._coll_waiting.pop((run.rank, j), None)
                run.finish(j)

        algo_runs = []
        for part in share.parts:
            state = self.namespaces.get(part.namespace)
            if state is None:
                state = self.namespaces[part.namespace] = [{}, group_size]
            algo_run = AlgoRun(self, run.rank, part, state[0], part_done)
            algo_runs.append(algo_run)
        self._coll_waiting[(run.rank, j)] = algo_runs
        astra = self.astra
        if astra is None:
            for algo_run in algo_runs:
                algo_run.start()
            return
        # ASTRA-sim: at most `active` streams in flight, queued FIFO or LIFO; each starts after an
        # endpoint delay.
        queue = list(algo_runs) if astra.scheduling_policy == "FIFO" else algo_runs[::-1]
        active = astra.active_chunks_per_dimension or len(queue)

        def launch(_event: Any = None) -> None:
            nxt = queue.pop(0)
            original = nxt.on_done

            def done_then_next(r: GraphRun) -> None:
                original(r)
                if queue:
                    launch()

            nxt.on_done = done_then_next
            if nxt.part.start_delay > 0:
                self.events += 1
                self.env.timeout(nxt.part.start_delay).callbacks.append(lambda _e: nxt.start())
            else:
                nxt.start()

        for _ in range(min(active, len(queue))):
            launch()

    # -- the run --

    def _rank_done(self, run: GraphRun) -> None:
        assert isinstance(run, WorkloadRun)
        run._account()
        run.finish_ns = self.env.now
        self.ranks_done += 1

    def start(self) -> None:
        """Issue every rank's dependency-free nodes."""
        for run in self.runs:
            run.start()

    def why(self, run: GraphRun, j: int) -> str:
        """What an issued node waits for (deadlock report)."""
        if isinstance(run, WorkloadRun):
            t = run.trace.types[j]
            if t == _T_COLL:
                inner = self._coll_waiting.get((run.rank, j), [])
                lines = [w for r in inner for w in r.waiting()][:4]
                return "its collective never completes" + ("; " + "; ".join(lines) if lines else "")
            if t == _T_RECV:
                src, tag = run.trace.comm_src[j], run.trace.comm_tag[j]
                return f"a message from rank {src} with tag {tag} that has not been sent"
            return "completion"
        if isinstance(run, AlgoRun) and run.kinds[j] == RECV:
            return f"a message from rank {run.peer_of(j)} (tag {run.tags[j]}) that has not been sent"
        return "completion"

    def deadlock_report(self) -> str:
        """Which ranks are stuck and on what."""
        lines = []
        stuck = [r for r in self.runs if r.remaining > 0]
        for run in stuck[:16]:
            lines.append(f"rank {run.rank}: {run.remaining} of {len(run.indeg)} nodes unfinished")
            queued = sum(len(h) for h in run.heaps)
            if queued:
                lines.append(f"  {queued} ready node(s) queued for a slot")
            for w in run.waiting()[:6]:
                lines.append(f"  {w}")
        if len(stuck) > 16:
            lines.append(f"... and {len(stuck) - 16} more stuck ranks")
        return "\n".join(lines)
