"""Every native algorithm computes its collective (the verifier, for every collective and several group sizes).

Natives are not verified at run time (cost); this test is what stands behind them. It also checks
that the shipped families verify once read back from their files, so the annotations survive the
round trip through Chakra ET.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.graph import RECV, SEND
from etsim.algo.semantics import minimum_bytes
from etsim.algo.verify import verify_graphs
from etsim.chakra import CollectiveType as C
from etsim.chakra import Workload, load_workload
from etsim.chakra.graph import collective_buffer_bytes
from etsim.cli.algo import export_algorithm
from etsim.errors import EtsimWarning
from etsim.network import fully_connected, switch
from etsim.network import ring as ring_topology
from etsim.producers import collective_workload
from etsim.simulation import simulate
from etsim.system.algorithms import (
    ALGORITHMS,
    CollectiveAlgorithm,
    DirectAlgorithm,
    HalvingDoublingAlgorithm,
    HierarchicalAlgorithm,
    HierarchicalBaselineAlgorithm,
    NcclAlgorithm,
    RingAlgorithm,
    TreeAlgorithm,
)
from etsim.system.config import SystemConfig

REPO = Path(__file__).resolve().parents[3]
SIZES = (1, 2, 3, 4, 5, 6, 8, 16)

NATIVES: list[CollectiveAlgorithm] = [
    RingAlgorithm(),
    RingAlgorithm(segments=3),
    DirectAlgorithm(),
    HalvingDoublingAlgorithm(),
    TreeAlgorithm(),
    HierarchicalAlgorithm(),
    HierarchicalBaselineAlgorithm(),
]
DIMS = [(2, 2), (2, 3), (3, 2), (4, 4), (2, 2, 2), (3, 1, 2), (2, 3, 2)]


def cases():
    for algo in NATIVES:
        for coll in sorted(algo.collectives):
            for n in SIZES:
                if algo.supports(coll, n) is None:
                    yield pytest.param(algo, coll, n, id=f"{algo.name}-{coll.name.lower()}-{n}")
    for cls in (HierarchicalAlgorithm, HierarchicalBaselineAlgorithm):
        for dims in DIMS:
            algo = cls(dims=dims)
            n = math.prod(dims)
            for coll in sorted(algo.collectives):
                shape = "x".join(map(str, dims))
                yield pytest.param(algo, coll, n, id=f"{algo.name}-{coll.name.lower()}-{shape}")


@pytest.mark.parametrize(("algo", "coll", "n"), list(cases()))
def test_native_algorithm_computes_its_collective(algo, coll, n):
    graphs = [algo.graph(coll, n, r) for r in range(n)]
    # Two interleavings: every rank running ahead until it waits (the default), and all in lockstep.
    for lockstep in (False, True):
        verdict = verify_graphs(graphs, coll, lockstep=lockstep)
        assert verdict.ok is True, str(verdict)


#: Natives that are timing models of another runtime's algorithms, not data movements: their graphs carry wire bytes
#: (a protocol's lines, a switch's reduction) and no chunks to verify; the named test checks their bytes instead.
TIMING_MODELS = {NcclAlgorithm: "tests/system/algorithms/test_nccl.py"}


def test_every_registered_native_is_covered():
    covered = {type(a) for a in NATIVES}
    for name in ALGORITHMS.names():
        cls = ALGORITHMS.get(name)
        if cls.__module__.startswith("etsim."):
            assert cls in covered or (REPO / TIMING_MODELS.get(cls, "-")).is_file(), name


@pytest.mark.parametrize(
    "prefix", sorted({p.name.split(".")[0] for p in (REPO / "algorithms").glob("*.et")}), ids=lambda p: p
)
def test_shipped_family_verifies_from_its_files(prefix):
    workload = load_workload(REPO / "algorithms" / prefix)
    graphs = [algo_graph_from_trace(t) for t in workload.traces]
    recorded = {a.string_val for a in workload.traces[0].metadata.attr if a.name == "collective"}
    coll = {"allreduce": C.ALL_REDUCE, "allgather": C.ALL_GATHER, "alltoall": C.ALL_TO_ALL}.get(
        next(iter(recorded)), C.ALL_REDUCE
    )
    verdict = verify_graphs(graphs, coll)
    assert verdict.ok is True, str(verdict)


# -- a correct algorithm moves at least the collective's minimum bytes (hypothesis) -------------------------

BOUNDED = [c for c in C if c not in (C.BARRIER, C.REDUCE_SCATTER_BLOCK)]


@st.composite
def verified_cases(draw):  # type: ignore[no-untyped-def]
    """(algorithm, collective, group size, chunks per stream, topology kind), for algorithms that support it."""
    algo = draw(st.sampled_from([*NATIVES, HierarchicalAlgorithm(dims=(2, 3)), HierarchicalAlgorithm(dims=(2, 2, 2))]))
    coll = draw(st.sampled_from(sorted(c for c in algo.collectives if c in BOUNDED)))
    dims = getattr(algo, "dims", None)
    n = math.prod(dims) if dims else draw(st.integers(min_value=2, max_value=12))
    assume(algo.supports(coll, n) is None)
    return algo, coll, n, draw(st.integers(min_value=1, max_value=3)), draw(st.sampled_from(["fc", "ring", "switch"]))


def sent_and_received(algo: CollectiveAlgorithm, coll: C, n: int, buffer: float) -> tuple[list[float], list[float]]:
    """Bytes each rank sends and receives in *algo*'s graphs for a collective buffer of *buffer* bytes."""
    sent, received = [0.0] * n, [0.0] * n
    for r in range(n):
        g = algo.graph(coll, n, r)
        unit = buffer / (g.total_chunks or 1)
        for v, kind in enumerate(g.kinds):
            if kind == SEND:
                sent[r] += g.chunks[v] * unit
            elif kind == RECV:
                received[r] += g.chunks[v] * unit
    return sent, received


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(verified_cases())
def test_a_verified_algorithm_moves_at_least_the_minimum_bytes(case):
    algo, coll, n, chunks, topo = case
    assert algo.verify(coll, n).ok is True  # only verified algorithms are held to the bound (all natives are)
    size = 6 * 7 * 8 * 1024  # divisible by every chunking used here
    buffer = collective_buffer_bytes(coll, size, n)
    bound = minimum_bytes(coll, n, buffer)
    sent, received = sent_and_received(algo, coll, n, buffer)
    eps = 1e-9 * buffer
    assert min(sent) >= bound["sent_per_rank"] - eps
    assert min(received) >= bound["received_per_rank"] - eps
    assert sum(sent) >= bound["total"] - eps
    # A run moves exactly those bytes, whatever the network and the chunking (the algorithm is run from
    # its exported family, so the run verifies it again from the files before it starts).
    topology = {"fc": fully_connected, "ring": ring_topology, "switch": switch}[topo](n, 50.0, 500.0)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", EtsimWarning)
        prefix = str(Path(tmp) / "algo")
        export_algorithm(algo, coll, n, prefix)
        result = simulate(
            Workload(collective_workload(coll, size, n)),
            topology=topology,
            system=SystemConfig(algorithms={"default": prefix}, chunks=chunks),
        )
    assert result.network["bytes"] == pytest.approx(sum(sent))
    assert result.network["bytes"] >= bound["total"] - eps
