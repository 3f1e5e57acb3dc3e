"""Selection tables: parsing, first-match semantics, group-consistent choice, per-call reporting, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from etsim.chakra import CollectiveType, TraceBuilder, Workload
from etsim.errors import ConfigError, EtsimWarning
from etsim.network import load_network, ring
from etsim.producers import collective_workload
from etsim.simulation import simulate
from etsim.system.collective import System
from etsim.system.config import SystemConfig, load_system_config
from etsim.system.groups import CommGroups
from etsim.system.rules import CallInfo
from etsim.system.selection import AlgorithmSelection, NoRuleError

B, L = 50.0, 500.0
AR, A2A, AG = CollectiveType.ALL_REDUCE, CollectiveType.ALL_TO_ALL, CollectiveType.ALL_GATHER
KiB = 1024


def table(*rules: dict, **extra: object) -> SystemConfig:  # type: ignore[type-arg]
    return load_system_config({"algorithms": list(rules), **extra})


def call(
    collective: str = "all_reduce", size: int = 1000, n: int = 8, pg: str = "0", dim: int | None = None
) -> CallInfo:
    return CallInfo(collective, size, n, pg, dim)


def test_first_matching_rule_wins() -> None:
    sel = AlgorithmSelection(
        table(
            {"collective": "all_reduce", "max_bytes": "256 KiB", "algorithm": "tree"},
            {"collective": "all_reduce", "min_bytes": "256 KiB", "algorithm": "direct"},
            {"collective": "all_to_all", "algorithm": "direct"},
            {"default": "ring"},
        )
    )
    assert sel.choose(AR, call(size=256 * KiB)).label == "tree"  # both bounds inclusive: the first rule takes it
    assert sel.choose(AR, call(size=256 * KiB)).rule == "algorithms[0]"
    assert sel.choose(AR, call(size=256 * KiB + 1)).label == "direct"
    assert sel.choose(AR, call(size=256 * KiB + 1)).rule == "algorithms[1]"
    assert sel.choose(A2A, call("all_to_all")).rule == "algorithms[2]"
    choice = sel.choose(AG, call("all_gather"))
    assert (choice.rule, choice.label) == ("algorithms[3]", "ring")


def test_every_key_matches() -> None:
    sel = AlgorithmSelection(
        table(
            {"group_size": [2, 4], "algorithm": "direct"},
            {"group_size": "5..6", "algorithm": "tree"},
            {"pg_name": ["7", "9"], "algorithm": "hd"},
            {"dimension": 1, "algorithm": "halving_doubling"},
            {"default": "ring"},
        )
    )
    assert sel.choose(AR, call(n=4)).label == "direct"
    assert sel.choose(AR, call(n=3)).label == "ring"
    assert sel.choose(AR, call(n=6)).label == "tree"
    assert sel.choose(AR, call(n=8, pg="9")).label == "hd"
    assert sel.choose(AR, call(n=8, dim=1)).label == "halving_doubling"
    assert sel.choose(AR, call(n=8, dim=0)).label == "ring"


def test_mapping_form_still_valid() -> None:
    sel = AlgorithmSelection(load_system_config({"algorithms": {"all_reduce": "tree", "default": "direct"}}))
    assert sel.choose(AR).label == "tree"
    assert sel.choose(AR).rule == "algorithms.all_reduce"
    assert sel.choose(A2A).label == "direct"
    assert sel.choose(A2A).rule == "algorithms.default"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"collective": "all_reduce", "algorithm": "ring", "bytes": 5}, r"algorithms\[0\]: unknown key 'bytes'"),
        ({"collective": "allreduce_x", "algorithm": "ring"}, r"algorithms\[0\]\.collective: unknown collective"),
        ({"min_bytes": "1 MiB", "max_bytes": "1 KiB", "algorithm": "ring"}, r"min_bytes 1048576 is greater than max"),
        ({"collective": "all_reduce"}, r"algorithms\[0\]: expected 'algorithm: ALGO'"),
        ({"default": "ring", "collective": "all_reduce"}, r"a default rule has no other keys"),
        ({"group_size": "8..2", "algorithm": "ring"}, r"group_size: range '8..2' is empty"),
        ({"group_size": 0, "algorithm": "ring"}, r"group_size: a group size must be >= 1"),
        ({"max_bytes": "1 parsec", "algorithm": "ring"}, r"max_bytes: unknown size unit"),
        ({"dimension": -1, "algorithm": "ring"}, r"dimension: expected a dimension index"),
        ("ring", r"algorithms\[0\]: expected a rule"),
    ],
)
def test_bad_rules_name_file_and_key(tmp_path: Path, rule: object, message: str) -> None:
    path = tmp_path / "sys.yaml"
    path.write_text(json.dumps({"algorithms": [rule]}))
    with pytest.raises(ConfigError, match=message) as info:
        load_system_config(path)
    assert str(path) in str(info.value)


def test_a_rule_whose_algorithm_lacks_its_collective_is_an_error() -> None:
    config = table({"collective": "all_to_all", "algorithm": "tree"}, {"default": "ring"})
    with pytest.raises(ConfigError, match=r"algorithms\[0\]: algorithm 'tree' does not implement all_to_all"):
        AlgorithmSelection(config)


def test_rules_that_can_never_fire_are_named() -> None:
    config = table(
        {"collective": "all_reduce", "max_bytes": "1 MiB", "algorithm": "tree"},
        {"collective": "all_reduce", "min_bytes": 1048577, "algorithm": "ring"},
        {"collective": "all_reduce", "group_size": 8, "min_bytes": "4 MiB", "algorithm": "direct"},
        {"collective": "all_to_all", "algorithm": "direct"},
        {"default": "ring"},
        {"collective": "all_gather", "algorithm": "direct"},
    )
    with pytest.warns(EtsimWarning) as caught:
        AlgorithmSelection(config)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert "algorithms[2]" in messages[0] and "can never fire" in messages[0]
    assert "algorithms[0]" in messages[0] and "algorithms[1]" in messages[0]
    assert messages[1].startswith("system config: algorithms[5] {collective: all_gather")
    assert "algorithms[4] {default: ring}" in messages[1]


def test_no_matching_rule_and_no_default_is_an_error_before_the_run() -> None:
    config = table({"collective": "all_reduce", "max_bytes": "1 KiB", "algorithm": "tree"})
    workload = Workload(collective_workload(AR, 1 << 20, 4))
    with pytest.raises(NoRuleError, match=r"rank 0: node 0.*all_reduce of 1 MiB \(1048576 bytes\) over group '0' "):
        simulate(workload, topology=ring(4, B, L), system=config)


def test_the_serving_rule_is_reported_per_call(tmp_path: Path) -> None:
    builders = [TraceBuilder() for _ in range(4)]
    for b in builders:
        first = b.collective(AR, 4 * KiB)
        b.collective(AR, 4 << 20, deps=[first])
    config = table(
        {"collective": "all_reduce", "max_bytes": "64 KiB", "algorithm": "direct"},
        {"default": "ring"},
    )
    result = simulate(
        Workload([b.build(rank=r) for r, b in enumerate(builders)]), topology=ring(4, B, L), system=config
    )
    by_node = {(c.rank, c.node_id): (c.algorithm, c.rule) for c in result.collectives}
    assert by_node == {
        **{(r, 0): ("direct", "algorithms[0]") for r in range(4)},
        **{(r, 1): ("ring", "algorithms[1]") for r in range(4)},
    }
    doc = json.loads(result.to_json())
    assert {c["rule"] for c in doc["collectives"]} == {"algorithms[0]", "algorithms[1]"}
    plain = simulate(Workload(collective_workload(AR, 4 * KiB, 4)), topology=ring(4, B, L))
    assert {c.rule for c in plain.collectives} == {"built-in default"}


def test_every_rank_of_a_group_computes_the_same_choice() -> None:
    """Each rank, asking alone with what it knows, gets the rule the group was served by."""
    config = table(
        {"collective": "all_reduce", "pg_name": "1", "algorithm": "direct"},
        {"collective": "all_reduce", "group_size": 4, "max_bytes": "8 KiB", "algorithm": "tree"},
        {"default": "ring"},
    )
    groups = {"1": (0, 2, 4, 6), "2": (1, 3, 5, 7)}
    meta = json.dumps([{"pg_name": k, "ranks": list(v)} for k, v in groups.items()])
    builders = [TraceBuilder() for _ in range(8)]
    for r, b in enumerate(builders):
        m = b.node(1, "process_group:init")
        b.nodes[-1].inputs.values = str([meta])
        pg = "1" if r % 2 == 0 else "2"
        b.collective(AR, 4 * KiB, deps=[m], pg_name=pg)
    topo = ring(8, B, L)
    result = simulate(Workload([b.build(rank=r) for r, b in enumerate(builders)]), topology=topo, system=config)
    served = {tuple(c.group): set() for c in result.collectives}  # type: ignore[var-annotated]
    for c in result.collectives:
        served[tuple(c.group)].add((c.algorithm, c.rule))
    assert served == {groups["1"]: {("direct", "algorithms[0]")}, groups["2"]: {("tree", "algorithms[1]")}}
    for name, members in groups.items():
        choices = set()
        for _rank in members:
            system = System(config, CommGroups(8, groups), topology=topo)  # a fresh view per rank
            choices.add(system.choose(AR, 4 * KiB, members, name).rule)
        assert len(choices) == 1


def test_dimension_a_group_spans(repo: Path) -> None:
    topo = load_network(repo / "topologies" / "ring4_switch4.yaml").topology
    system = System(SystemConfig(), CommGroups(16), topology=topo)
    assert system.group_dimension((0, 1, 2, 3)) == 0
    assert system.group_dimension((1, 5, 9, 13)) == 1
    assert system.group_dimension(tuple(range(16))) is None
    config = table({"dimension": 1, "algorithm": "direct"}, {"default": "ring"})
    assert System(config, CommGroups(16), topology=topo).choose(AR, 100, (1, 5, 9, 13), "x").label == "direct"
    assert System(config, CommGroups(16), topology=topo).choose(AR, 100, (0, 1, 2, 3), "x").label == "ring"


def test_msccl_windows_become_rule_bounds(corpus: Path, tmp_path: Path) -> None:
    """An XML given without bounds serves only its minBytes..maxBytes window and its ngpus, as a runtime would."""
    from etsim.system.rules import SelectionRule
    from etsim.tuning.export import msccl_files

    src = tmp_path / "ring.xml"
    shutil.copy(corpus / "msccl" / "generated" / "allreduce_ring_n8_c1_i1_LL128.xml", src)
    rule = SelectionRule(str(src), "r", "r", collective="all_reduce", min_bytes=64 * KiB, max_bytes=1 << 20)
    (xml,), _ = msccl_files([rule], tmp_path / "out")
    config = table({"collective": "all_reduce", "algorithm": str(xml)}, {"default": "direct"})
    sel = AlgorithmSelection(config)
    assert sel.rules[0].min_bytes == 64 * KiB and sel.rules[0].max_bytes == 1 << 20
    assert sel.rules[0].group_sizes == ((8, 8),)
    assert sel.choose(AR, call(size=64 * KiB)).label == str(xml)
    assert sel.choose(AR, call(size=64 * KiB - 1)).label == "direct"
    assert sel.choose(AR, call(size=(1 << 20) + 1)).label == "direct"
    assert sel.choose(AR, call(size=128 * KiB, n=4)).label == "direct"
    explicit = AlgorithmSelection(table({"collective": "all_reduce", "max_bytes": 100, "algorithm": str(xml)}))
    assert (explicit.rules[0].min_bytes, explicit.rules[0].max_bytes) == (None, 100)


def test_cli_algo_goes_before_a_table(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from etsim.cli import main

    sys_yaml = tmp_path / "sys.yaml"
    sys_yaml.write_text("algorithms:\n  - {collective: all_reduce, algorithm: tree}\n  - {default: direct}\n")
    out = tmp_path / "r.json"
    wl = str(repo / "workloads" / "allreduce_8npus_1MiB")
    assert main([wl, "--system", str(sys_yaml), "--algo", "all_reduce=ring", "--json", str(out), "-q"]) == 0
    assert {(c["algorithm"], c["rule"]) for c in json.loads(out.read_text())["collectives"]} == {("ring", "--algo")}
    assert main([wl, "--system", str(sys_yaml), "--json", str(out), "-q"]) == 0
    assert {(c["algorithm"], c["rule"]) for c in json.loads(out.read_text())["collectives"]} == {
        ("tree", "algorithms[0]")
    }


def test_tacos_spec_is_synthesised_per_group_and_cached(repo: Path) -> None:
    from etsim.producers.tacos import source as synthesised

    topo = load_network(repo / "topologies" / "mesh4x4.yaml").topology
    config = table({"collective": "all_reduce", "algorithm": "tacos:chunks_per_npu=1,seed=3"})
    workload = Workload(collective_workload(AR, 1 << 20, 16))
    first = simulate(workload, topology=topo, model="link", system=config)
    entries = len(synthesised._CACHE)
    second = simulate(workload, topology=topo, model="link", system=config)
    assert len(synthesised._CACHE) == entries  # the second run on the same topology reuses the synthesis
    assert first.finish_ns == second.finish_ns
    assert {c.algorithm for c in first.collectives} == {"tacos:chunks_per_npu=1,seed=3"}
    with pytest.raises(ConfigError, match="seed must be an integer"):
        AlgorithmSelection(table({"algorithm": "tacos:seed=x"}))
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        AlgorithmSelection(table({"algorithm": "tacos:chunks=2"}))
