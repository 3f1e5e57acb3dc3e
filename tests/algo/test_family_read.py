"""A family rank read by the columnar path is the graph the ordinary reader makes; odd files take the ordinary path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.family_io import algorithm_traces, write_family
from etsim.algo.family_read import read_rank
from etsim.algo.graph import AlgoGraph
from etsim.chakra import CollectiveType
from etsim.chakra.attributes import make_attribute
from etsim.chakra.io import read_trace, resolve_family, write_trace
from etsim.system.algorithms import ALGORITHMS

C = CollectiveType
MiB = 1 << 20


def _fields(graph: AlgoGraph | None) -> dict[str, object] | None:
    """Every field of *graph* (graphs compare by identity)."""
    return None if graph is None else {f.name: getattr(graph, f.name) for f in dataclasses.fields(graph)}


def _ordinary(path: Path, rank: int) -> object:
    try:
        return _fields(algo_graph_from_trace(read_trace(path, rank=rank)))
    except ValueError as exc:
        return str(exc)


def _same_as_ordinary(prefix: Path, *, fast: bool = True) -> int:
    paths = resolve_family(prefix)
    for rank, path in enumerate(paths):
        read = read_rank(path, rank, len(paths))
        assert read.fast is fast, path
        assert (_fields(read.graph) if read.graph is not None else read.problem) == _ordinary(path, rank), path
    return len(paths)


NATIVES = [
    (name, coll)
    for name in ("ring", "direct", "halving_doubling", "tree")
    for coll in (C.ALL_REDUCE, C.ALL_GATHER, C.REDUCE_SCATTER, C.ALL_TO_ALL)
    if ALGORITHMS.get(name)().supports(coll, 8) is None
]


@pytest.mark.parametrize(("name", "coll"), NATIVES)
@pytest.mark.parametrize("size", [None, 8 * MiB])
def test_native_exports_read_fast_into_the_ordinary_graphs(
    name: str, coll: C, size: int | None, tmp_path: Path
) -> None:
    algo = ALGORITHMS.get(name)()
    graphs = [algo.graph(coll, 8, r) for r in range(8)]
    write_family(algorithm_traces(graphs, metadata={"collective": coll.name.lower()}, size=size), tmp_path / "f")
    assert _same_as_ordinary(tmp_path / "f") == 8


def test_msccl_conversions_of_the_corpus_and_tacos_read_fast_into_the_ordinary_graphs(
    tmp_path: Path, corpus: Path
) -> None:
    from etsim.network import mesh
    from etsim.producers.msccl import convert_msccl, write_msccl_et
    from etsim.producers.tacos import synthesize, write_synthesis

    converted = 0
    for xml in sorted((corpus / "msccl").rglob("*.xml")):
        try:
            conversion = convert_msccl(xml)
        except Exception:
            continue
        prefix = tmp_path / f"m{converted}"
        write_msccl_et(conversion, prefix, size=conversion.program.nchunksperloop * 4096 if converted % 2 else None)
        _same_as_ordinary(prefix)
        converted += 1
    assert converted >= 10
    syn = synthesize(mesh([2, 4], 50.0, 500.0), "all_gather", size=8 * MiB, chunks_per_npu=2)
    write_synthesis(syn, tmp_path / "tacos", size=8 * MiB, jobs=1)
    assert _same_as_ordinary(tmp_path / "tacos") == 8


def _ring_traces(n: int = 4) -> list:
    algo = ALGORITHMS.get("ring")()
    return algorithm_traces([algo.graph(C.ALL_REDUCE, n, r) for r in range(n)], metadata={"collective": "all_reduce"})


def _edit(trace, pos: int, edit) -> None:
    edit(trace.nodes[pos])


@pytest.mark.parametrize(
    "change",
    [
        "peer as int64",  # a member other than the one etsim writes: the ordinary reader's conversion
        "count twice",  # an attribute the graph reads, written twice on one node
        "ids not positions",
        "later dependency",
        "collective node",
        "no peer",
        "bad annotation",
    ],
)
def test_files_unlike_the_writers_take_the_ordinary_path_with_its_graph_or_its_message(
    change: str, tmp_path: Path
) -> None:
    traces = _ring_traces()
    node = traces[1].nodes[0]  # a send
    if change == "peer as int64":
        for a in node.attr:
            if a.name == "comm_dst":
                a.ClearField("int32_val")
                a.int64_val = 2
    elif change == "count twice":
        node.attr.append(make_attribute("msg_chunk_cnt", 1, member="int64_val"))
    elif change == "ids not positions":
        for i, n in enumerate(traces[1].nodes):
            n.id = 10 + i
            n.data_deps[:] = [d + 10 for d in n.data_deps]
            n.ctrl_deps[:] = [d + 10 for d in n.ctrl_deps]
    elif change == "later dependency":
        node.data_deps.append(1)
    elif change == "collective node":
        node.type = 7
    elif change == "no peer":
        for i, a in enumerate(node.attr):
            if a.name == "comm_dst":
                del node.attr[i]
                break
    elif change == "bad annotation":
        for a in node.attr:
            if a.name == "data_op":
                a.string_val = "store"
    for rank, trace in enumerate(traces):
        write_trace(trace, tmp_path / f"f.{rank}.et")
    path = tmp_path / "f.1.et"
    read = read_rank(path, 1, 4)
    assert not read.fast
    if change == "collective node":
        assert read.kind == "workload" and "COMM_COLL" in (read.problem or "")
        return
    expected = _ordinary(path, 1)
    assert (_fields(read.graph) if read.graph is not None else read.problem) == expected
    if change in ("no peer", "bad annotation"):
        assert read.kind == "graph" and isinstance(expected, str)
    # The other ranks, as written, still take the columnar path.
    assert read_rank(tmp_path / "f.2.et", 2, 4).fast


def test_a_peer_outside_the_family_is_named(tmp_path: Path) -> None:
    traces = _ring_traces()
    write_family(traces, tmp_path / "f")
    read = read_rank(tmp_path / "f.1.et", 1, 2)  # read as if the family had two ranks
    assert read.graph is None and read.kind == "graph"
    assert "peer 2 is outside the 2-rank group" in (read.problem or "")


def test_a_read_travels_between_processes_whole(tmp_path: Path) -> None:
    """Pickled (as reader processes send them), reads come back field for field, names holding NUL included."""
    import pickle

    from etsim.algo.family_read import RankRead

    algo = ALGORITHMS.get("halving_doubling")()
    write_family(algorithm_traces([algo.graph(C.ALL_GATHER, 8, r) for r in range(8)]), tmp_path / "hd")
    reads = [read_rank(path, r, 8) for r, path in enumerate(resolve_family(tmp_path / "hd"))]
    odd = dataclasses.replace(reads[0].graph, names=["a\0b", "", "c", *reads[0].graph.names[3:]])  # type: ignore[arg-type]
    reads += [RankRead(odd, "any"), RankRead(AlgoGraph()), RankRead(None, problem="why", kind="graph")]
    for read in reads:
        back = pickle.loads(pickle.dumps(read))
        assert _fields(back.graph) == _fields(read.graph)
        assert (back.recorded, back.problem, back.kind, back.fast, back.same) == (
            read.recorded, read.problem, read.kind, read.fast, read.same
        )  # fmt: skip
    assert pickle.loads(pickle.dumps(reads[0])).graph.names[:2] == reads[0].graph.names[:2]  # type: ignore[union-attr]


def test_the_tables_of_distinct_attributes_and_annotations_start_again_when_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import etsim.algo.family_graph as family_graph
    import etsim.algo.family_read as family_read
    from etsim.network import mesh
    from etsim.producers.tacos import synthesize, write_synthesis

    monkeypatch.setattr(family_graph._DATA_BY_KEY, "size", 5)
    monkeypatch.setattr(family_read, "_DECODED_MAX", 40)
    family_graph._DATA_BY_KEY.clear()
    family_read._CODES.reset()  # (tests before this one may have left it nearly full: count from empty)
    resets = []
    real_reset = family_read._CODES.reset
    monkeypatch.setattr(family_read._CODES, "reset", lambda: resets.append(1) or real_reset())
    syn = synthesize(mesh([2, 3], 50.0, 500.0), "all_gather", size=6 * MiB, chunks_per_npu=2)
    write_synthesis(syn, tmp_path / "tacos", size=6 * MiB, jobs=1)
    assert _same_as_ordinary(tmp_path / "tacos") == 6
    assert len(family_graph._DATA_BY_KEY) <= 5
    assert len(resets) > 1
    family_graph._DATA_BY_KEY.clear()
