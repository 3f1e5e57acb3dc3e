"""Each class of problem the validator must catch, built with the library's own writer."""

from __future__ import annotations

from etsim.chakra import CollectiveType, NodeType, TraceBuilder, Workload, validate_workload
from etsim.chakra.graph import Trace
from etsim.chakra.schema import et_def_pb2 as pb


def workload(*builders: TraceBuilder) -> Workload:
    return Workload([b.build(rank=r) for r, b in enumerate(builders)])


def errors(wl: Workload, **kw: bool) -> list[str]:
    return [i.message for i in validate_workload(wl, **kw) if i.severity == "error"]


def warnings(wl: Workload) -> list[str]:
    return [i.message for i in validate_workload(wl) if i.severity == "warning"]


def test_clean_workload_has_no_issues() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    c = a.comp(duration_micros=1)
    a.send(dst=1, size=64, tag=3, deps=[c])
    b.recv(src=0, size=64, tag=3)
    a.collective(CollectiveType.ALL_REDUCE, 128)
    b.collective(CollectiveType.ALL_REDUCE, 128)
    assert validate_workload(workload(a, b)) == []


def test_duplicate_ids() -> None:
    nodes = [pb.Node(id=4, type=pb.COMP_NODE), pb.Node(id=4, type=pb.COMP_NODE)]
    wl = Workload([Trace.from_nodes(nodes, rank=0)])
    assert any("node id 4 is defined more than once" in m for m in errors(wl))


def test_missing_data_and_ctrl_deps() -> None:
    b = TraceBuilder()
    b.comp(deps=[99])
    b.node(NodeType.COMP_NODE, "c", ctrl_deps=[98])
    msgs = errors(workload(b))
    assert any("rank 0: node 0" in m and "data dependency on node id 99" in m for m in msgs)
    assert any("node 1 (c)" in m and "control dependency on node id 98" in m for m in msgs)
    # With --ignore-ctrl-deps the dangling control dependency is only a warning.
    assert not any("98" in m for m in errors(workload(b), ignore_ctrl_deps=True))


def test_cycle_is_printed() -> None:
    nodes = [
        pb.Node(id=1, type=pb.COMP_NODE, data_deps=[3]),
        pb.Node(id=2, type=pb.COMP_NODE, data_deps=[1]),
        pb.Node(id=3, type=pb.COMP_NODE, data_deps=[2]),
        pb.Node(id=4, type=pb.COMP_NODE),
    ]
    msgs = errors(Workload([Trace.from_nodes(nodes, rank=0)]))
    cycle = [m for m in msgs if "dependency cycle" in m]
    assert len(cycle) == 1
    chain = cycle[0].split(": ")[-1].split(" -> ")
    assert sorted(chain[:-1]) == ["1", "2", "3"] and chain[0] == chain[-1]


def test_comm_node_marked_cpu_op() -> None:
    b = TraceBuilder()
    b.collective(CollectiveType.ALL_REDUCE, 8, is_cpu_op=True)
    assert any("is_cpu_op=true" in m for m in errors(workload(b)))


def test_send_recv_missing_fields_and_own_rank() -> None:
    b = TraceBuilder()
    b.node(NodeType.COMM_SEND_NODE, "s", attrs={"is_cpu_op": False, "comm_size": 4})
    b.node(NodeType.COMM_RECV_NODE, "r", attrs={"is_cpu_op": False, "comm_src": 0, "comm_tag": 1})
    b.send(dst=0, size=4, tag=0, comm_src=5)
    msgs = errors(workload(b))
    assert any("node 0 (s): send without comm_dst, comm_tag" in m for m in msgs)
    assert any("node 1 (r): receive without comm_size" in m for m in msgs)
    assert any("comm_src=5 on a send of rank 0" in m for m in msgs)


def test_unknown_comm_type_and_missing_size() -> None:
    b = TraceBuilder()
    b.collective(42, 8)
    b.node(NodeType.COMM_COLL_NODE, "x", attrs={"is_cpu_op": False})
    msgs = errors(workload(b))
    assert any("unknown comm_type 42" in m for m in msgs)
    assert any("node 1 (x): collective without a comm_type" in m for m in msgs)
    assert any("node 1 (x): collective without a comm_size" in m for m in msgs)


def test_non_positive_sizes_and_tags() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.send(dst=1, size=-5, tag=-1)
    b.recv(src=0, size=-5, tag=-1)
    a.collective(CollectiveType.ALL_GATHER, 0)
    b.collective(CollectiveType.ALL_GATHER, 0)
    wl = workload(a, b)
    msgs = errors(wl)
    assert any("negative comm_size -5" in m for m in msgs)
    assert any("negative comm_tag -1" in m for m in msgs)
    assert any("comm_size is 0" in m for m in warnings(wl))


def test_peer_outside_workload() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.send(dst=7, size=1, tag=0)
    assert any("comm_dst=7 is not a rank of this 2-rank workload" in m for m in errors(workload(a, b)))


