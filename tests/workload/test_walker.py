"""The walker on workloads: point-to-point timing and matching, slots, compute models, deadlocks."""

from __future__ import annotations

import pytest

from etsim.chakra import TraceBuilder, Workload
from etsim.chakra.graph import Trace
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import DeadlockError, EtsimWarning, SimulationError
from etsim.network import fully_connected, ring
from etsim.simulation import simulate
from etsim.system.config import Resources, SystemConfig

B, L = 50.0, 500.0  # bytes/ns, ns


def wl(*builders: TraceBuilder) -> Workload:
    return Workload([b.build(rank=r) for r, b in enumerate(builders)])


def test_send_recv_time_is_latency_plus_serialisation() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.send(dst=1, size=1 << 20, tag=0)
    b.recv(src=0, size=1 << 20, tag=0)
    result = simulate(wl(a, b), topology=ring(2, B, L))
    assert result.finish_ns == pytest.approx(L + (1 << 20) / B, rel=1e-12)
    assert result.network["messages"] == 1 and result.network["bytes"] == 1 << 20


def test_recv_posted_late_completes_at_post_time() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.send(dst=1, size=1000, tag=3)
    c = b.comp(duration_micros=50)
    b.recv(src=0, size=1000, tag=3, deps=[c])
    result = simulate(wl(a, b), topology=ring(2, B, L))
    assert result.ranks[0].finish_ns == pytest.approx(L + 20)
    assert result.ranks[1].finish_ns == pytest.approx(50_000)


def test_kth_send_matches_kth_recv_per_tag() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.send(dst=1, size=100, tag=1)
    a.send(dst=1, size=5000, tag=2)
    r2 = b.recv(src=0, size=5000, tag=2)
    b.recv(src=0, size=100, tag=1, deps=[r2])
    result = simulate(wl(a, b), topology=ring(2, B, L))
    # One communication slot: the second send starts when the first is delivered.
    assert result.ranks[1].finish_ns == pytest.approx((L + 100 / B) + (L + 5000 / B))
    free = SystemConfig(resources=Resources(comm_streams=0))
    # Without the slot limit both are in flight at once: contention-free they overlap entirely,
    # on a congestion-aware link the second waits for the first to be serialised.
    unaware = simulate(wl(a, b), topology=ring(2, B, L), model="analytical", system=free)
    assert unaware.ranks[1].finish_ns == pytest.approx(L + 5000 / B)
    aware = simulate(wl(a, b), topology=ring(2, B, L), system=free)
    assert aware.ranks[1].finish_ns == pytest.approx(L + 5100 / B)


def test_size_mismatch_names_both_nodes() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.send(dst=1, size=100, tag=0, name="snd")
    b.recv(src=0, size=200, tag=0, name="rcv")
    with pytest.raises(
        SimulationError, match=r"rank 0: node 0 \(snd\) sends 100 bytes.*rank 1: node 0 \(rcv\) receives 200"
    ):
        simulate(wl(a, b), topology=ring(2, B, L))


def test_unmatched_recv_is_a_deadlock_report() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.comp(duration_micros=1)
    b.recv(src=0, size=64, tag=9, name="lonely")
    with pytest.raises(DeadlockError) as info:
        simulate(wl(a, b), topology=ring(2, B, L))
    text = str(info.value)
    assert "rank 1: 1 of 1 nodes unfinished" in text
    assert "node 0 (lonely) was issued and waits: a message from rank 0 with tag 9 that has not been sent" in text
    assert "rank 0" not in text.split("stuck ranks:")[1].replace("from rank 0", "")


def test_cycle_is_a_deadlock_report() -> None:
    nodes = [pb.Node(id=1, type=pb.COMP_NODE, data_deps=[2]), pb.Node(id=2, type=pb.COMP_NODE, data_deps=[1])]
    trace = Trace.from_nodes(nodes, rank=0)
    with pytest.raises(DeadlockError, match=r"2 node.s. wait for unfinished dependencies"):
        simulate(Workload([trace]))


def test_collective_never_issued_by_a_peer_is_a_deadlock() -> None:
    builders = [TraceBuilder() for _ in range(4)]
    for b in builders[:3]:
        b.collective(0, 4096)
    builders[3].comp(duration_micros=1)
    with pytest.raises(DeadlockError) as info:
        simulate(wl(*builders), topology=fully_connected(4, B, L))
    text = str(info.value)
    assert "rank 0:" in text and "its collective never completes" in text and "rank 3" in text


