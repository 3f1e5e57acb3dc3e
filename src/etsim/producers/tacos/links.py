"""The logical point-to-point network TACOS-style synthesis schedules on, and its lower bounds.

Synthesis needs a directed graph of *logical links* between the NPUs of one group, each with the
time ``w`` one chunk occupies it. :func:`build_link_graph` derives it from any
:class:`~etsim.network.Topology`:

- **Direct links.** Every NPU → NPU link between two group members is a logical link with the
  α–β time ``w = latency + chunk / bandwidth`` (latency is not pipelined: the link carries one chunk
  at a time for the whole ``w``, as in TACOS).
- **Switches are unwound into a directed ring.** TACOS models point-to-point links only, so each
  *switch domain* (a connected set of switches) becomes a unidirectional ring over the group members
  attached to it (members ordered by the switch they hang on, then by rank). The logical link
  ``a → b`` follows the simulator's route from ``a`` to ``b`` (``a → switch … → b``) and costs the
  store-and-forward sum ``Σ (latency_i + chunk / bandwidth_i)`` over its hops. A ring uses every
  NPU's up-link and down-link exactly once, so no two logical links share a physical link and the
  simulator's congestion-aware ``link`` model reproduces the synthesised times; a full mesh of
  logical links would make them contend for the NPU's single port, which TACOS does not model.
- **Failures and tenants.** Failed NPUs and links are already absent from the topology graph;
  ``group`` restricts synthesis to a subset of NPUs (multi-tenant) using only links among them
  (and switches).

The lower bounds (``reference/cost-models.md`` §4, generalised to heterogeneous links) are in
:func:`lower_bound`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx

from etsim.errors import ConfigError
from etsim.network.routing import make_router
from etsim.network.topology import Topology

__all__ = ["DISTANCE_SOURCES", "LinkGraph", "LowerBound", "build_link_graph", "lower_bound"]


@dataclass(eq=False)
class LinkGraph:
    """Directed logical links between the group's NPUs (positions ``0 .. n-1``).

    Attributes:
        group: global NPU rank of each position.
        src: source position of each logical link.
        dst: destination position of each logical link.
        hops: ``(bandwidth bytes/ns, latency ns)`` of each physical hop of each logical link.
        physical: physical link ids (:attr:`Topology.links`) of each logical link's route.
        unwound: logical links that pass through switches.
        notes: warnings about the unwinding (e.g. shared physical links).
    """

    group: list[int]
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    hops: list[list[tuple[float, float]]] = field(default_factory=list)
    physical: list[list[int]] = field(default_factory=list)
    unwound: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Number of NPUs in the group."""
        return len(self.group)

    @property
    def num_links(self) -> int:
        """Number of logical links."""
        return len(self.src)

    def weights(self, chunk_bytes: float) -> list[float]:
        """Time (ns) one chunk of *chunk_bytes* occupies each logical link (store-and-forward over its hops)."""
        out = []
        for hops in self.hops:
            t = 0.0
            for bw, lat in hops:
                t += chunk_bytes / bw + lat
            out.append(t)
        return out

    def transposed(self) -> LinkGraph:
        """The same links reversed (logical link ``l`` of the result runs ``dst[l] → src[l]``, same cost)."""
        return LinkGraph(
            self.group, list(self.dst), list(self.src), self.hops, self.physical, self.unwound, list(self.notes)
        )

    def out_links(self) -> list[list[int]]:
        """Logical link ids leaving each position."""
        out: list[list[int]] = [[] for _ in range(self.n)]
        for i, s in enumerate(self.src):
            out[s].append(i)
        return out

    def in_links(self) -> list[list[int]]:
        """Logical link ids entering each position."""
        out: list[list[int]] = [[] for _ in range(self.n)]
        for i, d in enumerate(self.dst):
            out[d].append(i)
        return out


