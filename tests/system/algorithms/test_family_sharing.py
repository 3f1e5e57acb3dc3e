"""Ingested families whose ranks run one graph up to a relabelling of peers share that graph, and run in bulk."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.algo.graph import AlgoGraph
from etsim.chakra.graph import CollectiveType, Workload
from etsim.cli import main
from etsim.producers.workloads import collective_workload
from etsim.simulation import simulate
from etsim.system.algorithms.family import ChakraAlgorithm
from etsim.system.config import SystemConfig

AR = CollectiveType.ALL_REDUCE
REPO = Path(__file__).resolve().parents[3]


def _family(tmp_path: Path, kind: str, n: int) -> str:
    prefix = tmp_path / kind
    if kind == "msccl_ring":
        xml = REPO / "algorithms" / f"msccl_ring_allreduce_{n}npus.xml"
        assert main(["convert", "msccl", str(xml), "-o", str(prefix)]) == 0
    else:
        assert main(["algo", "export", kind, "--collective", "all_reduce", "--npus", str(n), "-o", str(prefix)]) == 0
    return str(prefix)


@pytest.mark.parametrize("kind", ["ring", "msccl_ring"])
def test_symmetric_families_share_one_relative_graph_and_run_in_bulk(kind: str, tmp_path: Path) -> None:
    n = 64  # large enough for the fast path (group size × graph nodes >= MIN_WORK)
    spec = _family(tmp_path, kind, n)
    algo = ChakraAlgorithm(spec)
    graphs = {id(algo.graph(AR, n, p)) for p in range(n)}
    assert len(graphs) == 1 and algo.graph(AR, n, 0).relative_peers
    # The shared graph still computes the all-reduce (its data annotations were made relative where they move):
    # simulate verifies it before running it, and would refuse it otherwise.
    workload = Workload(collective_workload(AR, 64 << 20, n))
    topology = str(REPO / "topologies" / "ring64.yaml")
    fast = simulate(workload, topology=topology, system=SystemConfig(algorithms={"default": spec}))
    slow = simulate(workload, topology=topology, system=SystemConfig(algorithms={"default": spec}, fast_path=False))
    assert fast.sim["bulk_parts"] == n and slow.sim["bulk_parts"] == 0
    assert fast.finish_ns == slow.finish_ns
    assert [r.finish_ns for r in fast.ranks] == [r.finish_ns for r in slow.ranks]
    native = simulate(workload, topology=topology, system=SystemConfig(algorithms={"default": "ring"}))
    assert fast.finish_ns == native.finish_ns  # the same ring, written once and read back


@pytest.mark.parametrize("kind", ["tree", "halving_doubling"])
def test_families_whose_ranks_differ_keep_a_graph_per_rank(kind: str, tmp_path: Path) -> None:
    algo = ChakraAlgorithm(_family(tmp_path, kind, 8))
    graphs = [algo.graph(AR, 8, p) for p in range(8)]
    assert len({id(g) for g in graphs}) == 8 and not graphs[0].relative_peers


def _fields(graph: object) -> dict[str, object]:
    import dataclasses

    return {f.name: getattr(graph, f.name) for f in dataclasses.fields(graph)}  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["ring", "tree"])
def test_a_family_read_by_several_processes_is_the_family_read_by_one(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from etsim import workers
    from etsim.system.algorithms import family

    spec = _family(tmp_path, kind, 16)
    alone = ChakraAlgorithm(spec)
    calls = []
    monkeypatch.setattr(family, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(workers, "fork_jobs", lambda cap=None: 2)
    real = family._read_in_workers
    monkeypatch.setattr(family, "_read_in_workers", lambda *a: calls.append(len(a[0])) or real(*a))
    together = ChakraAlgorithm(spec)
    assert calls == [2]
    for p in range(16):
        assert _fields(together.graph(AR, 16, p)) == _fields(alone.graph(AR, 16, p))
    assert isinstance(together._shared, type(alone._shared))


def test_a_rank_that_breaks_the_sharing_late_leaves_every_rank_its_own_graph(tmp_path: Path) -> None:
    from etsim.algo.family_graph import algo_graph_from_trace
    from etsim.chakra.io import read_trace, write_trace

    spec = _family(tmp_path, "ring", 8)
    # Rank 5's first send and the receive of rank 6 that meets it take another tag: still a correct ring, but
    # ranks 5 and 6 are no longer rank 0's graph relabelled.
    late, after = read_trace(f"{spec}.5.et", rank=5), read_trace(f"{spec}.6.et", rank=6)
    tag = late.comm_tag[0]
    (recv,) = [i for i in range(after.num_nodes) if after.comm_src[i] == 5 and after.comm_tag[i] == tag]
    for node in (late.nodes[0], after.nodes[recv]):
        for a in node.attr:
            if a.name == "comm_tag":
                a.int32_val += 1000
    write_trace(late, f"{spec}.5.et")
    write_trace(after, f"{spec}.6.et")
    algo = ChakraAlgorithm(spec)
    graphs = [algo.graph(AR, 8, p) for p in range(8)]
    assert len({id(g) for g in graphs}) == 8
    for p, g in enumerate(graphs):  # ranks 2-4 matched while they were read, and are read again
        assert _fields(g) == _fields(algo_graph_from_trace(read_trace(f"{spec}.{p}.et", rank=p)))
    assert algo.verify(AR, 8).ok


def test_problems_in_a_family_are_named_when_made_or_when_a_graph_is_asked_for(tmp_path: Path) -> None:
    from etsim.chakra.io import read_trace, write_trace
    from etsim.errors import ConfigError

    spec = _family(tmp_path, "ring", 8)
    broken = read_trace(f"{spec}.6.et", rank=6)
    for i, a in enumerate(broken.nodes[0].attr):
        if a.name == "comm_dst":
            del broken.nodes[0].attr[i]
            break
    write_trace(broken, f"{spec}.6.et")
    algo = ChakraAlgorithm(spec)
    algo.graph(AR, 8, 1)  # the other ranks are there
    with pytest.raises(ConfigError, match=r"ring\.6\.et, rank 6: node 0 \(rs0_send\): send without a peer"):
        algo.graph(AR, 8, 6)
    workload = read_trace(f"{spec}.3.et", rank=3)
    workload.nodes[2].type = 7
    write_trace(workload, f"{spec}.3.et")
    with pytest.raises(ConfigError, match=r"is a workload, not an algorithm family: .*ring\.3\.et, rank 3: node 2"):
        ChakraAlgorithm(spec)


@pytest.mark.parametrize("kind", ["ring", "msccl_ring"])
def test_ranks_of_a_shared_family_are_matched_on_their_columns_as_their_graphs_would_be(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from etsim.algo import family_read
    from etsim.system.algorithms import family

    spec = _family(tmp_path, kind, 16)
    monkeypatch.setattr(family, "_shared_encoder", lambda *args: None)  # (not on their bytes: the test after this)
    same = []
    real = family_read._read_rank

    def spy(*args):
        read = real(*args)
        same.append(read.same)
        return read

    monkeypatch.setattr(family_read, "_read_rank", spy)
    by_columns = ChakraAlgorithm(spec)
    assert same == [False, False] + [True] * 14  # ranks 0 and 1 decide; the others match on their columns
    monkeypatch.setattr(family._SharedColumns, "__call__", lambda *args: False)
    by_graphs = ChakraAlgorithm(spec)
    assert isinstance(by_columns._shared, AlgoGraph) and isinstance(by_graphs._shared, AlgoGraph)
    assert _fields(by_columns._shared) == _fields(by_graphs._shared)


def test_a_rank_addressing_past_the_buffer_is_not_read_as_a_relative_chunk_inside_it(tmp_path: Path) -> None:
    """Rank 1 receives into output chunks 4-5 of a 4-chunk output: made relative, that would wrap to chunks 0-1
    and verify as correct (found by review). The family keeps its ranks' graphs, and the verdict names chunk 4."""
    from etsim.algo.dataflow import OUT_OF_PLACE, seg
    from etsim.algo.family_io import algo_graph_to_trace
    from etsim.algo.graph import AlgorithmBuilder
    from etsim.chakra.io import write_trace

    n, total = 2, 4
    for r in range(n):
        b = AlgorithmBuilder(total_chunks=total, placement=OUT_OF_PLACE)
        b.copy(2, name="own", src=seg("i", 0, 2), dst=seg("o", 2 * r, 2))
        b.send((r + 1) % n, 2, 0, name="s", src=seg("i", 0, 2))
        b.recv((r - 1) % n, 2, 0, name="r", dst=seg("o", 2 * r + 2, 2))
        trace = algo_graph_to_trace(b.build(), r, n)
        trace.metadata.attr.add(name="collective", string_val="all_gather")
        write_trace(trace, tmp_path / f"wrap.{r}.et")
    algo = ChakraAlgorithm(str(tmp_path / "wrap"))
    assert algo._shared is False
    verdict = algo.verify(CollectiveType.ALL_GATHER, n)
    assert verdict.ok is False and "addresses output chunk 4, outside the 4-chunk output" in verdict.message


