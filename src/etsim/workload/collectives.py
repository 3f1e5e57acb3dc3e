"""Collective calls: one rank's share of one collective, walked stream by stream and phase by phase.

A workload's COMM_COLL node asks the system layer (:meth:`~etsim.system.collective.System.join`)
for its share: the group, the algorithm and one :class:`~etsim.system.collective.CollectivePart`
per chunk (stream) and phase. A :class:`CollectiveCall` walks each part with an
:class:`~etsim.workload.runs.AlgoRun`; a stream's phases run one after another, and the workload
node finishes when every stream has ended its last phase.

Before it starts, a phase waits in one of the rank's queues (:class:`RankQueue`, named by the part,
e.g. one per topology dimension): at most ``active_streams`` phases of a queue run at once (0 = no
limit); waiting phases start in order of their collective (``stream_order``: ``fifo`` — older
collectives first — or ``lifo``), then of their stream. Each phase starts ``start_delay`` ns after it
leaves the queue. A phase ends when its graph's exit nodes have finished (every node, if it names
none): its queue slot is freed and the stream's next phase joins its queue. Streams of different
phases of different collectives so pipeline across dimensions.

With ``synchronise_collectives`` (the default) a call also waits until every member of its group
has issued the collective, so a zero-byte barrier synchronises and no rank leaves a collective
before all have entered it.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from etsim.errors import DeadlockError
from etsim.workload.messages import unreceived_messages
from etsim.workload.runs import AlgoRun, make_algo_run

if TYPE_CHECKING:
    from etsim.system.collective import Participation
    from etsim.workload.engine import Engine
    from etsim.workload.messages import Channel
    from etsim.workload.runs import WorkloadRun

__all__ = ["CollectiveCall", "Namespace", "RankQueue"]


class Namespace:
    """The channels of one collective instance and chunk, shared by every rank of its group.

    Dropped (by the engine) when every member's part of it has completed.
    """

    __slots__ = ("chans", "remaining")

    def __init__(self, members: int) -> None:
        self.chans: dict[Any, Channel] = {}
        self.remaining = members

    def check_all_received(self) -> None:
        """Raise :class:`~etsim.errors.DeadlockError` if a message sent in this namespace was never received."""
        report = unreceived_messages(self.chans)
        if report:
            raise DeadlockError(
                "the collective algorithm sent messages no receive took (its sends and receives do not pair up):\n"
                + report
            )


class RankQueue:
    """Phases of one rank waiting for (or holding) one of that rank's queue slots.

    Attributes:
        limit: phases running at once (0 = no limit).
        running: phases holding a slot now.
        waiting: ``(priority, seq, part)`` heap of phases waiting for a slot.
    """

    __slots__ = ("limit", "running", "waiting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        self.waiting: list[tuple[int, int, AlgoRun]] = []


class CollectiveCall:
    """One rank's part of one collective instance: its record, its streams of phases and their queues.

    Attributes:
        rank, node_id, type, bytes, group, algorithm: what was called (as reported).
        rule: the selection rule that chose the algorithm.
        start_ns, end_ns: when the workload node was issued and when its last stream ended.
        runs: one :class:`~etsim.workload.runs.AlgoRun` per (stream, phase), stream-major.
    """

    __slots__ = (
        "algorithm",
        "bytes",
        "end_ns",
        "engine",
        "group",
        "j",
        "next_phase",
        "node_id",
        "pending",
        "priority",
        "rank",
        "rule",
        "run",
        "runs",
        "start_ns",
        "type",
    )

    def __init__(self, engine: Engine, run: WorkloadRun, j: int, share: Participation, size: int) -> None:
        self.engine = engine
        self.run = run
        self.j = j
        self.rank = run.rank
        self.node_id = run.trace.ids[j]
        self.type = share.collective.name
        self.bytes = size
        self.group = share.group
        self.algorithm = share.algorithm
        self.rule = share.rule
        self.start_ns = self.end_ns = engine.env.now
        # Older collectives first (fifo) or newer ones (lifo) among phases waiting in one queue.
        issued = next(engine.calls_issued)
        self.priority = issued if engine.config.stream_order == "fifo" else -issued
        self.runs: list[AlgoRun] = []
        #: The part that follows each part of a stream (None after the last phase).
        self.next_phase: dict[AlgoRun, AlgoRun | None] = {}
        namespaces = engine.namespaces
        members = len(share.group)
        streams = 0
        previous: AlgoRun | None = None
        for part in share.parts:
            ns = namespaces.get(part.namespace)
            if ns is None:
                ns = namespaces[part.namespace] = Namespace(members)
            algo_run = make_algo_run(engine, run.rank, part, ns.chans, self)
            if previous is not None and part.phase > 0:
                self.next_phase[previous] = algo_run
            self.next_phase[algo_run] = None
            self.runs.append(algo_run)
            previous = algo_run
            streams += part.phase == 0
        self.pending = streams
        if share.synchronised:
            if share.all_joined:
                for waiting in engine.unjoined.pop(share.instance, []):
                    waiting.member_joined()
            else:
                self.pending += 1
                engine.unjoined.setdefault(share.instance, []).append(self)

    def member_joined(self) -> None:
        """The last member of the group has issued the collective."""
        self.pending -= 1
        if self.pending == 0:
            self._complete()

    def start(self) -> None:
        """Queue the first phase of every stream (or start them all at once when nothing limits them)."""
        config = self.engine.config
        if not config.active_streams and config.stream_delay <= 0 and len(self.runs) == self.pending_streams():
            for algo_run in self.runs:
                self._start_part(algo_run)
            return
        queues = []
        for algo_run in self.runs:
            if algo_run.part.phase == 0:
                queues.append(self._enqueue(algo_run))
        for queue in dict.fromkeys(queues):
            self._fill(queue)

    def pending_streams(self) -> int:
        """Streams not yet ended (the group synchronisation token aside)."""
        return sum(1 for r in self.runs if r.part.phase == 0)

    def _enqueue(self, algo_run: AlgoRun) -> RankQueue:
        engine = self.engine
        key = (self.rank, algo_run.part.queue)
        queue = engine.rank_queues.get(key)
        if queue is None:
            queue = engine.rank_queues[key] = RankQueue(engine.config.active_streams)
        heapq.heappush(queue.waiting, (self.priority, next(engine.queue_seq), algo_run))
        return queue

    def _fill(self, queue: RankQueue) -> None:
        while queue.waiting and (queue.limit == 0 or queue.running < queue.limit):
            _, _, algo_run = heapq.heappop(queue.waiting)
            queue.running += 1
            # (A rank's queue holds the parts of all its calls: the part starts as its own call's.)
            owner = algo_run.call
            delay = algo_run.part.start_delay
            if delay > 0:
                self.engine.after(delay, lambda r=algo_run, c=owner: c._start_part(r))  # type: ignore[misc]
            else:
                owner._start_part(algo_run)

    def _start_part(self, algo_run: AlgoRun) -> None:
        engine = self.engine
        if engine.observer is not None:
            engine.observer.part_started(self, algo_run)
        if engine.fast is not None and engine.fast.take(self, algo_run):
            return  # evaluated in bulk once every member has started
        algo_run.start()

    def part_exited(self, algo_run: AlgoRun) -> None:
        """A phase ended on this rank: its end is handled when the engine settles the instant."""
        self.engine.end_part_at(self.engine.env.now, self, algo_run)

    def end_part(self, algo_run: AlgoRun) -> None:
        """Free the ended phase's queue slot, queue the stream's next phase or end the stream."""
        engine = self.engine
        if engine.observer is not None:
            engine.observer.part_finished(self, algo_run)
        queue = engine.rank_queues.get((self.rank, algo_run.part.queue))
        nxt = self.next_phase[algo_run]
        target = None
        if nxt is not None:
            target = self._enqueue(nxt)
        else:
            self.pending -= 1
            if self.pending == 0:
                self._complete()
        if queue is not None:
            queue.running -= 1
            self._fill(queue)
        if target is not None and target is not queue:
            self._fill(target)

    def part_completed(self, algo_run: AlgoRun) -> None:
        """Every node of a part finished (its sends delivered): drop the namespace once the group is done."""
        engine = self.engine
        ns = engine.namespaces[algo_run.namespace]
        ns.remaining -= 1
        if ns.remaining == 0:
            del engine.namespaces[algo_run.namespace]
            ns.check_all_received()

    def _complete(self) -> None:
        engine = self.engine
        self.end_ns = engine.env.now
        engine.open_calls.pop((self.rank, self.j), None)
        self.run.finish(self.j)
