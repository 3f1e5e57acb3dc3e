"""Replica folding (``workload/fold.py``) against the full simulation: every rank, link and collective the same.

A folded run simulates one of each set of symmetric data-parallel replicas; these tests run the same jobs with
folding off and compare everything the result holds (collectives as a multiset: the full run lists them in the
order it created them). Cases cover replicas inside a node and across nodes, pipeline and data-parallel traffic
sharing NICs under the congestion-aware models, ZeRO, experts (a fold by the expert-parallel block), context
parallelism and the interleaved schedule; then the cases folding must refuse, which run in full.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from etsim.chakra.graph import Workload
from etsim.cli import main
from etsim.errors import ConfigError, EtsimWarning
from etsim.network import topology_from_dict as build_topology
from etsim.producers.workloads.base import parse
from etsim.report.result import Result
from etsim.simulation import simulate
from etsim.system.config import SystemConfig, load_system_config
from etsim.system.groups import CommGroups, groups_from_metadata
from etsim.workload.fold import find_fold

DENSE = {"layers": 4, "hidden": 256, "heads": 8, "ffn": 1024, "vocab": 1000, "seq": 128}
MOE = {**DENSE, "experts": 4, "top_k": 2, "moe_every": 1, "expert_ffn": 512}
RESOURCES = {"resources": {"comm_streams": 0}}
TRAINING = load_system_config(RESOURCES)


def job(model: dict[str, Any] = DENSE, **values: Any) -> Workload:
    gen, options = parse("transformer", {"model": model, "global_batch": 16, **values})
    return Workload(gen.generate(options))


def cluster(gpus: int, **more: Any) -> Any:
    return build_topology({"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": gpus, **more})


def groups_of(workload: Workload) -> CommGroups:
    groups = CommGroups(workload.num_ranks)
    groups_from_metadata(workload, groups)
    return groups


def comparable(result: Result, ranks: set[int] | None = None) -> dict[str, Any]:
    """The result without its simulation statistics; collectives as a multiset, of *ranks* only if given."""
    data = result.to_dict()
    data.pop("sim")
    chosen = [c for c in data["collectives"] if ranks is None or c["rank"] in ranks]
    data["collectives"] = sorted(json.dumps(c, sort_keys=True) for c in chosen)
    return data


def equal(folded: Result, full: Result) -> bool:
    """Everything the full run says, but collectives: a folded run lists its simulated ranks' (they mirror)."""
    simulated = {c.rank for c in folded.collectives}
    return comparable(folded) == comparable(full, simulated)


def both(workload: Workload, topology: Any, model: str, system: SystemConfig = TRAINING) -> tuple[Result, Result]:
    folded = simulate(workload, topology=topology, model=model, system=system)
    full = simulate(workload, topology=topology, model=model, system=system.with_overrides(fold_replicas=False))
    assert "folded" not in full.sim
    return folded, full


#: The natives, whose graphs have relative peers on any layout (NCCL's are laid per GPU where a group has several
#: GPUs on each of several nodes: such jobs run every rank, ``test_nccl_folds_where_its_graphs_turn_with_the_ranks``).
RING = load_system_config({**RESOURCES, "algorithms": {"default": "ring"}})

CASES = [
    # (generator values, GPUs, simulated ranks, system)
    ({"tp": 2, "pp": 2, "dp": 4}, 16, 2, TRAINING),  # replicas share a node: the shifts permute NVSwitch ports
    ({"tp": 8, "pp": 2, "dp": 4, "zero": 1}, 64, 2, TRAINING),  # replicas on other nodes: DP and PP share each NIC
    ({"pp": 2, "dp": 8, "zero": 3}, 16, 2, TRAINING),
    ({"tp": 4, "dp": 4, "pp": 2, "schedule": "interleaved", "virtual_stages": 2}, 32, 4, RING),  # dp by 2 replicas
    ({"tp": 4, "cp": 2, "dp": 4, "zero": 2}, 32, 2, RING),
]


