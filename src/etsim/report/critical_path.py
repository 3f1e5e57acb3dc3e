"""The critical path of a run: the chain of activities, across ranks and through messages, that set its finish.

It is found by walking back from the node that finished last. Every step asks what released the
current activity at the moment it started, using only what the run recorded (a
:class:`~etsim.report.record.RunRecorder` with ``messages=True``):

- a workload node started when its last dependency finished, or, if it was ready earlier, when a node
  of the same slot class on its rank finished and freed the slot;
- a receive finished when its message was delivered (the path goes on at the send, on the peer's rank)
  unless the message was already waiting when the receive was posted;
- a collective finished when its last chunk did, or, when its group synchronises, when the last member
  issued it (the path goes on at that member);
- inside a collective, the algorithm's nodes start when their last predecessor finishes (no slots), a
  send lasts until delivery, a reduction for its cost (after waiting, with ``shared_reductions``, for the
  reduction that held its NPU's reduction unit, where the path goes on), and a chunk's first nodes start
  with the chunk, which starts with the collective or when the chunk before it in the stream queue finished.

Each step covers the interval between the time it was entered and the time its activity started, so
the segments are contiguous, start at 0 and end at the finish time; they add up to it exactly (as
intervals). Kinds: ``compute`` (workload compute, CPU ops, algorithm reductions), ``exposed_comm``
(messages in the network, including queueing: on the critical path, communication is exposed by
definition), ``memory`` (remote memory loads and stores) and ``other`` (stream delays, and anything
the record cannot explain, which would be a bug).

Per node on the path: its share of each kind, and ``wait_ns``: how long the node itself was running
while the path ran elsewhere, waiting for a peer (a collective whose last member joined late, a receive
whose message was still on its way).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from etsim.algo.graph import COMP, RECV, SEND
from etsim.chakra.graph import NodeType
from etsim.errors import ConfigError, SimulationError
from etsim.units import format_size
from etsim.workload.runs import CPU

if TYPE_CHECKING:
    from etsim.report.record import RunRecorder
    from etsim.workload.collectives import CollectiveCall
    from etsim.workload.runs import AlgoRun, GraphRun, WorkloadRun

__all__ = ["KINDS", "critical_path"]

#: Segment kinds, in report order.
KINDS = ("compute", "exposed_comm", "memory", "other")

_T_COMP = int(NodeType.COMP_NODE)
_T_SEND = int(NodeType.COMM_SEND_NODE)
_T_RECV = int(NodeType.COMM_RECV_NODE)
_T_COLL = int(NodeType.COMM_COLL_NODE)
_T_MEM = (int(NodeType.MEM_LOAD_NODE), int(NodeType.MEM_STORE_NODE))
_TYPE_NAMES = {int(t): t.name for t in NodeType}


class _Walk:
    """The backward walk over one recorded run."""

    def __init__(self, rec: RunRecorder) -> None:
        engine = rec.engine
        if engine is None or not rec.complete:
            raise ConfigError("no critical path: the recorder did not watch a completed run")
        if not rec.messages or rec.messages_cut_ns != math.inf:
            raise ConfigError("no critical path: it needs a record of every message (RunRecorder(messages=True))")
        self.rec = rec
        self.runs: list[WorkloadRun] = engine.runs
        self.config = engine.config
        include_ctrl = not engine.config.ignore_ctrl_deps
        self.deps = [run.trace.dependency_csrs(include_ctrl=include_ctrl) for run in self.runs]
        self.calls: dict[tuple[int, int], CollectiveCall] = {(c.rank, c.j): c for c in rec.calls}
        self.instances: dict[Any, list[CollectiveCall]] = {}
        for c in rec.calls:
            if c.runs:
                self.instances.setdefault(c.runs[0].namespace, []).append(c)
        self.send_row: dict[tuple[GraphRun, int], int] = {}
        self.recv_row: dict[tuple[GraphRun, int], int] = {}
        for row in range(rec.num_messages):
            self.send_row[(rec.m_send_run[row], rec.m_send_node[row])] = row
            recv_run = rec.m_recv_run[row]
            if recv_run is not None:
                self.recv_row[(recv_run, rec.m_recv_node[row])] = row
        self._algo: dict[AlgoRun, tuple[list[float], list[float]]] = {}
        self._slots: dict[int, dict[tuple[int, float], list[int]]] = {}
        # Parts by rank and end time: a part that ended frees a slot of its rank's queue for the next.
        self.ended: dict[tuple[int, float], list[AlgoRun]] = {}
        for c in rec.calls:
            for part in c.runs:
                end = rec.part_end.get(part)
                if end is not None:
                    self.ended.setdefault((c.rank, end), []).append(part)
        # The walk's record, backwards in time: ("visit", rank, j) and ("seg", t0, t1, rank, j, kind, detail).
        self.trail: list[tuple[Any, ...]] = []
        self.cursor = 0.0

    # -- recorded times --

    def deps_of(self, rank: int, j: int) -> list[int]:
        out: list[int] = []
        for ptr, idx in self.deps[rank]:
            out.extend(idx[ptr[j] : ptr[j + 1]])
        return out

    def slot_holder(self, rank: int, j: int, t: float) -> int | None:
        """A node of *j*'s slot class on *rank* that finished at *t* (it freed the slot *j* took)."""
        index = self._slots.get(rank)
        run = self.runs[rank]
        if index is None:
            index = self._slots[rank] = {}
            for k, f in enumerate(self.rec.finish[rank]):
                index.setdefault((run.node_class[k], f), []).append(k)
        for k in index.get((run.node_class[j], t), []):
            if k != j:
                return k
        return None

    def algo_times(self, part: AlgoRun) -> tuple[list[float], list[float]]:
        """Start and finish of every node of a collective part, rebuilt from the record.

        Algorithm nodes take no slots: each starts when its last predecessor finishes (roots with the
        part); a send finishes on delivery, a receive when it took its message, a reduction after
        its cost (computed as the walker computes it).
        """
        cached = self._algo.get(part)
        if cached is not None:
            return cached
        rec = self.rec
        g = part.part.graph
        n = len(g.kinds)
        ptr, succ, indeg = g.successors()
        ps = rec.part_start[part]
        start = [ps] * n
        finish = [math.nan] * n
        deg = list(indeg)
        order = [k for k in range(n) if deg[k] == 0]
        ready = [-math.inf] * n
        for k in order:
            ready[k] = ps
        gates = g.gates
        placed: set[int] = set()
        for x in gates:
            deg[x] = 1 << 40  # a gated node is placed when its last possible releaser is (below)
        i = 0
        while i < len(order):
            k = order[i]
            i += 1
            s = _gate_time(g, k, finish) if k in gates else ready[k]
            start[k] = s
            kind = part.kinds[k]
            if kind == SEND:
                f = rec.m_delivered[self.send_row[(part, k)]]
            elif kind == RECV:
                f = rec.m_received[self.recv_row[(part, k)]]
            elif (part, k) in rec.reductions:  # held the NPU's shared reduction unit (maybe after a wait)
                f = rec.reductions[part, k][1]
            else:
                dur = part.durs[k]
                if dur is None:
                    size = part.chunks[k] * part.unit
                    dur = part.comp_ns if part.comp_ns is not None else part.reduction_time(size)
                f = s + dur if dur > 0 else s
            finish[k] = f
            for c in succ[ptr[k] : ptr[k + 1]]:
                if f > ready[c]:
                    ready[c] = f
                deg[c] -= 1
                if deg[c] == 0:
                    order.append(c)
            for x in gates:
                if x not in placed and all(finish[d] == finish[d] for d in (*g.deps(x), gates[x][1])):
                    placed.add(x)
                    order.append(x)
        self._algo[part] = (start, finish)
        return start, finish

    # -- the walk --

    def add(self, t0: float, t1: float, rank: int, j: int, kind: str, detail: str) -> None:
        """Put [t0, t1] on the path (backwards: t1 must be where the path is)."""
        if t1 < self.cursor:  # nothing the record explains: say so rather than hide it
            self.trail.append(("seg", t1, self.cursor, rank, j, "other", "unexplained gap"))
        t1 = min(t1, self.cursor)
        if t1 > t0:
            self.trail.append(("seg", t0, t1, rank, j, kind, detail))
        self.cursor = min(t0, t1)

    def visit(self, rank: int, j: int) -> None:
        """The path passes workload node *j* of *rank* (its segments follow in the trail)."""
        item = ("visit", rank, j)
        if not self.trail or self.trail[-1] != item:
            self.trail.append(item)

    def run(self) -> tuple[int, int]:
        """Walk back from the node that finished last; returns it as (rank, position)."""
        finish = max((run.finish_ns for run in self.runs), default=0.0)
        end_rank = max(range(len(self.runs)), key=lambda r: (self.runs[r].finish_ns, -r))
        fin = self.rec.finish[end_rank]
        end = max((j for j, f in enumerate(fin) if f == finish), default=None)
        if end is None:
            raise SimulationError("critical path: no node finished at the finish time (an inconsistent record)")
        self.cursor = finish
        # Each state is (tag, *arguments): the step that handles it, by tag.
        steps: dict[str, Callable[..., tuple[Any, ...] | None]] = {
            "W": self._W,
            "S": self._S,
            "E": self._E,
            "A": self._A,
            "P": self._P,
        }
        state: tuple[Any, ...] | None = ("W", end_rank, end)
        budget = 4 * (sum(len(f) for f in self.rec.finish) + self.rec.num_messages) + 16
        while state is not None:
            budget -= 1
            if budget < 0:
                raise SimulationError("critical path: the walk does not end (an inconsistent record)")
            state = steps[state[0]](*state[1:])
        if self.cursor != 0:
            self.trail.append(("seg", 0.0, self.cursor, end_rank, end, "other", "unexplained gap"))
        return end_rank, end

    def _W(self, r: int, j: int) -> tuple[Any, ...] | None:
        """At the finish of workload node j of rank r."""
        rec = self.rec
        run = self.runs[r]
        tr = run.trace
        s, f = rec.start[r][j], rec.finish[r][j]
        t = tr.types[j]
        self.visit(r, j)
        if t == _T_COMP or (t == _T_COLL and run.node_class[j] == CPU):
            self.add(s, f, r, j, "compute", "")
        elif t in _T_MEM:
            self.add(s, f, r, j, "memory", "")
        elif t == _T_SEND:
            self.add(s, f, r, j, "exposed_comm", f"send to rank {tr.comm_dst[j]}, {format_size(tr.comm_size[j] or 0)}")
        elif t == _T_RECV:
            row = self.recv_row[(run, j)]
            if rec.m_delivered[row] > s:
                send_run: Any = rec.m_send_run[row]
                return ("W", send_run.rank, rec.m_send_node[row])
        elif t == _T_COLL:
            call = self.calls[(r, j)]
            if call.runs:
                for part in call.runs:
                    if rec.part_end.get(part) == f:
                        return ("E", part)
                for other in self.instances.get(call.runs[0].namespace, []):
                    if other.rank != r and other.start_ns == f:  # the last member to issue it
                        return ("S", other.rank, other.j)
                self.add(s, f, r, j, "other", "collective (unexplained)")
        return ("S", r, j)

    def _S(self, r: int, j: int) -> tuple[Any, ...] | None:
        """At the start of workload node j of rank r: what released it."""
        rec = self.rec
        self.visit(r, j)
        s = rec.start[r][j]
        deps = self.deps_of(r, j)
        fin = rec.finish[r]
        ready = max((fin[d] for d in deps), default=0.0)
        if deps and ready == s:
            return ("W", r, next(d for d in deps if fin[d] == ready))
        if s == 0 and not deps:
            return None
        holder = self.slot_holder(r, j, s)
        if holder is not None:
            return ("W", r, holder)
        self.add(ready, s, r, j, "other", "waiting (unexplained)")
        return ("W", r, next(d for d in deps if fin[d] == ready)) if deps else None

    def _E(self, part: AlgoRun) -> tuple[Any, ...] | None:
        """At the end of a collective part: its last node."""
        _start, finish = self.algo_times(part)
        pe = self.rec.part_end[part]
        exits = part.part.graph.exits
        ending = [k for k in (exits or range(len(finish))) if finish[k] <= pe]
        if not ending:
            return ("P", part)
        # the node whose finish ended the part (an exit node, or the last node); if the rebuilt times
        # miss it, the latest one before, and the gap is flagged as unexplained
        return ("A", part, max(ending, key=lambda k: (finish[k], k)))

    def _A(self, part: AlgoRun, k: int) -> tuple[Any, ...] | None:
        """At the finish of algorithm node k of a collective part."""
        start, finish = self.algo_times(part)
        s, f = start[k], finish[k]
        call = part.call
        kind = part.kinds[k]
        self.visit(call.rank, call.j)
        if kind == COMP and not part.chunks[k]:
            # A node of no data holds the call's fixed costs (NCCL's kernel start, launch and latencies): the
            # collective's time, not a reduction's compute.
            name = part.names[k] if part.names else ""
            self.add(s, f, call.rank, call.j, "exposed_comm", f"{call.algorithm}: {name or 'fixed delay'}")
        elif kind == COMP:
            held = self.rec.reductions.get((part, k))
            if held is not None and held[0] > s:
                # It waited for the NPU's reduction unit: the path goes on at the reduction that held it.
                self.add(held[0], f, call.rank, call.j, "compute", f"{call.algorithm} reduction")
                holder = self.rec.reduction_ending.get((call.rank, held[0]))
                if holder is not None:
                    return ("A", holder[0], holder[1])
            self.add(s, f, call.rank, call.j, "compute", f"{call.algorithm} reduction")
        elif kind == SEND:
            size = part.chunks[k] * part.unit
            self.add(
                s, f, call.rank, call.j, "exposed_comm",
                f"{call.algorithm}: send to rank {part.peer_of(k)}, {format_size(size)}",
            )  # fmt: skip
        else:
            row = self.recv_row[(part, k)]
            if self.rec.m_delivered[row] > s:
                sender: Any = self.rec.m_send_run[row]
                return ("A", sender, self.rec.m_send_node[row])
        graph = part.part.graph
        deps = list(graph.deps(k))
        if k in graph.gates:
            deps.append(graph.gates[k][1])
        if deps:
            # the dependency that released k; the latest earlier one if none did exactly (the gap is then flagged)
            return ("A", part, max(deps, key=lambda d: (finish[d] == s, finish[d] if finish[d] <= s else -math.inf)))
        return ("P", part)

    def _P(self, part: AlgoRun) -> tuple[Any, ...] | None:
        """At the start of a collective part: the collective's start or the stream queue."""
        rec = self.rec
        ps = rec.part_start[part]
        call = part.call
        delay = part.part.start_delay
        if ps == call.start_ns:
            return ("S", call.rank, call.j)
        # Queued: it started when the part before it in its stream ended, or when a part of any
        # collective on this rank ended and freed a slot of its queue (after the stream delay).
        previous = [p for p, nxt in call.next_phase.items() if nxt is part]
        for launch in (ps, *([ps - delay] if delay > 0 else [])):
            ended = [p for p in self.ended.get((call.rank, launch), []) if p is not part and launch + delay == ps]
            if ended:
                other = next((p for p in ended if p in previous), ended[0])
                self.add(launch, ps, call.rank, call.j, "other", "stream delay")
                return ("E", other)
        if call.start_ns + delay == ps:
            self.add(call.start_ns, ps, call.rank, call.j, "other", "stream delay")
        else:
            self.add(call.start_ns, ps, call.rank, call.j, "other", "stream start (unexplained)")
        return ("S", call.rank, call.j)


