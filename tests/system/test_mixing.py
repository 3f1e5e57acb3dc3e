"""Concurrent collectives with different algorithms on the same ranks and links: correct, no deadlock."""

from __future__ import annotations

import json

import pytest

from etsim.chakra import CollectiveType, TraceBuilder, Workload
from etsim.network import ring
from etsim.producers import collective_workload
from etsim.simulation import simulate
from etsim.system.config import load_system_config

B, L = 50.0, 500.0
AR, RS = CollectiveType.ALL_REDUCE, CollectiveType.REDUCE_SCATTER
MiB = 1 << 20
UNLIMITED = {"resources": {"comm_streams": 0}}


def _table(*rules: dict) -> object:  # type: ignore[type-arg]
    return load_system_config({"algorithms": list(rules), **UNLIMITED})


def test_two_concurrent_collectives_with_different_algorithms_share_links() -> None:
    """An all-reduce (ring) and a reduce-scatter (direct) issued together on all ranks of one ring."""
    p, n = 4, 8 * MiB
    config = _table(
        {"collective": "all_reduce", "algorithm": "ring"},
        {"collective": "reduce_scatter", "algorithm": "direct"},
    )
    builders = [TraceBuilder() for _ in range(p)]
    for b in builders:
        b.collective(AR, n)
        b.collective(RS, n)
    topo = ring(p, B, L)
    both = simulate(
        Workload([b.build(rank=r) for r, b in enumerate(builders)]), topology=topo, model="link", system=config
    )
    alone = {
        c: simulate(Workload(collective_workload(c, n, p)), topology=topo, model="link", system=config)
        for c in (AR, RS)
    }
    assert {(c.type, c.algorithm, c.rule) for c in both.collectives} == {
        ("ALL_REDUCE", "ring", "algorithms[0]"),
        ("REDUCE_SCATTER", "direct", "algorithms[1]"),
    }
    # They ran at the same time (both start at 0) over shared links: slower than either alone (contention),
    # no slower than one after the other, and every message of both was delivered.
    assert all(c.start_ns == 0 for c in both.collectives)
    assert both.finish_ns > max(r.finish_ns for r in alone.values()) * 1.05
    assert both.finish_ns <= sum(r.finish_ns for r in alone.values()) * (1 + 1e-9)
    assert both.network["messages"] == sum(r.network["messages"] for r in alone.values())
    shared = {link["link"] for link in both.links}
    used = [{link["link"] for link in r.links} for r in alone.values()]
    assert used[0] & used[1] and (used[0] & used[1]) <= shared


@pytest.mark.parametrize("opposite_orders", [False, True])
def test_tensor_parallel_all_reduce_overlaps_data_parallel_reduce_scatter(opposite_orders: bool) -> None:
    """TP all-reduces (direct) in groups of 4 overlap DP reduce-scatters (ring) in groups of 2 on 8 ranks.

    Also with odd ranks issuing the DP collective first and one communication op at a time per NPU, so
    that a rank waits in one collective while its TP peers wait in the other: the run still completes.
    """
    groups = {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7], **{str(3 + i): [i, i + 4] for i in range(4)}}
    meta = json.dumps([{"pg_name": k, "ranks": v} for k, v in groups.items()])
    config = load_system_config(
        {
            "algorithms": [
                {"collective": "all_reduce", "group_size": 4, "algorithm": "direct"},
                {"collective": "reduce_scatter", "group_size": 2, "algorithm": "ring"},
            ],
            "resources": {"comm_streams": 1 if opposite_orders else 0},
        }
    )
    builders = [TraceBuilder() for _ in range(8)]
    for r, b in enumerate(builders):
        m = b.node(1, "process_group:init")
        b.nodes[-1].inputs.values = str([meta])
        tp = b.collective(AR, 4 * MiB, deps=[m], pg_name="1" if r < 4 else "2", name="tp")
        dp = b.collective(RS, 16 * MiB, deps=[m], pg_name=str(3 + r % 4), name="dp")
        if opposite_orders and r % 2:
            b.nodes[tp], b.nodes[dp] = b.nodes[dp], b.nodes[tp]  # this rank issues the DP collective first
            b.nodes[tp].id, b.nodes[dp].id = tp, dp
    topo = ring(8, B, L)
    result = simulate(
        Workload([b.build(rank=r) for r, b in enumerate(builders)]), topology=topo, model="link", system=config
    )
    assert len(result.collectives) == 16
    for c in result.collectives:
        if c.type == "ALL_REDUCE":
            assert (c.algorithm, len(c.group)) == ("direct", 4)
        else:
            assert (c.algorithm, len(c.group)) == ("ring", 2)
    tp_end = max(c.end_ns for c in result.collectives if c.type == "ALL_REDUCE")
    dp_start = min(c.start_ns for c in result.collectives if c.type == "REDUCE_SCATTER")
    assert dp_start < tp_end  # they overlapped
