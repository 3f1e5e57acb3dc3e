"""simulate(): building the layers, the pre-flight check, and the result it returns."""

from __future__ import annotations

import pytest

from etsim.chakra import Workload
from etsim.chakra.graph import Trace
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import SimulationError
from etsim.simulation import simulate


def test_duplicate_ids_are_rejected_before_the_run() -> None:
    nodes = [pb.Node(id=1, type=pb.COMP_NODE, duration_micros=10), pb.Node(id=1, type=pb.COMP_NODE)]
    with pytest.raises(SimulationError, match="node id 1 is defined more than once"):
        simulate(Workload([Trace.from_nodes(nodes, rank=0)]))


def test_default_topology_is_a_ring_of_the_workload() -> None:
    from etsim.chakra import CollectiveType
    from etsim.producers import collective_workload

    result = simulate(Workload(collective_workload(CollectiveType.ALL_REDUCE, 8 << 20, 4)), model="analytical")
    # 2(p-1)(α + n/(pB)) on the default ring: 50 GB/s, 500 ns
    assert result.finish_ns == pytest.approx(2 * 3 * (500 + (8 << 20) / 4 / 50), rel=1e-12)
    assert result.network["topology"].startswith("default ring of 4 NPUs")


def test_topology_smaller_than_the_workload_is_refused() -> None:
    from etsim.errors import ConfigError
    from etsim.network import ring

    b = [Trace.from_nodes([pb.Node(id=0, type=pb.COMP_NODE)], rank=r) for r in range(4)]
    with pytest.raises(ConfigError, match=r"the workload has 4 ranks but topology .* has only 2 NPUs"):
        simulate(Workload(b), topology=ring(2, 1.0, 1.0))


def test_preflight_reports_every_blocking_problem_with_a_hint() -> None:
    send = pb.Node(id=0, type=pb.COMM_SEND_NODE)
    send.attr.add(name="comm_dst").int64_val = 1
    dangling = pb.Node(id=1, type=pb.COMP_NODE, data_deps=[99])
    with pytest.raises(SimulationError) as info:
        simulate(Workload([Trace.from_nodes([send, dangling], rank=0), Trace.from_nodes([], rank=1)]))
    text = str(info.value)
    assert "send without comm_tag, comm_size" in text
    assert "data dependency on node id 99, which is not in the file" in text
