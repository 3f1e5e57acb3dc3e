"""``kind: gpu_cluster``: nodes of GPUs (an NVSwitch, direct NVLink or PCIe inside a node) joined by NICs.

The cluster is a product of two dimensions: dimension 0 is a node (its NVSwitch, each GPU's NVLink bandwidth per
direction; or direct NVLink links between every pair of GPUs; or PCIe through the host), dimension 1 one *rail* per
local GPU index (GPU ``i`` of every node reaches the others' GPU ``i`` through its share of the node's NICs and a
non-blocking fat tree, which carries any traffic among its ports at full rate, so one switch per rail models it).
Traffic between GPU ``i`` of one node and GPU ``j ≠ i`` of another crosses the node first, as NCCL's PXN does on
rail-optimised fabrics. Hierarchical collectives see the two dimensions.

- ``nics_per_gpu`` or ``nics_per_node`` (not both) and ``nic_bandwidth`` (per NIC) give each GPU's fabric
  bandwidth: ``nic_bandwidth · nics_per_node / gpus_per_node``.
- ``fabric_levels`` sets the inter-node latency: the NIC at each end plus ``2·levels − 1`` switch hops.
- ``oversubscription`` (≥ 1) divides each GPU's fabric bandwidth: the rate when every GPU sends across the top
  of the tree at once (the worst case; traffic that stays under one leaf is not faster in this model).
- ``rail_optimised: false``: every NIC joins one fabric, so GPU ``i`` of one node reaches GPU ``j`` of another
  through its own NIC directly, never over NVLink first. The cluster is then an explicit graph (a GPU's NIC is a
  node of its own between the GPU and the fabric, so the fewest-hop route between GPUs of one node is their
  NVSwitch): shortest-path routing, no dimensions for hierarchical collectives, and no replica folding.
- ``gpu`` (``a100``, ``h100`` …: :data:`~etsim.network.hardware.GPU_GENERATIONS`), ``intra`` (``nvswitch``,
  ``nvlink``, ``pcie``: the default for a GPU without NVLink, whose node links then run at most at its PCIe rate),
  ``nvls`` (the NVSwitch reduces; default: the GPU generation's, an error where it has none), ``fabric`` (``ib``,
  ``roce``, ``efa``, ``slingshot``, ``tcpxo``), ``sharp`` (the fabric's switches reduce) and ``pcie_bandwidth``
  describe the hardware further (``Topology.hardware``): what a collective runtime lays its channels on (``nccl``).
  A GPU's rail runs at most at its PCIe link (its fabric traffic crosses it to the NIC), with a warning: the stated
  ``pcie_bandwidth``, else an x16 link of the GPU's generation (32 GB/s Gen4, 64 Gen5).

Presets (per-direction figures from the vendors' user guides and reference architectures, each cited):

- ``dgx-a100`` (Selene): 8 A100 per node, NVLink 3 at 300 GB/s per GPU, one 200 Gb/s HDR NIC per GPU, 3 levels;
- ``dgx-h100``: 8 H100 per node, NVLink 4 at 450 GB/s per GPU, one 400 Gb/s NDR NIC per GPU, 3 levels;
- ``hgx-h200``: as ``dgx-h100`` with H200 GPUs;
- ``hgx-b200``: 8 B200 per node, NVLink 5 at 900 GB/s per GPU, one 400 Gb/s NIC per GPU;
- ``gb200-nvl72``: a rack of 72 GB200 in one NVLink domain (900 GB/s per GPU), one 400 Gb/s NIC per GPU;
- ``aws-p4d``: 8 A100 (NVSwitch), 4 × 100 Gb/s EFA per instance (AWS p4d/p4de instance specification);
- ``oci-a100-roce``: 8 A100 (NVSwitch), 16 × 100 Gb/s RoCE ports per node (OCI BM.GPU4.8 specification);
- ``polaris``: 4 A100 linked directly by NVLink 3 (no NVSwitch), 2 × 200 Gb/s Slingshot 11 NICs (ALCF Polaris);
- ``pcie-4gpu``: 4 GPUs on PCIe Gen5 through the host, no NVLink (a workstation).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from etsim.errors import TopologyError, warn
from etsim.network.builders import TOPOLOGY_BUILDERS, TopologyBuilder, int_value
from etsim.network.hardware import FABRICS, GPU_GENERATIONS, INTRA_KINDS, GpuCluster
from etsim.network.irregular import graph
from etsim.network.topology import Dim, Topology, link_bandwidth, link_latency, product

__all__ = ["PRESETS", "GpuClusterBuilder"]

_DGX = {"gpus_per_node": 8, "nvlink_latency": "700 ns", "nic_latency": "1 us", "switch_latency": "130 ns",
        "fabric_levels": 3, "oversubscription": 1, "fabric": "ib"}  # fmt: skip

#: Cluster presets: every key of the kind but ``gpus``.
PRESETS: dict[str, dict[str, Any]] = {
    "dgx-a100": {**_DGX, "gpu": "a100", "nvlink_bandwidth": "300 GB/s", "nics_per_gpu": 1, "nic_bandwidth": "25 GB/s"},
    "dgx-h100": {**_DGX, "gpu": "h100", "nvlink_bandwidth": "450 GB/s", "nics_per_gpu": 1, "nic_bandwidth": "50 GB/s"},
    "hgx-h200": {**_DGX, "gpu": "h200", "nvlink_bandwidth": "450 GB/s", "nics_per_gpu": 1, "nic_bandwidth": "50 GB/s"},
    "hgx-b200": {**_DGX, "gpu": "b200", "nvlink_bandwidth": "900 GB/s", "nics_per_gpu": 1, "nic_bandwidth": "50 GB/s"},
    "gb200-nvl72": {**_DGX, "gpu": "gb200", "gpus_per_node": 72, "nvlink_bandwidth": "900 GB/s", "nics_per_gpu": 1,
                    "nic_bandwidth": "50 GB/s"},
    "aws-p4d": {**_DGX, "gpu": "a100", "nvlink_bandwidth": "300 GB/s", "nics_per_node": 4, "nic_bandwidth": "12.5 GB/s",
                "fabric": "efa", "nic_latency": f"{FABRICS['efa'].nic_latency:g} ns"},
    "oci-a100-roce": {**_DGX, "gpu": "a100", "nvlink_bandwidth": "300 GB/s", "nics_per_node": 16,
                      "nic_bandwidth": "12.5 GB/s", "fabric": "roce",
                      "nic_latency": f"{FABRICS['roce'].nic_latency:g} ns"},
    "polaris": {**_DGX, "gpu": "a100", "gpus_per_node": 4, "intra": "nvlink", "nvlink_bandwidth": "300 GB/s",
                "nics_per_node": 2, "nic_bandwidth": "25 GB/s", "fabric": "slingshot",
                "nic_latency": f"{FABRICS['slingshot'].nic_latency:g} ns"},
    "pcie-4gpu": {**_DGX, "gpu": "rtx5090", "gpus_per_node": 4, "intra": "pcie", "nvlink_bandwidth": "48 GB/s",
                  "nvlink_latency": "2 us", "nics_per_gpu": 1, "nic_bandwidth": "12.5 GB/s"},
}  # fmt: skip

#: Keys a cluster needs (from its preset or the file).
_REQUIRED = ("gpus_per_node", "nvlink_bandwidth", "nvlink_latency", "nic_bandwidth", "nic_latency",
             "switch_latency", "fabric_levels", "oversubscription")  # fmt: skip
#: Keys a cluster may give besides: the hardware's description (defaults from the GPU generation).
_OPTIONAL = ("gpu", "intra", "nvls", "fabric", "sharp", "pcie_bandwidth", "nics_per_gpu", "nics_per_node")


@TOPOLOGY_BUILDERS.register("gpu_cluster")
class GpuClusterBuilder(TopologyBuilder):
    """``kind: gpu_cluster`` — ``gpus``, ``preset`` (:data:`PRESETS`) and any preset key overridden."""

    keys = frozenset({"gpus", "preset", "rail_optimised", *_REQUIRED, *_OPTIONAL})

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """The node dimension and the rail dimension (or an explicit fabric graph when not rail-optimised)."""
        values = _values(data)
        rail = values.pop("rail_optimised", True)
        if not isinstance(rail, bool):
            raise TopologyError(f"rail_optimised: expected true or false, got {rail!r}")
        gpus = int_value(values["gpus"], "gpus")
        per_node = int_value(values["gpus_per_node"], "gpus_per_node")
        levels = int_value(values["fabric_levels"], "fabric_levels")
        over = values["oversubscription"]
        if per_node < 1 or gpus < 1 or gpus % per_node:
            raise TopologyError(f"gpus: {gpus} is not a whole number of nodes of gpus_per_node {per_node}")
        if levels < 1:
            raise TopologyError("nics_per_gpu and fabric_levels must be >= 1")
        if isinstance(over, bool) or not isinstance(over, int | float) or not 1 <= over < math.inf:
            raise TopologyError(f"oversubscription: expected a finite number >= 1 (1 is non-blocking), got {over!r}")
        nics = _nics_per_node(values, per_node)
        nvlink = link_bandwidth(values["nvlink_bandwidth"], "nvlink_bandwidth", bare_unit=None)
        nvlink_lat = link_latency(values["nvlink_latency"], "nvlink_latency", bare_unit=None)
        nic = link_bandwidth(values["nic_bandwidth"], "nic_bandwidth", bare_unit=None)
        nic_lat = link_latency(values["nic_latency"], "nic_latency", bare_unit=None)
        hop = link_latency(values["switch_latency"], "switch_latency", bare_unit=None)
        hardware = _hardware(values, gpus // per_node, per_node, nvlink, nics, nic)
        if hardware is not None and hardware.intra == "pcie" and nvlink > hardware.pcie_bandwidth:
            # the node's links are the GPUs' own PCIe links: a preset's faster figure (its GPU's) does not hold
            if "nvlink_bandwidth" in data:
                pcie = hardware.pcie_bandwidth
                warn(f"nvlink_bandwidth {nvlink:g} GB/s: over PCIe (intra: pcie) the GPU's links run at its "
                     f"pcie_bandwidth, {pcie:g} GB/s (give pcie_bandwidth to change it)")  # fmt: skip
            nvlink = hardware.pcie_bandwidth
            hardware = dataclasses.replace(hardware, nvlink_bandwidth=nvlink)
        per_gpu = nic * nics / per_node
        nodes = gpus // per_node
        if hardware is not None and nodes > 1:
            per_gpu, hardware = _pcie_capped(per_gpu, hardware, stated="pcie_bandwidth" in values)
        per_gpu /= over
        if not rail and nodes > 1:
            intra = hardware.intra if hardware else "nvswitch"
            return _fabric_graph(gpus, per_node, intra, nvlink, nvlink_lat, per_gpu, nic_lat, hop, levels, name,
                                 hardware)  # fmt: skip
        # A route through a switch dimension crosses two links (up and down): each carries half the path latency.
        fabric_latency = (2 * nic_lat + (2 * levels - 1) * hop) / 2
        dims = []
        if per_node > 1:
            dims.append(_node_dimension(hardware.intra if hardware else "nvswitch", per_node, nvlink, nvlink_lat))
        if nodes > 1:
            dims.append(Dim("switch", nodes, per_gpu, fabric_latency))
        if not dims:
            raise TopologyError("gpus: a GPU cluster needs at least 2 GPUs")
        return product(dims, kind="gpu_cluster", name=name, hardware=hardware)


def _values(data: Mapping[str, Any]) -> dict[str, Any]:
    """The file's keys over its preset's; a missing required key named."""
    preset = data.get("preset")
    if preset is None:
        values: dict[str, Any] = {}
    elif preset in PRESETS:
        values = dict(PRESETS[preset])
    else:
        raise TopologyError(f"preset: unknown GPU cluster {preset!r}; expected one of {', '.join(PRESETS)}")
    given = {k: v for k, v in data.items() if k not in ("kind", "preset", "name", "network", "failed", "degraded")}
    if {"nics_per_gpu", "nics_per_node"} & set(given):  # the file's NIC count replaces the preset's, either way
        values.pop("nics_per_gpu", None)
        values.pop("nics_per_node", None)
    values.update(given)
    for key in ("gpus", *_REQUIRED):
        if key not in values:
            raise TopologyError(f"{key}: missing (give it, or a preset: {', '.join(PRESETS)})")
    return values


def _nics_per_node(values: Mapping[str, Any], per_node: int) -> float:
    """The NICs of a node, from ``nics_per_gpu`` or ``nics_per_node`` (one of them, at least 1 NIC in all)."""
    if "nics_per_gpu" in values and "nics_per_node" in values:
        raise TopologyError("nics_per_gpu and nics_per_node: give one of them")
    if "nics_per_node" in values:
        nics = int_value(values["nics_per_node"], "nics_per_node")
        if nics < 1:
            raise TopologyError(f"nics_per_node must be >= 1, got {nics}")
        return float(nics)
    if "nics_per_gpu" not in values:
        raise TopologyError(f"nics_per_gpu: missing (or nics_per_node; or a preset: {', '.join(PRESETS)})")
    per_gpu = int_value(values["nics_per_gpu"], "nics_per_gpu")
    if per_gpu < 1:
        raise TopologyError("nics_per_gpu and fabric_levels must be >= 1")
    return float(per_gpu * per_node)


def _boolean(values: Mapping[str, Any], key: str, default: bool) -> bool:
    value = values.get(key, default)
    if not isinstance(value, bool):
        raise TopologyError(f"{key}: expected true or false, got {value!r}")
    return value


def _hardware(
    values: Mapping[str, Any], nodes: int, per_node: int, nvlink: float, nics: float, nic: float
) -> GpuCluster | None:
    """The cluster's :class:`GpuCluster` (None when it names no GPU: a topology for the network alone)."""
    name = values.get("gpu")
    if name is None:
        if any(k in values for k in ("intra", "nvls", "sharp", "pcie_bandwidth")):
            raise TopologyError(f"gpu: missing (the GPU generation: {', '.join(GPU_GENERATIONS)})")
        return None
    if name not in GPU_GENERATIONS:
        raise TopologyError(f"gpu: unknown GPU {name!r}; expected one of {', '.join(GPU_GENERATIONS)}")
    gpu = GPU_GENERATIONS[name]
    intra = values.get("intra", "nvswitch" if gpu.nvlink_links else "pcie")
    if intra not in INTRA_KINDS:
        raise TopologyError(f"intra: expected one of {', '.join(INTRA_KINDS)}, got {intra!r}")
    if intra != "pcie" and not gpu.nvlink_links:
        raise TopologyError(f"intra: {intra} joins GPUs by NVLink, which the {name} has none of (intra: pcie)")
    fabric = values.get("fabric", "ib")
    if fabric not in FABRICS:
        raise TopologyError(f"fabric: unknown fabric {fabric!r}; expected one of {', '.join(FABRICS)}")
    nvls = _boolean(values, "nvls", gpu.nvls and intra == "nvswitch" and per_node > 2)
    if nvls and intra != "nvswitch":
        raise TopologyError("nvls: NVLink SHARP reduces in an NVSwitch; this node has none (intra: " + intra + ")")
    if nvls and not gpu.nvls:
        raise TopologyError(f"nvls: the {name}'s NVSwitch generation does not reduce in the switch (from Hopper on)")
    pcie = values.get("pcie_bandwidth")
    pcie_bw = gpu.pcie_bandwidth if pcie is None else link_bandwidth(pcie, "pcie_bandwidth", bare_unit=None)
    return GpuCluster(
        gpu, per_node, nodes, intra, nvlink, nvls, nics, nic, FABRICS[fabric], _boolean(values, "sharp", False), pcie_bw
    )


