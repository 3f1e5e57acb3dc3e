"""The ``nccl`` algorithm: NCCL's choice per call, its graphs' bytes, its timing's closed forms, its knobs.

The figures against real ``nccl-tests`` measurements are ``test_nccl_validation.py``'s.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from etsim.algo.graph import SEND
from etsim.chakra import CollectiveType, Workload
from etsim.errors import ConfigError, EtsimWarning
from etsim.network import load_network
from etsim.producers import collective_workload
from etsim.simulation import simulate
from etsim.system.algorithms.nccl import NcclAlgorithm, NcclCall, NcclSettings, timing
from etsim.system.algorithms.nccl.graphs import (
    RING_STEPS,
    Layout,
    double_binary_tree,
    hamiltonian_cycles,
    p2p_rounds,
    pat_steps,
    ring_steps,
)
from etsim.system.algorithms.nccl.search import Comm
from etsim.system.algorithms.nccl.timing import wire_overhead
from etsim.system.algorithms.sources import AlgorithmContext, resolve_algorithm
from etsim.system.config import load_system_config

C = CollectiveType
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def cluster(preset: str, gpus: int, **more: Any) -> Any:
    return load_network({"kind": "gpu_cluster", "preset": preset, "gpus": gpus, **more})


def nccl(preset: str, gpus: int, settings: NcclSettings | None = None, **more: Any) -> NcclAlgorithm:
    return NcclAlgorithm(cluster(preset, gpus, **more).topology, settings)


def call(algo: NcclAlgorithm, collective: CollectiveType, size: int, group: range | tuple[int, ...]) -> NcclCall:
    found = algo.for_call(collective, size, tuple(group))
    assert isinstance(found, NcclCall)
    return found


def run(preset: str, gpus: int, collective: CollectiveType, size: int, system: dict[str, Any] | None = None,
        **more: Any) -> Any:  # fmt: skip
    data = {"algorithms": {"default": "nccl"}, **(system or {})}
    workload = Workload(collective_workload(collective, size, gpus))
    return simulate(workload, topology=cluster(preset, gpus, **more), system=load_system_config(data))


# -- NCCL's choice ----------------------------------------------------------------------------------------------


def test_one_a100_node_runs_ring_ll_small_then_ll128_then_simple_as_nccls_tuner_does() -> None:
    algo = nccl("dgx-a100", 8)
    labels = [call(algo, C.ALL_REDUCE, size, range(8)).label for size in (8, 256 * KiB, 4 * MiB, 1 * GiB)]
    assert [label.split("/")[:2] for label in labels] == [
        ["nccl:Ring", "LL"],
        ["nccl:Ring", "LL"],
        ["nccl:Ring", "LL128"],
        ["nccl:Ring", "Simple"],
    ]
    # The channels grow with the size (NCCL's per-call heuristic), up to the communicator's 24.
    channels = [int(label.rsplit("/", 1)[1]) for label in labels]
    assert channels == sorted(channels) and channels[0] == 1 and channels[-1] == 24


def test_h100_all_reduce_reduces_in_the_nvswitch_and_across_nodes_on_trees() -> None:
    assert call(nccl("dgx-h100", 8), C.ALL_REDUCE, GiB, range(8)).label.startswith("nccl:NVLS/Simple")
    two = nccl("dgx-h100", 16)
    assert call(two, C.ALL_REDUCE, 8, range(16)).label.startswith("nccl:Tree/LL/")
    assert call(two, C.ALL_REDUCE, GiB, range(16)).label.startswith("nccl:NVLSTree/Simple")
    # NVLS is Hopper's: an A100's NVSwitch does not reduce.
    assert not call(nccl("dgx-a100", 8), C.ALL_REDUCE, GiB, range(8)).reduces_in_network


def test_knobs_force_the_choice_by_nccls_names() -> None:
    forced = NcclSettings(algo=frozenset({"Ring"}), proto=frozenset({"LL128"}))
    assert call(nccl("dgx-h100", 8, forced), C.ALL_REDUCE, GiB, range(8)).label.startswith("nccl:Ring/LL128/")
    off = NcclSettings(nvls=False)
    assert call(nccl("dgx-h100", 8, off), C.ALL_REDUCE, GiB, range(8)).label.startswith("nccl:Ring/Simple/")
    capped = NcclSettings(max_channels=4)
    assert call(nccl("dgx-a100", 8, capped), C.ALL_REDUCE, GiB, range(8)).label == "nccl:Ring/Simple/4"


def test_nccls_cta_knobs_bound_nvls_where_its_channel_knobs_do_not() -> None:
    # NCCL (2.18-2.29 nvls.cc): NVLS runs max(minCTAs, min(maxCTAs, its own count)); NCCL_MIN/MAX_NCHANNELS bound
    # rings and trees only.
    channels = NcclSettings(algo=frozenset({"NVLS"}), min_channels=4, max_channels=4)
    assert call(nccl("dgx-h100", 8, channels), C.ALL_REDUCE, GiB, range(8)).label == "nccl:NVLS/Simple/16"
    ctas = NcclSettings(algo=frozenset({"NVLS"}), min_ctas=4, max_ctas=4)
    assert call(nccl("dgx-h100", 8, ctas), C.ALL_REDUCE, GiB, range(8)).label == "nccl:NVLS/Simple/4"
    more = NcclSettings(min_ctas=24)
    assert call(nccl("dgx-h100", 8, more), C.ALL_REDUCE, GiB, range(8)).label == "nccl:NVLS/Simple/24"
    assert call(nccl("dgx-a100", 8, NcclSettings(max_ctas=4)), C.ALL_REDUCE, GiB, range(8)).label.endswith("/4")


def test_a_forced_channel_count_is_the_one_that_runs_nvls_included() -> None:
    # nccl:NVLS/Simple/4 once ran NVLS's 16 channels and said so: the spec's count is NCCL's CTA bounds.
    for spec in ("nccl:NVLS/Simple/4", "nccl:Ring/Simple/4", "nccl:NVLS/Simple/24"):
        result = run("dgx-h100", 8, C.ALL_REDUCE, GiB, {"algorithms": {"default": spec}})
        assert result.collectives[0].algorithm == spec


def test_the_system_yaml_block_and_the_forced_spec_reproduce_a_forced_run() -> None:
    result = run("dgx-h100", 8, C.ALL_REDUCE, GiB, {"nccl": {"algo": "ring", "proto": "^LL,LL128"}})
    label = result.collectives[0].algorithm
    assert label.startswith("nccl:Ring/Simple/")
    again = run("dgx-h100", 8, C.ALL_REDUCE, GiB, {"algorithms": {"default": label}})
    assert again.collectives[0].algorithm == label and again.finish_ns == result.finish_ns


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"algo": "Rings"}, "unknown algorithm 'rings'; NCCL's are Tree, Ring"),
        ({"proto": "LL256"}, "unknown protocol 'll256'"),
        ({"version": "2.3"}, "older than the oldest modelled (2.8)"),
        ({"version": 2.10}, "2.1 is a number, not a version (YAML reads 2.10 as 2.1): quote it, e.g. '2.10'"),
        ({"min_channels": 0}, "min_channels"),
        ({"min_ctas": 8, "max_ctas": 4}, "nccl: min_ctas 8 is more than max_ctas 4"),
        ({"min_channels": 32, "max_channels": 4}, "nccl: min_channels 32 is more than max_channels 4"),
        ({"colnet": True}, "unknown NCCL setting 'colnet'"),
        ({"version": "2.99"}, "NCCL 2.99 is newer than the newest modelled (2.29"),
        ({"version": "2.12", "max_ctas": 2}, "nccl: min_ctas/max_ctas are NCCL 2.17's; NCCL 2.12 has only"),
    ],
)
def test_bad_nccl_settings_are_named(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_system_config({"nccl": settings})


def test_a_choice_the_hardware_lacks_is_an_error_not_another_algorithm() -> None:
    with pytest.raises(ConfigError, match="NVLS: no NVLink SHARP"):
        run("dgx-a100", 8, C.ALL_REDUCE, MiB, {"nccl": {"algo": "NVLS"}})


def test_a_forced_collnet_says_whether_the_fabric_or_the_settings_lack_it() -> None:
    with pytest.raises(ConfigError, match=r"CollNet is off \(collnet: false\)"):
        run("dgx-h100", 16, C.ALL_REDUCE, MiB, {"nccl": {"algo": "CollNet"}}, sharp=True)
    with pytest.raises(ConfigError, match=r"no in-network reduction \(sharp: false\)"):
        run("dgx-h100", 16, C.ALL_REDUCE, MiB, {"nccl": {"algo": "CollNet", "collnet": True}})


@pytest.mark.parametrize("collective", [C.ALL_GATHER, C.REDUCE_SCATTER])
def test_collnet_all_gather_and_reduce_scatter_across_nodes_are_not_offered(collective: CollectiveType) -> None:
    """CollNetDirect's all-gather and reduce-scatter were laid with no stage between nodes: 32 GPUs of 4 nodes
    moved no byte over the NICs (a 256 MiB reduce-scatter in 0.93 ms, under the 1.01 ms the NICs allow), and the
    tuner chose it unforced. NCCL needs the CollNet plugin's iallgather/ireducescatter for it (tuning.cc)."""
    system = {"nccl": {"collnet": True}}
    result = run("dgx-a100", 32, collective, 256 * MiB, system, sharp=True)
    assert "CollNet" not in result.collectives[0].algorithm
    with pytest.raises(ConfigError, match="need the CollNet plugin's iallgather and ireducescatter"):
        run("dgx-a100", 32, collective, 256 * MiB, {"nccl": {"collnet": True, "algo": "CollNetDirect"}}, sharp=True)
    assert "CollNet" in run("dgx-a100", 32, C.ALL_REDUCE, 256 * MiB, system, sharp=True).collectives[0].algorithm


