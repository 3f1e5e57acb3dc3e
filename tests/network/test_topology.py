import networkx as nx
import pytest

from etsim.errors import TopologyError
from etsim.network import (
    Dim,
    Topology,
    fully_connected,
    graph,
    hypercube,
    mesh,
    product,
    ring,
    switch,
    torus,
    uni_ring,
    with_failures,
)

B, L = 50.0, 500.0


def as_irregular(topo):
    """The same graph without its dims, so the generic (min-cut / BFS) metrics are used."""
    return Topology(topo.graph.copy(), topo.npus, kind="graph")


def test_ring_links_and_units():
    t = ring(8, "50 GB/s", "500 ns")
    assert t.npus == 8 and t.switches == [] and len(t.links) == 16
    assert t.graph.edges[0, 1]["bandwidth"] == 50.0
    assert t.graph.edges[7, 0]["latency"] == 500.0
    assert all(t.links[t.graph.edges[e]["id"]] == e for e in t.graph.edges)


@pytest.mark.parametrize(
    ("topo", "links", "switches"),
    [
        (uni_ring(8, B, L), 8, 0),
        (ring(2, B, L), 2, 0),
        (uni_ring(2, B, L), 2, 0),
        (fully_connected(8, B, L), 56, 0),
        (switch(8, B, L), 16, 1),
        (mesh([4, 4], B, L), 48, 0),
        (mesh([2, 3, 4], B, L), 2 * (12 * 1 + 8 * 2 + 6 * 3), 0),
        (torus([4, 4], B, L), 64, 0),
        (torus([4, 4, 4], B, L), 384, 0),
        (hypercube(8, B, L), 24, 0),
        (product([Dim("ring", 4, B, L), Dim("switch", 8, B, L)]), 4 * 8 * 2 + 4 * 16, 4),
    ],
)
def test_link_counts(topo, links, switches):
    assert len(topo.links) == links
    assert len(topo.switches) == switches
    assert all(isinstance(s, str) for s in topo.switches)


def test_switch_is_a_star():
    t = switch(4, B, L)
    assert t.switches == ["s0"]
    assert sorted(t.graph.successors("s0")) == [0, 1, 2, 3]
    assert all(list(t.graph.successors(r)) == ["s0"] for r in range(4))


def test_product_coordinates_dimension_zero_fastest():
    t = product([Dim("ring", 4, B, L), Dim("switch", 8, B, L)])
    assert t.npus == 32
    assert t.coords(0) == (0, 0) and t.coords(5) == (1, 1) and t.coords(31) == (3, 7)
    assert all(t.rank(t.coords(r)) == r for r in range(32))
    assert t.graph.has_edge(0, 1) and t.graph.has_edge(3, 0)  # ring in dim 0
    sw = t.dim_switch(1, 1)
    assert sorted(t.graph.successors(sw)) == [1 + 4 * i for i in range(8)]


@pytest.mark.parametrize(
    ("topo", "expected"),
    [
        (ring(8, B, L), 2 * B),
        (uni_ring(8, B, L), B),
        (fully_connected(8, B, L), 16 * B),
        (switch(8, B, L), 4 * B),
        (mesh([4, 8], B, L), 4 * B),
        (torus([4, 4], B, L), 8 * B),
        (torus([4, 4, 4], B, L), 32 * B),
        (hypercube(16, B, L), 8 * B),
        (product([Dim("ring", 4, 200.0, L), Dim("switch", 8, B, L)]), 4 * 4 * B),
    ],
)
def test_bisection_closed_form_matches_min_cut(topo, expected):
    value, method = topo.bisection_bandwidth()
    assert method == "closed form"
    assert value == pytest.approx(expected)
    approx, method = as_irregular(topo).bisection_bandwidth()
    assert method == "min cut between rank halves"
    assert approx == pytest.approx(expected)


@pytest.mark.parametrize(
    ("topo", "diameter"),
    [
        (ring(8, B, L), 4),
        (ring(7, B, L), 3),
        (uni_ring(8, B, L), 7),
        (fully_connected(5, B, L), 1),
        (switch(8, B, L), 2),
        (mesh([4, 8], B, L), 10),
        (torus([4, 8], B, L), 6),
        (hypercube(32, B, L), 5),
        (product([Dim("ring", 4, B, L), Dim("switch", 8, B, L)]), 4),
    ],
)
def test_diameter_closed_form_matches_bfs(topo, diameter):
    assert topo.diameter() == diameter
    assert as_irregular(topo).diameter() == diameter


