"""Reading and writing Chakra ET files and per-rank families.

A ``.et`` file is ``frame(GlobalMetadata) frame(Node)*`` where a frame is an unsigned LEB128
varint length followed by that many bytes of protobuf. There is no header or trailer. Files
may be gzipped (detected by the magic bytes ``1f 8b``, whatever the name). A zero-length
frame is a Node with every field at its default, not the end of the file.

A *workload* is one file per rank, ``P.0.et … P.{n-1}.et``. :func:`resolve_family` accepts
the prefix ``P``, the name ``P.et`` for the family, a directory holding exactly one family,
or a single file (a one-rank workload).
"""

from __future__ import annotations

import functools
import gzip
import itertools
import os
import re
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path

from google.protobuf import descriptor_pb2, message_factory
from google.protobuf.message import DecodeError, Message

from etsim import files, progress
from etsim.chakra.graph import NodeColumns, Trace, Workload, gather_columns
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import TraceError, warn
from etsim.files import write_bytes

__all__ = [
    "decode_varint",
    "encode_varint",
    "iter_frames",
    "load_workload",
    "read_bytes",
    "read_trace",
    "resolve_family",
    "serialize_trace",
    "write_trace",
    "write_workload",
]


def _node_stream_class() -> type:
    """A private ``NodeStream { repeated ChakraProtoMsg.Node nodes = 1; }`` message class.

    Not part of the Chakra schema (which stays wire-identical to Chakra's): it only lets one
    protobuf call parse every node frame of a file (see :func:`_parse_nodes`).
    """
    fdp = descriptor_pb2.FileDescriptorProto(
        name="etsim_node_stream.proto", package="etsim_internal", syntax="proto3", dependency=["et_def.proto"]
    )
    message = fdp.message_type.add(name="NodeStream")
    message.field.add(
        name="nodes",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        type_name=".ChakraProtoMsg.Node",
    )
    pool = pb.DESCRIPTOR.pool  # the schema's private pool (see scripts/gen_proto.py)
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("etsim_internal.NodeStream"))


NodeStream = _node_stream_class()
# Frame lengths are varint32 (FeederV3 rejects more than 5 bytes).
_MAX_VARINT_BYTES = 5


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128 encoding of a non-negative integer."""
    if value < _SMALL_LIMIT:
        return _SMALL_VARINTS[value]
    return _encode_varint(value)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_SMALL_LIMIT = 1 << 14
_SMALL_VARINTS = [_encode_varint(v) for v in range(_SMALL_LIMIT)]  # ids, dependencies, lengths: mostly small


def encode_node(
    node_id: int, name: str, node_type: int, data_deps: Sequence[int], duration_micros: int, attrs: Sequence[bytes]
) -> bytes:
    """The serialised ``Node`` with these fields, as protobuf writes it.

    *attrs* are complete ``attr`` field entries (tag 0x52, length, serialised AttributeProto). Fields in
    number order, proto3 defaults omitted, ``data_deps`` packed; tested byte for byte against the
    protobuf runtime.
    """
    out: list[bytes] = []
    if node_id:
        out += (b"\x08", encode_varint(node_id))
    if name:
        text = name.encode()
        out += (b"\x12", encode_varint(len(text)), text)
    if node_type:
        out += (b"\x18", encode_varint(node_type))
    if data_deps:
        packed = b"".join([encode_varint(d) for d in data_deps])
        out += (b"\x2a", encode_varint(len(packed)), packed)
    if duration_micros:
        out += (b"\x38", encode_varint(duration_micros))
    out += attrs
    return b"".join(out)


def decode_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a varint32 frame length at *pos*; return ``(value, new_pos)``.

    Raises:
        ValueError: truncated or longer than 5 bytes.
    """
    result = 0
    shift = 0
    end = len(data)
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= end:
            raise ValueError("truncated frame length")
        byte = data[pos + i]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos + i + 1
        shift += 7
    raise ValueError("frame length varint longer than 5 bytes")


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The decompressed content of a trace file (gzip detected by magic bytes)."""
    return files.read_bytes(path, "trace file", TraceError, gunzip=True)


def iter_frames(data: bytes, path: str | os.PathLike[str] = "<bytes>") -> Iterator[memoryview]:
    """Yield each frame's payload; a truncated frame raises :class:`TraceError`."""
    view = memoryview(data)
    starts, ends = frame_spans(data, path)
    for start, end in zip(starts, ends, strict=True):
        yield view[start:end]


