"""``kind: graph``: an explicit graph of NPUs, switches and links."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etsim.errors import TopologyError
from etsim.network.builders import TOPOLOGY_BUILDERS, TopologyBuilder, int_value, require
from etsim.network.irregular import graph
from etsim.network.topology import Topology, link_bandwidth, link_latency

__all__ = ["GraphBuilder"]


@TOPOLOGY_BUILDERS.register("graph")
class GraphBuilder(TopologyBuilder):
    """``kind: graph`` — ``npus``, ``switches``, ``links`` and default ``bandwidth``/``latency``."""

    keys = frozenset({"npus", "switches", "links", "bandwidth", "latency"})

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """An explicit graph (see :func:`~etsim.network.topology.graph`)."""
        links = require(data, "links")
        if not isinstance(links, list):
            raise TopologyError(f"links: expected a list of links, got {links!r}")
        # A file writes its units, as every other kind's must (a bare 400 meant as a NIC's Gb/s ran as 400 GB/s);
        # Python callers of graph() may give numbers in B/ns and ns.
        written = [("", data), *((f"links[{i}].", link) for i, link in enumerate(links) if isinstance(link, Mapping))]
        for where, entry in written:
            if entry.get("bandwidth") is not None:
                link_bandwidth(entry["bandwidth"], f"{where}bandwidth", bare_unit=None)
            if entry.get("latency") is not None:
                link_latency(entry["latency"], f"{where}latency", bare_unit=None)
        return graph(
            int_value(require(data, "npus"), "npus"),
            links,
            switches=data.get("switches", 0),
            bandwidth=data.get("bandwidth"),
            latency=data.get("latency"),
            name=name,
        )