def test_graph_builder_heterogeneous_and_asymmetric():
    t = graph(
        3,
        [
            {"src": 0, "dst": "s0", "bandwidth": "100 GB/s", "latency": "200 ns"},
            {"src": 1, "dst": "s0"},
            {"src": 2, "dst": 1, "bandwidth": "10 GB/s", "bidirectional": False},
            {"src": 1, "dst": 2, "bandwidth": "20 GB/s", "bidirectional": False},
        ],
        switches=1,
        bandwidth="50 GB/s",
        latency="1 us",
    )
    assert t.switches == ["s0"]
    assert t.graph.edges[0, "s0"]["bandwidth"] == 100.0 and t.graph.edges["s0", 0]["latency"] == 200.0
    assert t.graph.edges[1, "s0"]["bandwidth"] == 50.0 and t.graph.edges[1, "s0"]["latency"] == 1000.0
    assert t.graph.edges[2, 1]["bandwidth"] == 10.0 and t.graph.edges[1, 2]["bandwidth"] == 20.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"links": [{"src": 0, "dst": "s9"}]}, r"links\[0\]\.dst: no node 's9'"),
        ({"links": [{"src": 0, "dst": 5}]}, r"links\[0\]\.dst: no NPU 5"),
        ({"links": [{"src": 0, "dst": 1}, {"src": 1, "dst": 0}]}, r"links\[1\]: duplicate link"),
        ({"links": [{"src": 0, "dst": 1, "colour": "red"}]}, r"links\[0\]: unknown key 'colour'"),
        ({"links": [{"src": 0, "dst": 1, "bandwidth": "fast"}]}, r"links\[0\]\.bandwidth: cannot parse"),
        ({"links": [{"src": 0, "dst": 1}]}, r"disconnected graph: NPU 0 cannot reach NPU 2"),
        ({"links": [{"src": 0, "dst": 1, "bidirectional": False}, {"src": 1, "dst": 2}]}, r"cannot reach NPU 0"),
    ],
)
def test_graph_errors(kwargs, message):
    with pytest.raises(TopologyError, match=message):
        graph(3, switches=1, bandwidth="1 GB/s", latency="1 ns", **kwargs)


def test_hypercube_needs_power_of_two():
    with pytest.raises(TopologyError, match="power of two"):
        hypercube(12, B, L)


def test_failures():
    t = with_failures(ring(8, B, L), links=[(0, 1)])
    assert not t.graph.has_edge(0, 1) and not t.graph.has_edge(1, 0)
    assert len(t.links) == 14 and not t.regular
    assert t.diameter() == 7
    t = with_failures(ring(8, B, L), npus=[3])
    assert 3 not in t.graph and t.live_npus == [0, 1, 2, 4, 5, 6, 7]
    assert t.npus == 8
    with pytest.raises(TopologyError, match="disconnected"):
        with_failures(uni_ring(8, B, L), links=[(0, 1)], bidirectional=False)
    with pytest.raises(TopologyError, match="no such link"):
        with_failures(ring(8, B, L), links=[(0, 4)])


def test_graph_is_networkx_digraph():
    assert isinstance(torus([2, 2], B, L).graph, nx.DiGraph)


@pytest.mark.parametrize(
    ("bandwidth", "latency"), [(float("inf"), 1.0), (0.0, 1.0), (float("nan"), 1.0), (1.0, float("inf"))]
)
def test_a_derived_rate_that_is_not_finite_and_positive_is_refused(bandwidth: float, latency: float) -> None:
    """Builders derive rates (a bandwidth over an oversubscription): the topology refuses any that is not physical."""
    from etsim.network.topology import Topology

    graph = nx.DiGraph()
    graph.add_nodes_from([0, 1])
    graph.add_edge(0, 1, bandwidth=bandwidth, latency=latency)
    graph.add_edge(1, 0, bandwidth=1.0, latency=1.0)
    with pytest.raises(TopologyError, match=r"link 0 -> 1 has bandwidth .* expected a positive, finite bandwidth"):
        Topology(graph, 2, kind="custom", name="t")
