"""The in-memory form of Chakra traces: one flat table per rank.

A :class:`Trace` is one rank's graph. Protobuf is parsed once into parallel Python lists
indexed by node *position* (0..n-1, file order): ids, types, names, durations, the
attributes a simulator needs, and dependencies in CSR form (``data_ptr``/``data_idx``: the
dependencies of node ``i`` are ``data_idx[data_ptr[i]:data_ptr[i+1]]``, as node positions).
A simulator walks these lists without touching protobuf objects; tools that need everything
else read the raw :class:`~etsim.chakra.schema.et_def_pb2.Node` messages in ``nodes``.

Dependencies naming an id that is not in the file are kept out of the CSR arrays and listed
in ``missing_data_deps``/``missing_ctrl_deps`` for validation to report.
"""

from __future__ import annotations

import enum
import gc
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etsim.chakra.attributes import attribute_value
from etsim.chakra.dag import transpose
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import ConfigError, TraceError
from etsim.options import Parser

__all__ = [
    "COLLECTIVE_NAMES",
    "CollectiveName",
    "CollectiveType",
    "NodeType",
    "Trace",
    "Workload",
    "algorithm_collective",
    "collective_buffer_bytes",
    "parse_collective",
]


class NodeType(enum.IntEnum):
    """Chakra ``NodeType`` values."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveType(enum.IntEnum):
    """Chakra ``CollectiveCommType`` values, stored in the ``comm_type`` attribute."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


#: Lower-case names of collectives (``all_reduce`` …) by value, as used on the command line.
COLLECTIVE_NAMES: dict[int, str] = {c.value: c.name.lower() for c in CollectiveType}


def _squash(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").replace(" ", "")


_BY_SQUASHED = {_squash(c.name): c for c in CollectiveType}


def algorithm_collective(collective: CollectiveType) -> CollectiveType:
    """The collective an algorithm is asked to run for *collective*: a reduce-scatter-block runs as a reduce-scatter."""
    return CollectiveType.REDUCE_SCATTER if collective == CollectiveType.REDUCE_SCATTER_BLOCK else collective


def parse_collective(text: str | int | CollectiveType) -> CollectiveType:
    """A collective from its name or value: ``all_reduce``, ``allreduce``, ``All-Reduce``, ``0`` all work.

    This is the one collective-name parser; file formats with their own vocabulary (MSCCL-IR's
    ``coll``, metadata written by other tools) map their extra words before calling it.

    Raises:
        ValueError: not a collective; the message lists the valid names.
    """
    if isinstance(text, int):
        try:
            return CollectiveType(text)
        except ValueError:
            pass
    else:
        found = _BY_SQUASHED.get(_squash(str(text)))
        if found is not None:
            return found
    names = ", ".join(c.name.lower() for c in CollectiveType)
    raise ValueError(f"unknown collective {text!r}; choose one of: {names}")


def collective_buffer_bytes(collective: CollectiveType | int | str, comm_size: float, group_size: int) -> float:
    """The whole buffer of a collective whose workload node says *comm_size* bytes, over *group_size* ranks.

    Chakra's ``comm_size`` is the per-rank input of an all-gather (the buffer is ``group_size`` times it),
    the whole input of a reduce-scatter and the buffer of every other collective. This one rule is what
    symbolic chunk counts divide (MSCCL-IR counts chunks of the larger buffer), what synthesis sizes its
    chunks by, and the size ``S`` nccl-tests' bandwidths and NCCL's tuner count. *collective* may be a
    :class:`CollectiveType`, its value or any name :func:`parse_collective` reads.
    """
    kind = collective if isinstance(collective, CollectiveType) else parse_collective(collective)
    return comm_size * group_size if kind == CollectiveType.ALL_GATHER else comm_size


_BY_NAME = {name: CollectiveType(value) for value, name in COLLECTIVE_NAMES.items()}


class CollectiveName(Parser):
    """An option parser (:mod:`etsim.options`): a collective's name (``all_reduce``; ``all-reduce``, ``ALL_REDUCE``)."""

    choices = tuple(sorted(_BY_NAME))

    def __call__(self, value: Any, *, key: str) -> str:
        """The normalised name (a :class:`CollectiveType` gives its own)."""
        if isinstance(value, CollectiveType):
            value = value.name
        name = str(value).lower().replace("-", "_")
        if not isinstance(value, str) or name not in _BY_NAME:
            raise ConfigError(f"{key}: unknown collective {value!r}; valid: {', '.join(self.choices)}")
        return name

    @staticmethod
    def type_of(name: str) -> CollectiveType:
        """The :class:`CollectiveType` of a normalised name."""
        return _BY_NAME[name]


# Attributes lifted into flat columns. Values read from any numeric member; a string where a
# number belongs is recorded in `bad_attributes` for validation instead of raising here.
_NUMERIC_MEMBERS = frozenset(
    f"{kind}_val"
    for kind in (
        "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
        "fixed32", "fixed64", "sfixed32", "sfixed64", "bool",
    )
)  # fmt: skip
_INT_COLUMNS = ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "comm_priority", "num_ops", "tensor_size")


