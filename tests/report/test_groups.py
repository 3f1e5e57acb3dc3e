"""Exposed communication per communicator group (pg_name)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etsim.chakra import CollectiveType, TraceBuilder, Workload
from etsim.network import ring
from etsim.producers import data_parallel_workload
from etsim.report.groups import exposure_by_group
from etsim.report.record import RunRecorder
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

B, L = 50.0, 500.0


def test_one_group_matches_the_per_rank_exposed_communication() -> None:
    workload = Workload(data_parallel_workload(4, layers=3, grad_bytes=8 << 20, fwd_micros=100, bwd_micros=100))
    rec = RunRecorder()
    result = simulate(workload, topology=ring(4, B, L), observer=rec)
    (group,) = exposure_by_group(rec)
    assert group["group"] == "0" and group["ranks"] == 4 and group["calls"] == 4 * 3
    assert group["bytes"] == 4 * 3 * (8 << 20)
    exposed = [r.exposed_comm_ns for r in result.ranks]
    assert group["exposed_comm_ns_max"] == pytest.approx(max(exposed), rel=1e-12)
    assert group["exposed_comm_ns_mean"] == pytest.approx(sum(exposed) / 4, rel=1e-12)
    assert group["comm_ns_max"] == pytest.approx(max(r.comm_ns for r in result.ranks), rel=1e-12)


def test_data_and_tensor_parallel_groups_are_told_apart(tmp_path: Path) -> None:
    """Ranks {0,1} and {2,3} form tensor-parallel groups 1 and 2; {0,2} and {1,3} data-parallel groups 3 and 4.

    A large TP all-reduce runs with nothing to hide it; a small DP all-reduce overlaps 1 ms of compute.
    """
    groups = {"1": [0, 1], "2": [2, 3], "3": [0, 2], "4": [1, 3]}
    groups_file = tmp_path / "groups.json"
    groups_file.write_text(json.dumps(groups))
    traces = []
    for r in range(4):
        b = TraceBuilder()
        tp = b.collective(CollectiveType.ALL_REDUCE, 4 << 20, pg_name=str(1 + r // 2), name="tp_ar")
        b.collective(CollectiveType.ALL_REDUCE, 1 << 10, deps=[tp], pg_name=str(3 + r % 2), name="dp_ar")
        b.comp("overlap", duration_micros=1000, deps=[tp])
        traces.append(b.build(rank=r))
    rec = RunRecorder()
    result = simulate(
        Workload(traces),
        topology=ring(4, B, L),
        system=SystemConfig(comm_groups=str(groups_file)),
        observer=rec,
    )
    found = {g["group"]: g for g in exposure_by_group(rec)}
    assert set(found) == {"1", "2", "3", "4"}
    tp_time = max(c.end_ns - c.start_ns for c in result.collectives if c.bytes == 4 << 20)
    for tp in ("1", "2"):
        assert found[tp]["exposed_comm_ns_max"] == tp_time and found[tp]["calls"] == 2
    for dp in ("3", "4"):
        assert found[dp]["exposed_comm_ns_max"] == 0.0 and found[dp]["comm_ns_max"] > 0
    result.groups = exposure_by_group(rec)
    assert "communicator groups" in result.table()


def test_one_group_from_the_per_rank_times_equals_the_recorded_one(repo: Path) -> None:
    """The command line skips recording when all communication is in one group: same figures."""
    from etsim.chakra import load_workload
    from etsim.cli import run as cli_run
    from etsim.report.groups import exposure_from_ranks, single_group
    from etsim.report.trace import DEFAULT_LIMIT

    assert cli_run.DEFAULT_LIMIT == DEFAULT_LIMIT
    for name in ("dp_8npus_4layers", "sendrecv_ring_8npus_1MiB"):
        workload = load_workload(str(repo / "workloads" / name))
        rec = RunRecorder()
        result = simulate(workload, observer=rec)
        group = single_group(workload.traces)
        assert group in ("0", "p2p")
        (recorded,) = exposure_by_group(rec)
        (derived,) = exposure_from_ranks(result, workload.traces, group)
        assert recorded.keys() == derived.keys()
        for key, value in recorded.items():
            if isinstance(value, str):
                assert derived[key] == value
            else:
                assert derived[key] == pytest.approx(value, rel=1e-12, abs=1e-6), key
    two = Workload([TraceBuilder().build(rank=0)])
    assert single_group(two.traces) == ""


def _intervals_node_by_node(rec: RunRecorder, run: object) -> tuple[list[tuple[float, float]], dict[str, list[int]]]:
    """The rank's compute intervals and each group's nodes, found one node at a time (the reference)."""
    from etsim.chakra.graph import NodeType
    from etsim.workload.runs import CPU

    tr, starts, ends = run.trace, rec.start[run.rank], rec.finish[run.rank]  # type: ignore[attr-defined]
    mine, comm = [], {}
    for j, t in enumerate(tr.types):
        if starts[j] != starts[j]:
            continue
        if t == NodeType.COMP_NODE or (t == NodeType.COMM_COLL_NODE and run.node_class[j] == CPU):  # type: ignore[attr-defined]
            mine.append((starts[j], ends[j]))
        elif t == NodeType.COMM_COLL_NODE:
            comm.setdefault(tr.pg_name[j] or "0", []).append(j)
        elif t in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            comm.setdefault(tr.pg_name[j] or "p2p", []).append(j)
    return mine, comm


def test_a_ranks_intervals_by_group_equal_a_walk_node_by_node() -> None:
    """World collectives named "0" and not named are one group, sends and receives p2p unless named; host-side
    collectives are compute; groups come in the order of their first node."""
    from etsim.report.groups import _rank_intervals

    traces = []
    for r in range(4):
        b = TraceBuilder()
        peer = r ^ 1
        if r % 2:  # (an unnamed send, then a receive named by its group)
            first = b.send(peer, 1 << 16)
            second = b.recv(peer, 1 << 16, deps=[first], pg_name="a2a")
        else:
            first = b.recv(peer, 1 << 16, pg_name="a2a")
            second = b.send(peer, 1 << 16, deps=[first])
        world = b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[second], name="world")
        named = b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[world], pg_name="0", name="world_named")
        host = b.collective(CollectiveType.BARRIER, 0, deps=[named], is_cpu_op=True, name="host")
        b.comp("work", duration_micros=5, deps=[host])
        b.collective(CollectiveType.ALL_GATHER, 1 << 18, deps=[world], name="world_again")
        traces.append(b.build(rank=r))
    rec = RunRecorder()
    simulate(Workload(traces), topology=ring(4, B, L), observer=rec)
    assert rec.engine is not None
    for run in rec.engine.runs:
        mine, comm = _rank_intervals(rec, run)
        want_mine, want_nodes = _intervals_node_by_node(rec, run)
        assert mine == want_mine and len(mine) == 2
        assert list(comm) == list(want_nodes) == (["p2p", "a2a", "0"] if run.rank % 2 else ["a2a", "p2p", "0"])
        for group, (spans, nodes) in comm.items():
            assert nodes == want_nodes[group]
            assert spans == [(rec.start[run.rank][j], rec.finish[run.rank][j]) for j in nodes]
