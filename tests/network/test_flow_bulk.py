"""``flow`` in bulk (``network/models/flow_bulk.py``): messages that share links, timed at once, equal the event path.

Each case sends the same messages through the event path (``FlowNetwork.transfer`` at their start times) and
through ``FlowTiming.post``/``settle``, and asserts every delivery equal to the bit; then whole collectives whose
messages share links (a direct all-reduce and all-to-all on a switch) run on the fast path with the event path's
result.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from etsim.chakra import CollectiveType, Workload
from etsim.network import build_model, ring, switch, torus
from etsim.network.models.flow import FlowNetwork
from etsim.network.models.flow_bulk import FlowTiming
from etsim.network.topology import Topology
from etsim.producers import collective_workload
from etsim.report.result import Result
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

Message = tuple[int, int, float, float]  # (src, dst, size, start)

TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "switch8": lambda: switch(8, 50.0, 500.0),
    "ring8": lambda: ring(8, 25.0, 700.0),
    "torus2x4": lambda: torus([2, 4], 40.0, 300.0),
}


def event_path(topology: Topology, messages: list[Message]) -> list[float]:
    """When each message is delivered by the event path, sent at its start time."""
    env = simpy.Environment()
    model = build_model(env, topology, "flow")
    delivered = [-1.0] * len(messages)

    def send(i: int) -> None:
        src, dst, size, _ = messages[i]
        model.transfer(src, dst, size).callbacks.append(lambda _e: delivered.__setitem__(i, env.now))

    for i, (_, _, _, start) in enumerate(messages):
        env.timeout(start).callbacks.append(lambda _e, i=i: send(i))
    env.run()
    return delivered


def in_bulk(topology: Topology, messages: list[Message]) -> list[float] | None:
    """The same messages posted one by one to a fresh model's bulk timing and settled at once."""
    model = build_model(simpy.Environment(), topology, "flow")
    assert isinstance(model, FlowNetwork)
    timing = model.bulk_timing()
    assert isinstance(timing, FlowTiming)
    for src, dst, size, start in messages:
        timing.post(np.array([src]), np.array([dst]), size, np.array([start]), 0.0, (0, 0))
    settled = timing.settle()
    return None if settled is None else [float(times[0]) for times in settled]


def random_messages(rng: random.Random, npus: int, count: int, spread: float) -> list[Message]:
    sizes = [0.0, 1.0, 4096.0, 65536.0, 1 << 20, 3 * (1 << 20) + 7]
    starts = [0.0, 1000.0, 2500.5] + [rng.uniform(0, spread) for _ in range(4)]
    out = []
    for _ in range(count):
        src = rng.randrange(npus)
        dst = rng.randrange(npus)
        out.append((src, dst, rng.choice(sizes), rng.choice(starts) if rng.random() < 0.5 else rng.uniform(0, spread)))
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(sorted(TOPOLOGIES)),
    st.integers(0, 2**32 - 1),
    st.integers(1, 60),
    st.sampled_from([0.0, 5_000.0, 200_000.0]),
)
def test_shared_links_give_the_event_paths_deliveries(topology: str, seed: int, count: int, spread: float) -> None:
    """Random messages (sizes, ties, staggered starts, self-sends, zero bytes) on switched and multi-hop networks."""
    messages = random_messages(random.Random(seed), 8, count, spread)
    assert in_bulk(TOPOLOGIES[topology](), messages) == event_path(TOPOLOGIES[topology](), messages)


def test_flows_that_join_and_leave_share_as_the_textbook_says() -> None:
    """Two messages from NPU 0 of a switch, the second sent when the first is half drained: both equal the event path,
    which gives the closed forms (``2S/B − x`` and ``2S/B``, plus the route's latency) of ``docs/network-models.md``."""
    size, bw, lat = 1 << 20, 50.0, 500.0
    x = size / bw / 2
    messages = [(0, 1, float(size), 0.0), (0, 2, float(size), x)]
    delivered = in_bulk(switch(8, bw, lat), messages)
    assert delivered == event_path(switch(8, bw, lat), messages)
    assert delivered == pytest.approx([2 * size / bw - x + 2 * lat, 2 * size / bw + 2 * lat], rel=1e-12)


