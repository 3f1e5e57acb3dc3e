"""TACOS-style synthesis: reference vectors, lower bounds, schedule validity, simulator agreement."""

import json
from collections import defaultdict
from itertools import pairwise

import pytest

from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.family_io import encode_algo_graph, written_tags
from etsim.algo.graph import COMP, RECV, SEND
from etsim.algo.verify import verify_graphs
from etsim.chakra import CollectiveType, Workload, load_workload
from etsim.chakra.builder import TraceBuilder
from etsim.errors import ConfigError
from etsim.network import graph, hypercube, load_topology, mesh, ring, switch, torus, uni_ring, with_failures
from etsim.producers import collective_workload, tacos
from etsim.producers.tacos import (
    algo_graphs,
    build_link_graph,
    greedy_all_gather,
    lower_bound,
    retime,
    synthesize,
    write_synthesis,
)
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

GiB = 1 << 30
MiB = 1 << 20


def gibps(x):
    """GiB/s in bytes per ns (TACOS's bandwidth unit)."""
    return x * GiB / 1e9


COLL = {
    "all_gather": CollectiveType.ALL_GATHER,
    "reduce_scatter": CollectiveType.REDUCE_SCATTER,
    "all_reduce": CollectiveType.ALL_REDUCE,
}


# -- the reference's validation vectors (reference/synthesis.md §1.6), in µs -------------------------


@pytest.mark.parametrize(
    ("topo", "k", "expected_us"),
    [
        (mesh([5, 5], gibps(50), 500.0), 1, 9606.0),
        (mesh([10, 10], gibps(100), 1000.0), 2, 5049.0),
        (torus([3, 3, 3], gibps(50), 500.0), 1, 3706.20),
        (uni_ring(8, gibps(50), 500.0), 1, 17503.5),
    ],
    ids=["mesh5x5", "mesh10x10_k2", "torus3x3x3", "uni_ring8"],
)
def test_reference_vectors(topo, k, expected_us):
    syn = synthesize(topo, "all_gather", size=GiB, chunks_per_npu=k, runs=20)
    # The reference floors the chunk to whole bytes; we do not: < 0.01 µs apart here.
    assert syn.time_ns / 1000 == pytest.approx(expected_us, abs=0.01)
    assert syn.time_ns == pytest.approx(syn.bound.value, rel=1e-9)


