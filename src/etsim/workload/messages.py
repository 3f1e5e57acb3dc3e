"""Point-to-point messages: sends and receives matched in order per channel, delivered by the network.

Messages match on ``(src, dst, tag)`` within a *namespace* (a dict of channels): the k-th send
matches the k-th receive. Workload SEND/RECV nodes share one namespace; every collective instance
and chunk has its own, so algorithms never see each other's messages. A send finishes when the
network delivers its message and finishes the matching receive with it, or leaves the arrival for
a receive posted later (which then finishes at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from etsim.errors import SimulationError

if TYPE_CHECKING:
    from etsim.network.model import NetworkModel
    from etsim.workload.observe import RunObserver
    from etsim.workload.runs import GraphRun

__all__ = ["Channel", "Mailbox", "unreceived_messages"]


class Channel:
    """The messages of one ``(src, dst, tag)`` in one namespace.

    Attributes:
        sent: sends issued so far (the next send's sequence number).
        received: receives posted so far (the next receive's sequence number).
        pending: per sequence number, whichever of its send and receive came first and waits for the other: a
            delivered message no receive has taken yet, ``(size, run, node)`` of the send, or a receive waiting for
            its message, ``(size, run, node, when posted)`` of the receive. (One dict for both: a channel is made
            per message of most collectives, and the second of the pair always finds the first.)
    """

    __slots__ = ("pending", "received", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self.pending: dict[int, Any] = {}

    def arrived(self) -> dict[int, tuple[float, GraphRun, int]]:
        """Delivered messages no receive has taken yet: ``seq → (size, run, node)`` of the send."""
        return {seq: entry for seq, entry in self.pending.items() if len(entry) == 3}


class Mailbox:
    """Sends messages through the network model and matches them with receives.

    Counters: :attr:`messages`, :attr:`bytes` sent and :attr:`events` scheduled (one per distinct
    delivery event). ``progress(mailbox)`` is called when :attr:`messages` reaches
    :attr:`progress_at`.

    Args:
        network: the network model (``transfer``/``transfer_after``).
        complete_now: finishes a node at the current time (the engine's).
        observer: the run observer that watches messages, or None.
        delay_at_receive: messages pay their run's endpoint delay once they have arrived and their receive is posted.
        finish_at: finishes a node at an absolute time (the engine's); now: the current time.
    """

    __slots__ = (
        "_batches",
        "_complete_now",
        "_delay_at_receive",
        "_finish_at",
        "_mirror",
        "_now",
        "_observer",
        "_transfer",
        "_transfer_after",
        "_transfer_then",
        "bytes",
        "events",
        "messages",
        "progress",
        "progress_at",
    )

    def __init__(
        self,
        network: NetworkModel,
        complete_now: Callable[[GraphRun, int], None],
        observer: RunObserver | None = None,
        *,
        delay_at_receive: bool = False,
        finish_at: Callable[[GraphRun, int, float], None],
        now: Callable[[], float],
    ) -> None:
        self._observer = observer
        self._transfer = network.transfer
        self._transfer_after = network.transfer_after
        self._transfer_then = network.transfer_then
        # Where a message pays its run's endpoint delay: after it arrives (True) or before it enters the network. After
        # it arrives means once it has arrived and its receive is posted, whichever is later: a receive posted late
        # completes at ``posted + delay`` (by *finish_at*, an absolute time).
        self._delay_at_receive = delay_at_receive
        self._finish_at = finish_at
        self._now = now
        self._complete_now = complete_now
        # Replica folding: the channel a message to a mirrored rank is received on (``workload/fold.py``).
        self._mirror: Callable[[int, int, int], tuple[int, int, int]] | None = None
        self._batches: dict[Any, list[tuple[GraphRun, int, Channel, int, float]]] = {}
        self.messages = 0
        self.bytes = 0.0
        self.events = 0
        self.progress: Callable[[Mailbox], None] | None = None
        self.progress_at = 1 << 62  # message count of the next progress check (set by the caller)

    def send(
        self,
        run: GraphRun,
        j: int,
        src: int,
        dst: int,
        chans: dict[Any, Channel],
        tag: int,
        size: float,
        delay: float = 0.0,
        wire: float | None = None,
    ) -> None:
        """Send *size* bytes; node *j* of *run* finishes on delivery, and the matching receive with it.

        *delay* (ns) is paid besides the run's endpoint delay, before the message enters the network, and *wire* is
        what the network carries instead of *size* (None: *size*): a runtime's own cost of the send, NCCL's
        (``System.p2p_timing``). The receive matches *size*.
        """
        sent = size if wire is None else wire
        key = (src, dst, tag) if self._mirror is None else self._mirror(src, dst, tag)
        ch = chans.get(key)
        if ch is None:
            ch = chans[key] = Channel()
        seq = ch.sent
        ch.sent = seq + 1
        self.messages += 1
        self.bytes += sent
        if self.messages >= self.progress_at and self.progress is not None:
            self.progress(self)
        if self._observer is not None:
            self._observer.message_sent(run, j, src, dst, tag, sent)
        if run.endpoint_delay > 0:
            if self._delay_at_receive and not delay:
                event = self._transfer_then(src, dst, sent, run.endpoint_delay)
            else:
                event = self._transfer_after(src, dst, sent, run.endpoint_delay + delay)
        elif delay > 0:
            event = self._transfer_after(src, dst, sent, delay)
        else:
            event = self._transfer(src, dst, sent)
        # Messages delivered by one event (models coalesce same-instant deliveries) form one batch,
        # handled by one callback: no callback object and no call per message.
        batch = self._batches.get(event)
        if batch is None:
            self.events += 1
            batch = self._batches[event] = []
            event.callbacks.append(self._deliver_batch)
        batch.append((run, j, ch, seq, size))

    def mirror(self, channel: Callable[[int, int, int], tuple[int, int, int]]) -> None:
        """Receive each message on ``channel(src, dst, tag)``: the orbit member a simulated rank receives."""
        self._mirror = channel

    def _deliver_batch(self, event: Any) -> None:
        if self._observer is not None:
            self._deliver_watched(event)
            return
        # The hot path: the same steps as _deliver_watched, without a hook test per message.
        late = self._delay_at_receive
        for run, j, ch, seq, size in self._batches.pop(event):
            run.finish(j)
            posted = ch.pending.pop(seq, None)
            if posted is None:
                ch.pending[seq] = (size, run, j)
                continue
            rsize, rrun, rj, at = posted
            if rsize != size:
                _size_mismatch(run, j, size, rrun, rj, rsize)
            if late and self._handled_later(rrun, rj, at):
                continue
            rrun.finish(rj)

    def _handled_later(self, run: GraphRun, j: int, posted: float) -> bool:
        """With the delay at receive: finish receive *j* at ``posted + delay`` if that is after now (and say so)."""
        when = posted + run.endpoint_delay
        if run.endpoint_delay > 0 and when > self._now():
            self._finish_at(run, j, when)
            return True
        return False

    def _deliver_watched(self, event: Any) -> None:
        observer = self._observer
        assert observer is not None
        for run, j, ch, seq, size in self._batches.pop(event):
            observer.message_delivered(run, j)
            run.finish(j)
            posted = ch.pending.pop(seq, None)
            if posted is None:
                ch.pending[seq] = (size, run, j)
                continue
            rsize, rrun, rj, at = posted
            if rsize != size:
                _size_mismatch(run, j, size, rrun, rj, rsize)
            observer.message_received(run, j, rrun, rj, size)
            if self._delay_at_receive and self._handled_later(rrun, rj, at):
                continue
            rrun.finish(rj)

    def recv(self, run: GraphRun, j: int, src: int, dst: int, chans: dict[Any, Channel], tag: int, size: float) -> None:
        """Post a receive; node *j* of *run* finishes when the matching message has arrived."""
        key = (src, dst, tag)
        ch = chans.get(key)
        if ch is None:
            ch = chans[key] = Channel()
        seq = ch.received
        ch.received = seq + 1
        arrived = ch.pending.pop(seq, None)
        if arrived is None:
            ch.pending[seq] = (size, run, j, self._now() if self._delay_at_receive else 0.0)
            return
        ssize, srun, sj = arrived
        if ssize != size:
            _size_mismatch(srun, sj, ssize, run, j, size)
        if self._observer is not None:
            self._observer.message_received(srun, sj, run, j, size)
        if self._delay_at_receive and self._handled_later(run, j, self._now()):
            return
        self._complete_now(run, j)


def _size_mismatch(srun: GraphRun, sj: int, ssize: float, rrun: GraphRun, rj: int, rsize: float) -> None:
    raise SimulationError(
        f"size mismatch: {srun.describe(sj)} sends {ssize:g} bytes but the matching "
        f"{rrun.describe(rj)} receives {rsize:g} bytes"
    )


def unreceived_messages(chans: dict[Any, Channel], limit: int = 8) -> str:
    """Lines naming the sends whose message no receive took (empty if there is none)."""
    lines: list[str] = []
    count = 0
    for (_src, dst, tag), ch in chans.items():
        arrived = ch.arrived()
        for seq in sorted(arrived):
            count += 1
            if len(lines) < limit:
                _, run, j = arrived[seq]
                lines.append(
                    f"  {run.describe(j)} sent message #{seq} to rank {dst} (tag {tag}); rank {dst} never received it"
                )
    if count > limit:
        lines.append(f"  ... and {count - limit} more")
    return "\n".join(lines)