@pytest.mark.parametrize("model", ["flow", "link", "analytical"])
@pytest.mark.parametrize(("values", "gpus", "simulated", "system"), CASES)
def test_folded_runs_equal_the_full_simulation(
    values: dict[str, Any], gpus: int, simulated: int, system: SystemConfig, model: str
) -> None:
    folded, full = both(job(**values), cluster(gpus), model, system)
    assert f"simulated {simulated} of {gpus} ranks" in folded.sim["folded"]
    assert equal(folded, full)
    assert folded.sim["events"] < full.sim["events"]


def test_bound_warnings_of_a_folded_run_are_the_full_runs() -> None:
    # The ideal network moves bytes in no time: every collective instance breaks its bandwidth bound, and a folded
    # run must still see whole instances (its mirrors stand in for the members it did not simulate).
    with pytest.warns(EtsimWarning):  # (the natives: NCCL's launch and protocol costs take time even there)
        folded, full = both(job(tp=2, pp=2, dp=4), cluster(16), "ideal", RING)
    assert full.warnings and folded.warnings == full.warnings
    assert "collective(s) finished faster than their bytes can cross the links" in folded.warnings[0]


def test_nccl_folds_where_its_graphs_turn_with_the_ranks() -> None:
    # One GPU of each data-parallel group per node and tensor-parallel groups inside one: every NCCL call's graph is
    # one graph with relative peers, so the job folds, exactly.
    folded, full = both(job(tp=8, pp=2, dp=4, zero=1), cluster(64), "flow")
    assert "simulated 2 of 64 ranks" in folded.sim["folded"]
    assert {c.algorithm.split("/")[0] for c in full.collectives} <= {"nccl:Ring", "nccl:PAT", "nccl:Tree"}
    assert equal(folded, full)
    # Two GPUs of each data-parallel group per node: NCCL's rings leave each node through the rails, a graph per
    # GPU; a shift by two replicas moves each GPU's graph onto the next node's, which its mirrors take.
    folded, full = both(job(tp=4, dp=4, pp=2), cluster(32), "flow")
    assert "tp (4) × dp (2): simulated 4 of 32 ranks" in folded.sim["folded"]
    assert equal(folded, full)


def test_experts_fold_by_whole_expert_parallel_blocks() -> None:
    workload = job(MOE, tp=2, sp=True, ep=2, dp=4, pp=2)
    folded, full = both(workload, cluster(16, oversubscription=2), "flow")
    assert "simulated 8 of 16 ranks" in folded.sim["folded"]  # a shift by one replica would split the ep blocks
    assert equal(folded, full)


def test_a_ring_topology_folds_by_rotation_and_a_mesh_does_not() -> None:
    workload = job(tp=2, dp=4)
    ring = build_topology({"kind": "ring", "npus": 8, "bandwidth": "100 GB/s", "latency": "1 us"})
    folded, full = both(workload, ring, "flow")
    assert "simulated 2 of 8 ranks" in folded.sim["folded"]
    assert equal(folded, full)
    mesh = build_topology({"kind": "mesh", "shape": [2, 4], "bandwidth": "100 GB/s", "latency": "1 us"})
    groups = CommGroups(8)
    groups_from_metadata(workload, groups)
    fold, why = find_fold(workload.traces, groups, mesh, "default")
    assert fold is None and "not a symmetry" in why
    folded, full = both(workload, mesh, "flow")
    assert "folded" not in folded.sim and comparable(folded) == comparable(full)


def test_a_replica_that_differs_is_never_folded() -> None:
    workload = job(tp=2, dp=4)
    odd = dataclasses.replace(workload.traces[5], duration_micros=[d + 1 for d in workload.traces[5].duration_micros])
    traces = list(workload.traces)
    traces[5] = odd
    changed = Workload(traces)
    groups = CommGroups(8)
    groups_from_metadata(changed, groups)
    fold, why = find_fold(changed.traces, groups, cluster(8), "default")
    assert fold is None and why.endswith("and 5 differ in their duration_micros (not replicas of each other)")
    tp_only = find_fold(job(tp=2, dp=1, pp=4).traces, groups_of(job(tp=2, dp=1, pp=4)), cluster(8), "default")[0]
    assert tp_only is not None and tp_only.simulated == [0, 2, 4, 6]
    folded, full = both(changed, cluster(8), "flow")
    assert "folded" not in folded.sim and comparable(folded) == comparable(full)


