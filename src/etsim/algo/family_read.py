"""One rank file of an algorithm family read into its graph, fast when the file is as algorithm writers write it.

:func:`read_rank` decodes the node columns in one protobuf parse (:mod:`etsim.chakra.columnar`) and each
distinct attribute once (a family repeats the same few: chunk counts, sizes, tags, most peers and data
annotations), then builds the graph with :func:`~etsim.algo.family_io.assemble_algo_graph`, the assembly the
ordinary reader uses. That path is taken only by files whose ids are ``0 .. n-1`` in order, whose dependencies
name earlier nodes, and whose attributes the graph reads are each written once per node in the member
etsim's writers use; anything else is read the ordinary way (:func:`~etsim.chakra.io.read_trace`, then
:func:`~etsim.algo.family_io.algo_graph_from_trace`), which names what is wrong. Both give the same graph
(``tests/algo/test_family_read.py``: natives, MSCCL-IR conversions, TACOS and the corpus).
"""

from __future__ import annotations

import copy
import gc
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from etsim.algo.family_graph import AlgoAttributes, algo_graph_from_trace, assemble_algo_graph, recorded_collective
from etsim.algo.graph import RECV, SEND, AlgoGraph
from etsim.chakra.columnar import ATTR_SENTINEL, decode_columns
from etsim.chakra.graph import CollectiveType, NodeType, Trace
from etsim.chakra.io import frame_spans, read_bytes, read_trace
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import TraceError

__all__ = ["RankRead", "read_rank", "read_rank_columns"]


@dataclass(slots=True)
class RankRead:
    """What one rank file of a family holds, or what is wrong with it.

    Attributes:
        graph: the rank's graph (None when *problem* says why there is none).
        recorded: the collective the file's metadata records (see
            :func:`~etsim.algo.family_io.recorded_collective`).
        problem: why the file is not an algorithm rank, naming the file and node; None if it is.
        kind: what the problem is about: ``"workload"`` (a collective node: the file is a workload),
            ``"metadata"`` (the collective it records) or ``"graph"``.
        fast: the file was read by the columnar path.
        same: the caller's test (``same_as``) found the columns to be the ones it knows: no graph was built.
    """

    graph: AlgoGraph | None
    recorded: CollectiveType | str | None = None
    problem: str | None = None
    kind: str | None = None
    fast: bool = False
    same: bool = False

    def __getstate__(self) -> tuple[Any, ...]:
        """The fields, the graph's node names joined into one string (a reader process sends a million of them).

        Pickling a million short strings one by one is most of what sending a family's graphs between processes
        costs; one string is copied whole. Names that hold the separator themselves are sent as they are.
        """
        graph, joined = self.graph, None
        if graph is not None and graph.names:
            text = _NAME_SEP.join(graph.names)
            if text.count(_NAME_SEP) == len(graph.names) - 1:
                graph, joined = copy.copy(graph), text
                graph.names = []
        return (graph, joined, self.recorded, self.problem, self.kind, self.fast, self.same)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        graph, joined, self.recorded, self.problem, self.kind, self.fast, self.same = state
        if graph is not None and joined is not None:
            graph.names = joined.split(_NAME_SEP)
        self.graph = graph


#: What separates node names in a pickled :class:`RankRead`.
_NAME_SEP = "\0"


