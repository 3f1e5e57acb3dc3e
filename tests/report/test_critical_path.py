"""The critical path: contiguous from 0 to the finish time, through the nodes and messages that set it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from etsim.chakra import CollectiveType, TraceBuilder, Workload, load_workload
from etsim.errors import ConfigError
from etsim.network import ring
from etsim.producers import data_parallel_workload
from etsim.report.critical_path import critical_path
from etsim.report.record import RunRecorder
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

B, L = 50.0, 500.0


def _path(workload: Workload, npus: int, **config: Any) -> tuple[dict[str, Any], Any]:
    rec = RunRecorder(messages=True)
    result = simulate(workload, topology=ring(npus, B, L), system=SystemConfig(**config), observer=rec)
    return critical_path(rec), result


def _check_tiles(cp: dict[str, Any], finish: float) -> None:
    segs = cp["segments"]
    assert segs[0]["start_ns"] == 0.0 and segs[-1]["end_ns"] == finish == cp["finish_ns"]
    assert all(a["end_ns"] == b["start_ns"] for a, b in itertools.pairwise(segs))
    assert all(s["end_ns"] > s["start_ns"] for s in segs)
    assert not [s for s in segs if "unexplained" in s["detail"]]
    assert sum(cp["totals"].values()) == pytest.approx(finish, rel=1e-12)
    nodes = cp["nodes"]
    assert sum(n[k] for n in nodes for k in ("compute_ns", "exposed_comm_ns", "memory_ns", "other_ns")) == (
        pytest.approx(finish, rel=1e-12)
    )


@pytest.mark.parametrize(
    ("grad_bytes", "expected"),
    [
        # small gradients: the all-reduces hide behind the backward pass except the last one
        (4 << 20, ["it0_fwd_l0", "it0_fwd_l1", "it0_fwd_l2", "it0_wg_l2", "it0_ig_l2", "it0_wg_l1", "it0_ig_l1",
                   "it0_wg_l0", "it0_allreduce_l0"]),
        # large gradients: the all-reduces queue on the one communication slot and all are exposed
        (64 << 20, ["it0_fwd_l0", "it0_fwd_l1", "it0_fwd_l2", "it0_wg_l2",
                    "it0_allreduce_l2", "it0_allreduce_l1", "it0_allreduce_l0"]),
    ],
)  # fmt: skip
def test_dp_training_step_path_names_the_expected_nodes(grad_bytes: int, expected: list[str]) -> None:
    """A data-parallel step (compute overlapped with all-reduce): the path ends at the finish time,
    through the nodes that set it, with the closed-form shares."""
    workload = Workload(
        data_parallel_workload(4, layers=3, grad_bytes=grad_bytes, fwd_micros=100, bwd_micros=100, wg_micros=50)
    )
    cp, result = _path(workload, 4)
    _check_tiles(cp, result.finish_ns)
    assert [n["name"] for n in cp["nodes"]] == expected
    ar = 2 * 3 * (L + grad_bytes / 4 / B)  # ring all-reduce closed form
    exposed = sum(name.startswith("it0_allreduce") for name in expected)
    t = cp["totals"]
    assert t["exposed_comm_ns"] == pytest.approx(exposed * ar, rel=1e-12)
    compute = [100 if "fwd" in n or "ig" in n else 50 for n in expected if "allreduce" not in n]
    assert t["compute_ns"] == 1000 * sum(compute)
    assert result.finish_ns == pytest.approx(t["compute_ns"] + t["exposed_comm_ns"], rel=1e-12)
    # the path ends at the node that finished last; every all-reduce on it crosses all ranks
    assert cp["end"]["node_id"] == result.collectives[-1].node_id
    assert all(n["ranks"] == [0, 1, 2, 3] for n in cp["nodes"] if "allreduce" in n["name"])


def test_a_late_rank_puts_its_compute_on_the_path_and_the_early_rank_waits() -> None:
    traces = []
    for r in range(2):
        b = TraceBuilder()
        c = b.comp(f"work{r}", duration_micros=2 + 3 * r)  # rank 1 is 3 us late
        b.collective(CollectiveType.ALL_REDUCE, 1000, deps=[c], name="ar")
        traces.append(b.build(rank=r))
    cp, result = _path(Workload(traces), 2)
    _check_tiles(cp, result.finish_ns)
    first = cp["nodes"][0]
    assert (first["rank"], first["name"], first["compute_ns"]) == (1, "work1", 5000.0)
    last = cp["nodes"][-1]
    assert last["name"] == "ar" and last["exposed_comm_ns"] == pytest.approx(result.finish_ns - 5000.0)
    # the path leaves the all-reduce on the rank that finished last; if that is rank 0 it waited 3 us
    assert last["wait_ns"] == (3000.0 if last["rank"] == 0 else 0.0)


def test_a_receive_passes_the_path_to_the_sender_through_its_message() -> None:
    traces = []
    for r in range(2):
        b = TraceBuilder()
        if r == 0:
            c = b.comp("produce", duration_micros=4)
            b.send(1, 100_000, deps=[c], name="send_act")
        else:
            c = b.comp("early", duration_micros=1)
            rv = b.recv(0, 100_000, deps=[c], name="recv_act")
            b.comp("consume", duration_micros=2, deps=[rv])
        traces.append(b.build(rank=r))
    cp, result = _path(Workload(traces), 2)
    _check_tiles(cp, result.finish_ns)
    assert [(n["rank"], n["name"]) for n in cp["nodes"]] == [
        (0, "produce"), (0, "send_act"), (1, "recv_act"), (1, "consume"),
    ]  # fmt: skip
    send, recv = cp["nodes"][1], cp["nodes"][2]
    assert send["exposed_comm_ns"] == L + 100_000 / B
    assert recv["exposed_comm_ns"] == 0 and recv["wait_ns"] == 4000 - 1000 + L + 100_000 / B
    assert [s["kind"] for s in cp["segments"]] == ["compute", "exposed_comm", "compute"]


@pytest.mark.parametrize(
    "config",
    [
        {"chunks": 3},
        {"chunks": 3, "active_streams": 1},
        {"chunks": 2, "active_streams": 1, "stream_delay": 700.0},
        {"reduction_bandwidth": 10.0},
        {"endpoint_delay": 30.0, "chunks": 2},
    ],
)
@pytest.mark.parametrize("algo", ["ring", "direct", "halving_doubling", "tree"])
def test_paths_through_every_algorithm_and_stream_setting_tile_the_run(algo: str, config: dict[str, Any]) -> None:
    workload = Workload(
        data_parallel_workload(4, layers=2, grad_bytes=1 << 20, fwd_micros=10, bwd_micros=10, iterations=2)
    )
    cp, result = _path(workload, 4, algorithms={"all_reduce": algo}, **config)
    _check_tiles(cp, result.finish_ns)
    if "stream_delay" in config:
        assert any(s["detail"] == "stream delay" for s in cp["segments"])
    if "reduction_bandwidth" in config and algo != "direct":
        assert any(s["detail"].endswith("reduction") for s in cp["segments"])


@pytest.mark.parametrize("name", ["allgather_8npus_1MiB", "alltoall_8npus_1MiB", "sendrecv_ring_8npus_1MiB"])
def test_shipped_workloads_have_an_exact_path(repo: Any, name: str) -> None:
    cp, result = _path(load_workload(str(repo / "workloads" / name)), 8)
    _check_tiles(cp, result.finish_ns)


def test_it_needs_every_message() -> None:
    rec = RunRecorder(messages=False)
    simulate(Workload(data_parallel_workload(2, layers=1, grad_bytes=1000, fwd_micros=1, bwd_micros=1)), observer=rec)
    with pytest.raises(ConfigError, match="every message"):
        critical_path(rec)
    with pytest.raises(ConfigError, match="completed run"):
        critical_path(RunRecorder(messages=True))


def test_a_straggler_is_named_as_what_held_the_run_back_and_the_collective_it_delayed() -> None:
    """Every rank computes 10 µs, then all-reduces; rank 2 at 1.5x: the path names it and the all-reduce."""
    traces = []
    for rank in range(4):
        b = TraceBuilder(rank)
        b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[b.comp("grad", duration_micros=10)], name="ar")
        traces.append(b.build(rank=rank))
    cp, result = _path(Workload(traces), 4, compute_slowdown={2: 1.5})
    held = cp["held_back"]
    assert held["rank"] == 2 and held["compute_ns"] == 15_000
    assert held["share"] == pytest.approx(15_000 / result.finish_ns)
    assert held["through"]["collective"] == "ALL_REDUCE" and held["through"]["name"] == "ar"
    from etsim.report.tables import critical_path_lines

    first = critical_path_lines(cp)[0]
    assert first.startswith("held back most by rank 2: 15 us of its compute on the critical path")
    assert "reaching the others through" in first and "all_reduce 1 MiB" in first
    assert held["alike"] is False


def test_equal_ranks_are_not_said_to_hold_the_others_back() -> None:
    """Without the straggler every rank computes 10 µs: the path passes through one of the equal ranks, which it
    named as holding the run back most; it says the ranks are alike instead."""
    traces = []
    for rank in range(4):
        b = TraceBuilder(rank)
        b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[b.comp("grad", duration_micros=10)], name="ar")
        traces.append(b.build(rank=rank))
    cp, _ = _path(Workload(traces), 4)
    held = cp["held_back"]
    assert held["compute_ns"] == 10_000 and held["alike"] is True
    from etsim.report.tables import critical_path_lines

    first = critical_path_lines(cp)[0]
    assert first.startswith(f"the critical path runs through rank {held['rank']}: 10 us of its compute on the critical")
    assert first.endswith("every rank computes as long") and "held back" not in first
    # A rank that starts late holds the others back though it computes as long (it was said to be one of equals).
    cp, _ = _path(Workload(traces), 4, rank_start={3: 1_000_000.0})
    assert cp["held_back"]["alike"] is False and critical_path_lines(cp)[0].startswith("held back most by rank 3")


def test_nccls_fixed_costs_are_the_collectives_time_not_compute() -> None:
    # NCCL's graphs hold the call's kernel start and latencies in a node of no data: it was counted as compute
    # ("nccl:Ring/Simple/16 reduction"), in a run with none, and a straggler's "compute" was named.
    from etsim.network import load_network
    from etsim.producers import collective_workload

    net = load_network({"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 16})
    rec = RunRecorder(messages=True)
    workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, 256 << 20, 16))
    result = simulate(workload, topology=net, observer=rec)
    cp = critical_path(rec)
    _check_tiles(cp, result.finish_ns)
    assert cp["totals"]["compute_ns"] == 0.0 and result.collectives[0].algorithm.startswith("nccl:")
    assert any(s["detail"].endswith(": nccl_launch") and s["kind"] == "exposed_comm" for s in cp["segments"])