def test_an_algorithm_mirrors_cannot_run_makes_the_run_fold_less_or_simulate_every_rank() -> None:
    # Halving-doubling pairs ranks by XOR, which a cyclic shift of the group does not preserve: the data-parallel
    # shift does not hold, the tensor-parallel one (mapping each data-parallel group onto another) does.
    system = TRAINING.with_overrides(algorithms={"all_reduce": "halving_doubling"})
    folded, full = both(job(tp=2, dp=4), cluster(8), "flow", system)
    assert folded.sim["folded"].startswith("tp (2): simulated 4 of 8 ranks")
    assert "(not by dp: " in folded.sim["folded"] and "halving_doubling" in folded.sim["folded"]
    assert equal(folded, full)
    # with the data-parallel shift alone, every rank runs, and says why
    folded, full = both(job(dp=8), cluster(8), "flow", system)
    assert "folded" not in folded.sim and "halving_doubling" in folded.sim["not_folded"]
    assert equal(folded, full)


def test_rings_that_do_not_turn_with_the_position_fold_by_the_data_parallel_shift_alone() -> None:
    # Four GPUs joined pairwise by NVLink (Polaris): NCCL's rings share all six links out as Hamiltonian cycles, which
    # do not step by a constant stride, so a tensor-parallel group's graphs are per GPU: the tensor-parallel shift
    # does not hold, with or without the data-parallel one; the data-parallel shift alone (whole nodes) does.
    polaris = build_topology({"kind": "gpu_cluster", "preset": "polaris", "gpus": 16})
    folded, full = both(job(tp=4, dp=4), polaris, "flow")
    assert folded.sim["folded"].startswith("dp (4): simulated 4 of 16 ranks") and "(not by tp: " in folded.sim["folded"]
    assert equal(folded, full)


def test_nccl_trees_over_nodes_fold_by_tp_alone_and_say_what_would_fold_by_dp() -> None:
    # A double binary tree over four nodes gives each node its own roles: no shift of whole nodes maps one member's
    # graph onto another's, so the data-parallel shift does not hold (the run says how to keep it: without the tree).
    trees = load_system_config({**RESOURCES, "nccl": {"algo": "Tree"}})
    folded, full = both(job(tp=2, dp=16), cluster(32), "flow", trees)
    assert folded.sim["folded"].startswith("tp (2): simulated 16 of 32 ranks")
    assert (
        "(not by dp: " in folded.sim["folded"]
        and "with `nccl: {algo: ^Tree}` (NCCL_ALGO=^Tree)" in folded.sim["folded"]
        and "(a training job's ZeRO-1) have no tree in NCCL" in folded.sim["folded"]
    )
    assert equal(folded, full)
    rings = simulate(job(tp=2, dp=16), topology=cluster(32), model="flow",
                     system=load_system_config({**RESOURCES, "nccl": {"algo": "^Tree"}}))  # fmt: skip
    assert rings.sim["folded"].startswith("tp (2) × dp (")


def test_routing_other_than_dimension_order_is_not_folded() -> None:
    workload = job(tp=2, dp=4)
    groups = CommGroups(8)
    groups_from_metadata(workload, groups)
    fold, why = find_fold(workload.traces, groups, cluster(8), "shortest")
    assert fold is None and "dimension-order routing" in why


