"""``etsim optimise``: the search keeps only faster candidates that fit, its outputs reproduce the best time, it
resumes from its cache, and on constructed cases it finds the known optimum."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from etsim.chakra import load_workload
from etsim.chakra.graph import CollectiveType
from etsim.chakra.io import write_workload
from etsim.chakra.validate import validate_workload
from etsim.cli import main
from etsim.errors import ConfigError
from etsim.experiment.spec import load_experiment
from etsim.producers import collective_workload
from etsim.simulation import simulate
from etsim.system.config import load_system_config
from etsim.tuning import optimise as opt

REPO = Path(__file__).resolve().parents[2]
MODEL = {"layers": 8, "hidden": 1024, "heads": 16, "ffn": 4096, "vocab": 8000, "seq": 512}


def job_file(tmp_path: Path, **workload: Any) -> Path:
    values = {"generate": "transformer", "model": MODEL, "tp": 2, "pp": 4, "dp": 2, "global_batch": 32,
              "micro_batch": 4, **workload}  # fmt: skip
    data = {"workload": values, "topology": {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 16},
            "model": "flow", "system": {"resources": {"comm_streams": 0}}}  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def baseline(path: Path) -> Any:
    return load_experiment(path).points[0].spec


def test_the_search_accepts_only_faster_candidates_and_its_best_is_the_fastest_it_saw(tmp_path: Path) -> None:
    result = opt.optimise(baseline(job_file(tmp_path)), budget=30)
    assert len(result.evaluated) == 30
    times = [c.iteration_ns for c in result.evaluated if c.status == "ok" and c.fits]
    assert result.best.iteration_ns == min(times) < result.baseline.iteration_ns
    for _move, before, after in result.accepted:
        assert after < before
    assert [b for _, b, _ in result.accepted][1:] == [a for _, _, a in result.accepted][:-1]  # a chain
    assert result.history == sorted(result.history, reverse=True)  # the best only improves
    assert result.best.path == tuple(m for ms, _, _ in result.accepted for m in ms)


def test_outputs_reproduce_the_best_time_and_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["optimise", str(job_file(tmp_path)), "-o", str(out), "--budget", "12", "-q"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["best_ns"] < report["baseline_ns"] and report["accepted"]
    workload = load_workload(str(out / "workload"))
    assert not [i for i in validate_workload(workload) if i.blocking]
    system = load_system_config(str(out / "system.yaml"))
    again = simulate(workload, topology=str(out / "topology.yaml"), system=system)
    assert again.finish_ns == report["best_ns"]  # to the nanosecond
    for record in {(c.type.lower(), c.algorithm, len(c.group)) for c in again.collectives}:
        collective, algorithm, n = record  # every algorithm the best job runs computes its collective
        if algorithm.startswith("nccl:"):  # a timing model of NCCL's algorithms (NCCL computes them): its bytes are
            continue  # checked by tests/system/algorithms/test_nccl.py
        assert main(["algo", "verify", algorithm, "--collective", collective, "--npus", str(n)]) == 0, record
    assert (out / "convergence.csv").read_text().count("\n") == report["candidates"] + 1
    for name in ("report.md", "best.yaml", "baseline.trace.json.gz", "best.trace.json.gz", "workload.comm_groups.json"):
        assert (out / name).exists(), name
    totals = report["critical_path"]["after"]["totals"]
    assert totals["compute_ns"] + totals["exposed_comm_ns"] + totals["memory_ns"] + totals["other_ns"] == pytest.approx(
        report["best_ns"]
    )


def test_a_second_run_resumes_from_the_cache_and_finds_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = baseline(job_file(tmp_path))
    cache = tmp_path / "candidates.jsonl"
    first = opt.optimise(spec, budget=10, cache=cache)
    ran: list[int] = []
    from etsim.experiment.engines.local import LocalEngine

    original = LocalEngine.run

    def counting(self: Any, tasks: Any, on_outcome: Any) -> None:
        ran.append(len(tasks))
        original(self, tasks, on_outcome)

    monkeypatch.setattr(LocalEngine, "run", counting)
    second = opt.optimise(spec, budget=10, cache=cache)
    assert ran == []  # nothing simulated again
    assert [c.key for c in second.evaluated] == [c.key for c in first.evaluated]
    assert second.best.iteration_ns == first.best.iteration_ns


def test_the_cache_lists_candidates_in_the_order_made_whichever_finishes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under --jobs 2 or Ray, candidates.jsonl listed a round's candidates in the order its workers finished them.
    from etsim.experiment.engines.local import LocalEngine

    spec = baseline(job_file(tmp_path))
    opt.optimise(spec, budget=10, cache=tmp_path / "in_order.jsonl")
    original = LocalEngine.run

    def last_first(self: Any, tasks: Any, on_outcome: Any) -> None:
        original(self, list(reversed(tasks)), on_outcome)

    monkeypatch.setattr(LocalEngine, "run", last_first)
    opt.optimise(spec, budget=10, cache=tmp_path / "reversed.jsonl")
    assert (tmp_path / "reversed.jsonl").read_bytes() == (tmp_path / "in_order.jsonl").read_bytes()


def test_a_topology_edited_in_place_starts_the_cache_over(tmp_path: Path) -> None:
    """The cache stamps the files the job reads: the same paths with another link rate are simulated again (the
    cached times were the old topology's; the report would have quoted them beside files giving 10x longer)."""
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4), tmp_path / "ar")
    topology = tmp_path / "ring4.yaml"
    topology.write_text("kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"workload": str(tmp_path / "ar"), "topology": str(topology)}))
    cache = tmp_path / "candidates.jsonl"
    first = opt.optimise(baseline(job), budget=2, cache=cache)
    again = opt.optimise(baseline(job), budget=2, cache=cache)
    assert again.baseline.iteration_ns == first.baseline.iteration_ns  # unchanged inputs: from the cache
    topology.write_text("kind: ring\nnpus: 4\nbandwidth: 5 GB/s\nlatency: 500 ns\n")
    slower = opt.optimise(baseline(job), budget=2, cache=cache)
    assert slower.baseline.iteration_ns > 9 * first.baseline.iteration_ns


def test_for_a_trace_workload_it_finds_the_fastest_algorithm(tmp_path: Path) -> None:
    # A 64 KiB all-reduce over 16 NPUs on one switch: latency-bound, so the log-step algorithms beat the ring.
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 64 << 10, 16), tmp_path / "ar")
    (tmp_path / "sw.yaml").write_text("kind: switch\nnpus: 16\nbandwidth: 50 GB/s\nlatency: 2 us\n")
    (tmp_path / "sys.yaml").write_text("algorithms: {all_reduce: ring}\n")
    out = tmp_path / "out"
    args = ["optimise", str(tmp_path / "ar"), "--topology", str(tmp_path / "sw.yaml"), "--system"]
    assert main([*args, str(tmp_path / "sys.yaml"), "-o", str(out), "-q"]) == 0
    report = json.loads((out / "report.json").read_text())
    each = {}
    for name in opt.CANDIDATES:  # every candidate runs an all-reduce
        system = load_system_config({"algorithms": {"all_reduce": name}})
        each[name] = simulate(load_workload(str(tmp_path / "ar")), topology=str(tmp_path / "sw.yaml"), system=system)
    fastest = min(r.finish_ns for r in each.values())
    assert report["baseline_ns"] == each["ring"].finish_ns and report["best_ns"] == fastest < report["baseline_ns"]


