import importlib.metadata
import math
from pathlib import Path

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from etsim.errors import ConfigError, RegistryError, SimulationError
from etsim.network import (
    NETWORK_MODELS,
    AnalyticalNetwork,
    Dim,
    IdealNetwork,
    LinkNetwork,
    NetworkModel,
    build_model,
    fully_connected,
    graph,
    load_network,
    mesh,
    product,
    ring,
    switch,
    torus,
    with_failures,
)

# Exactly representable values keep the closed forms exact.
B, L = 64.0, 512.0  # B/ns, ns
S = 4096  # bytes: S/B = 64 ns


def run(model, sends):
    """Issue (time, src, dst, size) sends; return delivery times in send order."""
    env = model.env
    times = [None] * len(sends)

    def sender(i, at, src, dst, size):
        if at:
            yield env.timeout(at)
        sent = env.now
        yield model.transfer(src, dst, size)
        times[i] = env.now - sent

    for i, send in enumerate(sends):
        env.process(sender(i, *send))
    env.run()
    return times


def make(name, topo, **options):
    return build_model(simpy.Environment(), topo, name, options)


# ---------------------------------------------------------------- registry and options


def test_registry_has_builtins():
    assert NETWORK_MODELS.get("analytical") is AnalyticalNetwork
    assert NETWORK_MODELS.get("link") is LinkNetwork
    assert NETWORK_MODELS.get("ideal") is IdealNetwork


def test_test_plugin_resolves_through_entry_point():
    names = {ep.name for ep in importlib.metadata.entry_points(group="etsim.network_models")}
    assert "etsim-test-ideal" in names
    assert NETWORK_MODELS.get("etsim-test-ideal") is IdealNetwork
    model = make("etsim-test-ideal", ring(4, B, L), delay="1 us")
    assert run(model, [(0, 0, 2, 10**9), (0, 1, 1, 5)]) == [1000.0, 0.0]


def test_unknown_model_lists_available():
    with pytest.raises(RegistryError, match=r"unknown network model 'warp'; available: analytical, .*link"):
        make("warp", ring(4, B, L))


def test_module_class_path():
    assert NETWORK_MODELS.get("etsim.network.models.link:LinkNetwork") is LinkNetwork


def test_unknown_option_lists_valid_ones():
    valid = r"valid: integer_ns, packet_size, router, seed"
    with pytest.raises(ConfigError, match=rf"network\.mtu: unknown option .*{valid}"):
        make("link", ring(4, B, L), mtu=1500)
    with pytest.raises(ConfigError, match=r"network\.integer_ns: expected true or false"):
        make("analytical", ring(4, B, L), integer_ns="yes")
    with pytest.raises(ConfigError, match=r"network\.dimension_charge: expected one of route, first_differing"):
        make("analytical", ring(4, B, L), dimension_charge="first")
    assert "packet_size" in LinkNetwork.option_help()


def test_base_transfer_is_abstract():
    with pytest.raises(NotImplementedError):
        NetworkModel(simpy.Environment(), ring(4, B, L)).transfer(0, 1, 1)


@pytest.mark.parametrize("name", ["analytical", "link", "ideal"])
def test_bad_transfers(name):
    model = make(name, ring(4, B, L))
    with pytest.raises(SimulationError, match="size must be"):
        model.transfer(0, 1, -1)
    with pytest.raises(SimulationError, match="destination 9 is not an NPU"):
        model.transfer(0, 9, 1)


@pytest.mark.parametrize("name", ["analytical", "link", "ideal"])
def test_zero_bytes_and_self_sends(name):
    model = make(name, ring(8, B, L))
    expected_zero = 0.0 if name == "ideal" else 2 * L
    assert run(model, [(0, 0, 2, 0), (0, 3, 3, 10**6), (0, 5, 5, 0)]) == [expected_zero, 0.0, 0.0]


# ---------------------------------------------------------------- analytical


