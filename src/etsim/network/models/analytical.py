"""``analytical``: congestion-unaware delivery after ``Σ latency + size / min bandwidth``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from etsim.errors import warn
from etsim.network.bulk import BulkTiming
from etsim.network.model import (
    NETWORK_MODELS,
    LinkStats,
    NetworkModel,
    SharedDeliveries,
    option,
)
from etsim.network.topology import Topology
from etsim.options import Boolean, Choice

if TYPE_CHECKING:
    import numpy as np

__all__ = ["AnalyticalNetwork", "AnalyticalTiming"]


_CHARGES = ("route", "first_differing")


@NETWORK_MODELS.register("analytical")
class AnalyticalNetwork(NetworkModel):
    """Congestion-unaware model: no link state, any number of messages share no bandwidth.

    A message of ``size`` bytes from ``src`` to ``dst`` is delivered ``Σ_hops latency + size / B_min``
    after it is sent, where the sum runs over the links of the route and ``B_min`` is the bottleneck
    (smallest) bandwidth on it. On a homogeneous route this is ``hops·L + size/B``. At most one SimPy
    event per message — messages due at the same instant share one; the route's (latency, bandwidth)
    pair is cached per ``(src, dst)``.

    Options change two conventions: ``integer_ns: true`` truncates every delay to whole ns, and
    ``dimension_charge: first_differing`` charges a message on a multi-dimensional topology to the
    *first dimension in which src and dst differ* only (``h·L_d + size/B_d`` with that dimension's
    hop count h) instead of its whole route.

    :meth:`link_stats` attributes each message's bytes to every link of its route; busy time is
    bytes / bandwidth (what the link would need, as the model ignores contention).

    Args:
        env: the SimPy environment.
        topology: the network.
        **options: ``integer_ns``, ``dimension_charge`` plus the base options (``router``, ``seed``).
    """

    name = "analytical"
    summary = "congestion-unaware: latency + size/bandwidth per message, concurrent messages do not share links"
    congestion_aware = False

    @dataclass(frozen=True, kw_only=True)
    class Options(NetworkModel.Options):
        """Options of the analytical model."""

        integer_ns: bool = option(False, "truncate every delivery delay to whole ns", Boolean())
        dimension_charge: str = option(
            "route",
            "multi-dimensional messages: 'route' (every link of the route) or 'first_differing' (only the "
            "first dimension in which source and destination differ)",
            Choice(*_CHARGES),
        )

    def __init__(self, env: simpy.Environment, topology: Topology, **options: Any) -> None:
        super().__init__(env, topology, **options)
        # (src, dst) -> [latency ns, bandwidth B/ns, bytes sent, messages]
        self._pairs: dict[tuple[int, int], list[Any]] = {}
        self._integer = self.options.integer_ns
        self._first_differing = self.options.dimension_charge == "first_differing"
        if self._first_differing and not topology.regular:  # (it was dropped in silence)
            warn(
                f"dimension_charge first_differing needs a topology of whole dimensions ({topology.name} has "
                "failed or degraded links, or none): every message is charged its whole route"
            )
        # Collectives on symmetric networks deliver many messages at one instant: share the event.
        self._shared = SharedDeliveries(env)

    def _entry(self, src: int, dst: int) -> list[Any]:
        route = self.router.lookup(src, dst)
        topo = self.topology
        if not route:
            entry: list[Any] = [0.0, math.inf, 0, 0]
        elif self._first_differing and topo.regular:
            cs, cd = topo.coords(src), topo.coords(dst)
            d = next(i for i, (a, b) in enumerate(zip(cs, cd, strict=True)) if a != b)
            dim = topo.dims[d]
            hops = dim.shape.hops(cs[d], cd[d], dim.npus)
            entry = [hops * dim.latency, dim.bandwidth, 0, 0]
        else:
            entry = [
                sum(topo.latencies[link] for link in route),
                min(topo.bandwidths[link] for link in route),
                0,
                0,
            ]
        self._pairs[src, dst] = entry
        return entry

    def delay(self, src: int, dst: int, size: float) -> float:
        """Delivery delay in ns of a message sent now (without sending it)."""
        entry = self._pairs.get((src, dst)) or self._entry(src, dst)
        value = entry[0] + size / entry[1]
        return math.floor(value) if self._integer else value

    def transfer(self, src: int, dst: int, size: float) -> simpy.Event:
        """Deliver after ``Σ latency + size / B_min`` (one SimPy timeout)."""
        return self.transfer_after(src, dst, size, 0.0)

    def transfer_after(self, src: int, dst: int, size: float, after: float) -> simpy.Event:
        """Deliver after ``after + Σ latency + size / B_min``: no link state, so no extra event."""
        try:
            entry = self._pairs[src, dst]
        except KeyError:
            entry = self._entry(src, dst)
        if not size >= 0:
            raise self._bad_size(size)
        entry[2] += size
        entry[3] += 1
        delay = entry[0] + size / entry[1]
        if self._integer:
            delay = math.floor(delay)
        return self._shared.event(delay + after)

    def bulk_timing(self) -> AnalyticalTiming:
        """Delivery times in bulk: the same formula over vectors (no link state, so always exact)."""
        return AnalyticalTiming(self)

    def link_stats(self) -> list[LinkStats]:
        """Bytes and messages per link, summed over the routes of all messages sent so far."""
        topo = self.topology
        nbytes = [0.0] * len(topo.links)
        msgs = [0] * len(topo.links)
        # (in pair order: the fast path and the event path meet the pairs in different orders, and the sums must not
        # depend on it)
        for (src, dst), entry in sorted(self._pairs.items()):
            for link in self.router.lookup(src, dst):
                nbytes[link] += entry[2]
                msgs[link] += entry[3]
        return [
            LinkStats(i, u, v, bw, lat, nbytes[i], nbytes[i] / bw, msgs[i])
            for i, ((u, v), bw, lat) in enumerate(zip(topo.links, topo.bandwidths, topo.latencies, strict=True))
        ]


class AnalyticalTiming(BulkTiming):
    """``analytical``: ``t + (delay + after)`` per message, route statistics added per (src, dst).

    Each route entry met gets one slot of running totals, so a pair sent to in several calls (or twice in one)
    adds its messages in call order, as the event path adds them in time order.
    """

    def __init__(self, model: AnalyticalNetwork) -> None:
        self.model = model
        # Per (src vector, dst vector) seen: (slots, latency, bandwidth, src, dst); src and dst kept alive with
        # their ids.
        self._routes: dict[tuple[int, int], tuple[Any, ...]] = {}
        self._slot: dict[int, int] = {}  # route entry (by id) -> its slot in the running totals
        self._entries: list[list[Any]] = []
        self._bytes: Any = None
        self._msgs: Any = None

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
            known = len(self._entries)
            slots = []
            for e in entries:
                slot = self._slot.get(id(e))
                if slot is None:
                    slot = self._slot[id(e)] = len(self._entries)
                    self._entries.append(e)
                slots.append(slot)
            if len(self._entries) > known:
                added = self._entries[known:]
                more_bytes = np.array([e[2] for e in added], dtype=float)
                more_msgs = np.array([e[3] for e in added], dtype=np.int64)
                first = self._bytes is None
                self._bytes = more_bytes if first else np.concatenate([self._bytes, more_bytes])
                self._msgs = more_msgs if first else np.concatenate([self._msgs, more_msgs])
            found = self._routes[key] = (np.array(slots, dtype=np.int64), lat, bw, src, dst)
        return found

    def send(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> np.ndarray | None:
        """Deliver after ``Σ latency + size / B_min`` (floored with ``integer_ns``) plus *after*."""
        import numpy as np

        slots, lat, bw, _, _ = self._route(src, dst)
        delay = lat + size / bw
        if self.model._integer:
            delay = np.floor(delay)
        np.add.at(self._bytes, slots, size)
        np.add.at(self._msgs, slots, 1)
        return t + (delay + after)

    def commit(self, owner: tuple[object, int]) -> None:
        """Write the running totals back into the model's per-route entries."""
        if self._entries:
            for entry, b, m in zip(self._entries, self._bytes.tolist(), self._msgs.tolist(), strict=True):
                entry[2] = b
                entry[3] = m
        self.abort()

    def abort(self) -> None:
        """Drop the running totals."""
        self._routes.clear()
        self._slot.clear()
        self._entries = []
        self._bytes = self._msgs = None
