"""``link``: congestion-aware, store-and-forward over FIFO links (optionally packetised)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy
from simpy.events import Timeout

from etsim.errors import ConfigError
from etsim.network.bulk import BulkTiming, LinkClaims, repeats
from etsim.network.model import (
    NETWORK_MODELS,
    LinkStats,
    NetworkModel,
    SharedDeliveries,
    option,
    succeed_at,
)
from etsim.network.topology import Topology
from etsim.options import Boolean, Optional, Size

if TYPE_CHECKING:
    import numpy as np

__all__ = ["LinkNetwork", "LinkTiming"]


class _Hop:
    """A packet in flight: where it is on its route and what to trigger when it arrives."""

    __slots__ = ("count", "done", "index", "model", "route", "size")

    def __init__(self, model: LinkNetwork, route: list[int], size: float, done: simpy.Event | None, count: bool):
        self.model = model
        self.route = route
        self.index = 1
        self.size = size
        self.done = done
        self.count = count

    def arrive(self, _event: simpy.Event) -> None:
        """The packet reached the node before ``route[index]``: queue it on that link."""
        model = self.model
        env = model.env
        now = env.now
        i = self.index
        link = self.route[i]
        size = self.size
        if model._integer:
            arrival = model._reserve(link, now, size, self.count)
        else:  # _reserve, inlined: this is the hottest path of the model
            if now <= model._claim[link]:
                raise model.claims.conflict(link, now)
            model._last[link] = now
            ser = size / model._bw[link]
            free = model._free
            start = free[link]
            if start < now:
                start = now
            free[link] = start + ser
            model._busy[link] += ser
            model._bytes[link] += size
            if self.count:
                model._msgs[link] += 1
            arrival = start + ser + model._lat[link]
        i += 1
        if i == len(self.route):
            if self.done is not None:
                succeed_at(env, self.done, arrival - now)
        else:
            self.index = i
            Timeout(env, arrival - now).callbacks.append(self.arrive)


#: The most packets one message may be split into (``packet_size``): each is simulated, events and objects.
MAX_PACKETS = 1_000_000


@NETWORK_MODELS.register("link")
class LinkNetwork(NetworkModel):
    """Congestion-aware model: every directed link is a FIFO server of capacity one.

    Physics, per hop over a link of bandwidth B and latency L:

    - a message (or packet) of S bytes reaching the link's tail node at time t starts at
      ``start = max(t, link_free)`` (first come, first served; same-time arrivals in event order);
    - the link is busy for ``S/B`` (``link_free = start + S/B``), then the message propagates for L
      and reaches the next node at ``start + S/B + L`` (store-and-forward: the next hop starts only
      when the whole message has arrived);
    - uncontended k-hop delivery is therefore ``Σ (L_i + S/B_i)``.

    With ``packet_size: P`` a message larger than P is split into ``ceil(S/P)`` packets that are
    stored and forwarded individually (cut-through-like pipelining): on a homogeneous path of k hops
    delivery takes ``k·(L + P/B) + (S − P)/B``. All packets of a message enter the first link back to
    back; the message is delivered when its last packet arrives.

    ``integer_ns: true`` truncates to whole ns per hop: the busy time to ``floor(S/B)`` and the hop
    time to ``floor(L + S/B)`` (not with ``packet_size``: floored per packet, it would beat the bandwidth).

    Implementation: links are busy-until floats (no ``simpy.Resource``, no process per message); a
    message costs one scheduled SimPy event per hop, so that FIFO order at downstream links follows
    the actual arrival order.

    Args:
        env: the SimPy environment.
        topology: the network.
        **options: ``packet_size``, ``integer_ns`` plus the base options (``router``, ``seed``).
    """

    name = "link"
    summary = "congestion-aware FIFO links, store-and-forward"

    @dataclass(frozen=True, kw_only=True)
    class Options(NetworkModel.Options):
        """Options of the link model."""

        packet_size: int | None = option(
            None,
            "split messages into packets of this size (e.g. '4 KiB'; bare numbers are bytes)",
            Optional(Size(minimum=1)),
        )
        integer_ns: bool = option(False, "truncate busy and hop times to whole ns, per hop", Boolean())

    def __init__(self, env: simpy.Environment, topology: Topology, **options: Any) -> None:
        super().__init__(env, topology, **options)
        n = len(topology.links)
        self._free = [0.0] * n
        self._bytes = [0.0] * n
        self._busy = [0.0] * n
        self._msgs = [0] * n
        self._bw = topology.bandwidths
        self._lat = topology.latencies
        self._routes: dict[tuple[int, int], list[int]] = {}
        self._packet = self.options.packet_size
        self._integer = self.options.integer_ns
        if self._packet and self._integer:  # (each packet's hop floored: 32 B packets at 50 GB/s took no time)
            raise ConfigError(
                "network: packet_size and integer_ns together: integer_ns truncates each message's hop to whole ns; "
                "per packet it would drop up to 1 ns a packet, faster than the link's bandwidth allows"
            )
        self._shared = SharedDeliveries(env)
        # When each link last queued a message.
        self._last = [-1.0] * n
        #: The fast path's claims: until when (and by whom) a collective evaluated ahead uses each link.
        self.claims = LinkClaims(n)
        self._claim = self.claims.until
        self._route_matrices: dict[tuple[bytes, bytes], tuple[Any, Any, int]] = {}

    def route_matrix(self, src: Any, dst: Any) -> tuple[Any, Any, int]:
        """Routes from ``src[i]`` to ``dst[i]`` (numpy vectors of NPUs) as a link-id matrix padded with -1.

        Returns ``(matrix, hops, width)``: one row per message, its hop count, the longest route. Cached per
        pair of vectors (by content), as a collective's messages repeat across calls.
        """
        import numpy as np

        key = (src.tobytes(), dst.tobytes())
        found = self._route_matrices.get(key)
        if found is None:
            lookup = self.router.lookup
            routes = [lookup(s, d) for s, d in zip(src.tolist(), dst.tolist(), strict=True)]
            hops = np.array([len(r) for r in routes], dtype=np.int64)
            width = int(hops.max()) if routes else 0
            matrix = np.full((len(routes), max(width, 1)), -1, dtype=np.int64)
            for i, r in enumerate(routes):
                matrix[i, : len(r)] = r
            found = self._route_matrices[key] = (matrix, hops, width)
        return found

    def bulk_timing(self) -> LinkTiming:
        """Delivery times in bulk, hop by hop over the same link state (see ``network/bulk.py``)."""
        return LinkTiming(self)

    def _reserve(self, link: int, now: float, size: float, count: bool) -> float:
        """Queue *size* bytes on *link* arriving at *now*; return when they reach the link's head node."""
        bw = self._bw[link]
        ser: float
        travel: float
        if self._integer:
            ser = math.floor(size / bw)
            travel = math.floor(self._lat[link] + size / bw)
        else:
            ser = size / bw
            travel = ser + self._lat[link]
        if now <= self._claim[link]:
            raise self.claims.conflict(link, now)
        self._last[link] = now
        start = self._free[link]
        if start < now:
            start = now
        self._free[link] = start + ser
        self._busy[link] += ser
        self._bytes[link] += size
        if count:
            self._msgs[link] += 1
        return start + travel

    def transfer(self, src: int, dst: int, size: float) -> simpy.Event:
        """Queue the message on the first link of its route; return its delivery event."""
        route = self._routes.get((src, dst))
        if route is None:
            route = self._routes[src, dst] = self.router.lookup(src, dst)
        if not size >= 0:
            raise self._bad_size(size)
        env = self.env
        if not route:
            return env.timeout(0)
        packet = self._packet
        if packet is not None and size > packet:
            return self._transfer_packets(route, size, packet)
        now = env.now
        arrival = self._reserve(route[0], now, size, True)
        if len(route) == 1:
            # Single-hop deliveries due at the same instant share one event where that is exact.
            return self._shared.event(arrival - now)
        done = env.event()
        Timeout(env, arrival - now).callbacks.append(_Hop(self, route, size, done, True).arrive)
        return done

    def _transfer_packets(self, route: list[int], size: float, packet: int) -> simpy.Event:
        env = self.env
        now = env.now
        count = math.ceil(size / packet)
        if count > MAX_PACKETS:  # (each packet is events and objects: 1 B packets of 1 GiB grew 2 GB in 8 s)
            raise ConfigError(
                f"network.packet_size {packet} B splits a message of {size:,.0f} B into {count:,} packets, more than "
                f"{MAX_PACKETS:,} (each is simulated): give a larger packet_size"
            )
        first = route[0]
        if len(route) == 1:
            arrival = now
            for j in range(count):
                part = packet if j < count - 1 else size - packet * (count - 1)
                arrival = self._reserve(first, now, part, j == 0)
            return env.timeout(arrival - now)
        done = env.event()
        for j in range(count):
            last = j == count - 1
            part = size - packet * (count - 1) if last else packet
            arrival = self._reserve(first, now, part, j == 0)
            hop = _Hop(self, route, part, done if last else None, j == 0)
            env.timeout(arrival - now).callbacks.append(hop.arrive)
        return done

    def link_free_at(self, link: int) -> float:
        """Time (ns) at which *link* finishes serialising everything queued on it so far."""
        return self._free[link]

    def take_state(
        self, free: list[float], busy: list[float], nbytes: list[float], msgs: list[int], last: list[float]
    ) -> None:
        """Continue from the link state a bulk timing computed.

        Per link: when it is free, its busy time, bytes and messages, and when it last queued a message.
        """
        self._free, self._busy, self._bytes, self._msgs, self._last = free, busy, nbytes, msgs, last

    def link_stats(self) -> list[LinkStats]:
        """Bytes, busy time and messages per directed link so far."""
        topo = self.topology
        return [
            LinkStats(i, u, v, self._bw[i], self._lat[i], self._bytes[i], self._busy[i], self._msgs[i])
            for i, (u, v) in enumerate(topo.links)
        ]


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
                if repeats(links):
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
            if h and repeats(links):
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
        last = self.last.tolist()
        model.take_state(self.free.tolist(), self.busy.tolist(), self.bytes.tolist(), self.msgs.tolist(), last)
        for link in self.touched.nonzero()[0].tolist():
            model.claims.claim(link, last[link], owner)
        self._routes.clear()

    def abort(self) -> None:
        """Leave the model as it was."""
        self._routes.clear()
