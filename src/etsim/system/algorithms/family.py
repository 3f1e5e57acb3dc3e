"""``chakra-et``: an algorithm read from a Chakra ET family, one file per algorithm rank."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable

from google.protobuf.message import DecodeError

from etsim import progress
from etsim.algo.dataflow import NodeData, Segment
from etsim.algo.family_encode import RankEncoder
from etsim.algo.family_graph import AlgoAttributes, operand_segments
from etsim.algo.family_read import RankRead, read_rank, read_rank_columns
from etsim.algo.graph import RECV, SEND, AlgoGraph
from etsim.chakra.graph import CollectiveType, Trace
from etsim.chakra.io import frame_spans, read_bytes, resolve_family
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import ConfigError, TraceError, warn
from etsim.files import read_into
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
    """*segments* moved back by *shift* chunks (mod *total*), each as a relative segment; None if one wraps.

    A relative segment is read modulo *total*: it stands for the absolute one only when the absolute run lies
    within ``0 .. total-1`` both at this rank and where it is moved to (else a chunk out of the buffer, or a run
    that wraps at one rank, would read as chunks inside it, split differently at others).
    """
    out = []
    for s in segments:
        if s.rel or s.cnt is None:
            return None
        off = (s.off - shift) % total
        if not (_within(s.off, s.cnt, s.stride, total) and _within(off, s.cnt, s.stride, total)):
            return None
        out.append(Segment(s.buf, off, s.cnt, s.stride, True))
    return tuple(out)


def _within(off: int, cnt: int, stride: int, total: int) -> bool:
    """Whether the run of *cnt* chunks from *off* by *stride* lies within ``0 .. total-1``."""
    last = off + (cnt - 1) * stride
    return min(off, last) >= 0 and max(off, last) < total


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

    The family is read once, when the algorithm is made (:func:`~etsim.algo.family_read.read_rank`, by
    several processes for a large family): when the ranks' graphs are one graph up to a relabelling of
    peers (each peer an offset from the rank, as in exported natives, MSCCLang rings and many synthesised
    algorithms), that one graph with relative peers serves every position, so collectives using the family
    can be evaluated in bulk (``workload/bulk.py``) like a native's, and only one graph is kept.

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
            self.paths = resolve_family(spec)
        except TraceError as exc:
            raise ConfigError(f"algorithm {spec!r}: {exc}") from None
        #: Rank files in the family.
        self.num_ranks = len(self.paths)
        self.ignore_ctrl_deps = ignore_ctrl_deps
        self._graphs: dict[int, AlgoGraph] = {}
        #: The graph every position shares (relative peers), or False when the ranks differ.
        self._shared: AlgoGraph | bool = False
        #: Why a rank has no graph (raised when a graph is asked for), by rank.
        self._problems: dict[int, str] = {}
        self._warned = False
        recorded = self._read_family()
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
        n = self.num_ranks
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
        """The ingested graph of algorithm rank *position* (one shared graph when every rank runs the same one)."""
        if isinstance(self._shared, AlgoGraph) and group_size == self.num_ranks:
            return self._shared
        problem = self._problems.get(position)
        if problem is not None:
            raise ConfigError(f"algorithm {self.spec!r}: {problem}")
        graph = self._graphs.get(position)
        if graph is None:  # a rank matched the shared graph while it was read, which a later rank did not
            read = self._read(position)
            if read.graph is None:
                raise ConfigError(f"algorithm {self.spec!r}: {read.problem}")
            graph = self._graphs[position] = read.graph
        return graph

    def _read(self, rank: int, same_as: _SharedColumns | None = None) -> RankRead:
        try:
            return read_rank(
                self.paths[rank], rank, self.num_ranks, ignore_ctrl_deps=self.ignore_ctrl_deps, same_as=same_as
            )
        except TraceError as exc:
            raise ConfigError(f"algorithm {self.spec!r}: {exc}") from None

    def _read_family(self) -> set[CollectiveType | str | None]:
        """Read every rank once: keep the shared graph if there is one, else every rank's; the collectives recorded."""
        n = self.num_ranks
        watch = progress.stage(f"reading {self.spec}", n, "files")
        reads: dict[int, RankRead] = {}
        for rank in range(min(n, 2)):
            reads[rank] = self._read(rank)
            watch.advance()
        first = _first_share(reads, n)
        rest = range(2, n)
        if rest:
            parts = _parts(self, rest)
            columns = encoder = None
            if first is not None:
                encoder = _shared_encoder(self, first, reads[0].recorded)
                # Matching on columns, when matching on bytes is not possible (rank 0's columns are read again).
                rank0 = read_rank_columns(self.paths[0], 0) if encoder is None else None
                columns = _SharedColumns(*rank0, first, n) if rank0 is not None else None
            # Forked readers get this bound function as it is (fork copies it; nothing is pickled).
            read_part = functools.partial(_read_part, self, first, columns, encoder)
            if len(parts) == 1:
                reads.update(read_part(parts[0]))
                watch.advance(len(rest))
            else:
                _read_in_workers(parts, reads, watch, read_part)
        recorded = set()
        for rank in range(n):  # messages in rank order, whatever read the ranks
            read = reads[rank]
            if read.kind == "workload":
                raise ConfigError(
                    f"algorithm {self.spec!r} is a workload, not an algorithm family: {read.problem}; an algorithm is "
                    "made of SEND, RECV and COMP nodes"
                )
        for rank in range(n):
            read = reads[rank]
            if read.kind == "metadata":
                raise ConfigError(f"algorithm {self.spec!r}: {read.problem}")
            recorded.add(read.recorded)
        recorded.discard(None)
        if first is not None and all(read.problem is None and read.graph is None for read in reads.values()):
            self._shared = first  # every rank matched it (and let its graph go)
            return recorded
        for rank, read in reads.items():
            if read.graph is not None:
                self._graphs[rank] = read.graph
            elif read.problem is not None:
                self._problems[rank] = read.problem
        return recorded


