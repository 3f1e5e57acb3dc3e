"""The engine: runs every rank's workload with the one walker, the system layer and a network model.

It owns simulated time for the walker (:meth:`Engine.delay`, :meth:`Engine.complete_now`), the
mailbox of point-to-point messages, the open collective calls, and the deadlock report.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import simpy

from etsim.chakra.graph import CollectiveType, Trace
from etsim.chakra.validate import find_cycle
from etsim.errors import DeadlockError, warn
from etsim.network.scheduling import LATE, event_at
from etsim.system.costs import CostModel
from etsim.workload.bulk import FastPath
from etsim.workload.collectives import CollectiveCall, Namespace, RankQueue
from etsim.workload.messages import Channel, Mailbox, unreceived_messages
from etsim.workload.runs import AlgoRun, ExitAlgoRun, GatedAlgoRun, GraphRun, WorkloadRun

if TYPE_CHECKING:
    from etsim.network.model import NetworkModel
    from etsim.system.collective import System
    from etsim.system.config import SystemConfig
    from etsim.workload.fold import ReplicaFold
    from etsim.workload.observe import RunObserver

__all__ = ["Engine"]


class Engine:
    """Runs every rank's workload with the shared walker, the system layer and a network model.

    Args:
        env: the SimPy environment.
        network: the network model (``transfer(src, dst, size)``).
        system: collective matching and expansion.
        traces: one trace per rank.
        config: system parameters.
        observer: watches the run (turns the fast path off).
        fast_excluded: collective parts (namespaces) the fast path must leave to the event path.
        fold: replica folding (``workload/fold.py``): messages to mirrored ranks are received by their
            representatives; None: every rank runs.
    """

    def __init__(
        self,
        env: simpy.Environment,
        network: NetworkModel,
        system: System,
        traces: list[Trace],
        config: SystemConfig,
        observer: RunObserver | None = None,
        fast_excluded: set[Hashable] | None = None,
        fold: ReplicaFold | None = None,
    ) -> None:
        self.env = env
        #: Watches the run (timelines, critical path); None costs one test per hook site.
        self.observer = observer
        self.network = network
        self.system = system
        self.config = config
        self.costs = CostModel(config)
        for note in self.costs.roofline_notes(traces):
            warn(note)
        # The delay workload SEND/RECV messages pay (algorithm runs take their part's own).
        self.endpoint_delay = config.endpoint_delay if config.p2p_endpoint_delay else 0.0
        #: How workload SEND/RECV messages run when a runtime serves them (NCCL's ncclSend/ncclRecv): their wire
        #: bytes and extra delay per (src, dst, bytes); None: as plain messages.
        self.p2p = system.p2p_timing()
        #: Whether algorithm reductions queue at their NPU's reduction unit (:meth:`reduce`).
        self.shared_reductions = bool(config.shared_reductions and config.reduction_bandwidth)
        # Per rank: when its reduction unit is free again.
        self._reduction_free = [0.0] * len(traces)
        # An observer that does not watch messages is kept out of the mailbox: no cost per message.
        watch_messages = observer if observer is not None and observer.messages else None
        self.mailbox = Mailbox(
            network,
            self.complete_now,
            watch_messages,
            delay_at_receive=config.endpoint_delay_at == "receive",
            finish_at=self.finish_at,
            now=lambda: env.now,
        )
        self.workload_channels: dict[tuple[int, int, int], Channel] = {}
        # A collective's namespace is dropped when every rank of its group has finished its part.
        self.namespaces: dict[Hashable, Namespace] = {}
        self.collectives: list[CollectiveCall] = []
        self.open_calls: dict[tuple[int, int], CollectiveCall] = {}
        # Calls waiting for the rest of their group to issue the collective, by instance.
        self.unjoined: dict[tuple[str, int], list[CollectiveCall]] = {}
        # Per (rank, queue id): the phases of collectives waiting for or holding a slot.
        self.rank_queues: dict[tuple[int, Any], RankQueue] = {}
        #: Numbers the collective calls in issue order (1, 2, …), and the phases entering a rank's queue.
        self.calls_issued = itertools.count(1)
        self.queue_seq = itertools.count(1)
        self._events = 0
        # Phase ends per instant, handled by one late event each (end_part_at).
        self._ends: dict[float, list[tuple[int, Hashable, CollectiveCall, AlgoRun]]] = {}
        self._instant: list[tuple[GraphRun, int]] = []
        self._draining = False
        self._depth = 0
        self.ranks_done = 0
        #: Ranks whose GPU failed (``rank_fail``) before they finished → when.
        self.failed: dict[int, float] = {}
        self.runs = [WorkloadRun(self, trace, rank, config) for rank, trace in enumerate(traces)]
        #: Replica folding (``workload/fold.py``): the fold of a folded run (``fold.rep[r]``: the rank whose results
        #: rank r takes), or None.
        self.fold = fold
        if fold is not None:
            self.mailbox.mirror(fold.channel)
        #: Bulk evaluation of collectives (None: every message takes the event path). An observer that sees every
        #: part and message (``internals``) turns the fast path off.
        self.fast: FastPath | None = None
        watched = observer is not None and observer.internals
        if config.fast_path and not watched and network.offers_bulk_timing():
            self.fast = FastPath(self, fast_excluded if fast_excluded is not None else set())

    # -- counters --

    @property
    def messages(self) -> int:
        """Messages sent so far."""
        return self.mailbox.messages

    @property
    def bytes(self) -> float:
        """Bytes sent so far."""
        return self.mailbox.bytes

    @property
    def events(self) -> int:
        """Engine events scheduled so far (delays, stream starts, distinct deliveries)."""
        return self._events + self.mailbox.events

    def on_progress(self, callback: Callable[[Engine], None], every: int) -> None:
        """Call *callback(engine)* every *every* messages."""
        mailbox = self.mailbox

        def check(_mailbox: Mailbox) -> None:
            mailbox.progress_at = mailbox.messages + every
            callback(self)

        mailbox.progress = check
        mailbox.progress_at = every

    # -- time --

    def finish_at(self, run: GraphRun, j: int, when: float) -> None:
        """Finish node *j* of *run* at the absolute time *when* (no earlier than now)."""
        event_at(self.env, when, simpy.events.NORMAL, None).callbacks.append(lambda _event: self.complete_now(run, j))

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
            self._events += 1
            self.env.timeout(duration).callbacks.append(partial(run._finish_event, j))
        else:
            self.complete_now(run, j)

    def reduce(self, run: AlgoRun, j: int, duration: float) -> None:
        """Finish reduction node *j* of *run* after *duration* ns on its NPU's reduction unit.

        The unit serves one reduction at a time, in the order they are issued: this one starts when the
        unit is free (now, or when the reduction before it ends) and holds it for *duration*.
        """
        now = self.env.now
        start = self._reduction_free[run.rank]
        if start <= now:
            start = now
            finish = now + duration
            event: simpy.Event = self.env.timeout(duration)
        else:
            finish = start + duration
            event = event_at(self.env, finish, simpy.events.NORMAL, None)
        self._reduction_free[run.rank] = finish
        self._events += 1
        if self.observer is not None:
            self.observer.reduction(run, j, start, finish)
        event.callbacks.append(partial(run._finish_event, j))

    def end_part_at(self, when: float, call: CollectiveCall, algo_run: AlgoRun) -> None:
        """End *algo_run*'s phase at time *when* (now or later), once every ordinary event of that instant ran.

        Phases that end at the same instant are handled together, after everything else due then, in
        order of rank and namespace: what follows a collective (the next phase, the workload's next
        nodes) does not depend on the order in which that instant's events happened to fire, so the
        fast path (which knows the end times ahead) and the event path agree to the ns.
        """
        batch = self._ends.get(when)
        if batch is None:
            batch = self._ends[when] = []
            event = event_at(self.env, when, LATE, when)
            event.callbacks.append(self._settle_ends)
            self._events += 1
        batch.append((algo_run.rank, algo_run.namespace, call, algo_run))

    def _settle_ends(self, event: simpy.Event) -> None:
        batch = self._ends.pop(cast(float, event.value))
        batch.sort(key=_end_order)
        for _rank, _ns, call, algo_run in batch:
            call.end_part(algo_run)

    def after(self, duration: float, action: Callable[[], None]) -> None:
        """Call *action()* after *duration* ns (one scheduled event)."""
        self._events += 1
        self.env.timeout(duration).callbacks.append(lambda _event: action())

    # -- collectives --

    def collective(self, run: WorkloadRun, j: int) -> None:
        """Join the collective of node *j* and walk this rank's share of its algorithm."""
        tr = run.trace
        ctype = CollectiveType(tr.comm_type[j])  # type: ignore[arg-type]  # checked before the run
        size = tr.comm_size[j] or 0
        share = self.system.join(run.rank, ctype, size, tr.pg_name[j], tr.describe(j), tr.ids[j])
        call = CollectiveCall(self, run, j, share, size)
        self.collectives.append(call)
        if self.observer is not None:
            self.observer.collective_started(call)
        if not share.parts:  # a group of one rank: nothing to send
            self.complete_now(run, j)
            return
        self.open_calls[(run.rank, j)] = call
        call.start()

    # -- the run --

    def fail(self, rank: int) -> None:
        """Rank *rank*'s GPU failed now: it starts no node from now on (unless it had finished)."""
        run = self.runs[rank]
        if run.remaining == 0 or rank in self.failed:
            return
        run.account()
        run.finish_ns = self.env.now
        run.__class__ = FailedRun  # (its next node, and every one after, does nothing: no test on the hot path)
        self.failed[rank] = self.env.now
        self.network.stop_npu(rank)  # (what it had not yet sent stays unsent; what it was sent drains)
        # Its collectives under way stop too: no step more is sent, received or reduced on this GPU (what is on the
        # wire drains; under flow, what had not left it stops); peers still in the call wait for it, as on a GPU,
        # unless they failed with it (its job).
        for (r, _), call in self.open_calls.items():
            if r == rank:
                for part in call.runs:
                    part.__class__ = _CUT[type(part)]

    def rank_done(self, run: WorkloadRun) -> None:
        """A rank's workload completed."""
        run.account()
        run.finish_ns = self.env.now
        self.ranks_done += 1

    def start(self) -> None:
        """Issue every rank's dependency-free nodes."""
        if self.observer is not None:
            self.observer.attach(self)
        for rank, when in sorted(self.config.rank_fail.items()):
            self.after(when, partial(self.fail, rank))
        starts = self.config.rank_start
        for run in self.runs:
            when = starts.get(run.rank, 0.0)
            if when > 0:
                self.after(when, run.start)  # (a job that arrives later)
            else:
                run.start()

    def check_all_received(self) -> None:
        """Raise :class:`~etsim.errors.DeadlockError` if a workload SEND's message was never received."""
        failed = self.failed
        channels = {k: ch for k, ch in self.workload_channels.items() if k[0] not in failed and k[1] not in failed}
        report = unreceived_messages(channels)
        if report:
            raise DeadlockError(
                "every rank finished, but messages were sent that no receive took (a SEND without its RECV):\n"
                + report
                + "\n(run `etsim validate` to list unmatched sends and receives)"
            )

    def _root_causes(self, stuck: list[WorkloadRun]) -> list[str]:
        """The likely reasons first: failed ranks, cycles, collectives some ranks never issued, empty ranks.

        (A cycle is certain where it is found; an empty rank only matters if someone waits on it.)
        """
        causes = []
        if self.failed:  # (peers waiting on a failed GPU wait for ever, as on a GPU)
            causes.append(f"ranks {_ranks(sorted(self.failed))} failed (rank_fail), and the stuck ranks wait on them")
        for run in stuck:
            cycle = find_cycle(run.trace, include_ctrl=not self.config.ignore_ctrl_deps)
            if cycle is not None:
                chain = " -> ".join(str(run.trace.ids[p]) for p in [*cycle, cycle[0]])
                causes.append(f"rank {run.rank}: its dependencies form a cycle (node ids {chain})")
        for instance, calls in sorted(self.unjoined.items()):
            group = calls[0].group
            issued = sorted({c.rank for c in calls})
            missing = [r for r in group if r not in issued]
            if missing:
                call = calls[0]
                causes.append(
                    f"collective #{instance[1]} of group {instance[0]!r} ({call.type.lower()} of {call.bytes} bytes) "
                    f"was issued by ranks {_ranks(issued)} but never by ranks {_ranks(missing)}"
                )
        for run in self.runs:
            if not run.indeg:
                causes.append(f"rank {run.rank} has no nodes (an empty or missing trace?)")
        return causes

    def deadlock_summary(self) -> str:
        """One line: how many ranks are stuck, which, and the likeliest cause."""
        stuck = self._stuck()
        causes = self._root_causes(stuck)
        cause = f"; likely cause: {causes[0]}" if causes else ""
        return f"{len(stuck)} of {len(self.runs)} ranks stuck (ranks {_ranks([r.rank for r in stuck])}){cause}"

    def _stuck(self) -> list[WorkloadRun]:
        """Ranks with nodes left that did not fail (a failed rank stopped; it is not stuck)."""
        return [r for r in self.runs if r.remaining > 0 and r.rank not in self.failed]

    def deadlock_report(self) -> str:
        """Why the run cannot progress (likely root causes first), then which ranks are stuck and on what."""
        lines = []
        stuck = self._stuck()
        causes = self._root_causes(stuck)
        if causes:
            lines.append("likely cause:")
            lines += [f"  {c}" for c in causes[:8]]
            lines.append("  (run `etsim validate WORKLOAD` for every problem it finds)")
        lines.append("stuck ranks:")
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


