"""The real MSCCL-IR corpus: every file converts and simulates; known algorithms give known times."""

from __future__ import annotations

import math
import warnings

import pytest

from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.graph import SEND
from etsim.chakra import Workload, load_workload
from etsim.chakra.graph import CollectiveType, collective_buffer_bytes
from etsim.cli.algo import export_algorithm, make_algorithm
from etsim.errors import EtsimWarning
from etsim.network import fully_connected, ring
from etsim.producers import collective_workload
from etsim.producers.msccl import convert_msccl, workload_to_msccl
from etsim.producers.msccl.source import load_msccl_algorithm
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

from .conftest import CORPUS, FILES, GEN, REPO

GENERATED = CORPUS / "generated"
MiB = 1 << 20
BW, LAT = 50.0, 500.0


def run(algo, collective, size, n, topology=None, **system):
    """Simulate under the congestion-aware default; warnings are kept in ``result.warnings`` for the tests."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EtsimWarning)
        return simulate(
            Workload(collective_workload(collective, size, n)),
            topology=topology or fully_connected(n, BW, LAT),
            system=SystemConfig(algorithms={"default": str(algo)}, **system),
        )


@pytest.mark.corpus
def test_corpus_is_discovered_by_glob():
    assert len(FILES) >= 50
    assert {p.parent.name for p in FILES} >= {"generated", "ndv4", "msccl-algorithms", "teccl"}


#: Corpus files the semantic verifier finds wrong, with the reason (``--algo`` refuses them). None is: every
#: file computes its collective in every placement it declares, the 16-GPU RCCL unit-test rings included (their
#: data crosses between GPUs 0-7 and 8-15 on twelve connections; every chunk is reduced over all 16 ranks).
WRONG: dict[str, str] = {}


@pytest.mark.corpus
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(CORPUS).as_posix())
def test_every_corpus_file_converts_and_simulates(path):
    algo = load_msccl_algorithm(path)
    conv = algo.conversion
    n = conv.program.ngpus
    coll = conv.collective or CollectiveType.ALL_REDUCE
    # Every file gets a verdict (computed once: the run below reuses it).
    verdict = algo.verify(coll, n)
    rel = path.relative_to(CORPUS).as_posix()
    if rel in WRONG:
        assert verdict.ok is False and WRONG[rel] in verdict.message
        return
    assert verdict.ok is True, f"{rel}: {verdict}"
    # No step is dropped: every step that moves data has its nodes.
    steps_with_send = sum(
        1 for g in conv.program.gpus for tb in g.tbs for st in tb.steps if st.type in ("s", "rcs", "rrs", "rrcs")
    )
    assert conv.num_messages == steps_with_send
    result = run(path, coll, MiB, n)  # raises DeadlockError if it cannot complete
    assert result.finish_ns > 0
    # A size outside the file's minBytes/maxBytes window is said, never silently simulated.
    buffer = collective_buffer_bytes(coll, MiB, n)
    window = algo.byte_window
    outside = window is not None and (buffer < window[0] or (window[1] is not None and buffer > window[1]))
    assert any("minBytes/maxBytes" in w for w in result.warnings) == outside
    assert not any("ignores contention" in w for w in result.warnings)
    assert result.network["messages"] == conv.num_messages
    sent_chunks = sum(c for g in conv.graphs for c, k in zip(g.chunks, g.kinds, strict=True) if k == SEND)
    expected = sent_chunks * collective_buffer_bytes(coll, MiB, n) / conv.program.nchunksperloop
    assert result.network["bytes"] == pytest.approx(expected)


@pytest.mark.corpus
@pytest.mark.parametrize("variant", ["allreduce_ring_n8_c1_i1_LL128.xml", "allreduce_ring_n8_c1_i1_LL128_nofusion.xml"])
@pytest.mark.parametrize("size", [1000, MiB, 64 * MiB])
@pytest.mark.parametrize("reduction_bandwidth", [None, 100.0])
def test_mscclang_ring_allreduce_matches_native_ring(variant, size, reduction_bandwidth):
    topo = ring(8, BW, LAT)
    native = run("ring", CollectiveType.ALL_REDUCE, size, 8, topo, reduction_bandwidth=reduction_bandwidth)
    msccl = run(GENERATED / variant, CollectiveType.ALL_REDUCE, size, 8, topo, reduction_bandwidth=reduction_bandwidth)
    assert msccl.finish_ns == pytest.approx(native.finish_ns, rel=1e-12)
    assert msccl.network["messages"] == native.network["messages"] == 2 * 7 * 8
    assert msccl.network["bytes"] == pytest.approx(native.network["bytes"])


@pytest.mark.corpus
def test_fused_and_unfused_ring_differ_only_in_step_count():
    fused = convert_msccl(GENERATED / "allreduce_ring_n8_c1_i1_LL128.xml")
    plain = convert_msccl(GENERATED / "allreduce_ring_n8_c1_i1_LL128_nofusion.xml")
    assert fused.program.num_steps < plain.program.num_steps
    for a, b in zip(fused.graphs, plain.graphs, strict=True):
        assert sorted(a.kinds) == sorted(b.kinds) and a.num_nodes == b.num_nodes == 35


@pytest.mark.corpus
@pytest.mark.parametrize("size", [MiB, 1 << 30])
def test_recursive_doubling_allgather_matches_closed_form(size):
    p = 8
    result = run(GENERATED / "allgather_recdbl_n8_i1.xml", CollectiveType.ALL_GATHER, size, p)
    # log2(p) rounds, round k sends 2^k of the p output blocks (input = size): α·log p + (p−1)·size·β.
    closed = math.log2(p) * LAT + (p - 1) * size / BW
    assert result.finish_ns == pytest.approx(closed, rel=1e-12)
    assert result.network["messages"] == p * 3


@pytest.mark.parametrize("p", [4, 8, 16])
def test_halving_doubling_allreduce_through_msccl_matches_closed_form(tmp_path, p):
    prefix = tmp_path / "hd"
    export_algorithm(make_algorithm("halving_doubling"), CollectiveType.ALL_REDUCE, p, prefix)
    xml = tmp_path / "hd.xml"
    xml.write_text(workload_to_msccl(prefix, collective=CollectiveType.ALL_REDUCE))
    size = 64 * MiB
    result = run(xml, CollectiveType.ALL_REDUCE, size, p)
    # Rabenseifner on a fully connected network: 2·log2(p)·α + 2·(p−1)/p·S·β.
    closed = 2 * math.log2(p) * LAT + 2 * (p - 1) / p * size / BW
    assert result.finish_ns == pytest.approx(closed, rel=1e-12)
    assert run("halving_doubling", CollectiveType.ALL_REDUCE, size, p).finish_ns == pytest.approx(result.finish_ns)


@pytest.mark.corpus
@pytest.mark.parametrize(
    "rel",
    [p.relative_to(CORPUS).as_posix() for p in FILES if "alltoall" in p.name or "a2a" in p.name],
)
def test_allpairs_alltoall_moves_n_minus_1_over_n_of_the_buffer_per_rank(rel):
    conv = load_msccl_algorithm(CORPUS / rel).conversion
    n = conv.program.ngpus
    for g in conv.graphs:
        sent = sum(c for c, k in zip(g.chunks, g.kinds, strict=True) if k == SEND)
        assert sent / g.total_chunks == pytest.approx((n - 1) / n)
    size = 8 * MiB
    result = run(CORPUS / rel, CollectiveType.ALL_TO_ALL, size, n)
    assert result.network["bytes"] == pytest.approx(n * (n - 1) / n * size)


@pytest.mark.corpus
def test_hierarchical_allreduce_sends_the_same_bytes_as_ring_in_fewer_steps():
    hier = run(GENERATED / "hier_allreduce_g4_n2_i1.xml", CollectiveType.ALL_REDUCE, 64 * MiB, 8)
    flat = run(GENERATED / "allreduce_ring_n8_c1_i1_LL128.xml", CollectiveType.ALL_REDUCE, 64 * MiB, 8)
    assert hier.network["bytes"] == pytest.approx(flat.network["bytes"])
    assert hier.finish_ns < flat.finish_ns  # two 4-rank rings run side by side on a fully connected network


@pytest.mark.parametrize(
    ("name", "collective"),
    [
        ("ring", CollectiveType.ALL_REDUCE),
        ("direct", CollectiveType.ALL_REDUCE),
        ("tree", CollectiveType.ALL_REDUCE),
        ("ring", CollectiveType.ALL_GATHER),
        ("ring", CollectiveType.REDUCE_SCATTER),
        ("ring", CollectiveType.ALL_TO_ALL),
        ("ring", CollectiveType.BROADCAST),
    ],
)
def test_native_export_round_trips_through_msccl_with_identical_time(tmp_path, name, collective):
    n = 8
    prefix = tmp_path / "algo"
    export_algorithm(make_algorithm(name), collective, n, prefix)
    xml = tmp_path / "algo.xml"
    xml.write_text(workload_to_msccl(prefix, collective=collective))
    for size in (MiB, 256 * MiB):
        a = run(prefix, collective, size, n, reduction_bandwidth=100.0)
        b = run(xml, collective, size, n, reduction_bandwidth=100.0)
        assert b.finish_ns == a.finish_ns
        assert b.network["messages"] == a.network["messages"]
    # Same graphs: kinds, sizes and dependency structure per rank.
    conv = convert_msccl(xml)
    for rank, trace in enumerate(load_workload(prefix)):
        g = algo_graph_from_trace(trace)
        h = conv.graphs[rank]
        assert sorted(zip(g.kinds, g.chunks, strict=True)) == sorted(zip(h.kinds, h.chunks, strict=True))
        assert len(g.deps_idx) == len(h.deps_idx)


@pytest.mark.corpus
def test_shipped_conversions_are_regenerated_identically(tmp_path):
    written = GEN.generate(tmp_path, CORPUS)
    shipped = REPO / "algorithms"
    for name, paths in written.items():
        assert len(paths) == 8
        for p in paths:
            assert p.read_bytes() == (shipped / p.name).read_bytes(), p.name
        # and the shipped family simulates exactly as the XML it came from
        coll = convert_msccl(CORPUS / GEN.SHIPPED[name]).collective
        assert run(shipped / name, coll, MiB, 8).finish_ns == run(CORPUS / GEN.SHIPPED[name], coll, MiB, 8).finish_ns


@pytest.mark.corpus
def test_coverage_helper_reports_every_file(tmp_path, monkeypatch):
    sub = tmp_path / "corpus"
    sub.mkdir()
    for rel in ("allgather_recdbl_n8_i1.xml", "alltoall_allpairs_n8_i1.xml"):
        (sub / rel).write_bytes((GENERATED / rel).read_bytes())
    (sub / "broken.xml").write_bytes(b"<algo coll='allreduce'/>")
    rows = GEN.coverage_rows(sub)
    assert [r["file"] for r in rows] == ["allgather_recdbl_n8_i1.xml", "alltoall_allpairs_n8_i1.xml", "broken.xml"]
    assert "no 'ngpus'" in rows[2]["error"]
    text = GEN.coverage_markdown(rows)
    assert "**2 of 3 files convert and simulate to completion.**" in text
    assert "| `alltoall_allpairs_n8_i1.xml` | alltoall | 8 | 120 |" in text
    assert "**2 of 3 compute their collective**" in text
    assert rows[0]["verdict"] == "correct (in place)" and rows[1]["verdict"] == "correct (out of place)"


@pytest.mark.corpus
@pytest.mark.slow
def test_the_coverage_page_is_what_the_script_writes_from_the_corpus():
    """docs/msccl-coverage.md (every corpus file's conversion, verdict and times) regenerated: about 30 s."""
    assert GEN.coverage_markdown(GEN.coverage_rows(CORPUS)) == (REPO / "docs" / "msccl-coverage.md").read_text()


@pytest.mark.corpus
def test_a_round_trip_that_would_be_wrong_in_place_is_written_for_out_of_place_only(tmp_path):
    # RCCL's ring all-reduce (in and out of place) went MSCCL-IR -> ET -> MSCCL-IR with its reducing receives landing
    # in the output before the reduction read the input: in place that counted a rank's own contribution twice, and
    # the file said inplace="1" with exit 0.
    from etsim.producers.msccl import write_msccl_et

    src = CORPUS / "shipped/rccl/tools/msccl-unit-test-algorithms/all-reduce-ring-ll.xml"
    conversion = convert_msccl(src)
    assert conversion.verify().ok
    write_msccl_et(conversion, tmp_path / "ring")
    notes: list[str] = []
    # (the round trip gives every message a thread block of its own: more than MSCCL's runtime takes, and it says so)
    with pytest.warns(EtsimWarning, match=r"thread blocks on a GPU, .* MSCCL's runtime takes at most 216"):
        xml = workload_to_msccl(tmp_path / "ring", notes=notes)
    assert 'inplace="0" outofplace="1"' in xml
    assert any("written for out of place only" in n and "count rank" in n for n in notes)
    back = convert_msccl(xml.encode())
    assert back.verify().ok
    assert (back.program.proto, back.program.name) == (conversion.program.proto, conversion.program.name)  # kept


def _runtime_buffer_check(xml: str) -> list[tuple[int, int, int]]:
    """Every GPU's ``(id, i_chunks, o_chunks)``, after asserting the older MSCCL runtime's check on them.

    That runtime refuses a non-zero ``i_chunks·inMult`` or ``o_chunks·outMult`` other than ``nchunksperloop`` (inMult
    is nRanks for all-gather, outMult for reduce-scatter, else 1: ``../shared/reference/msccl-ir.md``).
    """
    from lxml import etree

    algo = etree.fromstring(xml.encode())
    total, n, coll = int(algo.get("nchunksperloop")), int(algo.get("ngpus")), algo.get("coll")
    in_mult = n if coll in ("allgather", "gather") else 1
    out_mult = n if coll in ("reduce_scatter", "reducescatter", "scatter") else 1
    sizes = []
    for gpu in algo.iter("gpu"):
        i_chunks, o_chunks = int(gpu.get("i_chunks")), int(gpu.get("o_chunks"))
        assert i_chunks in (0, total // in_mult) and o_chunks in (0, total // out_mult), (coll, gpu.get("id"))
        sizes.append((int(gpu.get("id")), i_chunks, o_chunks))
    return sizes


@pytest.mark.parametrize(
    ("collective", "sizes"),
    [
        # in place, as MSCCLang writes them: the all-gather's input and the reduce-scatter's output are never named
        (CollectiveType.ALL_GATHER, (0, 8)),
        (CollectiveType.REDUCE_SCATTER, (8, 0)),
        (CollectiveType.ALL_REDUCE, (8, 8)),
    ],
)
def test_exported_buffers_pass_the_runtimes_size_check(tmp_path, collective, sizes):
    # An all-gather or reduce-scatter was written with i_chunks = o_chunks = nchunksperloop: the older runtime
    # multiplies the all-gather's i_chunks (the reduce-scatter's o_chunks) by nRanks and refuses the file.
    export_algorithm(make_algorithm("ring"), collective, 8, tmp_path / "ring")
    xml = workload_to_msccl(tmp_path / "ring", collective=collective)
    assert {s[1:] for s in _runtime_buffer_check(xml)} == {sizes}
    assert convert_msccl(xml.encode()).verify().ok


@pytest.mark.corpus
def test_an_out_of_place_reduce_scatter_keeps_its_piece_sized_output(tmp_path):
    from etsim.producers.msccl import write_msccl_et

    conversion = convert_msccl(GENERATED / "reducescatter_ring_n8_i1_oop.xml")  # i_chunks="8" o_chunks="1"
    write_msccl_et(conversion, tmp_path / "rs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EtsimWarning)  # (one thread block per message: past the runtime's limits)
        xml = workload_to_msccl(tmp_path / "rs")
    assert 'inplace="0" outofplace="1"' in xml
    assert {s[1:] for s in _runtime_buffer_check(xml)} == {(8, 1)}
    assert convert_msccl(xml.encode()).verify().ok