@pytest.mark.parametrize(
    ("topo", "src", "dst", "hops"),
    [
        (ring(8, B, L), 0, 3, 3),
        (ring(8, B, L), 0, 6, 2),
        (ring(8, B, L), 1, 0, 1),
        (mesh([4, 4], B, L), 0, 15, 6),
        (torus([4, 4], B, L), 0, 15, 2),
        (switch(8, B, L), 2, 7, 2),
        (fully_connected(8, B, L), 2, 7, 1),
        (product([Dim("ring", 4, B, L), Dim("switch", 8, B, L)]), 1, 30, 3),
    ],
)
def test_analytical_formula(topo, src, dst, hops):
    model = make("analytical", topo)
    # many concurrent messages: no contention in the analytical model
    assert run(model, [(0, src, dst, S)] * 5) == [hops * L + S / B] * 5
    assert model.delay(src, dst, S) == hops * L + S / B


def test_analytical_heterogeneous_route_uses_bottleneck():
    # ring 4 (fast) x switch 8 (slow): 1 -> 30 crosses one ring link then two switch links
    t = product([Dim("ring", 4, 256.0, 100.0), Dim("switch", 8, 64.0, 1000.0)])
    assert run(make("analytical", t), [(0, 1, 30, S)]) == [100.0 + 2 * 1000.0 + S / 64.0]


def test_analytical_integer_ns_first_differing_dimension():
    gib = 2**30 / 1e9
    t = product([Dim("ring", 8, 50 * gib, 500.0), Dim("switch", 4, 25 * gib, 700.0)])
    model = make("analytical", t, integer_ns=True, dimension_charge="first_differing")
    m = 131072
    b0 = 50 * 2**30 / 1e9
    # neighbour in dim 0: floor(500 + 2441.40625) = 2941 (ASTRA-sim worked example)
    assert run(model, [(0, 0, 1, m)]) == [2941]
    # 0 -> 8 + 3 differs in both dims: charged to dim 0 only (3 ring hops)
    charged = make("analytical", t, integer_ns=True, dimension_charge="first_differing")
    assert run(charged, [(0, 0, 11, m)]) == [math.floor(3 * 500 + m / b0)]
    # A failed link anywhere made the topology irregular: the option was dropped in silence (the whole route).
    from etsim.errors import EtsimWarning
    from etsim.network import with_failures

    with pytest.warns(EtsimWarning, match="dimension_charge first_differing needs a topology of whole dimensions"):
        make("analytical", with_failures(t, links=[(10, 11)]), dimension_charge="first_differing")


def test_analytical_link_stats():
    model = make("analytical", ring(4, B, L))
    run(model, [(0, 0, 2, S), (0, 0, 1, S)])
    stats = {(s.src, s.dst): s for s in model.link_stats()}
    assert stats[0, 1].bytes == 2 * S and stats[0, 1].messages == 2 and stats[0, 1].busy == 2 * S / B
    assert stats[1, 2].bytes == S and stats[3, 0].bytes == 0


# ---------------------------------------------------------------- link model


def test_back_to_back_messages_pipeline_latency():
    model = make("link", ring(2, B, L))
    assert run(model, [(0, 0, 1, S), (0, 0, 1, S)]) == [L + S / B, L + 2 * S / B]


def test_link_latency_is_not_charged_to_the_sender():
    # the second message is sent while the first one propagates: the link is already free
    model = make("link", ring(2, B, L))
    assert run(model, [(0, 0, 1, S), (S / B, 0, 1, S)]) == [L + S / B, L + S / B]


def test_contention_two_flows_share_a_link():
    # 0 -> 2 and 1 -> 2 on a switch share the switch -> 2 link
    alone = run(make("link", switch(4, B, L)), [(0, 0, 2, S)])
    both = run(make("link", switch(4, B, L)), [(0, 0, 2, S), (0, 1, 2, S)])
    assert alone == [2 * (L + S / B)]
    assert both == [2 * (L + S / B), 2 * (L + S / B) + S / B]
    # big messages: the pair takes twice as long as one (latency negligible)
    big = 1 << 30
    one = run(make("link", switch(4, B, 0.0)), [(0, 0, 2, big)])[0]
    two = max(run(make("link", switch(4, B, 0.0)), [(0, 0, 2, big), (0, 1, 2, big)]))
    assert one == 2 * big / B and two == 3 * big / B
    # two flows on one ring link: the second finishes after 2 S/B, twice the time of one alone
    pair = run(make("link", ring(4, B, 0.0)), [(0, 0, 1, big), (0, 0, 1, big)])
    assert pair == [big / B, 2 * big / B]