@pytest.mark.parametrize(
    "topo",
    [
        ring(8, 50.0, 500.0),
        ring(9, 50.0, 500.0),
        uni_ring(6, 25.0, 100.0),
        mesh([4, 4], 50.0, 500.0),
        mesh([3, 5], 50.0, 500.0),
        mesh([3, 3, 3], 50.0, 500.0),
        hypercube(16, 50.0, 500.0),
        hypercube(64, 50.0, 500.0),
    ],
    ids=lambda t: f"{t.kind}{t.npus}",
)
def test_reaches_chunk_step_bound(topo):
    syn = synthesize(topo, "all_gather", size=GiB, runs=10)
    lg = build_link_graph(topo)
    w = lg.weights(syn.chunk_bytes)[0]
    min_in = min(len(x) for x in lg.in_links())
    closed_form = -(-(topo.npus - 1) // min_in) * w  # ⌈(N-1)/min in-degree⌉ · w
    assert syn.bound.chunk_steps == pytest.approx(closed_form, rel=1e-12)
    assert syn.time_ns == pytest.approx(closed_form, rel=1e-9)


def test_lower_bound_components():
    topo = ring(8, 50.0, 500.0)
    lg = build_link_graph(topo)
    lb = lower_bound(lg, MiB, 1)
    w = 500.0 + MiB / 50.0
    assert lb.chunk_steps == pytest.approx(4 * w)  # 7 chunks over 2 in-links
    assert lb.bandwidth == pytest.approx(7 / 8 * 8 * MiB / 100.0)
    assert lb.distance == pytest.approx(4 * w)  # the opposite NPU is 4 hops away
    # with 4 chunks per NPU: 28 chunks over 2 links = 14 steps
    assert lower_bound(lg, MiB, 4).chunk_steps == pytest.approx(14 * w)


# -- schedule validity, checked independently of the synthesiser ------------------------------------


def check_all_gather(sched):
    """Every NPU ends with every chunk; links carry one chunk at a time; chunks leave only after arriving."""
    lg = sched.links
    n, k = lg.n, sched.chunks_per_npu
    have = {(c % n, c): 0.0 for c in range(n * k)}
    busy = defaultdict(list)
    for x in sorted(range(sched.num_transfers), key=lambda x: sched.start[x]):
        lid, c, t = sched.link[x], sched.chunk[x], sched.start[x]
        s, d = lg.src[lid], lg.dst[lid]
        assert (s, c) in have and have[s, c] <= t + 1e-6, f"chunk {c} leaves {s} before it arrives"
        end = t + sched.w[lid]
        assert (d, c) not in have, f"chunk {c} delivered twice to {d}"
        have[d, c] = end
        busy[lid].append((t, end))
    assert len(have) == n * n * k
    for spans in busy.values():
        spans.sort()
        for (_, e0), (s1, _) in pairwise(spans):
            assert s1 >= e0 - 1e-6, "two chunks on one link at once"
    assert sched.time_ns == pytest.approx(max(e for spans in busy.values() for _, e in spans))


def check_reduce_scatter(sched):
    """Each chunk's contributions flow up a tree to its owner: every other NPU sends it exactly once,
    after every contribution it receives."""
    lg = sched.links
    n, k = lg.n, sched.chunks_per_npu
    sent = {}
    recv_end = defaultdict(float)
    for x in range(sched.num_transfers):
        lid, c, t = sched.link[x], sched.chunk[x], sched.start[x]
        s, d = lg.src[lid], lg.dst[lid]
        assert s != c % n, "the owner sends its own chunk away"
        assert (s, c) not in sent, f"NPU {s} sends chunk {c} twice"
        sent[s, c] = t
        recv_end[d, c] = max(recv_end[d, c], t + sched.w[lid])
    assert len(sent) == n * (n - 1) * k
    for (s, c), t in sent.items():
        assert recv_end.get((s, c), 0.0) <= t + 1e-6


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize(
    "topo",
    [mesh([3, 4], 50.0, 500.0), torus([3, 3], 50.0, 500.0), hypercube(8, 50.0, 500.0)],
    ids=lambda t: t.kind,
)
def test_schedules_are_valid(topo, k):
    check_all_gather(synthesize(topo, "all_gather", size=GiB, chunks_per_npu=k, seed=3).schedule)
    check_reduce_scatter(synthesize(topo, "reduce_scatter", size=GiB, chunks_per_npu=k, seed=3).schedule)
    ar = synthesize(topo, "all_reduce", size=GiB, chunks_per_npu=k, seed=3).schedule
    n = ar.links.n
    assert ar.reduce_count == n * (n - 1) * k
    assert ar.num_transfers == 2 * ar.reduce_count


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize(
    "topo",
    [mesh([3, 4], 50.0, 500.0), with_failures(mesh([4, 4], 50.0, 500.0), npus=[15], links=[(0, 1)])],
    ids=["mesh", "mesh-with-failures"],
)
def test_synthesised_algorithms_compute_their_collective(topo, k):
    for name, coll in tacos.COLLECTIVES.items():
        graphs = tacos.algo_graphs(synthesize(topo, name, size=GiB, chunks_per_npu=k, seed=1).schedule)
        verdict = verify_graphs(graphs, coll)
        assert verdict.ok is True, str(verdict)


def test_greedy_schedule_is_as_soon_as_possible():
    """Retiming a greedy All-Gather changes nothing: each transfer already starts when its link is free
    and its chunk has arrived (what the simulator will do)."""
    for topo in (torus([4, 4], 50.0, 500.0), hetero_graph()):
        lg = build_link_graph(topo)
        sched = greedy_all_gather(lg, lg.weights(MiB), 2, seed=5)
        before = list(sched.start)
        retime(sched)
        assert list(sched.start) == before


def dense_hetero_graph(n=9):
    """A fully connected graph with three link speeds: in-degree n-1 > 6, links of mixed w at every NPU."""
    links = []
    for a in range(n):
        for b in range(a + 1, n):
            links.append({"src": a, "dst": b, "bandwidth": [25.0, 50.0, 100.0][(a + b) % 3], "latency": 300.0})
    return graph(n, links, name="dense_hetero")


@pytest.mark.parametrize("k", [1, 2])
def test_high_in_degree_and_mixed_links(k):
    """In-degrees above the permutation table (shuffled order) and mixed link speeds (fastest first):
    valid, as soon as possible, and on a uniform high-degree hypercube still at the chunk-step bound."""
    topo = dense_hetero_graph()
    lg = build_link_graph(topo)
    sched = greedy_all_gather(lg, lg.weights(MiB), k, seed=1)
    check_all_gather(sched)
    before = list(sched.start)
    retime(sched)
    assert list(sched.start) == before
    cube = hypercube(128, 50.0, 500.0)  # in-degree 7
    syn = synthesize(cube, "all_gather", size=GiB, chunks_per_npu=k, runs=2)
    check_all_gather(syn.schedule)
    assert syn.time_ns == pytest.approx(syn.bound.value, rel=1e-9)


def test_untabulated_chunk_masks(monkeypatch):
    """Collectives with more chunks than the mask table compute the masks on demand: same schedule."""
    lg = build_link_graph(torus([4, 4], 50.0, 500.0))
    w = lg.weights(MiB)
    tabulated = greedy_all_gather(lg, w, 2, seed=4)
    monkeypatch.setattr(tacos.greedy, "_BELOW_TABLE_MAX", 0)
    on_demand = greedy_all_gather(lg, w, 2, seed=4)
    assert list(on_demand.chunk) == list(tabulated.chunk) and list(on_demand.start) == list(tabulated.start)
    check_all_gather(on_demand)


def test_deterministic_and_best_of_runs():
    topo = torus([4, 4], 50.0, 500.0)
    a = synthesize(topo, "all_gather", size=GiB, seed=7)
    b = synthesize(topo, "all_gather", size=GiB, seed=7)
    assert list(a.schedule.link) == list(b.schedule.link)
    assert list(a.schedule.chunk) == list(b.schedule.chunk)
    times = [synthesize(topo, "all_gather", size=GiB, seed=s).time_ns for s in range(6)]
    best = synthesize(topo, "all_gather", size=GiB, seed=0, runs=6)
    assert best.time_ns == min(times)
    assert best.seed == times.index(min(times))


def test_reduce_scatter_is_the_time_reverse():
    """On a symmetric topology RS time = AG time of the same seed (the reverse of an AG on Gᵀ = G)."""
    topo = mesh([4, 4], 50.0, 500.0)
    ag = synthesize(topo, "all_gather", size=GiB, seed=2)
    rs = synthesize(topo, "reduce_scatter", size=GiB, seed=2)
    assert rs.time_ns <= ag.time_ns + 1e-6
    ar = synthesize(topo, "all_reduce", size=GiB, seed=2)
    assert ar.time_ns <= 2 * ag.time_ns + 1e-6  # chunk-level overlap can only help


# -- topologies the reference cannot take directly ---------------------------------------------------


def hetero_graph():
    """A 2x3 mesh with fast x links, slow y links and one asymmetric pair."""
    links = []
    for y in range(2):
        for x in range(3):
            r = y * 3 + x
            if x < 2:
                links.append({"src": r, "dst": r + 1, "bandwidth": 100.0, "latency": 200.0})
            if y < 1:
                links.append({"src": r, "dst": r + 3, "bandwidth": 25.0, "latency": 700.0})
    links.append({"src": 0, "dst": 4, "bandwidth": 50.0, "latency": 300.0, "bidirectional": False})
    return graph(6, links, name="hetero")


def test_switch_is_unwound_into_a_ring():
    topo = switch(6, 50.0, 500.0)
    lg = build_link_graph(topo)
    assert lg.num_links == 6 and lg.unwound == 6
    assert sorted(zip(lg.src, lg.dst, strict=True)) == [(i, (i + 1) % 6) for i in range(6)]
    assert all(len(p) == 2 for p in lg.physical)  # NPU -> switch -> NPU
    assert not lg.notes  # no physical link shared
    w = lg.weights(MiB)[0]
    assert w == pytest.approx(2 * (500.0 + MiB / 50.0))  # store-and-forward over both hops
    syn = synthesize(topo, "all_gather", size=6 * MiB)
    assert syn.time_ns == pytest.approx(5 * w)


def test_two_switch_domain_and_failures():
    topo = load_topology("topologies/graph8_two_switches.yaml")
    lg = build_link_graph(topo)
    # NPU 3 lost its switch link: it is reached through its direct links to NPU 2 only
    assert not lg.notes
    assert {(lg.src[i], lg.dst[i]) for i in range(lg.num_links) if 3 in (lg.src[i], lg.dst[i])} == {(2, 3), (3, 2)}
    check_all_gather(synthesize(topo, "all_gather", size=GiB).schedule)


def test_failed_npu_and_group():
    topo = with_failures(mesh([4, 4], 50.0, 500.0), npus=[15], links=[(0, 1)])
    lg = build_link_graph(topo)
    assert lg.n == 15 and 15 not in lg.group
    assert (0, 1) not in set(zip(lg.src, lg.dst, strict=True))
    check_all_gather(synthesize(topo, "all_gather", size=GiB).schedule)
    sub = build_link_graph(mesh([4, 4], 50.0, 500.0), group=[4, 5, 6, 7, 8, 9, 10, 11])
    assert sub.group == [4, 5, 6, 7, 8, 9, 10, 11] and sub.num_links == 2 * (6 + 4)
    with pytest.raises(ConfigError, match="cut off"):
        build_link_graph(mesh([4, 4], 50.0, 500.0), group=[0, 5, 10])
    with pytest.raises(ConfigError, match="has failed"):
        build_link_graph(topo, group=[14, 15])


def test_bad_arguments():
    topo = ring(4, 50.0, 500.0)
    with pytest.raises(ConfigError, match="supports"):
        synthesize(topo, "all_to_all", size=GiB)
    with pytest.raises(ConfigError, match="chunks per NPU"):
        synthesize(topo, "all_gather", size=GiB, chunks_per_npu=0)
    with pytest.raises(ConfigError, match="runs"):
        synthesize(topo, "all_gather", size=GiB, runs=0)


# -- the emitted algorithm and the simulator -------------------------------------------------------


def simulate_family(syn, prefix, *, topology=None, workload=None, comm_groups=None):
    write_synthesis(syn, prefix)
    n = len(syn.group)
    if workload is None:
        per = syn.size / n if syn.collective == "all_gather" else syn.size
        workload = Workload(collective_workload(COLL[syn.collective], int(per), n))
    config = SystemConfig(algorithms={"default": str(prefix)}, comm_groups=comm_groups)
    return simulate(workload, topology=topology or syn.topology, model="link", system=config)


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "all_reduce"])
@pytest.mark.parametrize(
    ("topo", "k"),
    [
        (mesh([3, 4], 50.0, 500.0), 1),
        (torus([3, 3], 50.0, 500.0), 2),
        (hetero_graph(), 2),
        (switch(5, 50.0, 500.0), 1),
        (load_topology("topologies/graph8_two_switches.yaml"), 1),
        (with_failures(mesh([3, 3], 50.0, 500.0), npus=[8], links=[(0, 1)]), 1),
    ],
    ids=["mesh", "torus_k2", "hetero_k2", "switch", "two_switches", "failures"],
)
def test_simulator_measures_the_synthesised_time(tmp_path, topo, k, collective):
    n = len(topo.live_npus)
    syn = synthesize(topo, collective, size=n * k * 3 * MiB, chunks_per_npu=k, runs=2)
    result = simulate_family(syn, tmp_path / "algo")
    assert result.finish_ns == pytest.approx(syn.time_ns, rel=1e-9)


