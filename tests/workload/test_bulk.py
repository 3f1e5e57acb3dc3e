"""The fast path (``workload/bulk.py``) against the event path: the same result, bit for bit.

Every case runs twice, with ``fast_path: false`` (every message walked) and with the fast path on for
parts of any size (``MIN_WORK = 0``); the JSON results must be identical except for how the run went
(events scheduled, parts evaluated in bulk, reruns, wall clock). Where the fast path must have been
taken, the tests also check it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import etsim.workload.bulk as bulk
from etsim.chakra import CollectiveType, TraceBuilder, Workload, load_workload, write_workload
from etsim.compat import run_astra
from etsim.errors import ConfigError, DeadlockError
from etsim.network import fully_connected, hypercube, mesh, ring, switch, torus
from etsim.network.topology import Topology
from etsim.producers import collective_workload
from etsim.report.result import Result
from etsim.simulation import simulate
from etsim.system.config import SystemConfig, load_system_config

ROOT = Path(__file__).resolve().parents[2]
AR, AG, RS, A2A = (CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER,
                   CollectiveType.ALL_TO_ALL)  # fmt: skip
MiB = 1 << 20
B, L = 50.0, 500.0
pytestmark = pytest.mark.filterwarnings("ignore::etsim.errors.EtsimWarning")


@pytest.fixture(autouse=True)
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evaluate parts of any size in bulk (by default small ones take the event path, which is cheaper)."""
    monkeypatch.setattr(bulk, "MIN_WORK", 0)


def outcome(result: Result) -> dict[str, Any]:
    """What a run computed, without how it went."""
    data = json.loads(result.to_json())
    for key in ("events", "wall_s", "bulk_parts", "reruns"):
        data["sim"].pop(key, None)
    return data


def both(workload: Workload, system: SystemConfig | None = None, **kwargs: Any) -> Result:
    """Run on the event path and with the fast path; assert identical outcomes; return the fast run."""
    system = system or SystemConfig()
    slow = simulate(workload, system=replace(system, fast_path=False), **kwargs)
    fast = simulate(workload, system=system, **kwargs)
    assert slow.sim["bulk_parts"] == 0
    # Compared as text: 1034 and 1034.0 are equal numbers but different output.
    assert json.dumps(outcome(fast), sort_keys=True) == json.dumps(outcome(slow), sort_keys=True)
    return fast


TOPOLOGIES = {
    "ring8": lambda: ring(8, B, L),
    "switch8": lambda: switch(8, B, L),
    "fully_connected8": lambda: fully_connected(8, B, L),
    "hypercube8": lambda: hypercube(8, B, L),
    "torus2x4": lambda: torus([2, 4], B, L),
    "mesh2x4": lambda: mesh([2, 4], B, L),
}
NATIVE = {
    "ring": (AR, AG, RS, A2A),
    "direct": (AR, AG, RS, A2A),
    "tree": (AR,),
    "hd": (AR, AG, RS),
    "hierarchical": (AR, AG, RS),
}


@pytest.mark.parametrize("model", ["analytical", "link", "ideal", "flow"])
@pytest.mark.parametrize("algorithm", sorted(NATIVE))
def test_every_native_algorithm_every_topology(algorithm: str, model: str) -> None:
    """Each native algorithm, each collective it implements, on 1-D, 2-D, switched and hypercube networks."""
    taken = 0
    for name, make in TOPOLOGIES.items():
        if algorithm == "hierarchical" and name not in ("torus2x4", "mesh2x4"):
            continue
        for collective in NATIVE[algorithm]:
            system = SystemConfig(algorithms={"default": algorithm})
            fast = both(Workload(collective_workload(collective, 1 * MiB, 8)), system, topology=make(), model=model)
            taken += fast.sim["bulk_parts"]
    if algorithm in ("ring", "direct"):  # the natives whose ranks share one graph
        assert taken > 0


@pytest.mark.parametrize("model", ["analytical", "link", "flow"])
@pytest.mark.parametrize(
    "settings_",
    [
        {"chunks": 3},
        {"endpoint_delay": 7.5},
        {"reduction_bandwidth": 100.0, "reduction_passes": 3},
        {"reduction_bandwidth": 64.0, "integer_ns": True, "endpoint_delay": 10.0},
        {"chunks": 2, "active_streams": 1, "stream_delay": 3.0},
        {"synchronise_collectives": False},
    ],
    ids=lambda s: ",".join(s),
)
def test_settings(settings_: dict[str, Any], model: str) -> None:
    """Chunked streams, endpoint and stream delays, reduction costs, integer ns, no synchronisation."""
    for algorithm in ("ring", "direct"):
        for collective in (AR, RS, AG):
            system = SystemConfig(algorithms={"default": algorithm}, **settings_)
            both(Workload(collective_workload(collective, 3 * MiB + 7, 8)), system, topology=ring(8, B, L), model=model)


