"""Robustness: random valid traces round-trip; mutated real files raise only TraceError."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etsim.chakra import Trace, Workload, make_attribute, read_trace, serialize_trace, validate_workload, write_trace
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.chakra.summary import summarize_trace
from etsim.errors import TraceError

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)
TEXT = st.text(max_size=12)

attribute_values = st.one_of(
    st.tuples(st.just("int64_val"), INT64),
    st.tuples(st.just("int32_val"), st.integers(min_value=-(2**31), max_value=2**31 - 1)),
    st.tuples(st.just("uint64_val"), UINT64),
    st.tuples(st.just("sint64_val"), INT64),
    st.tuples(st.just("fixed32_val"), st.integers(min_value=0, max_value=2**32 - 1)),
    st.tuples(st.just("double_val"), st.floats(allow_nan=False)),
    st.tuples(st.just("bool_val"), st.booleans()),
    st.tuples(st.just("string_val"), TEXT),
    st.tuples(st.just("bytes_val"), st.binary(max_size=8)),
    st.tuples(st.just("int64_list"), st.lists(INT64, max_size=4)),
    st.tuples(st.just("bool_list"), st.lists(st.booleans(), max_size=4)),
    st.tuples(st.just("string_list"), st.lists(TEXT, max_size=3)),
)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    count = draw(st.integers(min_value=0, max_value=12))
    ids = draw(st.lists(UINT64, min_size=count, max_size=count, unique=True))
    nodes = []
    for i, nid in enumerate(ids):
        node = pb.Node(
            id=nid,
            name=draw(TEXT),
            type=draw(st.integers(min_value=0, max_value=7)),
            duration_micros=draw(UINT64),
            start_time_micros=draw(st.sampled_from([0, 1, 2**40])),
        )
        if i:
            node.data_deps.extend(draw(st.lists(st.sampled_from(ids[:i]), max_size=3)))
            node.ctrl_deps.extend(draw(st.lists(st.sampled_from(ids[:i]), max_size=2)))
        if draw(st.booleans()):
            node.inputs.values = draw(TEXT)
        for name in draw(
            st.lists(st.sampled_from(["comm_size", "comm_type", "x", "pg_name", "is_cpu_op"]), max_size=4)
        ):
            member, value = draw(attribute_values)
            node.attr.append(make_attribute(name, value, member=member))
        nodes.append(node)
    meta = pb.GlobalMetadata(version=draw(TEXT))
    return Trace.from_nodes(nodes, meta)


@given(traces())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_valid_traces_round_trip(tmp_path: Path, trace: Trace) -> None:
    path = write_trace(trace, tmp_path / "t.et")
    back = read_trace(path)
    assert back.metadata == trace.metadata
    assert back.nodes == trace.nodes
    assert serialize_trace(back) == path.read_bytes()
    assert back.ids == trace.ids and back.data_idx == trace.data_idx and back.comm_size == trace.comm_size
    # Validation and summaries never crash on anything the writer can produce.
    validate_workload(Workload([back]))
    summarize_trace(back)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0 and buf:  # flip bits
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del buf[rng.randrange(len(buf) + 1) :]
    elif kind == 2:  # insert random bytes
        pos = rng.randrange(len(buf) + 1)
        buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
    elif kind == 3 and buf:  # overwrite a byte with a boundary value
        buf[rng.randrange(len(buf))] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
    elif kind == 4:  # duplicate a slice
        a = rng.randrange(len(buf) + 1)
        b = rng.randrange(a, len(buf) + 1)
        buf[b:b] = buf[a:b]
    else:  # pure garbage, sometimes behind a gzip header
        buf = bytearray(rng.randbytes(rng.randint(0, 64)))
        if rng.random() < 0.3:
            buf[0:0] = b"\x1f\x8b\x08\x00"
    return bytes(buf)


def test_mutated_corpus_files_raise_only_trace_error(corpus: Path, tmp_path: Path) -> None:
    seeds = [p for p in sorted((corpus / "chakra").rglob("*.et")) if p.stat().st_size < 40_000]
    assert seeds
    rng = random.Random(20261122)
    path = tmp_path / "m.et"
    parsed = rejected = 0
    for case in range(3000):
        source = seeds[case % len(seeds)]
        path.write_bytes(_mutate(rng, source.read_bytes()))
        try:
            trace = read_trace(path, rank=0)
        except TraceError as exc:
            assert str(path) in str(exc)
            rejected += 1
            continue
        parsed += 1
        validate_workload(Workload([trace]))
        summarize_trace(trace)
        serialize_trace(trace)
    assert parsed > 100 and rejected > 100  # both paths were exercised
