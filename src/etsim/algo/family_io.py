"""Algorithm families as Chakra ET files: encode, decode and write one file per rank.

An algorithm family is ``PREFIX.<rank>.et``, one Chakra ET trace per rank of an :class:`~etsim.algo.graph.AlgoGraph`
(peers made absolute). This module is the one place that knows that form: :func:`algo_graph_to_trace` and
:func:`encode_algo_graph` write it (the first as protobuf nodes, the second as bytes framed directly, byte-identical),
:func:`algo_graph_from_trace` reads it back (sizes symbolic or absolute, data annotations checked),
:func:`write_family` / :func:`write_family_by_rank` write whole families (streamed, or by forked workers), and
:func:`recorded_collective` reads the collective a file records.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from etsim import progress
from etsim.algo.dataflow import (
    OUT_OF_PLACE,
    NodeData,
    absolute_segments,
    format_segments,
    parse_placement,
    parse_segments,
    segments,
)
from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph
from etsim.chakra.attributes import make_attribute
from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import CollectiveType, NodeType, Trace, parse_collective
from etsim.chakra.io import encode_node, encode_varint, write_trace
from etsim.errors import TraceError
from etsim.files import make_parent, write_bytes

__all__ = [
    "SIZE_FREE_NOTE",
    "algo_graph_from_trace",
    "algo_graph_to_trace",
    "algorithm_traces",
    "encode_algo_graph",
    "family_prefix",
    "recorded_collective",
    "write_family",
    "write_family_by_rank",
    "written_tags",
]

#: What a writer says when it writes a family without absolute sizes.
SIZE_FREE_NOTE = (
    "the files give sizes as chunk counts only (msg_chunk_cnt of total_chunk_cnt), which etsim scales to any call; "
    "consumers that read bytes only (simulators' custom-collective paths) need comm_size: write them with --size "
    "BYTES (the collective's buffer)"
)

#: Words a family's ``collective`` metadata may hold for a program usable for any collective.
_ANY_COLLECTIVE = frozenset({"any", "custom", "send", "recv"})


#: One node as written: (type, name, data dependencies, duration µs, attributes as the caller's mapping gives them).
NodeSpec = tuple[int, str, list[int], int, list[Any]]


def written_tags(graph: AlgoGraph, position: int, group_size: int) -> list[int]:
    """The tag each SEND/RECV of *graph* (at *position*) is written with: a different one per transfer of a rank pair.

    Each side numbers its transfers with one peer by (tag, k) — k counting a channel's (peer, tag) transfers
    in node order — 0, 1, 2, …: the two sides of a pair get the same number, every transfer between two ranks
    has its own tag, and no consumer depends on the order in which it posts receives that are ready together.
    etsim pairs the k-th *issued* send of a channel with the k-th issued receive; that is node order whenever a
    channel's transfers are ordered by their dependencies, as in every native, MSCCL-IR conversion and TACOS
    family. A graph whose same-channel transfers are not ordered matches only by posting order in any
    consumer (``etsim algo verify`` warns about it); written, such a graph pairs its transfers in node order.
    """
    relative = graph.relative_peers
    seen: dict[tuple[int, int, int], int] = {}
    keys: list[tuple[int, int, int, int] | None] = []
    per_pair: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for pos, kind in enumerate(graph.kinds):
        if kind == COMP:
            keys.append(None)
            continue
        tag = graph.tags[pos]
        peer = (position + graph.peers[pos]) % group_size if relative else graph.peers[pos]
        k = seen.get((kind, peer, tag), 0)
        seen[kind, peer, tag] = k + 1
        keys.append((kind, peer, tag, k))
        per_pair.setdefault((kind, peer), []).append((tag, k))
    number = {pair: {tk: i for i, tk in enumerate(sorted(tks))} for pair, tks in per_pair.items()}
    return [0 if key is None else number[key[0], key[1]][key[2], key[3]] for key in keys]


class _Attributes(dict[tuple[str, object, "str | None"], Any]):
    """Attributes by ``(name, value, oneof member or None for the usual one)``, made once each.

    A name always carries one type of value (``is_cpu_op`` bools, ``comm_tag`` ints), so True and 1
    never meet under one key. Subclasses say what an attribute is made into.
    """

    def __missing__(self, key: tuple[str, object, str | None]) -> Any:
        if len(self) > 1 << 20:
            self.clear()
        value = self[key] = self.make(*key)
        return value

    def make(self, name: str, value: object, member: str | None) -> Any:
        """The attribute as a protobuf message."""
        return make_attribute(name, value, member=member)


class _FramedAttributes(_Attributes):
    """Attributes as ``Node.attr`` field entries: tag, length and the AttributeProto the runtime serialised."""

    def make(self, name: str, value: object, member: str | None) -> bytes:
        """The serialised, framed attribute."""
        payload = make_attribute(name, value, member=member).SerializeToString()
        return b"\x52" + encode_varint(len(payload)) + payload


_MESSAGE_ATTRIBUTES = _Attributes()
_FRAMED_ATTRIBUTES = _FramedAttributes()


def _trace_spec(
    graph: AlgoGraph, position: int, group_size: int, attributes: _Attributes, size: int | None = None
) -> tuple[list[tuple[str, str]], Iterator[NodeSpec]]:
    """What :func:`algo_graph_to_trace` writes: string metadata attributes, then every node in order.

    The one description of the Chakra ET form of an algorithm graph, shared by the trace builder
    (attributes as protobuf messages) and the direct encoder (attributes as serialised bytes).
    """
    if graph.gates:
        raise ValueError("a graph with gated nodes (released by completion order) has no Chakra ET form")
    metadata = []
    if any(d is not None for d in graph.data):
        metadata.append(("data_placement", ",".join(graph.placement or (OUT_OF_PLACE,))))
    if graph.setup:
        copies = []
        for c in graph.setup:
            dst, src = (format_segments(absolute_segments(x, position, group_size, graph.total_chunks)) for x in c[1:])
            copies.append(f"{dst}={src}")
        metadata.append(("data_setup", ";".join(copies)))
    if size is not None and graph.total_chunks is not None:
        metadata.append(("comm_size_written_for", str(size)))
    return metadata, _node_specs(graph, position, group_size, attributes, size)


def _node_specs(
    graph: AlgoGraph, position: int, group_size: int, attributes: _Attributes, size: int | None
) -> Iterator[NodeSpec]:
    symbolic = graph.total_chunks is not None
    tags = written_tags(graph, position, group_size)
    if symbolic and size is not None and graph.total_chunks and size % graph.total_chunks:
        raise ValueError(f"a buffer of {size} bytes does not split into the algorithm's {graph.total_chunks} chunks")
    unit = size // int(graph.total_chunks) if symbolic and size is not None and graph.total_chunks else None
    relative = graph.relative_peers
    exits = set(graph.exits)
    data = graph.data if any(d is not None for d in graph.data) else []
    not_cpu = attributes["is_cpu_op", False, None]
    total = attributes["total_chunk_cnt", int(graph.total_chunks or 0), "int32_val"]
    exit_mark = attributes["etsim_exit", True, None]
    comp_type, send_type = int(NodeType.COMP_NODE), int(NodeType.COMM_SEND_NODE)
    recv_type = int(NodeType.COMM_RECV_NODE)
    chunks, peers, names, durations = graph.chunks, graph.peers, graph.names, graph.durations_ns
    for pos, kind in enumerate(graph.kinds):
        amount = chunks[pos]
        attrs = [not_cpu]
        if kind == COMP:
            dur = durations[pos]
            node_type = comp_type
            micros = round(dur / 1000) if dur else 0
        else:
            peer = (position + peers[pos]) % group_size if relative else peers[pos]
            attrs.append(attributes["comm_dst" if kind == SEND else "comm_src", peer, None])
            attrs.append(attributes["comm_tag", tags[pos], None])
            node_type = send_type if kind == SEND else recv_type
            micros = 0
        if pos in exits:
            attrs.append(exit_mark)
        if symbolic:
            if amount != int(amount):
                raise ValueError(f"node {pos}: fractional chunk count {amount} cannot be written to Chakra ET")
            attrs.append(attributes["msg_chunk_cnt", int(amount), "int32_val"])
            attrs.append(total)
            if unit is not None:  # absolute bytes beside the counts, for consumers that read bytes only
                attrs.append(attributes["comm_size", int(amount) * unit, None])
        else:
            attrs.append(attributes["comm_size", int(amount), None])
        note = data[pos] if pos < len(data) else None
        if note is not None:
            attrs.append(attributes["data_op", note.op, "string_val"])
            for key, segs in (("data_src", note.src), ("data_dst", note.dst)):
                if segs:
                    try:
                        fixed = absolute_segments(segs, position, group_size, graph.total_chunks)
                    except ValueError as exc:
                        raise ValueError(f"node {pos} ({names[pos]}): {key}: {exc}") from None
                    attrs.append(attributes[key, format_segments(fixed), "string_val"])
        yield node_type, names[pos], graph.deps(pos), micros, attrs


def algo_graph_to_trace(graph: AlgoGraph, position: int, group_size: int, *, size: int | None = None) -> Trace:
    """A Chakra ET trace of *graph* for the rank at *position* (peers made absolute).

    Symbolic graphs are written with MSCCL-IR conversion's attributes ``msg_chunk_cnt`` and
    ``total_chunk_cnt`` (int32), and, when *size* (the collective's buffer in bytes, a multiple of the
    chunk count) is given, ``comm_size`` beside them, for consumers that read bytes only (other simulators'
    custom collectives; the global metadata ``comm_size_written_for`` records *size*); absolute graphs
    with ``comm_size``. Tags are :func:`written_tags`, unique per transfer of a rank pair.
    Reductions without an explicit duration are COMP nodes carrying their size, so the
    simulator costs them with its reduction model. Data annotations become the string attributes
    ``data_op``, ``data_src`` and ``data_dst`` with offsets made absolute for *position*, and the
    placement the global metadata attribute ``data_placement`` (:mod:`etsim.algo.dataflow`).
    """
    metadata, nodes = _trace_spec(graph, position, group_size, _MESSAGE_ATTRIBUTES, size)
    b = TraceBuilder()
    for key, value in metadata:
        b.metadata.attr.append(make_attribute(key, value, member="string_val"))
    for node_type, name, deps, micros, attrs in nodes:
        b.node(node_type, name, deps=deps, duration_micros=micros)
        b.nodes[-1].attr.extend(attrs)
    return b.build(rank=position)


def encode_algo_graph(
    graph: AlgoGraph,
    position: int,
    group_size: int,
    *,
    metadata: Mapping[str, str] | None = None,
    size: int | None = None,
) -> bytes:
    """The bytes of ``algo_graph_to_trace(graph, position, group_size)`` as a file, without building it.

    Byte-identical to serialising that trace (with *metadata* added as string attributes, as
    :func:`algorithm_traces` does) — the protobuf runtime stays the reference: attributes are
    serialised by it (once per distinct attribute), node fields are framed here
    (:func:`~etsim.chakra.io.encode_node`). Several times faster than building protobuf nodes, for
    writing large families.
    """
    extra, nodes = _trace_spec(graph, position, group_size, _FRAMED_ATTRIBUTES, size)
    meta = TraceBuilder().metadata
    for key, value in (*extra, *(metadata or {}).items()):
        meta.attr.append(make_attribute(key, value, member="string_val"))
    payload = meta.SerializeToString()
    parts = [encode_varint(len(payload)), payload]
    for pos, (node_type, name, deps, micros, attrs) in enumerate(nodes):
        body = encode_node(pos, name, node_type, deps, micros, attrs)
        parts.append(encode_varint(len(body)))
        parts.append(body)
    return b"".join(parts)


def algo_graph_from_trace(trace: Trace, *, ignore_ctrl_deps: bool = False) -> AlgoGraph:
    """Read one rank of an algorithm family (Chakra ET) into an :class:`AlgoGraph`.

    Sizes are symbolic when every SEND/RECV carries ``msg_chunk_cnt`` and ``total_chunk_cnt``
    (as MSCCL-IR conversion writes), else absolute ``comm_size``. A COMP node's size is its
    own (``msg_chunk_cnt``, ``comm_size`` or ``tensor_size``) or else that of the first
    SEND/RECV it depends on; its duration is ``duration_micros`` if set.

    Raises:
        ValueError: a node the simulator cannot run, naming file, rank and node.
    """
    from etsim.chakra.validate import topological_order

    n = trace.num_nodes
    chunk_cnt: list[int | None] = [None] * n
    total: set[int] = set()
    texts: dict[int, dict[str, str]] = {}
    exits: list[int] = []
    if trace.nodes:
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
                    texts.setdefault(pos, {})[name] = attr.string_val
    comm_positions = [p for p, t in enumerate(trace.types) if t in (SEND, RECV)]
    symbolic = bool(comm_positions) and all(chunk_cnt[p] is not None for p in comm_positions) and len(total) == 1
    g = AlgoGraph(total_chunks=total.pop() if symbolic else None, exits=tuple(exits))
    if symbolic and all(trace.comm_size[p] is not None for p in comm_positions):
        # comm_size beside the counts (written with --size): both must describe one buffer.
        sizes = {trace.comm_size[p] * g.total_chunks / chunk_cnt[p] for p in comm_positions if chunk_cnt[p]}  # type: ignore[operator]
        if len(sizes) > 1:
            p = next(p for p in comm_positions if chunk_cnt[p])
            raise ValueError(
                f"{trace.describe(p)}: comm_size {trace.comm_size[p]} and msg_chunk_cnt {chunk_cnt[p]} of "
                f"{g.total_chunks} describe a different buffer than the other nodes ({sorted(sizes)[:3]} bytes)"
            )
        g.written_bytes = []
    order = topological_order(trace, include_ctrl=not ignore_ctrl_deps)
    if len(order) != n:
        raise ValueError(f"{trace.where()}the algorithm graph has a dependency cycle")
    for pos in range(n):
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
        g.data.append(_read_data(texts[pos], g.kinds[-1], g.chunks[-1], trace, pos) if pos in texts else None)
        deps = trace.data_deps(pos) + ([] if ignore_ctrl_deps else trace.ctrl_deps(pos))
        g.deps_idx.extend(deps)
        g.deps_ptr.append(len(g.deps_idx))
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


def _read_data(texts: dict[str, str], kind: int, chunks: float, trace: Trace, pos: int) -> NodeData:
    """Node *pos*'s :class:`~etsim.algo.dataflow.NodeData` from its ``data_*`` attributes (checked)."""
    op = texts.get("data_op")
    allowed = _KIND_OPS.get(kind, ())
    if op not in allowed:
        what = f"data_op {op!r}" if op is not None else "data_src/data_dst without data_op"
        raise ValueError(f"{trace.describe(pos)}: {what} on this node (expected {' or '.join(allowed) or 'none'})")
    try:
        return _node_data(op, texts.get("data_src"), texts.get("data_dst"), chunks)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"{trace.describe(pos)}: {exc}") from None