def test_routes_fold_onto_the_links_of_simulated_ranks() -> None:
    workload = job(tp=8, dp=4)
    topo = cluster(32)
    groups = CommGroups(32)
    groups_from_metadata(workload, groups)
    fold, _ = find_fold(workload.traces, groups, topo, "default")
    assert fold is not None and fold.simulated == [0] and fold.replicas == 32  # tp (8) × dp (4)
    from etsim.network.routing import make_router

    route = make_router("default", topo).lookup(0, 8)  # rank 0's uplink on rail 0, rank 8's downlink
    folded = fold.fold_route(route)
    assert folded is not None
    assert [topo.links[x] for x in folded] == [topo.links[route[0]], (topo.links[route[1]][0], 0)]
    assert fold.channel(0, 8, 7) == (24, 0, 7)  # rank 0 -> rank 8 stands for rank 24 -> rank 0


def test_the_step_report_and_group_exposure_of_a_folded_run_are_the_full_runs(tmp_path: Any) -> None:
    from etsim.chakra import write_workload

    write_workload(job(MOE, tp=2, sp=True, ep=2, dp=4, pp=2), tmp_path / "job")
    (tmp_path / "c.yaml").write_text("kind: gpu_cluster\npreset: dgx-a100\ngpus: 16\n")
    (tmp_path / "s.yaml").write_text("resources: {comm_streams: 0}\n")
    out = {}
    for flag in ([], ["--no-fold-replicas"]):
        path = tmp_path / f"r{len(flag)}.json"
        args = ["run", str(tmp_path / "job"), "--topology", str(tmp_path / "c.yaml"), "--system"]
        assert main([*args, str(tmp_path / "s.yaml"), "--json", str(path), "-q", *flag]) == 0
        out[len(flag)] = json.loads(path.read_text())
    folded, full = out[0], out[1]
    assert "folded" in folded["sim"]
    assert folded["training"] == full["training"]
    assert folded["groups"] == full["groups"]
    assert folded["ranks"] == full["ranks"] and folded["links"] == full["links"]


def test_a_run_too_large_to_walk_is_refused_and_says_why_it_was_not_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    import etsim.simulation

    workload = job(tp=2, dp=4)
    monkeypatch.setattr(etsim.simulation, "MAX_WALKED_NODES", workload.traces[0].num_nodes * 3)
    simulate(workload, topology=cluster(8), system=TRAINING)  # folded: 2 ranks walked
    with pytest.raises(
        ConfigError,
        match=r"would walk [\d,]+ workload nodes, more than etsim's limit .* \(every rank "
        r"runs: replica folding is off\)",
    ):
        simulate(workload, topology=cluster(8), system=TRAINING.with_overrides(fold_replicas=False))
    mesh = build_topology({"kind": "mesh", "shape": [2, 4], "bandwidth": "100 GB/s", "latency": "1 us"})
    with pytest.raises(ConfigError, match="every rank runs: the replica shift permutes dimension"):
        simulate(workload, topology=mesh, system=TRAINING)


def test_a_run_with_too_many_messages_says_why_it_was_not_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    import etsim.simulation

    workload = job(tp=2, dp=4)
    monkeypatch.setattr(etsim.simulation, "MAX_MESSAGES", 100)
    monkeypatch.setattr(etsim.simulation, "MESSAGE_WARNING", 100)
    off = TRAINING.with_overrides(fold_replicas=False, fast_path=False)
    with pytest.raises(ConfigError, match=r"messages one by one, .* \(every rank runs: replica folding is off\)"):
        simulate(workload, topology=cluster(8), system=off)


@pytest.mark.parametrize(
    "settings",
    [{}, {"chunks": 2}, {"endpoint_delay": "1 us", "reduction_bandwidth": "100 GB/s", "shared_reductions": False}],
    ids=["one-comm-stream", "chunks", "delays-and-reductions"],
)
def test_folding_is_exact_under_other_system_settings(settings: dict[str, Any]) -> None:
    folded, full = both(job(tp=2, pp=2, dp=4, zero=1), cluster(16), "flow", load_system_config(settings))
    assert "simulated 2 of 16 ranks" in folded.sim["folded"] and equal(folded, full)


