"""Generated workloads are valid and have the structure they promise."""

from __future__ import annotations

from etsim.chakra import CollectiveType, NodeType, Workload, validate_workload
from etsim.producers import collective_workload, data_parallel_workload, ring_sendrecv_workload


def test_every_collective_type_generates_valid_workloads() -> None:
    for ctype in CollectiveType:
        traces = collective_workload(ctype, 4096, 8, count=2)
        assert len(traces) == 8
        assert validate_workload(Workload(traces)) == []
        assert traces[5].comm_type == [ctype.value, ctype.value] and traces[5].data_deps(1) == [0]


def test_sendrecv_is_matched_ring() -> None:
    traces = ring_sendrecv_workload(1000, 4)
    assert validate_workload(Workload(traces)) == []
    assert traces[0].comm_dst[0] == 1 and traces[0].comm_src[1] == 3 and traces[2].comm_size == [1000, 1000]


def test_data_parallel_overlaps_allreduce_with_backward() -> None:
    (trace,) = data_parallel_workload(1, layers=3, grad_bytes=2048, fwd_micros=10, bwd_micros=20, iterations=2)
    assert validate_workload(Workload([trace])) == []
    pos = {name: i for i, name in enumerate(trace.names)}
    ar2 = pos["it0_allreduce_l2"]
    assert trace.types[ar2] == NodeType.COMM_COLL_NODE and trace.comm_size[ar2] == 2048
    # The all-reduce of layer 2 depends only on its weight gradient; layer 1's backward does not wait for it.
    assert trace.data_deps(ar2) == [pos["it0_wg_l2"]]
    assert trace.data_deps(pos["it0_ig_l2"]) == [pos["it0_wg_l2"]]
    assert ar2 not in trace.data_deps(pos["it0_wg_l1"])
    # The next iteration's forward of a layer waits for that layer's reduced gradient.
    assert pos["it0_allreduce_l1"] in trace.data_deps(pos["it1_fwd_l1"])
    assert sum(t == NodeType.COMM_COLL_NODE for t in trace.types) == 6


def test_a_generated_collective_on_a_named_group_defines_it(tmp_path) -> None:
    """`workload gen collective --pg-name 7` wrote traces naming group 7 that nothing defined: every run of them
    stopped with "group '7' is not defined". The group is every rank, in each rank's metadata and the JSON file."""
    import json

    from etsim.cli import main
    from etsim.network import switch
    from etsim.simulation import simulate

    args = ["workload", "gen", "collective", "--type", "all_reduce", "--size", "1MiB", "--npus", "4"]
    assert main([*args, "--pg-name", "7", "-o", str(tmp_path / "w")]) == 0
    assert json.loads((tmp_path / "w.comm_groups.json").read_text()) == {"7": [0, 1, 2, 3]}
    topology = switch(4, 50.0, 500.0)
    named = simulate(tmp_path / "w", topology=topology)
    assert main([*args, "-o", str(tmp_path / "d")]) == 0  # (the default group: no file, no metadata)
    assert not (tmp_path / "d.comm_groups.json").exists()
    default = simulate(tmp_path / "d", topology=topology)
    assert named.finish_ns == default.finish_ns > 0


def test_a_generated_sequence_on_a_named_group_defines_it(tmp_path) -> None:
    """The same for `workload gen sequence --pg-name 7` (each rank's metadata defines the group: the run runs)."""
    from etsim.chakra import Workload
    from etsim.producers.workloads.base import generate, normalize
    from etsim.system.groups import CommGroups, groups_from_metadata

    steps = [{"type": "all_reduce", "size": 1024}, {"type": "all_gather", "size": 1024}]
    traces = generate(normalize({"generate": "sequence", "npus": 3, "collectives": steps, "pg_name": 7}))
    groups = CommGroups(3)
    groups_from_metadata(Workload(traces), groups)
    assert groups.resolve("7") == (0, 1, 2)
