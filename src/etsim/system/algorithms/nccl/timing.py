"""How long NCCL's choice takes, beyond the bytes the network carries: per-call and per-step costs, channel rates.

A call of the ``nccl`` algorithm is a graph of messages the network model times (``graphs.py``: rings per channel
over the rails, trees and NVLS as their stages pipelined in chunks, peer-to-peer sends), plus fixed delays for what
is not bytes on links. :func:`plan_call` computes them from the hardware and NCCL's choice:

- **bytes on the wire**: the protocol's (LL carries 8 bytes of data in a 16-byte line: ×2; LL128 120 of 128: ×16/15;
  Simple ×1), scaled so that the topology's links deliver what NCCL reaches on them: NVLink at NCCL's own per-link
  figure (20 GB/s of an A100's 25, 20.6 of an H100's 25), NICs at the fabric's payload efficiency;
- **a fixed delay before the first message**: the kernel's start, the per-hop latency of the protocol along the
  algorithm's critical path (a network step adds the proxy's cost and the fabric's), the pipeline steps' overhead
  that NCCL's 8-slot FIFO does not hide, and a tree's fill; less the latency the network itself adds on that path;
- **a channel's throughput** (in parallel with the transfers): a CTA moves only so many bytes per second, and LL's
  8-byte stores with flag polling cap a GPU;
- **the host's launch** (in parallel with everything): one thread driving several GPUs launches their kernels one
  after another.

The constants are NCCL's where NCCL states them (protocol overheads, chunk sizes, NVLS efficiency) and otherwise
calibrated once on the ``nccl-tests`` measurements of ``../shared/reference/nccl-tests`` (``docs/nccl.md``: the fit,
its leave-one-group-out check, and what it does not model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from etsim.chakra.graph import CollectiveType
from etsim.system.algorithms.nccl.search import Comm, Graphs
from etsim.system.algorithms.nccl.settings import NcclSettings
from etsim.system.algorithms.nccl.tuner import MAX_THREADS, Choice

__all__ = [
    "FABRIC_TIMING",
    "FabricTiming",
    "Plan",
    "p2p_channel_scale",
    "p2p_channels",
    "p2p_message",
    "plan_call",
    "plan_p2p",
    "wire_overhead",
]

C = CollectiveType

#: Wire bytes per byte of data, by protocol.
_OVERHEAD = {"LL": 2.0, "LL128": 128.0 / 120.0, "Simple": 1.0}


@dataclass(frozen=True)
class FabricTiming:
    """What NCCL reaches on a fabric kind.

    Attributes:
        efficiency: payload fraction of the NIC line rate for large messages (headers, MTU).
        hop_us: a network step's latency beyond NCCL's proxy (wire, NIC, transport software).
        p2p_efficiency: the line-rate fraction many peer flows reach (all-to-all).
        peer_us: the serial cost of one remote peer of a grouped send/receive.
        small_peer_us: extra per remote peer when a peer's message is under 256 bytes.
    """

    efficiency: float
    hop_us: float
    p2p_efficiency: float
    peer_us: float
    small_peer_us: float = 0.0


#: Per fabric kind (``network/hardware.py``).
FABRIC_TIMING = {
    "ib": FabricTiming(0.96, 0.21, 0.93, 4.07),
    "roce": FabricTiming(0.93, 3.17, 0.85, 4.0),
    "efa": FabricTiming(0.97, 70.4, 0.8, 20.0),
    "slingshot": FabricTiming(0.727, 2.67, 0.396, 8.28, 11.0),
    "tcpxo": FabricTiming(0.6, 30.0, 0.5, 20.0),
}

# Calibrated constants (µs, GB/s; docs/nccl.md): a kernel's start; per-hop latency over NVLink at A100 speed and
# per network step, by protocol; the NVLS round and its per-chunk step; a CTA's throughput at A100 speed by protocol
# and LL's per-GPU cap; the exposed share of per-step latency in steady state (rings, trees) and a tree's fill.
T_KERNEL = 5.57
LAT_NVLINK = {"LL": 0.94, "LL128": 6.05, "Simple": 9.78}
LAT_NET = {"LL": 7.11, "LL128": 4.07, "Simple": 9.93}
LAT_NVLS, LAT_NVLS_STEP = 24.05, 2.30
CTA = {"LL": 5.18, "LL128": 6.62, "Simple": 42.9}
LL_CAP = 53.5
PHI_RING, PHI_TREE, FILL_TREE = 0.52, 0.076, 2.25
#: NVLS and the NVLS tree: the share of their fill a call of one round does not pay (the rest grows in as
#: ``1 − NVLS_RAMP / rounds``); the NVLS tree's fixed cost across nodes (µs) beyond the NVLS round and the network
#: steps.
NVLS_RAMP, NVLS_TREE_FIXED = 0.9, 15.0
LAT_GEN_EXPONENT = 0.63
#: A tree's hop over NVLink against a ring's, by protocol: NCCL's own ratio (its tuning table's NVLink latencies,
#: 2.27: tree 0.6 / 1.25 / 4.0 µs, ring 0.6 / 1.9 / 3.4), applied to the per-hop latencies above (fitted on rings).
TREE_HOP = {"LL": 1.0, "LL128": 1.25 / 1.9, "Simple": 4.0 / 3.4}
MESH_LATENCY, HOST_LATENCY = 0.82, 2.0
#: A ring's hop through host memory with Simple on its path to the first message (µs): NCCL's own PCI figure (its
#: tuning table, 2.18–2.29), which the RTX 5090 table's Simple rows show (about 30 µs over a 4-GPU all-reduce's 6
#: hops); the steps' exposed overhead keeps the fitted hop.
HOST_SIMPLE_HOP = 5.7
#: The host's cost of launching one collective on one GPU, and of one send or receive of a grouped p2p operation.
HOST_PER_GPU, HOST_PER_P2P = 4.2, 0.42
#: Grouped p2p: its fixed cost inside a node; the NVLink fraction peer copies reach.
LAT_P2P, P2P_NVLINK = 17.45, 0.895
#: A CTA's speed relative to an A100's, by compute capability (NCCL's per-channel ring bandwidth: 20, 30, 45).
_GENERATION = {70: 1.0, 80: 1.0, 90: 1.5, 100: 2.25, 120: 1.5}
#: The NVSwitch's reduction efficiency (NCCL 2.28: Hopper 0.85, Blackwell 0.74; an NVL72 rack's trays 0.6).
_NVLS_EFFICIENCY = {90: 0.85, 100: 0.74}
NVL72_NVLS_EFFICIENCY = 0.6
#: NCCL's p2p chunk over NVLink (its ``NCCL_P2P_NVL_CHUNKSIZE``, 512 KiB): a peer gets a channel per 1/8 chunk of its
#: message and more while a channel's part exceeds 32 chunks (2.29 ``addP2pToPlan``, one node).
P2P_NVL_CHUNK = 512 << 10
#: What one p2p channel of a send/receive pair moves per direction at A100 speed (GB/s): the send has about half of
#: its CTA's warps, the receive the rest (2.29 ``sendrecv.h``; a send without a receive has them all). Fitted on the
#: 8×H100 ``sendrecv`` table, whose 32 and 64 MiB rows run on 4 channels and 128 MiB on 8: their times less the
#: call's 23 µs give 21 GB/s a channel on H100.
P2P_CHANNEL = 14.0
#: PAT's latency as NCCL models it (2.23-2.29 tuning.cc): a tree level costs a 3.5th of a network step; 2.8 µs a
#: rank remain linear.
PAT_LEVEL_OVERLAP, PAT_PER_RANK = 3.5, 2.8
#: Host-staged copies (GPUs without peer access) reach this fraction of the PCIe rate.
SHM_EFFICIENCY = 0.55
# NCCL's pipeline granularity: a Simple step (4 MiB buffer / 8 steps), LL and LL128 steps, NVLS chunks.
_SIMPLE_STEP = (4 << 20) // 8
_LL_STEP, _LL128_STEP, _NVLS_CHUNK = 32 << 10, 576_000, 128 << 10


#: A chain's chunks (broadcast, reduce): NCCL's steps, at most 16 per hop (the fill then costs at most 1/16 more
#: than NCCL's) and 1024 in all.
CHAIN_CHUNKS_PER_HOP, CHAIN_CHUNKS = 16, 1024
#: The most messages a staged algorithm's call is given (its chunks are cut to fit).
STAGED_MESSAGES = 200_000


def wire_overhead(protocol: str) -> float:
    """Wire bytes per data byte of *protocol*."""
    return _OVERHEAD[protocol]


@dataclass(frozen=True)
class Plan:
    """How the graph of one call is timed besides its bytes (see the module docstring); times in ns.

    Attributes:
        choice: NCCL's choice.
        intra_scale: wire bytes per data byte of a message inside a node (protocol × link efficiency).
        inter_scale: the same between nodes.
        fixed_ns: the delay before the first message (kernel start and latencies of the critical path, less the
            network's own latency there).
        cta_ns: the channels' own throughput bound, in parallel with the transfers.
        host_ns: the host's launch, in parallel with everything.
        chunks: pipeline chunks of a multi-stage algorithm (tree, NVLS tree, CollNet).
    """

    choice: Choice
    intra_scale: float
    inter_scale: float
    fixed_ns: float
    cta_ns: float
    host_ns: float
    chunks: int


def _generation(comm: Comm) -> float:
    return _GENERATION.get(comm.compute_capability, 1.0)


def _fabric(comm: Comm) -> FabricTiming:
    return FABRIC_TIMING[comm.hardware.fabric.name]


def _lat_intra(comm: Comm, protocol: str) -> float:
    latency = LAT_NVLINK[protocol] / _generation(comm) ** LAT_GEN_EXPONENT
    if comm.hardware.intra == "pcie":
        return latency * HOST_LATENCY
    return latency * MESH_LATENCY if comm.hardware.intra == "nvlink" else latency


def _lat_net(comm: Comm, protocol: str) -> float:
    if comm.nodes == 1:
        return 0.0
    # LL's network step is the GPUs' own flag polling on either side of the proxy: it speeds up with the GPU
    # generation as LL's NVLink hop does (the 2- and 4-node H100 trees at 8 B-4 KiB: 25 and 35 µs).
    scale = _generation(comm) ** LAT_GEN_EXPONENT if protocol == "LL" else 1.0
    return LAT_NET[protocol] / scale + _fabric(comm).hop_us


def _intra_rate(comm: Comm) -> float:
    """What NCCL reaches per GPU inside a node (GB/s per direction)."""
    hw = comm.hardware
    if hw.intra == "pcie":
        return hw.pcie_bandwidth * SHM_EFFICIENCY
    return comm.nvlink_bandwidth


def _nvls_efficiency(comm: Comm) -> float:
    if comm.hardware.gpus_per_node > 8:  # an NVLink domain of trays (NVL72), not one baseboard's NVSwitches (the
        # hardware's, not the group's: 9 GPUs of a rack ran slower than 8 of it)
        return NVL72_NVLS_EFFICIENCY
    return _NVLS_EFFICIENCY.get(min(comm.compute_capability, 100), 0.8)


def _cta_inverse(comm: Comm, protocol: str, channels: int, threads: int) -> float:
    """Ns per byte a channel needs on the GPU side: its CTA's rate, in series with its share of LL's cap."""
    rate = CTA[protocol] * _generation(comm)
    if protocol == "Simple":
        rate *= min(1.0, threads / MAX_THREADS["Simple"])
    inverse = 1.0 / rate
    if protocol == "LL":
        inverse += channels / (LL_CAP * _generation(comm))
    return inverse


def _step_bytes(comm: Comm, algo: str, protocol: str, nbytes: float, channels: int, heads: int, kind: C) -> float:
    """Data one channel moves per pipeline step (NCCL's chunking)."""
    if algo == "Ring":
        if protocol == "LL":
            return _LL_STEP
        if protocol == "LL128":
            return _LL128_STEP
        return _SIMPLE_STEP * (1 if kind in (C.BROADCAST, C.REDUCE) else 2)
    if algo == "Tree":
        if protocol == "LL":
            return _LL_STEP
        if protocol == "Simple":
            return _SIMPLE_STEP
        chunk = _LL128_STEP
        scale = 1 + max(0, int(comm.nodes).bit_length() - 1) + 0.1 * comm.per_node
        while nbytes / (channels * chunk) < scale * 64 / comm.per_node and chunk > 131072:
            chunk //= 2
        while nbytes / (channels * chunk) < scale * 16 / comm.per_node and chunk > 32768:
            chunk //= 2
        return chunk
    if algo in ("NVLS", "NVLSTree"):
        ops = channels * heads
        chunk = _NVLS_CHUNK if (algo == "NVLS" or comm.nodes < 4) else _NVLS_CHUNK // 2
        for factor, smaller in ((64, 65536), (8, 32768), (2, 16384)) if algo == "NVLS" else ((4, 65536), (1, 32768)):
            if nbytes < factor * ops * chunk and chunk > smaller:
                chunk = smaller
        return chunk
    chunk = 256 << 10  # CollNet
    depth = 2 * (comm.per_node - 1) + 2
    while nbytes / (channels * chunk) < depth * 64 and chunk > 131072:
        chunk //= 2
    while nbytes / (channels * chunk) < depth * 8 and chunk > 65536:
        chunk //= 2
    return chunk


def _staged_chunks(steps: float, comm: Comm) -> int:
    """Chunks a staged algorithm's graph pipelines.

    NCCL's steps, at most 8, or 4 per tree level across nodes (the graph's fill stays a small share of its time);
    fewer where the call's graph would pass :data:`STAGED_MESSAGES` messages (a fill of a few steps more on
    thousands of GPUs, where the tree is deep and the call long).
    """
    depth = max(0, comm.nodes.bit_length() - 1)
    per_chunk = comm.ranks * (2 * (comm.per_node - 1) + 6)  # the node's exchanges and two trees, per rank
    budget = max(1, STAGED_MESSAGES // per_chunk)
    return max(1, min(math.ceil(steps), max(8, 4 * depth), budget))


def plan_call(
    comm: Comm, graphs: Graphs, choice: Choice, kind: CollectiveType, nbytes: float, settings: NcclSettings,
    network_latency_ns: float,
) -> Plan:  # fmt: skip
    """The timing of one call of *nbytes* (NCCL's byte count) given NCCL's *choice*.

    *network_latency_ns* is the latency the network adds along the graph's critical path (the caller's graph
    knows its routes); the fixed delay leaves it out.
    """
    n, nodes, ppn = comm.ranks, comm.nodes, comm.per_node
    algo, proto, channels = choice.algorithm, choice.protocol, max(1, choice.channels)
    overhead = _OVERHEAD[proto]
    li, ln = _lat_intra(comm, proto), _lat_net(comm, proto)
    heads = graphs.nvls.channels if graphs.nvls is not None else 1
    step = _step_bytes(comm, algo, proto, nbytes, channels, heads, kind)
    fill_ns = 0.0
    chunks = 1
    if algo == "PAT":
        # NCCL's own PAT latency (2.23+ tuning.cc): a network step per tree level at a 3.5th of its cost (the levels
        # overlap), plus a part still linear in the ranks; its volume is the ring's, in ⌈log₂ n⌉ exchanges.
        tree_levels = max(1, n.bit_length() - 1)  # (NCCL's log2i: rounded down, as the tuner's estimate)
        path = tree_levels * ln / PAT_LEVEL_OVERLAP + n * PAT_PER_RANK
        volume = (n - 1) / n * nbytes * overhead / channels
        overhead_us = 0.0
    elif algo == "Ring":
        if kind == C.ALL_REDUCE:
            steps, net_steps = 2 * (n - 1), 2 * (nodes - 1)
            share = 2.0 * (n - 1) / n
        else:
            steps, net_steps = n - 1, nodes - 1
            share = (n - 1) / n if kind in (C.ALL_GATHER, C.REDUCE_SCATTER) else 1.0
        hop = HOST_SIMPLE_HOP if proto == "Simple" and comm.hardware.intra == "pcie" else li
        path = (steps - net_steps) * hop + net_steps * ln
        volume = share * nbytes * overhead / channels
        if kind in (C.BROADCAST, C.REDUCE):
            payload = min(step, nbytes / channels)
            total_steps, first = nbytes / channels / payload if payload else 1.0, 1
        else:
            payload = min(step, nbytes / (n * channels))
            total_steps, first = (steps * nbytes / (n * channels * payload) if payload else 1.0), steps
        overhead_us = max(0.0, total_steps - first) * PHI_RING * li
        if kind in (C.BROADCAST, C.REDUCE):  # a chain's fill is one of NCCL's steps per hop: as many chunks
            chunks = max(1, min(math.ceil(total_steps), CHAIN_CHUNKS_PER_HOP * (n - 1), CHAIN_CHUNKS))
    elif algo == "Tree":
        li *= TREE_HOP[proto]
        depth = (ppn - 1) + max(0, nodes.bit_length() - 1)
        path = 2 * ((ppn - 1) * li + max(0, nodes.bit_length() - 1) * ln)
        volume = nbytes * overhead / channels
        payload = min(step, nbytes / channels)
        total_steps = nbytes / channels / payload if payload else 1.0
        overhead_us = max(0.0, total_steps - 1) * PHI_TREE * (max(li, ln) if nodes > 1 else li)
        if proto == "Simple":
            fill_ns = FILL_TREE * (2 * depth - 1) * payload * overhead * _cta_inverse(comm, proto, channels, 512)
        chunks = _staged_chunks(total_steps, comm)
    elif algo in ("NVLS", "NVLSTree"):
        path = LAT_NVLS + (2 * max(0, nodes.bit_length() - 1) * ln if algo == "NVLSTree" else 0.0)
        volume = nbytes * (1 + 1.0 / ppn) / channels
        total_steps = max(1.0, nbytes / (channels * heads * step))
        per_step = max(LAT_NVLS_STEP, ln) if algo == "NVLSTree" else LAT_NVLS_STEP
        overhead_us = max(0.0, total_steps - 1) * (PHI_TREE if algo == "NVLSTree" else 1.0) * per_step
        chunks = _staged_chunks(total_steps, comm) if algo == "NVLSTree" else 1
        # A round is a chunk of every channel and head. A call of one round is the graph's own single chunk end to
        # end; the fill grows in as rounds pipeline: FILL_TREE rounds through a GPU's NVLS link or, across nodes,
        # through the NICs at each tree level, whichever stage is slower.
        round_bytes = min(step, nbytes / (channels * heads)) * channels * heads
        ramp = 1.0 - NVLS_RAMP / total_steps
        fill_ns = FILL_TREE * round_bytes / (comm.nvlink_bandwidth * _nvls_efficiency(comm)) * ramp
        if algo == "NVLSTree" and nodes > 1:
            nics = comm.node_nic_bandwidth * _fabric(comm).efficiency
            levels = FILL_TREE * 2 * max(0, nodes.bit_length() - 1) * round_bytes / nics * ramp
            fill_ns = max(fill_ns, levels) + NVLS_TREE_FIXED * 1000.0
    else:  # CollNet
        chain = algo == "CollNetChain"
        path = (2 * (ppn - 1) * li if chain else LAT_NVLS) + 2 * ln
        volume = (2 * nbytes if chain else nbytes * (1 + 1.0 / ppn)) / channels
        payload = min(step, nbytes / channels)
        total_steps = nbytes / channels / payload if payload else 1.0
        overhead_us = max(0.0, total_steps - 1) * PHI_TREE * max(li, ln)
        chunks = _staged_chunks(total_steps, comm)
    cta_ns = volume * _cta_inverse(comm, proto, channels, choice.threads)
    if algo == "Tree":
        cta_ns *= 2  # up and down
    # The channels' bound runs beside the messages, after the fixed delay, which leaves out the network's latency
    # on the path: the bound pays it (the messages do).
    cta_ns += network_latency_ns
    fixed_ns = max(0.0, (T_KERNEL + path + overhead_us) * 1000.0 + fill_ns - network_latency_ns)
    intra = overhead * comm.hardware.nvlink_bandwidth / _intra_rate(comm) if comm.hardware.intra != "pcie" else (
        overhead * comm.hardware.pcie_bandwidth / _intra_rate(comm))  # fmt: skip
    if algo in ("NVLS", "NVLSTree") or (algo == "CollNetDirect"):
        intra = comm.hardware.nvlink_bandwidth / (comm.nvlink_bandwidth * _nvls_efficiency(comm))
    inter = overhead / _fabric(comm).efficiency if nodes > 1 else overhead
    host_ns = _launched(comm, settings) * HOST_PER_GPU * 1000.0
    return Plan(choice, intra, inter, fixed_ns, cta_ns, host_ns, chunks)


def _launched(comm: Comm, settings: NcclSettings) -> int:
    """The GPUs one thread launches the call on: those it drives that are in the communicator.

    A process's GPUs are of one node: two ranks of two nodes launch one each, however many GPUs each process drives.
    """
    return min(settings.gpus_per_process, comm.per_node)


#: A call of no bytes from NCCL 2.20: ``ncclEnqueueCheck`` returns at once ("Empty collectives can be discarded"),
#: with no kernel and no wait for the other ranks.
DISCARDED = Plan(Choice("discarded", "-", 0, 0, 0.0), 1.0, 1.0, 0.0, 0.0, 0.0, 1)


def plan_p2p(
    comm: Comm, settings: NcclSettings, peer_bytes: float, remote_peers: int, network_latency_ns: float = 0.0,
    comm_channels: int = 0,
) -> Plan:  # fmt: skip
    """The timing of a grouped send/receive to every peer (all-to-all): NCCL's peer scheme, Simple protocol.

    *network_latency_ns*: the latency the network adds to the farthest peer's message (the fixed delay leaves it
    out). *comm_channels*: the communicator's CUDA channels when it is one NVSwitch node, whose peers' channels
    bound small messages (:func:`p2p_channel_scale`); 0 elsewhere.
    """
    fabric = _fabric(comm) if comm.nodes > 1 else None
    latency = T_KERNEL + LAT_P2P
    if fabric is not None and remote_peers:
        latency += _lat_net(comm, "Simple") + remote_peers * (
            fabric.peer_us + (fabric.small_peer_us if peer_bytes < 256 else 0.0)
        )
    intra = comm.hardware.nvlink_bandwidth / (_intra_rate(comm) * P2P_NVLINK) if comm.nvlink else 1 / SHM_EFFICIENCY
    if comm_channels and comm.ranks > 1:  # every other rank a peer, each on its channels (as a workload's sends)
        intra = p2p_channel_scale(comm, comm_channels, peer_bytes, comm.ranks - 1)
    inter = 1.0 / fabric.p2p_efficiency if fabric is not None else 1.0
    host_ns = _launched(comm, settings) * HOST_PER_P2P * 2 * comm.ranks * 1000.0
    choice = Choice("P2P", "Simple", 1, 512, 0.0)
    fixed_ns = max(0.0, latency * 1000.0 - network_latency_ns)
    if _launched(comm, settings) > 1:  # one thread enqueues every GPU's sends before any starts
        return Plan(choice, intra, inter, fixed_ns + host_ns, 0.0, 0.0, 1)
    return Plan(choice, intra, inter, fixed_ns, 0.0, host_ns, 1)


def p2p_channels(comm: Comm, comm_channels: int, nbytes: float) -> int:
    """The channels NCCL gives one send of *nbytes* to a peer in a communicator of one node (NVSwitch).

    The communicator's p2p channels are its CUDA channels *comm_channels* rounded up to a power of two; a peer may
    use as many of them as twice its NVLinks to the other GPU, rounded up to a power of two; it starts with its share
    (that, halved until every rank's share fits, at least one), at most one per 1/8 NVLink chunk of the message, and
    doubles them while a channel's part exceeds 32 chunks, up to its most (NCCL 2.29
    ``ncclTopoComputeP2pChannels``, ``ncclTopoComputeP2pChannelsPerPeer``, ``addP2pToPlan``). An 8-rank H100
    communicator: 4 channels up to 64 MiB, 8 at 128 MiB, 16 at 256 MiB, 32 from 512 MiB.
    """
    total = _pow2_up(comm_channels)
    most = min(total, _pow2_up(2 * max(1, round(comm.nvlinks))))
    share = most
    while share * comm.ranks > total and share > 1:
        share //= 2
    least_part, most_part = P2P_NVL_CHUNK // 8, 32 * P2P_NVL_CHUNK
    channels = max(1, min(share, math.ceil(nbytes / least_part)))
    part = max(least_part, math.ceil(nbytes / channels))
    while part > most_part and channels <= most // 2:
        channels *= 2
        part = math.ceil(nbytes / channels)
    return channels


def _pow2_up(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def p2p_channel_scale(
    comm: Comm, comm_channels: int, nbytes: float, peers: int = 1, receives: bool = True
) -> float:  # fmt: skip
    """Wire bytes per byte of a send of *nbytes* in a one-node NVSwitch communicator.

    Its rank sends to *peers* peers in one group call, each message on its own channels (:func:`p2p_channels` ×
    :data:`P2P_CHANNEL`, twice that when the call *receives* nothing: the send then has its CTAs' every warp), all
    through one NVLink: the slower of their channels together and NVLink's peer copy sets the rate the *peers*
    messages share.
    """
    nvlink = _intra_rate(comm) * P2P_NVLINK
    per_channel = P2P_CHANNEL * _generation(comm) * (1 if receives else 2)
    return comm.hardware.nvlink_bandwidth / min(nvlink, peers * p2p_channels(comm, comm_channels, nbytes) * per_channel)


def p2p_message(comm: Comm, remote: bool) -> tuple[float, float]:
    """A lone ncclSend/ncclRecv pair: wire bytes per byte and NCCL's latency before the network's (ns).

    Inside a node a peer copy reaches :data:`P2P_NVLINK` of NCCL's NVLink figure (host memory at
    :data:`SHM_EFFICIENCY` of PCIe without NVLink) after the kernel's start and the grouped operation's fixed cost;
    across nodes the fabric's many-flow efficiency after a network step of the Simple protocol.
    """
    if remote:
        fabric = _fabric(comm)
        return 1.0 / fabric.p2p_efficiency, (T_KERNEL + _lat_net(comm, "Simple")) * 1000.0
    if not comm.nvlink:
        return 1.0 / SHM_EFFICIENCY, (T_KERNEL + LAT_P2P) * 1000.0
    return comm.hardware.nvlink_bandwidth / (_intra_rate(comm) * P2P_NVLINK), (T_KERNEL + LAT_P2P) * 1000.0