def _read_without(monkeypatch: pytest.MonkeyPatch, spec: str, *, bytes_: bool, columns: bool) -> ChakraAlgorithm:
    from etsim.system.algorithms import family

    with monkeypatch.context() as m:
        if not bytes_:
            m.setattr(family, "_shared_encoder", lambda *args: None)
        if not columns:
            m.setattr(family._SharedColumns, "__call__", lambda *args: False)
        return ChakraAlgorithm(spec)


def test_ranks_equal_to_the_shared_graph_encoded_for_them_are_matched_on_their_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from etsim.algo import family_read

    spec = _family(tmp_path, "ring", 16)
    built = []
    real = family_read._read_rank
    monkeypatch.setattr(family_read, "_read_rank", lambda *args: built.append(args[1]) or real(*args))
    by_bytes = ChakraAlgorithm(spec)
    assert built == [0, 1]  # ranks 2-15 were never decoded: their files are the shared graph encoded for them
    slow = _read_without(monkeypatch, spec, bytes_=False, columns=False)
    assert isinstance(by_bytes._shared, AlgoGraph) and isinstance(slow._shared, AlgoGraph)
    assert _fields(by_bytes._shared) == _fields(slow._shared)


def test_a_run_that_wraps_at_some_ranks_is_never_matched_on_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative run of two chunks that stays within the buffer at rank 0 and wraps at rank 1 is never compared as
    bytes; the family is read as the ordinary path reads it."""
    from etsim.algo.dataflow import OUT_OF_PLACE, seg
    from etsim.algo.family_encode import RankEncoder
    from etsim.algo.family_io import algorithm_traces, write_family
    from etsim.algo.graph import AlgorithmBuilder

    n, total = 4, 8
    b = AlgorithmBuilder(total_chunks=total, relative_peers=True, placement=OUT_OF_PLACE)
    b.send(1, 2, 0, name="s", src=seg("i", 0, 2))
    b.recv(-1, 2, 0, name="r", dst=seg("o", 5, 2, rel=True))  # chunks 5-6 at rank 0, 7-8 (wraps) at rank 1
    graph = b.build()
    encoder = RankEncoder(graph, n)
    assert encoder.encode_runs(0) is not None and encoder.encode_runs(1) is None
    write_family(algorithm_traces([graph] * n, metadata={"collective": "all_gather"}), tmp_path / "wrap")
    spec = str(tmp_path / "wrap")
    fast = ChakraAlgorithm(spec)
    slow = _read_without(monkeypatch, spec, bytes_=False, columns=False)
    assert type(fast._shared) is type(slow._shared)
    for p in range(n):
        assert _fields(fast.graph(CollectiveType.ALL_GATHER, n, p)) == _fields(
            slow.graph(CollectiveType.ALL_GATHER, n, p)
        )
