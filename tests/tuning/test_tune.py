"""The tuner: fastest candidate per point, merged rules, determinism, parallel = serial, workload mode."""

from __future__ import annotations

import itertools
import signal
from pathlib import Path

import pytest

from etsim.chakra import Workload, write_workload
from etsim.errors import ConfigError, TopologyError
from etsim.producers import moe_workload
from etsim.simulation import simulate
from etsim.system.config import load_system_config
from etsim.tuning import Point, TuneRequest, csv_text, parse_sizes, point_workload, tune
from etsim.tuning.runner import Setup, run_points
from etsim.tuning.tune import compare_workload, expand_candidates

KiB, MiB = 1 << 10, 1 << 20


def test_parse_sizes() -> None:
    assert parse_sizes("4KiB,1MiB, 64 MiB") == [4 * KiB, MiB, 64 * MiB]
    assert parse_sizes("1KiB..8KiB,1MiB") == [KiB, 2 * KiB, 4 * KiB, 8 * KiB, MiB]
    with pytest.raises(ConfigError, match=r"--sizes: '3KiB\.\.8KiB': a range runs over powers of two"):
        parse_sizes("3KiB..8KiB")
    with pytest.raises(ConfigError, match="runs backwards"):
        parse_sizes("8KiB..1KiB")
    with pytest.raises(ConfigError, match="unknown size unit"):
        parse_sizes("4 parsecs")
    with pytest.raises(ConfigError, match="'0': a collective moves at least 1 byte"):
        parse_sizes("0,1KiB")