@pytest.mark.parametrize("model", ["analytical", "link"])
def test_integer_ns_models(model: str) -> None:
    """The models' own whole-ns truncation (ASTRA-sim's convention), per delivery or per hop."""
    options = {"integer_ns": True}
    for algorithm in ("ring", "direct"):
        system = SystemConfig(algorithms={"default": algorithm}, endpoint_delay=10.0)
        both(Workload(collective_workload(AR, 1 * MiB + 3, 8)), system, topology=switch(8, 37.0, 333.0),
             model=model, model_options=options)  # fmt: skip


def test_packets_take_the_event_path_with_the_same_result() -> None:
    fast = both(Workload(collective_workload(AR, 4 * MiB, 8)), topology=ring(8, B, L), model="link",
                model_options={"packet_size": 65536})  # fmt: skip
    assert fast.sim["bulk_parts"] == 0


@pytest.mark.parametrize("model", ["analytical", "link"])
def test_ring_all_reduce_closed_form_in_bulk(model: str) -> None:
    """The α-β closed form 2(p−1)(α + n/(pB)), computed in bulk for all 64 ranks."""
    p, n = 64, 64 * MiB
    fast = both(Workload(collective_workload(AR, n, p)), topology=ring(p, B, L), model=model)
    assert fast.sim["bulk_parts"] == p and fast.sim["reruns"] == 0
    expected = 2 * (p - 1) * (L + n / (p * B))
    assert fast.finish_ns == pytest.approx(expected, rel=1e-12)
    assert fast.network["messages"] == 2 * (p - 1) * p


def test_direct_on_a_switch_in_bulk_two_hops() -> None:
    """Two-hop store-and-forward (uplink, then the switch's downlink) in bulk; ≥ the bandwidth bound."""
    p, n = 32, 32 * MiB
    fast = both(Workload(collective_workload(AR, n, p)), SystemConfig(algorithms={"default": "direct"}),
                topology=switch(p, B, L), model="link")  # fmt: skip
    assert fast.sim["bulk_parts"] == p and fast.sim["reruns"] == 0
    # Each NPU's uplink carries 2(p−1) messages of n/p bytes.
    assert fast.finish_ns >= 2 * (p - 1) * n / p / B


@pytest.mark.parametrize("model", ["analytical", "link"])
@pytest.mark.parametrize("algorithm", ["ring", "direct", "tree"])
def test_shipped_data_parallel_workload(algorithm: str, model: str) -> None:
    """All-reduces overlapping compute (and each other) in the shipped DP training workload."""
    workload = load_workload(ROOT / "workloads" / "dp_8npus_4layers")
    for topology in ("ring8", "switch8"):
        both(workload, SystemConfig(algorithms={"default": algorithm}), topology=TOPOLOGIES[topology](), model=model)


def test_shipped_families_run_in_bulk_when_their_ranks_share_one_graph() -> None:
    """ET families whose ranks run one graph up to relabelled peers (exported rings, MSCCLang's ring) share it and
    are evaluated in bulk, with the event path's result; per-rank graphs (a tree) stay on the event path."""
    workload = Workload(collective_workload(AR, 64 * MiB, 64))
    for algo in ("algorithms/ring_allreduce_64npus", "algorithms/tree_allreduce_64npus"):
        system = SystemConfig(algorithms={"default": str(ROOT / algo)})
        fast = both(workload, system, topology=ring(64, B, L), model="link")
        assert fast.sim["bulk_parts"] == (64 if "ring" in algo else 0), algo


Call = tuple[str, CollectiveType, int, int]


def _groups_workload(p: int, groups: dict[str, list[int]], calls: list[Call]) -> Workload:
    """Each rank: for each (group, collective, bytes, compute µs before it) it belongs to, compute then collect."""
    meta = json.dumps([{"pg_name": k, "ranks": v} for k, v in groups.items()])
    traces = []
    for r in range(p):
        b = TraceBuilder()
        init = b.node(1, "process_group:init")
        b.nodes[-1].inputs.values = str([meta])
        for group, collective, size, micros in calls:
            if r not in groups[group]:
                continue
            c = b.comp(duration_micros=micros + r % 3, deps=[init])
            b.collective(collective, size, deps=[c], pg_name=group)
        traces.append(b.build(rank=r))
    return Workload(traces)


