"""simulate(): building the layers, the pre-flight check, and the result it returns."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.chakra import Workload
from etsim.chakra.graph import CollectiveType, Trace
from etsim.chakra.io import write_workload
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import ConfigError, DeadlockError, SimulationError
from etsim.simulation import simulate
from etsim.system.config import load_system_config


def test_duplicate_ids_are_rejected_before_the_run() -> None:
    nodes = [pb.Node(id=1, type=pb.COMP_NODE, duration_micros=10), pb.Node(id=1, type=pb.COMP_NODE)]
    with pytest.raises(SimulationError, match="node id 1 is defined more than once"):
        simulate(Workload([Trace.from_nodes(nodes, rank=0)]))


def test_default_topology_is_a_ring_of_the_workload() -> None:
    from etsim.chakra import CollectiveType
    from etsim.producers import collective_workload

    result = simulate(Workload(collective_workload(CollectiveType.ALL_REDUCE, 8 << 20, 4)), model="analytical")
    # 2(p-1)(α + n/(pB)) on the default ring: 50 GB/s, 500 ns
    assert result.finish_ns == pytest.approx(2 * 3 * (500 + (8 << 20) / 4 / 50), rel=1e-12)
    assert result.network["topology"].startswith("default ring of 4 NPUs")


def test_topology_smaller_than_the_workload_is_refused() -> None:
    from etsim.errors import ConfigError
    from etsim.network import ring

    b = [Trace.from_nodes([pb.Node(id=0, type=pb.COMP_NODE)], rank=r) for r in range(4)]
    with pytest.raises(ConfigError, match=r"the workload has 4 ranks but topology .* has only 2 NPUs"):
        simulate(Workload(b), topology=ring(2, 1.0, 1.0))


def test_preflight_reports_every_blocking_problem_with_a_hint() -> None:
    send = pb.Node(id=0, type=pb.COMM_SEND_NODE)
    send.attr.add(name="comm_dst").int64_val = 1
    dangling = pb.Node(id=1, type=pb.COMP_NODE, data_deps=[99])
    with pytest.raises(SimulationError) as info:
        simulate(Workload([Trace.from_nodes([send, dangling], rank=0), Trace.from_nodes([], rank=1)]))
    text = str(info.value)
    assert "send without comm_tag, comm_size" in text
    assert "data dependency on node id 99, which is not in the file" in text


def test_a_straggler_is_its_trace_with_slower_compute_exactly() -> None:
    """compute_slowdown {1: 3}: the same result as rank 1's trace with 30 µs of compute where it says 10."""
    from etsim.chakra import CollectiveType, TraceBuilder, Workload
    from etsim.network import ring
    from etsim.system.config import SystemConfig

    def workload(micros: dict[int, int]) -> Workload:
        traces = []
        for rank in range(4):
            b = TraceBuilder(rank)
            b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[b.comp("c", duration_micros=micros.get(rank, 10))])
            traces.append(b.build(rank=rank))
        return Workload(traces)

    topology = ring(4, 50.0, 500.0)
    even = simulate(workload({}), topology=topology)
    slow = simulate(workload({}), topology=topology, system=SystemConfig(compute_slowdown={1: 3.0}))
    edited = simulate(workload({1: 30}), topology=topology)
    assert slow.finish_ns == edited.finish_ns > even.finish_ns + 20_000  # the others' ring steps wait for rank 1
    assert [r.compute_ns for r in slow.ranks] == [10_000, 30_000, 10_000, 10_000]
    assert [(c.rank, c.start_ns, c.end_ns) for c in slow.collectives] == [
        (c.rank, c.start_ns, c.end_ns) for c in edited.collectives
    ]
    assert slow.sim["not_folded"].startswith("compute_slowdown makes ranks differ")
    same = simulate(workload({}), topology=topology, system=SystemConfig(compute_slowdown={1: 1.0}))
    assert same.finish_ns == even.finish_ns  # a factor of 1 changes nothing


