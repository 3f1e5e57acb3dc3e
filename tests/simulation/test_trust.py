"""Every number etsim prints can be trusted: each way found to get a plausible, impossible result is closed.

One test (or a few) per item of the "no silent wrong answers" list; each would fail on the code that
had the problem.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from etsim.algo.family_io import algorithm_traces, write_family
from etsim.chakra import CollectiveType, TraceBuilder, Workload, load_workload, make_attribute, write_workload
from etsim.errors import ConfigError, DeadlockError, EtsimWarning, SimulationError
from etsim.network import ring, switch
from etsim.producers import collective_workload, data_parallel_workload
from etsim.simulation import DEFAULT_MODEL, simulate
from etsim.system.algorithms import ALGORITHMS
from etsim.system.config import SystemConfig

AR, AG = CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER
B, L = 50.0, 500.0
MiB = 1 << 20


def wl(*builders: TraceBuilder) -> Workload:
    return Workload([b.build(rank=r) for r, b in enumerate(builders)])


# -- 1. contention --------------------------------------------------------------------------------------


def test_the_default_model_is_congestion_aware_and_respects_the_bandwidth_bound(repo: Path) -> None:
    workload = load_workload(repo / "workloads" / "allreduce_8npus_1MiB")
    result = simulate(workload, system=SystemConfig(chunks=4))
    assert result.network["model"] == DEFAULT_MODEL == "flow"
    p, t = 8, MiB / 8 / B
    bound = 2 * (p - 1) * t  # every link carries 2(p-1)/p of the buffer
    assert result.finish_ns >= bound
    # The 4 chunks share each link fairly and move in step: each step takes L + 4·(t/4), as unchunked.
    assert result.finish_ns == pytest.approx(2 * (p - 1) * (L + t))  # 43.7 us
    assert result.warnings == []
    # FIFO links serve one chunk after another, so the link never idles: the bound plus one latency (37.2 us).
    assert simulate(workload, model="link", system=SystemConfig(chunks=4)).finish_ns == pytest.approx(bound + L)


def test_an_unaware_run_below_the_bandwidth_bound_names_the_link(repo: Path) -> None:
    workload = load_workload(repo / "workloads" / "allreduce_8npus_1MiB")
    with pytest.warns(EtsimWarning) as caught:
        result = simulate(workload, model="analytical", system=SystemConfig(chunks=4))
    assert result.finish_ns == pytest.approx(16175.04)
    link, bound = result.warnings
    assert [str(w.message) for w in caught] == result.warnings
    assert "link 0 (0 -> 1) carried 1.75 MiB, which takes 36.7002 us" in link and "use --model flow" in link
    # Per collective: the group must push 2·7·(1 MiB) out of 8 NPUs of 2 × 50 GB/s links.
    assert "all_reduce of 1 MiB over 8 ranks 0..7 took 16.175 us" in bound
    assert "the group must send 14 MiB through 800 GB/s of outgoing links, which takes 18.3501 us" in bound


def test_a_collective_below_its_bound_is_flagged_even_when_compute_hides_it(tmp_path: Path) -> None:
    # Issue 20 item 1: compute elsewhere makes the run long, so no link is busy longer than the whole run;
    # each 16 MiB all-reduce still took far less than its bytes need.
    traces = data_parallel_workload(8, layers=4, grad_bytes=16 * MiB, fwd_micros=600, bwd_micros=600, iterations=2)
    with pytest.warns(EtsimWarning) as caught:
        simulate(Workload(traces), topology=ring(8, B, L), model="analytical", system=SystemConfig(chunks=4))
    (text,) = [str(w.message) for w in caught]
    assert text.startswith("8 collective(s) finished faster than their bytes can cross the links")
    assert "which takes 293.601 us" in text and "'analytical' ignores contention" in text
    aware = simulate(Workload(traces), topology=ring(8, B, L), system=SystemConfig(chunks=4))
    assert aware.warnings == []


def test_direct_on_a_switch_under_the_unaware_model_is_flagged() -> None:
    workload = Workload(collective_workload(AR, 64 * MiB, 64))
    topo = switch(64, B, L)
    system = SystemConfig(algorithms={"default": "direct"})
    with pytest.warns(EtsimWarning, match="ignores contention"):
        unaware = simulate(workload, topology=topo, model="analytical", system=system)
    aware = simulate(workload, topology=topo, system=system)
    busiest = max(link["busy_ns"] for link in aware.links)
    assert unaware.finish_ns < busiest / 50 and aware.finish_ns >= busiest
    assert aware.warnings == []


def test_msccl_with_many_channels_on_one_link_is_no_longer_too_fast(corpus: Path) -> None:
    # 4 rings x 8 channels: 32 channels share each ring link; the unaware model gives each the full bandwidth.
    xml = corpus / "msccl" / "shipped" / "msccl-scheduler" / "ndv4" / "r48ll128.xml"
    workload = Workload(collective_workload(AR, 16 * MiB, 8))  # inside the file's minBytes/maxBytes
    system = SystemConfig(algorithms={"default": str(xml)})
    with pytest.warns(EtsimWarning) as caught:
        unaware = simulate(workload, topology=ring(8, B, L), model="analytical", system=system)
    assert "link 0 (0 -> 1) carried 28 MiB, which takes 587.203 us" in str(caught[0].message)
    assert "the group must send 224 MiB through 800 GB/s of outgoing links" in str(caught[1].message)
    aware = simulate(workload, topology=ring(8, B, L), system=system)
    assert aware.finish_ns > 7 * unaware.finish_ns
    assert aware.finish_ns >= max(link["busy_ns"] for link in aware.links)
    assert aware.warnings == []


# -- 2. zero-byte collectives synchronise -----------------------------------------------------------------


def test_a_zero_byte_barrier_waits_for_every_rank() -> None:
    builders = []
    for r in range(4):
        b = TraceBuilder()
        work = b.comp(duration_micros=10 * r)  # rank 3 reaches the barrier at 30 us
        b.collective(CollectiveType.BARRIER, 0, deps=[work])
        builders.append(b)
    result = simulate(wl(*builders), topology=ring(4, B, L))
    # ring barrier: p-1 zero-byte token steps after the last rank arrives
    assert {r.finish_ns for r in result.ranks} == {30_000 + 3 * L}


def test_a_zero_byte_all_reduce_still_costs_its_latency_terms() -> None:
    result = simulate(Workload(collective_workload(AR, 0, 8)), topology=ring(8, B, L))
    assert result.finish_ns == 2 * 7 * L
    assert result.network["messages"] == 8 * 14


def test_a_broadcast_root_leaves_only_when_every_member_has_issued() -> None:
    builders = []
    for r in range(3):
        b = TraceBuilder()
        work = b.comp(duration_micros=0 if r == 0 else 50)
        b.collective(CollectiveType.BROADCAST, 1000, deps=[work])
        builders.append(b)
    result = simulate(wl(*builders), topology=ring(3, B, L), system=SystemConfig(algorithms={"default": "direct"}))
    assert result.ranks[0].finish_ns >= 50_000


# -- 3. an algorithm's collective is checked ---------------------------------------------------------------


def _export(tmp_path: Path, name: str, collective: CollectiveType, p: int, *, record: bool = True) -> str:
    algo = ALGORITHMS.get(name)()
    graphs = [algo.graph(collective, p, r) for r in range(p)]
    metadata = {"collective": collective.name.lower()} if record else {}
    write_family(algorithm_traces(graphs, metadata=metadata), tmp_path / name)
    return str(tmp_path / name)


def test_an_all_gather_family_does_not_run_as_an_all_reduce(tmp_path: Path) -> None:
    family = _export(tmp_path, "ring", AG, 8)
    workload = Workload(collective_workload(AR, MiB, 8))
    with pytest.raises(ConfigError, match=r"implements all_gather \(its metadata says so\), not all_reduce"):
        simulate(workload, system=SystemConfig(algorithms={"all_reduce": family}))
    # as a bare default it serves only what it implements, and says who served the rest
    with pytest.warns(EtsimWarning, match=r"does not implement all_reduce; 'ring' served it"):
        simulate(workload, system=SystemConfig(algorithms={"default": family}))


def test_an_msccl_xml_runs_only_for_its_coll(corpus: Path) -> None:
    xml = corpus / "msccl" / "generated" / "allgather_recdbl_n8_i1.xml"
    with pytest.raises(ConfigError, match="implements allgather, not all_reduce"):
        simulate(Workload(collective_workload(AR, MiB, 8)), system=SystemConfig(algorithms={"all_reduce": str(xml)}))


def test_a_family_that_records_no_collective_runs_with_one_warning(tmp_path: Path) -> None:
    family = _export(tmp_path, "ring", AR, 8, record=False)
    workload = Workload(collective_workload(AR, MiB, 8, count=3))
    with pytest.warns(EtsimWarning, match="records no collective type") as caught:
        simulate(workload, system=SystemConfig(algorithms={"default": family}))
    assert sum("records no collective" in str(w.message) for w in caught) == 1


def test_a_size_outside_an_msccl_window_is_said(corpus: Path) -> None:
    xml = corpus / "msccl" / "shipped" / "msccl-scheduler" / "ndv4" / "a2a2ll.xml"  # meant for 0..40959 bytes
    workload = Workload(collective_workload(CollectiveType.ALL_TO_ALL, MiB, 8))
    with pytest.warns(EtsimWarning, match=r"buffers of 0 to 40,959 bytes \(minBytes/maxBytes\), not 1,048,576"):
        simulate(workload, system=SystemConfig(algorithms={"default": str(xml)}))


# -- 4. a workload is not an algorithm -------------------------------------------------------------------------


def test_a_workload_passed_as_an_algorithm_is_refused(repo: Path) -> None:
    workload = Workload(collective_workload(AR, MiB, 8))
    dp = str(repo / "workloads" / "dp_8npus_4layers")
    with pytest.raises(ConfigError, match=r"is a workload, not an algorithm family: .* is a collective"):
        simulate(workload, system=SystemConfig(algorithms={"default": dp}))


# -- 5. fallbacks are said ------------------------------------------------------------------------------------


def test_a_bare_default_says_which_algorithm_served_the_rest(repo: Path) -> None:
    workload = load_workload(repo / "workloads" / "allgather_8npus_1MiB")
    with pytest.warns(EtsimWarning, match=r"'tree' does not implement all_gather; 'ring' served it"):
        result = simulate(workload, system=SystemConfig(algorithms={"default": "tree"}))
    assert {c.algorithm for c in result.collectives} == {"ring"}


# -- 6. unmatched messages --------------------------------------------------------------------------------------


def test_a_send_without_its_receive_is_a_deadlock_class_error() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.send(dst=1, size=100, tag=7)
    b.comp(duration_micros=1)
    with pytest.raises(DeadlockError, match=r"rank 0: node 0 .* sent message #0 to rank 1 \(tag 7\); rank 1 never"):
        simulate(wl(a, b), topology=ring(2, B, L))


# -- 7. rank-count traps ----------------------------------------------------------------------------------------


def test_a_topology_larger_than_the_workload_is_said() -> None:
    with pytest.warns(EtsimWarning, match=r"has 8 NPUs but the workload has only 4 rank files; NPUs 4..7 stay idle"):
        simulate(Workload(collective_workload(AR, MiB, 4)), topology=ring(8, B, L))


def test_a_group_or_a_peer_naming_a_rank_without_a_file_is_an_error(tmp_path: Path) -> None:
    a = TraceBuilder()
    a.send(dst=3, size=10, tag=0)
    with pytest.raises(SimulationError, match="comm_dst=3 is not a rank of this 2-rank workload"):
        simulate(wl(a, TraceBuilder()))
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [0, 1, 2]}))
    c = TraceBuilder()
    c.collective(AR, 10, pg_name="1")
    with pytest.raises(ConfigError, match=r"group '1': ranks \[2\] are not in 0..1"):
        simulate(wl(c, c), system=SystemConfig(comm_groups=str(groups)))


def test_collectives_in_a_one_rank_run_say_they_cost_nothing() -> None:
    b = TraceBuilder()
    b.collective(AR, MiB)
    with pytest.warns(EtsimWarning, match="over a 1-rank group moves no data and costs nothing"):
        assert simulate(wl(b)).finish_ns == 0


# -- 9. unbounded work --------------------------------------------------------------------------------------------


def test_chunks_smaller_than_a_byte_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"makes messages of .* bytes, less than one byte"):
        simulate(Workload(collective_workload(AR, MiB, 8)), system=SystemConfig(chunks=1_000_000))
    with pytest.raises(ConfigError, match=r"more than 1,000,000 chunks per collective"):
        simulate(Workload(collective_workload(AR, MiB, 8)), system=SystemConfig(chunks=10**9))


def test_a_long_run_is_announced(monkeypatch: pytest.MonkeyPatch) -> None:
    import etsim.simulation

    monkeypatch.setattr(etsim.simulation, "MESSAGE_WARNING", 100)
    workload = Workload(collective_workload(AR, MiB, 8, count=2))
    with pytest.warns(EtsimWarning, match=r"about 224 messages"):  # 2 collectives x 8 ranks x 14 sends
        result = simulate(workload, system=SystemConfig(fast_path=False))
    assert result.network["messages"] == 224
    # The fast path evaluates shared-graph collectives (ring) in bulk: not a long run, nothing said.
    with warnings.catch_warnings():
        warnings.simplefilter("error", EtsimWarning)
        assert simulate(workload).network["messages"] == 224


def test_astra_splits_of_a_billion_are_refused(tmp_path: Path) -> None:
    from etsim.compat import run_astra

    write_workload(collective_workload(AR, MiB, 4), tmp_path / "wl")
    system = {"preferred-dataset-splits": 1e9, "all-reduce-implementation": ["ring"], "local-mem-bw": 1600}
    (tmp_path / "sys.json").write_text(json.dumps(system))
    (tmp_path / "net.yml").write_text("topology: [Ring]\nnpus_count: [4]\nbandwidth: [50.0]\nlatency: [500.0]\n")
    with pytest.raises(ConfigError, match="more than 1,000,000 chunks per collective"):
        run_astra(tmp_path / "wl", tmp_path / "sys.json", tmp_path / "net.yml")


# -- deadlock reports name the likely cause first -------------------------------------------------------------


def test_deadlock_report_names_a_collective_some_ranks_never_issue() -> None:
    a, b, c = TraceBuilder(), TraceBuilder(), TraceBuilder()
    a.collective(AR, MiB)
    b.collective(AR, MiB)
    c.comp(duration_micros=1)
    with pytest.raises(DeadlockError) as info:
        simulate(wl(a, b, c))
    text = str(info.value)
    assert text.index("likely cause") < text.index("stuck ranks")
    assert "was issued by ranks [0, 1] but never by ranks [2]" in text
    assert "etsim validate" in text


def test_deadlock_report_names_an_empty_rank_and_a_cycle() -> None:
    from etsim.chakra.graph import Trace
    from etsim.chakra.schema import et_def_pb2 as pb

    a = TraceBuilder()
    a.collective(AR, MiB)
    with pytest.raises(DeadlockError, match="rank 1 has no nodes"):
        simulate(Workload([a.build(rank=0), Trace.from_nodes([], rank=1)]))
    nodes = [pb.Node(id=1, type=pb.COMP_NODE, data_deps=[2]), pb.Node(id=2, type=pb.COMP_NODE, data_deps=[1])]
    with pytest.raises(DeadlockError, match=r"rank 0: its dependencies form a cycle \(node ids 1 -> 2 -> 1\)"):
        simulate(Workload([Trace.from_nodes(nodes, rank=0)]))


def test_result_json_lists_the_warnings(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.collective(AR, MiB)
    b.metadata.attr.append(make_attribute("note", "x"))
    with pytest.warns(EtsimWarning):
        result = simulate(wl(b))
    assert json.loads(result.to_json())["warnings"] == result.warnings != []


def test_times_past_2_to_the_53_ns_are_said_to_be_inexact() -> None:
    """A float holds every ns only to 2^53 ns: a 1e15 us compute before an all-reduce makes its time inexact."""
    builders = []
    for rank in range(4):
        b = TraceBuilder(rank)
        b.collective(AR, MiB, deps=[b.comp("c", duration_micros=10**15)])
        builders.append(b)
    with pytest.warns(EtsimWarning, match=r"past 2\^53 ns \(104 days\).*steps of 128 ns"):
        simulate(wl(*builders), topology=ring(4, B, L))
    short = []
    for rank in range(4):
        b = TraceBuilder(rank)
        b.collective(AR, MiB, deps=[b.comp("c", duration_micros=10**9)])  # 11.6 days: exact
        short.append(b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        simulate(wl(*short), topology=ring(4, B, L))


def test_collectives_issued_out_of_program_order_are_said_to_be_matched_by_issue_order() -> None:
    """Rank 3's second all-reduce depends only on its first compute: it goes first, and matches the others' first."""

    def program(rank: int, rewired: bool) -> TraceBuilder:
        b = TraceBuilder(rank)
        start = b.comp("c0", duration_micros=1)
        slow = b.comp("c1", duration_micros=50, deps=[start])
        first = b.collective(AR, MiB, deps=[slow])
        b.collective(AR, MiB, deps=[start] if rewired else [first])
        return b

    with pytest.warns(EtsimWarning, match=r"rank 3 issues this collective of group .0. after node \d+, a later node"):
        simulate(wl(*(program(r, r == 3) for r in range(4))), topology=ring(4, B, L))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        simulate(wl(*(program(r, False) for r in range(4))), topology=ring(4, B, L))
