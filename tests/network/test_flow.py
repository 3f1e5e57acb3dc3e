"""The ``flow`` model: cut-through flows with max-min fair shares, against closed forms and a brute-force reference."""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from etsim import allowing_plugins
from etsim.chakra import CollectiveType, Workload
from etsim.network import build_model, graph, mesh, ring, switch, torus
from etsim.network.faults import AvoidingRouter
from etsim.network.models.flow import FlowNetwork
from etsim.network.routing import make_router
from etsim.network.scheduling import CountingEnvironment
from etsim.network.topology import Topology
from etsim.producers import collective_workload
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

MiB = 1 << 20
REL = 1e-12  # float tolerance where the model's association differs from the closed form's


def deliveries(topology: Topology, messages: Sequence[tuple[float, int, int, float]]) -> list[float]:
    """Send ``(start, src, dst, size)`` messages through a ``flow`` model; their delivery times."""
    return sent(FlowNetwork, topology, messages)[0]


def sent(
    cls: type[FlowNetwork], topology: Topology, messages: Sequence[tuple[float, int, int, float]]
) -> tuple[list[float], FlowNetwork]:
    """Send ``(start, src, dst, size)`` messages through a *cls* model; their delivery times, and the model."""
    env = CountingEnvironment()
    model = cls(env, topology)
    model.setup()
    got: list[float] = [float("nan")] * len(messages)

    def send(i: int, src: int, dst: int, size: float) -> None:
        model.transfer(src, dst, size).callbacks.append(lambda _e: got.__setitem__(i, env.now))

    for i, (start, src, dst, size) in enumerate(messages):
        env.timeout(start).callbacks.append(lambda _e, i=i, s=src, d=dst, n=size: send(i, s, d, n))
    env.run()
    return got, model


def line(bandwidths: Sequence[float], latencies: Sequence[float]) -> Topology:
    """NPUs 0 … k on a line, link i → i+1 of the given bandwidth (B/ns) and latency (ns), both directions."""
    links = [
        {"src": i, "dst": i + 1, "bandwidth": b, "latency": lat}  # bidirectional: both directions
        for i, (b, lat) in enumerate(zip(bandwidths, latencies, strict=True))
    ]
    return graph(len(bandwidths) + 1, links)


def test_a_lone_message_pays_latency_per_hop_once_and_drains_at_the_bottleneck() -> None:
    topo = line([50.0, 20.0, 80.0], [100.0, 250.0, 7.0])
    (t,) = deliveries(topo, [(0.0, 0, 3, 3 * MiB)])
    assert t == pytest.approx(100.0 + 250.0 + 7.0 + 3 * MiB / 20.0, rel=REL)
    # store-and-forward would pay every hop's bandwidth term: 3 MiB / 50 + 3 MiB / 20 + 3 MiB / 80 + latencies
    (later,) = deliveries(topo, [(1000.0, 3, 0, 3 * MiB)])
    assert later == pytest.approx(1000.0 + 357.0 + 3 * MiB / 20.0, rel=REL)


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_k_equal_messages_on_one_link_each_take_k_times_as_long(k: int) -> None:
    # k senders into one switch downlink: each flow crosses its own uplink and the shared downlink.
    topo = switch(8, 50.0, 500.0)
    times = deliveries(topo, [(0.0, src, 7, MiB) for src in range(k)])
    assert times == pytest.approx([2 * 500.0 + k * MiB / 50.0] * k, rel=REL)
    # k messages from one NPU over its one link (a ring neighbour) share that link the same way: one class of k
    times, model = sent(FlowNetwork, ring(8, 50.0, 500.0), [(0.0, 0, 1, MiB)] * k)
    assert times == pytest.approx([500.0 + k * MiB / 50.0] * k, rel=REL)
    assert len(model._f_route) == 1 and model.link_stats()[model.route(0, 1)[0]].messages == k


def test_the_textbook_max_min_example() -> None:
    """A long flow across two links, a short flow on each: the tight link fixes two shares, the rest goes to the
    other flow (capacities 10 and 4 B/ns: rates 2, 2 and 8)."""
    topo = line([10.0, 4.0], [0.0, 0.0])
    long, short1, short2 = deliveries(topo, [(0.0, 0, 2, 20.0), (0.0, 0, 1, 80.0), (0.0, 1, 2, 40.0)])
    # long: 20 B at 2 B/ns → 10; short1: 80 B at 8 → 10; short2: 20 B at 2 until 10, then 20 B alone at 4 → 15.
    assert (long, short1, short2) == pytest.approx((10.0, 10.0, 15.0), rel=REL)