def _chain_then_all_reduce(micros: list[int], npus: int = 4) -> Workload:
    """Every rank: compute nodes of *micros* µs one after the other, then a 1 MiB all-reduce."""
    from etsim.chakra import CollectiveType, TraceBuilder

    traces = []
    for rank in range(npus):
        b = TraceBuilder(rank)
        last = None
        for k, us in enumerate(micros):
            last = b.comp(f"c{k}", duration_micros=us, deps=[last] if last is not None else [])
        b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[last] if last is not None else [])
        traces.append(b.build(rank=rank))
    return Workload(traces)


def test_a_straggler_delays_a_ring_all_reduce_by_exactly_its_extra_time_under_analytical() -> None:
    """A rank whose compute before a ring all-reduce takes d longer delays the finish by exactly d."""
    from etsim.network import ring
    from etsim.system.config import SystemConfig

    workload, topology = _chain_then_all_reduce([10]), ring(4, 50.0, 500.0)
    healthy = simulate(workload, topology=topology, model="analytical")
    for factor in (1.25, 1.5, 3.0):
        system = SystemConfig(compute_slowdown={2: factor})
        slow = simulate(workload, topology=topology, model="analytical", system=system)
        assert slow.finish_ns == pytest.approx(healthy.finish_ns + (factor - 1) * 10_000, abs=1e-6)  # (float sums)


def test_a_slowdown_window_slows_the_compute_nodes_that_start_inside_it() -> None:
    """Four nodes of 10 µs one after the other; a 2x window over [10 µs, 25 µs) on rank 1 doubles its second."""
    from etsim.network import ring
    from etsim.system.config import load_system_config

    workload, topology = _chain_then_all_reduce([10, 10, 10, 10]), ring(4, 50.0, 500.0)
    healthy = simulate(workload, topology=topology, model="analytical")
    window = {"slowdown_windows": [{"ranks": [1], "factor": 2, "from": "10 us", "until": "25 us"}]}
    slow = simulate(workload, topology=topology, model="analytical", system=load_system_config(window))
    # Rank 1's nodes start at 0, 10 (in: 20 µs), 30 (out), 40 (out): one node doubled.
    assert slow.ranks[1].compute_ns == 50_000 and slow.ranks[0].compute_ns == 40_000
    assert slow.finish_ns == pytest.approx(healthy.finish_ns + 10_000, abs=1e-6)
    assert slow.sim["not_folded"].startswith("compute_slowdown makes ranks differ")
    both = {"slowdown_windows": [{"ranks": [1], "factor": 2, "from": "0 us"}, {"ranks": [1], "factor": 1.5}]}
    assert simulate(workload, topology=topology, system=load_system_config(both)).ranks[1].compute_ns == 120_000


def test_a_rank_that_starts_late_delays_what_waits_for_it_by_exactly_its_start() -> None:
    from etsim.network import ring
    from etsim.system.config import load_system_config

    workload, topology = _chain_then_all_reduce([10]), ring(4, 50.0, 500.0)
    healthy = simulate(workload, topology=topology, model="analytical")
    system = load_system_config({"rank_start": {3: "7 us"}})
    late = simulate(workload, topology=topology, model="analytical", system=system)
    assert late.finish_ns == pytest.approx(healthy.finish_ns + 7_000, abs=1e-6)
    assert [r.compute_ns for r in late.ranks] == [10_000] * 4  # waiting to start is neither compute nor communication


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"rank_start": {1: "-1 us"}}, r"rank_start\.1: time '-1 us' is negative"),
        ({"rank_start": [1]}, r"rank_start: expected a mapping of rank to a time"),
        ({"slowdown_windows": [{"ranks": [1]}]}, r"slowdown_windows\[0\]: expected \{ranks"),
        ({"slowdown_windows": [{"ranks": [1], "factor": 0}]}, r"slowdown_windows\[0\]\.factor: expected a finite"),
        ({"slowdown_windows": [{"ranks": [1], "factor": 2, "from": "2 us", "until": "1 us"}]}, r"until must come"),
        ({"slowdown_windows": [{"ranks": ["x"], "factor": 2}]}, r"slowdown_windows\[0\]\.ranks: 'x' is not a rank"),
    ],
)
def test_bad_windows_and_starts_are_named(value, message) -> None:
    from etsim.errors import ConfigError
    from etsim.system.config import load_system_config

    with pytest.raises(ConfigError, match=message):
        load_system_config(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1: 0}, r"compute_slowdown\.1: expected a finite factor > 0"),
        ({1: float("inf")}, r"compute_slowdown\.1: expected a finite factor > 0"),
        ({"x": 2}, r"compute_slowdown: 'x' is not a rank"),
        ([2], r"compute_slowdown: expected a mapping of rank to a slowdown factor"),
    ],
)
def test_bad_slowdowns_are_named(tmp_path, value, message) -> None:
    import yaml

    from etsim.errors import ConfigError
    from etsim.system.config import load_system_config

    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"compute_slowdown": value}))
    with pytest.raises(ConfigError, match=message):
        load_system_config(tmp_path / "s.yaml")


