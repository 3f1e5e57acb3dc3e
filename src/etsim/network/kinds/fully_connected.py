"""``kind: fully_connected``: every NPU linked to every other."""

from __future__ import annotations

from etsim.network.builders import TOPOLOGY_BUILDERS, NpusBuilder
from etsim.network.topology import fully_connected

__all__ = ["FullyConnectedBuilder"]


@TOPOLOGY_BUILDERS.register("fully_connected")
class FullyConnectedBuilder(NpusBuilder):
    """``kind: fully_connected`` — ``npus``, ``bandwidth``, ``latency``."""

    function = fully_connected
