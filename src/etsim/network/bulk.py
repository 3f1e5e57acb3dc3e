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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from etsim.network.models.analytical import AnalyticalNetwork
    from etsim.network.models.ideal import IdealNetwork
    from etsim.network.models.link import LinkNetwork

__all__ = ["AnalyticalTiming", "BulkTiming", "IdealTiming", "LinkTiming"]


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
    - Nothing changes in the model until :meth:`commit`; :meth:`abort` forgets everything since the
      timing was made.
    - ``stateful`` says whether a message's timing depends on other messages (link occupancy); such a
      timing also answers :meth:`refuses` before anything is deferred.
    """

    #: Deliveries depend on other traffic (links are occupied).
    stateful = False

    def refuses(self, group: np.ndarray, offsets: list[int]) -> str | None:
        """Why messages from every ``group[i]`` to ``group[(i + offset) % n]`` cannot be timed here, or None."""
        return None

    def send(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> np.ndarray | None:
        """Delivery times of messages of *size* bytes from ``src[i]`` to ``dst[i]`` sent at ``t[i]``."""
        raise NotImplementedError

    def commit(self, owner: tuple[object, int]) -> None:
        """Apply the state and statistics of every message sent (``owner``: the part and graph claiming links)."""

    def abort(self) -> None:
        """Forget every message sent."""


class IdealTiming(BulkTiming):
    """``ideal``: a fixed delay between different NPUs, none to itself; no state, no statistics."""

    def __init__(self, model: IdealNetwork) -> None:
        self.delay = model._delay

    def send(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> np.ndarray | None:
        """``(t + after) + delay`` (the base ``transfer_after``: a timeout, then the transfer)."""
        import numpy as np

        t1 = t + after if after > 0 else t
        return t1 + np.where(src == dst, 0.0, self.delay)


class AnalyticalTiming(BulkTiming):
    """``analytical``: ``t + (delay + after)`` per message, route statistics added per (src, dst)."""

    def __init__(self, model: AnalyticalNetwork) -> None:
        self.model = model
        # Per (src vector, dst vector) seen: the route entries and their running byte / message totals.
        # (entries, latency, bandwidth, bytes, messages, src, dst); src and dst kept alive with their ids.
        self._routes: dict[tuple[int, int], tuple[Any, ...]] = {}

    def _route(self, src: np.ndarray, dst: np.ndarray) -> tuple[Any, ...]:
        key = (id(src), id(dst))
        found = self._routes.get(key)
        if found is None:
            import numpy as np

            model = self.model
            pairs = model._pairs
            entries = []
            for s, d in zip(src.tolist(), dst.tolist(), strict=True):
                entry = pairs.get((s, d))
                entries.append(entry if entry is not None else model._entry(s, d))
            lat = np.array([e[0] for e in entries], dtype=float)
            bw = np.array([e[1] for e in entries], dtype=float)
            nbytes = np.array([e[2] for e in entries], dtype=float)
            msgs = np.array([e[3] for e in entries], dtype=np.int64)
            found = self._routes[key] = (entries, lat, bw, nbytes, msgs, src, dst)
        return found

    def send(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> np.ndarray | None:
        """Deliver after ``Σ latency + size / B_min`` (floored with ``integer_ns``) plus *after*."""
        import numpy as np

        _, lat, bw, nbytes, msgs, _, _ = self._route(src, dst)
        delay = lat + size / bw
        if self.model._integer:
            delay = np.floor(delay)
        nbytes += size
        msgs += 1
        return t + (delay + after)

    def commit(self, owner: tuple[object, int]) -> None:
        """Write the running totals back into the model's per-route entries."""
        for entries, _, _, nbytes, msgs, _, _ in self._routes.values():
            for entry, b, m in zip(entries, nbytes.tolist(), msgs.tolist(), strict=True):
                entry[2] = b
                entry[3] = m
        self._routes.clear()

    def abort(self) -> None:
        """Drop the running totals."""
        self._routes.clear()


