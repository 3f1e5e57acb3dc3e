"""Physical bounds hold for random collectives, topologies and native algorithms (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etsim.chakra import CollectiveType, Workload
from etsim.network import fully_connected, mesh, ring, switch, torus
from etsim.producers import collective_workload
from etsim.simulation import simulate
from etsim.system.algorithms import ALGORITHMS
from etsim.system.config import SystemConfig

C = CollectiveType
COLLECTIVES = [C.ALL_REDUCE, C.ALL_GATHER, C.REDUCE_SCATTER, C.ALL_TO_ALL, C.BROADCAST, C.REDUCE, C.GATHER, C.SCATTER]
TOPOLOGIES = {
    "ring": lambda n: ring(n, 50.0, 300.0),
    "switch": lambda n: switch(n, 25.0, 100.0),
    "fully_connected": lambda n: fully_connected(n, 10.0, 1000.0),
    "mesh": lambda n: mesh([2, n // 2], 40.0, 200.0),
    "torus": lambda n: torus([2, n // 2], 40.0, 200.0),
}


@st.composite
def runs(draw: st.DrawFn) -> tuple[CollectiveType, int, int, str, str, int]:
    collective = draw(st.sampled_from(COLLECTIVES))
    topo = draw(st.sampled_from(sorted(TOPOLOGIES)))
    n = draw(st.sampled_from([4, 6, 8] if topo in ("mesh", "torus") else [2, 4, 6, 8]))
    names = [
        name
        for name in ("ring", "direct", "tree", "halving_doubling", "hierarchical")
        if ALGORITHMS.get(name)().supports(collective, n) is None
    ]
    algo = draw(st.sampled_from(names))
    size = draw(st.integers(min_value=n * 4, max_value=1 << 22))
    chunks = draw(st.integers(min_value=1, max_value=3))
    return collective, n, size, algo, topo, chunks


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_congestion_aware_runs_never_beat_the_busiest_link(case: tuple[C, int, int, str, str, int]) -> None:
    collective, n, size, algo, topo_name, chunks = case
    topo = TOPOLOGIES[topo_name](n)
    workload = Workload(collective_workload(collective, size, n))
    result = simulate(workload, topology=topo, system=SystemConfig(algorithms={"default": algo}, chunks=chunks))
    assert result.warnings == []
    bandwidth = dict(enumerate(topo.bandwidths))
    for link in result.links:
        # what the link had to serialise, from its bytes alone, fits in the run
        assert link["bytes"] / bandwidth[link["link"]] <= result.finish_ns * (1 + 1e-9), link
        assert link["busy_ns"] == pytest.approx(link["bytes"] / bandwidth[link["link"]], rel=1e-9)
    # and every message's bytes crossed every link of its route: nothing was lost in the accounting
    assert sum(link["bytes"] for link in result.links) >= result.network["bytes"] * (1 - 1e-9)