def test_a_slowdown_of_a_rank_the_workload_lacks_is_refused() -> None:
    from etsim.chakra import CollectiveType, Workload
    from etsim.errors import ConfigError
    from etsim.network import ring
    from etsim.producers import collective_workload
    from etsim.system.config import SystemConfig

    with pytest.raises(ConfigError, match=r"compute_slowdown: rank 9 is not a rank of the workload \(ranks 0\.\.3\)"):
        simulate(
            Workload(collective_workload(CollectiveType.ALL_REDUCE, 1024, 4)),
            topology=ring(4, 50.0, 500.0),
            system=SystemConfig(compute_slowdown={9: 2.0}),
        )


def test_a_rank_a_system_file_names_and_the_workload_lacks_names_the_file(tmp_path: Path) -> None:
    from etsim.network import ring
    from etsim.producers import collective_workload

    (tmp_path / "sys.yaml").write_text("rank_fail: {7: 1 us}\n")
    with pytest.raises(
        ConfigError, match=rf"^{tmp_path / 'sys.yaml'}: rank_fail: rank 7 is not a rank of the workload"
    ):
        simulate(
            Workload(collective_workload(CollectiveType.ALL_REDUCE, 1024, 4)),
            topology=ring(4, 50.0, 500.0),
            system=load_system_config(tmp_path / "sys.yaml"),
        )


def test_compute_jitter_draws_the_documented_factors_deterministically() -> None:
    """compute_jitter σ: node j of rank r takes default_rng([seed, r]).lognormal(−σ²/2, σ)[j] times its duration."""
    import numpy as np

    from etsim.network import ring
    from etsim.system.config import SystemConfig

    workload, topology = _chain_then_all_reduce([10] * 50), ring(4, 50.0, 500.0)
    traces = workload.traces
    sigma, seed = 0.2, 7
    run = simulate(workload, topology=topology, system=SystemConfig(compute_jitter=sigma, jitter_seed=seed))
    for rank in range(4):
        factors = np.random.default_rng([seed, rank]).lognormal(-sigma * sigma / 2, sigma, traces[rank].num_nodes)
        expected = sum(10_000.0 * factors[j] for j in range(50))  # the compute nodes are positions 0..49
        assert run.ranks[rank].compute_ns == pytest.approx(expected, rel=1e-12)
    again = simulate(workload, topology=topology, system=SystemConfig(compute_jitter=sigma, jitter_seed=seed))
    assert again.finish_ns == run.finish_ns and again.ranks == run.ranks  # deterministic, to the bit
    other = simulate(workload, topology=topology, system=SystemConfig(compute_jitter=sigma, jitter_seed=seed + 1))
    assert other.finish_ns != run.finish_ns
    assert run.sim["not_folded"].startswith("compute_jitter draws different times per rank")
    # mean 1: over 200 nodes the total compute is within a few percent of the jitter-free 2 ms
    assert sum(r.compute_ns for r in run.ranks) == pytest.approx(4 * 50 * 10_000, rel=0.06)