def test_candidates_that_do_not_fit_in_gpu_memory_are_never_accepted(tmp_path: Path) -> None:
    # On 40 GB GPUs micro-batches of 4 fit (30.7 GB by the memory model), of 8 do not (44.4 GB).
    big = {**MODEL, "hidden": 6144, "heads": 32, "ffn": 24576, "seq": 2048, "layers": 16}
    spec = baseline(job_file(tmp_path, model=big, gpu="a100-40gb", tp=4, pp=2, dp=2))
    result = opt.optimise(spec, budget=12)
    unfit = [c for c in result.evaluated if not c.fits]
    assert unfit and any(dict(c.path[-1].values).get("micro_batch") == 8 for c in unfit)
    assert result.best.fits and all(c.fits for c in result.evaluated if c.path and c.path == result.best.path)


def test_a_job_that_does_not_fit_is_made_to_fit_first(tmp_path: Path) -> None:
    big = {**MODEL, "hidden": 6144, "heads": 32, "ffn": 24576, "seq": 2048, "layers": 16}
    spec = baseline(job_file(tmp_path, model=big, gpu="a100-40gb", tp=4, pp=2, dp=2, micro_batch=8))
    result = opt.optimise(spec, budget=16)
    assert not result.baseline.fits and result.best.fits  # 44.4 GB as given; the best fits in 40 GB