def _end_order(entry: tuple[int, Hashable, CollectiveCall, AlgoRun]) -> tuple[int, Hashable]:
    return entry[0], entry[1]


def _ranks(ranks: list[int], limit: int = 12) -> str:
    text = ", ".join(map(str, ranks[:limit]))
    return f"[{text}{', …' if len(ranks) > limit else ''}]"


class FailedRun(WorkloadRun):
    """A rank whose GPU failed (:meth:`Engine.fail`): a node it would start does nothing and never finishes."""

    __slots__ = ()

    def execute(self, j: int) -> None:
        """Nothing: the GPU is gone."""


class _CutPart:
    """An algorithm part on a GPU that failed (:meth:`Engine.fail`): it starts, sends and finishes nothing more."""

    __slots__ = ()

    def start(self) -> None:
        """Nothing: the GPU is gone."""

    def execute(self, j: int) -> None:
        """Nothing: the GPU is gone."""

    def release(self, j: int) -> None:
        """Nothing: a step that ends now (a message delivered to it) releases no other."""

    admit = execute
    finish = release


class _CutAlgoRun(_CutPart, AlgoRun):
    __slots__ = ()


class _CutExitAlgoRun(_CutPart, ExitAlgoRun):
    __slots__ = ()


class _CutGatedAlgoRun(_CutPart, GatedAlgoRun):
    __slots__ = ()


#: Each walk's cut counterpart (same slots: a part's class is swapped in place).
_CUT: dict[type, type] = {
    AlgoRun: _CutAlgoRun,
    ExitAlgoRun: _CutExitAlgoRun,
    GatedAlgoRun: _CutGatedAlgoRun,
    **{cut: cut for cut in (_CutAlgoRun, _CutExitAlgoRun, _CutGatedAlgoRun)},
}