def test_a_part_that_never_started_is_reported_as_such() -> None:
    """With one stream at a time, a collective's second chunk waits behind its first: never issued, never waiting."""
    from etsim.chakra import CollectiveType

    builders = [TraceBuilder() for _ in range(4)]
    builders[1].recv(0, 100, tag=99)  # rank 1 never joins
    for r, b in enumerate(builders):
        b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[0] if r == 1 else [])
    system = SystemConfig(algorithms={"default": "ring"}, chunks=2, active_streams=1, fast_path=False)
    with pytest.raises(DeadlockError) as info:
        simulate(wl(*builders), system=system)
    text = str(info.value)
    assert "rank 0: chunk 2, phase 1 of a collective has not started" in text
    assert "(rs0_send) of a collective was issued and waits: completion" not in text


def test_dangling_dependency_is_rejected_up_front() -> None:
    b = TraceBuilder()
    b.comp(deps=[42])
    with pytest.raises(SimulationError, match="data dependency on node id 42"):
        simulate(wl(b))


def test_compute_slots_serialise_and_order_by_id() -> None:
    b = TraceBuilder()
    b.comp("a", duration_micros=10)
    b.comp("b", duration_micros=10)
    b.comp("c", duration_micros=10)
    assert simulate(wl(b)).finish_ns == 30_000
    two = SystemConfig(resources=Resources(compute_streams=2))
    assert simulate(wl(b), system=two).finish_ns == 20_000
    unlimited = SystemConfig(resources=Resources(compute_streams=0))
    result = simulate(wl(b), system=unlimited)
    assert result.finish_ns == 10_000 and result.ranks[0].compute_ns == 10_000


def test_comm_and_compute_overlap_and_exposed_time() -> None:
    a, b = TraceBuilder(), TraceBuilder()
    a.comp(duration_micros=10)  # runs while the send is in flight
    a.send(dst=1, size=50 * 30_000, tag=0)  # 30 us + latency on the wire
    b.recv(src=0, size=50 * 30_000, tag=0)
    r = simulate(wl(a, b), topology=ring(2, B, L)).ranks[0]
    assert r.finish_ns == pytest.approx(30_500)
    assert r.compute_ns == pytest.approx(10_000)
    assert r.comm_ns == pytest.approx(30_500)
    assert r.exposed_comm_ns == pytest.approx(20_500)


def test_roofline_and_memory_models() -> None:
    b = TraceBuilder()
    b.comp(num_ops=2_000_000, tensor_size=1000)  # compute bound: 2e6 ops at 1000 ops/ns
    b.comp(num_ops=10, tensor_size=1_000_000)  # memory bound: 1e6 B at 100 B/ns
    b.mem(store=False, tensor_size=5000)
    cfg = SystemConfig(
        peak_flops=1000.0, memory_bandwidth=100.0, remote_memory_bandwidth=10.0, remote_memory_latency=7.0
    )
    # The MEM node runs on the comm slot, concurrently with the compute chain.
    r = simulate(wl(b), system=cfg).ranks[0]
    assert r.compute_ns == pytest.approx(2_000 + 10_000)
    assert r.finish_ns == pytest.approx(12_000)
    # Replay is the default: durations are 0 here.
    assert simulate(wl(b), system=SystemConfig(remote_memory_bandwidth=10.0)).finish_ns == pytest.approx(500)


@pytest.mark.parametrize(
    ("nodes", "settings", "said"),
    [
        # (each of these ran below the roofline's bound with exit 0 and no word)
        ([{"num_ops": 10**10}], {}, r"1 GPU COMP node\(s\) have no num_ops or tensor_size \(e\.g\. .*node 0"),
        ([{"tensor_size": 10**8}], {}, r"have no num_ops or tensor_size"),
        ([{"num_ops": 10**9, "tensor_size": 10**6}] * 4, {"resources": Resources(compute_streams=0)},
         r"compute_streams unlimited with the roofline: .* exceed the GPU's peak"),
        ([{"num_ops": 10**9, "tensor_size": 10**6}], {"compute_slowdown": {0: 0.5}},
         r"a compute slowdown below 1 with the roofline \(rank 0\): its GPU computes faster"),
    ],
)  # fmt: skip
def test_what_runs_compute_below_the_roofline_is_said(nodes, settings, said) -> None:
    b = TraceBuilder()
    for attrs in nodes:
        b.comp(**attrs)
    cfg = SystemConfig(peak_flops=1e5, memory_bandwidth=1000.0, **settings)
    with pytest.warns(EtsimWarning, match=said):
        simulate(wl(b), system=cfg)
    both = TraceBuilder()
    both.comp(num_ops=10**9, tensor_size=10**6)
    assert simulate(wl(both), system=SystemConfig(peak_flops=1e5, memory_bandwidth=1000.0)).finish_ns == 10_000


