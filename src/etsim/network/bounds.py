"""Lower bounds on a collective's time that hold for every algorithm on a given network.

Every byte a collective must move (:func:`~etsim.algo.semantics.minimum_bytes`: per rank sent and
received, and the total over ranks) leaves some member through that NPU's outgoing links and enters
one through its incoming links. So no algorithm finishes before

- ``sent_per_rank / injection(r)`` and ``received_per_rank / ejection(r)`` for any member r, where
  injection (ejection) is the summed bandwidth of the NPU's outgoing (incoming) links;
- ``total / Σ injection`` and ``total / Σ ejection`` over the members;
- for collectives in which every rank needs data from every other rank (all-gather, reduce-scatter,
  all-reduce, all-to-all): the largest latency of a shortest path between two members.

The bandwidth terms ignore latency and the latency term ignores bandwidth, so the bound is the larger of
them, not their sum: conservative, never above what a physical network can do.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from etsim.algo.semantics import minimum_bytes
from etsim.chakra.graph import CollectiveType
from etsim.network.topology import Topology
from etsim.units import format_bandwidth, format_size, format_time

__all__ = ["CollectiveBounds", "TimeBound"]

#: Collectives in which every rank needs something from every other rank (the latency term applies).
_ALL_TO_ALL_DEPENDENT = frozenset(
    {
        CollectiveType.ALL_GATHER,
        CollectiveType.REDUCE_SCATTER,
        CollectiveType.REDUCE_SCATTER_BLOCK,
        CollectiveType.ALL_REDUCE,
        CollectiveType.ALL_TO_ALL,
    }
)

#: Largest number of sources the latency term runs a shortest-path search from (any subset is still a bound).
LATENCY_SOURCES = 64


@dataclass(frozen=True)
class TimeBound:
    """The least time a collective can take, and which term set it (in words)."""

    ns: float
    reason: str


class CollectiveBounds:
    """Lower bounds of collectives on one topology (the per-NPU bandwidths are summed once).

    Args:
        topology: the network.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        out: dict[int, float] = defaultdict(float)
        into: dict[int, float] = defaultdict(float)
        npus = topology.npus
        for (u, v), bw in zip(topology.links, topology.bandwidths, strict=True):
            if isinstance(u, int) and u < npus:
                out[u] += bw
            if isinstance(v, int) and v < npus:
                into[v] += bw
        self.injection = dict(out)
        """Per NPU: the summed bandwidth (B/ns) of its outgoing links."""
        self.ejection = dict(into)
        """Per NPU: the summed bandwidth (B/ns) of its incoming links."""

    def bandwidth(
        self, collective: CollectiveType, buffer: float, group: Sequence[int], *, in_network: bool = False
    ) -> TimeBound:
        """The bandwidth bound of *collective* with a buffer of *buffer* bytes over *group* (module docstring).

        *in_network*: switches reduce (``minimum_bytes``'s in-network bound).
        """
        n = len(group)
        need = minimum_bytes(collective, n, buffer, in_network=in_network)
        # Each term: (bytes, bandwidth, who, which links). A member's term is its slowest link side.
        sent, received, total = need["sent_per_rank"], need["received_per_rank"], need["total"]
        terms = []
        if sent > 0:
            r = min(group, key=lambda m: self.injection.get(m, 0.0))
            terms.append((sent, self.injection.get(r, 0.0), f"rank {r} must send", "outgoing"))
        if received > 0:
            r = min(group, key=lambda m: self.ejection.get(m, 0.0))
            terms.append((received, self.ejection.get(r, 0.0), f"rank {r} must receive", "incoming"))
        terms.append((total, sum(self.injection.get(r, 0.0) for r in group), "the group must send", "outgoing"))
        terms.append((total, sum(self.ejection.get(r, 0.0) for r in group), "the group must receive", "incoming"))
        best_t, best = 0.0, None
        for nbytes, bandwidth, who, way in terms:
            t = nbytes / bandwidth if bandwidth > 0 else math.inf
            if nbytes > 0 and t > best_t:
                best_t, best = t, (nbytes, bandwidth, who, way)
        if best is None:
            return TimeBound(0.0, "nothing to move")
        nbytes, bandwidth, who, way = best  # worded once, for the term that set the bound
        where = " (reduced in the switches)" if in_network and collective == CollectiveType.ALL_REDUCE else ""
        return TimeBound(
            best_t, f"{who} {format_size(nbytes)} through {format_bandwidth(bandwidth)} of {way} links{where}"
        )

    def latency(self, collective: CollectiveType, group: Sequence[int]) -> TimeBound:
        """The latency bound: the longest shortest path (by latency) between two members, where it applies."""
        if collective not in _ALL_TO_ALL_DEPENDENT or len(group) < 2:
            return TimeBound(0.0, "no latency term")
        topo = self.topology
        adjacency: dict[object, list[tuple[object, float]]] = defaultdict(list)
        for (a, b), lat in zip(topo.links, topo.latencies, strict=True):
            adjacency[a].append((b, lat))
        members = set(group)
        stride = max(1, len(group) // LATENCY_SOURCES)
        worst = TimeBound(0.0, "no latency term")
        for source in list(group)[::stride]:
            dist: dict[object, float] = {source: 0.0}
            heap: list[tuple[float, int, object]] = [(0.0, 0, source)]
            tie = 1
            while heap:
                d, _, node = heapq.heappop(heap)
                if d > dist[node]:
                    continue
                for nxt, lat in adjacency[node]:
                    nd = d + lat
                    if nd < dist.get(nxt, math.inf):
                        dist[nxt] = nd
                        heapq.heappush(heap, (nd, tie, nxt))
                        tie += 1
            far = max(members, key=lambda m: (dist.get(m, math.inf), -m))
            if dist.get(far, math.inf) > worst.ns:
                worst = TimeBound(dist.get(far, math.inf), f"a message from rank {source} to rank {far} needs")
        return TimeBound(worst.ns, f"{worst.reason} {format_time(worst.ns)} of latency")

    def bound(self, collective: CollectiveType, buffer: float, group: Sequence[int]) -> TimeBound:
        """The larger of :meth:`bandwidth` and :meth:`latency`."""
        return max(self.bandwidth(collective, buffer, group), self.latency(collective, group), key=lambda b: b.ns)