def read_rank(
    path: Path,
    rank: int,
    group_size: int,
    *,
    ignore_ctrl_deps: bool = False,
    same_as: Callable[[Trace, AlgoAttributes, int], bool] | None = None,
) -> RankRead:
    """Rank *rank* of a family of *group_size* files, read from *path* (peers must lie in the group).

    *same_as(trace, attrs, rank)* may say that a file read by the columnar path holds columns it knows (a rank
    of a shared graph): the graph is then not built.

    Raises:
        TraceError: the file cannot be read or is not a Chakra ET file (named).
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the columns are long-lived objects: collections while making them find nothing to free
    try:
        return _read_rank(path, rank, group_size, ignore_ctrl_deps, same_as)
    finally:
        if gc_was_enabled:
            gc.enable()


def _read_rank(
    path: Path,
    rank: int,
    group_size: int,
    ignore_ctrl_deps: bool,
    same_as: Callable[[Trace, AlgoAttributes, int], bool] | None,
) -> RankRead:
    trace_attrs = _fast_trace(path, rank)
    fast = trace_attrs is not None
    if trace_attrs is None:
        trace = read_trace(path, rank=rank)
        attrs = None
    else:
        trace, attrs = trace_attrs
    if NodeType.COMM_COLL_NODE in trace.types:
        pos = trace.types.index(NodeType.COMM_COLL_NODE)
        return RankRead(None, problem=f"{trace.describe(pos)} is a collective (COMM_COLL) node", kind="workload")
    try:
        recorded = recorded_collective(trace)
    except ValueError as exc:
        return RankRead(None, problem=f"{trace.where()}metadata 'collective': {exc}", kind="metadata")
    if attrs is not None and same_as is not None and same_as(trace, attrs, rank):
        return RankRead(None, recorded, fast=True, same=True)
    try:
        if attrs is None:
            graph = algo_graph_from_trace(trace, ignore_ctrl_deps=ignore_ctrl_deps)
        else:
            graph = assemble_algo_graph(trace, attrs, ignore_ctrl_deps=ignore_ctrl_deps, acyclic=True)
    except ValueError as exc:
        return RankRead(None, recorded, problem=str(exc), kind="graph")
    for pos, peer in enumerate(graph.peers):
        if graph.kinds[pos] in (SEND, RECV) and not 0 <= peer < group_size:
            where = trace.describe(pos)
            problem = f"{where}: peer {peer} is outside the {group_size}-rank group"
            return RankRead(None, recorded, problem=problem, kind="graph")
    return RankRead(graph, recorded, fast=fast)


#: Attributes read into the trace's columns, with the member etsim's writers use (others: the ordinary path).
_COLUMN_MEMBERS = {
    "comm_src": "int32_val",
    "comm_dst": "int32_val",
    "comm_tag": "int32_val",
    "comm_size": "int64_val",
    "tensor_size": "uint64_val",
}
_INTEGER_MEMBERS = frozenset(
    f"{kind}_val" for kind in ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
                               "sfixed32", "sfixed64")
)  # fmt: skip
_TEXTS = frozenset({"data_op", "data_src", "data_dst"})
#: A decoded attribute: (name, value) of one the graph reads, or None for one it does not; False when the
#: file must take the ordinary path (an unexpected member, or bytes that are not an attribute).
_Decoded = tuple[str, Any] | None | bool
_DECODED_MAX = 1 << 20


def _decode(raw: bytes) -> _Decoded:
    attr = pb.AttributeProto()
    try:
        attr.ParseFromString(raw)
    except DecodeError:
        return False
    name = attr.name
    member = attr.WhichOneof("value")
    expected = _COLUMN_MEMBERS.get(name)
    if expected is not None:
        return (name, getattr(attr, member)) if member == expected else False
    if name in ("msg_chunk_cnt", "total_chunk_cnt"):
        return (name, int(getattr(attr, member))) if member in _INTEGER_MEMBERS else False
    if name == "etsim_exit":
        return (name, attr.bool_val) if member == "bool_val" else False
    if name in _TEXTS:
        return (name, attr.string_val) if member == "string_val" else False
    return None


def read_rank_columns(path: Path, rank: int) -> tuple[Trace, AlgoAttributes] | None:
    """The columns :func:`read_rank` assembles a graph from, when *path* takes the columnar path (else None).

    The trace has no protobuf nodes and only the columns a graph reads (ids, names, types, durations,
    dependencies, peers, tags, sizes).
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _fast_trace(path, rank)
    finally:
        if gc_was_enabled:
            gc.enable()


def _fast_trace(path: Path, rank: int) -> tuple[Trace, AlgoAttributes] | None:
    """The columns of *path* as a trace without protobuf nodes, and the algorithm attributes.

    None: the file takes the ordinary path.
    """
    data = read_bytes(path)
    try:
        starts, ends = frame_spans(data, path)
        metadata = pb.GlobalMetadata()
        metadata.ParseFromString(data[starts[0] : ends[0]])
    except (TraceError, DecodeError, IndexError):
        return None
    cols = decode_columns(data, starts, ends)
    del data
    if cols is None:
        return None
    n = len(cols.ids)
    if cols.ids != list(range(n)) or not cols.deps_precede:
        return None  # ids that are not positions, or a dependency on a later node: the ordinary path checks them
    attrs, columns = _attributes(cols.attrs, n)
    if attrs is None:
        return None
    trace = Trace(
        metadata=metadata,
        nodes=[],
        path=path,
        rank=rank,
        ids=cols.ids,
        names=cols.names,
        types=cols.types,
        duration_micros=cols.durations,
        data_ptr=cols.data_ptr,
        data_idx=cols.data_deps,
        ctrl_ptr=cols.ctrl_ptr,
        ctrl_idx=cols.ctrl_deps,
        comm_src=columns["comm_src"],
        comm_dst=columns["comm_dst"],
        comm_tag=columns["comm_tag"],
        comm_size=columns["comm_size"],
        tensor_size=columns["tensor_size"],
    )
    return trace, attrs