def test_a_link_still_draining_an_earlier_flow_is_refused() -> None:
    model = build_model(simpy.Environment(), switch(4, 50.0, 500.0), "flow")
    timing = model.bulk_timing()
    timing.post(np.array([0]), np.array([1]), 1e6, np.array([0.0]), 0.0, (0, 0))
    assert timing.settle() is not None
    timing.post(np.array([0]), np.array([2]), 1e6, np.array([10.0]), 0.0, (0, 0))  # uplink 0 drains until 20 µs
    assert timing.settle() is None


def test_an_event_path_flow_on_a_link_is_refused() -> None:
    env = simpy.Environment()
    model = build_model(env, switch(4, 50.0, 500.0), "flow")
    model.transfer(0, 1, 1e6)
    env.run(until=1.0)  # (allocated: it drains on uplink 0)
    timing = model.bulk_timing()
    timing.post(np.array([0]), np.array([3]), 1e6, np.array([2.0]), 0.0, (0, 0))
    assert timing.settle() is None


@pytest.mark.parametrize(
    ("algorithm", "collective", "topology", "npus"),
    [
        ("direct", CollectiveType.ALL_REDUCE, "switch", 8),
        ("direct", CollectiveType.ALL_REDUCE, "switch", 64),
        ("direct", CollectiveType.ALL_TO_ALL, "switch", 64),
        ("direct", CollectiveType.ALL_TO_ALL, "ring", 8),  # multi-hop routes sharing ring links
        ("hd", CollectiveType.ALL_REDUCE, "ring", 8),  # per-rank graphs (the union fast path), one level at a time
    ],
)
def test_contended_collectives_run_in_bulk_with_the_event_paths_result(
    algorithm: str, collective: CollectiveType, topology: str, npus: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Collectives whose messages share links while they drain (a direct one's leave each NPU together)."""
    from etsim.workload import bulk

    monkeypatch.setattr(bulk, "MIN_WORK", 0)
    network = {"switch": switch, "ring": ring}[topology]
    workload = Workload(collective_workload(collective, 4 << 20, npus))
    system = SystemConfig(algorithms={"default": algorithm})
    fast = simulate(workload, system=system, topology=network(npus, 50.0, 500.0), model="flow")
    slow = simulate(
        workload, system=replace(system, fast_path=False), topology=network(npus, 50.0, 500.0), model="flow"
    )
    assert fast.sim["bulk_parts"] == npus and fast.sim["reruns"] == 0 and slow.sim["bulk_parts"] == 0
    assert outcome(fast) == outcome(slow)


def outcome(result: Result) -> str:
    """What a run computed (``tests/workload/test_bulk.py``'s comparison, as text: 1034 and 1034.0 differ)."""
    data = json.loads(result.to_json())
    for key in ("events", "wall_s", "bulk_parts", "reruns"):
        data["sim"].pop(key, None)
    return json.dumps(data, sort_keys=True)


def test_the_route_table_grows_with_its_rows_not_with_each_longer_route() -> None:
    """Routes of 1, 2, … 32 hops asked for one by one: the table's rows stay within twice the routes it holds."""
    model = build_model(simpy.Environment(), ring(64, 50.0, 500.0, bidirectional=False), "flow")
    table = model.route_table()
    for hops in range(1, 33):
        links, latency, _ = table.rows(np.array([0]), np.array([hops]))
        assert (links >= 0).sum() == hops and latency[0] == pytest.approx(500.0 * hops)
    assert table.count == 32 and len(table.latency) <= 64 and table.links.shape == (len(table.latency), 32)


def test_send_is_one_nodes_messages_posted_and_settled() -> None:
    """The contract's one-call form: an all-to-all step of 4 messages from NPU 0 equals the event path's."""
    messages = [(0, d, float(1 << 20), 0.0) for d in (1, 2, 3)]
    model = build_model(simpy.Environment(), switch(4, 50.0, 500.0), "flow")
    timing = model.bulk_timing()
    got = timing.send(np.array([0, 0, 0]), np.array([1, 2, 3]), float(1 << 20), np.zeros(3), 0.0, (0, 0))
    assert got is not None and got.tolist() == event_path(switch(4, 50.0, 500.0), messages)