def test_a_flow_that_joins_later_shares_from_then_on() -> None:
    s, b, x = 1000.0, 10.0, 30.0
    first, second = deliveries(ring(4, b, 0.0), [(0.0, 0, 1, s), (x, 0, 1, s)])
    # alone for x, then b/2 each: the first has s - b·x left and ends at 2s/b - x; the second ends at 2s/b.
    assert (first, second) == pytest.approx((2 * s / b - x, 2 * s / b), rel=REL)


def test_zero_bytes_take_the_latencies_and_a_message_to_itself_takes_nothing() -> None:
    topo = line([50.0, 50.0], [100.0, 30.0])
    assert deliveries(topo, [(5.0, 0, 2, 0.0), (5.0, 1, 1, MiB)]) == [135.0, 5.0]


def test_link_statistics_are_bytes_their_time_and_messages() -> None:
    env = simpy.Environment()
    model = build_model(env, ring(4, 50.0, 500.0), "flow")
    for _ in range(3):
        model.transfer(0, 2, MiB)
    env.run()
    used = [s for s in model.link_stats() if s.bytes]
    assert [(s.src, s.dst) for s in used] == [(0, 1), (1, 2)]
    assert all(s.bytes == 3 * MiB and s.busy == 3 * MiB / 50.0 and s.messages == 3 for s in used)


def _reference(messages: list[tuple[float, tuple[int, ...], float]], topo: Topology) -> list[float]:
    """A fluid max-min network recomputed from scratch at every start and end: slow, and plainly right."""
    caps = dict(enumerate(topo.bandwidths))
    order = sorted(range(len(messages)), key=lambda i: messages[i][0])
    left: dict[int, float] = {}
    out = [0.0] * len(messages)
    t = 0.0
    while order or left:
        ids = list(left)
        rates: dict[int, float] = {}
        free = dict(caps)
        while len(rates) < len(ids):
            share, link = min(
                (free[lk] / n, lk)
                for lk in caps
                if (n := sum(1 for i in ids if i not in rates and lk in messages[i][1]))
            )
            for i in ids:
                if i not in rates and link in messages[i][1]:
                    rates[i] = share
                    for other in messages[i][1]:
                        free[other] -= share
        ends = {i: t + left[i] / rates[i] for i in ids}
        nxt = min([messages[order[0]][0]] if order else [float("inf")])
        nxt = min(nxt, min(ends.values(), default=float("inf")))
        for i in ids:
            left[i] -= rates[i] * (nxt - t)
        t = nxt
        for i in ids:
            if ends[i] <= t * (1 + 1e-12):
                del left[i]
                out[i] = t + sum(topo.latencies[lk] for lk in messages[i][1])
        while order and messages[order[0]][0] <= t:
            i = order.pop(0)
            if messages[i][2]:
                left[i] = messages[i][2]
            else:
                out[i] = t + sum(topo.latencies[lk] for lk in messages[i][1])
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_model_equals_a_brute_force_fluid_reference(seed: int) -> None:
    rng = random.Random(seed)
    topo = rng.choice([ring(6, 50.0, 100.0), switch(5, 40.0, 50.0), mesh([3, 3], 25.0, 10.0), torus([3, 2], 7.0, 0.0)])
    messages = []
    for _ in range(rng.randint(1, 12)):
        src, dst = rng.sample(range(topo.npus), 2)
        start = float(rng.choice([0, 0, 100, 250, 1000]))
        messages.append((start, src, dst, float(rng.choice([0, 1000, 4096, 50000]))))
    got = deliveries(topo, messages)
    router = FlowNetwork(simpy.Environment(), topo).router
    expected = _reference([(s, tuple(router.lookup(a, b)), n) for s, a, b, n in messages], topo)
    assert got == pytest.approx(expected, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["ring", "direct", "halving_doubling", "tree"]),
    st.sampled_from([CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER]),
    st.sampled_from(["ring8", "switch8", "mesh2x4", "torus2x4"]),
    st.integers(1, 64),
    st.sampled_from([1, 2, 3]),
)
def test_no_run_is_faster_than_its_busiest_link_can_carry(
    algorithm: str, collective: CollectiveType, topo_name: str, kib: int, chunks: int
) -> None:
    topologies = {"ring8": ring, "switch8": switch, "mesh2x4": mesh, "torus2x4": torus}
    topo = topologies[topo_name]([2, 4] if topo_name[-3:] == "2x4" else 8, 50.0, 500.0)  # type: ignore[operator]
    workload = Workload(collective_workload(collective, kib * 1024 + 3, 8))
    system = SystemConfig(algorithms={"default": algorithm}, chunks=chunks)
    if algorithm == "tree" and collective is not CollectiveType.ALL_REDUCE:
        return  # the double binary tree is an all-reduce only
    result = simulate(workload, topology=topo, model="flow", system=system)
    busiest: Any = max(result.links, key=lambda lk: lk["bytes"] / lk["bandwidth_GBps"])
    assert result.finish_ns >= busiest["bytes"] / busiest["bandwidth_GBps"] * (1 - 1e-12)


