"""The graph of one rank file of an algorithm family: which attributes say what, and the checks.

:func:`algo_graph_from_trace` reads a :class:`~etsim.chakra.graph.Trace` (with its protobuf nodes) into an
:class:`~etsim.algo.graph.AlgoGraph`: sizes symbolic (``msg_chunk_cnt`` of ``total_chunk_cnt``) or absolute
(``comm_size``), data annotations parsed and checked per node kind, global metadata for placement and setup
copies. :func:`assemble_algo_graph` is its second half, shared with the columnar reader of
:mod:`etsim.algo.family_read`. :func:`recorded_collective` reads the collective a file records. The writers are in
:mod:`etsim.algo.family_io`.
"""

from __future__ import annotations

import functools
import itertools
import operator
from dataclasses import dataclass, field
from typing import Any

from etsim.algo.dataflow import NodeData, Segment, parse_placement, parse_segments, segments
from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph
from etsim.cache import CappedTable
from etsim.chakra.graph import CollectiveType, Trace, parse_collective

__all__ = ["AlgoAttributes", "algo_graph_from_trace", "assemble_algo_graph", "operand_segments", "recorded_collective"]

#: Words a family's ``collective`` metadata may hold for a program usable for any collective.
_ANY_COLLECTIVE = frozenset({"any", "custom", "send", "recv"})


@dataclass(slots=True)
class AlgoAttributes:
    """The node attributes an algorithm file adds to the trace's columns (read by :func:`assemble_algo_graph`).

    Attributes:
        chunk_cnt: each node's ``msg_chunk_cnt``, or None.
        data_op, data_src, data_dst: each node's data annotation texts (string attributes), or None.
        total: the distinct ``total_chunk_cnt`` values of all nodes.
        exits: positions of nodes marked ``etsim_exit``.
    """

    chunk_cnt: list[int | None]
    data_op: list[str | None]
    data_src: list[str | None]
    data_dst: list[str | None]
    total: set[int] = field(default_factory=set)
    exits: list[int] = field(default_factory=list)

    @classmethod
    def empty(cls, n: int) -> AlgoAttributes:
        """No attribute on any of *n* nodes."""
        return cls([None] * n, [None] * n, [None] * n, [None] * n)


def algo_graph_from_trace(trace: Trace, *, ignore_ctrl_deps: bool = False) -> AlgoGraph:
    """Read one rank of an algorithm family (Chakra ET) into an :class:`AlgoGraph`.

    Sizes are symbolic when every SEND/RECV carries ``msg_chunk_cnt`` and ``total_chunk_cnt``
    (as MSCCL-IR conversion writes), else absolute ``comm_size``. A COMP node's size is its
    own (``msg_chunk_cnt``, ``comm_size`` or ``tensor_size``) or else that of the first
    SEND/RECV it depends on; its duration is ``duration_micros`` if set.

    Raises:
        ValueError: a node the simulator cannot run, naming file, rank and node.
    """
    attrs = AlgoAttributes.empty(trace.num_nodes)
    chunk_cnt, total, exits = attrs.chunk_cnt, attrs.total, attrs.exits
    texts = {"data_op": attrs.data_op, "data_src": attrs.data_src, "data_dst": attrs.data_dst}
    wanted = _READ_ATTRS
    for pos, node in enumerate(trace.nodes):
        for attr in node.attr:
            name = attr.name
            if name not in wanted:  # most attributes (peers, tags, sizes) are read from the columns
                continue
            if name == "msg_chunk_cnt":
                chunk_cnt[pos] = int(getattr(attr, attr.WhichOneof("value") or "int64_val"))
            elif name == "total_chunk_cnt":
                total.add(int(getattr(attr, attr.WhichOneof("value") or "int64_val")))
            elif name == "etsim_exit":
                if attr.bool_val:
                    exits.append(pos)
            elif attr.WhichOneof("value") == "string_val":
                texts[name][pos] = attr.string_val
    return assemble_algo_graph(trace, attrs, ignore_ctrl_deps=ignore_ctrl_deps)