def test_multi_tenant_group_simulates(tmp_path):
    topo = mesh([4, 4], 50.0, 500.0)
    group = [4, 5, 6, 7, 8, 9, 10, 11]
    syn = synthesize(topo, "all_reduce", size=8 * MiB, group=group, runs=2)
    traces = []
    for rank in range(16):
        b = TraceBuilder()
        if rank in group:
            b.collective(CollectiveType.ALL_REDUCE, 8 * MiB, pg_name="1")
        traces.append(b.build(rank=rank))
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": group}))
    result = simulate_family(syn, tmp_path / "t", workload=Workload(traces), comm_groups=str(groups))
    assert result.finish_ns == pytest.approx(syn.time_ns, rel=1e-9)


def test_emitted_graph_structure(tmp_path):
    topo = ring(4, 50.0, 500.0)
    syn = synthesize(topo, "all_reduce", size=GiB, chunks_per_npu=2)
    paths = write_synthesis(syn, tmp_path / "ar.et")
    assert [p.name for p in paths] == [f"ar.{i}.et" for i in range(4)]
    graphs = [algo_graph_from_trace(t) for t in load_workload(tmp_path / "ar").traces]
    direct = algo_graphs(syn.schedule)
    for g, d in zip(graphs, direct, strict=True):
        assert g.total_chunks == 8
        assert g.kinds == d.kinds and g.peers == d.peers
        # Written tags are unique per transfer of a rank pair (numbered by (tag, k) per peer).
        assert g.tags == written_tags(d, graphs.index(g), 4)
        assert all(c == 1 for c in g.chunks)
        sends = [i for i, kind in enumerate(g.kinds) if kind == SEND]
        # each send waits for the previous send with the same synthesis tag (one tag per link)
        last = {}
        for i in sends:
            if d.tags[i] in last:
                assert last[d.tags[i]] in g.deps(i)
            last[d.tags[i]] = i
        assert all(not g.deps(i) for i, kind in enumerate(g.kinds) if kind == RECV)
        assert sum(kind == COMP for kind in g.kinds) == 3 * 2  # one reduction per received RS chunk
    # synthesis tags name logical links: the k-th send on a link meets the k-th receive
    lg = syn.links
    for tag in range(lg.num_links):
        s, d = lg.src[tag], lg.dst[tag]
        n_send = sum(1 for i, kind in enumerate(direct[s].kinds) if kind == SEND and direct[s].tags[i] == tag)
        n_recv = sum(1 for i, kind in enumerate(direct[d].kinds) if kind == RECV and direct[d].tags[i] == tag)
        assert n_send == n_recv > 0
    # written, every transfer between two ranks has a tag of its own
    for g in graphs:
        pairs = [(kind, g.peers[i], g.tags[i]) for i, kind in enumerate(g.kinds) if kind != COMP]
        assert len(pairs) == len(set(pairs))