@functools.lru_cache(maxsize=1 << 16)
def _node_data(op: str, src_text: str | None, dst_text: str | None, chunks: float) -> NodeData:
    """The checked annotation of a node, parsed once per distinct text.

    The ranks of a family repeat the same texts; the (immutable) result is then shared by their graphs.
    """
    src = segments(parse_segments(src_text), chunks, "data_src") if src_text is not None else ()
    dst = segments(parse_segments(dst_text), chunks, "data_dst") if dst_text is not None else ()
    need_src, need_dst = op != "store", op != "send"
    if (need_src and not src and chunks) or (need_dst and not dst and chunks):
        missing = "data_src" if need_src and not src else "data_dst"
        raise ValueError(f"data_op {op!r} needs {missing}")
    return NodeData(op, dst, src)


def algorithm_traces(
    graphs: Sequence[AlgoGraph], *, metadata: Mapping[str, str] | None = None, size: int | None = None
) -> list[Trace]:
    """One Chakra ET trace per algorithm rank (:func:`algo_graph_to_trace`), with *metadata* as string attributes."""
    n = len(graphs)
    traces = [algo_graph_to_trace(g, position, n, size=size) for position, g in enumerate(graphs)]
    for trace in traces:
        for key, value in (metadata or {}).items():
            trace.metadata.attr.append(make_attribute(key, value, member="string_val"))
    return traces


