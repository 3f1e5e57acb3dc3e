"""``kind: gpu_cluster``: nodes of GPUs on an NVSwitch, joined by a rail-optimised InfiniBand fat tree.

The cluster is a product of two switch dimensions: dimension 0 is a node's NVSwitch (each GPU's NVLink bandwidth,
per direction), dimension 1 one *rail* per local GPU index (GPU ``i`` of every node reaches the others' GPU ``i``
through its own NICs and a non-blocking fat tree, which carries any traffic among its ports at full rate, so one
switch per rail models it). Traffic between GPU ``i`` of one node and GPU ``j ≠ i`` of another crosses NVLink
first, as NCCL's PXN does on rail-optimised fabrics. Hierarchical collectives see the two dimensions.

- ``fabric_levels`` sets the inter-node latency: the NIC at each end plus ``2·levels − 1`` switch hops.
- ``oversubscription`` (≥ 1) divides each GPU's fabric bandwidth: the rate when every GPU sends across the top
  of the tree at once (the worst case; traffic that stays under one leaf is not faster in this model).
- ``rail_optimised: false``: every NIC joins one fabric, so GPU ``i`` of one node reaches GPU ``j`` of another
  through its own NIC directly, never over NVLink first. The cluster is then an explicit graph (a GPU's NIC is a
  node of its own between the GPU and the fabric, so the fewest-hop route between GPUs of one node is their
  NVSwitch): shortest-path routing, no dimensions for hierarchical collectives, and no replica folding.

Presets (per-direction figures from NVIDIA's DGX A100 and DGX H100 user guides and SuperPOD reference
architectures):

- ``dgx-a100`` (Selene): 8 A100 per node, NVLink 3 at 300 GB/s per GPU, one 200 Gb/s HDR NIC per GPU, 3 levels;
- ``dgx-h100``: 8 H100 per node, NVLink 4 at 450 GB/s per GPU, one 400 Gb/s NDR NIC per GPU, 3 levels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etsim.errors import TopologyError
from etsim.network.builders import TOPOLOGY_BUILDERS, TopologyBuilder, int_value
from etsim.network.irregular import graph
from etsim.network.topology import Dim, Topology, link_bandwidth, link_latency, product

__all__ = ["PRESETS", "GpuClusterBuilder"]

#: Fabric presets: every key of the kind but ``gpus``.
PRESETS: dict[str, dict[str, Any]] = {
    "dgx-a100": {
        "gpus_per_node": 8,
        "nvlink_bandwidth": "300 GB/s",
        "nvlink_latency": "700 ns",
        "nics_per_gpu": 1,
        "nic_bandwidth": "25 GB/s",
        "nic_latency": "1 us",
        "switch_latency": "130 ns",
        "fabric_levels": 3,
        "oversubscription": 1,
    },
    "dgx-h100": {
        "gpus_per_node": 8,
        "nvlink_bandwidth": "450 GB/s",
        "nvlink_latency": "700 ns",
        "nics_per_gpu": 1,
        "nic_bandwidth": "50 GB/s",
        "nic_latency": "1 us",
        "switch_latency": "130 ns",
        "fabric_levels": 3,
        "oversubscription": 1,
    },
}


@TOPOLOGY_BUILDERS.register("gpu_cluster")
class GpuClusterBuilder(TopologyBuilder):
    """``kind: gpu_cluster`` — ``gpus``, ``preset`` (``dgx-a100``, ``dgx-h100``) and any preset key overridden."""

    keys = frozenset({"gpus", "preset", "rail_optimised", *PRESETS["dgx-a100"]})

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """Two switch dimensions: the node's NVSwitch and one rail per local GPU index."""
        preset = data.get("preset")
        if preset is None:
            values: dict[str, Any] = {}
        elif preset in PRESETS:
            values = dict(PRESETS[preset])
        else:
            raise TopologyError(f"preset: unknown GPU cluster {preset!r}; expected one of {', '.join(PRESETS)}")
        values.update({k: v for k, v in data.items() if k not in ("kind", "preset", "name", "network", "failed")})
        rail = values.pop("rail_optimised", True)
        if not isinstance(rail, bool):
            raise TopologyError(f"rail_optimised: expected true or false, got {rail!r}")
        for key in sorted(self.keys - {"preset", "rail_optimised"}):
            if key not in values:
                raise TopologyError(f"{key}: missing (give it, or a preset: {', '.join(PRESETS)})")
        gpus = int_value(values["gpus"], "gpus")
        per_node = int_value(values["gpus_per_node"], "gpus_per_node")
        nics = int_value(values["nics_per_gpu"], "nics_per_gpu")
        levels = int_value(values["fabric_levels"], "fabric_levels")
        over = values["oversubscription"]
        if per_node < 1 or gpus < 1 or gpus % per_node:
            raise TopologyError(f"gpus: {gpus} is not a whole number of nodes of gpus_per_node {per_node}")
        if nics < 1 or levels < 1:
            raise TopologyError("nics_per_gpu and fabric_levels must be >= 1")
        if isinstance(over, bool) or not isinstance(over, int | float) or not over >= 1:
            raise TopologyError(f"oversubscription: expected a number >= 1 (1 is non-blocking), got {over!r}")
        nvlink = link_bandwidth(values["nvlink_bandwidth"], "nvlink_bandwidth", bare_unit=None)
        nvlink_lat = link_latency(values["nvlink_latency"], "nvlink_latency", bare_unit=None)
        nic = link_bandwidth(values["nic_bandwidth"], "nic_bandwidth", bare_unit=None)
        nic_lat = link_latency(values["nic_latency"], "nic_latency", bare_unit=None)
        hop = link_latency(values["switch_latency"], "switch_latency", bare_unit=None)
        nodes = gpus // per_node
        if not rail and nodes > 1:
            return _fabric_graph(gpus, per_node, nvlink, nvlink_lat, nic * nics / over, nic_lat, hop, levels, name)
        # A route through a switch dimension crosses two links (up and down): each carries half the path latency.
        fabric_latency = (2 * nic_lat + (2 * levels - 1) * hop) / 2
        dims = []
        if per_node > 1:
            dims.append(Dim("switch", per_node, nvlink, nvlink_lat / 2))
        if nodes > 1:
            dims.append(Dim("switch", nodes, nic * nics / over, fabric_latency))
        if not dims:
            raise TopologyError("gpus: a GPU cluster needs at least 2 GPUs")
        return product(dims, kind="gpu_cluster", name=name)


