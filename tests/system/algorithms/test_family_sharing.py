"""Ingested families whose ranks run one graph up to a relabelling of peers share that graph, and run in bulk."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.chakra.graph import CollectiveType, Workload
from etsim.cli import main
from etsim.producers.workloads import collective_workload
from etsim.simulation import simulate
from etsim.system.algorithms.family import ChakraAlgorithm
from etsim.system.config import SystemConfig

AR = CollectiveType.ALL_REDUCE
REPO = Path(__file__).resolve().parents[3]


def _family(tmp_path: Path, kind: str, n: int) -> str:
    prefix = tmp_path / kind
    if kind == "msccl_ring":
        xml = REPO / "algorithms" / f"msccl_ring_allreduce_{n}npus.xml"
        assert main(["convert", "msccl", str(xml), "-o", str(prefix)]) == 0
    else:
        assert main(["algo", "export", kind, "--collective", "all_reduce", "--npus", str(n), "-o", str(prefix)]) == 0
    return str(prefix)


@pytest.mark.parametrize("kind", ["ring", "msccl_ring"])
def test_symmetric_families_share_one_relative_graph_and_run_in_bulk(kind: str, tmp_path: Path) -> None:
    n = 64  # large enough for the fast path (group size × graph nodes >= MIN_WORK)
    spec = _family(tmp_path, kind, n)
    algo = ChakraAlgorithm(spec)
    graphs = {id(algo.graph(AR, n, p)) for p in range(n)}
    assert len(graphs) == 1 and algo.graph(AR, n, 0).relative_peers
    # The shared graph still computes the all-reduce (its data annotations were made relative where they move):
    # simulate verifies it before running it, and would refuse it otherwise.
    workload = Workload(collective_workload(AR, 64 << 20, n))
    topology = str(REPO / "topologies" / "ring64.yaml")
    fast = simulate(workload, topology=topology, system=SystemConfig(algorithms={"default": spec}))
    slow = simulate(workload, topology=topology, system=SystemConfig(algorithms={"default": spec}, fast_path=False))
    assert fast.sim["bulk_parts"] == n and slow.sim["bulk_parts"] == 0
    assert fast.finish_ns == slow.finish_ns
    assert [r.finish_ns for r in fast.ranks] == [r.finish_ns for r in slow.ranks]
    native = simulate(workload, topology=topology, system=SystemConfig(algorithms={"default": "ring"}))
    assert fast.finish_ns == native.finish_ns  # the same ring, written once and read back


@pytest.mark.parametrize("kind", ["tree", "halving_doubling"])
def test_families_whose_ranks_differ_keep_a_graph_per_rank(kind: str, tmp_path: Path) -> None:
    algo = ChakraAlgorithm(_family(tmp_path, kind, 8))
    graphs = [algo.graph(AR, 8, p) for p in range(8)]
    assert len({id(g) for g in graphs}) == 8 and not graphs[0].relative_peers