@dataclass
class NodeColumns:
    """The columns of a run of consecutive nodes, as read.

    Positions count from the trace's first node; dependencies are ids, resolved when the runs are put
    together (:meth:`Trace.from_columns`).
    """

    ids: list[int]
    names: list[str]
    types: list[int]
    durs: list[int]
    data_ids: list[int]
    data_end: list[int]
    """Running end offset into :attr:`data_ids` after each node."""
    ctrl_ids: list[int]
    ctrl_end: list[int]
    sparse: dict[str, dict[int, Any]]
    """Lifted attribute → {position: value} (most nodes carry few attributes)."""
    bad: list[tuple[int, str, str]]
    mismatch: list[tuple[int, str, str]]
    narrowed: list[int]
    """Positions of collectives whose ``involved_dim`` leaves a dimension out (etsim runs the whole group)."""

    @classmethod
    def empty(cls) -> NodeColumns:
        """No nodes yet."""
        return cls([], [], [], [], [], [], [], [], {name: {} for name in _LIFTED}, [], [], [])

    def extend(self, part: NodeColumns) -> None:
        """Append the next run of nodes."""
        data_base, ctrl_base = len(self.data_ids), len(self.ctrl_ids)
        self.ids += part.ids
        self.names += part.names
        self.types += part.types
        self.durs += part.durs
        self.data_ids += part.data_ids
        self.data_end += [end + data_base for end in part.data_end]
        self.ctrl_ids += part.ctrl_ids
        self.ctrl_end += [end + ctrl_base for end in part.ctrl_end]
        for name, values in part.sparse.items():
            self.sparse[name].update(values)
        self.bad += part.bad
        self.mismatch += part.mismatch
        self.narrowed += part.narrowed


_LIFTED = (*_INT_COLUMNS, "is_cpu_op", "pg_name")