def test_ctrl_deps_enforced_unless_ignored() -> None:
    b = TraceBuilder()
    first = b.comp("first", duration_micros=5)
    b.node(4, "second", ctrl_deps=[first], duration_micros=5)
    cfg = SystemConfig(resources=Resources(compute_streams=0))
    assert simulate(wl(b), system=cfg).finish_ns == 10_000
    ignore = SystemConfig(resources=Resources(compute_streams=0), ignore_ctrl_deps=True)
    assert simulate(wl(b), system=ignore).finish_ns == 5_000


def test_deterministic_results() -> None:
    builders = [TraceBuilder() for _ in range(4)]
    for r, b in enumerate(builders):
        c = b.comp(duration_micros=r + 1)
        b.collective(0, 1 << 16, deps=[c])
        b.send(dst=(r + 1) % 4, size=777, tag=1)
        b.recv(src=(r - 1) % 4, size=777, tag=1)
    first = simulate(wl(*builders), topology=ring(4, B, L)).to_dict()
    second = simulate(wl(*builders), topology=ring(4, B, L)).to_dict()
    first["sim"] = second["sim"] = None
    assert first == second


def test_progress_display() -> None:
    import io

    from etsim.chakra import CollectiveType
    from etsim.producers import collective_workload

    stream = io.StringIO()
    workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 64))
    result = simulate(workload, topology=ring(64, B, L), progress=stream, progress_interval=0.0)
    text = stream.getvalue()
    assert "nodes" in text and "messages" in text  # drawn at least once (every 4096 messages)
    assert f"/{8064} messages" in text  # against the expected count: 64 ranks × 2·63 sends
    # Not a terminal: whole lines, nothing to erase.
    assert text.startswith("etsim: [") and text.endswith("\n") and "\r" not in text
    assert result.network["messages"] == 64 * 126


@pytest.mark.parametrize("big_first", [True, False])
def test_free_slot_goes_to_smallest_ready_id_whatever_the_file_order(big_first: bool) -> None:
    def node(nid: int, ntype: int, deps: list[int], **attrs: int) -> pb.Node:
        n = pb.Node(id=nid, type=ntype, data_deps=deps, duration_micros=attrs.pop("dur", 0))
        for key, value in attrs.items():
            n.attr.add(name=key).int32_val = value
        n.attr.add(name="is_cpu_op").bool_val = False
        return n

    comp = node(0, pb.COMP_NODE, [], dur=1)
    big = node(5, pb.COMM_SEND_NODE, [0], comm_dst=1, comm_tag=0, comm_size=1_000_000)
    small = node(2, pb.COMM_SEND_NODE, [0], comm_dst=2, comm_tag=0, comm_size=100)
    sends = [big, small] if big_first else [small, big]
    r0 = Trace.from_nodes([comp, *sends], rank=0)
    r1 = Trace.from_nodes([node(1, pb.COMM_RECV_NODE, [], comm_src=0, comm_tag=0, comm_size=1_000_000)], rank=1)
    r2 = Trace.from_nodes([node(1, pb.COMM_RECV_NODE, [], comm_src=0, comm_tag=0, comm_size=100)], rank=2)
    result = simulate(Workload([r0, r1, r2]), topology=fully_connected(3, B, L))
    small_done = 1000 + L + 100 / B
    assert result.ranks[2].finish_ns == pytest.approx(small_done)  # id 2 takes the comm slot first
    assert result.ranks[1].finish_ns == pytest.approx(small_done + L + 1_000_000 / B)


def test_a_message_to_its_own_rank_is_said_to_cost_nothing() -> None:
    # Rank 0 sending 1 GiB to itself finished in 0 ns, exit 0, without a word.
    b = TraceBuilder()
    b.send(dst=0, size=1 << 30)
    b.recv(src=0, size=1 << 30)
    other = TraceBuilder()
    other.comp(duration_micros=1)
    with pytest.warns(EtsimWarning, match=r"rank 0: node 0 .*send to itself: it crosses no link, so no bandwidth .*"
                      r"\(and 1 more sends and receives\)"):  # fmt: skip
        result = simulate(wl(b, other), topology=ring(2, B, L))
    assert result.ranks[0].finish_ns == 0.0


def test_a_cycle_is_named_before_an_empty_rank_nobody_waits_on() -> None:
    # The headline blamed rank 1's empty trace ("likely cause: rank 1 has no nodes") for rank 0's cycle.
    b = TraceBuilder()
    first = b.comp("a", duration_micros=1)
    second = b.comp("b", duration_micros=1, deps=[first])
    b.nodes[first].data_deps.append(second)  # (a -> b -> a)
    with pytest.raises(DeadlockError, match=r"likely cause: rank 0: its dependencies form a cycle"):
        simulate(wl(b, TraceBuilder()))
