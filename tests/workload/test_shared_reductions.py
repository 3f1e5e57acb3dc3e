"""Reductions on one NPU share its reduction bandwidth: across chunks, collectives and streams."""

from __future__ import annotations

import itertools
import json

import pytest

from etsim.chakra import CollectiveType, TraceBuilder, Workload
from etsim.network import ring
from etsim.producers import collective_workload
from etsim.report.critical_path import critical_path
from etsim.report.record import RunRecorder
from etsim.simulation import simulate
from etsim.system.config import Resources, SystemConfig

MiB = 1 << 20
B, L = 50.0, 500.0
AR = CollectiveType.ALL_REDUCE


def _one_all_reduce(**config: object) -> float:
    workload = Workload(collective_workload(AR, MiB, 8))
    return simulate(workload, topology=ring(8, B, L), system=SystemConfig(**config)).finish_ns  # type: ignore[arg-type]


def test_chunks_of_one_all_reduce_take_turns_at_the_reduction_unit() -> None:
    # Each rank reduces 7/8 MiB at 1 GB/s: no schedule can end before 917.504 us.
    bound = 7 / 8 * MiB / 1.0
    shared = _one_all_reduce(chunks=4, reduction_bandwidth=1.0)
    assert shared >= bound
    # 28 reductions of 32 KiB back to back on every rank, plus the chunks' last all-gather steps.
    assert shared == pytest.approx(928713.0, abs=0.5)
    # Each at the whole bandwidth, as before: four chunks reduce at once, 4x faster than the NPU can.
    alone = _one_all_reduce(chunks=4, reduction_bandwidth=1.0, shared_reductions=False)
    assert alone < bound / 3
    # One chunk: its reductions never overlap, so sharing changes nothing (the ring closed form).
    t = MiB / 8 / B
    ring_closed_form = 2 * 7 * (L + t) + 7 * (MiB / 8) / 1.0
    assert _one_all_reduce(reduction_bandwidth=1.0) == pytest.approx(ring_closed_form, rel=1e-12)
    assert _one_all_reduce(reduction_bandwidth=1.0, shared_reductions=False) == pytest.approx(ring_closed_form)


def _concurrent_all_reduces(count: int, size: int) -> Workload:
    traces = []
    for r in range(8):
        b = TraceBuilder()
        for k in range(count):
            b.collective(AR, size, name=f"ar{k}")
        traces.append(b.build(rank=r))
    return Workload(traces)


def test_concurrent_collectives_share_each_npus_reduction_bandwidth() -> None:
    workload = _concurrent_all_reduces(8, 16 * MiB)
    streams = Resources(comm_streams=8)
    free = simulate(workload, topology=ring(8, B, L), system=SystemConfig(resources=streams)).finish_ns
    priced = SystemConfig(resources=streams, reduction_bandwidth=10.0)
    shared = simulate(workload, topology=ring(8, B, L), system=priced).finish_ns
    # Every rank reduces 8 x 7/8 x 16 MiB at 10 GB/s.
    assert shared >= 8 * 7 / 8 * 16 * MiB / 10.0 > free
    apart = SystemConfig(resources=streams, reduction_bandwidth=10.0, shared_reductions=False)
    assert simulate(workload, topology=ring(8, B, L), system=apart).finish_ns < shared


@pytest.mark.parametrize("model", ["flow", "link", "analytical"])
def test_the_fast_path_declines_shared_reductions_and_agrees_with_the_event_path(model: str) -> None:
    workload = Workload(collective_workload(AR, 4 * MiB, 8, count=2))
    results = []
    for fast in (True, False):
        config = SystemConfig(chunks=2, reduction_bandwidth=20.0, fast_path=fast)
        result = simulate(workload, topology=ring(8, B, L), model=model, system=config)
        data = json.loads(result.to_json())
        data["sim"] = {}
        results.append(json.dumps(data, sort_keys=True))
    assert results[0] == results[1]


def test_the_critical_path_follows_the_reductions_a_reduction_waited_for() -> None:
    rec = RunRecorder(messages=True)
    workload = Workload(collective_workload(AR, MiB, 8))
    result = simulate(workload, topology=ring(8, B, L), system=SystemConfig(chunks=4, reduction_bandwidth=1.0),
                      observer=rec)  # fmt: skip
    cp = critical_path(rec)
    segs = cp["segments"]
    assert segs[0]["start_ns"] == 0.0 and segs[-1]["end_ns"] == result.finish_ns
    assert all(a["end_ns"] == b["start_ns"] for a, b in itertools.pairwise(segs))
    assert not [s for s in segs if "unexplained" in s["detail"]]
    reductions = [s for s in segs if s["detail"] == "ring reduction"]
    # All 28 reductions of the rank that finished last are on the path, back to back, 32 KiB at 1 GB/s each.
    assert cp["totals"]["compute_ns"] == pytest.approx(28 * 32768.0)
    assert len(reductions) >= 28
