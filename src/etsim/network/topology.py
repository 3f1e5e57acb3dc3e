"""Topologies: a ``networkx.DiGraph`` of NPUs and switches, built by plain functions.

Node ids:

- NPUs are the integers ``0 .. npus-1`` (their rank).
- Switches are strings ``"s0"``, ``"s1"``, … numbered in creation order. In a multi-dimensional
  topology, dimension ``d`` contributes one switch per group of NPUs that differ only in coordinate
  ``d``; the switch node carries the attributes ``dim`` (d) and ``base`` (the group's rank with
  coordinate d = 0). In a ``graph`` topology the switch names are the ones written in the file.

Every directed edge ``u → v`` is one link (one direction of a cable) with the attributes
``bandwidth`` (bytes per ns), ``latency`` (ns) and ``id`` (its index in :attr:`Topology.links`);
edges of regular topologies also carry ``dim``. A bidirectional cable is two links, each with the
full bandwidth (full duplex).

Regular topologies (ring, uni_ring, fully_connected, switch, mesh, torus, hypercube and products of
them) are all *products of one-dimensional dimensions* (:class:`Dim`): rank
``x0 + n0·x1 + n0·n1·x2 + …`` with dimension 0 varying fastest. A mesh is a
product of ``line`` dimensions, a torus a product of ``ring`` dimensions and a hypercube of
``2^k`` NPUs a product of k two-NPU lines. This keeps routing (dimension order) and the closed-form
metrics in one place.

Treat a :class:`Topology` as immutable once built: its flat link arrays are derived from the graph.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etsim.errors import ConfigError, TopologyError
from etsim.network.dims import DIMENSION_KINDS, SWITCH, DimensionKind, dimension_kind
from etsim.options import Bandwidth, Time

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "MAX_NPUS",
    "Dim",
    "Node",
    "Topology",
    "fully_connected",
    "hypercube",
    "link_bandwidth",
    "link_latency",
    "mesh",
    "product",
    "ring",
    "switch",
    "torus",
    "uni_ring",
]

#: The largest topology etsim builds (a larger one is refused before any memory is spent on it).
MAX_NPUS = 1 << 20


#: The most directed links a topology may have (a 2,048-NPU fully connected one has 4.2 million).
MAX_LINKS = 1 << 22


def check_size(npus: int, links: int = 0) -> None:
    """Raise :class:`TopologyError` if *npus* exceeds :data:`MAX_NPUS` or *links* :data:`MAX_LINKS`."""
    if npus > MAX_NPUS:
        raise TopologyError(f"a topology of {npus:,} NPUs is larger than etsim's limit of {MAX_NPUS:,}")
    if links > MAX_LINKS:
        raise TopologyError(
            f"a topology of {links:,} links is larger than etsim's limit of {MAX_LINKS:,} (a fully connected "
            f"dimension has n·(n-1) links: use a switch for large groups)"
        )


#: A node id: an NPU rank (int) or a switch name (str).
Node = int | str


def link_bandwidth(value: object, key: str, *, bare_unit: str | None = "B/ns") -> float:
    """A link bandwidth in bytes per ns: a unit string, or a bare number in *bare_unit*; positive, within range."""
    try:
        return Bandwidth(bare_unit=bare_unit)(value, key=key)
    except ConfigError as exc:
        raise TopologyError(str(exc)) from None


def link_latency(value: object, key: str, *, bare_unit: str | None = "ns") -> float:
    """A link latency in ns: a unit string, or a bare number in *bare_unit*; >= 0, within range."""
    try:
        return Time(bare_unit=bare_unit)(value, key=key)
    except ConfigError as exc:
        raise TopologyError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Dim:
    """One dimension of a regular topology.

    Attributes:
        kind: a registered dimension kind (:data:`~etsim.network.dims.DIMENSION_KINDS`: ring, uni_ring,
            line, fully_connected, switch, …).
        npus: NPUs along this dimension (>= 2).
        bandwidth: per link and direction, bytes per ns.
        latency: per link, ns.
    """

    kind: str
    npus: int
    bandwidth: float
    latency: float

    def __post_init__(self) -> None:
        if self.kind not in DIMENSION_KINDS.names():
            raise TopologyError(
                f"unknown dimension kind {self.kind!r}; expected one of {', '.join(DIMENSION_KINDS.names())}"
            )
        if isinstance(self.npus, bool) or not isinstance(self.npus, int) or self.npus < 2:
            raise TopologyError(f"a {self.kind} dimension needs an integer npus >= 2, got {self.npus!r}")

    @property
    def shape(self) -> DimensionKind:
        """The kind's behaviour (links, paths, hops, diameter, bisection)."""
        return dimension_kind(self.kind)

    @property
    def diameter(self) -> int:
        """Largest hop count between two NPUs of this dimension."""
        return self.shape.diameter(self.npus)

    @property
    def bisection(self) -> float:
        """Bandwidth (bytes per ns, one direction) across the cut halving this dimension by rank."""
        return self.shape.bisection(self.npus, self.bandwidth)


