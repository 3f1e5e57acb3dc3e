import re
import textwrap

import pytest

from etsim.errors import TopologyError
from etsim.network import load_network, load_topology, topology_from_dict
from etsim.network.model import DEFAULT_MODEL

RING = "kind: ring\nnpus: 8\nbandwidth: 1 GB/s\nlatency: 1 ns\n"
SWITCH = "kind: switch\nnpus: 4\nbandwidth: 1 GB/s\nlatency: 1 ns\n"


def write(tmp_path, text, name="topo.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_native_ring(tmp_path):
    path = write(tmp_path, "kind: ring\nnpus: 8\nbandwidth: 400 Gbps\nlatency: 0.5 us\n", "myring.yaml")
    t = load_topology(path)
    assert t.name == "myring" and t.source == str(path) and t.kind == "ring"
    assert t.bandwidths[0] == 50.0 and t.latencies[0] == 500.0


def test_product_and_failures(tmp_path):
    path = write(
        tmp_path,
        """
        kind: product
        dims:
          - {kind: ring, npus: 4, bandwidth: 200 GB/s, latency: 100 ns}
          - {kind: switch, npus: 8, bandwidth: 50 GB/s, latency: 1 us}
        failed: [{npu: 3}, {link: [0, 1]}]
        """,
    )
    t = load_topology(path)
    assert t.npus == 32 and len(t.dims) == 2 and t.failed_npus == {3}
    assert not t.graph.has_edge(0, 1) and 3 not in t.graph


def test_astra_format_units(tmp_path):
    path = write(
        tmp_path,
        """
        topology: [ Ring, Switch ]
        npus_count: [ 8, 4 ]
        bandwidth: [ 50.0, 25.0 ]
        latency: [ 500.0, 700.0 ]
        """,
    )
    t = load_topology(path)
    assert t.npus == 32 and [d.kind for d in t.dims] == ["ring", "switch"]
    assert t.dims[0].bandwidth == pytest.approx(53.6870912, rel=1e-15)
    assert t.dims[1].latency == 700.0


def test_network_block(tmp_path):
    path = write(tmp_path, SWITCH + "network: {model: link, packet_size: 4 KiB}\n")
    config = load_network(path)
    assert config.model == "link" and config.options == {"packet_size": "4 KiB"}
    # A file without a network block runs under the default model, as a run without --topology does.
    assert load_network(write(tmp_path, SWITCH)).model == "flow" == DEFAULT_MODEL


def test_mapping_source():
    t = topology_from_dict({"kind": "torus", "shape": [2, 2], "bandwidth": "1 GB/s", "latency": "1 ns"})
    assert t.npus == 4


BAD = [
    ("kind: ring\nnpus: 8\nbandwidth: 50 GB/s\nlatency: 500 ns\ncolour: red\n", r"colour: unknown key for kind ring"),
    ("kind: donut\nnpus: 8\n", r"kind: unknown topology kind 'donut'"),
    ("kind: ring\nnpus: 8\nbandwidth: 50 GB\nlatency: 500 ns\n", r"bandwidth: unknown bandwidth unit 'GB'"),
    ("kind: ring\nnpus: 8\nbandwidth: 50\nlatency: 500 ns\n", r"bandwidth: bandwidth 50 has no unit"),
    ("kind: ring\nnpus: 8\nbandwidth: 50 GB/s\nlatency: 5 parsecs\n", r"latency: unknown time unit"),
    ("kind: ring\nbandwidth: 50 GB/s\nlatency: 500 ns\n", r"npus: missing"),
    ("kind: hypercube\nnpus: 12\nbandwidth: 50 GB/s\nlatency: 500 ns\n", r"npus: a hypercube needs a power of two"),
    ("kind: mesh\nshape: [4, 1]\nbandwidth: 50 GB/s\nlatency: 500 ns\n", r"shape\[1\]: each mesh size"),
    (
        "kind: product\ndims:\n  - {kind: ring, npus: 4, bandwidth: 1 GB/s, latency: 1 ns}\n"
        "  - {kind: blob, npus: 4, bandwidth: 1 GB/s, latency: 1 ns}\n",
        r"dims\[1\]\.kind: unknown dimension kind 'blob'",
    ),
    (
        "kind: product\ndims:\n  - {kind: ring, npus: 4, bandwidth: 1 GB/s, latency: 1 ns, x: 1}\n",
        r"dims\[0\]\.x: unknown key",
    ),
    (
        "kind: graph\nnpus: 4\nswitches: 1\nlinks:\n  - {src: 0, dst: s0, bandwidth: 1 GB/s, latency: 1 ns}\n",
        r"disconnected graph",
    ),
    (
        "kind: graph\nnpus: 2\nlinks:\n  - {src: 0, dst: s3, bandwidth: 1 GB/s, latency: 1 ns}\n",
        r"links\[0\]\.dst: no node 's3'",
    ),
    (
        "kind: graph\nnpus: 2\nlinks:\n  - {src: 0, dst: 1, bandwidth: 1 GB/s, latency: 1 ns}\n"
        "failed: [{link: [0, 1]}]\n",
        r"failed\[0\]: .*disconnected",
    ),
    (RING + "failed: [{link: [0, 5]}]\n", r"failed\[0\]: .*no such link"),
    (RING + "failed: [{npu: 9}]\n", r"failed: .*failed NPU 9"),
    ("topology: [Ring, Switch]\nnpus_count: [4]\nbandwidth: [1, 1]\nlatency: [1, 1]\n", r"equal lengths"),
    ("topology: [Torus]\nnpus_count: [4]\nbandwidth: [1]\nlatency: [1]\n", r"topology\[0\]: unknown dimension 'Torus'"),
    (RING + "network: {model: warp}\n", r"network\.model: .*'warp'.*analytical"),
    (
        RING + "network: {model: link, mtu: 5}\n",
        r"network\.mtu: unknown option .*valid: integer_ns, packet_size, router, seed",
    ),
    (
        RING + "network: {model: link, packet_size: 4 KiBs}\n",
        r"network\.packet_size: unknown size unit",
    ),
    ("- 1\n- 2\n", r"expected a mapping"),
    ("kind: [unclosed\n", r"invalid YAML"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_file_names_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text, "bad.yaml")
    with pytest.raises(TopologyError, match=message) as info:
        load_network(path)
    assert str(info.value).startswith(f"{path}: ")


def test_missing_file(tmp_path):
    with pytest.raises(TopologyError, match=r"nope\.yaml: cannot read"):
        load_topology(tmp_path / "nope.yaml")


def test_a_degraded_link_carries_its_fraction_of_the_bandwidth(tmp_path) -> None:
    """degraded: [{link: [0, 1], factor: 0.5}]: a message over that link takes S / (B/2) + latency, others S / B."""
    from etsim.chakra import TraceBuilder, Workload
    from etsim.simulation import simulate

    (tmp_path / "t.yaml").write_text(
        "kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\ndegraded: [{link: [0, 1], factor: 0.5}]\n"
    )
    net = load_network(tmp_path / "t.yaml")
    topology = net.topology
    assert not topology.regular and set(topology.degraded_links) == {(0, 1), (1, 0)}
    assert topology.bandwidths[topology.link_ids[0, 1]] == 25.0 and topology.bandwidths[topology.link_ids[1, 2]] == 50.0

    def one_message(src: int, dst: int) -> float:
        builders = [TraceBuilder(r) for r in range(4)]
        builders[src].send(dst=dst, size=1 << 20, tag=0)
        builders[dst].recv(src=src, size=1 << 20, tag=0)
        return simulate(Workload([b.build(rank=r) for r, b in enumerate(builders)]), topology=net).finish_ns

    assert one_message(0, 1) == pytest.approx(500 + (1 << 20) / 25.0, rel=1e-12)
    assert one_message(1, 0) == pytest.approx(500 + (1 << 20) / 25.0, rel=1e-12)  # both ways by default
    assert one_message(1, 2) == pytest.approx(500 + (1 << 20) / 50.0, rel=1e-12)


@pytest.mark.parametrize(
    ("degraded", "message"),
    [
        ("[{link: [0, 2], factor: 0.5}]", r"degraded\[0\]: .*cannot degrade link 0 -> 2: no such link"),
        ("[{link: [0, 1], factor: 0}]", r"degraded\[0\]\.factor: expected a number in \(0, 1\]"),
        ("[{link: [0, 1], factor: 1.5}]", r"degraded\[0\]\.factor: expected a number in \(0, 1\]"),
        ("[{link: [0, 1]}]", r"degraded\[0\]: expected \{link: \[U, V\], factor: F\}"),
        ("{link: [0, 1]}", r"degraded: expected a list"),
        ("[{link: [0, 1], factor: 0.5, speed: 2}]", r"degraded\[0\]\..*speed"),
    ],
)
def test_bad_degraded_links_are_named(tmp_path, degraded: str, message: str) -> None:
    (tmp_path / "t.yaml").write_text(
        f"kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\ndegraded: {degraded}\n"
    )
    with pytest.raises(TopologyError, match=message):
        load_network(tmp_path / "t.yaml")


def test_another_model_keeps_the_files_router_and_says_what_it_drops(tmp_path) -> None:
    """`--model flow` on a file written for link ran the default router, not the file's `router: shortest`, and
    dropped packet_size, both in silence."""
    import pytest

    from etsim.errors import EtsimWarning
    from etsim.network import load_network

    path = tmp_path / "t.yaml"
    path.write_text(
        "kind: torus\nshape: [4, 4]\nbandwidth: 50 GB/s\nlatency: 500 ns\n"
        "network: {model: link, router: shortest, packet_size: 4 KiB}\n"
    )
    net = load_network(str(path))
    assert net.options_for("link") == dict(net.options)
    with pytest.warns(EtsimWarning, match="network options packet_size are link's: not used with model flow"):
        assert net.options_for("flow") == {"router": "shortest"}
    # An option the other model takes too is kept (integer_ns: link's and analytical's).
    path.write_text(
        "kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\nnetwork: {model: link, integer_ns: true}\n"
    )
    assert load_network(str(path)).options_for("analytical") == {"integer_ns": True}


def test_an_unknown_router_is_named_with_the_file_and_key(tmp_path) -> None:
    # It was found only when the model was built, without the file's name or the key (and `topology show` took it).
    import pytest

    from etsim.errors import TopologyError
    from etsim.network import load_network

    path = tmp_path / "t.yaml"
    path.write_text("kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\nnetwork: {model: link, router: bogus}\n")
    with pytest.raises(TopologyError, match=r"t\.yaml: network\.router: unknown router 'bogus'; valid: default"):
        load_network(str(path))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("links: [{src: 0, dst: 1, bandwidth: 400, latency: 1 us}]", "links[0].bandwidth: bandwidth 400 has no unit"),
        ("bandwidth: 50\nlatency: 500 ns\nlinks: [{src: 0, dst: 1}]", "bandwidth: bandwidth 50 has no unit"),
        ("bandwidth: 50 GB/s\nlinks: [{src: 0, dst: 1, latency: 500}]", "links[0].latency: time 500 has no unit"),
    ],
)
def test_a_graph_file_writes_its_units_as_every_kind_does(tmp_path, text: str, said: str) -> None:
    # kind: graph read a bare 400 as 400 GB/s (meant as a NIC's 400 Gb/s: 8x too fast); every other kind refuses it.
    from etsim.errors import TopologyError
    from etsim.network import load_network

    path = tmp_path / "g.yaml"
    path.write_text(f"kind: graph\nnpus: 2\n{text}\n")
    with pytest.raises(TopologyError, match=re.escape(said)):
        load_network(str(path))
