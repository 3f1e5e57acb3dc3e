"""``kind: ring``: a ring of NPUs (bidirectional by default)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etsim.errors import TopologyError
from etsim.network.builders import TOPOLOGY_BUILDERS, TopologyBuilder, int_value, link_params, require
from etsim.network.topology import Topology, ring

__all__ = ["RingBuilder"]


@TOPOLOGY_BUILDERS.register("ring")
class RingBuilder(TopologyBuilder):
    """``kind: ring`` — ``npus``, ``bandwidth``, ``latency``, ``bidirectional`` (default true)."""

    keys = frozenset({"npus", "bandwidth", "latency", "bidirectional"})

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """A ring (see :func:`~etsim.network.topology.ring`)."""
        bw, lat = link_params(data)
        npus = int_value(require(data, "npus"), "npus")
        bidirectional = data.get("bidirectional", True)
        if not isinstance(bidirectional, bool):
            raise TopologyError(f"bidirectional: expected true or false, got {bidirectional!r}")
        return ring(npus, bw, lat, bidirectional=bidirectional, name=name)