#: The columns of the attributes a graph reads: each decoded attribute's slot in a node's row.
_SLOTS = ("comm_src", "comm_dst", "comm_tag", "comm_size", "tensor_size", "msg_chunk_cnt", "total_chunk_cnt",
          "etsim_exit", "data_op", "data_src", "data_dst")  # fmt: skip
_SLOT_OF = {name: slot for slot, name in enumerate(_SLOTS, 2)}
#: Slot codes: 0 an attribute the graph does not read, 1 a node's sentinel, -1 one that needs the ordinary path.
_UNREAD, _SENTINEL_SLOT, _ORDINARY = 0, 1, -1


class _Codes:
    """Every distinct attribute seen in this process, numbered: its slot and value (kept across files)."""

    def __init__(self) -> None:
        self.code_of: dict[bytes, int] = {}
        self.slots: list[int] = []
        self.values: list[Any] = []
        self._arrays: tuple[Any, Any] | None = None
        self.reset()

    def reset(self) -> None:
        """Only the sentinel, code 0 (the table is bounded: a process reading many families starts it again)."""
        self.code_of.clear()
        self.code_of[ATTR_SENTINEL] = 0
        self.slots[:] = [_SENTINEL_SLOT]
        self.values[:] = [None]
        self._arrays = None

    def full(self, more: int) -> bool:
        """Whether *more* entries would take the table past :data:`_DECODED_MAX` (then :meth:`reset` it)."""
        return len(self.code_of) + more > _DECODED_MAX

    def add(self, raws: set[bytes]) -> None:
        """Number and decode each of *raws* (new attributes)."""
        for raw in raws:
            decoded = _decode(raw)
            self.code_of[raw] = len(self.slots)
            if decoded is False:
                self.slots.append(_ORDINARY)
                self.values.append(None)
            elif decoded is None:
                self.slots.append(_UNREAD)
                self.values.append(None)
            else:
                name, value = decoded  # type: ignore[misc]
                self.slots.append(_SLOT_OF[name])
                self.values.append(value)
        self._arrays = None

    def arrays(self) -> tuple[Any, Any]:
        """Slots (int array) and values (object array) by code."""
        if self._arrays is None:
            import numpy as np

            values = np.empty(len(self.values), dtype=object)
            values[:] = self.values
            self._arrays = (np.array(self.slots, dtype=np.int64), values)
        return self._arrays


_CODES = _Codes()


def _attributes(raws: list[bytes], n: int) -> tuple[AlgoAttributes | None, dict[str, list[Any]]]:
    """The algorithm attributes and trace columns of *n* nodes, or None when a node needs the ordinary path.

    *raws* are the nodes' serialised attributes, each node's run after its sentinel
    (:attr:`~etsim.chakra.columnar.FlatColumns.attrs`).
    """
    import numpy as np

    codes_table = _CODES
    code_of = codes_table.code_of
    codes = np.fromiter(map(code_of.get, raws, itertools.repeat(-1)), dtype=np.int64, count=len(raws))
    new = np.flatnonzero(codes < 0).tolist()
    if new:  # attributes not seen before: numbered, then looked up again
        fresh = {raws[i] for i in new}
        if codes_table.full(len(fresh)):  # the table starts again, with this file's attributes
            codes_table.reset()
            codes_table.add(set(raws).difference(code_of))
            codes = np.fromiter(map(code_of.__getitem__, raws), dtype=np.int64, count=len(raws))
        else:
            codes_table.add(fresh)
            codes[new] = [code_of[raws[i]] for i in new]
    slots_by_code, values_by_code = codes_table.arrays()
    slots = slots_by_code[codes]
    if (slots == _ORDINARY).any():
        return None, {}
    node_of = np.cumsum(slots == _SENTINEL_SLOT) - 1
    read = np.flatnonzero(slots > _SENTINEL_SLOT)
    read_slots = slots[read]
    by_slot: dict[str, list[Any]] = {}
    for name, slot in _SLOT_OF.items():
        where = read[read_slots == slot]
        if not len(where):
            by_slot[name] = [None] * n
            continue
        nodes = node_of[where]  # ascending
        if len(nodes) > 1 and not (nodes[1:] > nodes[:-1]).all():
            return None, {}  # a node writes it twice: the ordinary readers' rules for repeats apply
        column = np.full(n, None, dtype=object)
        column[nodes] = values_by_code[codes[where]]
        by_slot[name] = column.tolist()
    total = set(by_slot.pop("total_chunk_cnt")) - {None}
    exits = [pos for pos, flag in enumerate(by_slot.pop("etsim_exit")) if flag]
    attrs = AlgoAttributes(
        by_slot.pop("msg_chunk_cnt"), by_slot.pop("data_op"), by_slot.pop("data_src"), by_slot.pop("data_dst"),
        total, exits,
    )  # fmt: skip
    return attrs, by_slot