def test_store_and_forward_is_sum_of_hops():
    t = graph(
        3,
        [
            {"src": 0, "dst": 1, "bandwidth": 128.0, "latency": 100.0},
            {"src": 1, "dst": 2, "bandwidth": 32.0, "latency": 300.0},
        ],
    )
    assert run(make("link", t), [(0, 0, 2, S)]) == [(100.0 + S / 128.0) + (300.0 + S / 32.0)]
    assert run(make("link", ring(8, B, L)), [(0, 0, 4, S)]) == [4 * (L + S / B)]


@pytest.mark.parametrize(("hops", "packets"), [(1, 4), (3, 8), (4, 1), (2, 16)])
def test_packetised_pipelining_closed_form(hops, packets):
    packet = S // packets
    model = make("link", ring(8, B, L), packet_size=packet)
    assert run(model, [(0, 0, hops, S)]) == [hops * (L + packet / B) + (S - packet) / B]


def test_packet_remainder_and_stats():
    model = make("link", ring(4, B, L), packet_size="1 KiB")
    size = 2560  # 1024 + 1024 + 512
    # the 512-B tail waits on the second hop behind the full packet ahead of it
    assert run(model, [(0, 0, 2, size)]) == [2 * L + 3 * 1024 / B + 512 / B]
    stats = {(s.src, s.dst): s for s in model.link_stats()}
    assert stats[0, 1].bytes == size and stats[0, 1].messages == 1 and stats[0, 1].busy == size / B
    assert stats[1, 2].bytes == size and stats[1, 2].messages == 1
    assert stats[2, 3].messages == 0


def test_fifo_order_at_downstream_link_follows_arrival():
    # a (0 -> 2, long first hop) is sent first but reaches node 1 after b (1 -> 2) has started
    t = graph(
        3,
        [
            {"src": 0, "dst": 1, "bandwidth": 1.0, "latency": 0.0},
            {"src": 1, "dst": 2, "bandwidth": 64.0, "latency": 0.0},
        ],
    )
    a, b = run(make("link", t), [(0, 0, 2, 64), (10.0, 1, 2, 6400)])
    assert b == 100.0  # b is alone on 1 -> 2 when it starts at t = 10
    assert a == 110.0 + 1.0  # a reaches node 1 at 64, waits until 110, then 1 ns


def test_failed_link_forces_detour_in_both_models():
    t = with_failures(ring(8, B, L), links=[(0, 1)])
    assert run(make("analytical", t), [(0, 0, 1, S)]) == [7 * L + S / B]
    assert run(make("link", t), [(0, 0, 1, S)]) == [7 * (L + S / B)]


def test_link_model_on_multidimensional_switched_topology():
    t = product([Dim("ring", 4, B, L), Dim("switch", 8, B, L)])
    assert run(make("link", t), [(0, 1, 30, S)]) == [3 * (L + S / B)]
    t3 = load_network({"kind": "torus", "shape": [2, 2, 2], "bandwidth": "64 B/ns", "latency": "512 ns"}).topology
    assert run(make("link", t3), [(0, 0, 7, S)]) == [3 * (L + S / B)]


def test_link_packets_past_the_limit_are_refused():
    # 1 B packets of a 1 GiB message grew to 2 GB in 8 s, printing nothing.
    model = make("link", ring(4, B, L), packet_size=1)
    with pytest.raises(ConfigError, match=r"network\.packet_size 1 B splits a message of 1,073,741,824 B into"):
        run(model, [(0, 0, 1, 2**30)])