def test_reductions_that_take_turns_at_a_reduction_unit_are_not_folded() -> None:
    """A pipeline of 2 stages, 2 replicas and context parallelism 2 on a 4 × 2 torus, each message 1 µs (``ideal``),
    reductions at 64 GB/s taking turns at each NPU's unit: reductions issued at one instant queue in the run's event
    order, which follows rank ids, so replica 1's ranks finish after replica 0's. Folded, rank 0 stood for both:
    65.010 µs against the full run's 68.608 µs."""
    small = {"layers": 4, "hidden": 128, "heads": 4, "ffn": 512, "vocab": 500, "seq": 64}
    workload = job(small, pp=2, dp=2, cp=2, global_batch=2)
    topology = build_topology({"kind": "torus", "shape": [4, 2], "bandwidth": "50 GB/s", "latency": "500 ns"})
    system = {"reduction_bandwidth": "64 GB/s", "resources": {"comm_streams": 2}, "algorithms": {"default": "ring"}}
    config = load_system_config(system)
    runs = []
    for fold in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EtsimWarning)  # ('ideal' has no bandwidth: below the links' bounds)
            runs.append(simulate(workload, topology=topology, model="ideal", model_options={"delay": 1000.0},
                                 system=config.with_overrides(fold_replicas=fold)))  # fmt: skip
    folded, full = runs
    assert folded.finish_ns == full.finish_ns == 68608.0 and equal(folded, full)
    assert "folded" not in folded.sim
    assert "reductions take turns at each NPU's reduction unit" in folded.sim["not_folded"]


def test_collectives_over_every_rank_fold_only_when_the_shift_rotates_the_ranks() -> None:
    from etsim.workload.fold import _groups_symmetric, _rotates

    assert _rotates([0, 1, 2, 3], [1, 2, 3, 0]) and not _rotates([0, 1, 2, 3], [1, 0, 3, 2])
    groups = CommGroups(8)
    shift = [(r + 2) % 8 for r in range(8)]  # the dp shift of tp 2 × dp 4, one stage: a rotation
    assert _groups_symmetric(groups, shift, world=True) is None
    blocks = [r + 2 if r % 4 < 2 else r - 2 for r in range(8)]  # the same shift within two pipeline stages
    assert "collectives over every rank" in (_groups_symmetric(groups, blocks, world=True) or "")
    assert _groups_symmetric(groups, blocks, world=False) is None


def test_a_node_priority_on_some_replicas_only_is_not_folded_away() -> None:
    workload = job(tp=2, dp=4)
    node = workload.traces[0].ids[5]
    everywhere = load_system_config({"node_priorities": {f"{r}:{node}": -1 for r in range(8)}, **RESOURCES})
    folded, full = both(workload, cluster(8), "flow", everywhere)
    assert "folded" in folded.sim and equal(folded, full)
    one = load_system_config({"node_priorities": {f"0:{node}": -1}, **RESOURCES})
    folded, full = both(workload, cluster(8), "flow", one)
    assert comparable(folded) == comparable(full)  # run in full: rank 0 differs from its replicas
    groups = groups_of(workload)
    _, why = find_fold(workload.traces, groups, cluster(8), "default", {f"0:{node}": -1})
    assert why.startswith(f"node_priorities: 0:{node} has no counterpart on rank")


def test_expert_tensor_parallelism_folds_by_whole_expert_shards() -> None:
    # etp = tp: each expert split over the tensor-parallel group, whose shift maps every expert shard onto the next
    workload = job(MOE, tp=2, sp=True, ep=2, etp=2, dp=4)
    folded, full = both(workload, cluster(8), "flow", RING)
    assert "tp (2) × dp (2): simulated 2 of 8 ranks" in folded.sim["folded"]
    assert equal(folded, full)
    # etp 2 of tp 4: a shift by one tensor-parallel rank would split the pairs an expert is split over, and by two it
    # swaps the members of each expert-gradient group (not a rotation): the tensor-parallel ranks all run.
    workload = job(MOE, tp=4, sp=True, ep=2, etp=2, dp=4)
    folded, full = both(workload, cluster(16), "flow", RING)
    assert "dp (2): simulated 8 of 16 ranks" in folded.sim["folded"]
    assert equal(folded, full)


