"""Algorithm families as Chakra ET files: encode and write one file per rank.

An algorithm family is ``PREFIX.<rank>.et``, one Chakra ET trace per rank of an :class:`~etsim.algo.graph.AlgoGraph`
(peers made absolute). This module writes that form: :func:`algo_graph_to_trace` and :func:`encode_algo_graph` (the
first as protobuf nodes, the second as bytes framed directly, byte-identical), :func:`write_family` /
:func:`write_family_by_rank` whole families (streamed, or by forked workers). :mod:`etsim.algo.family_graph` reads
a rank back into its graph (the rules), :mod:`etsim.algo.family_read` reads rank files fast.
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
from etsim.algo.dataflow import OUT_OF_PLACE, Segment, absolute_segments, format_segments
from etsim.algo.graph import COMP, SEND, AlgoGraph
from etsim.chakra.attributes import make_attribute
from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import NodeType, Trace
from etsim.chakra.io import encode_node, encode_varint, write_trace
from etsim.errors import TraceError
from etsim.files import make_parent, write_bytes

__all__ = [
    "SIZE_FREE_NOTE",
    "algo_graph_to_trace",
    "algorithm_traces",
    "encode_algo_graph",
    "family_prefix",
    "framed_attribute",
    "header_frame",
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

    def __init__(self) -> None:
        super().__init__()
        #: Data annotations by (name, buffer, absolute offset, count, stride) for a relative run resolved at a rank,
        #: or by (name, segments) for absolute segments.
        self.runs: dict[tuple[Any, ...], Any] = {}

    def __missing__(self, key: tuple[str, object, str | None]) -> Any:
        if len(self) > 1 << 20:
            self.clear()
            self.runs.clear()
        value = self[key] = self.make(*key)
        return value

    def segments(self, name: str, segs: tuple[Segment, ...], position: int, group_size: int, total: int | None) -> Any:
        """The string attribute *name* of *segs* with relative offsets resolved for *position*.

        It is what :func:`~etsim.algo.dataflow.absolute_segments` and :func:`~etsim.algo.dataflow.format_segments`
        give. One relative run that does not wrap (the common case) is looked up by its absolute chunks, so the
        ranks of a family share the attribute without resolving and formatting it again.
        """
        cnt = segs[0].cnt if len(segs) == 1 and segs[0].rel else None
        if cnt and total and not total % group_size:
            s = segs[0]
            off = (s.off + position * (total // group_size)) % total
            if 0 <= off + (cnt - 1) * s.stride < total:
                stride = s.stride if cnt > 1 else 1  # (as absolute_segments writes a run of one)
                run = (name, s.buf, off, cnt, stride)
                attribute = self.runs.get(run)
                if attribute is None:
                    text = format_segments([Segment(s.buf, off, cnt, stride, False)])
                    attribute = self.runs[run] = self[name, text, "string_val"]
                return attribute
        if not any(s.rel for s in segs):  # the same at every rank
            attribute = self.runs.get((name, segs))
            if attribute is None:
                attribute = self.runs[name, segs] = self[name, format_segments(segs), "string_val"]
            return attribute
        return self[name, format_segments(absolute_segments(segs, position, group_size, total)), "string_val"]

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
                        attrs.append(attributes.segments(key, segs, position, group_size, graph.total_chunks))
                    except ValueError as exc:
                        raise ValueError(f"node {pos} ({names[pos]}): {key}: {exc}") from None
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
    parts = [header_frame(graph, position, group_size, metadata=metadata, size=size)]
    nodes = _node_specs(graph, position, group_size, _FRAMED_ATTRIBUTES, size)
    for pos, (node_type, name, deps, micros, attrs) in enumerate(nodes):
        body = encode_node(pos, name, node_type, deps, micros, attrs)
        parts.append(encode_varint(len(body)))
        parts.append(body)
    return b"".join(parts)


def header_frame(
    graph: AlgoGraph,
    position: int,
    group_size: int,
    *,
    metadata: Mapping[str, str] | None = None,
    size: int | None = None,
) -> bytes:
    """The first frame of :func:`encode_algo_graph`'s file for these arguments: the file's global metadata."""
    extra, _ = _trace_spec(graph, position, group_size, _FRAMED_ATTRIBUTES, size)
    return _metadata_frame(extra, metadata)


def framed_attribute(name: str, value: object, member: str | None = None) -> bytes:
    """One ``Node.attr`` entry as :func:`encode_algo_graph` writes it (tag, length, serialised attribute).

    *member* is the value's oneof member where it is not the attribute's usual one. Made once per distinct
    attribute, for writers that frame nodes themselves.
    """
    return _FRAMED_ATTRIBUTES[name, value, member]


def _metadata_frame(extra: Sequence[tuple[str, str]], metadata: Mapping[str, str] | None) -> bytes:
    """The framed GlobalMetadata of a file: *extra* then *metadata*, as string attributes."""
    meta = TraceBuilder().metadata
    for key, value in (*extra, *(metadata or {}).items()):
        meta.attr.append(make_attribute(key, value, member="string_val"))
    payload = meta.SerializeToString()
    return encode_varint(len(payload)) + payload


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

    with _staged(text) as stage:
        parts = [range(w, count, jobs) for w in range(jobs)]
        watch = progress.stage(f"writing {text}.*.et", jobs, "writers done")
        # The forked writers get this bound function as it is (fork copies it; nothing is pickled).
        write = functools.partial(_write_ranks, make, stage)
        lost = run_in_workers(write, parts, jobs, lambda part, result: watch.advance(), start="fork")
        if lost:
            ranks = sorted(rank for part in lost for rank in part)
            shown = ", ".join(str(rank) for rank in ranks[:8]) + (", …" if len(ranks) > 8 else "")
            raise TraceError(f"{text}.*.et: the process writing ranks {shown} died (out of memory?); nothing written")
    return [Path(f"{text}.{rank}.et") for rank in range(count)]


def _write_ranks(make: Callable[[int], Trace | bytes], text: str, ranks: range) -> None:
    """In a forked worker: make these ranks' files with *make* and write them under the prefix *text*."""
    for rank in ranks:
        _write_family_file(make(rank), f"{text}.{rank}.et")
