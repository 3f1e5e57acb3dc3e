"""What a GPU cluster is made of, beyond its links.

It is what a collective runtime (NCCL) needs to lay its rings, trees and in-switch reductions on the topology. A
``kind: gpu_cluster`` topology carries a :class:`GpuCluster` (``Topology.hardware``): the GPU generation (NCCL's
constants depend on its compute capability), how GPUs of a node are connected (an NVSwitch, direct NVLink links, or
PCIe through the host), whether the NVSwitch reduces in the switch (NVLink SHARP, "NVLS"), the NICs of a node and the
fabric they join (InfiniBand, RoCE, AWS EFA, HPE Slingshot, Google TCPXO), and whether the fabric's switches reduce
(SHARP). Every figure is the hardware's own (datasheets, cited in :data:`GPU_GENERATIONS` and :data:`FABRICS`);
what a runtime achieves on it is the runtime model's business (``system/algorithms/nccl``).
"""

from __future__ import annotations

from dataclasses import dataclass

from etsim.errors import TopologyError

__all__ = ["FABRICS", "GPU_GENERATIONS", "INTRA_KINDS", "Fabric", "GpuCluster", "GpuGeneration"]


@dataclass(frozen=True)
class GpuGeneration:
    """A GPU model's interconnect facts.

    Attributes:
        name: the model (``a100``, ``h100`` …).
        compute_capability: ×10 (80 for sm_80): NCCL's constants are chosen by it.
        nvlink_links: NVLink links per GPU (0: none).
        nvlink_link_bandwidth: per link and direction, bytes per ns (GB/s), the datasheet's.
        pcie_bandwidth: the GPU's PCIe link per direction, bytes per ns (x16 of its generation).
        nvls: its NVSwitch generation reduces in the switch (NVLink SHARP).
        source: where the figures come from.
    """

    name: str
    compute_capability: int
    nvlink_links: int
    nvlink_link_bandwidth: float
    pcie_bandwidth: float
    nvls: bool
    source: str

    @property
    def nvlink_bandwidth(self) -> float:
        """All NVLink links of one GPU, per direction (bytes per ns)."""
        return self.nvlink_links * self.nvlink_link_bandwidth


#: GPU generations by name. PCIe: Gen3 x16 ≈ 12, Gen4 ≈ 24, Gen5 ≈ 48 GB/s per direction after encoding.
GPU_GENERATIONS: dict[str, GpuGeneration] = {
    g.name: g
    for g in (
        GpuGeneration("v100", 70, 6, 25.0, 12.0, False, "NVIDIA V100 SXM2 datasheet: 6 NVLink2 links, 300 GB/s total"),
        GpuGeneration("a100", 80, 12, 25.0, 24.0, False, "NVIDIA A100 SXM4 datasheet: 12 NVLink3 links, 600 GB/s"),
        GpuGeneration("h100", 90, 18, 25.0, 48.0, True, "NVIDIA H100 SXM5 datasheet: 18 NVLink4 links, 900 GB/s"),
        GpuGeneration("h200", 90, 18, 25.0, 48.0, True, "NVIDIA H200 SXM datasheet: 18 NVLink4 links, 900 GB/s"),
        GpuGeneration("h800", 90, 8, 25.0, 48.0, True, "NVIDIA H800 SXM5: 8 NVLink4 links, 400 GB/s"),
        GpuGeneration("b200", 100, 18, 50.0, 48.0, True, "NVIDIA HGX B200 datasheet: 18 NVLink5 links, 1.8 TB/s"),
        GpuGeneration("gb200", 100, 18, 50.0, 48.0, True, "NVIDIA GB200 NVL72 datasheet: NVLink5, 1.8 TB/s per GPU"),
        GpuGeneration("a800", 80, 8, 25.0, 24.0, False, "NVIDIA A800 SXM4: 8 NVLink3 links, 400 GB/s"),
        GpuGeneration("h20", 90, 18, 25.0, 48.0, True, "NVIDIA H20: 18 NVLink4 links, 900 GB/s"),
        GpuGeneration("gh200", 90, 18, 25.0, 48.0, True, "NVIDIA GH200 datasheet: 18 NVLink4 links, 900 GB/s"),
        GpuGeneration("l40s", 89, 0, 0.0, 24.0, False, "NVIDIA L40S datasheet: no NVLink, PCIe Gen4 x16"),
        GpuGeneration("rtx5090", 120, 0, 0.0, 48.0, False, "NVIDIA GeForce RTX 5090: no NVLink, PCIe Gen5 x16"),
        GpuGeneration(
            "mi300x",
            90,
            7,
            64.0,
            48.0,
            False,
            "AMD Instinct MI300X datasheet: 7 Infinity Fabric links, 64 GB/s each per direction (RCCL runs it as NCCL "
            "does; NCCL's constants of compute capability 9.0 stand in for it)",
        ),
    )
}

