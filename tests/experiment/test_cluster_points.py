"""Experiments of clusters: sweeps over a cluster file's keys, per-job columns, a point re-run alone."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from etsim.cli import main
from etsim.cluster import load_cluster, run_cluster
from etsim.experiment import load_experiment, run_experiment

from .conftest import REPO


def _experiment(write, body: str) -> Path:
    return write("e.yaml", f"cluster: {REPO / 'clusters' / 'two_dp_jobs_packed.yaml'}\n{body}")


def test_a_placement_axis_places_every_job_and_each_job_gets_its_columns(write, tmp_path) -> None:
    path = _experiment(
        write, "sweep: {cluster.placement: [packed, spread]}\nplots: [{x: cluster.placement, y: a.slowdown}]"
    )
    exp = load_experiment(path)
    assert exp.jobs == ["a", "b"] and len(exp.points) == 2
    assert {"a.duration_ns", "a.alone_ns", "a.slowdown", "b.slowdown"} <= set(exp.columns)
    summary = run_experiment(exp, out=tmp_path / "o", jobs=1, plots=False)
    assert (summary.ok, summary.failed) == (2, 0)
    rows = list(csv.DictReader((tmp_path / "o" / "results.csv").read_text().splitlines()))
    for row, placement in zip(rows, ["packed", "spread"], strict=True):
        direct = run_cluster(load_cluster(REPO / "clusters" / f"two_dp_jobs_{placement}.yaml"), alone=True)
        assert float(row["a.slowdown"]) == direct.jobs[0].slowdown
        assert float(row["b.duration_ns"]) == direct.jobs[1].duration_ns
        assert float(row["finish_ns"]) == direct.result.finish_ns
    report = json.loads((tmp_path / "o" / "results.jsonl").read_text().splitlines()[0])["result"]
    assert [job["name"] for job in report["jobs"]] == ["a", "b"] and "shared_links" in report


def test_a_cluster_point_re_runs_alone_from_its_config(write, tmp_path) -> None:
    path = _experiment(write, "sweep: {cluster.stragglers: {none: [], slow: [{gpus: [0], slowdown: 2}]}}")
    run_experiment(load_experiment(path), out=tmp_path / "o", jobs=1, plots=False)
    config = tmp_path / "o" / "points" / "0001" / "config.yaml"
    assert "paths_from:" in config.read_text()
    done = subprocess.run(
        [sys.executable, "-m", "etsim", "run", "--config", str(config), "--json", "-"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    again = json.loads(done.stdout)
    row = list(csv.DictReader((tmp_path / "o" / "results.csv").read_text().splitlines()))[1]
    assert again["cluster"] == "two_dp_jobs_packed"
    assert again["jobs"][0]["duration_ns"] == float(row["a.duration_ns"]) > float(row["b.duration_ns"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("workload: {generate: collective, type: all_reduce, npus: 8, size: 1 MiB}",
         "workload: an experiment of clusters names it in the cluster file"),
        ("sweep: {size: [1 MiB, 2 MiB]}", "size: an experiment of clusters sweeps the cluster's keys"),
        ("sweep: {cluster.placement: [packed, tight]}", "jobs[0].placement: expected packed, spread"),
        ("sweep: {cluster.jobs: [[{name: a}]]}", "jobs[0].workload: missing"),
    ],
)  # fmt: skip
def test_a_bad_experiment_of_clusters_is_one_line(write, capsys, body, message) -> None:
    assert main(["experiment", "show", str(_experiment(write, body))]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_an_inline_cluster_is_named_once_in_an_error(write, capsys) -> None:
    path = write("e.yaml", "cluster: {topology: {switch: {npus: 4}}, jobs: [{name: a}], colour: red}\n")
    assert main(["experiment", "show", str(path)]) == 1
    err = capsys.readouterr().err
    assert "e.yaml: cluster: inline mapping: jobs[0].workload: missing" in err, err