class Topology:
    """A network: NPUs, switches and directed links, plus flat per-link arrays for the models.

    Args:
        graph: the directed graph (see the module docstring for node and edge attributes), or None with
            *nodes* and *edges* given instead (the graph is then built when first asked for).
        npus: number of NPU ranks (ids ``0 .. npus-1``; failed NPUs keep their id but are not in the graph).
        kind: the builder that made it ("ring", "product", "graph", …).
        dims: the dimensions of a regular topology; empty for ``graph``.
        name: a short name (the file stem when loaded from YAML).
        source: the file it was loaded from, if any.
        failed_npus: ranks removed from the graph.
        failed_links: directed links removed from the graph.
        degraded_links: directed links whose bandwidth was cut below what the topology's kind gives them.
        nodes: ``(node, attributes)`` in order, when *graph* is None.
        edges: ``(u, v, attributes)`` in order (their link ids), when *graph* is None.
        hardware: what the topology is made of beyond its links (a ``gpu_cluster``'s
            :class:`~etsim.network.hardware.GpuCluster`), or None.

    Attributes:
        links: ``links[i] = (u, v)``, the directed link with id ``i``.
        link_ids: ``(u, v) → i``.
        bandwidths: ``bandwidths[i]``, bytes per ns of link ``i``.
        latencies: ``latencies[i]``, ns of link ``i``.
        switches: switch node ids, in creation order.
        strides: ``strides[d]`` = product of the NPU counts of dimensions ``0 .. d-1``.
    """

    def __init__(
        self,
        graph: nx.DiGraph | None,
        npus: int,
        *,
        kind: str,
        dims: Sequence[Dim] = (),
        name: str | None = None,
        source: str | Path | None = None,
        failed_npus: Iterable[int] = (),
        failed_links: Iterable[tuple[Node, Node]] = (),
        degraded_links: Iterable[tuple[Node, Node]] = (),
        nodes: Sequence[tuple[Node, dict[str, Any]]] = (),
        edges: Sequence[tuple[Node, Node, dict[str, Any]]] = (),
        hardware: Any = None,
    ) -> None:
        if graph is not None:
            nodes = list(graph.nodes(data=True))
            edges = list(graph.edges(data=True))
        # Regular builders pass nodes and edges (in networkx's order) and the graph is built when asked for:
        # most runs never need it, and networkx costs a tenth of a second to import.
        self._graph = graph
        self._nodes = list(nodes)
        self._edges = list(edges)
        self.npus = npus
        self.kind = kind
        self.dims = tuple(dims)
        self.name = name or kind
        self.source = str(source) if source is not None else None
        self.failed_npus = frozenset(failed_npus)
        self.failed_links = tuple(failed_links)
        self.degraded_links = tuple(degraded_links)
        self.hardware = hardware
        self.switches: list[str] = [n for n, _ in self._nodes if not isinstance(n, int)]  # type: ignore[misc]
        self.links: list[tuple[Node, Node]] = [(u, v) for u, v, _ in self._edges]
        self.link_ids: dict[tuple[Node, Node], int] = {e: i for i, e in enumerate(self.links)}
        self.bandwidths: list[float] = []
        self.latencies: list[float] = []
        for i, (u, v, attrs) in enumerate(self._edges):
            attrs["id"] = i
            bandwidth, latency = float(attrs["bandwidth"]), float(attrs["latency"])
            # Every rate a builder derives (a bandwidth divided by oversubscription, say) is checked here once.
            if not (0 < bandwidth < math.inf and 0 <= latency < math.inf):
                raise TopologyError(
                    f"{self.name}: link {u} -> {v} has bandwidth {bandwidth!r} B/ns and latency {latency!r} ns; "
                    "expected a positive, finite bandwidth and a finite latency >= 0"
                )
            self.bandwidths.append(bandwidth)
            self.latencies.append(latency)
        strides = []
        stride = 1
        for dim in self.dims:
            strides.append(stride)
            stride *= dim.npus
        self.strides: tuple[int, ...] = tuple(strides)
        self._dim_switch: dict[tuple[int, int], str] = {
            (attrs["dim"], attrs["base"]): node  # type: ignore[misc]
            for node, attrs in self._nodes
            if not isinstance(node, int) and "dim" in attrs
        }

    @property
    def graph(self) -> nx.DiGraph:
        """The directed graph (see the module docstring for node and edge attributes), built on first use."""
        if self._graph is None:
            import networkx as nx

            g = nx.DiGraph()
            g.add_nodes_from(self._nodes)
            g.add_edges_from(self._edges)
            self._graph = g
        return self._graph

    def __repr__(self) -> str:
        return (
            f"Topology(name={self.name!r}, kind={self.kind!r}, npus={self.npus}, "
            f"switches={len(self.switches)}, links={len(self.links)})"
        )

    @property
    def regular(self) -> bool:
        """True for an intact product of dimensions (closed forms and dimension-order routing apply)."""
        return bool(self.dims) and not self.failed_npus and not self.failed_links and not self.degraded_links

    @property
    def live_npus(self) -> list[int]:
        """NPU ranks present in the graph (all of them unless some failed)."""
        return [r for r in range(self.npus) if r not in self.failed_npus]

    def coords(self, rank: int) -> tuple[int, ...]:
        """Coordinates of *rank* in a multi-dimensional topology (dimension 0 first)."""
        return tuple((rank // s) % d.npus for s, d in zip(self.strides, self.dims, strict=True))

    def rank(self, coords: Sequence[int]) -> int:
        """Rank of the NPU at *coords* (inverse of :meth:`coords`)."""
        return sum(c * s for c, s in zip(coords, self.strides, strict=True))

    def dim_switch(self, dim: int, base: int) -> str:
        """The switch of dimension *dim* serving the group whose coordinate *dim* is 0 at rank *base*."""
        return self._dim_switch[dim, base]

    def switch_dimensions(self) -> dict[str, int]:
        """Switch node → the dimension it serves (switches of a product topology)."""
        return {node: dim for (dim, _base), node in self._dim_switch.items()}

    def check_npu(self, rank: object, what: str = "NPU") -> None:
        """Raise :class:`TopologyError` unless *rank* is a live NPU of this topology."""
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.npus:
            raise TopologyError(f"{self.name}: {what} {rank!r} is not an NPU rank 0..{self.npus - 1}")
        if rank in self.failed_npus:
            raise TopologyError(f"{self.name}: {what} {rank} has failed")

    def diameter(self) -> int:
        """Largest shortest-path hop count between two live NPUs (closed form when regular)."""
        if self.regular:
            return sum(d.diameter for d in self.dims)
        live = self.live_npus
        live_set = set(live)
        best = 0
        import networkx as nx

        for src in live:
            lengths = nx.single_source_shortest_path_length(self.graph, src)
            best = max(best, max(h for node, h in lengths.items() if node in live_set))
        return best

    def bisection_bandwidth(self) -> tuple[float, str]:
        """Bisection bandwidth in bytes per ns (one direction) and how it was obtained.

        Regular topologies use the closed form: the minimum over dimensions d of
        ``(npus / n_d) · bisection(d)``, i.e. the cut halving one dimension (exact for rings, tori,
        meshes, hypercubes, switches and fully-connected graphs). Other topologies (``graph``, or any
        with failures) use an approximation: the minimum cut (maximum flow) from the NPUs with the
        lower half of the ranks to those with the upper half, switches free to fall on either side.
        That is the bandwidth between those two halves, an upper bound of the true bisection.

        Returns:
            ``(bandwidth, method)`` with method ``"closed form"`` or ``"min cut between rank halves"``.
        """
        if self.regular:
            total = self.npus
            return min(total // d.npus * d.bisection for d in self.dims), "closed form"
        live = self.live_npus
        half = len(live) // 2
        if half == 0:
            return 0.0, "min cut between rank halves"
        import networkx as nx

        flow = nx.DiGraph()
        flow.add_edges_from((u, v, {"capacity": b}) for (u, v), b in zip(self.links, self.bandwidths, strict=True))
        source, sink = ("cut", "A"), ("cut", "B")
        flow.add_edges_from((source, r) for r in live[:half])
        flow.add_edges_from((r, sink) for r in live[half:])
        return float(nx.maximum_flow_value(flow, source, sink)), "min cut between rank halves"


# --------------------------------------------------------------------------------------------------
# builders


def product(
    dims: Sequence[Dim],
    *,
    kind: str = "product",
    name: str | None = None,
    hardware: Any = None,
) -> Topology:
    """Build the Cartesian product of one-dimensional dimensions (dimension 0 varies fastest).

    Args:
        dims: the dimensions, first (fastest) first.
        kind: recorded as :attr:`Topology.kind` (builders of single-kind topologies pass theirs).
        name: topology name; defaults to *kind*.
        hardware: recorded as :attr:`Topology.hardware`.

    Returns:
        The topology; each NPU group along dimension d is connected as that dimension's kind.
    """
    if not dims:
        raise TopologyError("a product topology needs at least one dimension")
    npus = math.prod(d.npus for d in dims)
    check_size(npus)
    check_size(npus, sum(npus // d.npus * d.shape.num_links(d.npus) for d in dims))
    # Nodes and edges in the order networkx would iterate them (nodes as added; a node's out-edges as
    # first added, a repeated edge updating its attributes in place), so link ids match a built graph.
    nodes: list[tuple[Node, dict[str, Any]]] = [(r, {"kind": "npu"}) for r in range(npus)]
    out: dict[Node, dict[Node, dict[str, Any]]] = {r: {} for r in range(npus)}
    stride = 1
    nswitch = 0
    for d, dim in enumerate(dims):
        n = dim.npus
        attrs = {"bandwidth": dim.bandwidth, "latency": dim.latency, "dim": d}
        block = stride * n
        pairs = dim.shape.links(n)
        uses_switch = any(SWITCH in pair for pair in pairs)
        for base in range(npus):
            if (base // stride) % n:
                continue
            sw = ""
            if uses_switch:
                sw = f"s{nswitch}"
                nswitch += 1
                nodes.append((sw, {"kind": "switch", "dim": d, "base": base}))
                out[sw] = {}
            for u, v in pairs:
                tail = sw if u == SWITCH else base + u * stride
                head = sw if v == SWITCH else base + v * stride
                out[tail].setdefault(head, {}).update(attrs)
        stride = block
    edges = [(u, v, a) for u, _ in nodes for v, a in out[u].items()]
    return Topology(None, npus, kind=kind, dims=dims, name=name, nodes=nodes, edges=edges, hardware=hardware)


def ring(
    npus: int, bandwidth: float | str, latency: float | str, *, bidirectional: bool = True, name: str | None = None
) -> Topology:
    """A ring of *npus* NPUs; bidirectional (two links per neighbour pair) unless told otherwise.

    Args:
        npus: number of NPUs (>= 2).
        bandwidth: per link and direction, bytes per ns or a unit string ("50 GB/s").
        latency: per link, ns or a unit string ("500 ns").
        bidirectional: False builds :func:`uni_ring` (links ``i → i+1`` only).
        name: topology name.
    """
    kind = "ring" if bidirectional else "uni_ring"
    dim = Dim(kind, npus, link_bandwidth(bandwidth, "bandwidth"), link_latency(latency, "latency"))
    return product([dim], kind=kind, name=name)


def uni_ring(npus: int, bandwidth: float | str, latency: float | str, *, name: str | None = None) -> Topology:
    """A unidirectional ring: links ``i → (i+1) mod npus`` only (see :func:`ring` for arguments)."""
    return ring(npus, bandwidth, latency, bidirectional=False, name=name)


def fully_connected(npus: int, bandwidth: float | str, latency: float | str, *, name: str | None = None) -> Topology:
    """A dedicated link for every ordered pair of NPUs (see :func:`ring` for arguments)."""
    dim = Dim("fully_connected", npus, link_bandwidth(bandwidth, "bandwidth"), link_latency(latency, "latency"))
    return product([dim], kind="fully_connected", name=name)


def switch(npus: int, bandwidth: float | str, latency: float | str, *, name: str | None = None) -> Topology:
    """A star: every NPU has one link to and one from switch ``"s0"`` (see :func:`ring` for arguments)."""
    dim = Dim("switch", npus, link_bandwidth(bandwidth, "bandwidth"), link_latency(latency, "latency"))
    return product([dim], kind="switch", name=name)


def _shape(shape: Sequence[int], kind: str) -> list[int]:
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence) or not shape:
        raise TopologyError(f"shape: a {kind} needs a list of sizes such as [4, 4], got {shape!r}")
    for i, n in enumerate(shape):
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise TopologyError(f"shape[{i}]: each {kind} size must be an integer >= 2, got {n!r}")
    return list(shape)


def mesh(shape: Sequence[int], bandwidth: float | str, latency: float | str, *, name: str | None = None) -> Topology:
    """A 1-, 2- or 3-D mesh (no wrap-around), e.g. ``mesh([8, 8], "50 GB/s", "500 ns")``."""
    bw, lat = link_bandwidth(bandwidth, "bandwidth"), link_latency(latency, "latency")
    return product([Dim("line", n, bw, lat) for n in _shape(shape, "mesh")], kind="mesh", name=name)


def torus(shape: Sequence[int], bandwidth: float | str, latency: float | str, *, name: str | None = None) -> Topology:
    """A 1-, 2- or 3-D torus (bidirectional rings in every dimension), e.g. ``torus([4, 4, 4], …)``."""
    bw, lat = link_bandwidth(bandwidth, "bandwidth"), link_latency(latency, "latency")
    return product([Dim("ring", n, bw, lat) for n in _shape(shape, "torus")], kind="torus", name=name)


def hypercube(npus: int, bandwidth: float | str, latency: float | str, *, name: str | None = None) -> Topology:
    """A hypercube of ``npus = 2^k`` NPUs: ranks differing in one bit are linked (both directions)."""
    if isinstance(npus, bool) or not isinstance(npus, int) or npus < 2 or npus & (npus - 1):
        raise TopologyError(f"npus: a hypercube needs a power of two >= 2, got {npus!r}")
    check_size(npus)
    bw, lat = link_bandwidth(bandwidth, "bandwidth"), link_latency(latency, "latency")
    k = npus.bit_length() - 1
    return product([Dim("line", 2, bw, lat) for _ in range(k)], kind="hypercube", name=name)
