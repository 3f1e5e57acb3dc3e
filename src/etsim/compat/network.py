"""ASTRA-sim's network YAML as a topology file format.

Registered through the ``etsim.topology_formats`` entry point ``astra-sim`` and recognised by its
``topology`` list::

    topology: [Ring, Switch]       # Ring | FullyConnected | Switch (also etsim dimension kinds)
    npus_count: [4, 8]
    bandwidth: [50.0, 25.0]        # bare numbers: GB/s with ASTRA-sim's 1 GB = 2^30 B
    latency: [500.0, 700.0]        # bare numbers: ns
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etsim.errors import TopologyError
from etsim.network.builders import TopologyFormat, check_keys, int_value, require
from etsim.network.dims import DIMENSION_KINDS
from etsim.network.topology import Dim, Topology, link_bandwidth, link_latency, product

__all__ = ["AstraNetworkFormat"]

_KINDS = {"ring": "ring", "fullyconnected": "fully_connected", "switch": "switch"}


class AstraNetworkFormat(TopologyFormat):
    """ASTRA-sim's network YAML: four lists of equal length, one entry per dimension."""

    keys = frozenset({"topology", "npus_count", "bandwidth", "latency", "name", "description", "failed", "network"})
    what = "an ASTRA-sim network file"

    def detect(self, data: Mapping[str, Any]) -> bool:
        """A mapping with a ``topology`` key and no ``kind``."""
        return "kind" not in data and "topology" in data

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """The product of the listed dimensions (bare bandwidths in GiB/s, latencies in ns)."""
        check_keys(data, self.keys, self.what)  # also when called directly, not through the loader
        lists = {}
        for key in ("topology", "npus_count", "bandwidth", "latency"):
            value = require(data, key)
            if not isinstance(value, list) or not value:
                raise TopologyError(f"{key}: expected a non-empty list (one entry per dimension), got {value!r}")
            lists[key] = value
        lengths = {key: len(value) for key, value in lists.items()}
        if len(set(lengths.values())) != 1:
            raise TopologyError(f"topology, npus_count, bandwidth and latency must have equal lengths, got {lengths}")
        dims = []
        known = DIMENSION_KINDS.names()
        for i, kind in enumerate(lists["topology"]):
            text = str(kind)
            internal = _KINDS.get(text.lower().replace("_", ""), text if text in known else None)
            if internal is None:
                raise TopologyError(
                    f"topology[{i}]: unknown dimension {kind!r}; expected Ring, FullyConnected or Switch"
                )
            npus = int_value(lists["npus_count"][i], f"npus_count[{i}]")
            if npus < 2:
                raise TopologyError(f"npus_count[{i}]: each dimension needs more than one NPU, got {npus}")
            bw = link_bandwidth(lists["bandwidth"][i], f"bandwidth[{i}]", bare_unit="GiB/s")
            lat = link_latency(lists["latency"][i], f"latency[{i}]", bare_unit="ns")
            dims.append(Dim(internal, npus, bw, lat))
        kind = dims[0].kind if len(dims) == 1 else "product"
        return product(dims, kind=kind, name=name)