def _fabric_graph(
    gpus: int,
    per_node: int,
    nvlink: float,
    nvlink_latency: float,
    fabric: float,
    nic_latency: float,
    hop: float,
    levels: int,
    name: str | None,
) -> Topology:
    """A cluster whose NICs all join one fabric (not rail-optimised): GPU → NIC → fabric → NIC → GPU between nodes.

    Latencies: NVLink's split over a GPU's two NVSwitch links, as in the product; between nodes the NIC at each end
    (GPU → NIC and NIC → GPU links) and ``2·levels − 1`` switch hops (split over the NIC ↔ fabric links).
    """
    nvswitches = [f"nvswitch{k}" for k in range(gpus // per_node)]
    nics = [f"nic{r}" for r in range(gpus)]
    links: list[dict[str, object]] = []
    for r in range(gpus):
        links.append({"src": r, "dst": nvswitches[r // per_node], "bandwidth": nvlink, "latency": nvlink_latency / 2})
        links.append({"src": r, "dst": nics[r], "bandwidth": fabric, "latency": nic_latency})
        links.append({"src": nics[r], "dst": "fabric", "bandwidth": fabric, "latency": (2 * levels - 1) * hop / 2})
    return graph(gpus, links, switches=[*nvswitches, *nics, "fabric"], name=name or "gpu_cluster")
