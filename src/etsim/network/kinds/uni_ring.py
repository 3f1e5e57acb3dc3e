"""``kind: uni_ring``: a unidirectional ring."""

from __future__ import annotations

from etsim.network.builders import TOPOLOGY_BUILDERS, NpusBuilder
from etsim.network.topology import uni_ring

__all__ = ["UniRingBuilder"]


@TOPOLOGY_BUILDERS.register("uni_ring")
class UniRingBuilder(NpusBuilder):
    """``kind: uni_ring`` — ``npus``, ``bandwidth``, ``latency``."""

    function = uni_ring
