"""Message timing in bulk: what the fast path asks a network model instead of sending messages one by one.

When every rank of a collective runs the same algorithm graph, the workload layer can evaluate the
whole collective at once, one graph node at a time over a vector of ranks (``workload/bulk.py``).
It asks the network model for a :class:`BulkTiming` and hands it, per SEND node, the send times of
every rank's message. The timing returns the delivery times the model's event path would compute,
to the last bit, or ``None`` when it cannot be sure it would (the caller then keeps the event path).

Exactness rests on doing the same float operations in the same order as the event path: SimPy
schedules at ``now + delay``, so a delivery is ``t + (arrival - t)``, not ``arrival``. Link state
(the ``link`` model) is exact only if every link sees its messages in the order the event path
would queue them: in time order, and for messages queued at the same instant in the order the walker
issues them (siblings released by one node, lowest index first). A link that sees an earlier
message after a later one, or a tie it cannot order, makes the timing refuse. Once a collective is
committed its links are *claimed* up to the last time it queued on them; event-path traffic that
reaches a claimed link by then raises :class:`~etsim.errors.FastPathConflict` and the run is redone
with that collective on the event path.

Statistics (bytes, busy time, messages per link or route) are added in the same per-link order as
the event path adds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from etsim.errors import FastPathConflict

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BulkTiming", "LinkClaims", "repeats"]


class LinkClaims:
    """Until when, and for which collective part, the fast path has claimed each link of a model with link state.

    - A timing's :meth:`BulkTiming.commit` claims the links its messages used (:meth:`claim`), up to the last time
      they were queued or drained there.
    - The model's event path reads :attr:`until` before it puts a message on a link (a list, so that the check
      stays one index and one comparison in its hottest loop); a message that reaches a claimed link by then gets
      :meth:`conflict`: the exception the simulation turns into a new plan, with that part on the event path.

    Args:
        links: the topology's directed links.
    """

    __slots__ = ("latest", "owner", "until")

    def __init__(self, links: int) -> None:
        #: Per link: the last instant a part evaluated ahead uses it (-1: never claimed).
        self.until = [-1.0] * links
        #: Per link: the part (namespace) and graph signature that claimed it.
        self.owner: list[tuple[object, int | None]] = [(None, None)] * links
        #: No link is claimed at or after this instant (a model may skip its per-link checks from then on).
        self.latest = -1.0

    def claim(self, link: int, until: float, owner: tuple[object, int | None]) -> None:
        """Claim *link* up to *until* for *owner*."""
        self.until[link] = until
        self.owner[link] = owner
        if until > self.latest:
            self.latest = until

    def conflict(self, link: int, now: float) -> FastPathConflict:
        """The conflict of event-path traffic on claimed *link* at *now* (to raise)."""
        namespace, signature = self.owner[link]
        return FastPathConflict(
            f"link {link} carries a message at {now} ns while a collective evaluated ahead ({namespace}) uses it",
            namespace,
            signature,
        )


class BulkTiming:
    """Delivery times of many messages at once, exactly as a model's event path would give them.

    Contract for models that offer one (``NetworkModel.bulk_timing()``):

    - :meth:`send` takes, for one message per rank of a vector, the sender and receiver NPUs, the size
      (the same for all), the times the messages are sent and the delay before they enter the network
      (the endpoint delay), and returns the times they are delivered — the floats the event path reaches
      — or ``None`` if it cannot reproduce the event path for them. ``cause`` is ``(release, index)``: messages of
      one sender with the same ``release`` that reach one link at one instant are issued in ``index`` order.
    - Calls come in the order the walker would issue the messages wherever it matters (the caller checks
      per channel; the timing checks per link).
    - A timing whose ``batches`` is true instead takes each node's messages with :meth:`post` and times every
      message posted so far at :meth:`settle`, which the caller calls before it needs a delivery (messages of
      several nodes may then share links while they drain).
    - Nothing changes in the model until :meth:`commit`; :meth:`abort` forgets everything since the
      timing was made.
    - ``stateful`` says whether a message's timing depends on other messages (link occupancy); such a
      timing also answers :meth:`refuses` before anything is deferred.
    """

    #: Deliveries depend on other traffic (links are occupied).
    stateful = False
    #: The fast path hands the messages of several nodes over at once (:meth:`post`, then :meth:`settle`).
    batches = False

    def refuses(self, group: np.ndarray, offsets: list[int]) -> str | None:
        """Why messages from every ``group[i]`` to ``group[(i + offset) % n]`` cannot be timed here, or None."""
        return None

    def send(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> np.ndarray | None:
        """Delivery times of messages of *size* bytes from ``src[i]`` to ``dst[i]`` sent at ``t[i]``."""
        raise NotImplementedError

    def post(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> None:
        """With :attr:`batches`: take messages as :meth:`send` does, to be timed at the next :meth:`settle`."""
        raise NotImplementedError

    def settle(self) -> list[np.ndarray] | None:
        """With :attr:`batches`: the deliveries of the messages posted since the last settle, per post, or None."""
        raise NotImplementedError

    def commit(self, owner: tuple[object, int]) -> None:
        """Apply the state and statistics of every message sent (``owner``: the part and graph claiming links)."""

    def abort(self) -> None:
        """Forget every message sent."""


def repeats(values: np.ndarray) -> bool:
    """Whether a value occurs twice in *values* (a link two messages of one call would share).

    By sorting: ``np.unique`` hashes, which costs more on the small arrays a timing checks call after call.
    """
    import numpy as np

    ordered = np.sort(values)
    return bool((ordered[1:] == ordered[:-1]).any())
