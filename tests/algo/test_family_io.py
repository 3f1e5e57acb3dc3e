"""Writing families: all ranks or none where a run would read them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from etsim.algo.family_io import algorithm_traces, write_family, write_family_by_rank
from etsim.chakra import CollectiveType, Trace
from etsim.system.algorithms import RingAlgorithm

CORPUS = Path(os.environ.get("ETSIM_CORPUS") or Path(__file__).resolve().parents[3] / "shared" / "corpus")


def _ring(n: int) -> list:
    algo = RingAlgorithm()
    return algorithm_traces([algo.graph(CollectiveType.ALL_REDUCE, n, p) for p in range(n)])


def test_an_interrupted_writer_leaves_no_partial_family(tmp_path: Path) -> None:
    traces = _ring(8)

    def some_then_stop():
        yield from traces[:3]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_family(some_then_stop(), tmp_path / "ring")
    assert list(tmp_path.iterdir()) == []  # neither ranks 0-2 nor the staging directory
    paths = write_family(traces, tmp_path / "ring.et")
    assert [p.name for p in paths] == [f"ring.{r}.et" for r in range(8)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)


def test_a_forked_writer_that_fails_leaves_no_partial_family(tmp_path: Path) -> None:
    from etsim.errors import TraceError

    def make(rank: int) -> bytes:
        if rank == 5:
            import os

            os._exit(3)  # the worker dies
        return b""

    with pytest.raises(TraceError, match="died"):
        write_family_by_rank(make, 16, tmp_path / "x", jobs=2)
    assert list(tmp_path.iterdir()) == []


# -- families every consumer can run (issue 22, item 1) ------------------------------------------------------------

MiB = 1 << 20


def _msccl_xml(tmp_path: Path) -> Path:
    """The corpus's first shipped MSCCL-IR file, or (a plain clone) a ring all-reduce our exporter writes."""
    corpus = CORPUS / "msccl" / "shipped"
    if corpus.is_dir():
        return sorted(corpus.rglob("*.xml"))[0]
    from etsim.producers.msccl import graphs_to_msccl

    ring = RingAlgorithm()
    xml = tmp_path / "ring8.xml"
    graphs = [ring.graph(CollectiveType.ALL_REDUCE, 8, p) for p in range(8)]
    xml.write_text(graphs_to_msccl(graphs, collective=CollectiveType.ALL_REDUCE))
    return xml


def _families(tmp_path: Path) -> dict[str, Path]:
    """One family per writer: a native export, an MSCCL-IR conversion (from the corpus) and a TACOS synthesis."""
    from etsim.network import mesh
    from etsim.producers.msccl import convert_msccl, write_msccl_et
    from etsim.producers.tacos import synthesize, write_synthesis
    from etsim.system.algorithms import ALGORITHMS

    out = {}
    for name in ("ring", "direct", "halving_doubling"):
        algo = ALGORITHMS.get(name)()
        graphs = [algo.graph(CollectiveType.ALL_REDUCE, 8, r) for r in range(8)]
        write_family(algorithm_traces(graphs, metadata={"collective": "all_reduce"}, size=8 * MiB), tmp_path / name)
        out[name] = tmp_path / name
    xml = _msccl_xml(tmp_path)
    conversion = convert_msccl(xml)
    total = conversion.program.nchunksperloop
    write_msccl_et(conversion, tmp_path / "msccl", size=total * 4096)
    out["msccl"] = tmp_path / "msccl"
    syn = synthesize(mesh([2, 4], 50.0, 500.0), "all_reduce", size=8 * MiB, chunks_per_npu=2)
    write_synthesis(syn, tmp_path / "tacos", size=8 * MiB, jobs=1)
    out["tacos"] = tmp_path / "tacos"
    return out


def test_every_writer_gives_comm_size_beside_the_counts_and_a_tag_per_transfer(tmp_path: Path) -> None:
    from etsim.algo.family_graph import algo_graph_from_trace
    from etsim.chakra import load_workload
    from etsim.chakra.validate import validate_workload

    for name, prefix in _families(tmp_path).items():
        workload = load_workload(prefix)
        written = {a.string_val for a in workload.traces[0].metadata.attr if a.name == "comm_size_written_for"}
        (size,) = (int(w) for w in written)
        for trace in workload.traces:
            g = algo_graph_from_trace(trace)
            assert g.total_chunks and g.written_bytes is not None, name
            comm = [i for i, k in enumerate(trace.types) if k in (5, 6)]  # COMM_SEND, COMM_RECV
            assert all(trace.comm_size[i] == g.chunks[i] * size / g.total_chunks for i in comm), name
            pairs = [(trace.types[i], trace.comm_dst[i] or trace.comm_src[i], trace.comm_tag[i]) for i in comm]
            assert len(pairs) == len(set(pairs)), f"{name}: two transfers of one rank pair share a tag"
        assert [i for i in validate_workload(workload) if i.severity == "error"] == [], name
        assert not [i for i in validate_workload(workload) if "depend on nothing" in i.message], name