def _pcie_capped(per_gpu: float, hardware: GpuCluster, *, stated: bool) -> tuple[float, GpuCluster]:
    """A GPU's rail at most at its PCIe link, and the hardware's NICs as seen through it.

    Its fabric traffic crosses the link to the NIC (GPUDirect RDMA, or PXN's peer GPU's link). A stated
    ``pcie_bandwidth`` is the link's rate; the generation's default is NCCL's figure for an x16 link (24 GB/s Gen4,
    48 Gen5), 3/4 of its raw rate.
    """
    link = hardware.pcie_bandwidth if stated else hardware.pcie_bandwidth * 4 / 3
    if per_gpu <= link:
        return per_gpu, hardware
    how = "pcie_bandwidth" if stated else "an x16 link of its generation"
    warn(f"a GPU's share of its node's NICs, {per_gpu:g} GB/s, is more than its PCIe link carries ({link:g} GB/s, "
         f"{how}): its rail runs at {link:g} GB/s")  # fmt: skip
    nic = link * hardware.gpus_per_node / hardware.nics_per_node
    return link, dataclasses.replace(hardware, nic_bandwidth=nic)


def _node_dimension(intra: str, per_node: int, nvlink: float, latency: float) -> Dim:
    """The node's dimension.

    An NVSwitch (each GPU's NVLink bandwidth), NVLink links to every other GPU (the GPU's links shared evenly), or the
    host's PCIe (a switch at the GPU's PCIe bandwidth).
    """
    if intra == "nvlink":
        return Dim("fully_connected", per_node, nvlink / (per_node - 1), latency)
    # A route through the switch crosses two links (up and down): each carries half the latency.
    return Dim("switch", per_node, nvlink, latency / 2)


