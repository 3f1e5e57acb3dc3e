"""``kind: hypercube``: a hypercube of a power of two NPUs."""

from __future__ import annotations

from etsim.network.builders import TOPOLOGY_BUILDERS, NpusBuilder
from etsim.network.topology import hypercube

__all__ = ["HypercubeBuilder"]


@TOPOLOGY_BUILDERS.register("hypercube")
class HypercubeBuilder(NpusBuilder):
    """``kind: hypercube`` — ``npus`` (a power of two), ``bandwidth``, ``latency``."""

    function = hypercube