def family_prefix(prefix: str | os.PathLike[str]) -> str:
    """*prefix* without a trailing ``.et`` (``ring.et`` names the family ``ring.0.et …``)."""
    text = os.fspath(prefix)
    return text[: -len(".et")] if text.endswith(".et") else text


def write_family(files: Iterable[Trace | bytes], prefix: str | os.PathLike[str]) -> list[Path]:
    """Write an algorithm family ``PREFIX.<rank>.et`` (a trailing ``.et`` on *prefix* is dropped).

    This is the one family writer: native exports, MSCCL-IR conversions and synthesised
    algorithms all go through it. *files* are traces or encoded files (:func:`encode_algo_graph`),
    written as they come: a generator keeps one rank in memory at a time.

    Raises:
        TraceError: the directory cannot be created or a file cannot be written (named).
    """
    text = family_prefix(prefix)
    count = 0
    watch = progress.stage(f"writing {text}.*.et", None, "files")
    with _staged(text) as stage:
        for rank, item in enumerate(files):  # a generator: one rank in memory at a time
            _write_family_file(item, f"{stage}.{rank}.et")
            count += 1
            watch.advance()
    return [Path(f"{text}.{rank}.et") for rank in range(count)]


@contextmanager
def _staged(text: str) -> Iterator[str]:
    """A prefix in a hidden directory beside the family's, whose files replace the family's once all are written.

    An interrupted writer leaves no partial family where a run would read it (only, when killed outright, the
    hidden ``.NAME.partial-*`` directory).
    """
    target = Path(text)
    make_parent(f"{text}.0.et", TraceError)
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    except OSError as exc:
        raise TraceError(f"{target.parent}: cannot write there: {exc.strerror or exc}") from None
    try:
        yield str(stage / target.name)
        for path in sorted(stage.iterdir()):
            os.replace(path, target.parent / path.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _write_family_file(item: Trace | bytes, path: str) -> Path:
    return write_trace(item, path) if isinstance(item, Trace) else write_bytes(Path(path), item, TraceError)


def write_family_by_rank(
    make: Callable[[int], Trace | bytes], count: int, prefix: str | os.PathLike[str], *, jobs: int | None = None
) -> list[Path]:
    """Write the family file of each rank ``0 .. count-1``, made by ``make(rank)``, over *jobs* processes.

    With ``jobs`` > 1 (default: :func:`etsim.workers.fork_jobs`, 1 in a process that runs other threads) and POSIX
    ``fork``, ranks are made and written by forked workers (rank r by worker ``r mod jobs``); the files
    are the same as written in order by :func:`write_family`, which this falls back to otherwise.
    """
    import multiprocessing

    from etsim.workers import fork_jobs

    jobs = fork_jobs() if jobs is None else jobs
    text = family_prefix(prefix)
    if jobs <= 1 or count < 2 * jobs or "fork" not in multiprocessing.get_all_start_methods():
        return write_family((make(rank) for rank in range(count)), text)
    from etsim.workers import run_in_workers

    global _FAMILY_JOB
    with _staged(text) as stage:
        _FAMILY_JOB = (make, stage)  # inherited by the forked workers (a closure cannot be pickled)
        try:
            parts = [range(w, count, jobs) for w in range(jobs)]
            watch = progress.stage(f"writing {text}.*.et", jobs, "writers done")
            lost = run_in_workers(_write_ranks, parts, jobs, lambda part, result: watch.advance(), start="fork")
        finally:
            _FAMILY_JOB = None
        if lost:
            ranks = sorted(rank for part in lost for rank in part)
            shown = ", ".join(str(rank) for rank in ranks[:8]) + (", …" if len(ranks) > 8 else "")
            raise TraceError(f"{text}.*.et: the process writing ranks {shown} died (out of memory?); nothing written")
    return [Path(f"{text}.{rank}.et") for rank in range(count)]


_FAMILY_JOB: tuple[Callable[[int], Trace | bytes], str] | None = None


def _write_ranks(ranks: range) -> None:
    """In a forked worker: make and write these ranks' files."""
    assert _FAMILY_JOB is not None
    make, text = _FAMILY_JOB
    for rank in ranks:
        _write_family_file(make(rank), f"{text}.{rank}.et")


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