def _gate_time(graph: Any, x: int, finish: list[float]) -> float:
    """When gated node *x* fired (see :attr:`AlgoGraph.gates`).

    That is the first completion of one of its dependencies at which its arming node had finished and at
    least k of its dependencies had.
    """
    k, arm = graph.gates[x]
    t_arm = finish[arm]
    times = sorted(finish[d] for d in graph.deps(x))
    for count, t in enumerate(times, start=1):
        if count >= k and t >= t_arm:
            return t
    return times[-1] if times else t_arm


def _entries(walk: _Walk) -> list[dict[str, Any]]:
    """One entry per workload node on the path (a collective instance once, with every rank it crossed)."""
    rec = walk.rec
    calls = walk.calls

    def key(rank: int, j: int) -> tuple[Any, ...]:
        call = calls.get((rank, j))
        if call is not None and call.runs:
            return ("collective", call.runs[0].namespace)
        return ("node", rank, j)

    backwards: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for item in walk.trail:
        if item[0] == "visit":
            _, rank, j = item
            k = key(rank, j)
            if current is None or current["_key"] != k:
                tr = walk.runs[rank].trace
                t = tr.types[j]
                current = {
                    "_key": k,
                    "_exit": (rank, j),  # the first visit backwards: where the path leaves the node
                    "rank": rank,
                    "ranks": [],
                    "node_id": tr.ids[j],
                    "name": tr.names[j],
                    "type": _TYPE_NAMES.get(t, str(t)),
                    "start_ns": math.inf,
                    "end_ns": -math.inf,
                    **{f"{kind}_ns": 0.0 for kind in KINDS},
                    "wait_ns": 0.0,
                }
                call = calls.get((rank, j))
                if call is not None:
                    current.update(
                        collective=call.type, algorithm=call.algorithm, bytes=call.bytes, group_size=len(call.group)
                    )
                backwards.append(current)
            if rank not in current["ranks"]:
                current["ranks"].append(rank)
        elif current is not None:
            _, t0, t1, _rank, _j, kind, _detail = item
            current[f"{kind}_ns"] += t1 - t0
            current["start_ns"] = min(current["start_ns"], t0)
            current["end_ns"] = max(current["end_ns"], t1)
    entries = backwards[::-1]
    for entry in entries:
        del entry["_key"]
        rank, j = entry.pop("_exit")
        entry["rank"] = rank
        s, f = rec.start[rank][j], rec.finish[rank][j]
        if entry["start_ns"] == math.inf:  # on the path for no time (a receive, a join)
            entry["start_ns"] = entry["end_ns"] = f
        # How long the node ran while the path was elsewhere (on a peer's chain).
        entry["wait_ns"] = max(0.0, (f - s) - (entry["end_ns"] - entry["start_ns"]))
        ranks = sorted(entry.pop("ranks"))
        if len(ranks) > 1:
            entry["ranks"] = ranks
    return entries