def _resolve_group(topology: Topology, group: Sequence[int] | None) -> list[int]:
    live = topology.live_npus
    if group is None:
        return live
    ranks = list(group)
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"group: duplicate ranks in {ranks}")
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < topology.npus:
            raise ConfigError(f"group: {r!r} is not an NPU of {topology.name} (0..{topology.npus - 1})")
        if r in topology.failed_npus:
            raise ConfigError(f"group: NPU {r} has failed in {topology.name}")
    if not ranks:
        raise ConfigError("group: no NPUs")
    return sorted(ranks)


def build_link_graph(topology: Topology, group: Sequence[int] | None = None) -> LinkGraph:
    """The logical links TACOS schedules on, for *group* (default: every live NPU) of *topology*.

    Args:
        topology: the network (switches, heterogeneous and asymmetric links, failures all allowed).
        group: global NPU ranks taking part (sorted; position ``i`` is the i-th smallest).

    Raises:
        ConfigError: a bad group, or a group whose NPUs cannot all reach each other over the
            logical links (links among members and unwound switches).
    """
    members = _resolve_group(topology, group)
    pos = {r: i for i, r in enumerate(members)}
    g = topology.graph
    lg = LinkGraph(members)
    direct: set[tuple[int, int]] = set()
    for lid, (u, v) in enumerate(topology.links):
        if u in pos and v in pos:
            lg.src.append(pos[u])
            lg.dst.append(pos[v])
            lg.hops.append([(topology.bandwidths[lid], topology.latencies[lid])])
            lg.physical.append([lid])
            direct.add((u, v))
    # Switch domains: connected components of the switch-only subgraph.
    switches = [s for s in g.nodes if not isinstance(s, int)]
    if switches:
        router = make_router("default", topology)
        domains = list(nx.connected_components(g.subgraph(switches).to_undirected(as_view=True)))
        domains.sort(key=lambda d: min(switches.index(s) for s in d))
        for domain in domains:
            ordered_sw = sorted(domain, key=switches.index)
            ring: list[int] = []
            seen: set[int] = set()
            for sw in ordered_sw:
                attached = sorted(v for v in g.successors(sw) if isinstance(v, int) and v in pos and g.has_edge(v, sw))
                for v in attached:
                    if v not in seen:
                        seen.add(v)
                        ring.append(v)
            if len(ring) < 2:
                continue
            pairs = [(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))]
            if len(ring) == 2:
                pairs = [(ring[0], ring[1]), (ring[1], ring[0])]
            for a, b in pairs:
                if (a, b) in direct:
                    continue
                route = router.lookup(a, b)
                if any(isinstance(node, int) and node not in pos for lid in route for node in topology.links[lid]):
                    continue  # the route leaves the group: not a tenant's link
                lg.src.append(pos[a])
                lg.dst.append(pos[b])
                lg.hops.append([(topology.bandwidths[lid], topology.latencies[lid]) for lid in route])
                lg.physical.append(list(route))
                lg.unwound += 1
                direct.add((a, b))
    users: dict[int, int] = {}
    for i, route in enumerate(lg.physical):
        for lid in route:
            if lid in users:
                u, v = topology.links[lid]
                lg.notes.append(
                    f"physical link {u}->{v} carries logical links {users[lid]} and {i}: the simulator adds "
                    "contention the synthesised time does not include"
                )
            users[lid] = i
    _check_strongly_connected(lg, topology)
    return lg


def _check_strongly_connected(lg: LinkGraph, topology: Topology) -> None:
    n = lg.n
    if n <= 1:
        return
    h = nx.DiGraph()
    h.add_nodes_from(range(n))
    h.add_edges_from(zip(lg.src, lg.dst, strict=True))
    if not nx.is_strongly_connected(h):
        comp = min(nx.strongly_connected_components(h), key=min)
        inside = sorted(lg.group[i] for i in comp)[:8]
        raise ConfigError(
            f"{topology.name}: the group's NPUs cannot all reach each other over links among themselves "
            f"(and switches); e.g. NPUs {inside} are cut off from the rest"
        )


