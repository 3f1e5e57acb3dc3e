"""The real simulator runs every native algorithm as the reference evaluator of test_native.py predicts.

On a fully connected topology with the congestion-unaware analytical model every message costs
latency + bytes/bandwidth, the evaluator's α + bytes·β, so both must agree to 1e-9 relative.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from etsim.chakra import Workload
from etsim.chakra.algorithm import collective_buffer_bytes
from etsim.producers.workloads import collective_workload
from etsim.simulation import simulate
from etsim.system.algorithms import ALGORITHMS
from etsim.system.config import SystemConfig

HERE = Path(__file__).resolve().parent
TOPOLOGY = HERE.parents[2] / "topologies" / "fully_connected8.yaml"  # 25 GB/s, 500 ns
LATENCY, BANDWIDTH = 500.0, 25.0
P = 8
SIZE = 3 << 20


def _native():
    spec = importlib.util.spec_from_file_location("algo_test_native", HERE / "test_native.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NATIVE = _native()

CASES = [
    pytest.param(name, coll, id=f"{name}-{coll.name.lower()}")
    for name in ("ring", "direct", "halving_doubling", "tree", "hierarchical")
    for coll in sorted(ALGORITHMS.get(name).collectives)
]


@pytest.mark.parametrize(("name", "coll"), CASES)
@pytest.mark.parametrize("reduction_bandwidth", [None, 40.0])
def test_simulator_matches_reference(name, coll, reduction_bandwidth):
    workload = Workload(traces=collective_workload(coll, SIZE, P), source="test")
    config = SystemConfig(algorithms={"default": name}, reduction_bandwidth=reduction_bandwidth)
    result = simulate(workload, topology=TOPOLOGY, system=config)
    algo = ALGORITHMS.get(name)()
    expected = NATIVE.makespan(
        algo,
        coll,
        P,
        delay=NATIVE.uniform(LATENCY, 1 / BANDWIDTH),
        gamma=0.0 if reduction_bandwidth is None else 1 / reduction_bandwidth,
        buffer=collective_buffer_bytes(coll, SIZE, P),
    )
    assert result.finish_ns == pytest.approx(expected, rel=1e-9)