def test_expand_candidates_collapses_families(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    found = expand_candidates("ring,algorithms/tree_allreduce_8npus*.et")
    assert found == ["ring", "algorithms/tree_allreduce_8npus.et"]
    assert expand_candidates("algorithms/*_allreduce_8npus.et") == [
        f"algorithms/{a}_allreduce_8npus.et"
        for a in ("direct", "halving_doubling", "msccl_hier", "msccl_ring", "ring", "tree")
    ]
    with pytest.raises(ConfigError, match=r"'nothing/\*\.xml' matches no file"):
        expand_candidates("nothing/*.xml")
    # A spec's own parameters are not candidates (docs/tuning.md's TACOS example was cut at its first comma).
    assert expand_candidates("ring,tacos:chunks_per_npu=2,seed=3,runs=4,direct") == [
        "ring", "tacos:chunks_per_npu=2,seed=3,runs=4", "direct"
    ]  # fmt: skip


def _request(repo: Path, tmp_path: Path, **kw: object) -> TuneRequest:
    args: dict[str, object] = {
        "topology": str(repo / "topologies" / "ring8.yaml"),
        "candidates": ["ring", "direct", "tree", "hd"],
        "collectives": ["all_reduce", "all_to_all"],
        "sizes": parse_sizes("1KiB..4MiB"),
        "output": str(tmp_path / "table.yaml"),
    }
    args.update(kw)
    return TuneRequest(**args)  # type: ignore[arg-type]


def test_the_tuned_choice_at_every_point_is_the_fastest_candidate_alone(repo: Path, tmp_path: Path) -> None:
    request = _request(repo, tmp_path)
    result = tune(request, jobs=1)
    (tmp_path / "table.yaml").write_text(result.table_text)
    table = load_system_config(tmp_path / "table.yaml")
    fastest: dict[tuple[str, int], tuple[float, str]] = {}
    for m in result.measurements:
        p = m.point
        assert isinstance(p, Point)
        if m.time_ns is not None:
            key = (p.collective, p.size)
            fastest[key] = min(fastest.get(key, (m.time_ns, p.candidate)), (m.time_ns, p.candidate))
    assert len(fastest) == 2 * 13
    winners = {fastest[k][1] for k in fastest}
    assert len(winners) > 1  # a crossover exists on this topology
    for (collective, size), (time, candidate) in sorted(fastest.items()):
        # The whole table, loaded as --system takes it, serves the point alone with its fastest candidate.
        run = simulate(point_workload(collective, size, range(8), 8), topology=request.topology, system=table)
        assert {c.algorithm for c in run.collectives} == {candidate}, (collective, size)
        assert run.finish_ns == pytest.approx(time, rel=1e-12)
    # Adjacent sizes with the same winner share one rule: no two neighbouring rules of a series agree.
    rules = table.algorithm_rules
    assert len(rules) < len(fastest)
    for a, b in itertools.pairwise(rules):
        if a.collective == b.collective and not b.is_default:
            assert a.algorithm != b.algorithm
    # tree and hd do not implement all_to_all: skipped, with a note naming them.
    assert any("tree on all_to_all" in n and "does not implement all_to_all" in n for n in result.notes)
    assert any("hd on all_to_all" in n for n in result.notes)


def test_outputs_are_deterministic_and_parallel_equals_serial(repo: Path, tmp_path: Path) -> None:
    request = _request(repo, tmp_path, sizes=parse_sizes("4KiB,1MiB,4MiB"), collectives=["all_reduce"])
    one = tune(request, jobs=1)
    two = tune(request, jobs=1)
    par = tune(request, jobs=2)
    assert one.table_text == two.table_text == par.table_text
    assert csv_text(one.measurements, one.tuned) == csv_text(par.measurements, par.tuned)
    header, *rows = csv_text(one.measurements, one.tuned).splitlines()
    assert header == "collective,bytes,group_size,dimension,group,candidate,time_ns,bus_GBps,fastest,note"
    assert len(rows) == 3 * 4 and sum(r.split(",")[8] == "yes" for r in rows) == 3


def test_group_sizes_and_dimensions(repo: Path, tmp_path: Path) -> None:
    request = _request(
        repo,
        tmp_path,
        topology=str(repo / "topologies" / "ring4_switch4.yaml"),
        collectives=["all_reduce"],
        sizes=[64 * KiB],
        group_sizes=[4, 16],
        candidates=["ring", "direct"],
    )
    result = tune(request, jobs=1)
    series = {w.series for w in result.tuned}
    assert series == {("all_reduce", 4, 0), ("all_reduce", 16, None)}
    assert "dimension: 0" in result.table_text
    with pytest.raises(ConfigError, match="--group-sizes: 32 is not between 2"):
        tune(_request(repo, tmp_path, group_sizes=[32]), jobs=1)


def test_workload_mode_tunes_the_calls_it_makes_and_beats_each_single_algorithm(repo: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "moe"
    write_workload(
        moe_workload(8, ep_size=4, layers=1, token_bytes=2 * MiB, dense_grad_bytes=[32 * KiB, 16 * MiB]), prefix
    )
    out = tmp_path / "moe_table.yaml"
    request = _request(repo, tmp_path, workload=str(prefix), output=str(out), candidates=["ring", "direct", "tree"])
    result = tune(request, jobs=1)
    assert {(w.series[0], w.series[1], w.size) for w in result.tuned} == {
        ("all_to_all", 4, 2 * MiB),
        ("all_reduce", 8, 32 * KiB),
        ("all_reduce", 8, 16 * MiB),
    }
    out.write_text(result.table_text)
    comparison = compare_workload(request, load_system_config(out), jobs=1)
    labels = [getattr(m.point, "label", "") for m in comparison]
    assert labels == ["tuned table", "ring", "direct", "tree"]
    tuned, *singles = comparison
    assert tuned.time_ns is not None
    for m in singles:
        assert m.time_ns is not None and tuned.time_ns < m.time_ns, m.point
    assert any("'tree' does not implement all_to_all" in w for w in singles[2].warnings)
    # The table runs the workload as `etsim run --system` would, with the same time.
    again = simulate(Workload(moe_workload(8, ep_size=4, layers=1, token_bytes=2 * MiB,
                                           dense_grad_bytes=[32 * KiB, 16 * MiB])),
                     topology=request.topology, system=load_system_config(out))  # fmt: skip
    assert again.finish_ns == tuned.time_ns


def test_plot_marks_crossovers(repo: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from etsim.tuning import plot

    request = _request(repo, tmp_path, sizes=parse_sizes("64KiB..1MiB"), collectives=["all_reduce"])
    result = tune(request, jobs=1)
    for metric in ("time", "busbw"):
        path = tmp_path / f"plot_{metric}.png"
        plot(path, result.measurements, result.tuned, request.candidates, metric=metric)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_tune_leaves_no_worker_behind(
    repo: Path, tmp_path: Path, sig: signal.Signals, signal_command
) -> None:
    # Its workers used to outlive a SIGTERM'd `etsim tune` for good (waiting on a queue nobody writes), and
    # Ctrl-C printed their tracebacks. Ctrl-C reaches the whole process group; a plain `kill` the one process.
    args = ["tune", "--topology", str(repo / "topologies" / "ring64.yaml"), "--sizes", "1B..1GiB"]
    args += ["--candidates", "ring,direct,tree,hd", "--jobs", "2", "-o", str(tmp_path / "table.yaml")]
    status, err = signal_command(args, sig, 2.0, group=sig == signal.SIGINT)  # 2 s: the workers measure (of ~8)
    assert status in (0, 128 + sig, -sig) and "Traceback" not in err  # 0: a machine fast enough to finish first


def test_a_setup_that_fails_in_the_workers_fails_as_in_this_process(tmp_path: Path) -> None:
    # The workers build the network in their initialiser: its error must come back, not "every point died".
    points = [Point("all_reduce", size, tuple(range(8)), "ring") for size in (KiB, MiB)]
    setup = Setup(str(tmp_path / "missing.yaml"))
    for jobs in (1, 2):
        with pytest.raises(TopologyError, match=r"missing\.yaml"):
            run_points(points, setup, jobs=jobs)


def test_a_fallback_no_run_could_load_is_refused_before_any_work(repo: Path, tmp_path: Path) -> None:
    request = _request(repo, tmp_path, fallback="bogus")
    with pytest.raises(ConfigError, match="--fallback 'bogus' is neither an algorithm name"):
        tune(request, jobs=1)
    assert not (tmp_path / "table.yaml").exists()


def _mixed_groups_workload(prefix: Path, small: int) -> None:
    """16 ranks on ring4_switch4: a 4 MiB all-reduce in each ring of four (dimension 0), then one of *small* bytes in
    groups {0, 1, 4, 5} … that span no single dimension."""
    import json

    from etsim.chakra import CollectiveType, TraceBuilder
    from etsim.system.groups import GROUPS_ATTR

    rings = {f"r{k}": list(range(4 * k, 4 * k + 4)) for k in range(4)}
    across = {f"x{k}": [r + 8 * (k // 2) + 2 * (k % 2) for r in (0, 1, 4, 5)] for k in range(4)}
    groups = {**rings, **across}
    traces = []
    for rank in range(16):
        b = TraceBuilder(rank)
        ring = next(name for name, members in rings.items() if rank in members)
        first = b.collective(CollectiveType.ALL_REDUCE, 4 * MiB, pg_name=ring)
        other = next(name for name, members in across.items() if rank in members)
        b.collective(CollectiveType.ALL_REDUCE, small, deps=[first], pg_name=other)
        trace = b.build(rank=rank)
        trace.metadata.attr.add(name=GROUPS_ATTR, string_val=json.dumps(groups))
        traces.append(trace)
    write_workload(Workload(traces), prefix)


@pytest.mark.parametrize("small", [64 * KiB, 4 * MiB])
def test_groups_spanning_no_dimension_get_the_rule_after_those_that_span_one(
    repo: Path, tmp_path: Path, small: int
) -> None:
    # Their rule has no dimension key: before the dimension-0 rule it caught the rings' calls too (the table then
    # lost to a single algorithm); with equal sizes the calls could not even be sorted (a TypeError).
    _mixed_groups_workload(tmp_path / "mix", small)
    out = tmp_path / "table.yaml"
    topology = str(repo / "topologies" / "ring4_switch4.yaml")
    request = _request(repo, tmp_path, topology=topology, workload=str(tmp_path / "mix"), output=str(out),
                       candidates=["tree", "ring"])  # fmt: skip
    result = tune(request, jobs=1)
    rules = [r for r in result.rules if not r.is_default]
    assert [r.dimension for r in rules][-1] is None and all(r.dimension == 0 for r in rules[:-1])
    out.write_text(result.table_text)
    tuned, *singles = compare_workload(request, load_system_config(out), jobs=1)
    assert tuned.time_ns is not None and all(m.time_ns is not None and tuned.time_ns <= m.time_ns for m in singles)


def test_a_base_systems_relative_comm_groups_is_written_relative_to_the_table(repo: Path, tmp_path: Path) -> None:
    from etsim.tuning.tune import base_settings

    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "groups.json").write_text('{"g": [0, 1, 2, 3]}')
    (tmp_path / "base" / "sys.yaml").write_text("comm_groups: groups.json\n")
    out = tmp_path / "tables" / "t.yaml"
    out.parent.mkdir()
    request = _request(repo, tmp_path, output=str(out), sizes=[MiB], collectives=["all_reduce"],
                       settings=base_settings(tmp_path / "base" / "sys.yaml"))  # fmt: skip
    out.write_text(tune(request, jobs=1).table_text)
    assert "comm_groups: ../base/groups.json" in out.read_text()
    config = load_system_config(out)
    assert Path(config.resolve_path(config.comm_groups)).resolve() == tmp_path / "base" / "groups.json"


def test_a_barrier_has_no_bus_bandwidth(repo: Path, tmp_path: Path) -> None:
    # It moves no data: 524 GB/s "bus bandwidth" on 50 GB/s links was printed for a 1 MiB barrier.
    result = tune(_request(repo, tmp_path, collectives=["barrier"], sizes=[MiB], candidates=["ring"]), jobs=1)
    (row,) = csv_text(result.measurements, result.tuned).splitlines()[1:]
    assert row.split(",")[7] == "" and float(row.split(",")[6]) > 0


def test_a_reduce_scatter_block_is_tuned_as_the_reduce_scatter_it_runs_as(repo: Path, tmp_path: Path) -> None:
    # Every native was skipped ("does not implement reduce_scatter_block"), though `etsim run --algo ring` runs it.
    request = _request(repo, tmp_path, collectives=["reduce_scatter_block"], sizes=[MiB], candidates=["ring", "direct"])
    (winner,) = tune(request, jobs=1).tuned
    assert winner.series[0] == "reduce_scatter_block" and winner.candidate in ("ring", "direct") and winner.time_ns > 0