def assemble_algo_graph(
    trace: Trace, attrs: AlgoAttributes, *, ignore_ctrl_deps: bool = False, acyclic: bool = False
) -> AlgoGraph:
    """The :class:`AlgoGraph` of *trace*'s columns and the algorithm attributes *attrs*.

    The rules are :func:`algo_graph_from_trace`'s. *acyclic*: the caller has checked that every dependency
    precedes its node (no cycle search).

    Raises:
        ValueError: as :func:`algo_graph_from_trace`.
    """
    from etsim.chakra.validate import topological_order

    n = trace.num_nodes
    chunk_cnt, total = attrs.chunk_cnt, set(attrs.total)
    # (Columns picked and combined by map, compress and itemgetter, in C: a family has millions of nodes.)
    comm_positions = list(itertools.compress(range(n), map(_COMM_KINDS.__contains__, trace.types)))
    counts = _picked(chunk_cnt, comm_positions)
    symbolic = bool(comm_positions) and None not in counts and len(total) == 1
    g = AlgoGraph(total_chunks=total.pop() if symbolic else None, exits=tuple(attrs.exits))
    comm_sizes = _picked(trace.comm_size, comm_positions) if symbolic else (None,)
    if None not in comm_sizes:
        # comm_size beside the counts (written with --size): both must describe one buffer (size * total / count).
        some = list(map(bool, counts))
        times_total = map(operator.mul, itertools.compress(comm_sizes, some), itertools.repeat(g.total_chunks))
        sizes = set(map(operator.truediv, times_total, itertools.compress(counts, some)))
        if len(sizes) > 1:
            p = next(p for p in comm_positions if chunk_cnt[p])
            raise ValueError(
                f"{trace.describe(p)}: comm_size {trace.comm_size[p]} and msg_chunk_cnt {chunk_cnt[p]} of "
                f"{g.total_chunks} describe a different buffer than the other nodes ({sorted(sizes)[:3]} bytes)"
            )
        g.written_bytes = []
    if not acyclic and len(topological_order(trace, include_ctrl=not ignore_ctrl_deps)) != n:
        raise ValueError(f"{trace.where()}the algorithm graph has a dependency cycle")
    if not _assemble_columns(g, trace, attrs, symbolic, ignore_ctrl_deps):
        _assemble_nodes(g, trace, attrs, symbolic, ignore_ctrl_deps)  # what the columns could not: named errors
    for attr in trace.metadata.attr:
        if attr.WhichOneof("value") != "string_val":
            continue
        try:
            if attr.name == "data_placement":
                g.placement = parse_placement(attr.string_val)
            elif attr.name == "data_setup":
                g.setup = [_read_copy(text) for text in attr.string_val.split(";") if text.strip()]
        except ValueError as exc:
            raise ValueError(f"{trace.where()}global metadata {attr.name}: {exc}") from None
    return g


def _assemble_columns(g: AlgoGraph, trace: Trace, attrs: AlgoAttributes, symbolic: bool, ignore_ctrl: bool) -> bool:
    """Fill *g*'s node columns a column at a time, as :func:`_assemble_nodes` would; False if it cannot.

    It cannot (and leaves *g* untouched) when a node needs the rules one node at a time: a missing peer or size, a
    node of another type, an annotation to refuse.
    """
    types = trace.types
    comm_size = trace.comm_size
    if not _GRAPH_KINDS.issuperset(types):
        return False
    peers = [
        d if t == SEND else (s if t == RECV else -1)
        for t, d, s in zip(types, trace.comm_dst, trace.comm_src, strict=True)
    ]
    if None in peers:
        return False
    if symbolic:
        amounts = list(attrs.chunk_cnt)
    else:
        amounts = [c if t != COMP else (c or ts) for t, c, ts in zip(types, comm_size, trace.tensor_size, strict=True)]
    for pos in [p for p, a in enumerate(amounts) if a is None]:
        if types[pos] != COMP:
            return False
        for dep in trace.data_deps(pos):  # a COMP without a size of its own takes its first message's
            if types[dep] in (SEND, RECV):
                amounts[pos] = attrs.chunk_cnt[dep] if symbolic else comm_size[dep]
                break
    chunks = list(map(float, amounts)) if None not in amounts else [float(a or 0) for a in amounts]  # type: ignore[arg-type]  # (no None)
    try:
        data = _data_column(attrs.data_op, attrs.data_src, attrs.data_dst, types, chunks)
    except ValueError:
        return False
    g.kinds = list(types)
    g.peers = peers  # type: ignore[assignment]  # (None is ruled out above)
    no_comp = COMP not in types  # (an algorithm without COMP nodes: columns copied whole)
    if no_comp and None not in trace.comm_tag:
        g.tags = list(trace.comm_tag)  # type: ignore[arg-type]
    else:
        g.tags = [(tag or 0) if t != COMP else 0 for t, tag in zip(types, trace.comm_tag, strict=True)]
    g.chunks = chunks
    durations = trace.duration_micros
    if no_comp:
        g.durations_ns = [None] * len(types)
    else:
        g.durations_ns = [None if t != COMP or not d else d * 1000.0 for t, d in zip(types, durations, strict=True)]
    if g.written_bytes is not None:
        g.written_bytes = (
            list(map(float, comm_size)) if None not in comm_size else [float(size or 0) for size in comm_size]  # type: ignore[arg-type]
        )
    g.names = list(trace.names)
    g.data = data
    if ignore_ctrl or not trace.ctrl_idx:
        g.deps_ptr, g.deps_idx = list(trace.data_ptr), list(trace.data_idx)
    else:
        for pos in range(len(types)):
            g.deps_idx += trace.data_deps(pos) + trace.ctrl_deps(pos)
            g.deps_ptr.append(len(g.deps_idx))
    return True


