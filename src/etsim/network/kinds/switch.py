"""``kind: switch``: NPUs on one switch."""

from __future__ import annotations

from etsim.network.builders import TOPOLOGY_BUILDERS, NpusBuilder
from etsim.network.topology import switch

__all__ = ["SwitchBuilder"]


@TOPOLOGY_BUILDERS.register("switch")
class SwitchBuilder(NpusBuilder):
    """``kind: switch`` — ``npus``, ``bandwidth``, ``latency``."""

    function = switch
