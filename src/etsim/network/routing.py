"""Routing: the ordered directed links a message crosses from one NPU to another.

A route is a list of integer link ids (indices into :attr:`Topology.links`,
:attr:`Topology.bandwidths` and :attr:`Topology.latencies`). Routers are deterministic and the models
cache routes per ``(src, dst)`` through :meth:`Router.lookup`.

Built-in routers (registry :data:`ROUTERS`, entry-point group ``etsim.routers``):

- ``default`` (:class:`DimensionOrderRouter`): on regular topologies, dimension order — correct
  coordinate 0 first, then 1, …; within a ring dimension the shorter direction, a tie going the
  ``+1`` way; a switch dimension goes NPU → switch → NPU; a fully-connected one takes the direct
  link. On ``graph`` topologies, or when the dimension-order route crosses a failed link or NPU, it
  falls back to the fewest-hop path.
- ``shortest`` (:class:`ShortestPathRouter`): always the fewest-hop path found by networkx's
  breadth-first search (deterministic for a given graph).

A custom router subclasses :class:`Router` and implements :meth:`Router.route`; select it with the
model option ``router: package.module:Class``.
"""

from __future__ import annotations

import itertools

from etsim.errors import SimulationError, TopologyError
from etsim.network.dims import SWITCH
from etsim.network.topology import Node, Topology
from etsim.registry import Registry

__all__ = ["ROUTERS", "DimensionOrderRouter", "Router", "ShortestPathRouter", "make_router"]


class Router:
    """Base class of routers.

    Subclasses implement :meth:`route`; callers use :meth:`lookup`, which validates the endpoints
    and the returned route once per ``(src, dst)`` and caches it.

    Args:
        topology: the topology to route on.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._cache: dict[tuple[int, int], list[int]] = {}

    def route(self, src: int, dst: int) -> list[int]:
        """Return the link ids from NPU *src* to NPU *dst* (empty when ``src == dst``)."""
        raise NotImplementedError

    def lookup(self, src: int, dst: int) -> list[int]:
        """Cached :meth:`checked_route`.

        Raises:
            SimulationError: *src* or *dst* is not a live NPU, or the router returned a broken route.
        """
        key = (src, dst)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self.checked_route(src, dst)
        return cached

    def checked_route(self, src: int, dst: int) -> list[int]:
        """:meth:`route`, validated: live endpoints, and links that join up from *src* to *dst*.

        A router whose routes are another's, transformed (replica folding's), overrides this to skip the checks.
        """
        topo = self.topology
        try:
            topo.check_npu(src, "source")
            topo.check_npu(dst, "destination")
        except TopologyError as exc:
            raise SimulationError(str(exc)) from None
        route = list(self.route(src, dst))
        node: Node = src
        for link in route:
            if not (isinstance(link, int) and 0 <= link < len(topo.links)) or topo.links[link][0] != node:
                raise SimulationError(f"{type(self).__name__} returned a broken route {src} -> {dst}: {route}")
            node = topo.links[link][1]
        if node != dst:
            raise SimulationError(f"{type(self).__name__} returned a route {src} -> {dst} ending at {node!r}")
        return route

    def nodes_to_links(self, nodes: list[Node]) -> list[int]:
        """Convert a node path into link ids; raise ``KeyError`` if a link does not exist."""
        ids = self.topology.link_ids
        return [ids[u, v] for u, v in itertools.pairwise(nodes)]


ROUTERS: Registry[Router] = Registry("router", "etsim.routers", Router)


@ROUTERS.register("shortest")
class ShortestPathRouter(Router):
    """Fewest-hop paths (networkx breadth-first search; deterministic for a given graph)."""

    def route(self, src: int, dst: int) -> list[int]:
        """Return a fewest-hop route from *src* to *dst*."""
        if src == dst:
            return []
        import networkx as nx

        try:
            nodes = nx.shortest_path(self.topology.graph, src, dst)
        except nx.NetworkXNoPath:
            raise SimulationError(f"{self.topology.name}: no path from NPU {src} to NPU {dst}") from None
        return self.nodes_to_links(nodes)


@ROUTERS.register("default")
class DimensionOrderRouter(ShortestPathRouter):
    """Dimension-order routing on regular topologies, fewest hops otherwise (see the module docstring)."""

    def route(self, src: int, dst: int) -> list[int]:
        """Return the dimension-order route, or the fewest-hop one when that is impossible."""
        topo = self.topology
        if not topo.dims or src == dst:
            return super().route(src, dst)
        try:
            return self.nodes_to_links(self.dimension_order_nodes(src, dst))
        except KeyError:  # a failed link or NPU on the way
            return super().route(src, dst)

    def dimension_order_nodes(self, src: int, dst: int) -> list[Node]:
        """The node sequence of the dimension-order route (ignoring failures)."""
        topo = self.topology
        nodes: list[Node] = [src]
        cur = src
        for d, (dim, stride) in enumerate(zip(topo.dims, topo.strides, strict=True)):
            n = dim.npus
            a = (cur // stride) % n
            b = (dst // stride) % n
            if a == b:
                continue
            base = cur - a * stride
            for x in dim.shape.path(a, b, n):
                nodes.append(topo.dim_switch(d, base) if x == SWITCH else base + x * stride)
            cur = base + b * stride
        return nodes


def make_router(name: str, topology: Topology) -> Router:
    """Build the router registered as *name* (or a ``package.module:Class`` path) for *topology*."""
    return ROUTERS.get(name)(topology)