@pytest.mark.parametrize("model", ["analytical", "link"])
def test_two_groups_collectives_share_links(model: str) -> None:
    """Two groups' all-reduces at the same time over shared links, plus compute overlapping them.

    Under ``link`` the second collective's messages meet links the first one claimed: the run is redone
    with the conflicting part on the event path, and the result is still the event path's.
    """
    groups = {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7], "3": [0, 2, 4, 6]}
    calls = [("1", AR, 8 * MiB, 1), ("2", AR, 8 * MiB, 1), ("3", AR, 4 * MiB, 2), ("1", AG, 2 * MiB, 0)]
    workload = _groups_workload(8, groups, calls)
    system = load_system_config({"resources": {"comm_streams": 0}})
    fast = both(workload, system, topology=ring(8, B, L), model=model)
    if model == "analytical":  # no link state: every shared-graph part is evaluated in bulk
        assert fast.sim["bulk_parts"] > 0 and fast.sim["reruns"] == 0


def test_link_statistics_do_not_depend_on_the_order_the_paths_meet_the_pairs(tmp_path: Path) -> None:
    """A direct all-reduce over 9 ranks of a ring, then one in each group of 3 (1 MiB: fractional bytes per
    message). ``analytical`` summed each link's pairs in the order it first met them, which the fast path (a
    vector) and the event path (send order) differ in: a link carried 3728270.2222222225 B on one path and
    3728270.222222223 B on the other, and the warning named a different busiest link."""
    (tmp_path / "groups.json").write_text(json.dumps({"1": [0, 1, 2], "2": [3, 4, 5], "3": [6, 7, 8]}))
    traces = []
    for r in range(9):
        b = TraceBuilder()
        whole = b.collective(AR, MiB)
        b.collective(AR, MiB, deps=[whole], pg_name=str(r // 3 + 1))
        traces.append(b.build(rank=r))
    system = SystemConfig(algorithms={"default": "direct"}, comm_groups=str(tmp_path / "groups.json"))
    fast = both(Workload(traces), system, topology=ring(9, B, 1000.0), model="analytical")
    assert fast.sim["bulk_parts"] > 0


def test_conflict_is_redone_on_the_event_path() -> None:
    """Two all-reduces of one group in flight together on one ring (link model): claims conflict, rerun."""
    builders = [TraceBuilder() for _ in range(8)]
    for b in builders:
        b.collective(AR, 8 * MiB)
        b.collective(AR, 8 * MiB)
    workload = Workload([b.build(rank=r) for r, b in enumerate(builders)])
    system = load_system_config({"resources": {"comm_streams": 0}})
    fast = both(workload, system, topology=ring(8, B, L), model="link")
    assert fast.sim["reruns"] >= 1


@pytest.mark.parametrize("algorithm", ["ring", "hd"])
def test_one_active_stream_with_chained_collectives(algorithm: str) -> None:
    """A rank's queue holds the parts of all its calls: a part that starts when another call's ends is its own
    call's (the fast path once ended it on the other call: KeyError; found by review)."""
    traces = []
    for r in range(8):
        b = TraceBuilder()
        b.collective(AG, 8 * 4096, deps=[b.collective(AG, 8 * 4096)])
        traces.append(b.build(rank=r))
    system = load_system_config({"algorithms": {"default": algorithm}, "active_streams": 1, "chunks": 2})
    fast = both(Workload(traces), system, topology=ring(8, B, L), model="analytical")
    assert fast.sim["bulk_parts"] > 0


def test_deadlock_report_is_the_event_paths() -> None:
    """A collective rank 7 never issues: the same error as on the event path (stuck ranks named)."""
    traces = [t for t in collective_workload(AR, 1 * MiB, 8)]
    traces[7] = TraceBuilder().build(rank=7)
    workload = Workload(traces)
    messages = []
    for fast_path in (False, True):
        with pytest.raises(DeadlockError) as err:
            simulate(workload, topology=ring(8, B, L), model="link", system=SystemConfig(fast_path=fast_path))
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "never by ranks [7]" in messages[0]


TOPOLOGY_CHOICES = st.sampled_from(["ring8", "switch8", "torus2x4", "fully_connected8", "hypercube8"])


@st.composite
def random_runs(draw: st.DrawFn) -> tuple[Workload, SystemConfig, Topology, str]:
    """A random mix: groups, collectives, sizes, compute skew, algorithms, settings, topology, model."""
    groups = {"1": list(range(8)), "2": [0, 1, 2, 3], "3": [4, 5, 6, 7], "4": [1, 3, 5, 7]}
    count = draw(st.integers(1, 4))
    calls = [
        (
            draw(st.sampled_from(sorted(groups))),
            draw(st.sampled_from([AR, AG, RS, A2A])),
            draw(st.integers(1, 64)) * 4096 + draw(st.sampled_from([0, 7])),
            draw(st.integers(0, 3)),
        )
        for _ in range(count)
    ]
    workload = _groups_workload(8, groups, calls)
    system = load_system_config(
        {
            # (halving-doubling and the tree run a graph per rank: the fast path takes their union)
            "algorithms": {
                "default": draw(st.sampled_from(["ring", "direct"])),
                "all_reduce": draw(st.sampled_from(["ring", "direct", "hd", "tree"])),
                "all_gather": draw(st.sampled_from(["ring", "hd"])),
                "reduce_scatter": draw(st.sampled_from(["direct", "hd"])),
            },
            "chunks": draw(st.sampled_from([1, 1, 2])),
            "endpoint_delay": draw(st.sampled_from(["0 ns", "0 ns", "2.5 ns"])),
            "reduction_bandwidth": draw(st.sampled_from([None, "80 GB/s"])),
            "resources": {"comm_streams": draw(st.sampled_from([0, 1]))},
        }
    )
    return workload, system, TOPOLOGIES[draw(TOPOLOGY_CHOICES)](), draw(st.sampled_from(["analytical", "link", "flow"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_runs())
def test_random_workloads_and_topologies(run: tuple[Workload, SystemConfig, Topology, str]) -> None:
    workload, system, topology, model = run
    both(workload, system, topology=topology, model=model)


@pytest.mark.parametrize("model", ["unaware", "aware"])
@pytest.mark.parametrize(
    ("topology", "npus", "algos", "splits"),
    [
        (["Ring"], [8], ["ring"], 1),
        (["Ring"], [8], ["direct"], 2),
        (["Switch"], [8], ["ring"], 4),
        (["Ring", "Ring"], [2, 4], ["ring", "ring"], 2),
        (["Ring", "Switch"], [2, 4], ["ring", "direct"], 1),
    ],
)
def test_astra_mode(tmp_path: Path, topology: list[str], npus: list[int], algos: list[str], splits: int,
                    model: str) -> None:  # fmt: skip
    """``etsim astra``: ASTRA-sim's conventions give the same numbers with and without the fast path."""
    if model == "aware" and len(npus) > 1:
        return  # ASTRA-sim's aware back end is 1-D only (refused)
    n = 1
    for k in npus:
        n *= k
    write_workload(collective_workload(AR, 1 * MiB, n), tmp_path / "wl")
    system = {
        "scheduling-policy": "LIFO",
        "collective-optimization": "localBWAware",
        "preferred-dataset-splits": splits,
        "active-chunks-per-dimension": 1,
        "endpoint-delay": 10,
        "local-mem-bw": 1600,
        **{f"{c}-implementation": algos for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
    }
    (tmp_path / "sys.json").write_text(json.dumps(system))
    (tmp_path / "net.yml").write_text(
        f"topology: {topology}\nnpus_count: {npus}\nbandwidth: {[50.0] * len(npus)}\nlatency: {[500.0] * len(npus)}\n"
    )
    args = (tmp_path / "wl", tmp_path / "sys.json", tmp_path / "net.yml")
    slow = run_astra(*args, model=model, fast_path=False)
    fast = run_astra(*args, model=model)
    assert json.dumps(outcome(fast), sort_keys=True) == json.dumps(outcome(slow), sort_keys=True)


def test_cli_no_fast_path_prints_the_same_result(tmp_path: Path) -> None:
    """`--no-fast-path` (and `fast_path: false` in a system file) walk every message; same JSON."""
    (tmp_path / "sys.yaml").write_text("fast_path: false\n")
    outputs = []
    for extra in ([], ["--no-fast-path"], ["--system", str(tmp_path / "sys.yaml")]):
        cmd = [sys.executable, "-m", "etsim", "workloads/allreduce_64npus_64MiB.et", "--algo", "ring",
               "--model", "analytical", "--json", "-", *extra]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
        data = json.loads(out.stdout)
        outputs.append((data.pop("sim"), data))
    assert outputs[0][0]["bulk_parts"] == 64
    assert outputs[1][0]["bulk_parts"] == 0 and outputs[2][0]["bulk_parts"] == 0
    assert outputs[0][1] == outputs[1][1] == outputs[2][1]


def test_fast_path_setting_must_be_a_boolean(tmp_path: Path) -> None:
    (tmp_path / "sys.yaml").write_text("fast_path: sometimes\n")
    with pytest.raises(ConfigError, match="fast_path: expected true or false"):
        load_system_config(tmp_path / "sys.yaml")
