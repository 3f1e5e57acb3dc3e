"""Irregular topologies: explicit graphs (:func:`graph`) and failed NPUs or links (:func:`with_failures`).

Both keep the :class:`~etsim.network.topology.Topology` conventions (NPUs ``0..npus-1``, named
switches, one directed link per direction) and refuse a result in which some live NPU cannot reach
another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from etsim.errors import TopologyError
from etsim.network.topology import MAX_NPUS, Node, Topology, check_size, link_bandwidth, link_latency

__all__ = ["graph", "with_failures"]


def graph(
    npus: int,
    links: Iterable[Mapping[str, Any]],
    *,
    switches: int | Sequence[str] = 0,
    bandwidth: float | str | None = None,
    latency: float | str | None = None,
    name: str | None = None,
    hardware: Any = None,
) -> Topology:
    """An explicit graph: NPUs ``0..npus-1``, named switches and a list of links.

    Args:
        npus: number of NPUs.
        links: mappings with ``src``, ``dst`` (an NPU rank or a switch name) and optionally
            ``bandwidth``, ``latency`` (default: the arguments below) and ``bidirectional``
            (default True: two links, one per direction, each with the full bandwidth).
        switches: a count (names ``s0 .. s{k-1}``) or a list of switch names.
        bandwidth: default bandwidth of links that give none.
        latency: default latency of links that give none.
        name: topology name.
        hardware: recorded as :attr:`Topology.hardware`.

    Raises:
        TopologyError: a link to a missing node, a duplicate link, a bad unit, or a graph in which
            some NPU cannot reach another.
    """
    if isinstance(npus, bool) or not isinstance(npus, int) or npus < 1:
        raise TopologyError(f"npus: a graph needs an integer npus >= 1, got {npus!r}")
    check_size(npus)
    names = _switch_names(switches)
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(range(npus), kind="npu")
    g.add_nodes_from(names, kind="switch")
    switch_set = set(names)

    def node(value: object, key: str) -> Node:
        if isinstance(value, int) and not isinstance(value, bool):
            if 0 <= value < npus:
                return value
            raise TopologyError(f"{key}: no NPU {value} (npus: {npus}, ranks 0..{npus - 1})")
        if isinstance(value, str) and value in switch_set:
            return value
        known = ", ".join(names) or "none declared"
        raise TopologyError(f"{key}: no node {value!r} (NPUs are 0..{npus - 1}; switches: {known})")

    for i, link in enumerate(links):
        _add_link(g, f"links[{i}]", link, node, bandwidth, latency)
    topo = Topology(g, npus, kind="graph", name=name, hardware=hardware)
    _check_connected(topo)
    return topo


def _switch_names(switches: int | Sequence[str]) -> list[str]:
    """The switches' names: ``s0 .. s{k-1}`` for a count *k*, else the names given.

    Raises:
        TopologyError: a negative or too large count, duplicate names, or neither a count nor a list of names.
    """
    if isinstance(switches, int) and not isinstance(switches, bool):
        if switches < 0:
            raise TopologyError(f"switches: expected a count >= 0 or a list of names, got {switches!r}")
        if switches > MAX_NPUS:
            raise TopologyError(f"switches: {switches:,} is more than etsim's limit of {MAX_NPUS:,}")
        names = [f"s{i}" for i in range(switches)]
    elif isinstance(switches, Sequence) and not isinstance(switches, str) and all(isinstance(s, str) for s in switches):
        names = list(switches)
        if len(set(names)) != len(names):
            raise TopologyError(f"switches: duplicate switch names in {names!r}")
    else:
        raise TopologyError(f"switches: expected a count or a list of names, got {switches!r}")
    return names


def _add_link(
    g: Any,
    where: str,
    link: object,
    node: Callable[[object, str], Node],
    bandwidth: float | str | None,
    latency: float | str | None,
) -> None:
    """Add the directed link(s) of one ``links`` entry (at *where*) to *g*; *node* resolves an end.

    Raises:
        TopologyError: a malformed entry, a missing end, a link to itself, a bad unit or a duplicate link.
    """
    if not isinstance(link, Mapping):
        raise TopologyError(f"{where}: expected a mapping with src, dst, bandwidth, latency; got {link!r}")
    unknown = set(link) - {"src", "dst", "bandwidth", "latency", "bidirectional"}
    if unknown:
        raise TopologyError(
            f"{where}: unknown key {sorted(unknown)[0]!r}; expected src, dst, bandwidth, latency, bidirectional"
        )
    for required in ("src", "dst"):
        if required not in link:
            raise TopologyError(f"{where}.{required}: missing")
    u, v = node(link["src"], f"{where}.src"), node(link["dst"], f"{where}.dst")
    if u == v:
        raise TopologyError(f"{where}: a link from {u!r} to itself")
    bw_value = link.get("bandwidth", bandwidth)
    lat_value = link.get("latency", latency)
    if bw_value is None:
        raise TopologyError(f"{where}.bandwidth: missing (and no top-level bandwidth default)")
    if lat_value is None:
        raise TopologyError(f"{where}.latency: missing (and no top-level latency default)")
    attrs = {
        "bandwidth": link_bandwidth(bw_value, f"{where}.bandwidth"),
        "latency": link_latency(lat_value, f"{where}.latency"),
    }
    bidirectional = link.get("bidirectional", True)
    if not isinstance(bidirectional, bool):
        raise TopologyError(f"{where}.bidirectional: expected true or false, got {bidirectional!r}")
    for a, b in ((u, v), (v, u)) if bidirectional else ((u, v),):
        if g.has_edge(a, b):
            raise TopologyError(f"{where}: duplicate link {a!r} -> {b!r}")
        g.add_edge(a, b, **attrs)


def with_failures(
    topology: Topology,
    *,
    npus: Iterable[int] = (),
    links: Iterable[tuple[Node, Node]] = (),
    bidirectional: bool = True,
) -> Topology:
    """Return a copy of *topology* without the given NPUs and links.

    Failed NPUs keep their rank (other ranks do not move) but lose all their links. Each failed link
    ``(u, v)`` removes ``u → v`` and, when *bidirectional*, ``v → u`` too.

    Raises:
        TopologyError: a failed NPU or link that does not exist, or a result in which some live NPU
            cannot reach another.
    """
    g = topology.graph.copy()
    failed_npus = set(topology.failed_npus)
    for rank in npus:
        topology.check_npu(rank, "failed NPU")
        failed_npus.add(rank)
        g.remove_node(rank)
    failed_links = list(topology.failed_links)
    for u, v in links:
        pairs = [(u, v), (v, u)] if bidirectional else [(u, v)]
        for a, b in pairs:
            if not g.has_edge(a, b):
                if (a, b) in topology.link_ids and (a in failed_npus or b in failed_npus):
                    continue
                raise TopologyError(f"{topology.name}: cannot fail link {a!r} -> {b!r}: no such link")
            g.remove_edge(a, b)
            failed_links.append((a, b))
    result = _rebuilt(topology, g, failed_npus=failed_npus, failed_links=failed_links)
    _check_connected(result)
    return result


def _rebuilt(topology: Topology, graph: Any, **changes: Any) -> Topology:
    """*topology* over *graph*, every other attribute kept unless *changes* names it (failed, degraded links)."""
    kept = {
        "kind": topology.kind,
        "dims": topology.dims,
        "name": topology.name,
        "source": topology.source,
        "failed_npus": topology.failed_npus,
        "failed_links": topology.failed_links,
        "degraded_links": topology.degraded_links,
        "hardware": topology.hardware,
    }
    return Topology(graph, topology.npus, **{**kept, **changes})


def degrade_factor(value: object, key: str = "factor") -> float:
    """A degraded link's bandwidth factor, checked: a number in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise TopologyError(f"{key}: expected a number in (0, 1] (0.5 = half the bandwidth), got {value!r}")
    return float(value)