@pytest.mark.parametrize("channels", [1, 2, 4])
def test_a_ring_of_fewer_channels_than_nics_crosses_as_many_nics(channels: int) -> None:
    """A channel is one ring, and a ring leaves a node through one NIC: with c channels on two 8-GPU A100 nodes (25
    GB/s NICs) a 256 MiB all-reduce moves 2·(15/16)·S between the nodes over c NICs each way. Every NIC carried a
    ring: 1 channel took 14.3 ms against the 20.1 ms its NIC allows."""
    size = 256 * MiB
    result = run("dgx-a100", 16, C.ALL_REDUCE, size, {"algorithms": {"default": f"nccl:Ring/Simple/{channels}"}})
    assert result.collectives[0].algorithm == f"nccl:Ring/Simple/{channels}"
    bound = 2 * 15 / 16 * size / (channels * 25.0)  # ns: the bytes each ring moves between the nodes, its NIC
    assert bound < result.finish_ns < 1.3 * bound
    nics = [link for link in result.links if link["bandwidth_GBps"] == 25.0 and isinstance(link["src"], int)]
    assert len(nics) == 2 * channels  # (one NIC out of each node per ring)


@pytest.mark.parametrize("collective", [C.GATHER, C.SCATTER, C.BARRIER])
def test_nccl_asked_for_a_collective_it_does_not_implement_says_so(collective: CollectiveType) -> None:
    # `--algo gather=nccl` ended in a KeyError traceback (the call was bound before it was checked).
    with pytest.raises(ConfigError, match=f"algorithm 'nccl' does not implement {collective.name.lower()}"):
        run("dgx-h100", 8, collective, MiB, {"algorithms": {collective.name.lower(): "nccl"}})


def test_nvls_efficiency_is_the_hardwares_not_the_groups() -> None:
    # A group of 9 GPUs of an NVL72 rack took NVL72's efficiency and one of 8 a baseboard's: 9 ran 19% slower.
    hw = nccl("gb200-nvl72", 72).hardware()
    assert {timing._nvls_efficiency(Comm(hw, n, 1, n)) for n in (4, 8, 9, 72)} == {timing.NVL72_NVLS_EFFICIENCY}
    baseboard = nccl("dgx-h100", 8).hardware()  # (and a baseboard's, whatever the group: not the rack's)
    assert {timing._nvls_efficiency(Comm(baseboard, n, 1, n)) for n in (4, 8)} == {timing._nvls_efficiency(
        Comm(baseboard, 8, 1, 8))} != {timing.NVL72_NVLS_EFFICIENCY}  # fmt: skip


@pytest.mark.parametrize("collective", [C.ALL_REDUCE, C.ALL_GATHER, C.BROADCAST, C.ALL_TO_ALL])
def test_a_call_of_no_bytes_is_discarded_from_nccl_2_20(collective: CollectiveType) -> None:
    # enqueue.cc (2.20+): "Empty collectives can be discarded" -- no kernel, no wait. It cost 10.7-15.8 us.
    result = run("dgx-h100", 8, collective, 0)
    assert result.finish_ns == 0.0 and result.collectives[0].algorithm == "nccl:discarded"
    again = run("dgx-h100", 8, collective, 0, {"algorithms": {"default": "nccl:discarded"}})  # (its label, given back)
    assert again.finish_ns == 0.0 and again.collectives[0].algorithm == "nccl:discarded"
    older = run("dgx-h100", 8, collective, 0, {"nccl": {"version": "2.18"}})
    assert older.finish_ns > 5_000 and older.collectives[0].algorithm != "nccl:discarded"