def _graph_path_files(sched, metadata, size):
    """Each rank's file as the algorithm graph path writes it: encode_algo_graph of algo_graphs(sched)."""
    n = sched.links.n
    return [encode_algo_graph(g, p, n, metadata=metadata, size=size) for p, g in enumerate(algo_graphs(sched))]


@pytest.mark.parametrize(
    "topo",
    [
        mesh([3, 4], 50.0, 500.0),
        ring(5, 50.0, 500.0),
        switch(6, 50.0, 500.0),
        torus([2, 2, 3], 50.0, 500.0),
        uni_ring(4, 50.0, 500.0),
        dense_hetero_graph(5),
    ],
    ids=["mesh3x4", "ring5", "switch6", "torus2x2x3", "uni_ring4", "mixed_links"],
)
@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "all_reduce"])
def test_family_files_are_the_graph_path_s_bytes(tmp_path, topo, collective):
    """write_synthesis frames the files from the transfers: byte for byte what the graph path writes."""
    for k, size in ((1, None), (2, None), (3, 3 * topo.npus * 1000)):
        syn = synthesize(topo, collective, size=MiB, chunks_per_npu=k, seed=3)
        paths = write_synthesis(syn, tmp_path / f"{collective}{k}.et", size=size, jobs=1)
        expected = _graph_path_files(syn.schedule, {"collective": syn.collective}, size)
        assert [p.read_bytes() for p in paths] == expected