def with_degraded(
    topology: Topology, links: Iterable[tuple[Node, Node]], factor: float, *, bidirectional: bool = True
) -> Topology:
    """Return a copy of *topology* whose links *links* carry *factor* times their bandwidth (a degraded link).

    Each link ``(u, v)`` is ``u → v`` and, when *bidirectional*, ``v → u`` too. The result is not :attr:`regular
    <Topology.regular>` any more: closed forms, dimension-order routing and replica folding assume equal links.

    Raises:
        TopologyError: a link that does not exist, or a factor that is not in (0, 1].
    """
    factor = degrade_factor(factor)
    g = topology.graph.copy()
    degraded = list(topology.degraded_links)
    for u, v in links:
        for a, b in [(u, v), (v, u)] if bidirectional else [(u, v)]:
            if not g.has_edge(a, b):
                raise TopologyError(f"{topology.name}: cannot degrade link {a!r} -> {b!r}: no such link")
            g.edges[a, b]["bandwidth"] = g.edges[a, b]["bandwidth"] * factor
            degraded.append((a, b))
    return _rebuilt(topology, g, degraded_links=degraded)


def _check_connected(topology: Topology) -> None:
    """Raise unless every live NPU can reach every other one."""
    live = topology.live_npus
    if not live:
        raise TopologyError(f"{topology.name}: no NPU is left")
    first = live[0]
    import networkx as nx

    reach = nx.descendants(topology.graph, first) | {first}
    back = nx.ancestors(topology.graph, first) | {first}
    for rank in live:
        if rank not in reach:
            raise TopologyError(f"{topology.name}: disconnected graph: NPU {first} cannot reach NPU {rank}")
        if rank not in back:
            raise TopologyError(f"{topology.name}: disconnected graph: NPU {rank} cannot reach NPU {first}")