def gather_columns(nodes: Iterable[pb.Node], first: int = 0) -> NodeColumns:
    """Read the columns of *nodes*, the first of which is at position *first* of its trace."""
    from etsim.chakra.attributes import EXPECTED_MEMBER

    cols = NodeColumns.empty()
    names_seen: dict[str, str] = {}
    sparse = cols.sparse
    bad, mismatch, narrowed = cols.bad, cols.mismatch, cols.narrowed
    data_dep_ids, ctrl_dep_ids = cols.data_ids, cols.ctrl_ids
    int_columns = frozenset(_INT_COLUMNS)
    # (name, member) pairs whose value is stored as read: each lifted column in its expected member.
    plain = {(name, EXPECTED_MEMBER[name]) for name in _LIFTED}
    ids_append, names_append, types_append, durs_append = (
        cols.ids.append,
        cols.names.append,
        cols.types.append,
        cols.durs.append,
    )
    data_extend, data_end_append = data_dep_ids.extend, cols.data_end.append
    ctrl_extend, ctrl_end_append = ctrl_dep_ids.extend, cols.ctrl_end.append
    gc_was_enabled = gc.isenabled()
    gc.disable()  # building millions of long-lived objects triggers needless full collections
    try:
        for pos, node in enumerate(nodes, first):
            ids_append(node.id)
            node_name = node.name
            names_append(names_seen.setdefault(node_name, node_name))  # one string per distinct name (memory, pickling)
            types_append(node.type)
            durs_append(node.duration_micros)
            data_extend(node.data_deps)
            data_end_append(len(data_dep_ids))
            ctrl_extend(node.ctrl_deps)
            ctrl_end_append(len(ctrl_dep_ids))
            for attr in node.attr:
                name = attr.name
                column = sparse.get(name)
                if column is None or pos in column:  # not lifted, or a repeat (the first one wins)
                    narrows = name == "involved_dim" and attr.WhichOneof("value") == "bool_list"
                    if narrows and not all(attr.bool_list.values) and (not narrowed or narrowed[-1] != pos):
                        narrowed.append(pos)
                    continue
                member = attr.WhichOneof("value")
                if (name, member) in plain:  # the expected member of an int or bool column: most attributes
                    column[pos] = getattr(attr, member)
                    continue
                if name in int_columns:
                    value = getattr(attr, member) if member in _NUMERIC_MEMBERS else None
                    if value is None or (isinstance(value, float) and not value.is_integer()):
                        bad.append((pos, name, f"expected an integer, found {member or 'no value'}"))
                        continue
                    column[pos] = int(value)
                    if member != EXPECTED_MEMBER[name]:
                        mismatch.append((pos, name, member or ""))
                elif name == "is_cpu_op":
                    if member not in _NUMERIC_MEMBERS:
                        bad.append((pos, name, f"expected a bool, found {member or 'no value'}"))
                        continue
                    column[pos] = bool(getattr(attr, member))
                elif member == "string_val":
                    column[pos] = attr.string_val
                elif member in _NUMERIC_MEMBERS and float(getattr(attr, member)).is_integer():
                    column[pos] = str(int(getattr(attr, member)))
                    mismatch.append((pos, name, member))
                else:
                    bad.append((pos, name, f"expected a string, found {member or 'no value'}"))
    finally:
        if gc_was_enabled:
            gc.enable()
    return cols


