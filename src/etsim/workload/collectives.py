"""Collective calls: one rank's share of one collective, walked chunk by chunk, with a stream queue.

A workload's COMM_COLL node asks the system layer (:meth:`~etsim.system.collective.System.join`)
for its share: the group, the algorithm and one :class:`~etsim.system.collective.CollectivePart`
per chunk (stream). A :class:`CollectiveCall` walks each part with an
:class:`~etsim.workload.runs.AlgoRun`; the workload node finishes when all parts have.

Streams start through a queue whose settings come from the system configuration:
``active_streams`` in flight at once (0 = all), started in ``stream_order`` (``fifo`` or
``lifo``), each after ``start_delay`` ns. When a stream completes, the next queued one starts.

With ``synchronise_collectives`` (the default) a call also waits until every member of its group
has issued the collective, so a zero-byte barrier synchronises and no rank leaves a collective
before all have entered it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from etsim.errors import DeadlockError
from etsim.workload.messages import unreceived_messages
from etsim.workload.runs import AlgoRun

if TYPE_CHECKING:
    from etsim.system.collective import Participation
    from etsim.workload.engine import Engine
    from etsim.workload.messages import Channel
    from etsim.workload.runs import WorkloadRun

__all__ = ["CollectiveCall", "Namespace"]


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


class CollectiveCall:
    """One rank's part of one collective instance: its record, its chunk streams and their queue.

    Attributes:
        rank, node_id, type, bytes, group, algorithm: what was called (as reported).
        rule: the selection rule that chose the algorithm.
        start_ns, end_ns: when the workload node was issued and when its last stream completed.
        runs: one :class:`~etsim.workload.runs.AlgoRun` per chunk stream.
    """

    __slots__ = (
        "algorithm",
        "bytes",
        "end_ns",
        "engine",
        "group",
        "j",
        "node_id",
        "pending",
        "queue",
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
        self.runs: list[AlgoRun] = []
        self.queue: list[AlgoRun] = []
        self.pending = 0
        namespaces = engine.namespaces
        members = len(share.group)
        for part in share.parts:
            ns = namespaces.get(part.namespace)
            if ns is None:
                ns = namespaces[part.namespace] = Namespace(members)
            self.runs.append(AlgoRun(engine, run.rank, part, ns.chans, self))
        self.pending = len(self.runs)
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
        """Start the streams the queue admits (all of them unless the configuration limits it)."""
        config = self.engine.config
        limited = config.active_streams or config.stream_order != "fifo" or config.stream_delay > 0
        if not limited:
            for algo_run in self.runs:
                self._start_part(algo_run)
            return
        self.queue = list(self.runs) if config.stream_order == "fifo" else self.runs[::-1]
        active = config.active_streams or len(self.queue)
        for _ in range(min(active, len(self.queue))):
            self._launch()

    def _launch(self) -> None:
        nxt = self.queue.pop(0)
        delay = nxt.part.start_delay
        if delay > 0:
            self.engine.after(delay, lambda: self._start_part(nxt))
        else:
            self._start_part(nxt)

    def _start_part(self, algo_run: AlgoRun) -> None:
        if self.engine.observer is not None:
            self.engine.observer.part_started(self, algo_run)
        algo_run.start()

    def part_done(self, algo_run: AlgoRun) -> None:
        """A stream completed: drop its namespace when the whole group is done, start the next stream."""
        engine = self.engine
        if engine.observer is not None:
            engine.observer.part_finished(self, algo_run)
        ns = engine.namespaces[algo_run.namespace]
        ns.remaining -= 1
        if ns.remaining == 0:
            del engine.namespaces[algo_run.namespace]
            ns.check_all_received()
        self.pending -= 1
        if self.pending == 0:
            self._complete()
        if self.queue:
            self._launch()

    def _complete(self) -> None:
        engine = self.engine
        self.end_ns = engine.env.now
        engine.open_calls.pop((self.rank, self.j), None)
        self.run.finish(self.j)
