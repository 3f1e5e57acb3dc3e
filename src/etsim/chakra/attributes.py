"""Chakra ``AttributeProto`` values: reading any member, writing the member consumers expect.

Readers accept every numeric oneof member (as the reference feeders do), so a ``comm_size``
written as ``uint64_val`` still reads as its value. Writers use the member the reference
consumers read (``comm_size`` as ``int64_val``, ``comm_src/dst/tag`` as ``int32_val``,
``is_cpu_op`` as ``bool_val`` …, table in ``shared/reference/chakra-et.md`` §7) because the
old mlcommons feeder reads one specific member and silently sees 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import TraceError

__all__ = [
    "EXPECTED_MEMBER",
    "attribute_value",
    "make_attribute",
    "numeric_value",
]

#: The oneof member each well-known attribute is written with.
EXPECTED_MEMBER: dict[str, str] = {
    "is_cpu_op": "bool_val",
    "num_ops": "int64_val",
    "tensor_size": "uint64_val",
    "tensor_loc": "int64_val",
    "comm_type": "int64_val",
    "comm_size": "int64_val",
    "comm_priority": "int32_val",
    "comm_src": "int32_val",
    "comm_dst": "int32_val",
    "comm_tag": "int32_val",
    "pg_name": "string_val",
    "involved_dim": "bool_list",
}

_SCALAR_NUMERIC = frozenset(
    {
        "double_val",
        "float_val",
        "int32_val",
        "int64_val",
        "uint32_val",
        "uint64_val",
        "sint32_val",
        "sint64_val",
        "fixed32_val",
        "fixed64_val",
        "sfixed32_val",
        "sfixed64_val",
        "bool_val",
    }
)


def attribute_value(attr: pb.AttributeProto) -> Any:
    """The Python value of *attr*: a scalar, a list for ``*_list`` members, ``None`` if unset."""
    member = attr.WhichOneof("value")
    if member is None:
        return None
    value = getattr(attr, member)
    if member.endswith("_list"):
        return list(value.values)
    return value


def numeric_value(attr: pb.AttributeProto) -> int | float | bool | None:
    """The numeric value of *attr* from any numeric or bool member, or ``None`` if it has none."""
    member = attr.WhichOneof("value")
    if member in _SCALAR_NUMERIC:
        return getattr(attr, member)  # type: ignore[no-any-return]
    return None


_LIST_MEMBER_BY_TYPE: tuple[tuple[type, str], ...] = (
    (bool, "bool_list"),
    (int, "int64_list"),
    (float, "double_list"),
    (str, "string_list"),
    (bytes, "bytes_list"),
)


def make_attribute(name: str, value: Any, member: str | None = None) -> pb.AttributeProto:
    """Build an attribute, choosing the oneof member consumers expect.

    Args:
        name: attribute name.
        value: a bool, int, float, str, bytes or a list of one of those.
        member: force a oneof member (e.g. ``"uint64_val"``); default: the expected member for
            well-known names, else one inferred from the Python type.
    """
    attr = pb.AttributeProto(name=name)
    if member is None:
        member = EXPECTED_MEMBER.get(name)
    if member is None:
        member = _infer_member(name, value)
    try:
        if member.endswith("_list"):
            getattr(attr, member).values.extend(value)
            # An empty list still marks the member as set (the writer emits `<tag> 00`).
            getattr(attr, member).SetInParent()
        else:
            setattr(attr, member, value)
    except ValueError as exc:  # protobuf's range check: too big, or negative where unsigned
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise TraceError(f"attribute {name!r}: {shown} does not fit Chakra's {member} field ({exc})") from None
    return attr


def _infer_member(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "bool_val"
    if isinstance(value, int):
        return "int64_val"
    if isinstance(value, float):
        return "double_val"
    if isinstance(value, str):
        return "string_val"
    if isinstance(value, bytes):
        return "bytes_val"
    if isinstance(value, Sequence):
        for py_type, member in _LIST_MEMBER_BY_TYPE:
            if all(isinstance(v, py_type) for v in value):
                return member
    raise TypeError(f"attribute {name!r}: cannot store a value of type {type(value).__name__}")
