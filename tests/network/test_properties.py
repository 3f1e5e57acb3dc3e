"""Properties every network model keeps, and routes between every pair of every shipped topology."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from etsim.network import build_model, load_network, mesh, switch, torus

TOPOLOGIES = sorted((Path(__file__).resolve().parents[2] / "topologies").glob("*.yaml"))
SMALL = [p for p in TOPOLOGIES if load_network(p).topology.npus <= 64]


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.name)
def test_every_pair_routes_on_shipped_topologies(path: Path) -> None:
    topo = load_network(path).topology
    model = build_model(simpy.Environment(), topo, "analytical")
    links = topo.links
    for src in range(topo.npus):
        for dst in range(topo.npus):
            route = model.route(src, dst)
            if src == dst:
                assert route == []
                continue
            # A route is a connected chain of directed links from src to dst.
            assert links[route[0]][0] == src and links[route[-1]][1] == dst
            for a, b in itertools.pairwise(route):
                assert links[a][1] == links[b][0]


def test_large_shipped_topologies_route_a_sample() -> None:
    for path in TOPOLOGIES:
        topo = load_network(path).topology
        if topo.npus <= 64:
            continue
        model = build_model(simpy.Environment(), topo, "analytical")
        for src, dst in [(0, topo.npus - 1), (topo.npus // 2, 1), (topo.npus - 1, 0)]:
            route = model.route(src, dst)
            assert topo.links[route[0]][0] == src and topo.links[route[-1]][1] == dst


TOPOS = [mesh((3, 3), 10.0, 100.0), torus((2, 2, 2), 25.0, 50.0), switch(6, 40.0, 300.0)]
messages = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1e4),  # send time
        st.integers(min_value=0, max_value=5),  # src
        st.integers(min_value=0, max_value=5),  # dst
        st.integers(min_value=0, max_value=10**5),  # bytes
    ),
    min_size=1,
    max_size=12,
)


def deliver(model_name: str, topo_index: int, msgs: list[tuple[float, int, int, int]], **options: object):  # type: ignore[no-untyped-def]
    env = simpy.Environment()
    model = build_model(env, TOPOS[topo_index], model_name, options)
    arrivals: dict[int, float] = {}
    for k, (t, src, dst, size) in enumerate(msgs):

        def send(_e: object, k: int = k, src: int = src, dst: int = dst, size: int = size) -> None:
            model.transfer(src, dst, size).callbacks.append(lambda _d: arrivals.__setitem__(k, env.now))

        env.timeout(t).callbacks.append(send)
    env.run()
    return model, arrivals


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["analytical", "link"]), topo=st.integers(0, 2), msgs=messages)
def test_delivery_never_before_latency_plus_serialisation(name: str, topo: int, msgs) -> None:  # type: ignore[no-untyped-def]
    model, arrivals = deliver(name, topo, msgs)
    t = TOPOS[topo]
    for k, (start, src, dst, size) in enumerate(msgs):
        route = model.route(src, dst)
        if not route:
            assert arrivals[k] == start
            continue
        latency = sum(t.latencies[link] for link in route)
        bottleneck = min(t.bandwidths[link] for link in route)
        assert arrivals[k] >= start + latency + size / bottleneck - 1e-6


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(st.floats(min_value=0, max_value=1e4), min_size=2, max_size=10),
    sizes=st.lists(st.integers(min_value=1, max_value=10**5), min_size=10, max_size=10),
)
def test_link_model_keeps_fifo_order_per_link(times: list[float], sizes: list[int]) -> None:
    # Messages over the same single link leave and arrive in the order they were sent.
    msgs = [(t, 0, 1, sizes[k]) for k, t in enumerate(times)]
    _, arrivals = deliver("link", 0, msgs)
    order = sorted(range(len(msgs)), key=lambda k: (msgs[k][0], k))
    arrival_times = [arrivals[k] for k in order]
    assert arrival_times == sorted(arrival_times)