@dataclass(eq=False)
class Trace:
    """One rank's Chakra ET graph in flat form (see the module docstring).

    Build one with :func:`Trace.from_nodes` or :func:`etsim.chakra.read_trace`.
    """

    metadata: pb.GlobalMetadata
    """The GlobalMetadata message (version and attributes)."""
    nodes: Sequence[pb.Node]
    """The raw protobuf nodes in file order (empty if loaded with ``keep_raw=False``)."""
    path: Path | None = None
    """Where the trace was read from, for messages."""
    rank: int | None = None
    """The rank this trace belongs to inside a workload."""

    ids: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    types: list[int] = field(default_factory=list)
    duration_micros: list[int] = field(default_factory=list)
    data_ptr: list[int] = field(default_factory=lambda: [0])
    data_idx: list[int] = field(default_factory=list)
    ctrl_ptr: list[int] = field(default_factory=lambda: [0])
    ctrl_idx: list[int] = field(default_factory=list)
    is_cpu_op: list[bool | None] = field(default_factory=list)
    comm_type: list[int | None] = field(default_factory=list)
    comm_size: list[int | None] = field(default_factory=list)
    comm_src: list[int | None] = field(default_factory=list)
    comm_dst: list[int | None] = field(default_factory=list)
    comm_tag: list[int | None] = field(default_factory=list)
    comm_priority: list[int | None] = field(default_factory=list)
    num_ops: list[int | None] = field(default_factory=list)
    tensor_size: list[int | None] = field(default_factory=list)
    pg_name: list[str | None] = field(default_factory=list)
    index_of: dict[int, int] = field(default_factory=dict)
    """Node id → position of its first definition."""
    duplicate_ids: list[int] = field(default_factory=list)
    """Ids defined more than once (positions after the first are still nodes)."""
    missing_data_deps: list[tuple[int, int]] = field(default_factory=list)
    """(node position, missing id) pairs."""
    missing_ctrl_deps: list[tuple[int, int]] = field(default_factory=list)
    bad_attributes: list[tuple[int, str, str]] = field(default_factory=list)
    """(node position, attribute name, what is wrong) for attributes of the wrong kind."""
    member_mismatches: list[tuple[int, str, str]] = field(default_factory=list)
    """(node position, attribute name, member used) where the writer used an unexpected member."""
    narrowed_dims: list[int] = field(default_factory=list)
    """Positions of nodes whose ``involved_dim`` leaves a dimension out, which etsim does not model."""

    @classmethod
    def from_nodes(
        cls,
        nodes: Iterable[pb.Node],
        metadata: pb.GlobalMetadata | None = None,
        *,
        path: Path | None = None,
        rank: int | None = None,
        keep_raw: bool = True,
    ) -> Trace:
        """Build the flat form from protobuf nodes (parsed once; no per-node objects kept)."""
        raw: Sequence[pb.Node] = list(nodes) if keep_raw else []  # one wrapper per node, made once
        trace = cls.from_columns([gather_columns(raw if keep_raw else nodes)], metadata, path=path, rank=rank)
        trace.nodes = raw
        return trace

    @classmethod
    def from_columns(
        cls,
        parts: Sequence[NodeColumns],
        metadata: pb.GlobalMetadata | None = None,
        *,
        path: Path | None = None,
        rank: int | None = None,
    ) -> Trace:
        """Build the flat form from the gathered columns of consecutive runs of nodes, in order.

        The trace takes over the first run's lists (the others are appended to them).
        """
        trace = cls(metadata=metadata if metadata is not None else pb.GlobalMetadata(), nodes=[], path=path, rank=rank)
        gc_was_enabled = gc.isenabled()
        gc.disable()  # building millions of long-lived objects triggers needless full collections
        try:
            whole = parts[0] if parts else NodeColumns.empty()  # the first run's lists grow: no copy of them
            for part in parts[1:]:
                whole.extend(part)
            trace.ids, trace.names, trace.types, trace.duration_micros = whole.ids, whole.names, whole.types, whole.durs
            trace.bad_attributes.extend(whole.bad)
            trace.member_mismatches.extend(whole.mismatch)
            trace.narrowed_dims.extend(whole.narrowed)
            ids, index_of, duplicates = trace.ids, trace.index_of, trace.duplicate_ids
            n = len(ids)
            index_of.update(zip(ids, range(n), strict=True))
            if len(index_of) != n:  # repeated ids: the first one wins, the others are reported
                index_of.clear()
                for pos, nid in enumerate(ids):
                    if nid in index_of:
                        duplicates.append(nid)
                    else:
                        index_of[nid] = pos
            for name, values in whole.sparse.items():
                dense: list[Any] = [None] * n
                for pos, value in values.items():
                    dense[pos] = value
                setattr(trace, name, dense)
            trace._build_csr(whole.data_ids, whole.data_end, whole.ctrl_ids, whole.ctrl_end)
        finally:
            if gc_was_enabled:
                gc.enable()
        return trace

    def _build_csr(self, data_ids: list[int], data_end: list[int], ctrl_ids: list[int], ctrl_end: list[int]) -> None:
        n = len(self.ids)
        # Ids 0..n-1 in order (what writers produce): an id is its position, nothing to look up.
        positional = n == 0 or (self.ids[0] == 0 and self.ids[-1] == n - 1 and self.ids == list(range(n)))
        for dep_ids, ends, ptr, idx, missing in (
            (data_ids, data_end, self.data_ptr, self.data_idx, self.missing_data_deps),
            (ctrl_ids, ctrl_end, self.ctrl_ptr, self.ctrl_idx, self.missing_ctrl_deps),
        ):
            if positional and (not dep_ids or (min(dep_ids) >= 0 and max(dep_ids) < n)):
                idx.extend(dep_ids)
                ptr.extend(ends)
                continue
            self._resolve_deps(dep_ids, ends, ptr, idx, missing)

    def _resolve_deps(
        self, dep_ids: list[int], ends: list[int], ptr: list[int], idx: list[int], missing: list[tuple[int, int]]
    ) -> None:
        """Map dependency ids to positions through :attr:`index_of`; unknown ids are reported as missing."""
        index_of = self.index_of
        start = 0
        for pos, end in enumerate(ends):
            for k in range(start, end):
                target = index_of.get(dep_ids[k])
                if target is None:
                    missing.append((pos, dep_ids[k]))
                else:
                    idx.append(target)
            ptr.append(len(idx))
            start = end

    # -- convenience accessors (tools; the simulator reads the columns directly) --

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return len(self.ids)

    def data_deps(self, pos: int) -> list[int]:
        """Positions of the data dependencies of the node at *pos*."""
        return self.data_idx[self.data_ptr[pos] : self.data_ptr[pos + 1]]

    def ctrl_deps(self, pos: int) -> list[int]:
        """Positions of the control dependencies of the node at *pos*."""
        return self.ctrl_idx[self.ctrl_ptr[pos] : self.ctrl_ptr[pos + 1]]

    def attributes(self, pos: int) -> dict[str, Any]:
        """All attributes of the node at *pos* as a dict (first occurrence of a name wins)."""
        if not self.nodes:
            raise ValueError("trace was loaded with keep_raw=False; raw attributes are not available")
        out: dict[str, Any] = {}
        for attr in self.nodes[pos].attr:
            out.setdefault(attr.name, attribute_value(attr))
        return out

    def describe(self, pos: int) -> str:
        """``file rank R node ID (name)`` for messages."""
        where = self.where()
        name = f" ({self.names[pos]})" if self.names[pos] else ""
        return f"{where}node {self.ids[pos]}{name}"

    def where(self) -> str:
        """``file, rank R: `` prefix for messages (empty parts omitted)."""
        parts = []
        if self.path is not None:
            parts.append(str(self.path))
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        return ", ".join(parts) + ": " if parts else ""

    def successors(self, *, include_ctrl: bool = True) -> tuple[list[int], list[int]]:
        """CSR of successors (``ptr``, ``idx``) over data (and optionally control) dependencies."""
        return transpose(len(self.ids), self.dependency_csrs(include_ctrl=include_ctrl))

    def dependency_csrs(self, *, include_ctrl: bool = True) -> list[tuple[list[int], list[int]]]:
        """The dependency CSRs a walk enforces: data, then control when *include_ctrl*."""
        sources = [(self.data_ptr, self.data_idx)]
        if include_ctrl:
            sources.append((self.ctrl_ptr, self.ctrl_idx))
        return sources


@dataclass(eq=False)
class Workload:
    """All ranks of a workload: ``traces[r]`` is rank ``r``."""

    traces: list[Trace]
    source: str = ""
    """The spec the workload was loaded from (prefix, file or directory)."""

    def __post_init__(self) -> None:
        if isinstance(self.traces, tuple):
            self.traces = list(self.traces)
        if not isinstance(self.traces, list) or not all(isinstance(t, Trace) for t in self.traces):
            raise TraceError(f"Workload: expected a list of Traces (rank r at index r), got {self.traces!r:.80}")

    @property
    def num_ranks(self) -> int:
        """Number of ranks (files)."""
        return len(self.traces)

    def __iter__(self) -> Any:
        return iter(self.traces)

    def __getitem__(self, rank: int) -> Trace:
        return self.traces[rank]

    @property
    def paths(self) -> Sequence[Path | None]:
        """The file of each rank."""
        return [t.path for t in self.traces]