def test_bad_requests_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = job_file(tmp_path)
    out = str(tmp_path / "o")
    assert main(["optimise", str(job), "--topology", "x.yaml", "-o", out]) == 1
    assert "a job file names its own topology, system and model" in capsys.readouterr().err
    assert main(["optimise", str(job), "-o", out, "--budget", "0"]) == 1
    assert "--budget must be >= 1, got 0" in capsys.readouterr().err
    sweep = yaml.safe_load(job.read_text())
    sweep["sweep"] = {"workload.micro_batch": [1, 2]}
    job.write_text(yaml.safe_dump(sweep))
    assert main(["optimise", str(job), "-o", out]) == 1
    assert "optimise starts from one configuration; the file sweeps 2 points" in capsys.readouterr().err
    assert main(["optimise", str(tmp_path / "nothing"), "-o", out]) == 1
    assert "--topology is needed with a workload" in capsys.readouterr().err
    assert main(["optimise", str(tmp_path / "nothing.yaml"), "-o", out]) == 1
    assert f"{tmp_path / 'nothing.yaml'}: no such job file" in capsys.readouterr().err
    # A workload that is not there is named, not the job file this command writes for it in a temporary directory.
    ring8 = str(REPO / "topologies" / "ring8.yaml")
    assert main(["optimise", str(tmp_path / "nothing"), "--topology", ring8, "-o", out]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith(f"etsim: error: workload: workload '{tmp_path / 'nothing'}': no such file")
        and "job.yaml" not in err
    )
    args = [
        "optimise",
        str(REPO / "workloads" / "allreduce_8npus_1MiB"),
        "--topology",
        str(REPO / "topologies" / "ring8.yaml"),
    ]
    assert main([*args, "--system", str(tmp_path / "none.yaml"), "-o", out]) == 1
    assert "none.yaml" in capsys.readouterr().err


