"""``kind: mesh``: a 2-D or 3-D mesh."""

from __future__ import annotations

from etsim.network.builders import TOPOLOGY_BUILDERS, ShapeBuilder
from etsim.network.topology import mesh

__all__ = ["MeshBuilder"]


@TOPOLOGY_BUILDERS.register("mesh")
class MeshBuilder(ShapeBuilder):
    """``kind: mesh`` — ``shape`` ([x, y] or [x, y, z]), ``bandwidth``, ``latency``."""

    function = mesh
