"""chakra_jsonizer-identical JSON, inspect summaries and graph drawings."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx

from etsim.chakra import CollectiveType, TraceBuilder, read_trace, write_trace
from etsim.chakra.jsonize import jsonize
from etsim.chakra.summary import critical_path_nodes, summarize_trace, write_graph


def test_jsonize_matches_chakra_jsonizer(corpus: Path) -> None:
    dumps = sorted((corpus / "chakra" / "generator_npus4" / "json").glob("*.json"))
    assert dumps
    for dump in dumps:
        et = dump.parent.parent / f"{dump.stem}.et"
        assert jsonize(et) == dump.read_text(), dump


def test_jsonize_array_is_valid_json(corpus: Path) -> None:
    path = corpus / "chakra" / "generator_npus4" / "one_metadata_node_all_types.0.et"
    objects = json.loads(jsonize(path, array=True))
    assert objects[0] == {"version": "1.0.0"}
    assert len(objects) == 2 and len(objects[1]["attr"]) == 30


def test_summary_counts_and_critical_path(tmp_path: Path) -> None:
    b = TraceBuilder()
    a = b.comp("a", duration_micros=4)
    c1 = b.collective(CollectiveType.ALL_REDUCE, 100, deps=[a])
    b.collective(CollectiveType.ALL_REDUCE, 100, deps=[c1])
    b.collective(CollectiveType.ALL_GATHER, 7)
    s = b.send(dst=1, size=11, deps=[a])
    b.comp("z", duration_micros=6, deps=[s])
    summary = summarize_trace(b.build(rank=0))
    assert summary.nodes == 6
    assert summary.nodes_by_type == {"COMM_COLL_NODE": 3, "COMM_SEND_NODE": 1, "COMP_NODE": 2}
    assert summary.collectives == {"all_gather": {7: 1}, "all_reduce": {100: 2}}
    assert summary.total_bytes == 207 + 11
    assert summary.compute_micros == 10
    assert summary.critical_path_nodes == 3


def test_critical_path_cycle_is_reported(tmp_path: Path) -> None:
    from etsim.chakra.graph import Trace
    from etsim.chakra.schema import et_def_pb2 as pb

    nodes = [pb.Node(id=1, type=4, data_deps=[2]), pb.Node(id=2, type=4, data_deps=[1])]
    assert critical_path_nodes(Trace.from_nodes(nodes)) == -1


def test_visualize_dot_and_graphml(tmp_path: Path) -> None:
    b = TraceBuilder()
    a = b.comp('say "hi"', duration_micros=1)
    b.send(dst=1, size=3, deps=[a])
    trace = read_trace(write_trace(b.build(), tmp_path / "t.et"))
    dot = write_graph(trace, tmp_path / "g.dot").read_text()
    assert dot.startswith("digraph chakra {") and "0 -> 1;" in dot and '\\"hi\\"' in dot
    g = nx.read_graphml(write_graph(trace, tmp_path / "g.graphml"))
    assert list(g.edges()) == [("0", "1")] and g.nodes["1"]["comm_size"] == 3