def test_a_compute_delay_adds_its_time_to_every_compute_node_after_the_factor() -> None:
    from etsim.network import ring
    from etsim.system.config import load_system_config

    workload, topology = _chain_then_all_reduce([10, 10, 10]), ring(4, 50.0, 500.0)
    healthy = simulate(workload, topology=topology, model="analytical")
    system = load_system_config({"compute_delay": {1: "2 us"}, "compute_slowdown": {1: 1.5}})
    slow = simulate(workload, topology=topology, model="analytical", system=system)
    assert slow.ranks[1].compute_ns == 3 * (15_000 + 2_000)
    assert slow.finish_ns == pytest.approx(healthy.finish_ns + 3 * (5_000 + 2_000), abs=1e-6)
    assert slow.sim["not_folded"].startswith("compute_slowdown makes ranks differ")


def test_ranks_whose_gpu_fails_stop_and_the_others_finish_as_before() -> None:
    """Groups {0, 1} and {2, 3} each compute and all-reduce three times; 0 and 1 fail at 25 µs."""
    from etsim.chakra import CollectiveType, TraceBuilder
    from etsim.network import ring
    from etsim.system.config import load_system_config

    traces = []
    for rank in range(4):
        b = TraceBuilder(rank)
        last = None
        for k in range(3):
            c = b.comp(f"c{k}", duration_micros=10, deps=[last] if last is not None else [])
            last = b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[c], pg_name="1" if rank < 2 else "2")
        traces.append(b.build(rank=rank))
    from etsim.system.groups import GROUPS_ATTR

    for trace in traces:
        trace.metadata.attr.add(name=GROUPS_ATTR, string_val='{"1": [0, 1], "2": [2, 3]}')
    workload, topology = Workload(traces), ring(4, 50.0, 500.0)
    healthy = simulate(workload, topology=topology, model="analytical")
    system = load_system_config({"rank_fail": {0: "25 us", 1: "25 us"}})
    failed = simulate(workload, topology=topology, model="analytical", system=system)
    assert failed.sim["failed"] == {"0": 25_000.0, "1": 25_000.0}
    assert [r.finish_ns for r in failed.ranks[:2]] == [25_000.0, 25_000.0]
    assert failed.ranks[2:] == healthy.ranks[2:]  # (analytical: the failed pair's traffic takes nothing from them)
    assert sum(1 for c in failed.collectives if c.rank == 0) < sum(1 for c in healthy.collectives if c.rank == 0)
    assert failed.sim["not_folded"] == "rank_fail stops ranks: every rank is simulated"


def test_a_collective_under_way_when_its_gpus_fail_sends_no_step_more() -> None:
    """A ring all-reduce of S on a 4-NPU ring: a step is LAT + (S/4)/B. Every rank fails 1.5 steps in: the first
    step's messages are delivered, the second's stop with what had left the GPU (half a step at B: the rest was
    sent on, 2 · 4 · S/4 bytes, before the flow model stopped a failed GPU's sends), no later step is sent, no call
    is reported done, and every rank ends at the failure (it used to run all 2(n - 1) steps: 6 · 4 · S/4 bytes)."""
    from etsim.network import ring
    from etsim.producers import collective_workload

    size, bandwidth, latency = 8 << 20, 50.0, 500.0
    step = latency + size / 4 / bandwidth
    fail = {"rank_fail": {r: f"{1.5 * step} ns" for r in range(4)}, "algorithms": {"default": "ring"}}
    workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, size, 4))
    result = simulate(workload, topology=ring(4, bandwidth, latency), system=load_system_config(fail))
    assert sum(link["bytes"] for link in result.links) == 4 * size / 4 + 4 * (step / 2) * bandwidth
    assert result.collectives == [] and [r.finish_ns for r in result.ranks] == [1.5 * step] * 4
    # One GPU alone failing: its peers wait in the call for ever, and the run says on whom.
    fail["rank_fail"] = {0: f"{1.5 * step} ns"}
    with pytest.raises(
        DeadlockError, match=r"3 of 4 ranks stuck \(ranks \[1, 2, 3\]\); likely cause: ranks \[0\] failed"
    ):
        simulate(workload, topology=ring(4, bandwidth, latency), system=load_system_config(fail))