def test_in_context_it_beats_the_table_etsim_tune_measured_alone(tmp_path: Path) -> None:
    # docs/tuning.md: under store-and-forward `link` on ring4_switch4, `etsim tune` measures direct as the fastest
    # for every call of the MoE step alone, so its table is direct everywhere (1.869 ms); run in the step,
    # hierarchical all-reduces (each 4-rank group over the dimension it spans) contend less with the all-to-alls.
    (tmp_path / "tuned.yaml").write_text(
        "resources: {comm_streams: 0}\nalgorithms: {all_reduce: direct, all_to_all: direct}\n"
    )
    out = tmp_path / "out"
    args = ["optimise", str(REPO / "workloads" / "moe_16npus_2layers"), "--topology"]
    args += [str(REPO / "topologies" / "ring4_switch4.yaml"), "--system", str(tmp_path / "tuned.yaml")]
    assert main([*args, "--model", "link", "--budget", "10", "-o", str(out), "-q"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["baseline_ns"] == pytest.approx(1_869_000, abs=500)
    assert report["accepted"][0]["move"] == "algorithms.all_reduce = hierarchical"
    assert f"{report['accepted'][0]['after_ns'] / 1e6:.6g}" in (REPO / "docs" / "optimise.md").read_text()
    assert report["best_ns"] < 0.9 * report["baseline_ns"]


def test_a_rule_table_from_etsim_tune_is_kept_as_it_is(tmp_path: Path) -> None:
    # `etsim tune` writes its table as a list of rules: the search keeps it (no algorithm move) and runs the rest.
    (tmp_path / "tuned.yaml").write_text(
        "resources: {comm_streams: 0}\nalgorithms:\n"
        "  - {collective: all_reduce, algorithm: direct}\n  - {default: direct}\n"
    )
    out = tmp_path / "out"
    args = ["optimise", str(REPO / "workloads" / "moe_16npus_2layers"), "--topology"]
    args += [str(REPO / "topologies" / "ring4_switch4.yaml"), "--system", str(tmp_path / "tuned.yaml")]
    assert main([*args, "--budget", "3", "-o", str(out), "-q"]) == 0
    moves = [line for line in (out / "report.md").read_text().splitlines() if "algorithms." in line]
    assert moves == []


def test_the_shipped_case_study_is_one_point_whose_moves_reach_the_known_optimum() -> None:
    spec = baseline(REPO / "jobs" / "gpt3_175b_64.yaml")
    assert spec.workload["model"] == "gpt3-175b" and (spec.workload["tp"], spec.workload["pp"]) == (8, 8)
    listed = opt.moves(spec, ["all_reduce"])
    interleave = opt.Move("workload", (("schedule", "interleaved"), ("virtual_stages", 4)), "pp")
    assert interleave in listed
    step = opt.apply(spec, interleave)
    assert step is not None
    repairs = [m.values for m in opt.memory_moves(step)]
    assert repairs[:2] == [(("sp", True),), (("recompute", "selective"),)]  # docs/optimise.md: the accepted step


@pytest.mark.slow
def test_the_case_study_finds_a_step_at_least_10_percent_faster(tmp_path: Path) -> None:
    result = opt.optimise(baseline(REPO / "jobs" / "gpt3_175b_64.yaml"), budget=30, jobs=2)
    assert result.best.iteration_ns <= 0.9 * result.baseline.iteration_ns and result.best.fits


def _reorder_case(tmp_path: Path) -> Path:
    """The seed paper's reordering: rank 0 runs a long compute node and a short one whose result rank 1 waits for.

    By id the long one goes first (one compute stream), so rank 1 starts 100 µs late; issuing the short one first
    overlaps rank 1's work with the long node. The optimum is that reordering and nothing else.
    """
    from etsim.chakra.builder import TraceBuilder

    r0 = TraceBuilder()
    r0.comp("long", duration_micros=100)
    short = r0.comp("short", duration_micros=10)
    r0.send(1, 1 << 20, tag=1, deps=[short], name="result")
    r1 = TraceBuilder()
    got = r1.recv(0, 1 << 20, tag=1, name="result")
    r1.comp("consume", duration_micros=100, deps=[got])
    write_workload([r0.build(rank=0), r1.build(rank=1)], tmp_path / "reorder")
    (tmp_path / "pair.yaml").write_text("kind: switch\nnpus: 2\nbandwidth: 100 GB/s\nlatency: 1 us\n")
    return tmp_path / "reorder"


def test_node_priorities_change_only_the_issue_order_of_ready_nodes(tmp_path: Path) -> None:
    workload = load_workload(str(_reorder_case(tmp_path)))
    topology = str(tmp_path / "pair.yaml")
    by_id = simulate(workload, topology=topology)
    first = simulate(workload, topology=topology, system=load_system_config({"node_priorities": {"0:1": -1}}))
    transfer = 2000 + (1 << 20) / 100  # two 1 µs links through the switch + 1 MiB at 100 B/ns (cut-through)
    assert by_id.finish_ns == 110_000 + transfer + 100_000
    assert first.finish_ns == 10_000 + transfer + 100_000
    assert first.ranks[0].finish_ns == 110_000  # the long node still runs, after the short one
    with pytest.raises(ConfigError, match=r"node_priorities: '0-1' is not 'RANK:NODE'"):
        load_system_config({"node_priorities": {"0-1": -1}})


def test_it_finds_the_reordering_of_two_independent_nodes_on_the_critical_path(tmp_path: Path) -> None:
    workload = _reorder_case(tmp_path)
    out = tmp_path / "out"
    args = ["optimise", str(workload), "--topology", str(tmp_path / "pair.yaml"), "-o", str(out), "--budget", "8"]
    assert main([*args, "-q"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["accepted"][0]["move"] == "node_priorities.0:1 = -1"
    assert report["best_ns"] == pytest.approx(report["baseline_ns"] - 100_000)
    system = load_system_config(str(out / "system.yaml"))
    assert system.node_priorities == {"0:1": -1}
    # The rewrite is a setting: the written traces are the input's, node for node and dependency for dependency.
    before, after = load_workload(str(workload)), load_workload(str(out / "workload"))
    for a, b in zip(before.traces, after.traces, strict=True):
        assert (a.ids, a.types, a.data_idx, a.ctrl_idx, a.comm_size) == (
            b.ids,
            b.types,
            b.data_idx,
            b.ctrl_idx,
            b.comm_size,
        )


def test_it_finds_the_bucket_size_an_exhaustive_sweep_proves_best(tmp_path: Path) -> None:
    # A data-parallel step (16 replicas over two DGX nodes): small buckets pay a collective's latency per bucket,
    # large ones overlap less of the backward pass. Every bucket size the moves can reach (80 MB × 2^k, down to
    # 1 MiB) is simulated here; the search, restricted to bucket moves, must stop at the fastest of them.
    job = job_file(tmp_path, tp=1, pp=1, dp=16, global_batch=64, micro_batch=1)
    data = yaml.safe_load(job.read_text())
    # The ring's latency per bucket makes the sweep's best an interior size (NCCL's, the GPU cluster's default, is
    # fastest at the largest here, where the search has nothing to find): the search is the subject, not NCCL.
    data["system"]["algorithms"] = {"default": "ring"}
    job.write_text(yaml.safe_dump(data))
    spec = baseline(job)
    result = opt.optimise(spec, budget=12, kinds=frozenset({"bucket"}))
    sizes = [int(80_000_000 * 2.0**k) for k in range(-6, 4)]
    times = {}
    for size in sizes:
        data["workload"]["bucket_size"] = size
        job.write_text(yaml.safe_dump(data))
        times[size] = simulate_spec(baseline(job))
    fastest = min(sizes, key=lambda s: (times[s], s))
    assert result.best.spec.workload["bucket_size"] == fastest == 40_000_000
    assert result.best.iteration_ns == times[fastest] < times[80_000_000]
    assert {m.kind for c in result.evaluated for m in c.path} == {"bucket"}


def simulate_spec(spec: Any) -> float:
    from etsim.experiment.worker import simulate_point

    return simulate_point(spec).finish_ns


def test_moves_are_restricted_by_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = baseline(job_file(tmp_path))
    kinds = {m.kind for m in opt.moves(spec, ["all_reduce"])}
    assert kinds <= set(opt.MOVE_KINDS) and {"micro_batch", "schedule", "split", "algorithm", "chunks"} <= kinds
    assert main(["optimise", str(job_file(tmp_path)), "-o", str(tmp_path / "o"), "--moves", "bucket,warp"]) == 1
    assert "--moves: unknown kind 'warp'" in capsys.readouterr().err


def test_candidates_run_on_the_ray_engine_with_the_same_search(tmp_path: Path) -> None:
    pytest.importorskip("ray")  # an optional extra; CI installs it
    spec = baseline(job_file(tmp_path))
    local = opt.optimise(spec, budget=6)
    ray = opt.optimise(spec, budget=6, engine="ray", jobs=2)
    assert [c.key for c in ray.evaluated] == [c.key for c in local.evaluated]
    assert [c.iteration_ns for c in ray.evaluated] == [c.iteration_ns for c in local.evaluated]


def test_a_moe_job_and_a_plain_workload_are_searched_with_the_moves_they_declare(tmp_path: Path) -> None:
    moe = {"generate": "moe", "npus": 8, "ep_size": 4, "layers": 2, "token_size": "1 MiB",
           "dense_grad_sizes": ["64 KiB", "4 MiB"]}  # fmt: skip
    data = {"workload": moe, "topology": {"kind": "switch", "npus": 8, "bandwidth": "50 GB/s", "latency": "500 ns"},
            "model": "analytical"}  # fmt: skip
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = baseline(path)
    workload_moves = [m for m in opt.moves(spec, ["all_to_all"]) if m.where == "workload"]
    assert {m.values for m in workload_moves} == {(("ep_size", 8),), (("ep_size", 2),)}  # the moe generator's
    assert opt.memory_moves(spec) == []
    result = opt.optimise(spec, budget=8, kinds=frozenset({"ep_size", "algorithm"}))
    tried = {m.describe() for c in result.evaluated for m in c.path}
    assert {"ep_size = 8", "ep_size = 2"} <= tried
    assert result.best.iteration_ns <= result.baseline.iteration_ns
    # A workload read from files: no workload moves, the system's only.
    prefix = tmp_path / "wl" / "ar"
    prefix.parent.mkdir()
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 8), prefix)
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({**data, "workload": str(prefix)}))
    spec = baseline(plain)
    assert {m.where for m in opt.moves(spec, ["all_reduce"])} == {"system"}
    assert opt.optimise(spec, budget=4).best.status == "ok"


def test_an_output_path_that_is_a_file_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "README.md").write_text("mine\n")
    assert main(["optimise", str(job_file(tmp_path)), "-o", str(tmp_path / "README.md")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("etsim: error: -o ") and "README.md: a file is there, not a directory" in err
    assert len(err.strip().splitlines()) == 1 and (tmp_path / "README.md").read_text() == "mine\n"


def test_a_second_search_on_the_same_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    from etsim.experiment.results import LOCK
    from etsim.files import lock_directory

    out = tmp_path / "out"
    out.mkdir()
    held = lock_directory(out, "optimise run", LOCK)  # a search running there (this process's pid in the file)
    try:
        assert main(["optimise", str(job_file(tmp_path)), "-o", str(out), "--budget", "2"]) == 1
    finally:
        os.close(held)
    err = capsys.readouterr().err
    assert f"is being written by another optimise run (etsim process {os.getpid()})" in err
    assert not (out / "candidates.jsonl").exists()  # nothing simulated


def test_the_time_limit_takes_the_units_the_docs_show_and_bounds_the_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from etsim.options import parse_options

    for text, seconds in (("4 min", 240.0), ("240 s", 240.0), ("1 h", 3600.0)):
        request = opt.OptimiseRequest(**parse_options(opt.OptimiseRequest, {"time": text}, text=True))
        assert request.seconds == pytest.approx(seconds)

    class Clock:
        """The search's clock: each look is a second later. The search looks once before it starts each candidate,
        so a second is a candidate's time, and the bound is checked without the machine's noise (a wall-clock limit
        of a few tiny candidates failed when a busy machine stalled one)."""

        now = 0.0

        def monotonic(self) -> float:
            self.now += 1.0
            return self.now

    monkeypatch.setattr(opt, "time", Clock())
    spec = baseline(job_file(tmp_path))
    none = opt.optimise(spec, budget=40, seconds=0.0)
    assert [c.path for c in none.evaluated] == [()] and none.timed_out  # the job as given always runs
    limit = 3.5  # three and a half candidates' time (the whole search takes about 25)
    bounded = opt.optimise(spec, budget=40, seconds=limit)
    # The job as given, then the candidates started before the time was up: none starts once it is.
    assert bounded.timed_out and 1 < len(bounded.evaluated) <= 1 + math.ceil(limit)
    assert bounded.best.iteration_ns == min(c.iteration_ns for c in bounded.evaluated if c.status == "ok" and c.fits)


def test_ctrl_c_stops_the_search_keeping_what_finished(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    cache = out / "candidates.jsonl"
    for sig, code, said in ((signal.SIGINT, 130, "etsim: interrupted"), (signal.SIGTERM, 143, "etsim: terminated")):
        proc = subprocess.Popen(
            [sys.executable, "-m", "etsim", "optimise", str(job_file(tmp_path)), "-o", str(out), "--budget", "40"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            # As a shell starts a job in the background: SIGINT ignored, so Python installs no handler of its own.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        before = len(cache.read_text().splitlines()) if cache.exists() else 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not cache.exists() or len(cache.read_text().splitlines()) < before + 2):
            time.sleep(0.02)
        proc.send_signal(sig)
        t0 = time.monotonic()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"optimise still running 30 s after {sig!r}")
        assert time.monotonic() - t0 < 5
        assert proc.returncode == code, err
        text = err.decode()
        assert text.rstrip().endswith(said) and "finished kept in" in text and "Traceback" not in text
        kept = len(cache.read_text().splitlines())
        assert kept >= before + 2
    # The same command resumes: the kept candidates are not simulated again.
    assert main(["optimise", str(job_file(tmp_path)), "-o", str(out), "--budget", "3", "-q"]) == 0


def test_no_move_reruns_the_algorithm_a_collective_already_runs_or_reorders_a_collective_on_one_rank(
    tmp_path: Path,
) -> None:
    from etsim.chakra import load_workload
    from etsim.chakra.graph import NodeType

    workload = REPO / "workloads" / "moe_16npus_2layers"
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump({"workload": str(workload), "topology": str(REPO / "topologies" / "ring4_switch4.yaml")})
    )
    spec = baseline(job)
    # ring is what runs by default here: a move to it simulated the job as given (the same time, a candidate spent)
    assert not [m for m in opt.moves(spec, ["all_reduce", "all_to_all"]) if m.values[0][1] == "ring"]
    # a collective prioritised on one rank meets the others' in another order (refused, or a hang): never moved
    traces = load_workload(str(workload)).traces
    for move in opt.reorder_moves(spec):
        rank, node = move.values[0][0].split(".", 1)[1].split(":")
        trace = traces[int(rank)]
        assert trace.types[trace.index_of[int(node)]] != NodeType.COMM_COLL_NODE, move
