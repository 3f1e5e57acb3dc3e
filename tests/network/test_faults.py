"""Links that change during a run: LinkChange, the router around failed links, the flow model re-sharing flows."""

from __future__ import annotations

import pytest

from etsim.chakra import TraceBuilder, Workload
from etsim.errors import ConfigError
from etsim.network import NetworkConfig, torus
from etsim.network.faults import AvoidingRouter, LinkChange
from etsim.network.routing import make_router
from etsim.simulation import simulate

S, B, L = 8 * 2**20, 50.0, 500.0


def _one_message() -> Workload:
    """NPU 0 sends S bytes to NPU 1 (the other NPUs idle)."""
    traces = []
    for rank in range(16):
        b = TraceBuilder(rank)
        if rank == 0:
            b.send(1, S)
        elif rank == 1:
            b.recv(0, S)
        traces.append(b.build(rank=rank))
    return Workload(traces)


def _run(*changes: LinkChange, model: str = "flow") -> float:
    net = NetworkConfig(torus([4, 4], B, L), model, changes=changes)
    return simulate(_one_message(), topology=net).finish_ns


def test_a_link_at_half_rate_from_t_on_reshares_the_message_in_flight() -> None:
    assert _run() == pytest.approx(L + S / B, abs=1e-6)
    assert _run(LinkChange(100_000.0, (0, 1), 0.5)) == pytest.approx(
        100_000 + (S - 100_000 * B) / (B / 2) + L, abs=1e-6
    )


def test_a_failed_link_sends_the_rest_around_it_and_a_restored_one_carries_again() -> None:
    assert _run(LinkChange(100_000.0, (0, 1), 0.0)) == pytest.approx(100_000 + (S - 100_000 * B) / B + 3 * L, abs=1e-6)
    # Failed before the message and restored after it started: it went around, and stays on its detour.
    late = _run(LinkChange(0.5, (0, 1), 0.0), LinkChange(1.0, (0, 1), 1.0))
    assert late == pytest.approx(0.5 + (S - 0.5 * B) / B + 3 * L, abs=1e-6)


def test_the_router_avoids_failed_links_and_keeps_the_other_routes() -> None:
    topo = torus([4, 4], B, L)
    base = make_router("default", topo)
    down = {topo.link_ids[0, 1], topo.link_ids[1, 0]}
    router = AvoidingRouter(base, down)
    assert router.lookup(2, 3) == base.lookup(2, 3)
    around = router.lookup(0, 1)
    assert len(around) == 3 and not down.intersection(around)


def test_changes_are_checked_before_the_run() -> None:
    with pytest.raises(ConfigError, match=r"link \[0, 5\]: .* has no link from 0 to 5"):
        _run(LinkChange(1.0, (0, 5), 0.5))
    with pytest.raises(ConfigError, match="network model 'analytical' does not model links changing during a run"):
        _run(LinkChange(1.0, (0, 1), 0.5), model="analytical")
