"""The committed protobuf module is wire-identical to Chakra's schema and imports cleanly."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pool

from etsim.chakra import make_attribute, serialize_trace
from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import CollectiveType, NodeType, Trace
from etsim.chakra.schema import et_def_pb2 as pb


def test_field_numbers_and_types_match_chakra() -> None:
    node = pb.Node.DESCRIPTOR
    expected = {
        "id": (1, "uint64"),
        "name": (2, "string"),
        "type": (3, "enum"),
        "ctrl_deps": (4, "uint64"),
        "data_deps": (5, "uint64"),
        "start_time_micros": (6, "uint64"),
        "duration_micros": (7, "uint64"),
        "inputs": (8, "message"),
        "outputs": (9, "message"),
        "attr": (10, "message"),
    }
    type_names = {v: k[5:].lower() for k, v in vars(type(node.fields[0])).items() if k.startswith("TYPE_")}
    got = {f.name: (f.number, type_names[f.type]) for f in node.fields}
    assert got == expected
    assert pb.Node.DESCRIPTOR.full_name == "ChakraProtoMsg.Node"
    # The AttributeProto oneof: scalar kind k at 3+2k, its list at 4+2k.
    kinds = [
        "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
        "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
    ]  # fmt: skip
    fields = pb.AttributeProto.DESCRIPTOR.fields_by_name
    for k, kind in enumerate(kinds):
        assert fields[f"{kind}_val"].number == 3 + 2 * k
        assert fields[f"{kind}_list"].number == 4 + 2 * k
    assert [v.number for v in pb.NodeType.DESCRIPTOR.values] == list(range(8))
    assert {v.name: v.number for v in pb.CollectiveCommType.DESCRIPTOR.values} == {
        c.name: c.value for c in CollectiveType
    }
    assert {v.name: v.number for v in pb.NodeType.DESCRIPTOR.values} == {t.name: t.value for t in NodeType}


def test_reference_example_bytes() -> None:
    """The constructed example of the wire-format reference, byte for byte."""
    nodes = [pb.Node(id=1, name="ar", type=pb.COMM_COLL_NODE)]
    nodes[0].attr.extend(
        [make_attribute("is_cpu_op", False), make_attribute("comm_type", 0), make_attribute("comm_size", 1048576)]
    )
    send = pb.Node(id=2, name="snd", type=pb.COMM_SEND_NODE, data_deps=[1])
    send.attr.extend(
        [make_attribute("comm_dst", 1), make_attribute("comm_tag", 0), make_attribute("comm_size", 131072)]
    )
    comp = pb.Node(id=3, name="c", type=pb.COMP_NODE, data_deps=[2], duration_micros=5)
    trace = Trace.from_nodes([*nodes, send, comp], pb.GlobalMetadata(version="1.0.0"))
    expected = bytes.fromhex(
        "07" + "0a05" + b"1.0.0".hex()
        + "38" + "0801" + "1202" + b"ar".hex() + "1807"
        + "520e0a09" + b"is_cpu_op".hex() + "d80100"
        + "520d0a09" + b"comm_type".hex() + "4800"
        + "520f0a09" + b"comm_size".hex() + "48808040"
        + "39" + "0802" + "1203" + b"snd".hex() + "1805" + "2a0101"
        + "520c0a08" + b"comm_dst".hex() + "3801"
        + "520c0a08" + b"comm_tag".hex() + "3800"
        + "520f0a09" + b"comm_size".hex() + "48808008"
        + "0c" + "0803" + "1201" + b"c".hex() + "1804" + "2a0102" + "3805"
    )  # fmt: skip
    assert serialize_trace(trace) == expected


def test_negative_int_is_ten_byte_varint() -> None:
    attr = make_attribute("x", -1)
    assert attr.SerializeToString() == bytes.fromhex("0a0178") + bytes.fromhex("48ffffffffffffffffff01")


def test_private_pool_and_no_runtime_version_check() -> None:
    """Chakra's own et_def_pb2 can be imported beside ours; any protobuf >= 4.21 imports it."""
    source = Path(pb.__file__).read_text()
    assert "ValidateProtobufRuntimeVersion" not in source
    try:
        descriptor_pool.Default().FindMessageTypeByName("ChakraProtoMsg.Node")
    except KeyError:
        pass
    else:  # pragma: no cover - would mean we registered in the shared pool
        raise AssertionError("ChakraProtoMsg.Node is registered in the default descriptor pool")


def test_builder_writes_expected_members() -> None:
    b = TraceBuilder()
    b.send(dst=3, size=10, tag=7)
    b.collective(CollectiveType.ALL_GATHER, 64, pg_name="1")
    b.mem(store=False, tensor_size=5)
    members = {a.name: a.WhichOneof("value") for n in b.nodes for a in n.attr}
    assert members == {
        "is_cpu_op": "bool_val",
        "comm_dst": "int32_val",
        "comm_size": "int64_val",
        "comm_tag": "int32_val",
        "comm_type": "int64_val",
        "pg_name": "string_val",
        "tensor_size": "uint64_val",
    }
