"""What NCCL's topology search finds for a communicator: its channels and their bandwidths, per algorithm.

NCCL searches paths for rings, trees and NVLS heads at init (its ``src/graph/search.cc``; etsim models NCCL 2.8 to
2.29, the details in ``docs/nccl.md``). This module replays the documented rules in closed form from the hardware
(``network/hardware.py``), so the tuner (``tuner.py``) sees the bandwidths NCCL's own tuner sees:

- a speed ladder per GPU generation, with and without NICs: the first speed a path can carry;
- as many channels as fit on a GPU's NVLink (NCCL's own per-link figure: 20 GB/s on A100, 20.6 on H100, 40.1 on
  Blackwell) or, across nodes, one per NIC that carries the speed;
- channels duplicated at half the bandwidth when the bandwidth is 25 GB/s or more (not on Hopper and later when it
  is under 50 with more than 4 channels);
- NVLS: one head per GPU of the node, whose NVLink carries heads + 1 times the head bandwidth;
- the communicator's CUDA channels: twice the ring's, doubled again on Hopper multi-node when under 16.
"""

from __future__ import annotations

from dataclasses import dataclass

from etsim.network.hardware import GpuCluster
from etsim.system.algorithms.nccl.settings import NcclSettings

__all__ = ["Comm", "Graph", "Graphs", "channel_graphs", "nccl_link_bandwidth"]

# NCCL's speed ladders (GB/s), tried from the first: per compute capability, without and with NICs.
_LADDERS = {
    "old": ((40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3),
            (48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12)),
    "sm90": ((60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3),
             (48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12)),
    "sm100": ((90, 80, 70, 60, 50, 40, 30, 24, 20, 19, 18),
              (96, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12)),
}  # fmt: skip


def nccl_link_bandwidth(compute_capability: int) -> float:
    """NCCL's bandwidth of one NVLink link per direction (GB/s): what its search charges a path."""
    if compute_capability >= 100:
        return 40.1
    if compute_capability >= 90:
        return 20.6
    if compute_capability == 86:
        return 12.0
    return 20.0


def _pcie_bandwidth(bandwidth: float) -> float:
    """NCCL's PCIe figure for a link of *bandwidth* (its x16 Gen3/4/5 are 12/24/48 GB/s)."""
    for nccl in (96.0, 48.0, 24.0, 12.0):
        if bandwidth >= nccl * 0.9:
            return nccl
    return bandwidth


@dataclass(frozen=True)
class Comm:
    """A communicator as NCCL sees it: ranks, nodes (NVLink domains) and ranks per node, on *hardware*."""

    hardware: GpuCluster
    ranks: int
    nodes: int
    per_node: int
    #: every node holds as many of the communicator's GPUs (``per_node`` is the most any holds)
    even: bool = True

    @property
    def compute_capability(self) -> int:
        """The GPUs' compute capability (×10)."""
        return self.hardware.gpu.compute_capability

    @property
    def nvlink(self) -> bool:
        """GPUs of a node talk over NVLink (an NVSwitch or direct links), not PCIe."""
        return self.hardware.intra != "pcie"

    @property
    def nvlinks(self) -> float:
        """A GPU's NVLink links (its NVLink rate over the GPU's per-link rate; 0 without NVLink)."""
        hw = self.hardware
        return hw.nvlink_bandwidth / hw.gpu.nvlink_link_bandwidth if hw.gpu.nvlink_link_bandwidth else 0.0

    @property
    def nvlink_bandwidth(self) -> float:
        """A GPU's NVLink, per direction, in NCCL's figures (GB/s): its links × NCCL's per-link bandwidth."""
        return self.nvlinks * nccl_link_bandwidth(self.hardware.gpu.compute_capability)

    @property
    def nics(self) -> float:
        """NICs serving one node of the communicator (its share of the host's, when it uses part of a node)."""
        hw = self.hardware
        return hw.nics_per_node * self.per_node / hw.gpus_per_node

    @property
    def node_nic_bandwidth(self) -> float:
        """The line rate of those NICs together, per direction (GB/s)."""
        return self.nics * self.hardware.nic_bandwidth


@dataclass(frozen=True)
class Graph:
    """One pattern's search result: channels, bandwidth per channel inside and between nodes, NVLink or PCIe."""

    channels: int
    bw_intra: float
    bw_inter: float
    nvlink: bool = True