def critical_path(rec: RunRecorder) -> dict[str, Any]:
    """The critical path of the run *rec* recorded (with ``messages=True``), as a JSON-ready dict.

    Returns:
        ``{finish_ns, end: {rank, node_id}, totals: {compute_ns, exposed_comm_ns, memory_ns, other_ns},
        nodes: [...], segments: [...]}``. ``segments`` tile ``[0, finish_ns]`` in time order (each
        ``{rank, node_id, kind, start_ns, end_ns, detail}``); ``nodes`` are the workload nodes they
        belong to, in path order (``{rank, node_id, name, type, start_ns, end_ns, <kind>_ns …,
        wait_ns}``; a collective instance the path crossed on several ranks appears once, with
        ``ranks``).

    Raises:
        ConfigError: the recorder watched no completed run or did not record every message.
        SimulationError: the record is inconsistent (a bug; the message says where).
    """
    walk = _Walk(rec)
    end_rank, end = walk.run()
    segments = [item[1:] for item in reversed(walk.trail) if item[0] == "seg"]
    runs = walk.runs
    finish = max((run.finish_ns for run in runs), default=0.0)
    totals = dict.fromkeys(KINDS, 0.0)
    for t0, t1, _rank, _j, kind, _detail in segments:
        totals[kind] += t1 - t0
    nodes = _entries(walk)
    return {
        "finish_ns": finish,
        "end": {"rank": end_rank, "node_id": runs[end_rank].trace.ids[end]},
        "totals": {f"{k}_ns": v for k, v in totals.items()},
        "held_back": _held_back(nodes, segments, finish, [_alike_key(walk.config, run) for run in runs]),
        "nodes": nodes,
        "segments": [
            {
                "rank": rank,
                "node_id": runs[rank].trace.ids[j],
                "kind": kind,
                "start_ns": t0,
                "end_ns": t1,
                "detail": detail,
            }
            for t0, t1, rank, j, kind, detail in segments
        ],
    }