class LinkTiming(BulkTiming):
    """``link``: store-and-forward over FIFO links, hop by hop, with the model's link state.

    The link arrays are copied into numpy when the timing is made and written back on :meth:`commit`;
    messages split into packets are refused (the event path keeps them).
    """

    def __init__(self, model: LinkNetwork) -> None:
        import numpy as np

        self.model = model
        self.free = np.array(model._free, dtype=float)
        self.busy = np.array(model._busy, dtype=float)
        self.bytes = np.array(model._bytes, dtype=float)
        self.msgs = np.array(model._msgs, dtype=np.int64)
        self.last = np.array(model._last, dtype=float)
        self.bw = np.array(model._bw, dtype=float)
        self.lat = np.array(model._lat, dtype=float)
        self.last_release = np.full(len(self.free), -1, dtype=np.int64)
        self.last_index = np.full(len(self.free), -1, dtype=np.int64)
        self.touched = np.zeros(len(self.free), dtype=bool)
        self._routes: dict[tuple[int, int], tuple[Any, Any, int, Any, Any]] = {}

    stateful = True

    def _route(self, src: np.ndarray, dst: np.ndarray) -> tuple[Any, Any, int]:
        key = (id(src), id(dst))
        found = self._routes.get(key)
        if found is None:
            matrix, hops, width = self.model.route_matrix(src, dst)
            found = self._routes[key] = (matrix, hops, width, src, dst)  # the arrays kept alive with their ids
        return found[0], found[1], found[2]

    def refuses(self, group: np.ndarray, offsets: list[int]) -> str | None:
        """Refuse unless every link the messages use is used at one hop position only, once per message set.

        Messages reach a link in time order across graph nodes only if the link is always their k-th hop
        for one k (an uplink always first, a switch downlink always second), never a first hop for some
        and a later hop for others.
        """
        import numpy as np

        n = len(group)
        positions = np.arange(n)
        stage = np.full(len(self.free), -1, dtype=np.int64)
        for offset in offsets:
            matrix, hops, width = self.model.route_matrix(group, group[(positions + offset) % n])
            for h in range(width):
                links = matrix[:, h][hops > h]
                if len(np.unique(links)) != len(links):
                    return f"messages at offset {offset} share a link at hop {h + 1}"
                seen = stage[links]
                if bool(((seen >= 0) & (seen != h)).any()):
                    return "a link is a first hop for some messages and a later hop for others"
                stage[links] = h
        return None

    def send(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> np.ndarray | None:
        """Queue each message on each link of its route in turn; ``None`` on an order the event path could differ in."""
        import numpy as np

        model = self.model
        packet = model._packet
        if packet is not None and size > packet:
            return None
        matrix, hops, width = self._route(src, dst)
        now = t + after if after > 0 else t.copy()
        integer = model._integer
        for h in range(width):
            mask = None if bool((hops > h).all()) else hops > h
            links = matrix[:, h] if mask is None else matrix[mask, h]
            if len(links) == 0:
                continue
            if h and len(np.unique(links)) != len(links):
                # Two messages on one link in one step: their order is not known here. (First hops leave
                # different senders, so they never share a link.)
                return None
            tn = now if mask is None else now[mask]
            last = self.last[links]
            free = self.free[links]
            later = tn > last
            if not later.all():
                tie = tn == last
                # Same instant: fine if the link is idle by then, or (first hop) if the walker issues both
                # messages in the order seen here.
                ordered = free <= tn
                if h == 0:
                    ordered |= (self.last_release[links] == cause[0]) & (self.last_index[links] < cause[1])
                if not (later | (tie & ordered)).all():
                    return None
            bw = self.bw[links]
            lat = self.lat[links]
            start = np.maximum(tn, free)
            if integer:
                ser = np.floor(size / bw)
                arrival = start + np.floor(lat + size / bw)
            else:
                ser = size / bw
                # The first hop goes through _reserve (start + (ser + lat)), later hops through the
                # inlined copy in _Hop.arrive ((start + ser) + lat): the same sums, associated differently.
                arrival = start + (ser + lat) if h == 0 else (start + ser) + lat
            self.free[links] = start + ser
            self.busy[links] += ser
            self.bytes[links] += size
            self.msgs[links] += 1
            self.last[links] = tn
            self.last_release[links] = cause[0] if h == 0 else -1
            self.last_index[links] = cause[1]
            self.touched[links] = True
            if mask is None:
                now = tn + (arrival - tn)
            else:
                now[mask] = tn + (arrival - tn)
        return now

    def commit(self, owner: tuple[object, int]) -> None:
        """Write the link state back and claim every touched link up to its last queueing time."""
        model = self.model
        model._free = self.free.tolist()
        model._busy = self.busy.tolist()
        model._bytes = self.bytes.tolist()
        model._msgs = self.msgs.tolist()
        model._last = self.last.tolist()
        for link in self.touched.nonzero()[0].tolist():
            model._claim[link] = model._last[link]
            model._claim_owner[link] = owner
        self._routes.clear()

    def abort(self) -> None:
        """Leave the model as it was."""
        self._routes.clear()
