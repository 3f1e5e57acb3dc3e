"""The mixture-of-experts workload generator."""

from __future__ import annotations

import pytest

from etsim.chakra import CollectiveType, NodeType, Workload
from etsim.chakra.validate import validate_workload
from etsim.network import switch
from etsim.producers import moe_workload
from etsim.producers.workloads import moe_groups
from etsim.simulation import simulate
from etsim.system.config import Resources, SystemConfig

KiB, MiB = 1 << 10, 1 << 20


def test_groups() -> None:
    assert moe_groups(8, 4) == {"0": list(range(8)), "1": [0, 1, 2, 3], "2": [4, 5, 6, 7],
                                "3": [0, 4], "4": [1, 5], "5": [2, 6], "6": [3, 7]}  # fmt: skip
    assert moe_groups(4, 4) == {"0": [0, 1, 2, 3], "1": [0, 1, 2, 3]}


def test_calls_per_layer_and_overlap() -> None:
    traces = moe_workload(8, ep_size=4, layers=3, token_bytes=MiB, dense_grad_bytes=[4 * KiB, 2 * MiB],
                          expert_grad_bytes=MiB, iterations=2)  # fmt: skip
    wl = Workload(traces)
    assert not [i for i in validate_workload(wl) if i.severity == "error"]
    t = traces[5]
    colls = [(CollectiveType(t.comm_type[i]).name, t.comm_size[i], t.pg_name[i])
             for i in range(len(t.types)) if t.types[i] == NodeType.COMM_COLL_NODE]  # fmt: skip
    per_layer = 4 + 1 + 2  # all-to-alls, expert all-reduce, dense all-reduces
    assert len(colls) == 2 * 3 * per_layer
    assert {c for c in colls if c[0] == "ALL_TO_ALL"} == {("ALL_TO_ALL", MiB, "2")}
    assert ("ALL_REDUCE", MiB, "4") in colls and ("ALL_REDUCE", 4 * KiB, None) in colls
    # One communication stream per NPU would queue the all-reduces in front of the next all-to-all; with a
    # stream per group (as NCCL runs each communicator) they overlap the backward compute.
    result = simulate(wl, topology=switch(8, 50.0, 500.0), system=SystemConfig(resources=Resources(comm_streams=0)))
    assert {tuple(c.group) for c in result.collectives} == {(4, 5, 6, 7), (0, 1, 2, 3), (1, 5), (0, 4), (2, 6),
                                                            (3, 7), tuple(range(8))}  # fmt: skip
    # The dense all-reduces overlap the backward compute of the layers below them.
    assert min(r.exposed_comm_ns for r in result.ranks) < min(r.comm_ns for r in result.ranks)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="multiple of the expert-parallel size"):
        moe_workload(8, ep_size=3, layers=1, token_bytes=1, dense_grad_bytes=[1])
    with pytest.raises(ValueError, match="must be >= 0"):
        moe_workload(8, ep_size=4, layers=1, token_bytes=-1, dense_grad_bytes=[1])


def test_an_expert_gradient_with_nothing_to_reduce_is_warned() -> None:
    """With ep_size = npus no rank holds a replica of another's experts: the expert-gradient all-reduce it asks for
    is not generated (rightly), and the user is told, not left to believe it ran."""
    from etsim.errors import EtsimWarning
    from etsim.producers.workloads.base import generate, normalize

    spec = {"generate": "moe", "npus": 4, "layers": 1, "token_size": 1024, "dense_grad_sizes": [1024]}
    with pytest.warns(EtsimWarning, match="expert_grad_size 4096 B has no effect: with ep_size 4 = npus"):
        traces = generate(normalize({**spec, "ep_size": 4, "expert_grad_size": 4096}))
    assert not any("expert_grads" in n.name for t in traces for n in t.nodes)
    replicated = generate(normalize({**spec, "ep_size": 2, "expert_grad_size": 4096}))  # (two blocks: no warning)
    assert any("expert_grads" in n.name for t in replicated for n in t.nodes)