def test_send_recv_counts_and_sizes_across_ranks() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.send(dst=1, size=10, tag=0)
    a.send(dst=1, size=10, tag=0)
    b.recv(src=0, size=10, tag=0)
    a.send(dst=1, size=10, tag=5)
    b.recv(src=0, size=12, tag=5)
    msgs = errors(workload(a, b))
    assert any("rank 0 -> rank 1 tag 0: 2 sends but 1 receives; first unmatched: rank 0: node 1" in m for m in msgs)
    assert any("sends 10 bytes but the matching rank 1: node 1" in m and "receives 12 bytes" in m for m in msgs)


def test_collective_sequences_differ_between_ranks() -> None:
    a, b, c = TraceBuilder(), TraceBuilder(), TraceBuilder()
    for t in (a, b, c):
        t.collective(CollectiveType.ALL_REDUCE, 100)
    a.collective(CollectiveType.ALL_GATHER, 10)
    b.collective(CollectiveType.REDUCE_SCATTER, 10)
    msgs = errors(workload(a, b, c))
    assert any("rank 1: node 1" in m and "collective #1 on all ranks is reduce_scatter of 10 bytes" in m for m in msgs)
    assert any("rank 2: issues 1 collectives on all ranks but rank 0 issues 2" in m for m in msgs)


def test_groups_are_checked_separately() -> None:
    ranks = [TraceBuilder() for _ in range(4)]
    for r, t in enumerate(ranks):
        t.collective(CollectiveType.ALL_REDUCE, 64 if r < 2 else 32, pg_name="1" if r < 2 else "2")
    assert errors(workload(*ranks)) == []
    ranks[3].collective(CollectiveType.ALL_REDUCE, 8, pg_name="2")
    assert any("group '2'" in m for m in errors(workload(*ranks)))


def test_wrong_member_is_a_warning_string_is_an_error() -> None:
    node = pb.Node(id=1, type=pb.COMM_COLL_NODE)
    node.attr.add(name="is_cpu_op").bool_val = False
    node.attr.add(name="comm_type").int64_val = 0
    node.attr.add(name="comm_size").uint64_val = 64
    other = pb.Node(id=2, type=pb.COMP_NODE)
    other.attr.add(name="num_ops").string_val = "many"
    wl = Workload([Trace.from_nodes([node, other], rank=0)])
    assert any("'comm_size' is written as uint64_val" in m for m in warnings(wl))
    assert any("node 2: attribute 'num_ops': expected an integer, found string_val" in m for m in errors(wl))


def test_corpus_generator_send_samples_are_not_runnable(corpus) -> None:  # type: ignore[no-untyped-def]
    from etsim.chakra import load_workload

    wl = load_workload(corpus / "chakra" / "generator_npus4" / "one_comm_send_node")
    msgs = errors(wl)
    assert len(msgs) == 4 and all("send without comm_dst, comm_tag, comm_size" in m for m in msgs)
    assert errors(load_workload(corpus / "chakra" / "generator_npus4" / "ALL_REDUCE")) == []


def test_validate_ignores_ctrl_deps_across_ranks_too() -> None:
    # A send sitting on a control-dependency cycle: with --ignore-ctrl-deps it is issued normally.
    a = [
        pb.Node(id=1, type=pb.COMP_NODE, ctrl_deps=[2]),
        pb.Node(id=2, type=pb.COMM_SEND_NODE, ctrl_deps=[1]),
    ]
    for key, value in (("comm_dst", 1), ("comm_tag", 0), ("comm_size", 8)):
        a[1].attr.add(name=key).int64_val = value
    r = TraceBuilder()
    r.recv(src=0, size=8, tag=0)
    wl = Workload([Trace.from_nodes(a, rank=0), r.build(rank=1)])
    errors = [i.message for i in validate_workload(wl, ignore_ctrl_deps=True) if i.severity == "error"]
    assert errors == []
    assert any("0 sends but 1 receives" in i.message for i in validate_workload(wl) if i.severity == "error")


def _two_collectives(order: str) -> Workload:
    """Two ranks, each with an all-reduce of 1 KiB and one of 2 KiB on the world group, ordered by *order*."""
    traces = []
    for r in range(2):
        b = TraceBuilder()
        a = b.comp("a", duration_micros=1 + r)
        c = b.comp("c", duration_micros=2 - r, deps=[a] if order == "chain" else [])
        first = b.collective(CollectiveType.ALL_REDUCE, 1024, deps=[a])
        if order == "dependency":
            b.collective(CollectiveType.ALL_REDUCE, 2048, deps=[c, first])
        elif order == "siblings":
            b.collective(CollectiveType.ALL_REDUCE, 2048, deps=[a])
        else:  # "free" (c independent of a) or "chain" (c after a: the first is always ready first)
            b.collective(CollectiveType.ALL_REDUCE, 2048, deps=[c])
        traces.append(b.build(rank=r))
    return Workload(traces)


