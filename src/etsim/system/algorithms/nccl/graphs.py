"""The graphs of NCCL's algorithms, as the network model times them (``docs/nccl.md``).

Every rank's graph starts with the call's fixed delay (a COMP node: the kernel's start and the latencies of the
critical path, ``timing.py``); beside it run the channels' own throughput bound and the host's launch (COMP nodes
nothing waits for: the part ends when they have too). Then the messages, in byte sizes of wire bytes:

- **Ring**: one ring per channel group, laid over the rails: group ``g`` visits each node's GPUs from local index
  ``g + 1`` and leaves it from ``g``, so the hop to the next node crosses rail ``g + 1`` (PXN: the node's NVLink
  first) and every NIC carries a ring; inside a node of direct NVLink links, rings step by each stride coprime with
  the node's size where those reach every link (3 GPUs, a prime count), else they are Hamiltonian cycles that share
  all the links out evenly (:func:`hamiltonian_cycles`; 4 GPUs: three rings each way, not the two that leave the
  diagonals idle), as NCCL's search lays its channels over every NVLink; such rings do not turn with the position,
  so the graphs are per GPU. All-reduce: 2(n − 1) steps, reduce-scatter and all-gather n − 1, each step the next
  block to the next rank; broadcast and reduce: a chain from the root, pipelined in chunks.
- **Tree, NVLS, NVLS tree, CollNet**: their stages, pipelined in chunks: a reduce-scatter inside the node (each GPU
  owns a slice), the slice reduced across nodes among the GPUs of the same local index (each over its own rail; on
  NCCL's double binary tree over more than two nodes), and an all-gather inside the node. The bytes of each stage
  are what the algorithm puts on that link: a tree's chain moves the whole buffer up and down a node's NVLink;
  NVLink SHARP moves ``S·(1 + 1/n)`` per GPU and reduces in the switch; SHARP reduces in the fabric, so a node's
  NICs carry the buffer once each way.
- **PAT** (all-gather and reduce-scatter, one GPU per node, NCCL 2.23+): ⌈log₂ n⌉ exchanges at distances 1, 2,
  4 … (an all-gather's in that order, a reduce-scatter's in reverse), each of the blocks gathered so far: the
  ring's n − 1 blocks per rank in a logarithmic number of steps.
- **All-to-all**: every rank sends its piece to every peer at once (NCCL's grouped sends).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from etsim.algo.graph import RECV, SEND, AlgoGraph, AlgorithmBuilder
from etsim.chakra.graph import CollectiveType
from etsim.system.algorithms.nccl.timing import Plan

__all__ = [
    "MIN_WIRE_BYTES",
    "RING_STEPS",
    "Layout",
    "Tree",
    "build_graph",
    "double_binary_tree",
    "hamiltonian_cycles",
    "pat_steps",
    "ring_steps",
    "rotation_invariant",
]

C = CollectiveType
#: The smallest message on the wire (one 16-byte line): a call smaller than its ranks still moves flags and data.
MIN_WIRE_BYTES = 16.0
#: The most messages a rank's rings send in a call's graph (:func:`ring_steps`).
RING_STEPS = 32


class Layout:
    """Where a communicator's positions sit: node and local index of each, from the cluster's hardware.

    Args:
        nodes: each position's node (ascending per node).
        locals_: each position's index among its node's positions.
    """

    def __init__(self, nodes: Sequence[int], locals_: Sequence[int]) -> None:
        self.nodes = list(nodes)
        self.locals = list(locals_)
        self.node_ids = sorted(set(nodes))
        self.by_node: dict[int, list[int]] = {}
        for position, node in enumerate(nodes):
            self.by_node.setdefault(node, []).append(position)
        self.per_node = max(len(v) for v in self.by_node.values())
        self._columns: dict[int, list[int]] = {}

    def same_node(self, a: int, b: int) -> bool:
        """Positions *a* and *b* are in one node."""
        return self.nodes[a] == self.nodes[b]

    def column(self, position: int) -> list[int]:
        """The positions with the same local index as *position*, one per node, in node order."""
        local = self.locals[position]
        found = self._columns.get(local)
        if found is None:
            found = self._columns[local] = [m[local] for m in self.by_node.values() if local < len(m)]
        return found

    def ring_orders(self, intra: str, channels: int = 0) -> list[list[int]]:
        """The ring orders of the channel groups (see the module docstring); at most *channels* of them if given.

        A channel is one ring: fewer channels than groups lay fewer rings, so fewer NICs and links carry them (one
        ring on two 8-GPU nodes crosses one NIC of each; every NIC carried one, beating the NICs' bound).
        """
        orders = self._ring_orders(intra)
        return orders[:channels] if channels else orders

    def _ring_orders(self, intra: str) -> list[list[int]]:
        ppn = self.per_node
        if len(self.node_ids) > 1:
            orders = []
            for g in range(ppn):
                order = []
                for node in self.node_ids:
                    members = self.by_node[node]
                    order += [members[(g + 1 + i) % len(members)] for i in range(len(members))]
                orders.append(order)
            return orders
        members = self.by_node[self.node_ids[0]]
        if intra != "nvlink" or ppn <= 2:
            return [members]
        strides = [s for s in range(1, ppn) if math.gcd(s, ppn) == 1]
        if len(strides) == ppn - 1:  # rings of every stride use every link, and turn with the position
            return [[members[(s * i) % ppn] for i in range(ppn)] for s in strides]
        # Strides coprime with the size leave the links of the other distances idle (4 GPUs: the diagonals, a third
        # of each GPU's links); NCCL's search lays its channels' rings over all of them: Hamiltonian cycles that
        # share the links out evenly, each both ways.
        cycles = hamiltonian_cycles(ppn)
        return [[members[v] for v in c] for c in cycles] + [[members[v] for v in reversed(c)] for c in cycles]


def hamiltonian_cycles(n: int) -> list[list[int]]:
    """Hamiltonian cycles of the complete graph on ``0..n-1`` (n ≥ 3) that use its edges evenly.

    Four vertices: its three cycles, each edge in two. Otherwise Walecki's: vertex ``n - 1`` in the middle of a
    circle of the others, a zigzag across the circle turned one place at a time: ``(n - 1) / 2`` cycles using every
    edge once for odd n, ``(n - 2) / 2`` for even n, which leave one perfect matching unused.
    """
    if n == 4:
        return [[0, 1, 2, 3], [0, 1, 3, 2], [0, 2, 1, 3]]
    circle = n - 1
    zigzag = [0] + [(k + 1) // 2 if k % 2 else -(k // 2) % circle for k in range(1, circle)]
    count = (n - 1) // 2 if n % 2 else (n - 2) // 2
    return [[n - 1] + [(z + i) % circle for z in zigzag] for i in range(count)]


def _wire(nbytes: float) -> float:
    """Whole bytes on the wire (at least one line): whole sizes let the union fast path evaluate the call."""
    return max(float(round(nbytes)), MIN_WIRE_BYTES)


class _RelativeBuilder(AlgorithmBuilder):
    """A builder of position *origin*'s graph whose peers it records as offsets (a graph every rank shares)."""

    def __init__(self, origin: int, size: int) -> None:
        super().__init__(relative_peers=True)
        self.origin, self.size = origin, size

    def _add(self, kind: int, peer: int, *args: Any, **kwargs: Any) -> int:
        if kind in (SEND, RECV):
            peer = (peer - self.origin) % self.size
        return super()._add(kind, peer, *args, **kwargs)


def rotation_invariant(kind: CollectiveType, layout: Layout, plan: Plan, intra: str, sharp: bool) -> bool:
    """Whether every position's graph is position 0's turned by the position (one graph with relative peers).

    So it is when every position sees the same: a group inside one node or of one GPU per node, whose rings step
    by a constant stride, whose stages exchange with every other member, or whose peers are all the others
    (all-to-all); never for a chain from a root or a tree over nodes.
    """
    n, nodes = len(layout.nodes), len(layout.node_ids)
    if n < 2 or (nodes > 1 and layout.per_node > 1):
        return False
    algo = plan.choice.algorithm
    if algo == "P2P":
        return True
    if algo == "PAT":
        return True  # its peers sit at the same distances from every position
    if algo == "Ring":
        if kind in (C.BROADCAST, C.REDUCE):
            return False
        orders = layout.ring_orders(intra, plan.choice.channels)
        return all(len({(order[(i + 1) % n] - order[i]) % n for i in range(n)}) == 1 for order in orders)
    return nodes == 1 or nodes == 2 or sharp  # exchanges with every member (no tree over the nodes)


def build_graph(
    kind: CollectiveType,
    nbytes: float,
    position: int,
    layout: Layout,
    plan: Plan,
    intra: str,
    structure: Callable[[str], tuple[float, float]],
    *,
    relative: bool = False,
) -> AlgoGraph:
    """The graph of *position* for a call of *nbytes* (NCCL's count) under *plan*.

    *structure(algorithm)* gives the stage factors of a staged algorithm: (bytes inside the node, bytes between
    nodes) per byte of a plain reduce-scatter and all-gather (a tree's chain moves more, NVLS and SHARP less).
    *relative*: record peers as offsets from *position* (when :func:`rotation_invariant`: the graph every
    position shares).
    """
    b = _RelativeBuilder(position, len(layout.nodes)) if relative else AlgorithmBuilder()
    launch = b.reduce(0, name="nccl_launch", duration_ns=plan.fixed_ns)
    if plan.choice.algorithm == "discarded":  # (a call of no bytes NCCL returns from at once: nothing more)
        return b.build()
    if plan.cta_ns > 0:
        b.reduce(0, deps=[launch], name="nccl_channels", duration_ns=plan.cta_ns)
    if plan.host_ns > 0:
        b.reduce(0, name="nccl_host_launch", duration_ns=plan.host_ns)
    algo = plan.choice.algorithm
    if algo == "P2P":
        _all_to_all(b, nbytes, position, layout, plan, launch)
    elif algo == "PAT":
        _pat(b, kind, nbytes, position, layout, plan, launch)
    elif algo == "Ring":
        if kind in (C.BROADCAST, C.REDUCE):
            _chain(b, kind, nbytes, position, layout, plan, launch, intra)
        else:
            _rings(b, kind, nbytes, position, layout, plan, launch, intra)
    else:
        _staged(b, kind, nbytes, position, layout, plan, launch, structure(algo), algo.startswith("CollNet"))
    return b.build()


def _scale(layout: Layout, plan: Plan, a: int, b: int) -> float:
    return plan.intra_scale if layout.same_node(a, b) else plan.inter_scale


def ring_steps(steps: int, rings: int = 1) -> list[int]:
    """NCCL's ring steps merged into the graph's super-steps, as even as they divide.

    At most :data:`RING_STEPS` messages per rank over its *rings* (channel groups), and at least 4 super-steps per
    ring. A super-step carries its steps' blocks in one message: the bytes on every link stay NCCL's, and the
    latency of the steps it merges is the fixed delay's (``NcclAlgorithm``), so a ring over thousands of GPUs, or
    eight rings over the rails, stays a graph of a few dozen messages per rank.
    """
    k = max(1, min(steps, max(4, RING_STEPS // max(1, rings))))
    base, extra = divmod(steps, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def _rings(
    b: AlgorithmBuilder, kind: CollectiveType, nbytes: float, position: int, layout: Layout, plan: Plan, launch: int,
    intra: str,
) -> None:  # fmt: skip
    """Each channel group's ring: a super-step's block goes to the next rank once the previous one has arrived."""
    n = len(layout.nodes)
    orders = layout.ring_orders(intra, plan.choice.channels)
    block = nbytes / n / len(orders)
    merged = ring_steps(2 * (n - 1) if kind == C.ALL_REDUCE else n - 1, len(orders))
    for g, order in enumerate(orders):
        at = order.index(position)
        nxt, prv = order[(at + 1) % n], order[(at - 1) % n]
        out, back = _scale(layout, plan, position, nxt), _scale(layout, plan, prv, position)
        got = launch
        for step, count in enumerate(merged):
            b.send(nxt, _wire(count * block * out), g, deps=[got], name=f"ring{g}_send{step}")
            got = b.recv(prv, _wire(count * block * back), g, deps=[got], name=f"ring{g}_recv{step}")


def pat_steps(n: int) -> list[tuple[int, int]]:
    """PAT's exchanges over *n* ranks, all-gather order: (distance, blocks) — 1, 2, 4 … blocks, n − 1 in all."""
    steps, distance = [], 1
    while distance < n:
        steps.append((distance, min(distance, n - distance)))
        distance *= 2
    return steps


def _pat(
    b: AlgorithmBuilder, kind: CollectiveType, nbytes: float, position: int, layout: Layout, plan: Plan, launch: int
) -> None:  # fmt: skip
    """PAT's exchanges: each sends what it has gathered (or what is left to reduce) once the last has arrived."""
    n = len(layout.nodes)
    block = nbytes / n
    steps = pat_steps(n)
    if kind == C.REDUCE_SCATTER:  # the all-gather's exchanges reversed: the farthest first, with the most blocks
        steps = [(-distance, blocks) for distance, blocks in reversed(steps)]
    got = launch
    for step, (distance, blocks) in enumerate(steps):
        to, frm = (position - distance) % n, (position + distance) % n
        b.send(to, _wire(blocks * block * _scale(layout, plan, position, to)), 0, deps=[got], name=f"pat_send{step}")
        got = b.recv(frm, _wire(blocks * block * _scale(layout, plan, frm, position)), 0, deps=[got],
                     name=f"pat_recv{step}")  # fmt: skip


def _chain(
    b: AlgorithmBuilder, kind: CollectiveType, nbytes: float, position: int, layout: Layout, plan: Plan, launch: int,
    intra: str,
) -> None:  # fmt: skip
    """A pipelined chain along each ring from position 0 (broadcast) or to it (reduce)."""
    n = len(layout.nodes)
    orders = layout.ring_orders(intra, plan.choice.channels)
    chunks = plan.chunks
    piece = nbytes / len(orders) / chunks
    for g, ring in enumerate(orders):
        start = ring.index(0)
        order = ring[start:] + ring[:start]  # the chain from the root
        if kind == C.REDUCE:
            order = order[1:] + order[:1]  # ...ending at the root
        at = order.index(position)
        prv = order[at - 1] if at > 0 else None
        nxt = order[at + 1] if at < n - 1 else None
        got: list[int] = [launch]
        sent: list[int] = []
        for c in range(chunks):
            if prv is not None:
                got = [b.recv(prv, _wire(piece * _scale(layout, plan, prv, position)), g, deps=[launch],
                              name=f"chain{g}_recv{c}")]  # fmt: skip
            if nxt is not None:
                sent = [b.send(nxt, _wire(piece * _scale(layout, plan, position, nxt)), g, deps=got + sent,
                               name=f"chain{g}_send{c}")]  # fmt: skip


def _staged(
    b: AlgorithmBuilder, kind: CollectiveType, nbytes: float, position: int, layout: Layout, plan: Plan, launch: int,
    factors: tuple[float, float], sharp: bool,
) -> None:  # fmt: skip
    """Reduce-scatter inside the node, the slice across nodes, all-gather inside the node: pipelined in chunks.

    Across more than two nodes without SHARP, the slice goes up and down a double binary tree over the nodes (half
    on each tree, each over the column's rail); across two nodes, or reduced in the fabric (SHARP), it is exchanged
    directly.
    """
    node = layout.by_node[layout.nodes[position]]
    column = layout.column(position)
    peers = [q for q in node if q != position]
    chunks = plan.chunks
    ppn, nodes = len(node), len(column)
    intra_factor, inter_factor = factors
    piece = nbytes / chunks / ppn * intra_factor
    across = nbytes / chunks / ppn * inter_factor
    previous: dict[str, list[int]] = {}
    for c in range(chunks):
        ready = [launch]
        if kind in (C.ALL_REDUCE, C.REDUCE_SCATTER):
            ready = _exchange(b, "rs", c, peers, piece, position, layout, plan, ready, previous, launch)
        if kind == C.ALL_REDUCE and nodes > 1:
            if nodes == 2 or sharp:
                others = [q for q in column if q != position]
                ready = _exchange(b, "xrs", c, others, across / nodes, position, layout, plan, ready, previous, launch)
                ready = _exchange(b, "xag", c, others, across / nodes, position, layout, plan, ready, previous, launch)
            else:
                ready = _trees(b, c, column, across, position, layout, plan, ready, previous, launch)
        if kind in (C.ALL_REDUCE, C.ALL_GATHER):
            _exchange(b, "ag", c, peers, piece, position, layout, plan, ready, previous, launch)


def _exchange(
    b: AlgorithmBuilder, name: str, chunk: int, targets: list[int], piece: float, position: int, layout: Layout,
    plan: Plan, ready: list[int], previous: dict[str, list[int]], launch: int,
) -> list[int]:  # fmt: skip
    """One exchange stage: *piece* to every target, one from each; returns the receives (what comes next waits for).

    The sends wait for *ready* and for this stage's sends of the chunk before (the channel's order).
    """
    tag = _TAGS[name]
    sends = [
        b.send(q, _wire(piece * _scale(layout, plan, position, q)), tag, deps=ready + previous.get(name, []),
               name=f"{name}{chunk}_send{q}")
        for q in targets
    ]  # fmt: skip
    recvs = [
        b.recv(q, _wire(piece * _scale(layout, plan, q, position)), tag, deps=[launch], name=f"{name}{chunk}_recv{q}")
        for q in targets
    ]
    previous[name] = sends
    return recvs or ready


def _trees(
    b: AlgorithmBuilder, chunk: int, column: list[int], across: float, position: int, layout: Layout, plan: Plan,
    ready: list[int], previous: dict[str, list[int]], launch: int,
) -> list[int]:  # fmt: skip
    """The slice reduced up and broadcast down two complementary binary trees over the column (half on each)."""
    me = column.index(position)
    done: list[int] = []
    for t in (0, 1):
        parent, children = double_binary_tree(len(column))[t]
        up, down = _TAGS["up"] + t, _TAGS["down"] + t
        half = across / 2
        got = [b.recv(column[ch], _wire(half * plan.inter_scale), up, deps=[launch], name=f"t{t}_up{chunk}_recv")
               for ch in children[me]]  # fmt: skip
        after = ready + got
        if parent[me] >= 0:
            key = f"up{t}"
            sent = b.send(column[parent[me]], _wire(half * plan.inter_scale), up, deps=after + previous.get(key, []),
                          name=f"t{t}_up{chunk}_send")  # fmt: skip
            previous[key] = [sent]
            after = [b.recv(column[parent[me]], _wire(half * plan.inter_scale), down, deps=[launch],
                            name=f"t{t}_down{chunk}_recv")]  # fmt: skip
        key = f"down{t}"
        sends = [b.send(column[ch], _wire(half * plan.inter_scale), down, deps=after + previous.get(key, []),
                        name=f"t{t}_down{chunk}_send") for ch in children[me]]  # fmt: skip
        if sends:
            previous[key] = sends
        done += after
    return done


#: A tree over positions: ``(parent, children)``.
Tree = tuple[list[int], list[list[int]]]


@functools.lru_cache(maxsize=64)
def double_binary_tree(size: int) -> tuple[Tree, Tree]:
    """NCCL's two trees over *size* nodes (its double binary tree), each as ``(parent, children)``, parent -1 at root.

    As NCCL lays them (``src/graph/trees.cc``, the same in 2.18 and 2.29).

    The first is NCCL's bit tree: node ``r``'s parent is found from its lowest set bit ``b``, ``(r ^ b) | 2b``, or
    ``r ^ b`` where that is past the end; node 0 is the root with one child, odd nodes are the leaves, depth
    ``ceil(log2 size)``. The second is its mirror (``r`` → ``size − 1 − r``) for an even size, else the first
    shifted by one node. For an even size each node forwards (has children) in at most one of the two, and a
    forwarding node's link carries twice the data of one tree each way: NCCL's tree bandwidth, half the link's.
    Made once per size (every position of a call asks for it).
    """
    parent = [-1] * size
    for r in range(1, size):
        low = r & -r
        up = (r ^ low) | (low << 1)
        parent[r] = up if up < size else r ^ low
    second = [-1] * size  # the first relabelled: mirrored, or shifted by one
    for r, p in enumerate(parent):
        if p >= 0:
            second[_other_tree(r, size)] = _other_tree(p, size)
    trees = []
    for parents in (parent, second):
        children: list[list[int]] = [[] for _ in range(size)]
        for r, p in enumerate(parents):
            if p >= 0:
                children[p].append(r)
        trees.append((parents, children))
    return trees[0], trees[1]


def _other_tree(node: int, size: int) -> int:
    """Where *node* of NCCL's first tree sits in its second: mirrored for an even size, else shifted by one."""
    return size - 1 - node if size % 2 == 0 else (node + 1) % size


#: Tags of the staged algorithms' channels (a stage's messages meet in order on their own tag).
_TAGS = {"rs": 0, "xrs": 1, "xag": 2, "ag": 3, "up": 4, "down": 6}


def _all_to_all(b: AlgorithmBuilder, nbytes: float, position: int, layout: Layout, plan: Plan, launch: int) -> None:
    """A send to and a receive from every peer, in the order of NCCL's peer-to-peer schedule (:func:`p2p_rounds`)."""
    n = len(layout.nodes)
    piece = nbytes / n
    for to, come in p2p_rounds(layout, position):
        b.send(to, _wire(piece * _scale(layout, plan, position, to)), 0, deps=[launch], name=f"a2a_send{to}")
        b.recv(come, _wire(piece * _scale(layout, plan, come, position)), 0, deps=[launch], name=f"a2a_recv{come}")


def _deltas(count: int) -> list[int]:
    """0 … count-1 in the order of triangular numbers modulo the next power of two (those below *count*)."""
    size = 1 << max(0, count - 1).bit_length()
    out, delta = [], 0
    for step in range(1, size + 1):
        if delta < count:
            out.append(delta)
        delta = (delta + step) & (size - 1)
    return out


def p2p_rounds(layout: Layout, position: int) -> list[tuple[int, int]]:
    """The (send peer, receive peer) of each round of NCCL's grouped sends and receives from *position*, self apart.

    As NCCL's communicator schedules them (``p2pSchedule``, NCCL 2.19–2.23): by node distance, then by local
    distance, each enumerated by triangular numbers modulo a power of two; round r sends r steps ahead and receives
    from r steps behind. Nodes with unequal GPU counts are one flat list. Relative by construction: a shift of the
    nodes or of the GPUs in every node moves every position's rounds with it.
    """
    nodes = [layout.by_node[node] for node in layout.node_ids]
    if len({len(m) for m in nodes}) > 1:
        nodes = [list(range(len(layout.nodes)))]
    node = next(k for k, members in enumerate(nodes) if position in members)
    local = nodes[node].index(position)
    count, per = len(nodes), len(nodes[0])
    rounds = []
    for nd in _deltas(count):
        ahead, behind = nodes[(node + nd) % count], nodes[(node - nd) % count]
        for ld in _deltas(per):
            if nd or ld:
                rounds.append((ahead[(local + ld) % per], behind[(local - ld) % per]))
    return rounds
