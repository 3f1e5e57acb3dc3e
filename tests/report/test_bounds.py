"""The bandwidth bound of every collective: exact on hand-made records, and a property of every physical model."""

from __future__ import annotations

import random
import warnings

import pytest

from etsim.chakra import CollectiveType, Workload
from etsim.errors import EtsimWarning
from etsim.network import fully_connected, hypercube, mesh, ring, switch, torus
from etsim.producers import collective_workload, data_parallel_workload
from etsim.report.bounds import collective_bound_violations, describe_violations
from etsim.report.result import CollectiveRecord
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

MiB = 1 << 20
B, L = 50.0, 500.0  # 50 GB/s = 50 B/ns


def record(rank: int, start: float, end: float, kind: str = "ALL_REDUCE", size: int = 8 * MiB) -> CollectiveRecord:
    return CollectiveRecord(rank, 3, kind, size, [0, 1, 2, 3], "ring", start, end)


def test_the_bound_of_an_all_reduce_is_the_group_sending_2_n_minus_1_buffers() -> None:
    # Ring of 4: two 50 GB/s links out of each NPU. The group sends 2·3 buffers through 400 GB/s.
    bound = 6 * 8 * MiB / 400
    fast = [record(r, 0.0, bound * 0.99) for r in range(4)]
    (v,) = collective_bound_violations(fast, ring(4, B, L))
    assert v.bound_ns == pytest.approx(bound) and v.group == (0, 1, 2, 3)
    assert "the group must send 48 MiB through 400 GB/s of outgoing links" in v.reason
    exact = [record(r, 0.0, bound) for r in range(4)]
    assert collective_bound_violations(exact, ring(4, B, L)) == []


def test_the_window_runs_from_the_first_start_to_the_last_end() -> None:
    bound = 6 * 8 * MiB / 400
    # Every rank alone is too fast, but the instance spans [0, bound]: no violation.
    staggered = [record(r, r * bound / 4, r * bound / 4 + bound / 4) for r in range(4)]
    assert collective_bound_violations(staggered, ring(4, B, L)) == []


def test_a_lone_rank_bound_uses_its_own_links() -> None:
    # A uni-directional ring: one 50 GB/s link out of each NPU; each rank must send the whole buffer.
    recs = [record(r, 0.0, 10.0) for r in range(4)]
    (v,) = collective_bound_violations(recs, ring(4, B, L, bidirectional=False))
    assert v.bound_ns == pytest.approx(6 * 8 * MiB / 200)


def test_instances_pair_the_kth_call_of_each_member() -> None:
    bound = 6 * 8 * MiB / 400
    recs = [record(r, 0.0, bound) for r in range(4)] + [record(r, bound, bound + 1.0) for r in range(4)]
    (v,) = collective_bound_violations(recs, ring(4, B, L))
    assert (v.start_ns, v.end_ns) == (bound, bound + 1.0)
    # An instance some member never reported is not judged.
    assert collective_bound_violations(recs[:-1], ring(4, B, L)) == []


def test_the_warning_names_the_worst_instance_and_what_to_do() -> None:
    recs = [record(r, 0.0, 1000.0) for r in range(4)] + [record(r, 1000.0, 1100.0) for r in range(4)]
    text = describe_violations(collective_bound_violations(recs, ring(4, B, L)), "analytical", aware=False)
    assert text.startswith("2 collective(s) finished faster than their bytes can cross the links: e.g. all_reduce")
    assert "took 100 ns (from 1 us)" in text and "use --model flow" in text
    assert "a bug in the model" in describe_violations(collective_bound_violations(recs, ring(4, B, L)), "x", True)


TOPOLOGIES = {
    "ring8": lambda: ring(8, B, L),
    "uni_ring8": lambda: ring(8, B, L, bidirectional=False),
    "switch8": lambda: switch(8, B, L),
    "mesh2x4": lambda: mesh([2, 4], B, L),
    "torus2x4": lambda: torus([2, 4], B, L),
    "hypercube8": lambda: hypercube(8, B, L),
    "fully_connected8": lambda: fully_connected(8, B, L),
}
COLLECTIVES = [CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER,
               CollectiveType.ALL_TO_ALL]  # fmt: skip


def _case(seed: int) -> tuple[Workload, str, dict, SystemConfig, str]:
    rng = random.Random(seed)
    topo = rng.choice(sorted(TOPOLOGIES))
    model = rng.choice(["flow", "flow", "link", "link-packets", "analytical", "ideal"])
    options = {"packet_size": "64 KiB"} if model == "link-packets" else {}
    model = model.removesuffix("-packets")
    algo = rng.choice(["ring", "direct", "halving_doubling", "tree"])
    size = rng.choice([64 << 10, 1 * MiB, 4 * MiB])
    if rng.random() < 0.3:
        traces = data_parallel_workload(8, layers=3, grad_bytes=size, fwd_micros=rng.choice([0, 5, 50]), bwd_micros=5)
        collective = "all_reduce"
    else:
        kind = rng.choice(COLLECTIVES)
        traces = collective_workload(kind, size, 8, count=rng.choice([1, 2]))
        collective = kind.name.lower()
    system = SystemConfig(
        algorithms={"default": algo},
        chunks=rng.choice([1, 2, 4]),
        reduction_bandwidth=rng.choice([None, None, 20.0, 200.0]),
        endpoint_delay=rng.choice([0.0, 10.0]),
    )
    return Workload(traces), topo, {"model": model, "model_options": options}, system, f"{collective}/{algo}"


@pytest.mark.parametrize("seed", range(60))
def test_no_collective_beats_its_bound_unless_the_model_ignores_contention_and_says_so(seed: int) -> None:
    workload, topo, model, system, what = _case(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EtsimWarning)
        result = simulate(workload, topology=TOPOLOGIES[topo](), system=system, **model)
    violations = collective_bound_violations(result.collectives, TOPOLOGIES[topo]())
    named = [w for w in result.warnings if "finished faster than their bytes can cross the links" in w]
    if model["model"] in ("analytical", "ideal"):
        assert bool(violations) == bool(named), (topo, what, result.warnings)
    else:
        assert violations == [], (topo, model, what, violations[:1])
        assert named == []
