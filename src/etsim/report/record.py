"""A compact record of a run, for timelines, critical paths and per-group exposure.

:class:`RunRecorder` is a :class:`~etsim.workload.observe.RunObserver`: pass it to
:func:`etsim.simulation.simulate` (``observer=``). It keeps flat columns, not an object per event:
one start and one finish time per workload node (preallocated per rank), the start and end of every
collective part, and, when asked, one row of parallel lists per message. Recording messages is what
costs (a few list appends per message); without it the recorder is told nothing per message.

Typical use::

    rec = RunRecorder(messages=True)
    result = simulate(workload, observer=rec)
    write_chrome_trace(rec, "out.json.gz")   # etsim.report.trace
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from etsim.workload.observe import RunObserver

if TYPE_CHECKING:
    from etsim.workload.collectives import CollectiveCall
    from etsim.workload.engine import Engine
    from etsim.workload.runs import AlgoRun, GraphRun, WorkloadRun

__all__ = ["RunRecorder"]

_NAN = math.nan


class RunRecorder(RunObserver):
    """Records node times, collective parts and (optionally) messages of one run.

    Args:
        messages: record every message (send, delivery and receive times, both ends); needed for
            message slices, per-link counters and the critical path.
        message_limit: stop recording messages after this many (None: no limit). The send time of
            the first message left out is kept in :attr:`messages_cut_ns`, so a reader knows up to
            when the record is complete.
        internals: record every collective part and reduction too (timelines, the critical path); False records
            the workload's nodes only (what exposure per group and the step report read), which leaves the fast
            path on. Recording messages implies it.

    Attributes (filled during the run; times in ns):
        engine: the engine of the run (set by ``attach``).
        start, finish: per rank, per node position: when the workload node started and finished
            (NaN if it never did).
        part_start, part_end: per collective part (an :class:`~etsim.workload.runs.AlgoRun`): when
            it started and finished.
        m_src, m_dst, m_size, m_sent, m_delivered, m_received: per recorded message: its ranks, bytes,
            when it was handed to the network, delivered, and taken by its receive (NaN until then).
        m_send_run, m_send_node, m_recv_run, m_recv_node: the nodes at both ends (walks and positions).
        messages_cut_ns: send time of the first message not recorded (inf if none was left out).
        complete: the run completed (``finished`` was called).
    """

    def __init__(self, *, messages: bool = False, message_limit: int | None = None, internals: bool = True) -> None:
        self.messages = messages
        self.internals = internals or messages
        self.message_limit = message_limit
        self.engine: Engine | None = None
        self._env: Any = None
        self.start: list[list[float]] = []
        self.finish: list[list[float]] = []
        self.part_start: dict[AlgoRun, float] = {}
        self.part_end: dict[AlgoRun, float] = {}
        self.m_src: list[int] = []
        self.m_dst: list[int] = []
        self.m_size: list[float] = []
        self.m_sent: list[float] = []
        self.m_delivered: list[float] = []
        self.m_received: list[float] = []
        self.m_send_run: list[GraphRun] = []
        self.m_send_node: list[int] = []
        self.m_recv_run: list[GraphRun | None] = []
        self.m_recv_node: list[int] = []
        # (send walk, send node) -> message row, until the message is received.
        self._open: dict[tuple[GraphRun, int], int] = {}
        self.messages_cut_ns = math.inf
        #: Messages sent after the limit was reached (not recorded, so their events are not counted either).
        self.messages_not_recorded = 0
        self.complete = False
        #: Reductions on the shared reduction unit: (part, node) -> (start, finish), and per (rank, finish)
        #: the reduction that ended then (the one a queued reduction waited for).
        #: Per rank, its compute and communication intervals as the reports read them (``report.groups``), once.
        self.rank_intervals: dict[int, Any] = {}
        self.reductions: dict[tuple[AlgoRun, int], tuple[float, float]] = {}
        self.reduction_ending: dict[tuple[int, float], tuple[AlgoRun, int]] = {}

    # -- hooks --

    def attach(self, engine: Engine) -> None:
        """Allocate one start and one finish slot per workload node."""
        self.engine = engine
        self._env = engine.env
        self.start = [[_NAN] * len(run.indeg) for run in engine.runs]
        self.finish = [[_NAN] * len(run.indeg) for run in engine.runs]
        self.part_start, self.part_end = {}, {}  # (an attempt redone after a conflict starts afresh)
        self.rank_intervals = {}  # (what the reports derived from the last attempt)
        self.reductions, self.reduction_ending = {}, {}

    def finished(self, engine: Engine) -> None:
        """The run completed."""
        self.complete = True

    def node_started(self, run: WorkloadRun, j: int) -> None:
        """Note the start of workload node *j*."""
        self.start[run.rank][j] = self._env.now

    def node_finished(self, run: WorkloadRun, j: int) -> None:
        """Note the finish of workload node *j*."""
        self.finish[run.rank][j] = self._env.now

    def part_started(self, call: CollectiveCall, part: AlgoRun) -> None:
        """Note when a collective part starts."""
        self.part_start[part] = self._env.now

    def part_finished(self, call: CollectiveCall, part: AlgoRun) -> None:
        """Note when a collective part finishes."""
        self.part_end[part] = self._env.now

    def reduction(self, run: AlgoRun, j: int, start: float, finish: float) -> None:
        """Note the interval a reduction holds its NPU's reduction unit."""
        self.reductions[run, j] = (start, finish)
        self.reduction_ending[run.rank, finish] = (run, j)

    def message_sent(self, run: GraphRun, j: int, src: int, dst: int, tag: int, size: float) -> None:
        """Open a row for the message (unless the limit was reached)."""
        now = self._env.now
        if self.message_limit is not None and len(self.m_src) >= self.message_limit:
            if now < self.messages_cut_ns:
                self.messages_cut_ns = now
            self.messages_not_recorded += 1
            return
        self._open[(run, j)] = len(self.m_src)
        self.m_src.append(src)
        self.m_dst.append(dst)
        self.m_size.append(size)
        self.m_sent.append(now)
        self.m_delivered.append(_NAN)
        self.m_received.append(_NAN)
        self.m_send_run.append(run)
        self.m_send_node.append(j)
        self.m_recv_run.append(None)
        self.m_recv_node.append(-1)

    def message_delivered(self, run: GraphRun, j: int) -> None:
        """Note the delivery time of the message of send *j*."""
        row = self._open.get((run, j))
        if row is not None:
            self.m_delivered[row] = self._env.now

    def message_received(self, send_run: GraphRun, send_j: int, recv_run: GraphRun, recv_j: int, size: float) -> None:
        """Close the message's row with its receive."""
        row = self._open.pop((send_run, send_j), None)
        if row is not None:
            self.m_received[row] = self._env.now
            self.m_recv_run[row] = recv_run
            self.m_recv_node[row] = recv_j

    # -- reading --

    @property
    def num_messages(self) -> int:
        """Messages recorded."""
        return len(self.m_src)

    @property
    def calls(self) -> list[CollectiveCall]:
        """Every rank's collective calls, in issue order."""
        return self.engine.collectives if self.engine is not None else []