def test_family_files_with_two_logical_links_between_a_pair(tmp_path):
    """Tags number a pair's transfers by (link, k) where two logical links join the same pair (written_tags)."""
    lg = tacos.LinkGraph([0, 1, 2])
    for a, b in ((0, 1), (0, 1), (1, 2), (2, 0), (1, 0), (2, 1), (1, 2)):
        lg.src.append(a)
        lg.dst.append(b)
        lg.hops.append([(50.0, 500.0)])
        lg.physical.append([len(lg.physical)])
    sched = greedy_all_gather(lg, lg.weights(float(MiB)), 2, 0)
    assert len({(sched.links.src[x], sched.links.dst[x]) for x in sched.link}) < len(set(sched.link))
    paths = write_synthesis(sched, tmp_path / "par.et", jobs=1)
    assert [p.read_bytes() for p in paths] == _graph_path_files(sched, {}, None)


def test_size_that_does_not_split_into_the_chunks_is_refused(tmp_path):
    syn = synthesize(ring(4, 50.0, 500.0), "all_gather", size=MiB)
    with pytest.raises(ValueError, match="does not split into the algorithm's 4 chunks"):
        write_synthesis(syn, tmp_path / "x.et", size=1001)


def test_beats_native_ring_on_a_heterogeneous_mesh(tmp_path):
    """A 4x4 mesh with 4x faster x links: the synthesised All-Reduce beats the native ring."""
    links = []
    for y in range(4):
        for x in range(4):
            r = 4 * y + x
            if x < 3:
                links.append({"src": r, "dst": r + 1, "bandwidth": 200.0, "latency": 500.0})
            if y < 3:
                links.append({"src": r, "dst": r + 4, "bandwidth": 50.0, "latency": 500.0})
    topo = graph(16, links, name="hetero4x4")
    syn = synthesize(topo, "all_reduce", size=64 * MiB, chunks_per_npu=2, runs=4)
    tacos = simulate_family(syn, tmp_path / "h").finish_ns
    work = Workload(collective_workload(CollectiveType.ALL_REDUCE, 64 * MiB, 16))
    ring_ns = simulate(work, topology=topo, model="link", system=SystemConfig(algorithms={"default": "ring"})).finish_ns
    assert tacos == pytest.approx(syn.time_ns, rel=1e-9)
    assert tacos < 0.75 * ring_ns
