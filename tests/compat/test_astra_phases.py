"""ASTRA-sim's native collectives phase by phase: double binary tree, multi-dimensional lists, queues.

Standard parameters unless a test says otherwise: 50 GB/s (B = 50·2^30/1e9 = 53.6870912 B/ns),
L = 500 ns, endpoint delay E = 10, local-mem-bw 1600 (P(m) = 3·floor(m/1600)), congestion-unaware,
one queue per dimension, splits 1, active chunks 1. ``net(m) = floor(h·L + m/B)``. Values used below:

==========  ==========  ======  ======  ======  =====
m (bytes)   m/B         net·1   net·2   net·4   P(m)
==========  ==========  ======  ======  ======  =====
1048576     19531.25    20031   20531   21531   1965
524288      9765.625    10265                   981
262144      4882.8125   5382    5882            489
131072      2441.40625  2941    3441    4441    243
65536       1220.703    1720                    120
32768       610.352     1110                    60
16384       305.176     805                     30
==========  ==========  ======  ======  ======  =====

Ring closed forms (verified against the binary, ``shared/reference/astra-sim.md`` §7):
``T_AR(n,S) = E + 2(n−1)·net(S/n) + (n−1)(2E + P(S/n))``, ``T_RS(n,S) = E + (n−1)(net(S/n) + E + P(S/n))``,
``T_AG(n,s) = E + (n−1)(net(s) + E)``, ``T_A2A(n,S) = E + n(n−1)/2·(net(S/n) + E)``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.chakra import CollectiveType as C
from etsim.compat import run_astra
from etsim.compat.collectives import tree_roles
from etsim.errors import ConfigError
from etsim.producers import collective_workload

from .conftest import astra_inputs

# The unaware back end is contention-free by design; its warnings are tested in test_astra.py.
pytestmark = pytest.mark.filterwarnings("ignore:network model 'analytical' ignores contention")
MiB = 1 << 20


def run(
    tmp_path: Path,
    collective: C,
    size: int,
    topology: list[str],
    npus: list[int],
    algo: str | list[str],
    *,
    optimization: str = "localBWAware",
    splits: int = 1,
    active: int = 1,
    queues: int = 1,
    local_mem_bw: float = 1600,
) -> list[int]:
    """Per-rank finish times of one collective under etsim astra."""
    extra = {"preferred-dataset-splits": splits, "active-chunks-per-dimension": active}
    inputs = astra_inputs(
        tmp_path,
        collective,
        size,
        topology,
        npus,
        algo=algo,
        optimization=optimization,
        local_mem_bw=local_mem_bw,
        **extra,
    )
    result = run_astra(*inputs, queues_per_dim=queues)
    return [int(r.finish_ns) for r in result.ranks]


# -- 1. doubleBinaryTree ---------------------------------------------------------------------------------------


def test_tree_shapes() -> None:
    """A complete tree of n−1 nodes numbered in order hangs under a one-child root: the last position
    (DBMAX) or position 0 (DBMIN, every in-order position shifted by one)."""
    parent, children = tree_roles(8, low_root=False)
    assert parent == [1, 3, 1, 7, 5, 3, 5, -1]
    assert children[7] == [3] and children[3] == [1, 5] and children[1] == [0, 2] and children[5] == [4, 6]
    parent, children = tree_roles(8, low_root=True)
    assert parent == [-1, 2, 4, 2, 0, 6, 4, 6]
    assert children[0] == [4] and children[4] == [2, 6]
    assert tree_roles(2, low_root=False)[0] == [1, -1] and tree_roles(2, low_root=True)[0] == [-1, 0]


def test_dbt_all_reduce_fully_connected_8_matches_the_binary(tmp_path: Path) -> None:
    """FullyConnected-8, 1 MiB (ASTRA-sim prints 130,081 on sys[0]).

    The whole chunk S travels up DBMAX and back down; N = net(S) = 20031, Q = E + P(S) = 1975.
    Leaves 0,2,4,6 pay E and send up at 10 (arrive 20041). Nodes 1 and 5 reduce both children,
    each receipt a processed bundle: up at 20041 + 1975 = 22016 (arrive 42047). Node 3 up at
    44022 (arrives at root 7 at 64053). Root 7: 64053 + 1975 = 66028, sends down and ends.
    Node 3: receives 86059, + Q = 88034, ends while its down-sends travel. Nodes 1, 5: 108065 + Q =
    110040. Leaves: 130071 + E = 130081 = 6·N + 5·P + 7·E. The root finishes first.
    """
    got = run(tmp_path, C.ALL_REDUCE, MiB, ["FullyConnected"], [8], "doubleBinaryTree")
    assert got == [130081, 110040, 130081, 88034, 130081, 110040, 130081, 66028]


@pytest.mark.parametrize(
    ("topology", "npus", "expected"),
    [
        # FC-4: leaves 2E + 4N + 3Q − ... = 86069; node 1: E + 3(N+Q) = 66028; root 3: E + 2(N+Q) = 44022.
        ("FullyConnected", 4, [86069, 66028, 86069, 44022]),
        # FC-2: leaf 0: E + N + Q + N + E = 42057; root 1: E + N + Q = 22016.
        ("FullyConnected", 2, [42057, 22016]),
        # Ring-8: edges 0–1, 2–1, 4–5, 6–5 one hop, 1–3, 5–3 two hops (net 20531), 3–7 four (21531).
        ("Ring", 8, [134081, 114040, 134081, 91534, 134081, 114040, 134081, 68028]),
        # Ring-4: edge 1–3 is two hops: root 3 at 10 + 20031 + 1975 + 20531 + 1975 = 44522.
        ("Ring", 4, [87069, 67028, 87069, 44522]),
        # Switch-8: every edge two hops (net 20531).
        ("Switch", 8, [133081, 112540, 133081, 90034, 133081, 112540, 133081, 67528]),
    ],
)
def test_dbt_all_reduce_per_topology(tmp_path: Path, topology: str, npus: int, expected: list[int]) -> None:
    assert run(tmp_path, C.ALL_REDUCE, MiB, [topology], [npus], "doubleBinaryTree") == expected


def test_dbt_streams_alternate_trees_and_leave_ranks_out_of_step(tmp_path: Path) -> None:
    """FullyConnected-4, 1 MiB, splits 2 (S = 512 KiB, N = 10265, P = 981, Q = 991).

    Stream 0 on DBMAX: root 3 ends at 10 + 2·(N+Q) = 22522, node 1 at 10 + 3·11256 = 33778, leaves 0, 2
    at 20 + 4N + 3Q = 44053. Stream 1 on DBMIN (root 0, node 2 with children 1, 3) starts on each rank
    when stream 0 ended there: leaf 3 sends at 22532, leaf 1 at 33788 (arrives 44053); node 2 starts at
    44053, so both receipts complete then, up at 45044; root 0 receives at 55309 and ends at 56300;
    node 2 at 66565 + Q = 67556; leaves 1, 3 at 67556 + N + E = 77831.
    """
    assert run(tmp_path, C.ALL_REDUCE, MiB, ["FullyConnected"], [4], "doubleBinaryTree", splits=2) == [
        56300,
        77831,
        67556,
        77831,
    ]
    sub = tmp_path / "eight"
    sub.mkdir()
    assert run(sub, C.ALL_REDUCE, MiB, ["FullyConnected"], [8], "doubleBinaryTree", splits=2) == [
        90068, 122855, 112580, 122855, 101324, 122855, 112580, 122855,
    ]  # fmt: skip


@pytest.mark.parametrize("collective", [C.REDUCE_SCATTER, C.ALL_TO_ALL])
def test_dbt_always_performs_an_all_reduce(tmp_path: Path, collective: C) -> None:
    """Reduce-scatter and all-to-all with doubleBinaryTree are the all-reduce of the chunk (D1's numbers)."""
    got = run(tmp_path, collective, MiB, ["FullyConnected"], [8], "doubleBinaryTree")
    assert got == [130081, 110040, 130081, 88034, 130081, 110040, 130081, 66028]


def test_dbt_all_gather_reduces_the_shard(tmp_path: Path) -> None:
    """All-gather of a 128 KiB shard = an all-reduce of 128 KiB: N = 2941, Q = 10 + 243 = 253; leaves
    6·2941 + 5·243 + 7·10 = 18931, nodes 1, 5: 15980, node 3: 12786, root 7: 9592."""
    got = run(tmp_path, C.ALL_GATHER, 128 * 1024, ["FullyConnected"], [8], "doubleBinaryTree")
    assert got == [18931, 15980, 18931, 12786, 18931, 15980, 18931, 9592]


def test_dbt_needs_a_power_of_two(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a power-of-two dimension size, not 6"):
        run(tmp_path, C.ALL_REDUCE, MiB, ["FullyConnected"], [6], "doubleBinaryTree")


# -- 2. multi-dimensional lists ---------------------------------------------------------------------------------


def test_a_list_shorter_than_the_dimensions_is_refused(tmp_path: Path) -> None:
    # ASTRA-sim indexes its list by dimension: one name for two dimensions left the second out (a 4 x 8 all-reduce
    # that never combined across the rings, at a third of the time, exit 0).
    with pytest.raises(ConfigError, match=r"names 1 for 2 dimensions \(4 x 8\): give one per dimension"):
        run(tmp_path, C.ALL_REDUCE, MiB, ["Ring", "Switch"], [4, 8], ["ring"])


@pytest.mark.parametrize(
    ("optimization", "expected"),
    [
        # baseline: AR on each dimension: 2·T_AR(8, 1 MiB) = 2·(10 + 14·2941 + 7·(20 + 243)) = 2·43025.
        ("baseline", 86050),
        # localBWAware: T_RS(8, 1 MiB) = 10 + 7·(2941 + 10 + 243) = 22368; T_AR(8, 128 KiB) =
        # 10 + 14·805 + 7·(20 + 30) = 11630; T_AG(8, 128 KiB) = 10 + 7·(2941 + 10) = 20667; sum 54665.
        ("localBWAware", 54665),
    ],
)
def test_ring_ring_one_stream(tmp_path: Path, optimization: str, expected: int) -> None:
    got = run(tmp_path, C.ALL_REDUCE, MiB, ["Ring", "Ring"], [8, 8], ["ring", "ring"], optimization=optimization)
    assert set(got) == {expected}


@pytest.mark.parametrize(
    ("optimization", "expected"),
    [
        # RS direct on 1 MiB over 4 = 2E + P(256 KiB) + net(256 KiB) = 20 + 489 + 5382 = 5891; AR direct on
        # dimension 1 over 256 KiB (m = 64 KiB): receipts 10 + 1720 = 1730, reductions at 1730 + 10 + 120 =
        # 1860, phase 2 leaves then: end 1860 + 1720 + 10 = 3590; AG direct = 2E + net(256 KiB) = 5402.
        ("localBWAware", 14883),
        # AR direct on 1 MiB per dimension: receipts 5392, reductions 5891, end 5891 + 5382 + 10 = 11283, twice.
        ("baseline", 22566),
    ],
)
def test_direct_direct(tmp_path: Path, optimization: str, expected: int) -> None:
    got = run(
        tmp_path, C.ALL_REDUCE, MiB, ["FullyConnected"] * 2, [4, 4], ["direct", "direct"], optimization=optimization
    )
    assert set(got) == {expected}


@pytest.mark.parametrize(
    ("optimization", "expected"),
    [
        # T_RS(2, 1 MiB) = 10 + 10265 + 10 + 981 = 11266; RS direct on Ring-4 (m = 128 KiB, worst hop 2) =
        # 20 + 243 + 3441 = 3704; T_AR(2, 128 KiB) = 10 + 2·1720 + 20 + 120 = 3590; AG direct = 20 + 3441 =
        # 3461; T_AG(2, 512 KiB) = 10 + 10265 + 10 = 10285: sum 32306.
        ("localBWAware", 32306),
        # T_AR(2, 1 MiB) = 10 + 2·10265 + 20 + 981 = 21541 on dimensions 0 and 2; AR direct on Ring-4 over
        # 1 MiB: receipts {5392, 5392, 5892}, reductions +499 = {5891, 5891, 6391}; the first reduction
        # after the last receipt is the third, so every phase-2 packet leaves at 6391: end 6391 + 5882 + 10
        # = 12283. Total 21541 + 12283 + 21541 = 55365.
        ("baseline", 55365),
    ],
)
def test_ring_direct_ring(tmp_path: Path, optimization: str, expected: int) -> None:
    got = run(
        tmp_path, C.ALL_REDUCE, MiB, ["Ring"] * 3, [2, 4, 2], ["ring", "direct", "ring"], optimization=optimization
    )
    assert max(got) == expected


def test_halving_doubling_per_dimension(tmp_path: Path) -> None:
    """[halvingDoubling, halvingDoubling] on 4×4 FullyConnected = the two 1-D closed forms in turn (baseline)."""
    one = run(tmp_path, C.ALL_REDUCE, MiB, ["FullyConnected"], [4], "halvingDoubling")
    sub = tmp_path / "two"
    sub.mkdir()
    two = run(sub, C.ALL_REDUCE, MiB, ["FullyConnected"] * 2, [4, 4], ["halvingDoubling"] * 2, optimization="baseline")
    assert set(two) == {2 * max(one)}


def test_ring_ring_other_collectives(tmp_path: Path) -> None:
    """4×4 Ring: A2A is one ring A2A per dimension on the full chunk: 2·T_A2A(4, 1 MiB) = 2·(10 + 6·5392);
    RS: T_RS(4, 1 MiB) + T_RS(4, 256 KiB) = 17653 + 5560; AG of a 64 KiB shard, dimension 1 first:
    T_AG(4, 64 KiB) + T_AG(4, 256 KiB) = 5200 + 16186."""
    assert set(run(tmp_path, C.ALL_TO_ALL, MiB, ["Ring"] * 2, [4, 4], ["ring", "ring"])) == {64724}
    assert set(run(tmp_path, C.REDUCE_SCATTER, MiB, ["Ring"] * 2, [4, 4], ["ring", "ring"])) == {23213}
    assert set(run(tmp_path, C.ALL_GATHER, 64 * 1024, ["Ring"] * 2, [4, 4], ["ring", "ring"])) == {21386}


def test_tree_in_a_multi_dimensional_list(tmp_path: Path) -> None:
    """4×4 FullyConnected [ring, doubleBinaryTree] localBWAware: RS ring on 1 MiB (17653), a tree
    all-reduce of 256 KiB on dimension 1 (N = 5382, Q = 499: leaves 20 + 4N + 3Q = 23045, node 1:
    10 + 3·5881, root 3: 10 + 2·5881) and AG ring back (16186): 56884, 51492 and 45611 by x1."""
    got = run(tmp_path, C.ALL_REDUCE, MiB, ["FullyConnected"] * 2, [4, 4], ["ring", "doubleBinaryTree"])
    by_x1 = {r // 4: t for r, t in enumerate(got)}
    assert by_x1 == {0: 56884, 1: 51492, 2: 56884, 3: 45611}


# -- 3. per-dimension queues: streams pipeline across dimensions ----------------------------------------------


def test_splits_pipeline_across_dimensions_measured(tmp_path: Path) -> None:
    """8×8 Ring-Ring, 1 MiB, splits 4 (chunk 256 KiB), active 1 (both measured with the binary).

    T_AR(8, 256 KiB) = 10 + 14·1110 + 7·(20 + 60) = 16110. Baseline: dimension 0 runs the four ARs back
    to back over [0, 64440]; dimension 1 runs stream s over [16110(s+1), 16110(s+2)]: 5·16110 = 80550.
    localBWAware: T_RS(8, 256 KiB) = 8270, T_AR(8, 32 KiB) = 10 + 14·576 + 7·26 = 8256, T_AG(8, 32 KiB)
    = 7850. Queue 0 runs RS0..RS3 over [0, 33080], the dimension-1 ARs end at 16526, 24796, 33066, 41336,
    and the AGs then run back to back in queue 0 from 33080: 33080 + 4·7850 = 64480 = 4·(8270 + 7850).
    """
    base = run(tmp_path, C.ALL_REDUCE, MiB, ["Ring"] * 2, [8, 8], ["ring", "ring"], optimization="baseline", splits=4)
    assert set(base) == {80550}
    sub = tmp_path / "lbw"
    sub.mkdir()
    assert set(run(sub, C.ALL_REDUCE, MiB, ["Ring"] * 2, [8, 8], ["ring", "ring"], splits=4)) == {64480}


@pytest.mark.parametrize(
    ("npus", "optimization", "splits", "active", "queues", "expected"),
    [
        # 4×4 baseline: T_AR(4, 256 KiB) = 10 + 6·1720 + 3·(20 + 120) = 10750; 5 of them in the pipeline.
        ([4, 4], "baseline", 4, 1, 1, 53750),
        # localBWAware: 4·(T_RS(4, 256 KiB) + T_AG(4, 64 KiB)) = 4·(5560 + 5200).
        ([4, 4], "localBWAware", 4, 1, 1, 43040),
        # baseline, two streams per queue: 3·10750.
        ([4, 4], "baseline", 4, 2, 1, 32250),
        # 8×8 baseline, two queues per dimension (one stream each), streams alternate: 3·16110.
        ([8, 8], "baseline", 4, 1, 2, 48330),
        # 8×8 localBWAware, two queues: RS in queue 0, AG in queue 1: AGs end at 24376 .. 49186.
        ([8, 8], "localBWAware", 4, 1, 2, 49186),
        # 8×8 localBWAware, two streams at once: RS pairs over [0, 8270], [8270, 16540]; ARs end at
        # 16526 and 24796; AG pairs over [16540, 24390] and [24796, 32646].
        ([8, 8], "localBWAware", 4, 2, 1, 32646),
        # 1-D Ring-8, two queues: baseline alternates them (2·16110); localBWAware uses the first half
        # only (4·16110); with active 3 every queue runs ceil(3/2) = 2 streams: all four at once.
        ([8], "baseline", 4, 1, 2, 32220),
        ([8], "localBWAware", 4, 1, 2, 64440),
        ([8], "baseline", 4, 3, 2, 16110),
    ],
)
def test_queues(
    tmp_path: Path, npus: list[int], optimization: str, splits: int, active: int, queues: int, expected: int
) -> None:
    got = run(tmp_path, C.ALL_REDUCE, MiB, ["Ring"] * len(npus), npus, ["ring"] * len(npus),
              optimization=optimization, splits=splits, active=active, queues=queues)  # fmt: skip
    assert set(got) == {expected}


def test_every_stream_carries_a_whole_chunk(tmp_path: Path) -> None:
    """1,000,000 B in 3 splits: 4 streams of 333,333 B each (the last one too); T_AR(8, 333333):
    m = 41666, net = 1276, P = 78: 10 + 14·1276 + 7·98 = 18560; four in a row: 74240."""
    assert set(run(tmp_path, C.ALL_REDUCE, 1_000_000, ["Ring"], [8], "ring", splits=3)) == {74240}


def test_all_to_all_with_splits(tmp_path: Path) -> None:
    """4×4 Ring A2A, splits 2: T_A2A(4, 512 KiB) = 10 + 6·(2941 + 10) = 17716, three in the pipeline."""
    assert set(run(tmp_path, C.ALL_TO_ALL, MiB, ["Ring"] * 2, [4, 4], ["ring", "ring"], splits=2)) == {53148}


# -- 4. direct all-reduce: phase-2 packets leave as reductions finish ------------------------------------------


@pytest.mark.parametrize(
    ("topology", "npus", "expected"),
    [("Ring", 8, 9155), ("FullyConnected", 8, 6155), ("Switch", 8, 7155), ("Ring", 16, 10590)],
)
def test_direct_all_reduce_closed_form(tmp_path: Path, topology: str, npus: int, expected: int) -> None:
    """The §7 formula: receipts r = E + net(S/n, h(k)), reductions g = r + E + P(S/n), k* the first
    reduction at or after the last receipt, packet j leaves at g_max(j, k*), end = max_j(s_j + net_j) + E."""
    assert max(run(tmp_path, C.ALL_REDUCE, MiB, [topology], [npus], "direct")) == expected


def test_direct_all_reduce_releases_far_packets_early(tmp_path: Path) -> None:
    """Ring-8, 1 MiB, local-mem-bw 100 (P(128 KiB) = 3·1310 = 3930). Receipts sorted 2951, 2951, 3451,
    3451, 3951, 3951, 4451; reductions g = r + 3940: 6891, 6891, 7391, 7391, 7891, 7891, 8391, all after
    the last receipt, so k* = 1 and packet j leaves at g_j: the 4-hop packet leaves at the 4th reduction,
    7391, and lands at 7391 + 4441 = 11832 (as does 7891 + 3941); end 11832 + 10 = 11842. Waiting for
    every reduction would give 8391 + 4441 + 10 = 12842."""
    assert max(run(tmp_path, C.ALL_REDUCE, MiB, ["Ring"], [8], "direct", local_mem_bw=100)) == 11842


# -- 5. refused as ASTRA-sim refuses -------------------------------------------------------------------------------


def test_halving_doubling_refuses_all_to_all(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="halvingDoubling does not implement all-to-all"):
        run(tmp_path, C.ALL_TO_ALL, MiB, ["FullyConnected"], [8], "halvingDoubling")


def test_direct_all_reduce_without_an_endpoint_delay_completes() -> None:
    """`etsim run --algo astra:…` with no phase delay: phase 2 of direct waits for every reduction.

    With a zero endpoint delay every reduction can finish by the last receipt, so no reduction follows the
    gate's arming; the gate is dropped and phase 2 leaves once all reductions are done (this deadlocked).
    """
    from etsim.chakra import Workload
    from etsim.network import mesh
    from etsim.simulation import simulate
    from etsim.system.config import SystemConfig

    workload = Workload(collective_workload(C.ALL_REDUCE, MiB, 16))
    results = [
        simulate(workload, topology=mesh([4, 4], 50.0, 500.0), system=SystemConfig(
            algorithms={"all_reduce": "astra:ring,direct;queues=2"}, chunks=4, fast_path=fast))
        for fast in (False, True)
    ]  # fmt: skip
    assert len(results[0].collectives) == 16
    assert results[0].finish_ns == results[1].finish_ns > 0