def _first_share(reads: dict[int, RankRead], n: int) -> AlgoGraph | None:
    """The shared graph ranks 0 and 1 make (rank 1 decides which operands move with the rank), or None.

    The graphs of ranks that match it are let go (``graph`` None, no problem): the shared graph stands for them.
    """
    if n < 2 or reads[0].graph is None or reads[1].graph is None:
        return None
    first = relative(reads[0].graph, 0, n)
    other = relative(reads[1].graph, 1, n)
    data = relative_data(first.data, other.data, 1, n, first.total_chunks) if first.data is not None else None
    if data is None or not same_graph(first, dataclasses.replace(other, data=first.data)):
        return None
    if data is not first.data:
        first = dataclasses.replace(first, data=data)
    reads[0].graph = reads[1].graph = None
    return first


def _matches(first: AlgoGraph, graph: AlgoGraph, position: int, n: int) -> bool:
    """Whether *graph*, rank *position*'s, is *first* (a shared graph whose operands are decided) relabelled."""
    other = relative(graph, position, n)
    data = relative_data(first.data, other.data, position, n, first.total_chunks, decided=True)
    return data is not None and same_graph(first, dataclasses.replace(other, data=first.data))


class _SharedColumns:
    """Rank 0's columns with the shared graph: a rank whose columns are these relabelled has the shared graph.

    The test is on the columns :func:`~etsim.algo.family_read.read_rank` reads, so a matching rank's graph is
    never assembled. Everything a graph is made of must be equal (types, dependencies, durations, tags, sizes,
    chunk counts, exits, metadata, data operations and the operands that stay put); peers must be rank 0's
    shifted by the rank; an operand that moves with the rank must be the shared graph's relative segment at
    exactly ``off + rank · total / n``. When that holds, :func:`_matches` would find the rank's graph equal to the
    shared one; when it does not, the graph is built and :func:`_matches` decides.
    """

    def __init__(self, trace: Trace, attrs: AlgoAttributes, first: AlgoGraph, n: int) -> None:
        self.trace, self.attrs, self.first, self.n = trace, attrs, first, n
        types = trace.types
        self.sends = [i for i, t in enumerate(types) if t == SEND]
        self.recvs = [i for i, t in enumerate(types) if t == RECV]
        self.peers = [trace.comm_dst[i] for i in self.sends] + [trace.comm_src[i] for i in self.recvs]
        self.fixed: list[tuple[list[int], list[str | None], str]] = []  # operands that stay put: their texts
        self.moving: list[tuple[list[int], list[tuple[str, int, int, int]], str]] = []
        self.usable = first.total_chunks is not None and first.data is not None
        for operand, what, texts in (("src", "data_src", attrs.data_src), ("dst", "data_dst", attrs.data_dst)):
            fixed, moving, keys = [], [], []
            for i, data in enumerate(first.data or ()):
                segs = getattr(data, operand) if data is not None else ()
                if segs and all(s.rel for s in segs):
                    if len(segs) != 1:
                        self.usable = False
                    (seg,) = segs[:1] or (None,)
                    moving.append(i)
                    keys.append((seg.buf, seg.off, seg.cnt or 0, seg.stride) if seg is not None else ("", 0, 0, 0))
                else:
                    fixed.append(i)
            self.fixed.append((fixed, [texts[i] for i in fixed], what))
            self.moving.append((moving, keys, what))

    def __call__(self, trace: Trace, attrs: AlgoAttributes, rank: int) -> bool:
        """Whether rank *rank*'s columns are rank 0's relabelled (see the class docstring)."""
        mine, a0, n = self.trace, self.attrs, self.n
        if not self.usable or not (
            trace.types == mine.types
            and trace.data_ptr == mine.data_ptr
            and trace.data_idx == mine.data_idx
            and trace.ctrl_ptr == mine.ctrl_ptr
            and trace.ctrl_idx == mine.ctrl_idx
            and trace.duration_micros == mine.duration_micros
            and trace.comm_tag == mine.comm_tag
            and trace.comm_size == mine.comm_size
            and trace.tensor_size == mine.tensor_size
            and attrs.chunk_cnt == a0.chunk_cnt
            and attrs.total == a0.total
            and attrs.exits == a0.exits
            and attrs.data_op == a0.data_op
            and trace.metadata == mine.metadata
        ):
            return False
        peers = [trace.comm_dst[i] for i in self.sends] + [trace.comm_src[i] for i in self.recvs]
        for p, q in zip(peers, self.peers, strict=True):
            if p is None or q is None or not 0 <= p < n or (p - rank) % n != q % n:
                return False
        texts = {"data_src": attrs.data_src, "data_dst": attrs.data_dst}
        for nodes, expected, what in self.fixed:
            if [texts[what][i] for i in nodes] != expected:
                return False
        total = self.first.total_chunks
        assert total is not None
        shift = rank * (total // n)
        chunks = self.first.chunks
        for nodes, keys, what in self.moving:
            column = texts[what]
            try:
                segs = [operand_segments(column[i], chunks[i], what) if column[i] is not None else () for i in nodes]
            except ValueError:
                return False
            for got, (buf, off, cnt, stride) in zip(segs, keys, strict=True):
                at = (off + shift) % total
                if got != (Segment(buf, at, cnt, stride, False),) or not _within(at, cnt, stride, total):
                    return False  # (what _shifted refuses too)
        return True


def _shared_encoder(
    algo: ChakraAlgorithm, first: AlgoGraph, recorded: CollectiveType | str | None
) -> tuple[CollectiveType | str | None, RankEncoder] | None:
    """An encoder of the shared graph that writes ranks 0 and 1 byte for byte as their files are, or None.

    Such an encoder's rank *p* differs from its rank 0 only in peers, shifted by *p*, and in the data annotations
    that move with the rank (:class:`~etsim.algo.family_io.RankEncoder`). So a file equal to it, at a rank where each
    of those stays one run within the buffer (:meth:`~etsim.algo.family_io.RankEncoder.encode_runs`), reads as rank
    0's graph with peers and moving operands shifted: the shared graph. The metadata is rank 0's (the extra
    attributes the writer adds, then the others in order; the buffer size from ``comm_size_written_for``).
    """
    try:
        data0 = read_bytes(algo.paths[0])
        starts, ends = frame_spans(data0, algo.paths[0])
        meta = pb.GlobalMetadata()
        meta.ParseFromString(data0[starts[0] : ends[0]])
    except (TraceError, DecodeError, IndexError):
        return None
    written = {"data_placement", "data_setup", "comm_size_written_for"}
    attrs = [(a.name, a.string_val) for a in meta.attr if a.WhichOneof("value") == "string_val"]
    if len(attrs) != len(meta.attr):
        return None
    size_text = dict(attrs).get("comm_size_written_for")
    try:
        size = int(size_text) if size_text is not None else None
        encoder = RankEncoder(first, algo.num_ranks, metadata={k: v for k, v in attrs if k not in written}, size=size)
        if encoder.encode_runs(0) != data0 or encoder.encode_runs(1) != read_bytes(algo.paths[1]):
            return None
    except (ValueError, TraceError):
        return None
    return recorded, encoder


#: Families of at least this many bytes are read by several processes (below, starting them costs what they save).
PARALLEL_BYTES = 16 << 20


def _parts(algo: ChakraAlgorithm, ranks: range) -> list[range]:
    """*ranks* in runs, one per reading process: one run for a small family, or a process that runs threads."""
    import os

    from etsim.workers import fork_jobs

    jobs = fork_jobs()
    if jobs <= 1 or len(ranks) < 2 * jobs:
        return [ranks]
    try:
        size = sum(os.stat(algo.paths[rank]).st_size for rank in ranks)
    except OSError:
        return [ranks]
    if size < PARALLEL_BYTES:
        return [ranks]
    bounds = [ranks.start + len(ranks) * k // jobs for k in range(jobs + 1)]
    return [range(lo, hi) for lo, hi in itertools.pairwise(bounds)]


def _read_part(
    algo: ChakraAlgorithm,
    first: AlgoGraph | None,
    columns: _SharedColumns | None,
    encoder: tuple[CollectiveType | str | None, RankEncoder] | None,
    ranks: range,
) -> dict[int, RankRead]:
    """Read *ranks* of *algo*'s family; a rank matching the shared graph keeps no graph.

    *first* is the shared graph so far, *columns* and *encoder* the ways a rank is compared with it.
    """
    out = {}
    buffer = bytearray()
    for rank in ranks:
        if encoder is not None:
            recorded, encode = encoder
            expected = encode.encode_runs(rank)
            if expected is not None:
                got = read_into(algo.paths[rank], buffer)
                if got is not None:
                    buffer, count = got
                    same = count == len(expected) and buffer.startswith(expected)
                else:
                    same = read_bytes(algo.paths[rank]) == expected
                if same:
                    out[rank] = RankRead(None, recorded, fast=True, same=True)
                    continue
        read = algo._read(rank, columns)
        if first is not None and read.graph is not None and _matches(first, read.graph, rank, algo.num_ranks):
            read.graph = None
        out[rank] = read
    return out


def _read_in_workers(
    parts: list[range],
    reads: dict[int, RankRead],
    watch: progress.Stage,
    read_part: Callable[[range], dict[int, RankRead]],
) -> None:
    """Read *parts* with *read_part* in this process (the first) and in forked ones (the others) into *reads*."""
    from etsim.workers import run_in_workers

    def done(part: range, result: dict[int, RankRead]) -> None:
        reads.update(result)
        watch.advance(len(part))

    lost = run_in_workers(read_part, parts[1:], len(parts) - 1, done, start="fork",
                          meanwhile=lambda: done(parts[0], read_part(parts[0])))  # fmt: skip
    for part in lost:  # a reader that died (out of memory?): its share is read here
        done(part, read_part(part))
