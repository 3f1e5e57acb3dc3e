"""The columnar decoder gives what the ordinary reader reads, or declines (None) and leaves the file to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.chakra.attributes import make_attribute
from etsim.chakra.columnar import ATTR_SENTINEL, decode_columns
from etsim.chakra.io import encode_varint, frame_spans
from etsim.chakra.schema import et_def_pb2 as pb


def _file(*frames: bytes) -> bytes:
    meta = pb.GlobalMetadata(version="1.0.0").SerializeToString()
    return b"".join(encode_varint(len(f)) + f for f in (meta, *frames))


def _expected(data: bytes) -> list[tuple]:
    """Each node as the protobuf runtime parses it: the reference."""
    starts, ends = frame_spans(data)
    out = []
    for start, end in zip(starts[1:], ends[1:], strict=True):
        node = pb.Node()
        node.ParseFromString(data[start:end])
        attrs = [bytes(a.SerializeToString()) for a in node.attr]
        out.append(
            (node.id, node.name, node.type, node.duration_micros, list(node.data_deps), list(node.ctrl_deps), attrs)
        )
    return out


def _decoded(data: bytes) -> list[tuple] | None:
    starts, ends = frame_spans(data)
    cols = decode_columns(data, starts, ends)
    if cols is None:
        return None
    at = cols.attr_positions()
    assert all(cols.attrs[i] == ATTR_SENTINEL for i in at[:-1])
    return [
        (
            cols.ids[i],
            cols.names[i],
            cols.types[i],
            cols.durations[i],
            cols.data_deps[cols.data_ptr[i] : cols.data_ptr[i + 1]],
            cols.ctrl_deps[cols.ctrl_ptr[i] : cols.ctrl_ptr[i + 1]],
            cols.attrs[at[i] + 1 : at[i + 1]],
        )
        for i in range(len(cols.ids))
    ]


def _node(node_id: int, **fields: object) -> bytes:
    node = pb.Node(id=node_id, **fields)  # type: ignore[arg-type]
    return node.SerializeToString()


def test_the_corpus_decodes_as_the_protobuf_runtime_reads_it(corpus: Path) -> None:
    files = sorted((corpus / "chakra").rglob("*.et"))
    assert files
    for path in files:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            continue
        assert _decoded(data) == _expected(data), path


def test_defaults_repeats_and_both_dependency_encodings_read_as_the_runtime_reads_them() -> None:
    attr = make_attribute("comm_dst", 3, member="int32_val").SerializeToString()
    frames = [
        _node(0, name="first", type=pb.COMP_NODE),  # id 0 is not written
        _node(1, type=pb.COMM_SEND_NODE, data_deps=[0]) + b"\x52" + encode_varint(len(attr)) + attr,
        b"",  # an empty frame: every field at its default
        _node(3, name="x", type=pb.COMP_NODE, duration_micros=7, ctrl_deps=[1, 2])
        + b"\x08\x09\x12\x01y",  # id, name twice
        _node(4, type=pb.COMP_NODE) + b"\x28\x01\x28\x03",  # data deps not packed
        _node(5, name="t", type=pb.INVALID_NODE),
    ]
    data = _file(*frames)
    decoded = _decoded(data)
    assert decoded == _expected(data)
    assert decoded is not None and decoded[3][:2] == (9, "y")  # the last value of a field written twice


@pytest.mark.parametrize(
    "frame",
    [
        _node((1 << 64) - 1, name="a", type=pb.COMP_NODE),  # an id equal to the sentinel
        _node(1, name="\0", type=pb.COMP_NODE),  # a name equal to the sentinel
        _node(1, name="a", type=pb.COMP_NODE) + b"\x52\x01\xff",  # an attribute equal to the sentinel
        _node(1, name="a", type=pb.COMP_NODE, data_deps=[(1 << 64) - 1]),
        b"\x0a\x05abc",  # not a Node message (truncated)
    ],
)
def test_a_node_holding_a_sentinel_value_or_bad_bytes_is_left_to_the_ordinary_reader(frame: bytes) -> None:
    data = _file(_node(0, name="a", type=pb.COMP_NODE), frame)
    assert _decoded(data) is None


def test_dependencies_on_later_nodes_are_flagged() -> None:
    forward = _file(_node(0, name="a", type=pb.COMP_NODE, data_deps=[1]), _node(1, name="b", type=pb.COMP_NODE))
    backward = _file(_node(0, name="a", type=pb.COMP_NODE), _node(1, name="b", type=pb.COMP_NODE, ctrl_deps=[0]))
    for data, precede in ((forward, False), (backward, True)):
        starts, ends = frame_spans(data)
        cols = decode_columns(data, starts, ends)
        assert cols is not None and cols.deps_precede is precede