def test_link_integer_ns_with_packets_is_refused():
    # Each 32 B packet's hop floored to 0 ns: a 64 KiB message crossed a 50 GB/s link in its 500 ns latency alone.
    with pytest.raises(ConfigError, match="packet_size and integer_ns together"):
        make("link", ring(4, B, L), integer_ns=True, packet_size=32)


def test_link_integer_ns_truncates_per_hop():
    t = switch(4, 50 * 2**30 / 1e9, 500.0)
    m = 131072
    assert run(make("link", t, integer_ns=True), [(0, 0, 1, m)]) == [2 * 2941]


def all_to_all(npus, size):
    return [(0, s, d, size) for s in range(npus) for d in range(npus) if s != d]


@pytest.mark.parametrize("name", ["analytical", "link"])
def test_determinism(name):
    t = torus([4, 4], B, L)
    first = run(make(name, t, packet_size=1000) if name == "link" else make(name, t), all_to_all(16, 5000))
    second = run(make(name, t, packet_size=1000) if name == "link" else make(name, t), all_to_all(16, 5000))
    assert first == second


def test_link_stats_busy_time_conserves_bytes():
    model = make("link", torus([4, 4], B, L))
    run(model, all_to_all(16, S))
    stats = model.link_stats()
    router = model.router
    expected = sum(len(router.lookup(s, d)) for s in range(16) for d in range(16) if s != d) * S
    assert sum(s.bytes for s in stats) == expected
    assert all(s.busy == s.bytes / s.bandwidth for s in stats)


def test_load_network_build():
    config = load_network(
        {
            "kind": "ring",
            "npus": 4,
            "bandwidth": "64 B/ns",
            "latency": "512 ns",
            "network": {"model": "link", "packet_size": 1024},
        }
    )
    model = config.build(simpy.Environment())
    assert isinstance(model, LinkNetwork) and model.options.packet_size == 1024


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["analytical", "link"]),
    packet=st.sampled_from([None, 100, 1000]),
    sizes=st.lists(st.integers(min_value=0, max_value=10**6), min_size=2, max_size=2),
    dst=st.integers(min_value=1, max_value=7),
)
def test_delivery_time_monotonic_in_size(name, packet, sizes, dst):
    small, large = sorted(sizes)
    options = {"packet_size": packet} if name == "link" else {}
    t = ring(8, 50.0, 500.0)
    background = [(0, 7, 2, 3000), (0, 1, 3, 7000)]  # some contention

    def time_for(size):
        return run(make(name, t, **options), [*background, (0, 0, dst, size)])[-1]

    assert time_for(small) <= time_for(large)


def test_a_plugins_own_option_errors_are_one_line_naming_the_option_and_model(tmp_path: Path) -> None:
    """A user's option parser (or Options check) that raises ValueError is a clean error, never a traceback."""
    import subprocess
    import sys

    (tmp_path / "picky.py").write_text(
        "from dataclasses import dataclass\n"
        "from etsim.network.models.link import LinkNetwork\n"
        "from etsim.options import option\n"
        "def speed(value, key):\n"
        "    return float(value)  # ValueError on 'fast'\n"
        "class Picky(LinkNetwork):\n"
        "    @dataclass(frozen=True, kw_only=True)\n"
        "    class Options(LinkNetwork.Options):\n"
        "        speed: float = option(1.0, 'a speed', speed)\n"
        "        def __post_init__(self):\n"
        "            if self.speed < 0:\n"
        "                raise ValueError('speed must not be negative')\n"
    )
    for value, said in (
        ("fast", "network.speed: 'fast' refused: ValueError: could not convert string to float: 'fast'"),
        ("-1", "network: network model Picky refused its options (speed='-1'): ValueError: speed must not be"),
    ):
        (tmp_path / "t.yaml").write_text(
            "kind: ring\nnpus: 4\nbandwidth: 1 GB/s\nlatency: 1 ns\n"
            f"network: {{model: picky.py:Picky, speed: '{value}'}}\n"
        )
        proc = subprocess.run(
            [sys.executable, "-m", "etsim", "topology", "show", str(tmp_path / "t.yaml"), "--allow-plugins"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
