"""``kind: product``: a product of dimensions (``dims``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etsim.errors import TopologyError
from etsim.network.builders import TOPOLOGY_BUILDERS, TopologyBuilder, check_keys, int_value, require
from etsim.network.dims import DIMENSION_KINDS
from etsim.network.topology import Dim, Topology, link_bandwidth, link_latency, product

__all__ = ["ProductBuilder", "dimension"]


def dimension(entry: object, prefix: str) -> Dim:
    """One ``{kind, npus, bandwidth, latency}`` entry of a product's ``dims``."""
    if not isinstance(entry, Mapping):
        raise TopologyError(f"{prefix}: expected a mapping {{kind, npus, bandwidth, latency}}, got {entry!r}")
    check_keys(entry, {"kind", "npus", "bandwidth", "latency"}, "a dimension", f"{prefix}.")
    kind = require(entry, "kind", f"{prefix}.")
    kinds = DIMENSION_KINDS.names()
    if kind not in kinds:
        raise TopologyError(f"{prefix}.kind: unknown dimension kind {kind!r}; expected one of {', '.join(kinds)}")
    npus = int_value(require(entry, "npus", f"{prefix}."), f"{prefix}.npus")
    if npus < 2:
        raise TopologyError(f"{prefix}.npus: a dimension needs at least 2 NPUs, got {npus}")
    bw = link_bandwidth(require(entry, "bandwidth", f"{prefix}."), f"{prefix}.bandwidth", bare_unit=None)
    lat = link_latency(require(entry, "latency", f"{prefix}."), f"{prefix}.latency", bare_unit=None)
    return Dim(kind, npus, bw, lat)


@TOPOLOGY_BUILDERS.register("product")
class ProductBuilder(TopologyBuilder):
    """``kind: product`` — ``dims``: a list of ``{kind, npus, bandwidth, latency}``, dimension 0 first."""

    keys = frozenset({"dims"})

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """The Cartesian product of the dimensions."""
        dims = require(data, "dims")
        if not isinstance(dims, list) or not dims:
            raise TopologyError(f"dims: expected a non-empty list of dimensions, got {dims!r}")
        return product([dimension(d, f"dims[{i}]") for i, d in enumerate(dims)], name=name)