def test_from_nccl_2_23_one_gpu_per_node_takes_the_trees_network_latency_and_pat_its_base() -> None:
    """tuning.cc 2.23.4-2.27.7 as 2.28: ``interLat = ppn == 1 ? hwLat[NET][TREE][p] : …`` and PAT's latency
    ``8 + log2i(nNodes)·interLat/3.5 + nRanks·2.8``. etsim applied both from 2.28 only: 2.27 chose Ring/LL for an
    8-byte all-reduce of four nodes' GPU 0 (NCCL: Tree/LL), and PAT for a 4 KiB all-gather of eight (NCCL: Ring/LL)."""
    for version, tree in (((2, 22), False), ((2, 27), True), ((2, 29), True)):
        label = call(nccl("dgx-h100", 32, NcclSettings(version=version)), C.ALL_REDUCE, 8, (0, 8, 16, 24)).label
        assert label.startswith("nccl:Tree/LL/" if tree else "nccl:Ring/LL/"), version
        gather = call(nccl("dgx-h100", 64, NcclSettings(version=version)), C.ALL_GATHER, 4 * KiB, range(0, 64, 8))
        assert gather.label.startswith("nccl:Ring/LL/"), version


def test_one_process_drives_gpus_of_its_own_node_only() -> None:
    with pytest.raises(ConfigError, match="gpus_per_process 16 is more than a node's 8 GPUs"):
        run("dgx-h100", 16, C.ALL_REDUCE, MiB, {"nccl": {"gpus_per_process": 16}})


def test_a_forced_channel_count_before_nccl_2_17_bounds_the_channels_it_had() -> None:
    result = run("dgx-a100", 8, C.ALL_REDUCE, GiB, {"algorithms": {"default": "nccl:Ring/Simple/2"},
                                                    "nccl": {"version": "2.12"}})  # fmt: skip
    assert result.collectives[0].algorithm == "nccl:Ring/Simple/2"


@pytest.mark.parametrize(
    ("preset", "gpus", "version", "channels"),
    [("hgx-b200", 8, "2.23", 16), ("hgx-b200", 8, "2.26", 32), ("hgx-b200", 8, "2.27", 24),
     ("hgx-b200", 16, "2.27", 32), ("dgx-h100", 8, "2.29", 16)],
)  # fmt: skip
def test_nvls_channels_follow_the_version_as_ncclss_nvls_setup(
    preset: str, gpus: int, version: str, channels: int
) -> None:  # fmt: skip
    forced = NcclSettings(algo=frozenset({"NVLS", "NVLSTree"}), version=tuple(map(int, version.split("."))))
    label = call(nccl(preset, gpus, forced), C.ALL_REDUCE, GiB, range(gpus)).label
    assert label.endswith(f"/Simple/{channels}")


def test_before_nccl_2_24_a_forced_collnet_it_cannot_run_falls_back_to_ring_and_tree() -> None:
    # 2.12-2.23 tuning.cc: with CollNet unsupported and nothing else enabled, NCCL enables Ring and Tree.
    for algo in ("CollNet", "NVLS"):
        result = run("dgx-h100", 16, C.ALL_REDUCE, 64 * MiB, {"nccl": {"algo": algo, "version": "2.21"}})
        assert result.collectives[0].algorithm.split("/")[0] in ("nccl:Ring", "nccl:Tree")
    with pytest.raises(ConfigError, match=r"NCCL 2\.24\+ stops"):
        run("dgx-h100", 16, C.ALL_REDUCE, 64 * MiB, {"nccl": {"algo": "CollNet", "version": "2.24"}})


def test_a_forced_nvls_the_settings_turned_off_says_so() -> None:
    with pytest.raises(ConfigError, match=r"NVLS: NVLS is off \(nvls: false\)"):
        run("dgx-h100", 8, C.ALL_REDUCE, MiB, {"nccl": {"algo": "NVLS", "nvls": False}})


@pytest.mark.parametrize(
    ("algo", "proto", "why"),
    [
        ("NVLS", None, "NVLS: across nodes NCCL runs NVLS only with CollNet"),
        ("CollNetChain", None, "CollNetChain: the fabric has no in-network reduction"),
        ("NVLSTree", "LL", "only Ring and Tree run LL or LL128"),
    ],
)
def test_a_forced_algorithm_nccl_cannot_run_stops_the_run_as_nccl_does(algo: str, proto: str | None, why: str) -> None:
    # NCCL 2.24+ ends such a call with "no algorithm/protocol available"; it never swaps in another algorithm, and
    # neither may we: two H100 nodes without SHARP once ran a forced NVLS as Ring/LL128, exit 0 (default 2.27).
    forced = {"algo": algo} if proto is None else {"algo": algo, "proto": proto}
    with pytest.raises(ConfigError, match=why):
        run("dgx-h100", 16, C.ALL_REDUCE, 64 * MiB, {"nccl": forced})