def frame_spans(data: bytes, path: str | os.PathLike[str] = "<bytes>") -> tuple[array[int], array[int]]:
    """Where every frame's payload starts and ends (byte offsets); a truncated frame raises :class:`TraceError`."""
    starts, ends = array("Q"), array("Q")
    pos = 0
    end = len(data)
    index = 0
    empty = 0
    while pos < end:
        start = pos
        length = data[pos]
        if length < 0x80:  # one-byte length: most nodes
            pos += 1
            if length == 0:
                # An empty frame is a node with every field at its default (id 0): a second one repeats
                # that id, so a run of them (a file of zeros) is refused here, not parsed a billion times.
                empty += index > 0
                if empty > 1:
                    raise TraceError(
                        f"{path}: frame {index} at byte {start} is the second empty node (id 0, every field at "
                        "its default): not a Chakra trace (a file of zeros?)"
                    )
        elif pos + 1 < end and data[pos + 1] < 0x80:  # two-byte length: nodes of 128 bytes to 16 KiB
            length = (length & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            try:
                length, pos = decode_varint(data, pos)
            except ValueError as exc:
                raise TraceError(f"{path}: frame {index} at byte {start}: {exc}") from None
        if pos + length > end:
            raise TraceError(
                f"{path}: frame {index} at byte {start} declares {length} bytes but only {end - pos} remain "
                "(truncated file?)"
            )
        starts.append(pos)
        pos += length
        ends.append(pos)
        index += 1
    return starts, ends


def read_trace(
    path: str | os.PathLike[str], *, rank: int | None = None, keep_raw: bool = True, jobs: int | None = None
) -> Trace:
    """Read one ``.et`` file (plain or gzipped) into a :class:`Trace`.

    Args:
        path: the file.
        rank: the rank to record on the trace (for messages).
        keep_raw: keep the protobuf nodes (needed to write the trace back or read arbitrary
            attributes); ``False`` keeps only the flat columns and saves memory.
        jobs: processes that read the nodes' columns. Default: one per CPU (at most 4) for a trace of
            :data:`PARALLEL_NODES` nodes or more, read by a process that runs no other thread (forking one
            that does is unsafe); otherwise 1, this process. The result is the same either way.

    Raises:
        TraceError: unreadable file, empty file, truncated frame or bytes that are not a
            Chakra protobuf message, naming the file and the frame.
    """
    p = Path(path)
    data = read_bytes(p)
    if not data:
        raise TraceError(f"{p}: empty file (a trace starts with a GlobalMetadata frame)")
    try:
        starts, ends = frame_spans(data, p)
    except TraceError as exc:
        raise TraceError(_not_chakra(data, p, str(exc))) from None
    metadata = pb.GlobalMetadata()
    try:
        metadata.ParseFromString(data[starts[0] : ends[0]])
    except DecodeError as exc:
        raise TraceError(f"{p}: frame 0 is not a GlobalMetadata message: {exc}") from None
    # Nodes are parsed by protobuf in batches: each frame `varint(len) payload` preceded by 0x0a is an
    # element of the repeated field 1 of NodeStream, so upb parses a whole batch in C into one arena.
    # Columns are gathered from batches freed as they go; raw nodes, when kept, are one more parse of every
    # frame into a repeated field that is kept as it is (iterating it while it is alive costs a Python
    # wrapper per node that upb then tracks; the batches avoid that).
    jobs = _reading_jobs(len(ends) - 1, jobs)
    if jobs > 1:
        trace = Trace.from_columns(_gather_in_workers(data, p, starts, ends, jobs), metadata, path=p, rank=rank)
    else:
        trace = Trace.from_nodes(
            _nodes(data, p, starts, ends, 1, len(ends)), metadata, path=p, rank=rank, keep_raw=False
        )
    if keep_raw:
        trace.nodes = next(_parse_nodes(data, p, starts, ends, len(ends)), [])
    return trace


def _not_chakra(data: bytes, path: Path, broken: str) -> str:
    """The message for *data*, whose frames do not hold together (*broken* says where): a trace cut short, or no trace.

    A broken trace and a file that never was one (a README, a JSON trace) fail the same framing check, at a
    frame of nonsense: the first 4 KiB being text, or a first frame that is not a GlobalMetadata message with
    a version, says which.
    """
    head = data[:4096]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = head[: exc.start].decode("utf-8") if exc.start > len(head) - 4 else ""
    if text and all(c.isprintable() or c in "\n\r\t" for c in text):
        return f"{path}: not a Chakra ET file: it is text ({text[:40].splitlines()[0]!r} …), not protobuf frames"
    try:
        length, pos = decode_varint(data, 0)
        metadata = pb.GlobalMetadata()
        metadata.ParseFromString(data[pos : pos + length])
        if metadata.version:
            return broken  # a trace's start: the file was cut short or damaged
    except (ValueError, DecodeError):
        pass
    return f"{broken}; its first frame is no GlobalMetadata with a version either: not a Chakra ET file"


_BATCH = 1 << 15
#: Traces of at least this many nodes are read by several processes by default (:func:`read_trace`): below,
#: starting them costs about what they save.
PARALLEL_NODES = 200_000


def _reading_jobs(nodes: int, jobs: int | None) -> int:
    if jobs is None and nodes < PARALLEL_NODES:
        return 1  # decided without importing multiprocessing: most traces are small
    import multiprocessing

    from etsim.workers import fork_jobs

    if "fork" not in multiprocessing.get_all_start_methods():  # pragma: no cover - not POSIX
        return 1
    return max(1, min(fork_jobs(4) if jobs is None else jobs, nodes))


def _nodes(data: bytes, path: Path, starts: array[int], ends: array[int], first: int, last: int) -> Iterator[pb.Node]:
    """The nodes of frames ``first .. last-1``, parsed in batches freed as the iteration goes."""
    return itertools.chain.from_iterable(_parse_nodes(data, path, starts, ends, _BATCH, first, last))


#: What forked readers read (set just before they start; a fork inherits it as it is, without a copy).
def _gather_frames(
    data: bytes, path: Path, starts: array[int], ends: array[int], span: tuple[int, int]
) -> NodeColumns | TraceError:
    """The columns of the nodes in frames ``span[0] .. span[1]-1`` of the file *data*, or what is wrong."""
    try:
        return gather_columns(_nodes(data, path, starts, ends, *span), span[0] - 1)
    except TraceError as exc:  # returned: the first bad frame of the file is named, whichever run finds one first
        return exc


def _gather_in_workers(data: bytes, path: Path, starts: array[int], ends: array[int], jobs: int) -> list[NodeColumns]:
    """The columns of every node, gathered in *jobs* processes (this one and forked ones), a run of frames each."""
    from etsim.workers import run_in_workers

    frames = len(ends)
    bounds = [1 + (frames - 1) * k // jobs for k in range(jobs + 1)]
    spans = list(itertools.pairwise(bounds))
    parts: dict[tuple[int, int], NodeColumns | TraceError] = {}

    # The forked readers get this bound function as it is (fork copies it and the file's bytes; nothing is pickled).
    gather = functools.partial(_gather_frames, data, path, starts, ends)

    def own_share() -> None:
        parts[spans[0]] = gather(spans[0])

    lost = run_in_workers(gather, spans[1:], jobs - 1, parts.__setitem__, start="fork", meanwhile=own_share)
    for span in lost:  # a reader that died (out of memory?): its share is read here
        parts[span] = gather(span)
    gathered = []
    for span in spans:
        part = parts.pop(span)
        if isinstance(part, TraceError):
            raise part
        gathered.append(part)
    return gathered


def _parse_nodes(
    data: bytes, path: Path, starts: array[int], ends: array[int], batch: int, lo: int = 1, hi: int | None = None
) -> Iterator[Sequence[pb.Node]]:
    """Frames ``lo .. hi-1`` (default: every node frame) parsed *batch* at a time (one repeated field each).

    A bad frame is named.
    """
    view = memoryview(data)
    hi = len(ends) if hi is None else hi
    # A frame's bytes start right after the previous frame's payload (its own length varint first).
    for first in range(lo, hi, batch):
        last = min(first + batch, hi)
        stream = NodeStream()
        joined = bytearray()
        for i in range(first, last):
            joined += b"\x0a"
            joined += view[ends[i - 1] : ends[i]]
        try:
            stream.ParseFromString(joined)
        except DecodeError:
            for index in range(first, last):
                try:
                    pb.Node().ParseFromString(view[starts[index] : ends[index]])
                except DecodeError as exc:
                    raise TraceError(f"{path}: frame {index} (node {index - 1}) is not a Node message: {exc}") from None
            raise TraceError(f"{path}: the node frames are not valid Node messages") from None
        yield stream.nodes


def serialize_trace(trace: Trace) -> bytes:
    """The exact bytes Chakra's writers produce for *trace* (metadata frame, then nodes)."""
    if not trace.nodes and trace.num_nodes:
        raise TraceError(f"{trace.where()}cannot write a trace loaded with keep_raw=False")
    parts: list[bytes] = []
    messages: list[Message] = [trace.metadata, *trace.nodes]
    for message in messages:
        payload = message.SerializeToString()
        parts.append(encode_varint(len(payload)))
        parts.append(payload)
    return b"".join(parts)


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> Path:
    """Write *trace* to *path*, byte-identical to Chakra's writers; gzip if the name ends ``.gz``."""
    p = Path(path)
    data = serialize_trace(trace)
    if p.name.endswith(".gz"):
        # mtime=0 keeps the output deterministic.
        data = gzip.compress(data, mtime=0)
    return write_bytes(p, data, TraceError)


def write_workload(workload: Workload | list[Trace], prefix: str | os.PathLike[str]) -> list[Path]:
    """Write rank ``r`` to ``PREFIX.r.et``; return the paths written.

    The family is replaced whole: rank files past the new count (an earlier, larger family at the same prefix) are
    removed, since reading the prefix would take them as ranks of this one. ``P.et`` names the family ``P``, as
    :func:`load_workload` reads it.

    Raises:
        TraceError: no traces (it would remove the family there and write nothing), or something that is not one.
    """
    traces = workload.traces if isinstance(workload, Workload) else workload
    if not isinstance(traces, list | tuple) or not all(isinstance(t, Trace) for t in traces):
        raise TraceError(f"{os.fspath(prefix)}: expected a Workload or a list of Traces to write, got {workload!r:.80}")
    if not traces:
        raise TraceError(f"{os.fspath(prefix)}: no traces to write (a workload of no ranks); nothing was written")
    if os.fspath(prefix).endswith(".et"):  # (``P.et`` names the family P, as load_workload reads it)
        prefix = os.fspath(prefix)[: -len(".et")]
    watch = progress.stage(f"writing {os.fspath(prefix)}.*.et", len(traces), "files")
    paths = []
    for rank, t in enumerate(traces):
        paths.append(write_trace(t, f"{os.fspath(prefix)}.{rank}.et"))
        watch.advance()
    folder, name = Path(prefix).parent, Path(prefix).name
    for entry in folder.iterdir() if folder.is_dir() else ():
        m = _FAMILY_RE.match(entry.name)
        if m and m["prefix"] == name and (int(m["rank"]) >= len(traces) or entry.name.endswith(".gz")):
            entry.unlink()  # (a compressed rank file would be a second rank r beside the one just written)
    return paths


_FAMILY_RE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et(?:\.gz)?$")


def _families_in(directory: Path) -> dict[str, dict[int, Path]]:
    families: dict[str, dict[int, Path]] = {}
    for entry in sorted(directory.iterdir(), key=lambda e: e.name):  # names: comparing Paths is slow
        m = _FAMILY_RE.match(entry.name)
        if m and entry.is_file():
            ranks = families.setdefault(m["prefix"], {})
            rank = int(m["rank"])
            if rank in ranks:
                raise TraceError(
                    f"{directory}: {ranks[rank].name} and {entry.name} are both rank {rank} of {m['prefix']}"
                )
            ranks[rank] = entry
    return families


def _check_complete(prefix: str, ranks: dict[int, Path]) -> list[Path]:
    n = max(ranks) + 1
    missing = [r for r in range(n) if r not in ranks]
    if missing:
        found = ", ".join(str(r) for r in sorted(ranks))
        raise TraceError(
            f"workload {prefix!r}: ranks {', '.join(map(str, missing))} missing "
            f"(found files for ranks {found}; expected {prefix}.0.et … {prefix}.{n - 1}.et)"
        )
    return [ranks[r] for r in range(n)]


def resolve_family(spec: str | os.PathLike[str]) -> list[Path]:
    """The per-rank files a workload spec names, rank 0 first.

    Accepted forms: a prefix ``P`` (files ``P.0.et …``), ``P.et`` naming the family ``P``,
    a directory holding exactly one family, or one existing file (a one-rank workload).

    Raises:
        TraceError: nothing found, a rank missing, or an ambiguous spec; the message lists
            what was found.
    """
    raw = os.fspath(spec)
    path = Path(raw)
    if os.path.isdir(path):
        families = _families_in(path)
        if len(families) == 1:
            ((prefix, ranks),) = families.items()
            return _check_complete(str(path / prefix), ranks)
        if not families:
            listing = ", ".join(sorted(e.name for e in path.iterdir())[:10]) or "nothing"
            raise TraceError(f"{path}: directory holds no trace family (*.<rank>.et); found: {listing}")
        raise TraceError(
            f"{path}: directory holds {len(families)} trace families, name one of: "
            + ", ".join(str(path / p) for p in sorted(families))
        )
    candidates: list[str] = [raw]
    if raw.endswith(".et.gz"):
        candidates.append(raw[: -len(".et.gz")])
    elif raw.endswith(".et"):
        candidates.append(raw[: -len(".et")])
    for prefix in candidates:
        directory = Path(prefix).parent
        if not os.path.isdir(directory):
            continue
        family = _families_in(directory).get(Path(prefix).name)
        if family:
            if os.path.isfile(path) and prefix != raw:
                raise TraceError(
                    f"{raw!r} is ambiguous: it is a file and also names the family {prefix}.0.et … "
                    f"(give {prefix}.0.et's prefix {prefix!r} or rename one)"
                )
            return _check_complete(prefix, family)
    if os.path.isfile(path):
        m = _FAMILY_RE.match(path.name)
        if m:
            siblings = _families_in(path.parent).get(m.group("prefix"), {})
            if len(siblings) > 1:
                prefix = str(path.parent / m.group("prefix"))
                warn(
                    f"workload {raw!r} is one file (rank {m.group('rank')}) of the {len(siblings)}-rank family "
                    f"{prefix}.0.et …; it runs as a 1-rank workload. Give the prefix {prefix!r} to load every rank"
                )
        return [path]
    parent = path.parent if os.path.isdir(path.parent) else None
    near = []
    if parent is not None:
        stem = path.name.split(".")[0]
        near = sorted(e.name for e in parent.iterdir() if e.name.startswith(stem))[:10]
    hint = f"; similar names there: {', '.join(near)}" if near else ""
    prefix = candidates[-1]  # without .et/.et.gz when given
    raise TraceError(f"workload {raw!r}: no such file, family ({prefix}.0.et …) or directory{hint}")


def load_workload(spec: str | os.PathLike[str], *, keep_raw: bool = True) -> Workload:
    """Load every rank of a workload (see :func:`resolve_family` for the accepted specs).

    Raises:
        TraceError: *spec* names no workload (a message that says where it looked), or is not a path.
    """
    if not isinstance(spec, str | os.PathLike):
        hint = " (a generator mapping is etsim.generate's)" if isinstance(spec, dict) else ""
        raise TraceError(f"load_workload: expected a path or prefix of .et files, got {spec!r:.80}{hint}")
    paths = resolve_family(spec)
    watch = progress.stage(f"reading {os.fspath(spec)}", len(paths), "files")
    traces = []
    for r, p in enumerate(paths):
        traces.append(read_trace(p, rank=r, keep_raw=keep_raw))
        watch.advance()
    return Workload(traces=traces, source=os.fspath(spec))
