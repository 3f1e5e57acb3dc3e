"""``link``: congestion-aware, store-and-forward over FIFO links (optionally packetised)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy
from simpy.events import Timeout

from etsim.errors import ConfigError, FastPathConflict
from etsim.network.model import (
    NETWORK_MODELS,
    LinkStats,
    NetworkModel,
    SharedDeliveries,
    option,
    parse_bool_option,
    succeed_at,
)
from etsim.network.topology import Topology
from etsim.units import parse_size

if TYPE_CHECKING:
    from etsim.network.bulk import LinkTiming

__all__ = ["LinkNetwork"]


def _parse_packet_size(value: object, *, key: str) -> int:
    size = parse_size(value, key=key, default_unit="B")
    if size < 1:
        raise ConfigError(f"{key}: packet size must be at least 1 byte, got {value!r}")
    return size


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
                raise model._conflict(link, now)
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
    time to ``floor(L + S/B)``.

    Implementation: links are busy-until floats (no ``simpy.Resource``, no process per message); a
    message costs one scheduled SimPy event per hop, so that FIFO order at downstream links follows
    the actual arrival order.

    Args:
        env: the SimPy environment.
        topology: the network.
        **options: ``packet_size``, ``integer_ns`` plus the base options (``router``, ``seed``).
    """

    name = "link"

    @dataclass(frozen=True, kw_only=True)
    class Options(NetworkModel.Options):
        """Options of the link model."""

        packet_size: int | None = option(
            None, "split messages into packets of this size (e.g. '4 KiB'; bare numbers are bytes)", _parse_packet_size
        )
        integer_ns: bool = option(False, "truncate busy and hop times to whole ns, per hop", parse_bool_option)

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
        self._shared = SharedDeliveries(env)
        # When each link last queued a message, and until when (and by whom) the fast path claimed it.
        self._last = [-1.0] * n
        self._claim = [-1.0] * n
        self._claim_owner: list[tuple[object, int | None]] = [(None, None)] * n
        self._route_matrices: dict[tuple[bytes, bytes], tuple[Any, Any, int]] = {}

    def _conflict(self, link: int, now: float) -> FastPathConflict:
        namespace, signature = self._claim_owner[link]
        return FastPathConflict(
            f"link {link} carries a message at {now} ns that a collective evaluated ahead ({namespace}) did not "
            "foresee",
            namespace,
            signature,
        )

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
        from etsim.network.bulk import LinkTiming

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
            raise self._conflict(link, now)
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

    def link_stats(self) -> list[LinkStats]:
        """Bytes, busy time and messages per directed link so far."""
        topo = self.topology
        return [
            LinkStats(i, u, v, self._bw[i], self._lat[i], self._bytes[i], self._busy[i], self._msgs[i])
            for i, (u, v) in enumerate(topo.links)
        ]