@dataclass(frozen=True)
class Graphs:
    """Every pattern's result, the communicator's CUDA channels, and what is enabled."""

    ring: Graph
    tree: Graph
    nvls: Graph | None
    collnet: Graph | None
    comm_channels: int
    nvls_channels: int
    ll128: bool


def _first(ladder: tuple[float, ...], limit: float) -> float:
    return next((v for v in ladder if v <= limit + 1e-9), ladder[-1])


def _duplicate(channels: int, bw: float, cc: int) -> tuple[int, float]:
    """Channels doubled at half the bandwidth when fast enough (NCCL's ncclTopoDupChannels)."""
    if bw >= 25 and not (cc > 80 and bw < 50 and channels > 4):
        return channels * 2, bw / 2
    return channels, bw


def _nvls_channels(cc: int, nodes: int, version: tuple[int, int]) -> int:
    """NVLS's channels (nvls.cc): 16; on Blackwell 32 from 2.25, and 24 inside one NVLink domain from 2.27."""
    if cc < 100 or version < (2, 25):
        return 16
    return 32 if nodes > 1 or version < (2, 27) else 24


def channel_graphs(comm: Comm, settings: NcclSettings) -> Graphs:
    """The search results for *comm* (see the module docstring)."""
    hw, cc = comm.hardware, comm.compute_capability
    nonet, net = _LADDERS["sm100" if cc >= 100 else "sm90" if cc >= 90 else "old"]
    if comm.nvlink:
        total = comm.nvlink_bandwidth
        path = total if hw.intra == "nvswitch" else total / max(1, hw.gpus_per_node - 1)
    else:
        total = path = _pcie_bandwidth(hw.pcie_bandwidth)
    if comm.nodes == 1:
        speed = _first(nonet, min(path, total))
        channels, bw = _duplicate(max(1, min(16, int(total // speed))), speed, cc)
        ring = tree = Graph(channels, bw, bw, comm.nvlink)
        comm_channels = min(64, 2 * channels)
    else:
        speed = _first(net, min(hw.nic_bandwidth, _pcie_bandwidth(hw.pcie_bandwidth), total))
        per_nic = max(1, int(hw.nic_bandwidth // speed))
        # The channel's exit GPU reaches its NIC over PCIe: a channel costs speed·(1 − 1/ppn) of each GPU's NVLink.
        fit = int(total // (speed * (1 - 1 / max(2, comm.per_node)))) if comm.per_node > 1 else 64
        searched = max(1, min(16, int(comm.nics * per_nic), fit))
        channels, bw = _duplicate(searched, speed, cc)
        ring = Graph(channels, bw, bw, comm.nvlink)
        # A tree has the ring's channels; NCCL's second pass may raise its intra-node bandwidth up to twice.
        raised = [v for v in net if speed < v <= min(2 * speed, total / searched) + 1e-9]
        share = channels / searched
        tree = Graph(channels, (max(raised) if raised else speed) / share, speed / share, comm.nvlink)
        comm_channels = 2 * channels
        if cc >= 90 and bw > 45 and comm_channels < 16:
            comm_channels *= 2
        comm_channels = min(64, comm_channels)
    if settings.min_channels is not None:
        comm_channels = max(comm_channels, settings.min_channels)
    if settings.max_channels is not None:
        comm_channels = min(comm_channels, settings.max_channels)
    # NCCL 2.17+ bounds every algorithm by its CTA knobs: rings and trees (connect.cc) and NVLS (nvls.cc) alike.
    low, high = settings.min_ctas or 1, settings.max_ctas or 64
    comm_channels = max(min(comm_channels, high), low)
    nvls = None
    nvls_channels = 0
    if hw.nvls and settings.nvls and comm.per_node > 2 and settings.version >= (2, 17):
        heads = min(comm.per_node, 32)
        inter = speed if comm.nodes > 1 else _first(nonet, total)
        nvls = Graph(heads, _first(nonet, total / (heads + 1)), inter, True)
        nvls_channels = max(min(_nvls_channels(cc, comm.nodes, settings.version), high), low)
    collnet = None
    if comm.nodes > 1 and hw.sharp and settings.collnet:
        collnet = Graph(tree.channels, tree.bw_intra, speed, comm.nvlink)
    ll128 = comm.nvlink and cc in (70, 80, 90, 100)
    return Graphs(ring, tree, nvls, collnet, comm_channels, nvls_channels, ll128)
