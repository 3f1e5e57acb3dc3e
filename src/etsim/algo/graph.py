"""Collective algorithms as per-rank dependency graphs: the format every algorithm source shares.

An :class:`AlgoGraph` is one rank's part of a collective algorithm: SEND, RECV and COMP
(reduction) nodes with data dependencies, in flat lists (no per-node objects). It is the
same kind of graph whether it was written with :class:`AlgorithmBuilder` (the native
algorithms are), read from a Chakra ET family, or converted from MSCCL-IR; the simulator
walks all of them with one walker.

Sizes are **symbolic** when ``total_chunks`` is set: a node moves ``chunks[i]`` chunks of
``buffer / total_chunks`` bytes, where *buffer* is the collective's buffer (see
:func:`collective_buffer_bytes`), so one graph serves every message size. Otherwise
``chunks[i]`` are absolute bytes.

Peers are positions in the communicator group (0..n-1). With ``relative_peers`` a peer is an
offset from the rank's own position (mod n), which lets one graph object serve every rank of a
symmetric algorithm such as a ring.

Optionally every node also says what it does to buffers (``data``, see :mod:`etsim.algo.dataflow`):
which chunks a send reads, whether a receive stores or reduces and where. The simulator ignores it;
:mod:`etsim.algo.verify` uses it to check that the algorithm computes its collective. A graph
without it still runs; it just cannot be verified.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from etsim.algo.dataflow import (
    PLACEMENTS,
    NodeData,
    SegmentsLike,
    segments,
)
from etsim.chakra.dag import in_degrees, transpose
from etsim.chakra.graph import NodeType

__all__ = ["COMP", "RECV", "SEND", "AlgoGraph", "AlgorithmBuilder"]

SEND = int(NodeType.COMM_SEND_NODE)
RECV = int(NodeType.COMM_RECV_NODE)
COMP = int(NodeType.COMP_NODE)


@dataclass(eq=False)
class AlgoGraph:
    """One rank's part of a collective algorithm (see the module docstring)."""

    kinds: list[int] = field(default_factory=list)
    """SEND, RECV or COMP per node."""
    peers: list[int] = field(default_factory=list)
    """Group position of the destination (SEND) or source (RECV); -1 for COMP."""
    tags: list[int] = field(default_factory=list)
    chunks: list[float] = field(default_factory=list)
    """Chunk counts (symbolic graph) or bytes (absolute graph) moved or reduced by each node."""
    durations_ns: list[float | None] = field(default_factory=list)
    """Explicit COMP duration, or None to use the reduction model (bytes / reduction bandwidth)."""
    deps_ptr: list[int] = field(default_factory=lambda: [0])
    deps_idx: list[int] = field(default_factory=list)
    """CSR of dependencies (node positions)."""
    names: list[str] = field(default_factory=list)
    total_chunks: int | None = None
    """Chunks per buffer for symbolic sizes; None for absolute byte sizes."""
    relative_peers: bool = False
    """Peers are offsets from the rank's own group position (mod group size)."""
    data: list[NodeData | None] = field(default_factory=list)
    """What each node does to buffers (:mod:`etsim.algo.dataflow`), or None; empty when nothing is annotated."""
    placement: tuple[str, ...] = ()
    """Buffer placements the annotations are written for (``in_place``/``out_of_place``); () = out of place."""
    setup: list[NodeData] = field(default_factory=list)
    """Local copies made before the first node and not timed (a native all-to-all's copy of the rank's own piece)."""
    exits: tuple[int, ...] = ()
    """Nodes whose completion ends this rank's part of the collective: its next phase may start and the
    collective may complete while the other nodes (sends still in flight) finish in the background.
    Empty: the part ends when every node has finished."""
    written_bytes: list[float] | None = None
    """For a symbolic graph read from files that also give ``comm_size``: each node's bytes as written (what a
    consumer running the files as written, without scaling, sends); else None."""
    gates: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Gated nodes, ``node -> (k, armed_by)``: the node becomes ready at the first completion of one of its
    dependencies at which node ``armed_by`` has finished and at least k of its dependencies have (work
    released by completions, in completion order, only once a condition holds)."""
    _succ: tuple[list[int], list[int], list[int]] | None = field(default=None, repr=False)
    _succ_lists: list[tuple[int, ...]] | None = field(default=None, repr=False)
    _priced: bool | None = field(default=None, repr=False)
    _gate_index: tuple[dict[int, int], dict[int, list[int]], dict[int, list[int]]] | None = field(
        default=None, repr=False
    )

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return len(self.kinds)

    def runs_like(self, other: AlgoGraph) -> bool:
        """Whether *other* runs as this graph but for its peers: kinds, tags, sizes, durations, dependencies, gates."""
        return (
            self.kinds == other.kinds
            and self.tags == other.tags
            and self.chunks == other.chunks
            and self.durations_ns == other.durations_ns
            and self.deps_ptr == other.deps_ptr
            and self.deps_idx == other.deps_idx
            and self.exits == other.exits
            and self.gates == other.gates
            and self.total_chunks == other.total_chunks
        )

    def successors(self) -> tuple[list[int], list[int], list[int]]:
        """``(succ_ptr, succ_idx, indegree)``, computed once and cached."""
        if self._succ is None:
            n = len(self.kinds)
            sources = [(self.deps_ptr, self.deps_idx)]
            ptr, succ = transpose(n, sources)
            self._succ = (ptr, succ, in_degrees(n, sources))
        return self._succ

    def in_degrees(self) -> list[int]:
        """Dependencies of each node (the third item of :meth:`successors`, without building the successors)."""
        if self._succ is not None:
            return self._succ[2]
        ptr = self.deps_ptr
        return list(map(operator.sub, itertools.islice(ptr, 1, None), ptr))  # (in C: a million nodes' worth)

    def successor_lists(self) -> list[tuple[int, ...]]:
        """Successors of each node as a tuple (the walker's form), computed once and cached."""
        if self._succ_lists is None:
            ptr, succ, _ = self.successors()
            self._succ_lists = [tuple(succ[ptr[i] : ptr[i + 1]]) for i in range(len(self.kinds))]
        return self._succ_lists

    def gate_index(self) -> tuple[dict[int, int], dict[int, list[int]], dict[int, list[int]]]:
        """``(k per gated node, gated nodes per arming node, gated nodes per dependency)``, computed once."""
        if self._gate_index is None:
            needed = {x: k for x, (k, _) in self.gates.items()}
            by_arm: dict[int, list[int]] = {}
            by_dep: dict[int, list[int]] = {}
            for x, (_, arm) in self.gates.items():
                by_arm.setdefault(arm, []).append(x)
                for d in self.deps(x):
                    by_dep.setdefault(d, []).append(x)
            self._gate_index = (needed, by_arm, by_dep)
        return self._gate_index

    @property
    def priced_reductions(self) -> bool:
        """Whether the graph has reductions the reduction bandwidth prices (COMP nodes without a duration).

        Computed once, like the successor lists: a graph is not changed once it is in use.
        """
        if self._priced is None:
            self._priced = COMP in self.kinds and any(
                kind == COMP and dur is None for kind, dur in zip(self.kinds, self.durations_ns, strict=True)
            )
        return self._priced

    def as_written(self) -> AlgoGraph:
        """This graph with the bytes its files give (:attr:`written_bytes`) instead of chunk counts."""
        if self.written_bytes is None:
            raise ValueError("the graph's files give no comm_size beside their chunk counts")
        return dataclasses.replace(
            self, chunks=list(self.written_bytes), total_chunks=None, written_bytes=None, data=[], placement=()
        )

    def deps(self, pos: int) -> list[int]:
        """Dependencies of node *pos*."""
        return self.deps_idx[self.deps_ptr[pos] : self.deps_ptr[pos + 1]]

    def peer_position(self, pos: int, own: int, group_size: int) -> int:
        """The group position node *pos* talks to, for the rank at position *own*."""
        peer = self.peers[pos]
        return (own + peer) % group_size if self.relative_peers else peer

    @property
    def annotated(self) -> bool:
        """True if every SEND and RECV says which chunks it moves (COMP nodes without data are costs only)."""
        if len(self.data) != len(self.kinds):
            return not any(k in (SEND, RECV) for k in self.kinds)
        if None not in self.data:  # (every node annotated: no need to look at kinds)
            return True
        return all(d is not None for d, k in zip(self.data, self.kinds, strict=True) if k in (SEND, RECV))

    def data_of(self, pos: int) -> NodeData | None:
        """The data annotation of node *pos* (None when it has none)."""
        return self.data[pos] if pos < len(self.data) else None


class AlgorithmBuilder:
    """Write one rank's part of an algorithm: ``send``/``recv``/``reduce`` return node positions.

    Operands (``src``, ``dst``, ``copy_to``, ``reduce``) are optional data annotations
    (:mod:`etsim.algo.dataflow`): text such as ``"o@r-1"``, a :class:`~etsim.algo.dataflow.Segment`
    or a list of them, covering the node's chunk count.

    Args:
        total_chunks: chunks per buffer (symbolic sizes); ``None`` means sizes are bytes.
        relative_peers: peers given to ``send``/``recv`` are offsets from the rank's own position.
        placement: the buffer placements the annotations are written for
            (:data:`~etsim.algo.dataflow.IN_PLACE`, :data:`~etsim.algo.dataflow.OUT_OF_PLACE`).

    Examples:
        >>> b = AlgorithmBuilder(total_chunks=2)
        >>> s = b.send(1, 1, src="i@0")
        >>> r = b.recv(1, 1, dst="o@1")
        >>> _ = b.reduce(1, deps=[r])
        >>> b.build().num_nodes
        3
    """

    def __init__(
        self, total_chunks: int | None = None, *, relative_peers: bool = False, placement: str | Sequence[str] = ()
    ) -> None:
        places = (placement,) if isinstance(placement, str) else tuple(placement)
        for p in places:
            if p not in PLACEMENTS:
                raise ValueError(f"placement {p!r}: expected {' or '.join(PLACEMENTS)}")
        self.graph = AlgoGraph(total_chunks=total_chunks, relative_peers=relative_peers, placement=places)

    def setup_copy(self, chunks: int, *, src: SegmentsLike, dst: SegmentsLike) -> None:
        """Declare a local copy of *chunks* chunks from *src* to *dst* made before the first node, not timed.

        For what an algorithm does but its graph does not cost, such as an all-to-all's copy of the
        rank's own piece from input to output; the verifier applies it, the simulator ignores it.
        """
        what = f"setup copy {len(self.graph.setup)}"
        self.graph.setup.append(NodeData("copy", segments(dst, chunks, what + " dst"), segments(src, chunks, what)))

    def _add(
        self,
        kind: int,
        peer: int,
        tag: int,
        chunks: float,
        deps: Iterable[int],
        name: str,
        dur: float | None,
        data: NodeData | None = None,
    ) -> int:
        g = self.graph
        pos = len(g.kinds)
        if len(g.data) != pos:  # graphs built before annotations existed
            g.data.extend([None] * (pos - len(g.data)))
        g.data.append(data)
        g.kinds.append(kind)
        g.peers.append(peer)
        g.tags.append(tag)
        g.chunks.append(chunks)
        g.durations_ns.append(dur)
        g.names.append(name)
        deps = list(deps)
        if deps and (min(deps) < 0 or max(deps) >= pos):
            bad = next(d for d in deps if not 0 <= d < pos)
            raise ValueError(f"node {pos} ({name}): dependency {bad} is not an earlier node")
        g.deps_idx += deps
        g.deps_ptr.append(len(g.deps_idx))
        return pos

    def _data(self, op: str, chunks: float, name: str, dst: SegmentsLike | None, src: SegmentsLike | None) -> NodeData:
        where = f"node {len(self.graph.kinds)} ({name})"
        return NodeData(
            op,
            segments(dst, chunks, f"{where} dst") if dst is not None else (),
            segments(src, chunks, f"{where} src") if src is not None else (),
        )

    def send(
        self,
        peer: int,
        chunks: float,
        tag: int = 0,
        *,
        deps: Iterable[int] = (),
        name: str = "",
        src: SegmentsLike | None = None,
        copy_to: SegmentsLike | None = None,
    ) -> int:
        """Send *chunks* (or bytes) to group position (or offset) *peer*.

        *src* names the chunks sent; *copy_to*, if given, receives a local copy of them.
        """
        name = name or f"send_{peer}"
        data = self._data("send", chunks, name, copy_to, src) if src is not None else None
        if data is None and copy_to is not None:
            raise ValueError(f"{name}: copy_to needs src")
        return self._add(SEND, peer, tag, chunks, deps, name, None, data)

    def recv(
        self,
        peer: int,
        chunks: float,
        tag: int = 0,
        *,
        deps: Iterable[int] = (),
        name: str = "",
        dst: SegmentsLike | None = None,
        reduce: SegmentsLike | bool | None = None,
    ) -> int:
        """Receive *chunks* (or bytes) from group position (or offset) *peer*.

        The message is stored into *dst*, or with *reduce* (the local operand; True: *dst* itself)
        ``dst = reduce ⊕ message`` is written.
        """
        name = name or f"recv_{peer}"
        data = None
        if dst is not None:
            if reduce is None or reduce is False:
                data = self._data("store", chunks, name, dst, None)
            else:
                data = self._data("reduce", chunks, name, dst, dst if reduce is True else reduce)
        elif reduce not in (None, False):
            raise ValueError(f"{name}: reduce needs dst")
        return self._add(RECV, peer, tag, chunks, deps, name, None, data)

    def reduce(
        self,
        chunks: float,
        *,
        deps: Iterable[int] = (),
        name: str = "",
        duration_ns: float | None = None,
        dst: SegmentsLike | None = None,
        src: SegmentsLike | None = None,
    ) -> int:
        """Reduce *chunks* (or bytes) locally; costs bytes / reduction bandwidth unless *duration_ns* is given.

        With *dst* and *src*, ``dst = dst ⊕ src``; without them the node is a cost only (the
        reduction itself is annotated on the receive that brought the operand).
        """
        name = name or "reduce"
        if (dst is None) != (src is None):
            raise ValueError(f"{name}: a local reduction needs both dst and src")
        data = self._data("reduce", chunks, name, dst, src) if dst is not None else None
        return self._add(COMP, -1, 0, chunks, deps, name, duration_ns, data)

    def copy(
        self,
        chunks: float,
        *,
        src: SegmentsLike,
        dst: SegmentsLike,
        deps: Iterable[int] = (),
        name: str = "",
        duration_ns: float | None = None,
    ) -> int:
        """Copy *chunks* locally from *src* to *dst*: a COMP node costed like a reduction of that size."""
        name = name or "copy"
        return self._add(COMP, -1, 0, chunks, deps, name, duration_ns, self._data("copy", chunks, name, dst, src))

    def mark_exits(self, *nodes: int) -> None:
        """The part ends (for its collective) when these nodes have finished (see :attr:`AlgoGraph.exits`)."""
        self.graph.exits = tuple(dict.fromkeys((*self.graph.exits, *nodes)))

    def gate(self, node: int, k: int, armed_by: int) -> None:
        """Gate *node*: ready at a dependency's completion once *armed_by* and *k* dependencies have finished.

        See :attr:`AlgoGraph.gates`.
        """
        deps = self.graph.deps(node)
        if not 1 <= k <= len(deps) or not 0 <= armed_by < self.graph.num_nodes or armed_by == node:
            raise ValueError(f"node {node}: gate needs 1 <= k <= {len(deps)} dependencies and another node to arm it")
        self.graph.gates[node] = (k, armed_by)

    def build(self) -> AlgoGraph:
        """The graph written so far."""
        g = self.graph
        if len(g.data) != len(g.kinds):
            g.data.extend([None] * (len(g.kinds) - len(g.data)))
        return g