def test_sizes_beside_the_counts_change_nothing_for_etsim_and_are_what_an_as_written_run_sends(tmp_path: Path) -> None:
    from etsim.chakra import Workload
    from etsim.producers import collective_workload
    from etsim.simulation import simulate
    from etsim.system.config import SystemConfig

    ring = RingAlgorithm()
    graphs = [ring.graph(CollectiveType.ALL_REDUCE, 8, r) for r in range(8)]
    write_family(algorithm_traces(graphs, metadata={"collective": "all_reduce"}, size=8 * MiB), tmp_path / "sized")
    write_family(algorithm_traces(graphs, metadata={"collective": "all_reduce"}), tmp_path / "free")
    for size in (MiB, 32 * MiB):  # scaled to the call, whatever size the files were written for
        workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, size, 8))
        times = {
            algo: simulate(workload, system=SystemConfig(algorithms={"default": algo})).finish_ns
            for algo in ("ring", str(tmp_path / "sized"), str(tmp_path / "free"))
        }
        assert len(set(times.values())) == 1, times
    # Run as written (how a consumer that reads bytes runs them): the files' 8 MiB, whatever the call says.
    workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, MiB, 8))
    as_written = SystemConfig(algorithms={"default": str(tmp_path / "sized")}, families_as_written=True)
    eight = Workload(collective_workload(CollectiveType.ALL_REDUCE, 8 * MiB, 8))
    assert simulate(workload, system=as_written).finish_ns == simulate(eight).finish_ns
    from etsim.errors import ConfigError

    size_free = SystemConfig(algorithms={"default": str(tmp_path / "free")}, families_as_written=True)
    with pytest.raises(ConfigError, match=r"chunk counts .* only, .* write it with --size BYTES"):
        simulate(workload, system=size_free)


def test_a_size_that_does_not_split_or_a_comm_size_that_disagrees_is_an_error(tmp_path: Path) -> None:
    from etsim.algo.family_graph import algo_graph_from_trace
    from etsim.chakra import load_workload

    ring = RingAlgorithm()
    graphs = [ring.graph(CollectiveType.ALL_REDUCE, 8, p) for p in range(8)]
    with pytest.raises(ValueError, match=r"a buffer of 1001 bytes does not split into the algorithm.s 8 chunks"):
        algorithm_traces(graphs, size=1001)
    trace = algorithm_traces(graphs, size=8 * MiB)[0]
    first = next(i for i, k in enumerate(trace.types) if k == 5)
    for attr in trace.nodes[first].attr:
        if attr.name == "comm_size":
            attr.int64_val += 1
    write_family([Trace.from_nodes(trace.nodes, trace.metadata, rank=0)], tmp_path / "bad")
    with pytest.raises(ValueError, match=r"comm_size .* and msg_chunk_cnt .* describe a different buffer"):
        algo_graph_from_trace(load_workload(tmp_path / "bad").traces[0])


def test_receives_that_match_only_by_posting_order_are_flagged(tmp_path: Path) -> None:
    # A 2-rank all-gather of 2 chunks each, sent as two messages with one tag; the receives wait together.
    from etsim.algo.dataflow import IN_PLACE, Segment
    from etsim.algo.graph import AlgorithmBuilder
    from etsim.algo.verify import verify_graphs
    from etsim.chakra import load_workload
    from etsim.chakra.validate import validate_workload

    graphs = []
    for r in range(2):
        b = AlgorithmBuilder(total_chunks=4, placement=IN_PLACE)
        for k in range(2):
            b.send(1 - r, 1, name=f"s{k}", src=Segment("o", 2 * r + k, 1))
        for k in range(2):
            b.recv(1 - r, 1, name=f"r{k}", dst=Segment("o", 2 * (1 - r) + k, 1))
        graphs.append(b.graph)
    verdict = verify_graphs(graphs, CollectiveType.ALL_GATHER)
    assert verdict.ok is True and "receives 'r0' and 'r1' from rank 1 with tag 0 wait at once" in verdict.ambiguity
    # Traces of the same graphs, tags as they are (the writer would give each transfer its own):
    from etsim.algo.family_io import algo_graph_to_trace, written_tags

    assert written_tags(graphs[0], 0, 2) == [0, 1, 0, 1]
    traces = []
    for r, g in enumerate(graphs):
        t = algo_graph_to_trace(g, r, 2)
        for node in t.nodes:
            for attr in node.attr:
                if attr.name == "comm_tag":
                    attr.int32_val = 0  # as a foreign writer might: one tag per link
        traces.append(Trace.from_nodes(t.nodes, t.metadata, rank=r))
    write_family(traces, tmp_path / "amb")
    found = [i.message for i in validate_workload(load_workload(tmp_path / "amb")) if i.severity == "warning"]
    assert any("2 receives depend on nothing" in m and "give each transfer its own tag" in m for m in found), found