@pytest.mark.parametrize("collective", [C.ALL_REDUCE, C.ALL_GATHER, C.REDUCE_SCATTER, C.BROADCAST, C.ALL_TO_ALL])
def test_a_one_rank_call_costs_nothing_as_ncclss_local_copy(collective: CollectiveType) -> None:
    # A 1-rank all-reduce once divided by zero in the tuner (a raw traceback): NCCL copies locally, Ring/Simple.
    nccl_system = load_system_config({"algorithms": {"default": "nccl"}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = simulate(Workload(collective_workload(collective, MiB, 1)), topology=cluster("dgx-h100", 8),
                          system=nccl_system)  # fmt: skip
    assert any("1-rank group moves no data" in str(w.message) for w in caught)
    assert result.finish_ns == 0
    local = "nccl:P2P/Simple/1" if collective == C.ALL_TO_ALL else "nccl:Ring/Simple/1"
    assert result.collectives[0].algorithm == local


def test_a_group_on_uneven_nodes_runs_rings_and_says_so() -> None:
    # 8 + 4 GPUs once stopped on a size mismatch under NCCL's tree (each node cut its slices by its own size).
    data = {"algorithms": {"default": "nccl"}}
    workload = Workload(collective_workload(C.ALL_REDUCE, 64 * MiB, 12))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = simulate(workload, topology=cluster("dgx-h100", 16), system=load_system_config(data))
    assert any("nodes holding 8, 4 of them runs NCCL's rings" in str(w.message) for w in caught)
    assert result.collectives[0].algorithm.startswith("nccl:Ring/")
    forced = {"algorithms": {"default": "nccl:Tree"}}
    with warnings.catch_warnings(), pytest.raises(ConfigError, match=r"rings only \(a limit of etsim's, not NCCL's\)"):
        warnings.simplefilter("ignore")  # the idle NPUs 12-15
        simulate(workload, topology=cluster("dgx-h100", 16), system=load_system_config(forced))


def test_nccl_needs_a_cluster_that_names_its_gpus() -> None:
    workload = Workload(collective_workload(C.ALL_REDUCE, MiB, 8))
    with pytest.raises(ConfigError, match="gpu_cluster"):
        simulate(workload, topology=load_network({"kind": "switch", "npus": 8, "bandwidth": "50 GB/s",
                                                  "latency": "1 us"}),
                 system=load_system_config({"algorithms": {"default": "nccl"}}))  # fmt: skip


@pytest.mark.parametrize("spec", ["nccl:", "nccl:Rung", "nccl:Ring/LL/65", "nccl:Ring/LL/8/2"])
def test_bad_forced_specs_are_named(spec: str) -> None:
    with pytest.raises(ConfigError, match="nccl:"):
        resolve_algorithm(spec, AlgorithmContext(topology=cluster("dgx-a100", 8).topology))


# -- the default on GPU clusters -------------------------------------------------------------------------------


def test_nccl_is_the_default_on_a_gpu_cluster_and_nowhere_else() -> None:
    workload = Workload(collective_workload(C.ALL_REDUCE, MiB, 8))
    on_gpus = simulate(workload, topology=cluster("dgx-a100", 8))
    assert on_gpus.collectives[0].algorithm.startswith("nccl:Ring/")
    switch = load_network({"kind": "switch", "npus": 8, "bandwidth": "300 GB/s", "latency": "350 ns"})
    assert simulate(workload, topology=switch).collectives[0].algorithm == "ring"
    # A cluster that does not name its GPUs is a network only: the natives serve it.
    bare = load_network({"kind": "gpu_cluster", "gpus": 8, "gpus_per_node": 8, "nvlink_bandwidth": "300 GB/s",
                         "nvlink_latency": "700 ns", "nic_bandwidth": "25 GB/s", "nic_latency": "1 us",
                         "nics_per_gpu": 1, "switch_latency": "130 ns", "fabric_levels": 3,
                         "oversubscription": 1})  # fmt: skip
    assert simulate(workload, topology=bare).collectives[0].algorithm == "ring"


# -- bytes on the wire -------------------------------------------------------------------------------------------


def sent_bytes(c: NcclCall, position: int) -> float:
    g = c.graph(c.collective, len(c.group), position)
    return sum(size for kind, size in zip(g.kinds, g.chunks, strict=True) if kind == SEND)


@pytest.mark.parametrize(
    ("collective", "size", "share"),
    [(C.ALL_REDUCE, GiB, 2 * 7 / 8), (C.REDUCE_SCATTER, GiB, 7 / 8), (C.ALL_GATHER, GiB // 8, 7 / 8),
     (C.ALL_REDUCE, 64 * KiB, 2 * 7 / 8), (C.ALL_TO_ALL, GiB, 7 / 8)],
)  # fmt: skip
def test_each_rank_sends_what_the_algorithm_moves_on_the_wire(collective: CollectiveType, size: int,
                                                              share: float) -> None:  # fmt: skip
    c = call(nccl("dgx-a100", 8), collective, size, range(8))
    buffer = size * 8 if collective == C.ALL_GATHER else size
    for position in range(8):
        # The protocol's line overhead and NCCL's reach of the NVLink (20 of 25 GB/s per link) scale the bytes.
        assert sent_bytes(c, position) == pytest.approx(share * buffer * c.plan.intra_scale, rel=1e-6, abs=64)
    assert c.plan.intra_scale == pytest.approx(wire_overhead(c.plan.choice.protocol) * 25 / 20, rel=1e-12) or (
        collective == C.ALL_TO_ALL
    )


@pytest.mark.parametrize("collective", [C.ALL_GATHER, C.REDUCE_SCATTER])
@pytest.mark.parametrize("ranks", [8, 12])
def test_pat_moves_the_rings_blocks_in_log_exchanges_each_its_latency_and_bytes(
    collective: CollectiveType, ranks: int
) -> None:  # fmt: skip
    """One H100 per node (where NCCL 2.23+ runs PAT): ⌈log₂ n⌉ exchanges, n − 1 blocks in all, each exchange
    a message to the peer at its distance and back: on the rails nothing shares a link, so each costs the route's
    latency and its bytes at the NIC's rate; the fixed delay is NCCL's PAT latency shape."""
    more = {"gpus_per_node": 1}
    size = 256 * KiB  # (NCCL 2.27 runs Ring/LL below about 64 KiB of a reduce-scatter: PAT's latency has a base)
    c = call(nccl("dgx-h100", ranks, **more), collective, size, range(ranks))
    assert c.label.startswith("nccl:PAT/Simple/")
    buffer = size * ranks if collective == C.ALL_GATHER else size
    for position in range(ranks):
        expected = (ranks - 1) / ranks * buffer * c.plan.inter_scale  # each message rounded to a byte
        assert sent_bytes(c, position) == pytest.approx(expected, abs=len(pat_steps(ranks)))
    graph = c.graph(collective, ranks, 0)
    assert sum(kind == SEND for kind in graph.kinds) == math.ceil(math.log2(ranks))
    levels = math.ceil(math.log2(ranks))  # exchanges; NCCL's latency counts log2 rounded down
    hop = timing.LAT_NET["Simple"] + timing.FABRIC_TIMING["ib"].hop_us
    path_us = int(math.log2(ranks)) * hop / timing.PAT_LEVEL_OVERLAP + ranks * timing.PAT_PER_RANK
    topo = cluster("dgx-h100", ranks, **more).topology
    latency = topo.latencies[0] * 2  # up and down the rail switch
    rate = topo.bandwidths[0]
    block = buffer / ranks * c.plan.inter_scale
    steps = [latency + round(blocks * block) / rate for _, blocks in pat_steps(ranks)]
    assert c.plan.fixed_ns == pytest.approx((timing.T_KERNEL + path_us) * 1000.0 - levels * latency, rel=1e-12)
    result = run("dgx-h100", ranks, collective, size, **more)
    assert result.collectives[0].algorithm == c.label
    # the channels' own bound runs beside the messages (a small reduce-scatter's binds)
    assert result.finish_ns == pytest.approx(c.plan.fixed_ns + max(sum(steps), c.plan.cta_ns), rel=1e-9)
    ring = run("dgx-h100", ranks, collective, size, {"algorithms": {"default": "nccl:Ring/Simple"}}, **more)
    assert ring.finish_ns > result.finish_ns  # the point of PAT: fewer steps than a ring's n − 1


def test_nvls_moves_a_buffer_and_a_slice_per_gpu_and_reduces_in_the_switch() -> None:
    c = call(nccl("dgx-h100", 8), C.ALL_REDUCE, GiB, range(8))
    assert c.reduces_in_network
    for position in range(8):
        assert sent_bytes(c, position) == pytest.approx(GiB * (1 + 1 / 8) * c.plan.intra_scale, rel=1e-6)


def test_multi_node_rings_cross_every_rail() -> None:
    c = call(nccl("dgx-a100", 32), C.ALL_GATHER, 8 * MiB, range(32))
    orders = c.layout.ring_orders("nvswitch")
    assert len(orders) == 8  # a ring per local GPU index...
    exits = {order[i] % 8 for order in orders for i in range(32) if order[i] // 8 != order[(i + 1) % 32] // 8}
    assert exits == set(range(8))  # ...whose node boundaries leave through every GPU's NIC


def test_rings_inside_a_node_of_direct_nvlink_links_share_every_link_out_evenly() -> None:
    for n in range(3, 11):
        cycles = hamiltonian_cycles(n)
        uses: dict[frozenset[int], int] = {}
        for cycle in cycles:
            assert sorted(cycle) == list(range(n))  # each visits every GPU once
            for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True):
                uses[frozenset((a, b))] = uses.get(frozenset((a, b)), 0) + 1
        assert set(uses.values()) == ({2} if n == 4 else {1})  # evenly
        assert len(uses) == n * (n - 1) // 2 - (n // 2 if n % 2 == 0 and n != 4 else 0)  # even n: one matching idle
    # Four GPUs: three rings each way, every direction of every link in two of the six (strides 1 and 3 leave the
    # diagonals idle); five: the four strides, which reach every link and turn with the position.
    four = Layout([0] * 4, [0, 1, 2, 3]).ring_orders("nvlink")
    directed = [(ring[i], ring[(i + 1) % 4]) for ring in four for i in range(4)]
    assert len(four) == 6 and {directed.count((a, b)) for a in range(4) for b in range(4) if a != b} == {2}
    five = Layout([0] * 5, list(range(5))).ring_orders("nvlink")
    assert five == [[(s * i) % 5 for i in range(5)] for s in (1, 2, 3, 4)]


def test_rings_over_thousands_of_gpus_merge_nccls_steps_keeping_every_byte() -> None:
    assert ring_steps(14) == [1] * 14
    merged = ring_steps(2 * (1024 - 1))
    assert len(merged) == RING_STEPS and sum(merged) == 2046 and max(merged) - min(merged) <= 1
    # Eight rings over the rails share the budget: 4 super-steps each.
    assert ring_steps(30, 8) == [8, 8, 7, 7] and ring_steps(3, 8) == [1, 1, 1]


def test_an_8_byte_all_reduce_runs_on_128_ranks() -> None:
    result = run("dgx-a100", 128, C.ALL_REDUCE, 8)
    assert result.finish_ns > 10_000  # NCCL's floor across nodes: tens of microseconds, not nothing
    assert result.collectives[0].algorithm.startswith("nccl:Tree/LL/")


# -- timing: closed forms ----------------------------------------------------------------------------------------


def test_a_lone_ring_is_its_fixed_delay_plus_each_super_steps_latency_and_bytes() -> None:
    """On one NVSwitch every GPU's up and down links carry one flow: each super-step is latency + bytes / rate."""
    size = 256 * MiB
    c = call(nccl("dgx-a100", 8), C.ALL_REDUCE, size, range(8))
    assert c.label.startswith("nccl:Ring/Simple/")
    result = run("dgx-a100", 8, C.ALL_REDUCE, size)
    block = size / 8
    steps = [round(k * block * c.plan.intra_scale) / 300.0 + 700.0 for k in ring_steps(14)]
    expected = c.plan.fixed_ns + sum(steps)
    assert result.finish_ns == pytest.approx(expected, rel=1e-12)
    assert c.plan.cta_ns < sum(steps) and c.plan.host_ns < expected  # the channels and the host are not the bound


@pytest.mark.parametrize("proto", ["LL", "LL128", "Simple"])
def test_a_trees_nvlink_hops_cost_what_nccls_table_says_against_a_rings(
    proto: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """A tree's 2·(ppn − 1) NVLink hops each cost the ring's hop times NCCL's tree/ring ratio (2.27's table)."""
    forced = NcclSettings(algo=frozenset({"Tree"}), proto=frozenset({proto}))
    algo = nccl("dgx-a100", 16, forced)
    size = 4 * KiB  # one pipeline step: the steady-state overhead (which takes the larger of two hops) is nil
    tree = call(algo, C.ALL_REDUCE, size, range(16))
    monkeypatch.setitem(timing.TREE_HOP, proto, 1.0)
    as_ring = call(nccl("dgx-a100", 16, forced), C.ALL_REDUCE, size, range(16))
    ratio = {"LL": 0.6 / 0.6, "LL128": 1.25 / 1.9, "Simple": 4.0 / 3.4}[proto]
    hops = 2 * (8 - 1)
    moved = hops * timing.LAT_NVLINK[proto] * (1 - ratio) * 1000.0  # A100: no generation factor, NVSwitch
    assert tree.label.startswith(f"nccl:Tree/{proto}/")
    assert as_ring.plan.fixed_ns - tree.plan.fixed_ns == pytest.approx(moved, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize(("preset", "generation"), [("dgx-a100", 1.0), ("dgx-h100", 1.5)])
def test_a_trees_ll_network_hops_speed_up_with_the_gpu_generation_and_the_others_do_not(
    preset: str, generation: float
) -> None:  # fmt: skip
    """Two nodes to four add one tree level: 2 network hops, LL's at LAT_NET / generation^LAT_GEN_EXPONENT."""
    fabric = timing.FABRIC_TIMING["ib"].hop_us
    for proto in ("LL", "LL128"):
        forced = NcclSettings(algo=frozenset({"Tree"}), proto=frozenset({proto}))
        two = call(nccl(preset, 16, forced), C.ALL_REDUCE, 4 * KiB, range(16))
        four = call(nccl(preset, 32, forced), C.ALL_REDUCE, 4 * KiB, range(32))
        scale = generation**timing.LAT_GEN_EXPONENT if proto == "LL" else 1.0
        hop = timing.LAT_NET[proto] / scale + fabric
        # the fixed delay leaves out the network's own latency on the path, which the graph's messages carry
        on_path = [c.parent._path_latency("Tree", C.ALL_REDUCE, c.group, c.layout, 0) for c in (two, four)]
        added = four.plan.fixed_ns + on_path[1] - two.plan.fixed_ns - on_path[0]
        assert added == pytest.approx(2 * hop * 1000.0, rel=1e-9), proto


def test_the_host_launch_bounds_a_tiny_call_of_one_thread_driving_eight_gpus() -> None:
    one = run("dgx-a100", 8, C.ALL_REDUCE, 8)
    eight = run("dgx-a100", 8, C.ALL_REDUCE, 8, {"nccl": {"gpus_per_process": 8}})
    assert eight.finish_ns == pytest.approx(8 * 4.2e3, rel=1e-12)
    assert eight.finish_ns > one.finish_ns
    # A communicator of one GPU of each of two nodes: each process launches it on its one GPU there (it was
    # charged eight launches: 33.6 us against 17.0).
    driving = call(nccl("dgx-a100", 16, NcclSettings(gpus_per_process=8)), C.ALL_REDUCE, 8, (0, 8))
    assert driving.plan.host_ns == call(nccl("dgx-a100", 16), C.ALL_REDUCE, 8, (0, 8)).plan.host_ns
    assert call(nccl("dgx-a100", 16, NcclSettings(gpus_per_process=8)), C.ALL_REDUCE, 8, range(16)).plan.host_ns == (
        8 * driving.plan.host_ns
    )


def test_shared_graphs_give_the_per_position_graphs_results_to_the_last_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [("dgx-a100", 8, C.ALL_REDUCE, 64 * MiB), ("dgx-h100", 8, C.ALL_REDUCE, 64 * MiB),
             ("polaris", 4, C.REDUCE_SCATTER, MiB), ("dgx-a100", 8, C.ALL_TO_ALL, MiB),
             ("dgx-h100", 16, C.ALL_REDUCE, 64 * MiB), ("dgx-h100", 12, C.ALL_GATHER, 8 * KiB),
             ("dgx-h100", 12, C.REDUCE_SCATTER, 64 * KiB)]  # fmt: skip
    for preset, gpus, collective, size in cases:
        more = {"gpus_per_node": 1} if gpus == 12 else {}  # (PAT: one GPU per node)
        shared = run(preset, gpus, collective, size, **more)
        monkeypatch.setattr(NcclAlgorithm, "share_graphs", False)
        apart = run(preset, gpus, collective, size, **more)
        assert gpus != 12 or shared.collectives[0].algorithm.startswith("nccl:PAT/")
        monkeypatch.setattr(NcclAlgorithm, "share_graphs", True)
        assert shared.to_dict() | {"sim": None} == apart.to_dict() | {"sim": None}, (preset, collective)


def test_trees_across_nodes_are_nccls_double_binary_tree() -> None:
    # NCCL's own picture of its bit tree over 14 ranks (src/graph/trees.cc): 0 - 8; 8 - 4, 12; 4 - 2, 6; 12 - 10, 13.
    first, second = double_binary_tree(14)
    expected = {8: 0, 4: 8, 12: 8, 2: 4, 6: 4, 10: 12, 13: 12, 1: 2, 3: 2, 5: 6, 7: 6, 9: 10, 11: 10}
    assert first[0] == [-1] + [expected[r] for r in range(1, 14)]
    assert second[0] == [-1 if first[0][13 - r] < 0 else 13 - first[0][13 - r] for r in range(14)]  # mirrored
    assert double_binary_tree(5)[1][0] == [1, -1, 3, 0, 3]  # an odd size: the first tree shifted by one
    for size in range(2, 40):
        trees = double_binary_tree(size)
        for parent, children in trees:
            assert parent.count(-1) == 1 and all(len(c) <= 2 for c in children)
            for r in range(size):  # every node reaches the root
                seen = 0
                while parent[r] >= 0 and seen <= size:
                    r, seen = parent[r], seen + 1
                assert seen <= size
        if size % 2 == 0:  # each node forwards (has children) in at most one of the two
            assert not any(trees[0][1][r] and trees[1][1][r] for r in range(size))


def inter_node_sent(c: NcclCall, position: int) -> float:
    g = c.graph(c.collective, len(c.group), position)
    node = c.layout.nodes[position]
    return sum(
        size for kind, size, peer in zip(g.kinds, g.chunks, g.peers, strict=True)
        if kind == SEND and c.layout.nodes[peer] != node
    )  # fmt: skip


def test_a_tree_over_nodes_carries_twice_the_slice_through_its_busiest_nics_as_nccls_tree_bandwidth_says() -> None:
    """NCCL rates a tree across more than two nodes at half the NIC's bandwidth: a node forwarding in one of the two
    trees sends the slice to its parent and to two children. Over two nodes the slice is exchanged once."""
    slice_bytes = 64 * MiB / 8
    for gpus, busiest in ((16, 1.0), (32, 2.0), (64, 2.0)):
        c = call(nccl("dgx-h100", gpus), C.ALL_REDUCE, 64 * MiB, range(gpus))
        assert c.label.startswith("nccl:NVLSTree/Simple/")
        sent = [inter_node_sent(c, p) / (slice_bytes * c.plan.inter_scale) for p in range(gpus)]
        assert max(sent) == pytest.approx(busiest, rel=1e-5)


@pytest.mark.parametrize(("gpus", "nic"), [(8, None), (16, None), (16, "800 GB/s")])
def test_nvls_fill_grows_in_with_its_rounds(gpus: int, nic: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """S rounds (a round: a chunk of every channel and head) pay ``1 − RAMP / S`` of FILL_TREE rounds through the
    slower stage: a GPU's NVLS link, or across nodes the node's NICs at each tree level (up and down), plus the NVLS
    tree's fixed cost; a call of one round a tenth. Eight 800 GB/s NICs (on PCIe links as fast) leave the NVLS link
    the slower."""
    more = {} if nic is None else {"nic_bandwidth": nic, "pcie_bandwidth": nic}

    def fixed(size: int, fill: float) -> float:
        monkeypatch.setattr(timing, "FILL_TREE", fill)
        found = call(nccl("dgx-h100", gpus, **more), C.ALL_REDUCE, size, range(gpus))
        assert found.label.startswith("nccl:NVLS/" if gpus == 8 else "nccl:NVLSTree/")
        return found.plan.fixed_ns

    hw = cluster("dgx-h100", gpus, **more).topology.hardware
    comm = Comm(hw, gpus, gpus // 8, 8)
    rate = comm.nvlink_bandwidth * 0.85  # a GPU's NVLS link: NCCL's NVLink reach at Hopper's NVLS efficiency
    if gpus == 8:  # NVLS's chunk shrinks below 1 GiB, 64 MiB and 8 MiB (64, 8 and 2 rounds of 128, 64, 32 KiB)
        sizes = ((2 * MiB, 16 * KiB), (GiB, 128 * KiB))
    else:  # the NVLS tree's below 64 MiB and 8 MiB on fewer than four nodes (4 and 1 rounds of 128, 64 KiB)
        rate = min(rate, comm.node_nic_bandwidth * timing.FABRIC_TIMING["ib"].efficiency / 2)  # up and down
        sizes = ((8 * MiB, 64 * KiB), (GiB, 128 * KiB))
    assert (rate == comm.nvlink_bandwidth * 0.85) == (nic is not None or gpus == 8)
    ops, fill_tree = 16 * 8, timing.FILL_TREE  # channels × heads
    for size, chunk in sizes:
        rounds = size / (ops * chunk)
        fill = fixed(size, fill_tree) - fixed(size, 0.0)
        expected = fill_tree * (ops * chunk) / rate * (1 - timing.NVLS_RAMP / rounds)
        assert fill == pytest.approx(expected, rel=1e-9)
        assert (rounds == 1) == (fill < 0.11 * fill_tree * (ops * chunk) / rate)
    monkeypatch.setattr(timing, "NVLS_TREE_FIXED", 0.0)
    unfixed = fixed(GiB, 0.0)
    monkeypatch.setattr(timing, "NVLS_TREE_FIXED", 15.0)
    assert fixed(GiB, 0.0) - unfixed == (0.0 if gpus == 8 else pytest.approx(15_000.0, rel=1e-9))


def test_nvls_is_checked_against_the_in_network_bound_not_a_rings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", EtsimWarning)
        result = run("dgx-h100", 8, C.ALL_REDUCE, GiB)
    # Faster than any algorithm whose GPUs reduce could be (2·7/8 GiB through 450 GB/s), as NVLink SHARP is.
    assert result.finish_ns < 2 * 7 / 8 * GiB / 450.0


# -- tune and export ---------------------------------------------------------------------------------------------


def test_tune_finds_ncclss_protocol_crossovers_and_exports_them_for_ncclss_tuner(tmp_path: Path) -> None:
    topo = tmp_path / "dgx.yaml"
    topo.write_text("kind: gpu_cluster\npreset: dgx-a100\ngpus: 8\n")
    out, csv = tmp_path / "table.yaml", tmp_path / "tuner.csv"
    subprocess.run(
        [sys.executable, "-m", "etsim", "tune", "--topology", str(topo), "--candidates",
         "nccl:Ring/LL,nccl:Ring/LL128,nccl:Ring/Simple", "--sizes", "4KiB,4MiB,1GiB", "-o", str(out),
         "--export", "nccl-tuner", str(csv)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    lines = [line for line in csv.read_text().splitlines() if not line.startswith("#")]
    assert [line.split(",")[3:5] for line in lines] == [["ring", "ll"], ["ring", "ll128"], ["ring", "simple"]]
    assert "{default: nccl}" in out.read_text()


def test_results_name_ncclss_choice(tmp_path: Path) -> None:
    topo = tmp_path / "dgx.yaml"
    topo.write_text("kind: gpu_cluster\npreset: dgx-h100\ngpus: 8\n")
    prefix = tmp_path / "ar"
    subprocess.run([sys.executable, "-m", "etsim", "workload", "gen", "collective", "--type", "all_reduce",
                    "--size", "1GiB", "--npus", "8", "-o", str(prefix)], check=True, capture_output=True)  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "etsim", "run", str(prefix), "--topology", str(topo), "--json",
                           str(tmp_path / "r.json")], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["collectives"][0]["algorithm"].startswith("nccl:NVLS/Simple/")
    assert not data["warnings"]
    assert math.isfinite(data["finish_ns"])


# -- send and receive ----------------------------------------------------------------------------------------------


def sendrecv(gpus: int, size: int, pg_name: str | None = None, recv_pg_name: str | None = "same") -> Workload:
    from etsim.chakra.builder import TraceBuilder

    traces = []
    for rank in range(gpus):
        b = TraceBuilder()
        b.send((rank + 1) % gpus, size, pg_name=pg_name)
        b.recv((rank - 1) % gpus, size, pg_name=pg_name if recv_pg_name == "same" else recv_pg_name)
        traces.append(b.build(rank=rank))
    return Workload(traces)


def test_workload_sends_run_as_ncclsend_its_launch_then_its_peer_copy() -> None:
    from etsim.system.algorithms.nccl.timing import LAT_P2P, P2P_NVLINK, T_KERNEL

    size = 256 * MiB
    topo = cluster("dgx-h100", 8)
    result = simulate(sendrecv(8, size), topology=topo)
    # NCCL's fixed cost, then the bytes at NCCL's reach of the NVLink (0.895 of 18 × 20.6 GB/s), one flow per link.
    wire = round(size * 450 / (18 * 20.6 * P2P_NVLINK))
    assert result.finish_ns == pytest.approx((T_KERNEL + LAT_P2P) * 1e3 + wire / 450, rel=1e-12)
    plain = simulate(sendrecv(8, size), topology=topo, system=load_system_config({"nccl": {"p2p": False}}))
    assert plain.finish_ns == pytest.approx(700 + size / 450, rel=1e-12)
    ring = simulate(sendrecv(8, size), topology=topo, system=load_system_config({"algorithms": {"default": "ring"}}))
    assert ring.finish_ns == plain.finish_ns  # the natives' runs keep plain messages


def test_p2p_channels_split_a_send_as_nccl_does_by_its_size() -> None:
    hw = cluster("dgx-h100", 8).topology.hardware
    eight, pair = Comm(hw, 8, 1, 8), Comm(hw, 2, 1, 2)
    sizes = (64 * KiB, 128 * KiB, 32 * MiB, 64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB, GiB)
    # 32 p2p channels shared by 8 ranks: 4 a peer, one per 64 KiB, doubled while a channel's part exceeds 16 MiB.
    assert [timing.p2p_channels(eight, 32, s) for s in sizes] == [1, 2, 4, 4, 8, 16, 32, 32]
    assert [timing.p2p_channels(eight, 24, s) for s in sizes] == [1, 2, 4, 4, 8, 16, 32, 32]  # 24 round up to 32
    assert [timing.p2p_channels(pair, 32, s) for s in sizes] == [1, 2, 16, 16, 16, 16, 32, 32]
    # A peer uses at most twice its NVLinks to the other GPU (to a power of two): 64 on H100's 18, 32 on A100's 12.
    a100 = Comm(cluster("dgx-a100", 8).topology.hardware, 8, 1, 8)
    assert timing.p2p_channels(eight, 64, 4 * GiB) == 64 and timing.p2p_channels(a100, 64, 4 * GiB) == 32


def test_sends_on_one_nodes_communicator_run_on_its_channels() -> None:
    from etsim.system.algorithms.nccl.timing import LAT_P2P, P2P_CHANNEL, T_KERNEL

    topo = cluster("dgx-h100", 8)
    for size, channels in ((32 * MiB, 4), (64 * MiB, 4), (128 * MiB, 8)):
        # nccl-tests' sendrecv: one communicator of the 8 GPUs, each send on 4 or 8 channels of 21 GB/s.
        result = simulate(sendrecv(8, size, "0"), topology=topo)
        wire = round(size * 450 / (channels * P2P_CHANNEL * 1.5))
        assert result.finish_ns == pytest.approx((T_KERNEL + LAT_P2P) * 1e3 + wire / 450, rel=1e-12)
        # A send of its own pair's communicator has 16 channels, more than the NVLink copy reaches.
        pair = simulate(sendrecv(8, size), topology=topo)
        nvlink = round(size * 450 / (18 * 20.6 * timing.P2P_NVLINK))
        assert pair.finish_ns == pytest.approx((T_KERNEL + LAT_P2P) * 1e3 + nvlink / 450, rel=1e-12)
    # A communicator across nodes keeps the pair's peer copy and the fabric (NCCL's split there is not modelled).
    two = cluster("dgx-h100", 16)
    assert (
        simulate(sendrecv(16, 32 * MiB, "0"), topology=two).finish_ns
        == simulate(sendrecv(16, 32 * MiB), topology=two).finish_ns
    )
    # A receive matches the bytes sent, whatever its node names; the send's communicator sets the time, and with
    # no receive in its call the send has its channels' every warp: twice the rate.
    assert simulate(sendrecv(8, 32 * MiB, "0", recv_pg_name=None), topology=topo).finish_ns == pytest.approx(
        (T_KERNEL + LAT_P2P) * 1e3 + 32 * MiB / (4 * 2 * P2P_CHANNEL * 1.5), rel=1e-8
    )
    # A group that does not hold the pair cannot carry it: the pair's own communicator (16 channels at 64 MiB).
    algo = nccl("dgx-h100", 8)
    assert algo.p2p_message(0, 1, 64 * MiB, (0, 2, 4, 6), 4, True) == algo.p2p_message(0, 1, 64 * MiB, None, 1, True)
    assert algo.p2p_message(0, 2, 64 * MiB, (0, 2, 4, 6), 1, True) != algo.p2p_message(0, 2, 64 * MiB, None, 1, True)


def test_a_ranks_sends_to_several_peers_share_its_nvlink_and_add_their_channels() -> None:
    from etsim.chakra.builder import TraceBuilder
    from etsim.system.algorithms.nccl.timing import LAT_P2P, P2P_CHANNEL, T_KERNEL

    def exchange(peers: int, size: int) -> Workload:  # every rank sends to and receives from the next *peers*
        traces = []
        for rank in range(8):
            b = TraceBuilder()
            for d in range(1, peers + 1):
                b.send((rank + d) % 8, size, tag=d, pg_name="0")
                b.recv((rank - d) % 8, size, tag=d, pg_name="0")
            traces.append(b.build(rank=rank))
        return Workload(traces)

    topo, grouped = cluster("dgx-h100", 8), load_system_config({"resources": {"comm_streams": 0}})  # one group call
    fixed = (T_KERNEL + LAT_P2P) * 1e3
    # Two peers of 32 MiB: 4 channels each, 168 GB/s together, under the NVLink copy: each message at 84 GB/s.
    two = simulate(exchange(2, 32 * MiB), topology=topo, system=grouped).finish_ns
    assert two == pytest.approx(fixed + 32 * MiB / (4 * P2P_CHANNEL * 1.5), rel=1e-8)
    # Seven: 588 GB/s of channels, more than the NVLink copy (331.9 GB/s) that the seven share.
    seven = simulate(exchange(7, 32 * MiB), topology=topo, system=grouped).finish_ns
    assert seven == pytest.approx(fixed + 7 * 32 * MiB / (18 * 20.6 * timing.P2P_NVLINK), rel=1e-8)


def test_one_nodes_all_to_all_is_bound_by_its_peers_channels_when_small() -> None:
    algo = nccl("dgx-h100", 8)
    # 128 KiB a peer: 2 channels each, 7 peers at 21 GB/s a channel, slower than the NVLink copy (331.9 GB/s).
    small = call(algo, C.ALL_TO_ALL, MiB, range(8)).plan
    assert small.intra_scale == pytest.approx(450 / (7 * 2 * timing.P2P_CHANNEL * 1.5), rel=1e-12)
    large = call(algo, C.ALL_TO_ALL, 64 * MiB, range(8)).plan  # 4 channels a peer: NVLink bounds it
    assert large.intra_scale == pytest.approx(450 / (18 * 20.6 * timing.P2P_NVLINK), rel=1e-12)


def test_a_simple_rings_path_through_host_memory_is_nccls_pci_hop(monkeypatch: pytest.MonkeyPatch) -> None:
    from etsim.system.algorithms.nccl.search import Comm

    settings = load_system_config({"nccl": {"proto": "Simple"}}).nccl
    algo = nccl("pcie-4gpu", 4, settings)
    hw = cluster("pcie-4gpu", 4).topology.hardware
    fitted = timing._lat_intra(Comm(hw, 4, 1, 4), "Simple")  # the steps' overhead keeps it
    ours = call(algo, C.ALL_REDUCE, 8 * MiB, range(4)).plan.fixed_ns
    monkeypatch.setattr(timing, "HOST_SIMPLE_HOP", fitted)
    before = call(nccl("pcie-4gpu", 4, settings), C.ALL_REDUCE, 8 * MiB, range(4)).plan.fixed_ns
    # A 4-GPU all-reduce's ring has 6 hops on its path, each at NCCL's 5.7 µs instead of the fitted hop.
    assert before - ours == pytest.approx(6 * (fitted - 5.7) * 1e3, rel=1e-9)


def test_all_to_alls_follow_nccls_peer_to_peer_schedule() -> None:
    # One node of 16: local distances by triangular numbers modulo 16 (NCCL's p2pSchedule), sending ahead and
    # receiving from behind.
    flat = Layout([0] * 16, list(range(16)))
    deltas = [1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]
    assert p2p_rounds(flat, 5) == [((5 + d) % 16, (5 - d) % 16) for d in deltas]
    # Two nodes of 4 (positions 0-3 and 4-7): node distance first, then local distance (0, 1, 3, 2).
    two = Layout([0, 0, 0, 0, 1, 1, 1, 1], [0, 1, 2, 3] * 2)
    assert p2p_rounds(two, 1) == [(2, 0), (0, 2), (3, 3), (5, 5), (6, 4), (4, 6), (7, 7)]
    for layout in (flat, two):
        n = len(layout.nodes)
        for q in range(n):
            rounds = p2p_rounds(layout, q)
            assert sorted(s for s, _ in rounds) == sorted(r for _, r in rounds) == [p for p in range(n) if p != q]
    # relative: a shift of whole nodes moves every position's rounds with it
    assert p2p_rounds(two, 5) == [((s + 4) % 8, (r + 4) % 8) for s, r in p2p_rounds(two, 1)]
