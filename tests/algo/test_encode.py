"""The direct Chakra ET encoder against the protobuf runtime: the same bytes, always.

``encode_node`` frames node fields itself and ``encode_algo_graph`` writes a whole algorithm file
without building protobuf messages; the runtime (building ``pb.Node`` / a :class:`Trace` and
serialising it) stays the reference.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etsim.algo.family_encode import RankEncoder
from etsim.algo.family_io import algorithm_traces, encode_algo_graph, write_family, write_family_by_rank
from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph, AlgorithmBuilder
from etsim.chakra.attributes import make_attribute
from etsim.chakra.graph import CollectiveType
from etsim.chakra.io import encode_node, serialize_trace
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import TraceError
from etsim.network import mesh
from etsim.producers.msccl import convert_msccl
from etsim.producers.tacos import synthesize, write_synthesis
from etsim.system.algorithms import ALGORITHMS

ATTRIBUTES = st.one_of(
    st.tuples(st.sampled_from(["is_cpu_op", "etsim_exit"]), st.booleans(), st.none()),
    st.tuples(st.sampled_from(["comm_src", "comm_dst", "comm_tag"]), st.integers(-(2**31), 2**31 - 1), st.none()),
    st.tuples(st.just("comm_size"), st.integers(-(2**62), 2**62), st.none()),
    st.tuples(st.just("msg_chunk_cnt"), st.integers(-(2**31), 2**31 - 1), st.just("int32_val")),
    st.tuples(st.just("data_op"), st.text(max_size=12), st.just("string_val")),
)


@settings(max_examples=300, deadline=None)
@given(
    node_id=st.integers(0, 2**63),
    name=st.text(max_size=20),
    node_type=st.integers(0, 7),
    deps=st.lists(st.integers(0, 2**40), max_size=6),
    micros=st.integers(0, 2**40),
    attrs=st.lists(ATTRIBUTES, max_size=6),
)
def test_encode_node_matches_the_runtime(node_id, name, node_type, deps, micros, attrs):
    node = pb.Node(id=node_id, name=name, type=node_type, duration_micros=micros)
    node.data_deps.extend(deps)
    framed = []
    for key, value, member in attrs:
        attribute = make_attribute(key, value, member=member)
        node.attr.append(attribute)
        payload = attribute.SerializeToString()
        framed.append(b"\x52" + _varint(len(payload)) + payload)
    assert encode_node(node_id, name, node_type, deps, micros, framed) == node.SerializeToString()


def _varint(value: int) -> bytes:
    from etsim.chakra.io import encode_varint

    return encode_varint(value)


def _runtime_file(graphs: list[AlgoGraph], position: int, metadata: dict[str, str] | None = None) -> bytes:
    return serialize_trace(algorithm_traces(graphs, metadata=metadata)[position])


def _check_family(graphs: list[AlgoGraph], metadata: dict[str, str] | None = None) -> None:
    n = len(graphs)
    for position, graph in enumerate(graphs):
        assert encode_algo_graph(graph, position, n, metadata=metadata) == _runtime_file(graphs, position, metadata)


@pytest.mark.parametrize("name", ["ring", "direct", "tree", "hd"])
def test_native_algorithms_encode_as_the_runtime_writes_them(name: str) -> None:
    algorithm = ALGORITHMS.get(name)()
    for collective in (CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER):
        if algorithm.supports(collective, 8) is not None:
            continue
        graphs = [algorithm.graph(collective, 8, p) for p in range(8)]
        _check_family(graphs, {"collective": collective.name.lower()})


def test_msccl_corpus_encodes_as_the_runtime_writes_it(corpus: Path) -> None:
    files = sorted((corpus / "msccl").rglob("*.xml"))[:12]
    assert files, "the MSCCL-IR corpus is missing"
    for path in files:
        _check_family(convert_msccl(path).graphs)


def test_tacos_family_is_written_as_the_runtime_writes_it(tmp_path: Path) -> None:
    """write_synthesis (direct encoder, forked workers) gives the runtime's bytes, with one job or two."""
    syn = synthesize(mesh([4, 4], 50.0, 500.0), "all_reduce", size=1 << 20)
    from etsim.producers.tacos.synthesis import algo_graphs

    reference = algorithm_traces(algo_graphs(syn.schedule), metadata={"collective": syn.collective})
    write_family(reference, tmp_path / "runtime")
    for jobs in (1, 2):
        paths = write_synthesis(syn, tmp_path / f"jobs{jobs}", jobs=jobs)
        assert len(paths) == 16
        for rank, path in enumerate(paths):
            assert path.read_bytes() == (tmp_path / f"runtime.{rank}.et").read_bytes()


@st.composite
def algo_graphs(draw: st.DrawFn) -> tuple[list[AlgoGraph], int]:
    """Random graphs (absolute or symbolic sizes, relative or absolute peers, exits, durations)."""
    n = draw(st.integers(2, 6))
    symbolic = draw(st.booleans())
    relative = draw(st.booleans())
    graphs = []
    for _ in range(n):
        b = AlgorithmBuilder(total_chunks=n * 4 if symbolic else None, relative_peers=relative)
        count = draw(st.integers(0, 12))
        for i in range(count):
            kind = draw(st.sampled_from([SEND, RECV, COMP]))
            deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
            chunks = draw(st.integers(0, 8))
            if kind == SEND:
                name = draw(st.text(max_size=8))
                b.send(draw(st.integers(-n, n)), chunks, draw(st.integers(0, 3)), deps=deps, name=name)
            elif kind == RECV:
                b.recv(draw(st.integers(-n, n)), chunks, draw(st.integers(0, 3)), deps=deps)
            else:
                b.reduce(chunks, deps=deps, duration_ns=draw(st.sampled_from([None, 0.0, 1500.0, 2_000_000.0])))
        if count and draw(st.booleans()):
            b.mark_exits(count - 1)
        graphs.append(b.build())
    return graphs, n


