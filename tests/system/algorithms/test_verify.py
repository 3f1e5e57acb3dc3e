"""Every native algorithm computes its collective (the verifier, for every collective and several group sizes).

Natives are not verified at run time (cost); this test is what stands behind them. It also checks
that the shipped families verify once read back from their files, so the annotations survive the
round trip through Chakra ET.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from etsim.chakra import CollectiveType as C
from etsim.chakra import load_workload
from etsim.chakra.algorithm import algo_graph_from_trace
from etsim.chakra.verify import verify_graphs
from etsim.compat.algorithms import AstraDirectAlgorithm, AstraHalvingDoublingAlgorithm, AstraRingAlgorithm
from etsim.system.algorithms import (
    ALGORITHMS,
    CollectiveAlgorithm,
    DirectAlgorithm,
    HalvingDoublingAlgorithm,
    HierarchicalAlgorithm,
    HierarchicalBaselineAlgorithm,
    RingAlgorithm,
    TreeAlgorithm,
)

REPO = Path(__file__).resolve().parents[3]
SIZES = (1, 2, 3, 4, 5, 6, 8, 13, 16)

NATIVES: list[CollectiveAlgorithm] = [
    RingAlgorithm(),
    RingAlgorithm(segments=3),
    DirectAlgorithm(),
    HalvingDoublingAlgorithm(),
    TreeAlgorithm(),
    HierarchicalAlgorithm(),
    HierarchicalBaselineAlgorithm(),
    AstraRingAlgorithm(),
    AstraDirectAlgorithm(),
    AstraHalvingDoublingAlgorithm(),
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
    verdict = verify_graphs([algo.graph(coll, n, r) for r in range(n)], coll)
    assert verdict.ok is True, str(verdict)


def test_every_registered_native_is_covered():
    covered = {type(a) for a in NATIVES}
    for name in ALGORITHMS.names():
        cls = ALGORITHMS.get(name)
        if cls.__module__.startswith("etsim."):
            assert cls in covered, name


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
