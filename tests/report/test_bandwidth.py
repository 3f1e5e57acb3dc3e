"""nccl-tests algorithm and bus bandwidth (shared/reference/cost-models.md §7) and link utilisation."""

from __future__ import annotations

import json

import pytest

from etsim.chakra import CollectiveType, TraceBuilder, Workload
from etsim.network import ring
from etsim.producers import collective_workload
from etsim.report.bandwidth import bandwidths, bus_factor, nccl_bytes
from etsim.simulation import simulate

B, L = 50.0, 500.0


@pytest.mark.parametrize("size", [1 << 20, 1 << 26, 1 << 32])
def test_ring_all_reduce_bus_bandwidth_is_the_closed_form_and_tends_to_the_link_bandwidth(size: int) -> None:
    p = 4
    result = simulate(Workload(collective_workload(CollectiveType.ALL_REDUCE, size, p)), topology=ring(p, B, L))
    t = 2 * (p - 1) * (L + size / p / B)  # alpha-beta closed form of the ring all-reduce
    for c in result.collectives:
        algbw, busbw = c.bandwidths()
        assert algbw == pytest.approx(size / t, rel=1e-12)
        assert busbw == pytest.approx(2 * (p - 1) / p * size / t, rel=1e-12)
        # busbw = n / (p L + n / B): the link bandwidth as the size grows
        assert busbw == pytest.approx(size / (p * L + size / B), rel=1e-12)
    doc = json.loads(result.to_json())["collectives"][0]
    assert doc["busbw_GBps"] == pytest.approx(size / (p * L + size / B), rel=1e-12)
    if size == 1 << 32:
        assert abs(doc["busbw_GBps"] - B) / B < 1e-3


def test_factors_and_sizes_follow_nccl_tests() -> None:
    n = 8
    assert bus_factor("ALL_REDUCE", n) == 2 * 7 / 8
    for c in ("REDUCE_SCATTER", "ALL_GATHER", "ALL_TO_ALL"):
        assert bus_factor(c, n) == 7 / 8
    assert bus_factor("BROADCAST", n) == bus_factor("REDUCE", n) == 1.0
    # etsim's all-gather comm_size is the per-rank input; nccl-tests counts the whole output
    assert nccl_bytes("ALL_GATHER", 1000, n) == 8000 and nccl_bytes("REDUCE_SCATTER", 1000, n) == 1000


def test_no_number_where_the_figure_means_nothing() -> None:
    assert bandwidths("ALL_REDUCE", 1000, 1, 10.0) == (None, None)  # one rank: nothing moved
    assert bandwidths("ALL_REDUCE", 1000, 4, 0.0) == (None, None)  # no time
    assert bandwidths("BARRIER", 0, 4, 10.0) == (None, None)  # not defined by nccl-tests
    assert bandwidths("GATHER", 1000, 4, 10.0) == (None, None)


def test_link_utilisation_is_bytes_over_bandwidth_over_finish() -> None:
    """One message of S bytes over one link: busy S/B, finish L + S/B."""
    size = 2_000_000
    traces = []
    for r in range(2):
        b = TraceBuilder()
        if r == 0:
            b.send(1, size)
        else:
            b.recv(0, size)
        traces.append(b.build(rank=r))
    result = simulate(Workload(traces), topology=ring(2, B, L))
    (link,) = json.loads(result.to_json())["links"]
    assert result.finish_ns == L + size / B
    assert link["busy_ns"] == size / B and link["bandwidth_GBps"] == B
    assert link["utilisation"] == size / B / (L + size / B) == link["bytes"] / link["bandwidth_GBps"] / result.finish_ns
    assert "busiest links" in result.table() and "98.8 %" in result.table()