@settings(max_examples=150, deadline=None)
@given(algo_graphs())
def test_random_graphs_encode_as_the_runtime_writes_them(drawn: tuple[list[AlgoGraph], int]) -> None:
    graphs, n = drawn
    _check_family(graphs, {"collective": "all_reduce"})
    for graph in graphs:  # and the encoder made once for every position encodes each as encode_algo_graph does
        encoder = RankEncoder(graph, n, metadata={"collective": "all_reduce"})
        for p in range(n):
            expected = encode_algo_graph(graph, p, n, metadata={"collective": "all_reduce"})
            runs = encoder.encode_runs(p)
            assert encoder.encode(p) == expected and (runs is None or runs == expected)


@pytest.mark.parametrize("name", ["ring", "direct"])
@pytest.mark.parametrize("coll", [CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.ALL_TO_ALL,
                                  CollectiveType.REDUCE_SCATTER])  # fmt: skip
@pytest.mark.parametrize(("n", "size"), [(5, None), (8, 8 << 20), (16, 1 << 20)])
def test_a_shared_graph_is_encoded_once_for_every_rank_as_each_rank_alone(
    name: str, coll: CollectiveType, n: int, size: int | None
) -> None:
    graph = ALGORITHMS.get(name)().graph(coll, n, 0)
    encoder = RankEncoder(graph, n, metadata={"collective": coll.name.lower()}, size=size)
    assert encoder._nodes is not None  # the per-rank path, not the whole-graph fallback
    planned = 0
    for p in range(n):
        expected = encode_algo_graph(graph, p, n, metadata={"collective": coll.name.lower()}, size=size)
        assert encoder.encode(p) == expected
        runs = encoder.encode_runs(p)  # the numpy plan (None where a relative run would wrap)
        assert runs is None or runs == expected
        planned += runs is not None
    # (the ring all-to-all moves pieces of several runs: it is encoded node by node at every rank)
    assert planned or (name, coll) == ("ring", CollectiveType.ALL_TO_ALL)


def test_parallel_family_writer_matches_the_serial_one(tmp_path: Path) -> None:
    algorithm = ALGORITHMS.get("ring")()
    graphs = [algorithm.graph(CollectiveType.ALL_REDUCE, 16, p) for p in range(16)]

    def make(rank: int) -> bytes:
        return encode_algo_graph(graphs[rank], rank, 16)

    serial = write_family_by_rank(make, 16, tmp_path / "one", jobs=1)
    forked = write_family_by_rank(make, 16, tmp_path / "two.et", jobs=2)
    assert [p.name for p in forked] == [f"two.{r}.et" for r in range(16)]
    for a, b in zip(serial, forked, strict=True):
        assert a.read_bytes() == b.read_bytes()


def test_parallel_family_writer_reports_a_failing_or_dying_worker(tmp_path: Path) -> None:
    algorithm = ALGORITHMS.get("ring")()
    graphs = [algorithm.graph(CollectiveType.ALL_REDUCE, 8, p) for p in range(8)]

    def failing(rank: int) -> bytes:
        if rank == 5:
            raise TraceError(f"rank {rank}: no graph")
        return encode_algo_graph(graphs[rank], rank, 8)

    with pytest.raises(TraceError, match="rank 5: no graph"):
        write_family_by_rank(failing, 8, tmp_path / "fail", jobs=2)

    def dying(rank: int) -> bytes:
        if rank == 5:
            os._exit(9)  # as the OOM killer would end it
        return encode_algo_graph(graphs[rank], rank, 8)

    with pytest.raises(TraceError, match=r"die\.\*\.et: the process writing ranks 1, 3, 5, 7 died"):
        write_family_by_rank(dying, 8, tmp_path / "die", jobs=2)
    assert multiprocessing.active_children() == []


def test_a_relative_run_is_written_as_resolving_and_formatting_it_would() -> None:
    """The writers look a non-wrapping relative run up by its absolute chunks, and absolute segments by themselves:
    the same text as resolving and formatting them."""
    from etsim.algo.dataflow import Segment, absolute_segments, format_segments
    from etsim.algo.family_io import _Attributes

    attributes = _Attributes()
    total, n = 12, 4
    cases = 0
    for off in range(-13, 14):
        for cnt in (1, 2, 3, 5):
            for stride, rel in ((1, True), (2, True), (-1, True), (3, True), (1, False), (2, False)):
                segs = (Segment("o", off, cnt, stride, rel),)
                for position in range(n):
                    got = attributes.segments("data_src", segs, position, n, total)
                    text = format_segments(absolute_segments(segs, position, n, total))
                    assert got.string_val == text, (segs, position)
                    cases += 1
    assert len(attributes.runs) > 100 and cases > 1000  # the looked-up path was taken, and checked
