"""Structure and cost of the native collective algorithms.

Every (algorithm, collective, group size) graph is checked for: dependencies on earlier nodes
only; sends and receives pairing up per (src, dst, tag) with equal sizes; the bytes each rank
sends; causality (who must have heard from whom). A small reference evaluator — list scheduling
of all ranks' graphs, every message costing α + bytes·β with no contention and every reduction
bytes·γ — then checks the closed forms of reference/cost-models.md to 1e-9 relative.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph
from etsim.chakra import CollectiveType as C
from etsim.chakra import Workload
from etsim.chakra.graph import collective_buffer_bytes
from etsim.errors import ConfigError, RegistryError
from etsim.producers.workloads import collective_workload
from etsim.simulation import simulate
from etsim.system.algorithms import (
    ALGORITHMS,
    CollectiveAlgorithm,
    DirectAlgorithm,
    HalvingDoublingAlgorithm,
    HierarchicalAlgorithm,
    RingAlgorithm,
    TreeAlgorithm,
)
from etsim.system.config import SystemConfig

SIZES = (2, 3, 4, 8, 16)
REL = 1e-9
ALPHA, BETA, GAMMA = 700.0, 0.013, 0.004
N = 3_000_000.0  # buffer bytes

Delay = Callable[[int, int, float], float]


def uniform(alpha: float = ALPHA, beta: float = BETA) -> Delay:
    return lambda src, dst, nbytes: alpha + nbytes * beta


def graphs_of(algo: CollectiveAlgorithm, coll: C, p: int) -> list[AlgoGraph]:
    return [algo.graph(coll, p, r) for r in range(p)]


def ancestors(g, node: int) -> set[int]:  # type: ignore[no-untyped-def]
    seen: set[int] = set()
    stack = list(g.deps(node))
    while stack:
        d = stack.pop()
        if d not in seen:
            seen.add(d)
            stack.extend(g.deps(d))
    return seen


def messages(graphs: list[AlgoGraph]) -> tuple[dict, dict]:
    """Per (src, dst, tag): the send node positions at src and the recv node positions at dst, in order."""
    p = len(graphs)
    sends: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for r, g in enumerate(graphs):
        for i, kind in enumerate(g.kinds):
            if kind == SEND:
                sends[(r, g.peer_position(i, r, p), g.tags[i])].append(i)
            elif kind == RECV:
                recvs[(g.peer_position(i, r, p), r, g.tags[i])].append(i)
    return sends, recvs


def schedule(graphs: list[AlgoGraph], buffer: float, delay: Delay, gamma: float = 0.0) -> list[list[float]]:
    """Finish time of every node of every rank (list scheduling, no contention).

    A SEND issued at t finishes at delivery t + delay; a RECV finishes when its deps are done
    and the matching message has been delivered; a COMP reduces ``bytes`` in bytes·γ.
    """
    p = len(graphs)
    sends, recvs = messages(graphs)
    partner: dict[tuple[int, int], tuple[int, int]] = {}
    for key, spos in sends.items():
        src, dst, _ = key
        for s, r in zip(spos, recvs.get(key, []), strict=True):
            partner[(dst, r)] = (src, s)
    waiting: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    missing: dict[tuple[int, int], int] = {}
    for r, g in enumerate(graphs):
        for i in range(g.num_nodes):
            preds = [(r, d) for d in g.deps(i)]
            if g.kinds[i] == RECV:
                preds.append(partner[(r, i)])
            missing[(r, i)] = len(preds)
            for pr in preds:
                waiting[pr].append((r, i))
    finish = [[math.nan] * g.num_nodes for g in graphs]
    stack = [node for node, m in missing.items() if m == 0]
    done = 0
    while stack:
        r, i = stack.pop()
        g = graphs[r]
        ready = max((finish[r][d] for d in g.deps(i)), default=0.0)
        nbytes = g.chunks[i] * buffer / (g.total_chunks or 1)
        if g.kinds[i] == SEND:
            finish[r][i] = ready + delay(r, g.peer_position(i, r, p), nbytes)
        elif g.kinds[i] == RECV:
            src, s = partner[(r, i)]
            finish[r][i] = max(ready, finish[src][s])
        else:
            dur = g.durations_ns[i]
            finish[r][i] = ready + (dur if dur is not None else nbytes * gamma)
        done += 1
        for nxt in waiting[(r, i)]:
            missing[nxt] -= 1
            if missing[nxt] == 0:
                stack.append(nxt)
    assert done == len(missing), "deadlock: some nodes never became ready"
    return finish


def makespan(algo, coll, p, delay=None, gamma=0.0, buffer=N) -> float:
    finish = schedule(graphs_of(algo, coll, p), buffer, delay or uniform(), gamma)
    return max(max(f, default=0.0) for f in finish)


def heard_from(graphs: list[AlgoGraph]) -> list[int]:
    """Per rank, the bit mask of ranks that causally precede its completion."""
    sends, recvs = messages(graphs)
    partner = {}
    for key, spos in sends.items():
        for s, r in zip(spos, recvs[key], strict=True):
            partner[(key[1], r)] = (key[0], s)
    # Iterate to a fixed point (graphs are small).
    mask = [[1 << r] * g.num_nodes for r, g in enumerate(graphs)]
    changed = True
    while changed:
        changed = False
        for r, g in enumerate(graphs):
            for i in range(g.num_nodes):
                m = mask[r][i]
                for d in g.deps(i):
                    m |= mask[r][d]
                if g.kinds[i] == RECV:
                    src, s = partner[(r, i)]
                    m |= mask[src][s]
                if m != mask[r][i]:
                    mask[r][i] = m
                    changed = True
    out = []
    for r in range(len(graphs)):
        m = 1 << r
        for x in mask[r]:
            m |= x
        out.append(m)
    return out


# --- the cases ---------------------------------------------------------------------------

HIER_DIMS = {4: (2, 2), 8: (2, 4), 16: (4, 4)}


def algorithms() -> list[tuple[str, CollectiveAlgorithm]]:
    return [
        ("ring", RingAlgorithm()),
        ("ring-seg4", RingAlgorithm(segments=4)),
        ("direct", DirectAlgorithm()),
        ("halving_doubling", HalvingDoublingAlgorithm()),
        ("tree", TreeAlgorithm()),
        ("hierarchical", HierarchicalAlgorithm()),
    ]


def hierarchical_for(p: int) -> HierarchicalAlgorithm:
    return HierarchicalAlgorithm(HIER_DIMS.get(p))


CASES = []
for label, algo in algorithms():
    for coll in sorted(algo.collectives):
        for p in SIZES:
            a = hierarchical_for(p) if label == "hierarchical" else algo
            if a.supports(coll, p) is None:
                CASES.append(pytest.param(a, coll, p, id=f"{label}-{coll.name.lower()}-{p}"))


def sent_fraction(algo: CollectiveAlgorithm, coll: C, p: int, r: int) -> float:
    """Theory: the fraction of the buffer rank r sends."""
    sym = {
        C.ALL_REDUCE: 2 * (p - 1) / p,
        C.REDUCE_SCATTER: (p - 1) / p,
        C.ALL_GATHER: (p - 1) / p,
        C.BARRIER: 0.0,
    }
    if isinstance(algo, HierarchicalAlgorithm):
        dims = algo.dims or (p,)
        held, total = 1, 0.0
        for n in dims:
            held *= n
            total += (n - 1) / held
        return 2 * total if coll == C.ALL_REDUCE else total
    if isinstance(algo, TreeAlgorithm):
        from etsim.system.algorithms.steps import heap_tree

        if coll == C.ALL_REDUCE:
            return sum(
                ((parent[r] >= 0) + len(children[r])) / 2
                for parent, children in (heap_tree(p), heap_tree(p, mirrored=True))
            )
        _, children = heap_tree(p)
        return len(children[r]) if coll == C.BROADCAST else float(r != 0)
    if isinstance(algo, RingAlgorithm):
        return {
            C.ALL_TO_ALL: (p - 1) / 2,
            C.BROADCAST: float(r != p - 1),
            C.REDUCE: float(r != 0),
        }.get(coll, sym.get(coll))
    if isinstance(algo, DirectAlgorithm):
        return {
            C.ALL_TO_ALL: (p - 1) / p,
            C.GATHER: 0.0 if r == 0 else 1 / p,
            C.SCATTER: (p - 1) / p if r == 0 else 0.0,
            C.BROADCAST: (p - 1) if r == 0 else 0.0,
            C.REDUCE: 0.0 if r == 0 else 1.0,
        }.get(coll, sym.get(coll))
    return sym[coll]


@pytest.mark.parametrize(("algo", "coll", "p"), CASES)
def test_structure(algo, coll, p):
    graphs = graphs_of(algo, coll, p)
    for r, g in enumerate(graphs):
        n = g.num_nodes
        assert len(g.peers) == len(g.tags) == len(g.chunks) == len(g.durations_ns) == n
        assert g.deps_ptr[0] == 0 and len(g.deps_ptr) == n + 1
        for i in range(n):
            assert all(0 <= d < i for d in g.deps(i)), f"rank {r} node {i}: deps not on earlier nodes"
            if g.kinds[i] in (SEND, RECV):
                peer = g.peer_position(i, r, p)
                assert 0 <= peer < p and peer != r
                assert g.chunks[i] == int(g.chunks[i]) >= 0
            else:
                assert g.kinds[i] == COMP and g.chunks[i] > 0
        assert g.total_chunks is not None and g.total_chunks >= 1
    # Sends and receives pair up per (src, dst, tag) with equal sizes; each key carries one message.
    sends, recvs = messages(graphs)
    assert sends.keys() == recvs.keys()
    for key, spos in sends.items():
        src, dst, _ = key
        send_sizes = [graphs[src].chunks[i] / graphs[src].total_chunks for i in spos]
        recv_sizes = [graphs[dst].chunks[i] / graphs[dst].total_chunks for i in recvs[key]]
        assert send_sizes == recv_sizes, key
        # Messages sharing a key match in issue order, so that order must be fixed by dependencies.
        for side, positions in ((graphs[src], spos), (graphs[dst], recvs[key])):
            for before, after in itertools.pairwise(positions):
                assert before in ancestors(side, after), f"{key}: nodes {before} and {after} are not ordered"
    # Bytes sent per rank.
    for r, g in enumerate(graphs):
        sent = sum(c for k, c in zip(g.kinds, g.chunks, strict=True) if k == SEND) / g.total_chunks
        assert sent == pytest.approx(sent_fraction(algo, coll, p, r), rel=1e-12, abs=1e-12), f"rank {r}"
    # Causality: who must have heard from everybody.
    masks = heard_from(graphs)
    everyone = (1 << p) - 1
    if coll in (C.BROADCAST, C.SCATTER):
        assert all(m & 1 for m in masks)
    elif coll in (C.REDUCE, C.GATHER):
        assert masks[0] == everyone
    else:
        assert masks == [everyone] * p
    # The simulation terminates.
    assert makespan(algo, coll, p) > 0


# --- closed forms ------------------------------------------------------------------------

POW2 = (2, 4, 8, 16)


def lg(p: int) -> int:
    return p.bit_length() - 1


@pytest.mark.parametrize("p", SIZES)
def test_ring_closed_forms(p):
    ring = RingAlgorithm()
    a, b, g, n = ALPHA, BETA, GAMMA, N
    assert makespan(ring, C.ALL_REDUCE, p, gamma=g) == pytest.approx(
        2 * (p - 1) * (a + n * b / p) + (p - 1) * n * g / p, rel=REL
    )
    assert makespan(ring, C.REDUCE_SCATTER, p, gamma=g) == pytest.approx(
        (p - 1) * (a + n * b / p) + (p - 1) * n * g / p, rel=REL
    )
    # All-gather: n = the gathered output (p × the workload's per-rank comm_size).
    assert makespan(ring, C.ALL_GATHER, p) == pytest.approx((p - 1) * (a + n * b / p), rel=REL)
    assert makespan(ring, C.ALL_TO_ALL, p) == pytest.approx((p - 1) * a + n * (p - 1) / 2 * b, rel=REL)
    assert makespan(ring, C.BARRIER, p) == pytest.approx((p - 1) * a, rel=REL)
    assert makespan(ring, C.BROADCAST, p) == pytest.approx((p - 1) * (a + n * b), rel=REL)
    assert makespan(ring, C.REDUCE, p) == pytest.approx((p - 1) * (a + n * b), rel=REL)
    for k in (2, 4, 5):
        chain = RingAlgorithm(segments=k)
        pipelined = (p - 2 + k) * (a + n * b / k)
        assert makespan(chain, C.BROADCAST, p) == pytest.approx(pipelined, rel=REL)
        assert makespan(chain, C.REDUCE, p) == pytest.approx(pipelined, rel=REL)


@pytest.mark.parametrize("p", SIZES)
def test_direct_closed_forms(p):
    direct = DirectAlgorithm()
    a, b, g, n = ALPHA, BETA, GAMMA, N
    step = a + n * b / p
    assert makespan(direct, C.ALL_REDUCE, p, gamma=g) == pytest.approx(2 * step + (p - 1) * n * g / p, rel=REL)
    assert makespan(direct, C.REDUCE_SCATTER, p, gamma=g) == pytest.approx(step + (p - 1) * n * g / p, rel=REL)
    for coll in (C.ALL_GATHER, C.ALL_TO_ALL, C.GATHER, C.SCATTER):
        assert makespan(direct, coll, p) == pytest.approx(step, rel=REL), coll
    assert makespan(direct, C.BROADCAST, p) == pytest.approx(a + n * b, rel=REL)
    assert makespan(direct, C.REDUCE, p, gamma=g) == pytest.approx(a + n * b + (p - 1) * n * g, rel=REL)
    assert makespan(direct, C.BARRIER, p) == pytest.approx(a, rel=REL)


def test_direct_single_port_closed_form():
    """With one port per rank (sends of a rank serialised), direct all-reduce is 2(p−1)α + 2n(p−1)/p·β."""
    p, a, b, n = 8, ALPHA, BETA, N
    graphs = graphs_of(DirectAlgorithm(), C.ALL_REDUCE, p)
    # Emulate a single port: chain each rank's sends of a phase in node order.
    serial = []
    for g in graphs:
        h = AlgoGraph(
            kinds=list(g.kinds),
            peers=list(g.peers),
            tags=list(g.tags),
            chunks=list(g.chunks),
            durations_ns=list(g.durations_ns),
            names=list(g.names),
            total_chunks=g.total_chunks,
            relative_peers=g.relative_peers,
            deps_ptr=[0],
            deps_idx=[],
        )
        prev_send: dict[int, int] = {}
        for i in range(g.num_nodes):
            deps = list(g.deps(i))
            if g.kinds[i] == SEND and g.tags[i] in prev_send:
                deps.append(prev_send[g.tags[i]])
            if g.kinds[i] == SEND:
                prev_send[g.tags[i]] = i
            h.deps_idx.extend(deps)
            h.deps_ptr.append(len(h.deps_idx))
        serial.append(h)
    finish = schedule(serial, n, uniform())
    assert max(max(f) for f in finish) == pytest.approx(2 * (p - 1) * a + 2 * n * (p - 1) / p * b, rel=REL)


@pytest.mark.parametrize("p", POW2)
def test_halving_doubling_closed_forms(p):
    hd = HalvingDoublingAlgorithm()
    a, b, g, n = ALPHA, BETA, GAMMA, N
    frac = (p - 1) / p
    assert makespan(hd, C.ALL_REDUCE, p, gamma=g) == pytest.approx(
        2 * lg(p) * a + 2 * n * frac * b + n * frac * g, rel=REL
    )
    assert makespan(hd, C.REDUCE_SCATTER, p, gamma=g) == pytest.approx(lg(p) * a + n * frac * b + n * frac * g, rel=REL)
    assert makespan(hd, C.ALL_GATHER, p) == pytest.approx(lg(p) * a + n * frac * b, rel=REL)


@pytest.mark.parametrize("p", SIZES)
def test_tree_closed_forms(p):
    tree = TreeAlgorithm()
    a, b, n = ALPHA, BETA, N
    depth = math.floor(math.log2(p))
    # Contention-free: a parent's sends to its children overlap, so each level costs one message.
    assert makespan(tree, C.ALL_REDUCE, p) == pytest.approx(2 * depth * (a + n * b / 2), rel=REL)
    assert makespan(tree, C.BROADCAST, p) == pytest.approx(depth * (a + n * b), rel=REL)
    assert makespan(tree, C.REDUCE, p) == pytest.approx(depth * (a + n * b), rel=REL)


@pytest.mark.parametrize("p", (2, 4, 8, 16, 6))
def test_double_binary_tree_is_complementary(p):
    """Even p: no rank is interior in both trees, and every rank sends at most twice its half-buffer share."""
    tree = TreeAlgorithm()
    graphs = graphs_of(tree, C.ALL_REDUCE, p)
    for r, g in enumerate(graphs):
        down = {g.tags[i] for i in range(g.num_nodes) if g.kinds[i] == SEND and g.tags[i] >= 2}
        assert len(down) <= 1, f"rank {r} forwards data down both trees"
        sent = sum(c for k, c in zip(g.kinds, g.chunks, strict=True) if k == SEND) / g.total_chunks
        assert sent <= 2.0

    def root(tag: int) -> list[int]:
        return [
            r
            for r, g in enumerate(graphs)
            if not any(k == SEND and t == tag for k, t in zip(g.kinds, g.tags, strict=True))
        ]

    assert root(0) == [0] and root(1) == [p - 1]


@pytest.mark.parametrize(("dims"), [(2, 2), (2, 4), (4, 2), (2, 2, 2), (4, 4), (2, 8), (2, 4, 2), (3, 1, 2)])
def test_hierarchical_closed_forms(dims):
    """Per-dimension α_i, β_i (the message is charged to the dimension src and dst differ in)."""
    p = math.prod(dims)
    alphas = [300.0, 900.0, 2500.0]
    betas = [0.002, 0.01, 0.04]
    strides = [math.prod(dims[:i]) for i in range(len(dims))]

    def delay(src: int, dst: int, nbytes: float) -> float:
        diff = [i for i, (s, n) in enumerate(zip(strides, dims, strict=True)) if (src // s) % n != (dst // s) % n]
        assert len(diff) == 1, "a hierarchical step must stay within one dimension"
        return alphas[diff[0]] + nbytes * betas[diff[0]]

    algo = HierarchicalAlgorithm(dims)
    n, g = N, GAMMA
    rs = ag = red = 0.0
    held = 1
    for i, ni in enumerate(dims):
        held *= ni
        rs += (ni - 1) * (alphas[i] + n * betas[i] / held)
        red += (ni - 1) * n * g / held
    ag = rs
    assert makespan(algo, C.ALL_REDUCE, p, delay=delay, gamma=g) == pytest.approx(rs + ag + red, rel=REL)
    assert makespan(algo, C.REDUCE_SCATTER, p, delay=delay, gamma=g) == pytest.approx(rs + red, rel=REL)
    assert makespan(algo, C.ALL_GATHER, p, delay=delay) == pytest.approx(ag, rel=REL)


@pytest.mark.parametrize("coll", [C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER])
@pytest.mark.parametrize("p", SIZES)
def test_hierarchical_without_dims_is_ring(coll, p):
    flat, ring = HierarchicalAlgorithm(), RingAlgorithm()
    assert makespan(flat, coll, p, gamma=GAMMA) == pytest.approx(makespan(ring, coll, p, gamma=GAMMA), rel=REL)
    for r in range(p):
        g, h = flat.graph(coll, p, r), ring.graph(coll, p, r)
        assert g.kinds == h.kinds and g.chunks == h.chunks
        assert [g.peer_position(i, r, p) for i in range(g.num_nodes) if g.kinds[i] != COMP] == [
            h.peer_position(i, r, p) for i in range(h.num_nodes) if h.kinds[i] != COMP
        ]


# --- API ---------------------------------------------------------------------------------


def test_registry_names_and_alias():
    assert {"ring", "direct", "halving_doubling", "tree", "hierarchical"} <= set(ALGORITHMS.names())
    assert ALGORITHMS.get("hd") is HalvingDoublingAlgorithm
    assert HierarchicalAlgorithm.needs_dims is True
    with pytest.raises(RegistryError, match=r"available: .*halving_doubling.*ring"):
        ALGORITHMS.get("rnig")


def test_symmetric_graphs_are_shared():
    ring, direct = RingAlgorithm(), DirectAlgorithm()
    assert ring.graph(C.ALL_REDUCE, 8, 0) is ring.graph(C.ALL_REDUCE, 8, 5)
    assert ring.graph(C.ALL_REDUCE, 8, 0).relative_peers
    assert direct.graph(C.ALL_TO_ALL, 8, 1) is direct.graph(C.ALL_TO_ALL, 8, 7)
    assert direct.graph(C.BROADCAST, 8, 0) is not direct.graph(C.BROADCAST, 8, 1)


def test_supports_reasons():
    assert RingAlgorithm().supports(C.GATHER, 4) == (
        "algorithm 'ring' does not implement gather (it implements all_gather, all_reduce, all_to_all, "
        "barrier, broadcast, reduce, reduce_scatter)"
    )
    reason = HalvingDoublingAlgorithm().supports(C.ALL_REDUCE, 12)
    assert reason is not None and "power-of-two" in reason and "12" in reason
    assert HalvingDoublingAlgorithm().supports(C.ALL_TO_ALL, 8) is not None
    reason = HierarchicalAlgorithm((4, 8)).supports(C.ALL_REDUCE, 16)
    assert reason is not None and "4x8" in reason and "32" in reason and "16" in reason
    assert TreeAlgorithm().supports(C.ALL_GATHER, 8) is not None
    assert DirectAlgorithm().supports(C.ALL_REDUCE, 0) is not None
    with pytest.raises(ConfigError, match="power-of-two"):
        HalvingDoublingAlgorithm().graph(C.ALL_REDUCE, 6, 0)
    with pytest.raises(ConfigError, match="position 8"):
        RingAlgorithm().graph(C.ALL_REDUCE, 8, 8)
    with pytest.raises(ConfigError):
        HierarchicalAlgorithm((0, 4))
    with pytest.raises(ConfigError):
        RingAlgorithm(segments=0)


@pytest.mark.parametrize("name", ["ring", "direct", "halving_doubling", "tree", "hierarchical"])
def test_single_rank_is_empty(name):
    algo = ALGORITHMS.get(name)()
    coll = sorted(algo.collectives)[0]
    assert algo.graph(coll, 1, 0).num_nodes == 0


# -- the real simulator against this evaluator ------------------------------------------------------
#
# On a fully connected topology with the congestion-unaware analytical model every message costs
# latency + bytes/bandwidth, the evaluator's α + bytes·β, so both must agree to 1e-9 relative.

TOPOLOGY = Path(__file__).resolve().parents[3] / "topologies" / "fully_connected8.yaml"  # 25 GB/s, 500 ns
LATENCY, BANDWIDTH = 500.0, 25.0
SIM_P = 8
SIM_SIZE = 3 << 20

SIMULATED_CASES = [
    pytest.param(name, coll, id=f"{name}-{coll.name.lower()}")
    for name in ("ring", "direct", "halving_doubling", "tree", "hierarchical")
    for coll in sorted(ALGORITHMS.get(name).collectives)
]


@pytest.mark.parametrize(("name", "coll"), SIMULATED_CASES)
@pytest.mark.parametrize("reduction_bandwidth", [None, 40.0])
def test_simulator_matches_reference(name, coll, reduction_bandwidth):
    workload = Workload(traces=collective_workload(coll, SIM_SIZE, SIM_P), source="test")
    config = SystemConfig(algorithms={"default": name}, reduction_bandwidth=reduction_bandwidth)
    result = simulate(workload, topology=TOPOLOGY, model="analytical", system=config)
    algo = ALGORITHMS.get(name)()
    expected = makespan(
        algo,
        coll,
        SIM_P,
        delay=uniform(LATENCY, 1 / BANDWIDTH),
        gamma=0.0 if reduction_bandwidth is None else 1 / reduction_bandwidth,
        buffer=collective_buffer_bytes(coll, SIM_SIZE, SIM_P),
    )
    assert result.finish_ns == pytest.approx(expected, rel=1e-9)


def test_hierarchical_over_a_sub_group_runs_over_the_dimensions_it_spans(tmp_path: Path) -> None:
    """A tensor-parallel group in a node and a data-parallel group across nodes of a 2-node gpu_cluster."""
    import json

    from etsim.chakra import TraceBuilder
    from etsim.network.builders import build_topology

    algo = HierarchicalAlgorithm((2, 2, 2))
    assert algo.for_call(C.ALL_REDUCE, 64, tuple(range(8))) is algo  # the whole system
    assert algo.for_call(C.ALL_REDUCE, 64, (0, 1, 2, 3)).dims == (2, 2)  # dimensions 0 and 1
    assert algo.for_call(C.ALL_REDUCE, 64, (1, 5)).dims == (2,)  # dimension 2
    line = HierarchicalAlgorithm((8, 8)).for_call(C.ALL_REDUCE, 64, (3, 59))  # 2 of dimension 1's 8: its ring
    assert line.dims == (2,) and line.supports(C.ALL_REDUCE, 2) is None
    partial = algo.for_call(C.ALL_REDUCE, 64, (0, 1, 2))  # not a whole sub-grid: refused, saying why
    assert "not a whole sub-grid" in str(partial.supports(C.ALL_REDUCE, 3))
    assert algo.for_call(C.ALL_REDUCE, 64, (2, 3, 0, 1)).supports(C.ALL_REDUCE, 4) is not None  # (not in rank order)
    assert algo.for_call(C.ALL_REDUCE, 64, (0, 1, 2, 3)) is algo.for_call(C.ALL_REDUCE, 64, (4, 5, 6, 7))

    topology = build_topology({"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 16}, None)
    groups = {"1": list(range(8)), "2": list(range(8, 16)), **{str(10 + g): [g, g + 8] for g in range(8)}}
    (tmp_path / "groups.json").write_text(json.dumps(groups))
    traces = []
    for rank in range(16):
        b = TraceBuilder(rank)
        tp = b.collective(C.ALL_REDUCE, 1 << 24, pg_name="1" if rank < 8 else "2")
        b.collective(C.ALL_REDUCE, 1 << 24, pg_name=str(10 + rank % 8), deps=[tp])
        traces.append(b.build(rank=rank))
    finish = {}
    for name in ("hierarchical", "ring"):
        system = SystemConfig(algorithms={"default": name}, comm_groups=str(tmp_path / "groups.json"))
        result = simulate(Workload(traces), topology=topology, system=system)
        assert {c.algorithm for c in result.collectives} == {name}
        finish[name] = result.finish_ns
    assert finish["hierarchical"] == finish["ring"]  # one dimension each: a hierarchical phase is that ring