def _picked(column: list[Any], positions: list[int]) -> tuple[Any, ...]:
    """``column[p]`` for each of *positions*."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)(column)  # type: ignore[no-any-return]
    return tuple(column[p] for p in positions)


#: Node types that send or receive.
_COMM_KINDS = frozenset({SEND, RECV})
#: Node types whose graph node :func:`_assemble_columns` makes (others: :func:`_assemble_nodes`).
_GRAPH_KINDS = frozenset({SEND, RECV, COMP})


def _assemble_nodes(g: AlgoGraph, trace: Trace, attrs: AlgoAttributes, symbolic: bool, ignore_ctrl: bool) -> None:
    """Fill *g*'s node columns one node at a time (the reference rules, with errors naming the node)."""
    chunk_cnt = attrs.chunk_cnt
    for pos in range(trace.num_nodes):
        kind = trace.types[pos]
        name = trace.names[pos]
        if kind in (SEND, RECV):
            peer = trace.comm_dst[pos] if kind == SEND else trace.comm_src[pos]
            if peer is None:
                raise ValueError(f"{trace.describe(pos)}: {'send' if kind == SEND else 'receive'} without a peer")
            amount = chunk_cnt[pos] if symbolic else trace.comm_size[pos]
            if amount is None:
                raise ValueError(f"{trace.describe(pos)}: no comm_size (nor msg_chunk_cnt/total_chunk_cnt)")
            g.kinds.append(kind)
            g.peers.append(peer)
            g.tags.append(trace.comm_tag[pos] or 0)
            g.chunks.append(float(amount))
            g.durations_ns.append(None)
            if g.written_bytes is not None:
                g.written_bytes.append(float(trace.comm_size[pos] or 0))
        elif kind == COMP:
            amount = chunk_cnt[pos] if symbolic else (trace.comm_size[pos] or trace.tensor_size[pos])
            if amount is None:
                for dep in trace.data_deps(pos):
                    if trace.types[dep] in (SEND, RECV):
                        amount = chunk_cnt[dep] if symbolic else trace.comm_size[dep]
                        break
            dur = trace.duration_micros[pos]
            g.kinds.append(COMP)
            g.peers.append(-1)
            g.tags.append(0)
            g.chunks.append(float(amount or 0))
            g.durations_ns.append(dur * 1000.0 if dur else None)
            if g.written_bytes is not None:
                g.written_bytes.append(float(trace.comm_size[pos] or 0))
        else:
            # METADATA/INVALID/MEM in an algorithm: no time, kept for dependencies.
            g.kinds.append(COMP)
            g.peers.append(-1)
            g.tags.append(0)
            g.chunks.append(0.0)
            g.durations_ns.append(0.0)
            if g.written_bytes is not None:
                g.written_bytes.append(0.0)
        g.names.append(name)
        op, src, dst = attrs.data_op[pos], attrs.data_src[pos], attrs.data_dst[pos]
        if op is None and src is None and dst is None:
            g.data.append(None)
        else:
            try:
                g.data.append(_checked_data(op, src, dst, g.kinds[-1], g.chunks[-1]))
            except ValueError as exc:
                raise ValueError(f"{trace.describe(pos)}: {exc}") from None
        deps = trace.data_deps(pos) + ([] if ignore_ctrl else trace.ctrl_deps(pos))
        g.deps_idx.extend(deps)
        g.deps_ptr.append(len(g.deps_idx))