#: How the GPUs of a node are connected: an NVSwitch, direct NVLink links between every pair, or PCIe (through
#: the host: GeForce cards have no peer-to-peer, so their transfers go through host memory).
INTRA_KINDS = ("nvswitch", "nvlink", "pcie")


@dataclass(frozen=True)
class Fabric:
    """A kind of inter-node fabric.

    Attributes:
        name: ``ib``, ``roce``, ``efa``, ``slingshot`` or ``tcpxo``.
        nic_latency: one NIC's share of a message's latency (ns): the adapter, its PCIe hop and the transport's
            software on the host, as the fabric's documentation and published small-message latencies give it.
        source: where the figure comes from.
    """

    name: str
    nic_latency: float
    source: str


#: Fabric kinds by name. ``nic_latency`` is one end's share of the one-way small-message latency.
FABRICS: dict[str, Fabric] = {
    f.name: f
    for f in (
        Fabric("ib", 1_000.0, "InfiniBand HDR/NDR: ~2 us one-way small-message latency through a fat tree (NVIDIA)"),
        Fabric("roce", 2_000.0, "RoCEv2: ~4 us one-way small-message latency (cloud RDMA cluster networks)"),
        Fabric("efa", 8_000.0, "AWS EFA (SRD): ~15-20 us one-way small-message latency through libfabric (AWS)"),
        Fabric("slingshot", 1_500.0, "HPE Slingshot 11 (Cassini): ~2-3 us one-way MPI latency (HPE, ALCF)"),
        Fabric("tcpxo", 10_000.0, "Google GPUDirect-TCPXO: TCP-based, ~20 us one-way small-message latency"),
    )
}


@dataclass(frozen=True)
class GpuCluster:
    """The hardware of a ``gpu_cluster`` topology (see the module docstring).

    Attributes:
        gpu: the GPU generation.
        gpus_per_node: GPUs of one node (of one NVLink domain: an NVL72 rack is one).
        nodes: nodes.
        intra: one of :data:`INTRA_KINDS`.
        nvlink_bandwidth: per GPU and direction, over all its NVLink links (bytes per ns).
        nvls: the node's NVSwitch reduces in the switch.
        nics_per_node: NICs of a node.
        nic_bandwidth: per NIC and direction (bytes per ns).
        fabric: the fabric the NICs join.
        sharp: the fabric's switches reduce (SHARP).
        pcie_bandwidth: a GPU's PCIe link (to its NIC, or to the host), per direction (bytes per ns).
    """

    gpu: GpuGeneration
    gpus_per_node: int
    nodes: int
    intra: str
    nvlink_bandwidth: float
    nvls: bool
    nics_per_node: float
    nic_bandwidth: float
    fabric: Fabric
    sharp: bool
    pcie_bandwidth: float

    def __post_init__(self) -> None:
        if self.intra not in INTRA_KINDS:
            raise TopologyError(f"intra: expected one of {', '.join(INTRA_KINDS)}, got {self.intra!r}")

    @property
    def gpus(self) -> int:
        """GPUs in all."""
        return self.gpus_per_node * self.nodes

    def node_of(self, rank: int) -> int:
        """The node of GPU *rank* (ranks fill a node before the next)."""
        return rank // self.gpus_per_node

    def local_rank(self, rank: int) -> int:
        """GPU *rank*'s index in its node."""
        return rank % self.gpus_per_node
