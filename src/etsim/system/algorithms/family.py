"""``chakra-et``: an algorithm read from a Chakra ET family, one file per algorithm rank."""

from __future__ import annotations

import dataclasses
import functools

from etsim.algo.dataflow import NodeData, Segment
from etsim.algo.family_io import algo_graph_from_trace, recorded_collective
from etsim.algo.graph import RECV, SEND, AlgoGraph
from etsim.chakra.graph import CollectiveType, NodeType
from etsim.chakra.io import load_workload
from etsim.errors import ConfigError, TraceError, warn
from etsim.system.algorithms.base import CollectiveAlgorithm

__all__ = ["ChakraAlgorithm", "relative", "same_graph"]


def relative(graph: AlgoGraph, position: int, group_size: int) -> AlgoGraph:
    """*graph* of the rank at *position* with each peer an offset from the rank (mod *group_size*)."""
    if graph.relative_peers:
        return graph
    peers = [
        (p - position) % group_size if k in (SEND, RECV) else p for k, p in zip(graph.kinds, graph.peers, strict=True)
    ]
    return dataclasses.replace(graph, peers=peers, relative_peers=True)


def _shifted(segments: tuple[Segment, ...], shift: int, total: int) -> tuple[Segment, ...] | None:
    """*segments* moved back by *shift* chunks (mod *total*), each as a relative segment; None if one wraps."""
    out = []
    for s in segments:
        if s.rel or s.cnt is None:
            return None
        off = (s.off - shift) % total
        if off + (s.cnt - 1) * s.stride >= total:
            return None  # a run that wraps at this rank is split differently at others
        out.append(Segment(s.buf, off, s.cnt, s.stride, True))
    return tuple(out)


@functools.lru_cache(maxsize=1 << 16)
def _as_relative(segments: tuple[Segment, ...]) -> tuple[Segment, ...]:
    # (cached: the ranks of a family compare their operands with the same first rank's, thousands of times)
    if all(s.rel for s in segments):
        return segments
    return tuple(s._replace(rel=True) for s in segments)