class FlowTakenApart(FlowNetwork):
    """``flow`` with every message a flow of its own: what its classes of equal messages must equal, to the bit."""

    def _admit(self, slot: int, now: float) -> None:
        super()._admit(slot, now)
        self._join_at = None  # (no later message joins this one)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_equal_messages_sent_together_drain_as_one_class_exactly_as_apart(seed: int) -> None:
    # Few pairs, instants and sizes: many messages share route, start and size (one class each), among others.
    rng = random.Random(seed)
    topo = rng.choice([ring(6, 50.0, 100.0), switch(5, 40.0, 50.0), mesh([3, 3], 25.0, 10.0)])
    pairs = [tuple(rng.sample(range(topo.npus), 2)) for _ in range(3)]
    messages = []
    for _ in range(rng.randint(2, 30)):
        src, dst = rng.choice(pairs)
        messages.append((float(rng.choice([0, 0, 300])), src, dst, float(rng.choice([0, 4096, 50000]))))
    together, model = sent(FlowNetwork, topo, messages)
    apart, reference = sent(FlowTakenApart, topo, messages)
    assert together == apart
    assert model.link_stats() == reference.link_stats()
    classes = {(start, tuple(model.route(src, dst)), size) for start, src, dst, size in messages if size}
    assert len(model._f_route) <= len(classes)  # (slots are reused: at most one per class)


def test_a_class_over_a_failed_link_goes_around_with_all_its_members() -> None:
    # Three equal messages 0 -> 1 on a 4x4 torus; the link fails while they drain: the detour carries what each
    # has left (three messages on each of its links), and they arrive as the three taken apart do.
    topo = torus([4, 4], 50.0, 500.0)
    messages = [(0.0, 0, 1, float(MiB))] * 3 + [(0.0, 4, 5, float(MiB))]

    def run(cls: type[FlowNetwork]) -> tuple[list[float], list[Any]]:
        env = CountingEnvironment()
        model = cls(env, topo)
        model.setup()
        down = topo.link_ids[0, 1]
        changed = dict.fromkeys([down, topo.link_ids[1, 0]], 0.0)
        env.timeout(10_000.0).callbacks.append(
            lambda _e: model.change_links(changed, AvoidingRouter(model.router, set(changed)))
        )
        got = [float("nan")] * len(messages)
        for i, (_, src, dst, size) in enumerate(messages):
            model.transfer(src, dst, size).callbacks.append(lambda _e, i=i: got.__setitem__(i, env.now))
        env.run()
        return got, model.link_stats()

    (together, stats), (apart, reference) = run(FlowNetwork), run(FlowTakenApart)
    assert together == apart and stats == reference
    detour = AvoidingRouter(make_router("default", topo), {topo.link_ids[0, 1], topo.link_ids[1, 0]}).lookup(0, 1)
    assert all(stats[link].messages == 3 for link in detour)
    # The failed link carried what drained before it failed, the detour the rest: 3 MiB in all on each hop of the
    # way. (The failed link kept the whole 3 MiB, and 20 µs of busy time, besides the detour's share.)
    down = topo.link_ids[0, 1]
    before = stats[down].bytes
    assert 0 < before < 3 * MiB and stats[down].busy == pytest.approx(before / 50.0, rel=1e-12)
    assert all(stats[link].bytes == pytest.approx(3 * MiB - before, rel=1e-12) for link in detour)


def test_a_collectives_equal_chunks_drain_as_classes_with_the_times_of_flows_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A direct all-to-all in 4 chunks: each rank's 4 chunks to a peer start together over one route (a class).
    monkeypatch.setitem(sys.modules, "flow_classes_home", sys.modules[__name__])
    workload = Workload(collective_workload(CollectiveType.ALL_TO_ALL, MiB, 8))
    system = SystemConfig(algorithms={"default": "direct"}, chunks=4)
    together = simulate(workload, topology=switch(8, 50.0, 500.0), model="flow", system=system)
    with allowing_plugins():
        apart = simulate(
            workload, topology=switch(8, 50.0, 500.0), model="flow_classes_home:FlowTakenApart", system=system
        )
    assert together.sim["events"] < apart.sim["events"]
    results = [r.to_dict() for r in (together, apart)]
    for result in results:
        del result["sim"], result["network"]["model"]
    assert results[0] == results[1]