def _read_copy(text: str) -> NodeData:
    """A setup copy written ``DST=SRC`` (segments with explicit counts)."""
    dst_text, sep, src_text = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r} is not DST=SRC")
    dst, src = parse_segments(dst_text), parse_segments(src_text)
    count = sum(s.cnt or 0 for s in dst)
    return NodeData("copy", segments(dst, count, "copy dst"), segments(src, count, "copy src"))


#: Node attributes holding data annotations.
_DATA_ATTRS = frozenset({"data_op", "data_src", "data_dst"})
#: Operations each node kind may carry.
_KIND_OPS = {SEND: ("send",), RECV: ("store", "reduce"), COMP: ("copy", "reduce")}
#: The node attributes the reader looks at (the rest come from the trace's columns).
_READ_ATTRS = frozenset({"msg_chunk_cnt", "total_chunk_cnt", "etsim_exit", *_DATA_ATTRS})


#: Checked annotations by ``(op, src, dst, kind, chunks)``: a family's ranks repeat the same few thousand. At most
#: 2^16 entries (then it starts again: a process may read many families).
_DATA_BY_KEY = CappedTable(1 << 16)


def _data_column(
    ops: list[str | None], srcs: list[str | None], dsts: list[str | None], kinds: list[int], chunks: list[float]
) -> list[NodeData | None]:
    """Each node's checked annotation (None without one), looked up per distinct key (ValueError: see below).

    The look-ups run in C (``map`` over ``dict.get``); only the nodes found None are looked at one by one. A bad
    annotation raises ValueError, as :func:`_checked_data` does.
    """
    keys = list(zip(ops, srcs, dsts, kinds, chunks, strict=True))
    found = list(map(_DATA_BY_KEY.get, keys))
    for i in [i for i, value in enumerate(found) if value is None]:
        op, src, dst, kind, amount = key = keys[i]
        if op is None and src is None and dst is None:
            continue  # no annotation
        found[i] = data = _checked_data(op, src, dst, kind, amount)
        _DATA_BY_KEY.put(key, data)
    return found


def _checked_data(op: str | None, src: str | None, dst: str | None, kind: int, chunks: float) -> NodeData:
    """A node's :class:`~etsim.algo.dataflow.NodeData` from its ``data_*`` texts (checked; the caller names it)."""
    allowed = _KIND_OPS.get(kind, ())
    if op not in allowed:
        what = f"data_op {op!r}" if op is not None else "data_src/data_dst without data_op"
        raise ValueError(f"{what} on this node (expected {' or '.join(allowed) or 'none'})")
    return _node_data(op, src, dst, chunks)


@functools.lru_cache(maxsize=1 << 16)
def _node_data(op: str, src_text: str | None, dst_text: str | None, chunks: float) -> NodeData:
    """The checked annotation of a node, parsed once per distinct text.

    The ranks of a family repeat the same texts; the (immutable) result is then shared by their graphs.
    """
    src = operand_segments(src_text, chunks, "data_src") if src_text is not None else ()
    dst = operand_segments(dst_text, chunks, "data_dst") if dst_text is not None else ()
    need_src, need_dst = op != "store", op != "send"
    if (need_src and not src and chunks) or (need_dst and not dst and chunks):
        missing = "data_src" if need_src and not src else "data_dst"
        raise ValueError(f"data_op {op!r} needs {missing}")
    return NodeData(op, dst, src)


@functools.lru_cache(maxsize=1 << 16)
def operand_segments(text: str, chunks: float, what: str) -> tuple[Segment, ...]:
    """One operand's segments, parsed once per distinct text.

    (A large family's nodes combine a few thousand texts in millions of ways: combinations are not cached.)
    """
    return segments(parse_segments(text), chunks, what)


def recorded_collective(trace: Trace) -> CollectiveType | str | None:
    """The collective an algorithm file records in its global metadata (``collective``).

    Returns a :class:`CollectiveType`, ``"any"`` for programs that serve every collective
    (``custom``, point-to-point), or None when the file records nothing. Names are read as
    :func:`~etsim.chakra.graph.parse_collective` reads them (``all_reduce``, ``allreduce`` …; MSCCL-IR's
    ``alltoallv`` is an all-to-all).

    Raises:
        ValueError: the metadata names something that is not a collective.
    """
    for attr in trace.metadata.attr:
        if attr.name != "collective" or attr.WhichOneof("value") != "string_val":
            continue
        text = attr.string_val.strip().lower()
        if text in _ANY_COLLECTIVE:
            return "any"
        if text == "alltoallv":
            return CollectiveType.ALL_TO_ALL
        return parse_collective(text)
    return None
