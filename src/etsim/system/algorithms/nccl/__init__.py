"""``nccl``: collectives as NCCL runs them on a GPU cluster (``docs/nccl.md``).

Per call, NCCL's own tuner chooses the algorithm (Ring, Tree, NVLS, NVLS tree, CollNet, PAT), the protocol (LL,
LL128, Simple) and the channels (``tuner.py``, on the channels its topology search finds, ``search.py``); the call
then runs as that algorithm's messages over the topology, timed by the network model, with NCCL's per-call and
per-step costs as fixed delays (``graphs.py``, ``timing.py``). All-to-all is NCCL's grouped send to every peer.
NCCL's knobs are the system YAML's ``nccl:`` (``settings.py``); the hardware is the ``gpu_cluster`` topology's
(``Topology.hardware``). Results name what was chosen: ``nccl:Ring/Simple/24`` (algorithm, protocol, channels).
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from etsim.algo.graph import AlgoGraph
from etsim.chakra.graph import CollectiveType, algorithm_collective, collective_buffer_bytes
from etsim.errors import ConfigError, warn
from etsim.network.hardware import GpuCluster
from etsim.network.topology import Topology
from etsim.system.algorithms.base import ALGORITHMS, CollectiveAlgorithm
from etsim.system.algorithms.nccl.graphs import Layout, build_graph, pat_steps, ring_steps, rotation_invariant
from etsim.system.algorithms.nccl.search import Comm, channel_graphs
from etsim.system.algorithms.nccl.settings import NcclSettings, forced
from etsim.system.algorithms.nccl.timing import (
    DISCARDED,
    Plan,
    p2p_channel_scale,
    p2p_message,
    plan_call,
    plan_p2p,
)
from etsim.system.algorithms.nccl.tuner import UNEVEN, choose
from etsim.system.algorithms.sources import SOURCES, AlgorithmContext, AlgorithmSource
from etsim.system.p2p import P2pPair

__all__ = ["NcclAlgorithm", "NcclCall", "NcclSettings", "NcclSource"]

C = CollectiveType
_COLLECTIVES = frozenset({C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER, C.ALL_TO_ALL, C.BROADCAST, C.REDUCE})


@ALGORITHMS.register("nccl")
class NcclAlgorithm(CollectiveAlgorithm):
    """NCCL's choice and timing per call (see the module docstring); :meth:`for_call` gives a call's algorithm.

    Args:
        topology: the run's topology (a ``gpu_cluster`` naming its GPUs), or None (an error when a call needs it).
        settings: NCCL's knobs.
    """

    name = "nccl"
    collectives = _COLLECTIVES
    #: Built with the run's topology and NCCL settings (``AlgorithmContext``).
    needs_context = True

    #: Give a call whose positions all see the same one graph with relative peers (False: a graph per position,
    #: the general path the shared one is checked against in the tests).
    share_graphs: ClassVar[bool] = True

    def __init__(self, topology: Topology | None = None, settings: NcclSettings | None = None) -> None:
        self.topology = topology
        self.settings = settings or NcclSettings()
        self._calls: dict[tuple[int, int, tuple[int, ...]], NcclCall] = {}
        self._routes: dict[tuple[int, int], float] = {}
        self._uneven: set[tuple[int, ...]] = set()  # groups warned of

    def hardware(self) -> GpuCluster:
        """The cluster's hardware; a clear error when the topology does not describe one."""
        hw = getattr(self.topology, "hardware", None)
        if not isinstance(hw, GpuCluster):
            raise ConfigError(
                "algorithm 'nccl' runs collectives as NCCL does on a GPU cluster: the topology must be a "
                "'kind: gpu_cluster' that names its GPUs (gpu: a100, h100, …, or a preset such as dgx-h100)"
            )
        if self.settings.gpus_per_process > hw.gpus_per_node:
            raise ConfigError(
                f"nccl: gpus_per_process {self.settings.gpus_per_process} is more than a node's "
                f"{hw.gpus_per_node} GPUs (one process drives GPUs of its own node: nccl-tests -g N)"
            )
        return hw

    @property
    def serves_p2p(self) -> bool:
        """Workload send/receive run as NCCL's (``settings.p2p``, on a cluster whose hardware is described)."""
        return self.settings.p2p and isinstance(getattr(self.topology, "hardware", None), GpuCluster)

    def p2p_pair(
        self, src: int, dst: int, group: tuple[int, ...] | None = None, peers: int = 1, receives: bool = False
    ) -> P2pPair:
        """How ncclSend/ncclRecv carry workload messages from NPU *src* to *dst*: (wire scale, delay ns, by size).

        *group* is the communicator the sends run on (their node's ``pg_name``); None: the pair's own, as PyTorch
        gives a lone send. In a communicator of one NVSwitch node the channels NCCL gives a send by its size bound
        its rate, added up over the *peers* its rank sends to in one group call, which *receives* or not
        (``timing.p2p_channel_scale``): the third item then gives a message's wire bytes per byte from its size,
        and the first is unused. Across nodes, and on direct NVLink or PCIe, the pair's peer copy or the fabric sets
        a scale for every size (the third item is None). The delay is NCCL's latency less the network's own on the
        route (the message pays that).
        """
        hw = self.hardware()
        if group is not None and not (src in group and dst in group):
            group, peers = None, 1  # a group without the pair cannot carry it: the pair's own communicator
        remote = hw.node_of(src) != hw.node_of(dst)
        one_node = not remote and (group is None or len({hw.node_of(r) for r in group}) == 1)
        if one_node and group is not None:
            comm = Comm(hw, len(group), 1, len(group))
        else:  # the pair's own, or a pair of a group across nodes, whose split here is not modelled
            comm = Comm(hw, 2, 2 if remote else 1, 1 if remote else 2)
        scale, latency = p2p_message(comm, remote)
        delay = max(0.0, latency - self._route_latency(src, dst))
        if not (one_node and hw.intra == "nvswitch"):
            return scale, delay, None
        channels = channel_graphs(comm, self.settings).comm_channels
        # A pair sends few distinct sizes in a step (its imbalanced all-to-alls more): the recent ones are kept.
        return (
            scale,
            delay,
            functools.lru_cache(maxsize=1024)(
                functools.partial(p2p_channel_scale, comm, channels, peers=peers, receives=receives)
            ),
        )

    def p2p_message(
        self,
        src: int,
        dst: int,
        nbytes: float,
        group: tuple[int, ...] | None = None,
        peers: int = 1,
        receives: bool = False,
    ) -> tuple[float, float]:
        """One message of *nbytes* as :meth:`p2p_pair` carries it: (wire bytes, delay ns)."""
        scale, delay, sized = self.p2p_pair(src, dst, group, peers, receives)
        return float(round(nbytes * (scale if sized is None else sized(nbytes)))), delay

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """The collectives NCCL runs, on a cluster whose hardware the topology describes."""
        reason = super().supports(collective, group_size)
        if reason is None and not isinstance(getattr(self.topology, "hardware", None), GpuCluster):
            return "algorithm 'nccl' needs a 'kind: gpu_cluster' topology that names its GPUs (gpu: …, or a preset)"
        return reason

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """Not available before the call is known (:meth:`for_call`)."""
        raise ConfigError("algorithm 'nccl' chooses per call: its graphs need the call's size and group")

    def for_call(self, collective: CollectiveType, size: int, group: tuple[int, ...]) -> CollectiveAlgorithm:
        """The algorithm of one call: NCCL's choice for *collective* of *size* bytes over *group*."""
        if collective not in self.collectives:  # (unbound: supports() says why, where a KeyError escaped)
            return self
        key = (int(collective), size, group)
        found = self._calls.get(key)
        if found is None:
            found = self._calls[key] = self._call(collective, size, group)
        return found

    def _call(self, collective: CollectiveType, size: int, group: tuple[int, ...]) -> NcclCall:
        hw = self.hardware()
        n = len(group)
        layout = Layout([hw.node_of(r) for r in group], [0] * n)
        layout = Layout(layout.nodes, [layout.by_node[node].index(p) for p, node in enumerate(layout.nodes)])
        even = len({len(members) for members in layout.by_node.values()}) == 1
        comm = Comm(hw, n, len(layout.node_ids), layout.per_node, even)
        if not even and collective != C.ALL_TO_ALL and group not in self._uneven:
            self._uneven.add(group)
            counts = ", ".join(str(len(m)) for m in layout.by_node.values())
            warn(f"nccl: a group of {n} GPUs on nodes holding {counts} of them runs NCCL's rings ({UNEVEN})")
        nbytes = collective_buffer_bytes(collective, size, n)
        if nbytes == 0 and self.settings.version >= (2, 20):  # (enqueue.cc returns at once: no kernel, no wait)
            return NcclCall(self, algorithm_collective(collective), 0.0, group, layout, DISCARDED)
        if collective == C.ALL_TO_ALL:
            remote = n - layout.per_node
            farthest = max(self._route_latency(group[0], group[q]) for q in range(1, n)) if n > 1 else 0.0
            one_node = comm.nodes == 1 and hw.intra == "nvswitch"
            channels = channel_graphs(comm, self.settings).comm_channels if one_node else 0
            plan = plan_p2p(comm, self.settings, nbytes / n, remote, farthest, channels)
            return NcclCall(self, collective, nbytes, group, layout, plan)
        graphs = channel_graphs(comm, self.settings)
        kind = algorithm_collective(collective)
        choice = choose(comm, graphs, kind, nbytes, self.settings)
        if isinstance(choice, str):
            raise ConfigError(f"algorithm 'nccl': {choice}")
        latency = self._path_latency(choice.algorithm, kind, group, layout, choice.channels)
        plan = plan_call(comm, graphs, choice, kind, nbytes, self.settings, latency)
        return NcclCall(self, kind, nbytes, group, layout, plan)

    def _route_latency(self, a: int, b: int) -> float:
        """The network's latency from NPU *a* to NPU *b* (ns), by dimension-order routing."""
        key = (a, b)
        found = self._routes.get(key)
        if found is None:
            from etsim.network.routing import make_router

            topo = self.topology
            assert topo is not None
            router = getattr(self, "_router", None)
            if router is None:
                router = self._router = make_router("default", topo)
            found = self._routes[key] = sum(topo.latencies[link] for link in router.lookup(a, b))
        return found

    def _path_latency(
        self, algo: str, kind: CollectiveType, group: tuple[int, ...], layout: Layout, channels: int
    ) -> float:
        """The latency the network adds on the graph's critical path (its hops, one message each).

        A ring's super-step waits for the previous one's block from the previous rank: the path runs back along
        the ring, one edge per super-step; the slowest stretch of that many consecutive edges sets it.
        """
        if algo == "PAT":  # one message per exchange, each to the peer at its distance
            return sum(self._route_latency(group[0], group[d % len(group)]) for d, _ in pat_steps(len(group)))
        if algo == "Ring" and kind not in (C.BROADCAST, C.REDUCE):
            n = len(group)
            orders = layout.ring_orders(self.hardware().intra, channels)
            hops = len(ring_steps(2 * (n - 1) if kind == C.ALL_REDUCE else n - 1, len(orders)))
            worst = 0.0
            for order in orders:
                edges = [self._route_latency(group[order[i]], group[order[(i + 1) % n]]) for i in range(n)]
                ahead = edges * (hops // n + 2)
                window = sum(ahead[:hops])
                best = window
                for i in range(1, n):
                    window += ahead[i + hops - 1] - ahead[i - 1]
                    best = max(best, window)
                worst = max(worst, best)
            return worst
        members = layout.by_node[layout.node_ids[0]]
        intra = self._route_latency(group[members[0]], group[members[1]]) if len(members) > 1 else 0.0
        inter = 0.0
        if len(layout.node_ids) > 1:
            inter = self._route_latency(group[members[0]], group[layout.by_node[layout.node_ids[1]][0]])
        n, nodes = len(group), len(layout.node_ids)
        if algo == "Ring":  # a chain, pipelined: one pass of its edges
            return (n - nodes) * intra + (nodes - 1) * inter
        across = 0.0 if nodes == 1 else 2 * inter if nodes == 2 else 2 * (nodes.bit_length() - 1) * inter
        return 2 * intra + across


class NcclCall(CollectiveAlgorithm):
    """One call's NCCL plan: its graphs, per position, of wire bytes (built when first asked for).

    Its graphs are NCCL's algorithms' message patterns (their rings, stages and peers): ``tests/system/algorithms/
    test_nccl.py`` checks what each rank sends and receives against the algorithm's own volumes.
    """

    name = "nccl"
    collectives = _COLLECTIVES
    verified_by_tests = True  # tests/system/algorithms/test_nccl.py (byte volumes per rank, per link kind)
    # A rank's kernel ends when its own work is done: a broadcast root's sends land in its receivers' buffers
    # whether or not they have launched the call (calls in a row overlap, as nccl-tests measures them); every
    # other wait is a message the graphs carry (even a call of a few bytes moves flags: MIN_WIRE_BYTES; one of none
    # NCCL 2.20+ discards).
    synchronises_itself = True

    def __init__(
        self,
        parent: NcclAlgorithm,
        collective: CollectiveType,
        nbytes: float,
        group: tuple[int, ...],
        layout: Layout,
        plan: Plan,
    ) -> None:
        self.parent = parent
        self.collective = collective
        self.nbytes = nbytes
        self.group = group
        self.layout = layout
        self.plan = plan
        choice = plan.choice
        #: How results name this call's algorithm.
        self.label = f"nccl:{choice.algorithm}/{choice.protocol}/{choice.channels}" if plan is not DISCARDED else (
            "nccl:discarded")  # fmt: skip
        self._graphs: dict[int, AlgoGraph] = {}
        hw = parent.hardware()
        sharp = choice.algorithm.startswith("CollNet")
        #: Every position's graph is position 0's turned (``graphs.rotation_invariant``): one graph with relative
        #: peers serves them all (the fast path evaluates it in bulk; mirrored replicas can run it).
        self.shared = parent.share_graphs and rotation_invariant(collective, layout, plan, hw.intra,
                                                                 sharp)  # fmt: skip
        #: NVLink SHARP or SHARP reduces in a switch: fewer bytes cross the GPUs' links than a ring's.
        self.reduces_in_network = choice.algorithm in ("NVLS", "NVLSTree", "CollNetDirect", "CollNetChain")

    @property
    def fold_hint(self) -> str:
        """Why a replica fold cannot mirror this call's members, and what would let it (said with the refusal)."""
        algo, nodes = self.plan.choice.algorithm, len(self.layout.node_ids)
        if algo not in ("Tree", "NVLSTree") or nodes < 3:
            return ""
        return (
            f"; NCCL's {algo} over {nodes} nodes gives each node its own place in its binary trees, so no shift of "
            f"whole nodes maps one member's graph onto another's: with `nccl: {{algo: ^{algo}}}` (NCCL_ALGO=^{algo}) "
            "NCCL's next choice runs instead (rings, whose graphs move with whole nodes, fold); a reduce-scatter and "
            "an all-gather in place of the all-reduce (a training job's ZeRO-1) have no tree in NCCL"
        )

    def shares_graph(self, collective: CollectiveType) -> bool:
        """Every position runs one graph with relative peers where the layout is the same from every position."""
        return self.shared

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """The graph of *position* (see ``graphs.py``); one graph with relative peers when :attr:`shared`."""
        self.check_position(collective, group_size, position)
        key = -1 if self.shared else position
        found = self._graphs.get(key)
        if found is None:
            hw = self.parent.hardware()
            found = self._graphs[key] = build_graph(
                self.collective, self.nbytes, max(0, key), self.layout, self.plan, hw.intra, self._structure,
                relative=self.shared,
            )  # fmt: skip
        return found

    def _structure(self, algo: str) -> tuple[float, float]:
        """Per algorithm, its bytes inside and between nodes per byte of a plain reduce-scatter and all-gather."""
        ppn = max(2, self.layout.per_node)
        nodes = len(self.layout.node_ids)
        chain = ppn / (ppn - 1)  # a chain moves the whole buffer up (and down) every GPU's NVLink
        switch = (ppn + 1) / (2.0 * (ppn - 1))  # NVLink SHARP: S·(1 + 1/n) per GPU, reduced in the switch
        sharp = nodes / (2.0 * (nodes - 1)) if nodes > 1 else 1.0  # SHARP: the buffer once each way per node
        if algo == "Tree":
            return chain, 1.0
        if algo == "NVLS":
            return (switch if self.collective == C.ALL_REDUCE else 1.0), 1.0
        if algo == "NVLSTree":
            return switch, 1.0
        if algo == "CollNetChain":
            return chain, sharp
        return switch, sharp  # CollNetDirect

    def check_position(self, collective: CollectiveType, group_size: int, position: int) -> None:
        """Refuse a position outside the call's group."""
        if group_size != len(self.group) or not 0 <= position < group_size:
            raise ConfigError(f"algorithm {self.label!r}: position {position} of {group_size} is not in its call")

    def describe(self) -> dict[str, Any]:
        """NCCL's choice for this call, for reports."""
        choice = self.plan.choice
        return {"algorithm": choice.algorithm, "protocol": choice.protocol, "channels": choice.channels}


@SOURCES.register("nccl")
class NcclSource(AlgorithmSource):
    """``nccl:ALGO[/PROTO[/CHANNELS]]``: the ``nccl`` algorithm with its choice forced (``settings.forced``).

    ``nccl:Ring/LL128`` runs every call as NCCL does with ``NCCL_ALGO=Ring NCCL_PROTO=LL128``: what ``etsim tune``
    compares to find NCCL's crossovers by size, and what a result's label (``nccl:Ring/Simple/24``) reproduces.
    """

    name = "nccl"
    priority = 5

    def claims(self, spec: str) -> bool:
        """``nccl:…``."""
        return spec.startswith("nccl:")

    def collectives(self, spec: str) -> frozenset[CollectiveType]:
        """The collectives NCCL runs."""
        return _COLLECTIVES

    def load(self, spec: str, context: AlgorithmContext) -> CollectiveAlgorithm:
        """An :class:`NcclAlgorithm` whose settings force the spec's choice."""
        return NcclAlgorithm(context.topology, forced(spec, context.nccl or NcclSettings()))