def _alike_key(config: Any, run: Any) -> tuple[float, float]:
    """What equal ranks share: their compute in all and their start (a rank that starts late holds the others)."""
    return run.compute_ns, config.rank_start.get(run.rank, 0.0)


def _held_back(
    nodes: list[dict[str, Any]], segments: list[tuple[Any, ...]], finish: float, computed: list[Any]
) -> dict[str, Any] | None:
    """The rank that held the run back most: the most compute on the critical path, and where others waited for it.

    ``{rank, compute_ns, share, through, alike}``: *share* of the finish time is that rank's compute on the path;
    *through* is the first node after its last compute on the path that other ranks also waited in (a collective
    of several ranks, or a receive on another rank), as the path's node entry; None if there is none. *alike*:
    every rank computed as long in all and started together (*computed*, per rank), so the path's rank is one of
    equals, not a straggler that kept the others waiting.
    """
    compute: dict[int, float] = {}
    for t0, t1, rank, _j, kind, _detail in segments:
        if kind == "compute":
            compute[rank] = compute.get(rank, 0.0) + (t1 - t0)
    if not compute:
        return None
    rank = min(compute, key=lambda r: (-compute[r], r))
    last = max((i for i, n in enumerate(nodes) if n["rank"] == rank and n["compute_ns"] > 0), default=-1)
    through = next(
        (n for n in nodes[last + 1 :] if len(n.get("ranks", [])) > 1 or n["rank"] != rank),
        None,
    )
    share = compute[rank] / finish if finish > 0 else 0.0
    alike = len(set(computed)) == 1
    return {"rank": rank, "compute_ns": compute[rank], "share": share, "through": through, "alike": alike}