def test_simulate_reads_a_workload_and_a_system_given_as_paths_and_names_a_wrong_type(tmp_path: Path) -> None:
    from etsim.chakra.io import load_workload
    from etsim.producers import collective_workload

    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4), tmp_path / "ar")
    (tmp_path / "sys.yaml").write_text("algorithms: {all_reduce: direct}\n")
    by_path = simulate(str(tmp_path / "ar"), system=str(tmp_path / "sys.yaml"))
    loaded = simulate(load_workload(str(tmp_path / "ar")), system=load_system_config(str(tmp_path / "sys.yaml")))
    assert by_path.finish_ns == loaded.finish_ns and by_path.collectives[0].algorithm == "direct"
    with pytest.raises(TypeError, match="workload: expected a Workload or a trace path, got int"):
        simulate(3)  # type: ignore[arg-type]
    # Mappings as the YAML files hold them (a dict was refused, a topology dict failed deep in the run).
    ring4 = {"kind": "ring", "npus": 4, "bandwidth": "50 GB/s", "latency": "500 ns"}
    (tmp_path / "ring4.yaml").write_text("kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    as_mappings = simulate(str(tmp_path / "ar"), system={"algorithms": {"all_reduce": "direct"}}, topology=ring4)
    as_files = simulate(str(tmp_path / "ar"), system=str(tmp_path / "sys.yaml"), topology=str(tmp_path / "ring4.yaml"))
    assert as_mappings.finish_ns == as_files.finish_ns and as_mappings.collectives[0].algorithm == "direct"
    with pytest.raises(TypeError, match="system: expected a SystemConfig, a mapping or a YAML path, got list"):
        simulate(str(tmp_path / "ar"), system=[{"chunks": 2}])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="topology: expected a Topology, a mapping or a YAML path, got int"):
        simulate(str(tmp_path / "ar"), topology=8)  # type: ignore[arg-type]


def test_the_group_report_leaves_the_fast_path_on_and_equals_the_event_path() -> None:
    """Two groups of 64 ranks each run a ring all-reduce: the per-group report records the workload's nodes only,
    so the collectives go in bulk, and every figure equals the event path's (fast path off)."""
    from etsim.chakra import CollectiveType, TraceBuilder
    from etsim.network import switch
    from etsim.simulation import DEFAULT_REPORTS, Simulation
    from etsim.system.config import SystemConfig
    from etsim.system.groups import GROUPS_ATTR

    traces = []
    for rank in range(128):
        b = TraceBuilder(rank)
        c = b.comp("c", duration_micros=10 + rank % 3)
        b.collective(CollectiveType.ALL_REDUCE, 4 << 20, deps=[c], pg_name="1" if rank < 64 else "2")
        traces.append(b.build(rank=rank))
    for trace in traces:
        trace.metadata.attr.add(name=GROUPS_ATTR, string_val=f'{{"1": {list(range(64))}, "2": {list(range(64, 128))}}}')
    workload = Workload(traces)
    ring = SystemConfig().with_overrides(algorithms={"all_reduce": "ring"})
    topology = switch(128, 50.0, 500.0)
    runs = [
        Simulation(workload, topology=topology, model="flow", system=system, reports=DEFAULT_REPORTS).run()
        for system in (ring, ring.with_overrides(fast_path=False))
    ]
    bulk, walked = runs
    assert bulk.sim["bulk_parts"] > 0 and walked.sim["bulk_parts"] == 0
    assert bulk.sim["events"] < walked.sim["events"]
    assert bulk.groups and [g["group"] for g in bulk.groups] == ["1", "2"]
    a, b = bulk.to_dict(), walked.to_dict()
    a.pop("sim"), b.pop("sim")
    assert a == b


def test_reports_are_checked_as_built() -> None:
    # Reports(message_limit=-1) and Reports(groups="no") were accepted in silence ("no" is true).
    from etsim.errors import ConfigError
    from etsim.simulation.phases import Reports

    with pytest.raises(ConfigError, match=r"Reports\.message_limit: expected None or a count >= 0, got -1"):
        Reports(message_limit=-1)
    with pytest.raises(ConfigError, match=r"Reports\.groups: expected true or false, got 'no'"):
        Reports(groups="no")  # type: ignore[arg-type]
    assert Reports(message_limit=0).message_limit == 0