def test_collectives_of_a_group_that_timing_alone_orders_are_warned_about() -> None:
    warnings = [i for i in validate_workload(_two_collectives("free")) if "no dependency orders" in i.message]
    assert len(warnings) == 2 and warnings[0].severity == "warning"
    assert "all_reduce of 2048 bytes" in warnings[0].message and "all_reduce of 1024 bytes" in warnings[0].message
    for order in ("dependency", "siblings", "chain"):
        assert not [i for i in validate_workload(_two_collectives(order)) if "no dependency orders" in i.message]


def test_a_collective_that_depends_on_its_predecessor_on_some_ranks_only_is_warned_about() -> None:
    """Rank 1's second all-reduce depends only on the first compute: it may go before its first one."""
    from etsim.chakra import CollectiveType, TraceBuilder, Workload
    from etsim.chakra.validate import validate_workload

    def traces(rewired: set[int]) -> Workload:
        out = []
        for rank in range(4):
            b = TraceBuilder(rank)
            start = b.comp("c0", duration_micros=1)
            slow = b.comp("c1", duration_micros=50, deps=[start])
            first = b.collective(CollectiveType.ALL_REDUCE, 1024, deps=[slow])
            b.collective(CollectiveType.ALL_REDUCE, 1024, deps=[start] if rank in rewired else [first])
            out.append(b.build(rank=rank))
        return Workload(out)

    issues = [i for i in validate_workload(traces({1})) if i.severity == "warning"]
    assert len(issues) == 1, issues
    assert "collective #1 of group '0' does not depend on #0 on ranks [1], though it does on ranks [0, 2, 3]" in str(
        issues[0]
    )
    assert not [i for i in validate_workload(traces(set())) if i.severity == "warning"]
    assert not [i for i in validate_workload(traces({0, 1, 2, 3})) if i.severity == "warning"]  # the same on all


def test_involved_dim_that_leaves_dimensions_out_or_is_not_a_bool_list_is_warned() -> None:
    # etsim runs a collective over its whole group; ASTRA-sim skips the dimensions marked false (a run 3x shorter
    # there), and stops on an involved_dim that is not a bool_list: neither was said.
    attrs = {"is_cpu_op": False, "comm_type": 0, "comm_size": 1024}
    b = TraceBuilder()
    b.node(NodeType.COMM_COLL_NODE, "ar", attrs={**attrs, "involved_dim": [True, False]})
    b.node(NodeType.COMM_COLL_NODE, "all", attrs={**attrs, "involved_dim": [True, True]})
    found = warnings(workload(b))
    assert [m for m in found if "involved_dim" in m] == [
        "rank 0: node 0 (ar): involved_dim leaves dimensions out, which etsim does not model: the collective runs "
        "over its whole group (a simulator that reads it runs the dimensions marked true)"
    ]
    trace = b.build(rank=0)
    trace.nodes[1].attr[-1].CopyFrom(pb.AttributeProto(name="involved_dim", int64_list=pb.Int64List(values=[1, 1])))
    found = [i.message for i in validate_workload(Workload([trace])) if i.severity == "warning"]
    wrong = "node 1 (all): involved_dim is written as int64_list: its readers take a bool_list (one stops)"
    assert any(m.endswith(wrong) for m in found)


def test_a_run_warns_of_an_involved_dim_it_does_not_model(tmp_path) -> None:
    """Only `etsim validate` said it: a run of such a trace (read from its files, raw nodes kept or not) ran the
    collective over every dimension in silence. The run now says so once, naming the first node."""
    import pytest

    from etsim.chakra import load_workload, write_workload
    from etsim.errors import EtsimWarning
    from etsim.simulation import simulate

    attrs = {"is_cpu_op": False, "comm_type": 0, "comm_size": 1024}
    traces = []
    for rank in range(2):
        b = TraceBuilder()
        b.node(NodeType.COMM_COLL_NODE, "ar", attrs={**attrs, "involved_dim": [True, False]})
        b.node(NodeType.COMM_COLL_NODE, "ar2", attrs={**attrs, "involved_dim": [False, True]}, deps=[0])
        traces.append(b.build(rank=rank))
    write_workload(traces, tmp_path / "w")
    for keep_raw in (True, False):
        with pytest.warns(EtsimWarning, match=r"rank 0: node 0 \(ar\) \(and 3 more collectives\): involved_dim leaves"):
            simulate(load_workload(tmp_path / "w", keep_raw=keep_raw))
    write_workload([TraceBuilder().build(rank=r) for r in range(2)], tmp_path / "plain")
    simulate(tmp_path / "plain")  # (none: no warning, as the suite turns warnings into errors)


def test_an_attribute_given_twice_is_warned() -> None:
    # comm_size 1024 then 4096: etsim (and the reference feeder) read the first, the old mlcommons reader the last.
    b = TraceBuilder()
    b.collective(CollectiveType.ALL_REDUCE, 1024)
    trace = b.build(rank=0)
    trace.nodes[0].attr.append(pb.AttributeProto(name="comm_size", int64_val=4096))
    found = [i.message for i in validate_workload(Workload([trace])) if i.severity == "warning"]
    assert any(m.endswith("attribute 'comm_size' is given more than once: readers differ on which one counts")
               for m in found)  # fmt: skip
