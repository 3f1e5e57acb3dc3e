"""Hooks for whoever wants to watch a run: timelines, critical paths, statistics.

An observer is passed to :func:`etsim.simulation.simulate` (``observer=``) and handed to the
engine. Without one, the walker pays one ``is None`` test at each hook site and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from etsim.workload.collectives import CollectiveCall
    from etsim.workload.engine import Engine
    from etsim.workload.runs import AlgoRun, GraphRun, WorkloadRun

__all__ = ["RunObserver"]


class RunObserver:
    """Base class of run observers: override the hooks you need (every default does nothing).

    Contract:

    - Hooks are called synchronously, at the simulated time ``engine.env.now`` of what they report;
      they must not schedule events or change the walk (they only read).
    - ``attach(engine)`` is called once before the run starts, ``finished(engine)`` once after it
      completed (not after a failed run).
    - Workload nodes: ``node_started(run, j)`` when node ``j`` of a rank's trace starts executing
      (after it got its resource slot), ``node_finished(run, j)`` when it finishes; ``run.rank`` and
      ``run.trace`` say which node it is.
    - Collectives: ``collective_started(call)`` when a rank issues a collective; ``part_started(call,
      part)`` / ``part_finished(call, part)`` for each chunk (and phase) of its algorithm that rank
      walks; the call's ``end_ns`` is set when its last part finished.
    - Reductions: ``reduction(run, j, start, finish)`` when an algorithm's reduction is issued to its
      NPU's shared reduction unit (``shared_reductions``), with the interval it will hold the unit
      (*start* is later than now when it queues behind another).
    - Messages (workload SEND/RECV and every message of an algorithm): ``message_sent(run, j, src, dst,
      tag, size)`` when node ``j`` of ``run`` hands it to the network, ``message_delivered(run, j)`` when
      the network delivers it (the send finishes then), ``message_received(send_run, send_j, recv_run,
      recv_j, size)`` when the receive that matches it completes (delivery or posting, whichever is later).
      An observer whose :attr:`messages` is False is not told about messages at all, so it costs the run
      nothing per message.
    - An observer whose :attr:`internals` is False needs the workload's nodes only: the fast path may then
      evaluate collectives in bulk (``workload/bulk.py``), and the part, reduction and message hooks are not called
      for the parts it takes. Node, collective and ``attach``/``finished`` hooks are called as always, at the
      same times (the fast path's results are the event path's, bit for bit).
    """

    #: Whether the engine calls the message hooks (False: no cost per message).
    messages: bool = True
    #: Whether every collective part, reduction and message must be walked for this observer (False: the fast path
    #: may evaluate collectives in bulk; only the workload's node hooks are guaranteed).
    internals: bool = True

    def attach(self, engine: Engine) -> None:
        """Called once before the run."""

    def finished(self, engine: Engine) -> None:
        """Called once after a completed run."""

    def node_started(self, run: WorkloadRun, j: int) -> None:
        """Workload node *j* of *run* starts executing."""

    def node_finished(self, run: WorkloadRun, j: int) -> None:
        """Workload node *j* of *run* finished."""

    def collective_started(self, call: CollectiveCall) -> None:
        """A rank issued a collective."""

    def part_started(self, call: CollectiveCall, part: AlgoRun) -> None:
        """A chunk (or phase) of a collective starts on a rank."""

    def part_finished(self, call: CollectiveCall, part: AlgoRun) -> None:
        """A chunk (or phase) of a collective finished on a rank."""

    def reduction(self, run: AlgoRun, j: int, start: float, finish: float) -> None:
        """Reduction node *j* of *run* holds its NPU's reduction unit from *start* to *finish*."""

    def message_sent(self, run: GraphRun, j: int, src: int, dst: int, tag: int, size: float) -> None:
        """Node *j* of *run* sends *size* bytes from *src* to *dst*."""

    def message_delivered(self, run: GraphRun, j: int) -> None:
        """The message sent by node *j* of *run* has been delivered (the send finishes now)."""

    def message_received(self, send_run: GraphRun, send_j: int, recv_run: GraphRun, recv_j: int, size: float) -> None:
        """The receive *recv_j* of *recv_run* completed with the message of send *send_j* of *send_run*."""
