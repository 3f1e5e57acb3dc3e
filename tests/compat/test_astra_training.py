"""Training jobs and the workload-level conventions they need, run as ASTRA-sim runs them: the cycles it gave.

Each expected value was measured by running ASTRA-sim itself (commit 518bd51, its analytical back ends rebuilt
with ``../shared/tools/astra``) on exactly these inputs: the traces ``etsim workload gen transformer`` writes for
the model below with ``--tp 2 --pp 2 --dp 2 --global-batch 8`` (and ``--sp --zero 1``), the comm-group file it
writes beside them (``--comm-group-configuration``), ASTRA-sim's example network ``Ring_8npus.yml`` (Ring of 8,
50 GB/s, 500 ns) and system ``Ring_4chunks.json`` (ring for every collective, LIFO, 4 splits, endpoint delay 10,
local-mem-bw 1600, localBWAware), and no remote memory. ASTRA-sim aborted on the generator's first traces (its
feeder asserts on METADATA nodes; the groups now travel in GlobalMetadata and the comm-group file), and it
charged no endpoint delay to workload SEND/RECV, which etsim did (issue 24, item 4): a 2 MiB pipeline-style send
between neighbours on the same ring takes 39562 cycles in ASTRA-sim, and now in etsim too.
Under the congestion-aware back end too, once etsim's compatibility ring followed ASTRA-sim's (a send released by
the previous processed receipt, the endpoint delay paid on arrival, the phase ended at its last receipt).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from etsim.chakra import TraceBuilder, write_workload
from etsim.chakra.graph import CollectiveType, NodeType
from etsim.cli import main
from etsim.compat import run_astra
from etsim.errors import EtsimWarning, SimulationError
from etsim.producers.workloads import WORKLOAD_GENERATORS
from etsim.producers.workloads.base import parse

MODEL = "layers: 4\nhidden: 1024\nheads: 16\nvocab: 1000\nseq: 512\n"
SYSTEM = {
    "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1, "preferred-dataset-splits": 4,
    **{f"{c}-implementation": ["ring"] for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
    "collective-optimization": "localBWAware", "local-mem-bw": 1600, "boost-mode": 0, "roofline-enabled": 0,
    "peak-perf": 900,
}  # fmt: skip
NETWORK = "topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"

# flags: (ranks 0-3, ranks 4-7) finish cycles under ASTRA-sim's congestion-unaware back end, and every rank's under
# the congestion-aware one. The model's word embedding is tied: ranks 0-3 (first stage) and 4-7 (last) all-reduce
# its gradient in pairs before the optimizer step. Under the congestion-unaware back end the last stage's ranks,
# which reach that all-reduce first, post its receive after the first stage's message arrived: ASTRA-sim pays a
# receipt's endpoint delay after the later of arrival and posting, and so does etsim's compatibility mode (before it
# did, after the arrival: those ranks finished 10 cycles early under the congestion-unaware back end).
CASES = {
    "tp2_pp2_dp2": ([], (4187352, 4177968), [5551298, 5549184, 5547070, 5544956, 5536896, 5535012, 5532898, 5530784]),
    "tp2_pp2_dp2_sp_zero1": (
        ["--sp", "--zero", "1"],
        (3602497, 3590229),
        [4597976, 4597476, 4596956, 4597456, 4576036, 4575536, 4575016, 4575516],
    ),
}


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "sys.json").write_text(json.dumps(SYSTEM))
    (tmp_path / "net.yml").write_text(NETWORK)
    return tmp_path / "sys.json", tmp_path / "net.yml"


@pytest.mark.parametrize("case", sorted(CASES))
def test_generated_training_jobs_run_as_astra_sim_runs_them(case: str, tmp_path: Path) -> None:
    flags, (first_stage, second_stage), aware = CASES[case]
    (tmp_path / "model.yaml").write_text(MODEL)
    prefix = tmp_path / "job"
    argv = ["workload", "gen", "transformer", "--model", str(tmp_path / "model.yaml"), "--tp", "2", "--pp", "2"]
    assert main([*argv, "--dp", "2", "--global-batch", "8", *flags, "-o", str(prefix)]) == 0
    groups = tmp_path / "job.comm_groups.json"
    assert json.loads(groups.read_text())["1"] == [0, 1]  # ASTRA-sim's comm-group format
    system, network = _inputs(tmp_path)
    result = run_astra(prefix, system, network, comm_groups=groups, model="unaware")
    assert [int(r.finish_ns) for r in result.ranks] == [first_stage] * 4 + [second_stage] * 4
    result = run_astra(prefix, system, network, comm_groups=groups, model="aware")
    assert [int(r.finish_ns) for r in result.ranks] == aware


# splits: ASTRA-sim's finish cycles of ranks 0..3 (4..7 the same), unaware and aware
SUBGROUP_RING = {
    1: ([966672, 966672, 965672, 965672], [1577020, 1577020, 1270846, 1270846]),
    4: ([979864] * 4, [1437616] * 4),
}


def _group_all_reduces(tmp_path: Path, name: str, size: int, group: int) -> tuple[Path, Path]:
    """8 ranks, each all-reducing *size* bytes on its communicator group of *group* consecutive ranks: the workload
    prefix and the comm-group file."""
    traces = []
    for r in range(8):
        b = TraceBuilder()
        b.collective(CollectiveType.ALL_REDUCE, size, pg_name=str(1 + r // group))
        traces.append(b.build(rank=r))
    write_workload(traces, tmp_path / name)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({str(1 + k): list(range(k * group, (k + 1) * group)) for k in range(8 // group)}))
    return tmp_path / name, groups


@pytest.mark.parametrize("splits", sorted(SUBGROUP_RING))
def test_a_ring_on_a_subgroup_of_a_larger_ring_runs_as_astra_sims(splits: int, tmp_path: Path) -> None:
    """Groups [0..3] and [4..7] of a Ring 8 all-reduce 32,768,000 bytes each (issue 24's reproducer).

    The 3 -> 0 hop crosses three links. ASTRA-sim's ring sends a packet as soon as the previous receipt is
    processed (not after its own previous send), pays the endpoint delay on arrival, and ends the phase at its
    last processed receipt; before etsim did all three, it gave 967672/966672/965672/967672 unaware and
    1989681/1852474/1852474/1989681 aware (one split).
    """
    prefix, groups = _group_all_reduces(tmp_path, "sub", 32_768_000, 4)
    system, network = _inputs(tmp_path)
    system.write_text(json.dumps({**SYSTEM, "preferred-dataset-splits": splits}))
    unaware, aware = SUBGROUP_RING[splits]
    for model, expected in (("unaware", unaware), ("aware", aware)):
        result = run_astra(prefix, system, network, comm_groups=groups, model=model)
        assert [int(r.finish_ns) for r in result.ranks] == expected * 2, model


def test_the_generated_traces_hold_no_node_astra_sims_feeder_rejects() -> None:
    generator = WORKLOAD_GENERATORS.get("transformer")()
    _, options = parse("transformer", {"model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 10, "seq": 16},
                                       "global_batch": 2, "tp": 2, "pp": 2})  # fmt: skip
    types = {NodeType(t) for trace in generator.generate(options) for t in trace.types}
    # ASTRA-sim's statistics assert on METADATA nodes before it looks at their type.
    assert types == {NodeType.COMP_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE}


@pytest.mark.parametrize("model", ["unaware", "aware"])
def test_workload_sends_pay_no_endpoint_delay(model: str, tmp_path: Path) -> None:
    """A 2 MiB send to the next rank of the ring: ASTRA-sim 39562 cycles on both back ends."""
    assert main(["workload", "gen", "sendrecv", "--npus", "8", "--size", "2 MiB", "-o", str(tmp_path / "p2p")]) == 0
    system, network = _inputs(tmp_path)
    result = run_astra(tmp_path / "p2p", system, network, model=model)
    assert [int(r.finish_ns) for r in result.ranks] == [39562] * 8


def _subgroup_all_reduces(tmp_path: Path, endpoint: int) -> tuple[Path, Path, Path, Path]:
    """Every pair of ranks all-reduces 1 MiB on its own communicator group (groups [0,1], [2,3] … of a Ring 8)."""
    prefix, groups = _group_all_reduces(tmp_path, "sub", 1 << 20, 2)
    system, network = _inputs(tmp_path)
    system.write_text(json.dumps({**SYSTEM, "endpoint-delay": endpoint, "preferred-dataset-splits": 1}))
    return prefix, system, network, groups


@pytest.mark.parametrize("model", ["unaware", "aware"])
@pytest.mark.parametrize("endpoint", [1, 10, 37])
def test_collectives_on_communicator_groups_pay_a_fixed_delay(endpoint: int, model: str, tmp_path: Path) -> None:
    """ASTRA-sim runs a group as a local dimension whose delay is 10 whatever endpoint-delay: 21541 cycles each."""
    workload, system, network, groups = _subgroup_all_reduces(tmp_path, endpoint)
    result = run_astra(workload, system, network, comm_groups=groups, model=model)
    assert [int(r.finish_ns) for r in result.ranks] == [21541] * 8


@pytest.mark.parametrize("model", ["unaware", "aware"])
def test_roofline_compute_is_truncated_to_whole_cycles_as_astra_sim_does(model: str, tmp_path: Path) -> None:
    """Five chained COMP nodes with awkward num_ops/tensor_size, an all-reduce, one more COMP: 317753 cycles.

    ASTRA-sim (roofline-enabled 1, peak-perf 312, local-mem-bw 1555) truncates each node's time to whole ns;
    keeping the fractions gave 317755.
    """
    nodes = [(1_000_003, 7_777), (123_456_789, 1_000_000), (999_999_937, 3), (5, 123_457), (77_777_777_777, 12_345_678)]
    traces = []
    for r in range(8):
        b = TraceBuilder()
        prev: list[int] = []
        for k, (ops, size) in enumerate(nodes):
            prev = [b.comp(f"c{k}", num_ops=ops, tensor_size=size, deps=prev)]
        prev = [b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=prev)]
        b.comp("last", num_ops=3_333_333, tensor_size=1_111, deps=prev)
        traces.append(b.build(rank=r))
    write_workload(traces, tmp_path / "roof")
    system, network = _inputs(tmp_path)
    system.write_text(json.dumps({**SYSTEM, "roofline-enabled": 1, "peak-perf": 312, "local-mem-bw": 1555}))
    result = run_astra(tmp_path / "roof", system, network, model=model)
    assert [int(r.finish_ns) for r in result.ranks] == [317753] * 8


def test_generated_jobs_under_the_roofline_run_as_astra_sim_runs_them(tmp_path: Path) -> None:
    """tp2_pp2_dp2 with roofline-enabled 1, peak-perf 312: ASTRA-sim's cycles (COMP times from num_ops/tensor_size).

    Memory-bound nodes say one operation: with num_ops 0, ASTRA-sim divides 0 by 0 and never finishes them.
    """
    (tmp_path / "model.yaml").write_text(MODEL)
    prefix = tmp_path / "job"
    argv = ["workload", "gen", "transformer", "--model", str(tmp_path / "model.yaml"), "--tp", "2", "--pp", "2"]
    assert main([*argv, "--dp", "2", "--global-batch", "8", "-o", str(prefix)]) == 0
    system, network = _inputs(tmp_path)
    system.write_text(json.dumps({**SYSTEM, "roofline-enabled": 1, "peak-perf": 312}))
    groups = tmp_path / "job.comm_groups.json"
    expected = {
        "unaware": [3350086] * 4 + [3340787] * 4,
        "aware": [4726747, 4724633, 4722519, 4720405, 4712430, 4710546, 4708432, 4706318],
    }
    for model, cycles in expected.items():
        result = run_astra(prefix, system, network, comm_groups=groups, model=model)
        assert [int(r.finish_ns) for r in result.ranks] == cycles, model


def test_a_node_of_no_operations_under_the_whole_ns_roofline_is_refused_by_name(tmp_path: Path) -> None:
    traces = []
    for r in range(8):
        b = TraceBuilder()
        b.comp("norm", num_ops=0, tensor_size=4096)
        traces.append(b.build(rank=r))
    write_workload(traces, tmp_path / "zero")
    system, network = _inputs(tmp_path)
    system.write_text(json.dumps({**SYSTEM, "roofline-enabled": 1, "peak-perf": 312}))
    with pytest.raises(SimulationError, match=r"node 0 \(norm\): num_ops 0 with tensor_size 4096 .* num_ops >= 1"):
        run_astra(tmp_path / "zero", system, network, model="unaware")


def test_an_unbalanced_routers_per_peer_exchanges_run_as_astra_sim_runs_them(tmp_path: Path) -> None:
    """A MoE job with an unbalanced router (its all-to-alls as sends and receives of unequal sizes, in the expert
    group's ``pg_name``, tags from 2**24): ASTRA-sim (518bd51, rebuilt with ``../shared/tools/astra``) reads and runs
    the files ``etsim workload gen transformer --model M --dp 8 --ep 4 --global-batch 16 --expert-imbalance 0.5``
    writes (M: 2 llama layers, hidden 1024, 16 heads, vocab 1000, seq 512, 8 experts top-2 of ffn 2048) on the Ring 8
    above. Every rank's cycles equal under both back ends (congestion-unaware: ranks 0 and 1 finished 20 and 10 cycles
    early until a receive posted after its message arrived paid the endpoint delay after its posting, as ASTRA-sim
    handles it).
    """
    moe = "layers: 2\nhidden: 1024\nheads: 16\nvocab: 1000\nseq: 512\nexperts: 8\ntop_k: 2\nexpert_ffn: 2048\n"
    moe += "arch: llama\n"
    (tmp_path / "model.yaml").write_text(moe)
    prefix = tmp_path / "job"
    argv = ["workload", "gen", "transformer", "--model", str(tmp_path / "model.yaml"), "--dp", "8", "--ep", "4"]
    assert main([*argv, "--global-batch", "16", "--expert-imbalance", "0.5", "-o", str(prefix)]) == 0
    groups = tmp_path / "job.comm_groups.json"
    system, network = _inputs(tmp_path)
    aware = run_astra(prefix, system, network, comm_groups=groups, model="aware")
    assert [int(r.finish_ns) for r in aware.ranks] == [8426467, 8426967, 8427467, 8427467] * 2
    unaware = run_astra(prefix, system, network, comm_groups=groups, model="unaware")
    assert [int(r.finish_ns) for r in unaware.ranks] == [5038724, 5051398, 5064072, 5064072] * 2


# Ranks 0, 2, 4, 6 compute 100 µs and ranks 1, 3, 5, 7 10 µs, then each pair (0, 1), (2, 3) … runs one 1 MiB
# collective (one split) and computes 5 µs: ASTRA-sim's finish cycles of ranks 0 and 1, unaware and aware.
LATE_MEMBER = {
    CollectiveType.ALL_REDUCE: ((126541, 116276), (126541, 125050)),
    CollectiveType.ALL_GATHER: ((105020, 125051), (105020, 125051)),
}


@pytest.mark.parametrize("collective", sorted(LATE_MEMBER))
def test_a_receive_posted_after_its_message_arrived_is_handled_an_endpoint_delay_after(
    collective: CollectiveType, tmp_path: Path
) -> None:
    """The member that starts 90 µs late finds its partner's message there: ASTRA-sim handles the receipt one endpoint
    delay after the receive is posted (etsim paid that delay on arrival, and finished the all-gather's late member,
    or the all-reduce's early one, 10 cycles early under both back ends until it did the same)."""
    traces = []
    for r in range(8):
        b = TraceBuilder()
        c = b.comp("c", duration_micros=100 if r % 2 == 0 else 10)
        done = b.collective(collective, 1 << 20, deps=[c], pg_name=str(1 + r // 2))
        b.comp("after", duration_micros=5, deps=[done])
        traces.append(b.build(rank=r))
    write_workload(traces, tmp_path / "late")
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({str(1 + k): [2 * k, 2 * k + 1] for k in range(4)}))
    system, network = _inputs(tmp_path)
    system.write_text(json.dumps({**SYSTEM, "preferred-dataset-splits": 1}))
    for model, expected in zip(("unaware", "aware"), LATE_MEMBER[collective], strict=True):
        result = run_astra(tmp_path / "late", system, network, comm_groups=groups, model=model)
        assert [int(r.finish_ns) for r in result.ranks] == list(expected) * 4, model


def test_a_subgroup_runs_a_list_of_several_implementations_as_a_ring(tmp_path: Path) -> None:
    """Groups [0..3] and [4..7] of a Ring 4 x Ring 2 all-reduce 1 MiB with `all-reduce-implementation: [direct,
    direct]`: ASTRA-sim's CommunicatorGroup replaces a list of several with Ring for a group smaller than the system
    (518bd51, CommunicatorGroup.cc); etsim ran the list's first, direct (12283 cycles)."""
    prefix, groups = _group_all_reduces(tmp_path, "grp", 1 << 20, 4)
    network = tmp_path / "n42.yml"
    network.write_text("topology: [Ring, Ring]\nnpus_count: [4, 2]\nbandwidth: [50, 25]\nlatency: [500, 700]\n")
    finishes = {}
    for name, implementations in (("direct", ["direct", "direct"]), ("ring", ["ring", "ring"]), ("one", ["direct"])):
        system = tmp_path / f"{name}.json"
        system.write_text(json.dumps({**SYSTEM, "all-reduce-implementation": implementations}))
        with warnings.catch_warnings():  # (direct on the unaware back end beats the links: it says so)
            warnings.simplefilter("ignore", EtsimWarning)
            result = run_astra(prefix, system, network, comm_groups=groups, model="unaware")
        finishes[name] = [int(r.finish_ns) for r in result.ranks]
    assert finishes["direct"] == finishes["ring"] != finishes["one"]  # (a list of one is the group's, as it is)


@pytest.mark.parametrize(("splits", "expected"), [(1, 3088), (4, 12352)])
def test_a_small_collective_of_a_group_is_raised_to_a_byte_per_npu_of_the_system(
    splits: int, expected: int, tmp_path: Path
) -> None:
    """A 4-byte all-reduce of groups [0..3] and [4..7] on a FullyConnected 8 (local-mem-bw 1): ASTRA-sim raises a
    chunk to the system's NPU count (Sys::determine_chunk_size), not the group's: 3088 and 12352 cycles (read from
    its source: etsim gave 3079 and 12316)."""
    prefix, groups = _group_all_reduces(tmp_path, "small", 4 * splits, 4)
    network = tmp_path / "fc8.yml"
    network.write_text("topology: [FullyConnected]\nnpus_count: [8]\nbandwidth: [50]\nlatency: [500]\n")
    system = tmp_path / "sys.json"
    system.write_text(json.dumps({**SYSTEM, "local-mem-bw": 1, "preferred-dataset-splits": splits}))
    result = run_astra(prefix, system, network, comm_groups=groups, model="unaware")
    assert [int(r.finish_ns) for r in result.ranks] == [expected] * 8
