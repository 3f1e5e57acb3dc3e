"""Every node frame of a file decoded into columns by one protobuf parse, without a Python object per node.

The reader of :mod:`etsim.chakra.io` makes one upb wrapper per node and per attribute, about 3 µs a node.
Here the node frames are joined into one message of a private type (``FlatNodes``) whose fields have the
numbers and wire types of ``Node``'s but are all repeated: parsing it appends every node's ``id`` to one
list, every ``name`` to another, every ``attr`` (kept as its serialised bytes) to a third, and so on. What
would be lost, which node each value came from, is kept by a *sentinel* written before each frame: one
value in each column that a real node does not write (an id of 2⁶⁴−1, a type of −1, a name of one NUL
character, an attribute of the one byte 0xff, which is not a valid message). A column then splits at its
sentinels. If a node did write a sentinel value, a column has more sentinels than there are frames, and
:func:`decode_columns` returns None: the caller reads the file the ordinary way, which stays the reference
(``tests/chakra/test_columnar.py`` compares the two on the corpus and on traces built to break this).

Protobuf's rules are kept: a field written twice in one node keeps its last value (the columns say how
many each node wrote, :class:`FlatColumns` keeps the last), repeated ids may be packed or not, and the
message types, wire types and UTF-8 checks are ``Node``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, message_factory
from google.protobuf.message import DecodeError

from etsim.chakra.io import encode_varint
from etsim.chakra.schema import et_def_pb2 as pb

__all__ = ["ATTR_SENTINEL", "FlatColumns", "decode_columns"]

_F = descriptor_pb2.FieldDescriptorProto
#: FlatNodes' fields: Node's numbers and wire types, all repeated (enums as int32, messages as bytes).
_FIELDS = (
    ("id", 1, _F.TYPE_UINT64),
    ("name", 2, _F.TYPE_STRING),
    ("type", 3, _F.TYPE_INT32),
    ("ctrl_deps", 4, _F.TYPE_UINT64),
    ("data_deps", 5, _F.TYPE_UINT64),
    ("start_time_micros", 6, _F.TYPE_UINT64),
    ("duration_micros", 7, _F.TYPE_UINT64),
    ("inputs", 8, _F.TYPE_BYTES),
    ("outputs", 9, _F.TYPE_BYTES),
    ("attr", 10, _F.TYPE_BYTES),
)
_MAX_U64 = (1 << 64) - 1
_NAME_SENTINEL = "\0"
#: What precedes each node's attributes in :attr:`FlatColumns.attrs` (not a valid ``AttributeProto``).
ATTR_SENTINEL = b"\xff"


def _flat_nodes_class() -> type:
    fdp = descriptor_pb2.FileDescriptorProto(name="etsim_flat_nodes.proto", package="etsim_internal", syntax="proto3")
    message = fdp.message_type.add(name="FlatNodes")
    for name, number, kind in _FIELDS:
        message.field.add(name=name, number=number, type=kind, label=_F.LABEL_REPEATED)
    pool = pb.DESCRIPTOR.pool
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("etsim_internal.FlatNodes"))


FlatNodes = _flat_nodes_class()


#: Written before each frame: one sentinel in every column that is split (id, name, type, deps, duration, attr).
_SENTINEL = b"".join(
    (
        b"\x08" + encode_varint(_MAX_U64),
        b"\x12\x01" + _NAME_SENTINEL.encode(),
        b"\x18" + encode_varint(_MAX_U64),  # an int32 of -1, written as protobuf writes negative int32s
        b"\x20" + encode_varint(_MAX_U64),
        b"\x28" + encode_varint(_MAX_U64),
        b"\x38" + encode_varint(_MAX_U64),
        b"\x52\x01" + ATTR_SENTINEL,
    )
)


@dataclass(slots=True)
class FlatColumns:
    """The nodes of one file as columns (positions count the node frames from 0).

    Attributes:
        ids, names, types, durations: one value per node (a field a node did not write has its default).
        data_ptr, data_deps, ctrl_ptr, ctrl_deps: dependency ids in CSR form (node *i*'s are
            ``data_deps[data_ptr[i]:data_ptr[i + 1]]``).
        attrs: the nodes' attributes as serialised ``AttributeProto`` bytes, each node's run preceded by
            the sentinel :data:`ATTR_SENTINEL` (exactly one per node; :meth:`attr_positions` finds them).
        deps_precede: every dependency id (data and control) is smaller than its node's position.
    """

    ids: list[int]
    names: list[str]
    types: list[int]
    durations: list[int]
    data_ptr: list[int]
    data_deps: list[int]
    ctrl_ptr: list[int]
    ctrl_deps: list[int]
    attrs: list[bytes]
    deps_precede: bool

    def attr_positions(self) -> list[int]:
        """Where each node's sentinel is in :attr:`attrs`, then ``len(attrs)``.

        Node *i*'s attributes are ``attrs[at[i] + 1 : at[i + 1]]``.
        """
        index, at = self.attrs.index, list[int]()
        for _ in range(len(self.ids)):
            at.append(index(ATTR_SENTINEL, at[-1] + 1 if at else 0))
        at.append(len(self.attrs))
        return at


def decode_columns(data: bytes, starts: Sequence[int], ends: Sequence[int]) -> FlatColumns | None:
    """The columns of node frames ``1 .. len(ends)-1`` of *data* (frame 0 is the metadata), or None.

    *starts* and *ends* are the frames' payload spans (:func:`etsim.chakra.io.frame_spans`). None means
    the frames must be read the ordinary way: they are not valid ``Node`` messages, or a node wrote a
    sentinel's value.
    """
    import numpy as np

    n = len(ends) - 1
    view = memoryview(data)
    frames = list(map(view.__getitem__, map(slice, starts[1:], ends[1:])))  # (in C: one slice per node)
    joined = _SENTINEL + _SENTINEL.join(frames) if frames else b""
    del frames
    message = FlatNodes()
    try:
        message.ParseFromString(joined)
    except DecodeError:
        return None
    del joined
    singles = []
    for field, sentinel, dtype, default in (
        ("id", _MAX_U64, np.uint64, 0),
        ("type", -1, np.int64, 0),
        ("duration_micros", _MAX_U64, np.uint64, 0),
    ):
        runs = _runs(np, getattr(message, field), sentinel, dtype, n)
        if runs is None:
            return None
        counts, flat = runs
        if len(flat) == n and (counts == 1).all():
            singles.append(flat.tolist())  # every node wrote the field once
        else:  # a field written twice keeps its last value; one not written, its default
            ends_at = np.cumsum(counts)
            last = np.where(counts > 0, flat[np.maximum(ends_at - 1, 0)] if len(flat) else default, default)
            singles.append(last.tolist())
    ids, types, durations = singles
    names = list(message.name)
    if len(names) == 2 * n and names[0::2] == [_NAME_SENTINEL] * n and names.count(_NAME_SENTINEL) == n:
        names = names[1::2]
    else:
        csr = _names(names, n)
        if csr is None:
            return None
        names = csr
    csrs = []
    deps_precede = True
    for field in ("data_deps", "ctrl_deps"):
        runs = _runs(np, getattr(message, field), _MAX_U64, np.uint64, n)
        if runs is None:
            return None
        counts, flat = runs
        if len(flat):
            deps_precede = deps_precede and bool((flat < np.repeat(np.arange(n, dtype=np.uint64), counts)).all())
        csrs.append(([0, *np.cumsum(counts).tolist()], flat.tolist()))
    (data_ptr, data_deps), (ctrl_ptr, ctrl_deps) = csrs
    attrs = list(message.attr)
    if attrs.count(ATTR_SENTINEL) != n:
        return None
    return FlatColumns(ids, names, types, durations, data_ptr, data_deps, ctrl_ptr, ctrl_deps, attrs, deps_precede)


def _runs(np: Any, values: Sequence[int], sentinel: int, dtype: Any, n: int) -> tuple[Any, Any] | None:
    """How many values each node wrote after its sentinel, and the values without sentinels; None if not *n* runs.

    *values* is a repeated field as parsed: numpy copies it whole (upb's containers offer ``__array__``), where a
    list of it would make an int object per value.
    """
    array = np.array(values, dtype=dtype)
    mark = array == dtype(sentinel)
    at = np.flatnonzero(mark)
    if len(at) != n:
        return None
    counts = np.diff(np.append(at, len(array))) - 1
    return counts, array[~mark]


def _names(values: list[str], n: int) -> list[str] | None:
    """Each node's name (the last written, "" when none) from its run after its sentinel; None if not *n* runs."""
    if values.count(_NAME_SENTINEL) != n:
        return None
    names: list[str] = []
    for value in values:
        if value == _NAME_SENTINEL:
            names.append("")
        else:
            names[-1] = value
    return names