def relative_data(
    first: list[NodeData | None],
    other: list[NodeData | None],
    position: int,
    group_size: int,
    total: int | None,
    *,
    decided: bool = False,
) -> list[NodeData | None] | None:
    """Annotations *first* (rank 0's, or those shared so far) made to serve the rank at *position* too, or None.

    A node's operands must be the same chunks at both ranks (absolute) or the same chunks shifted by the rank
    (``position · total / group_size``, made relative); the choice is per node and operand, so a family whose
    outputs move with the rank while its scratch buffers do not is still one graph. With *decided*, *first*
    already holds the choices (made at the first other rank): an absolute operand must stay equal and a relative
    one must stay shifted, so every rank agrees with one reading.
    """
    if first == other:
        return first
    if not total or total % group_size or len(first) != len(other):
        return None
    shift = position * (total // group_size)
    out: list[NodeData | None] = []
    for a, b in zip(first, other, strict=True):
        if a == b:
            out.append(a)
            continue
        if a is None or b is None or a.op != b.op:
            return None
        operands = []
        for mine, theirs in ((a.dst, b.dst), (a.src, b.src)):
            relative_already = bool(mine) and all(s.rel for s in mine)
            if mine == theirs and not relative_already:
                operands.append(mine)  # the same chunks at every rank so far
            elif (relative_already or not decided) and _shifted(theirs, shift, total) == _as_relative(mine):
                operands.append(_as_relative(mine))  # chunks that move with the rank
            else:
                return None
        out.append(NodeData(a.op, operands[0], operands[1]))
    return out


#: What two graphs must agree on to run as one (names may differ: they only label nodes in messages).
_COMPARED = ("kinds", "peers", "tags", "chunks", "durations_ns", "deps_ptr", "deps_idx", "total_chunks",
             "relative_peers", "data", "placement", "setup", "exits", "written_bytes", "gates")  # fmt: skip


def same_graph(a: AlgoGraph, b: AlgoGraph) -> bool:
    """Whether *a* and *b* run identically (every field timing and data depend on is equal)."""
    return all(getattr(a, f) == getattr(b, f) for f in _COMPARED)


class ChakraAlgorithm(CollectiveAlgorithm):
    """An algorithm ingested from a Chakra ET family: one file per algorithm rank.

    Algorithm rank *i* runs on the *i*-th rank of the communicator group. Sizes are symbolic
    (``msg_chunk_cnt`` of ``total_chunk_cnt``, scaled to the workload's ``comm_size``) or the
    files' absolute ``comm_size``. The collective it implements is the one its global metadata
    records (``collective``, as etsim and the MSCCL-IR converters write it); a family that records
    none runs for any collective, with a warning once.

    Args:
        spec: the family (a prefix, ``P.et`` or a directory).
        ignore_ctrl_deps: walk data dependencies only.

    Raises:
        ConfigError: the family cannot be read, is a workload (it has collective nodes), or its ranks
            disagree on the collective they implement (the message names it).
    """

    name = "chakra-et"
    source = "chakra-et"
    collectives = frozenset(CollectiveType)

    def __init__(self, spec: str, *, ignore_ctrl_deps: bool = False) -> None:
        self.spec = spec
        try:
            self.workload = load_workload(spec)
        except TraceError as exc:
            raise ConfigError(f"algorithm {spec!r}: {exc}") from None
        self.ignore_ctrl_deps = ignore_ctrl_deps
        self._graphs: dict[int, AlgoGraph] = {}
        #: The graph every position shares (relative peers), False when the ranks differ, None before the first call.
        self._shared: AlgoGraph | bool | None = None
        self._warned = False
        for trace in self.workload:
            for pos, node_type in enumerate(trace.types):
                if node_type == NodeType.COMM_COLL_NODE:
                    raise ConfigError(
                        f"algorithm {spec!r} is a workload, not an algorithm family: {trace.describe(pos)} is a "
                        "collective (COMM_COLL) node; an algorithm is made of SEND, RECV and COMP nodes"
                    )
        recorded = set()
        for trace in self.workload:
            try:
                recorded.add(recorded_collective(trace))
            except ValueError as exc:
                raise ConfigError(f"algorithm {spec!r}: {trace.where()}metadata 'collective': {exc}") from None
        if len(recorded) > 1:
            names = sorted(str(getattr(r, "name", r)).lower() for r in recorded)
            raise ConfigError(f"algorithm {spec!r}: its rank files record different collectives ({', '.join(names)})")
        #: The collective the files record (a CollectiveType, "any", or None when they record none).
        self.recorded = recorded.pop() if recorded else None
        if isinstance(self.recorded, CollectiveType):
            self.collectives = frozenset({self.recorded})  # type: ignore[misc]

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """The recorded collective (any, if none is recorded), on a group as large as the family."""
        if isinstance(self.recorded, CollectiveType) and collective != self.recorded:
            return (
                f"algorithm {self.spec!r} implements {self.recorded.name.lower()} (its metadata says so), "
                f"not {collective.name.lower()}"
            )
        n = self.workload.num_ranks
        if n != group_size:
            return f"algorithm {self.spec!r} has {n} rank files but the communicator group has {group_size} ranks"
        if self.recorded is None and not self._warned:
            self._warned = True
            warn(
                f"algorithm {self.spec!r} records no collective type in its metadata; etsim cannot check that it "
                f"implements {collective.name.lower()} (etsim's writers record it)"
            )
        return None

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """The ingested graph of algorithm rank *position* (one shared graph when every rank runs the same one).

        The first call reads every rank's file: when the ranks' graphs are one graph up to a relabelling of
        peers (each peer an offset from the rank, as in exported natives, MSCCLang rings and many synthesised
        algorithms), that one graph with relative peers serves every position, so collectives using the family
        can be evaluated in bulk (``workload/bulk.py``) like a native's, and only one graph is kept.
        """
        if self._shared is None:
            self._shared = self._shared_graph(group_size) or False
        if isinstance(self._shared, AlgoGraph):
            return self._shared
        return self._position_graph(group_size, position)

    def _shared_graph(self, group_size: int) -> AlgoGraph | None:
        """The one relative-peer graph every rank's graph is, or None."""
        if group_size != self.workload.num_ranks or group_size < 2:
            return None
        first = relative(self._position_graph(group_size, 0), 0, group_size)
        data: list[NodeData | None] | None = first.data
        for position in range(1, group_size):
            other = relative(self._position_graph(group_size, position), position, group_size)
            if data is not None:
                data = relative_data(
                    first.data, other.data, position, group_size, first.total_chunks, decided=position > 1
                )
            if data is None or not same_graph(first, dataclasses.replace(other, data=first.data)):
                return None
            if data is not first.data:
                # Every rank must agree with one choice per operand: rank 1's, checked against the others.
                first = dataclasses.replace(first, data=data)
        self._graphs.clear()  # one graph serves every position
        return first

    def _position_graph(self, group_size: int, position: int) -> AlgoGraph:
        """The graph read from algorithm rank *position*'s file (cached)."""
        graph = self._graphs.get(position)
        if graph is None:
            trace = self.workload[position]
            try:
                graph = algo_graph_from_trace(trace, ignore_ctrl_deps=self.ignore_ctrl_deps)
            except ValueError as exc:
                raise ConfigError(f"algorithm {self.spec!r}: {exc}") from None
            for pos, peer in enumerate(graph.peers):
                if graph.kinds[pos] in (SEND, RECV) and not 0 <= peer < group_size:
                    raise ConfigError(
                        f"algorithm {self.spec!r}: {trace.describe(pos)}: peer {peer} is outside the {group_size}-rank "
                        "group"
                    )
            self._graphs[position] = graph
            # The graph is all that is read from now on: let the parsed file go (a family's files take more
            # memory than its graphs). The slot stays, so the family keeps its rank count.
            self.workload.traces[position] = None  # type: ignore[call-overload]
        return graph