def test_groups_with_the_same_members_map_one_to_one_and_an_expert_job_with_ep_dp_folds() -> None:
    # ep = dp: each expert-gradient group has the members of a tensor-parallel group (distinct communicators); a
    # shift maps each onto its own image, and the job folds exactly.
    workload = job(MOE, tp=2, sp=True, ep=4, dp=4, pp=2)
    groups = groups_of(workload)
    twins = [m for m in (frozenset(v) for v in groups.groups.values())]
    assert len(twins) > len(set(twins))  # (the case: two groups with one member set)
    folded, full = both(workload, cluster(16), "flow", RING)
    assert "folded" in folded.sim
    assert equal(folded, full)


def test_nccl_all_to_alls_fold_where_each_gpus_graph_moves_with_the_ranks() -> None:
    # NCCL's all-to-all over members on two nodes, several per node: a graph per GPU, each the image of the graph of
    # the GPU it mirrors (its peers moved by the shift), so the mirrors run it.
    workload = job(MOE, tp=2, sp=True, ep=4, dp=8)
    folded, full = both(workload, cluster(16), "flow")
    assert "dp (2): simulated 8 of 16 ranks" in folded.sim["folded"]
    assert {c.algorithm.split("/")[0] for c in full.collectives if c.type == "ALL_TO_ALL"} == {"nccl:P2P"}
    assert equal(folded, full)


def test_a_fold_that_does_not_hold_says_why_every_rank_ran() -> None:
    # A binary tree over a data-parallel group with mirrored members: position 4's graph is no image of position 0's.
    tree = load_system_config({**RESOURCES, "algorithms": {"default": "ring", "all_reduce": "tree"}})
    workload = job(MOE, tp=2, sp=True, ep=4, dp=8)
    result = simulate(workload, topology=cluster(16), model="flow", system=tree)
    assert "folded" not in result.sim
    assert result.sim["not_folded"].startswith("the fold did not hold: ")
    assert "graphs its mirrored members can take" in result.sim["not_folded"]


def test_a_trace_of_a_folded_run_says_it_holds_the_simulated_ranks(tmp_path: Path) -> None:
    # It left the mirrored ranks out without a word (otherData said nothing, no warning).
    from etsim.report.record import RunRecorder
    from etsim.report.trace import write_chrome_trace

    rec = RunRecorder(messages=True)
    result = simulate(job(tp=8, pp=2, dp=4, zero=1), topology=cluster(64), system=TRAINING, observer=rec)
    assert "simulated 2 of 64 ranks" in result.sim["folded"]
    with pytest.warns(EtsimWarning, match=r"replica folding \(.*simulated 2 of 64 ranks.*\): only the simulated ranks"):
        write_chrome_trace(rec, tmp_path / "t.json")
    other = json.loads((tmp_path / "t.json").read_text())["otherData"]
    assert other["folded"].endswith("only the simulated ranks are traced")


def test_a_folded_runs_held_back_rank_says_it_stands_for_its_mirrors() -> None:
    # Its held_back adds the compute of a representative's orbit on one rank (a llama step, tp 2 dp 2: rank 0 with
    # 703 ms where the full run names rank 2 with 662 ms), and said so as if it were the full run's.
    from etsim.report.tables import critical_path_lines
    from etsim.simulation.phases import Reports

    workload = job(tp=2, pp=2, dp=4, zero=1)
    folded, full = (
        simulate(workload, topology=cluster(16), system=TRAINING.with_overrides(fold_replicas=fold),
                 reports=Reports(critical_path=True))
        for fold in (True, False)
    )  # fmt: skip
    assert "folded" in folded.sim and "folded" not in full.sim
    assert folded.critical_path["totals"] == full.critical_path["totals"]
    assert folded.critical_path["held_back"]["folded"] is True and "folded" not in full.critical_path["held_back"]
    assert "(a folded run: its mirrors' compute adds up on the rank" in critical_path_lines(folded.critical_path)[0]