@dataclass(frozen=True)
class LowerBound:
    """Lower bounds (ns) on an All-Gather-like collective over a :class:`LinkGraph`.

    Attributes:
        chunk_steps: the ingress bound: every NPU must receive ``(n-1)·k`` chunks over its in-links,
            link ``l`` delivering at most ``⌊T / w_l⌋`` of them by time T (with equal ``w`` and
            ``k = 1`` this is ``⌈(n-1)/in-degree⌉·w``, cost-models.md §4).
        bandwidth: ``max_v (n-1)/n · M / B_in(v)`` (latency ignored, fluid data).
        distance: the slowest chunk's shortest path (sum of ``w``).
    """

    chunk_steps: float
    bandwidth: float
    distance: float

    @property
    def value(self) -> float:
        """The best (largest) of the bounds."""
        return max(self.chunk_steps, self.bandwidth, self.distance)


def _ingress_steps(weights: Sequence[float], count: int) -> float:
    """Smallest T with ``Σ ⌊T / w_i⌋ >= count``: the earliest time the links can deliver *count* chunks."""
    if count <= 0:
        return 0.0
    if not weights:
        return math.inf

    def delivered(t: float) -> int:
        return sum(math.floor(t / w + 1e-9) for w in weights)

    best = math.inf
    for w in set(weights):
        lo, hi = 1, count  # the answer, if it is a multiple of w, is m·w with m in [1, count]
        while lo < hi:
            mid = (lo + hi) // 2
            if delivered(mid * w) >= count:
                hi = mid
            else:
                lo = mid + 1
        best = min(best, lo * w)
    return best


#: Largest number of sources the distance bound runs a shortest-path search from.
DISTANCE_SOURCES = 64


def lower_bound(lg: LinkGraph, chunk_bytes: float, chunks_per_npu: int = 1) -> LowerBound:
    """Lower bounds of an All-Gather of ``n·k`` chunks of *chunk_bytes* over *lg*.

    For a Reduce-Scatter pass ``lg.transposed()`` (its time reverse is an All-Gather on the
    transposed graph); an All-Reduce built from both is at least the larger of the two
    bandwidth bounds added (each NPU must both send and receive ``(n-1)/n·M``).
    """
    n, k = lg.n, chunks_per_npu
    if n <= 1:
        return LowerBound(0.0, 0.0, 0.0)
    w = lg.weights(chunk_bytes)
    ins = lg.in_links()
    memo: dict[tuple[float, ...], float] = {}
    steps = 0.0
    for v in range(n):
        key = tuple(sorted(w[i] for i in ins[v]))
        if key not in memo:
            memo[key] = _ingress_steps(key, (n - 1) * k)
        steps = max(steps, memo[key])
    total = chunk_bytes * n * k
    bw_in = [0.0] * n
    for i, d in enumerate(lg.dst):
        hops = lg.hops[i]
        # the bottleneck rate of a logical link (its slowest hop)
        bw_in[d] += min(b for b, _ in hops)
    bandwidth = max((n - 1) / n * total / b for b in bw_in)
    # distance bound: the eccentricity (shortest paths on w) of every source, or of an evenly spread
    # sample of DISTANCE_SOURCES of them on large groups (any subset still gives a valid bound)
    outs = lg.out_links()
    distance = 0.0
    stride = max(1, n // DISTANCE_SOURCES)
    for s in range(0, n, stride):
        dist = [math.inf] * n
        dist[s] = 0.0
        heap = [(0.0, s)]
        while heap:
            d0, u = heapq.heappop(heap)
            if d0 > dist[u]:
                continue
            for lid in outs[u]:
                v = lg.dst[lid]
                nd = d0 + w[lid]
                if nd < dist[v]:
                    dist[v] = nd
                    heapq.heappush(heap, (nd, v))
        distance = max(distance, max(dist))
    return LowerBound(steps, bandwidth, distance)
