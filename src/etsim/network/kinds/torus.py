"""``kind: torus``: a 2-D or 3-D torus."""

from __future__ import annotations

from etsim.network.builders import TOPOLOGY_BUILDERS, ShapeBuilder
from etsim.network.topology import torus

__all__ = ["TorusBuilder"]


@TOPOLOGY_BUILDERS.register("torus")
class TorusBuilder(ShapeBuilder):
    """``kind: torus`` — ``shape``, ``bandwidth``, ``latency``."""

    function = torus