def _fabric_graph(
    gpus: int,
    per_node: int,
    intra: str,
    nvlink: float,
    nvlink_latency: float,
    fabric: float,
    nic_latency: float,
    hop: float,
    levels: int,
    name: str | None,
    hardware: GpuCluster | None,
) -> Topology:
    """A cluster whose NICs all join one fabric (not rail-optimised): GPU → NIC → fabric → NIC → GPU between nodes.

    Inside a node the links are the rail-optimised product's (:func:`_node_dimension`): an NVSwitch (or the host's
    PCIe switch), NVLink's latency split over a GPU's two links to it; or, with ``intra: nvlink``, a direct link to
    every other GPU of the node, the GPU's NVLink shared evenly. Between nodes the NIC at each end (GPU → NIC and NIC
    → GPU links) and ``2·levels − 1`` switch hops (split over the NIC ↔ fabric links).
    """
    direct = intra == "nvlink" and per_node > 1
    nvswitches = [] if direct else [f"nvswitch{k}" for k in range(gpus // per_node)]
    nics = [f"nic{r}" for r in range(gpus)]
    links: list[dict[str, object]] = []
    for r in range(gpus):
        if direct:  # (one link each way per pair: the GPU's NVLink shared over its peers, as the product's)
            first = r - r % per_node
            links += [{"src": r, "dst": q, "bandwidth": nvlink / (per_node - 1), "latency": nvlink_latency,
                       "bidirectional": False} for q in range(first, first + per_node) if q != r]  # fmt: skip
        else:
            links.append(
                {"src": r, "dst": nvswitches[r // per_node], "bandwidth": nvlink, "latency": nvlink_latency / 2}
            )
        links.append({"src": r, "dst": nics[r], "bandwidth": fabric, "latency": nic_latency})
        links.append({"src": nics[r], "dst": "fabric", "bandwidth": fabric, "latency": (2 * levels - 1) * hop / 2})
    return graph(gpus, links, switches=[*nvswitches, *nics, "fabric"], name=name or "gpu_cluster", hardware=hardware)
