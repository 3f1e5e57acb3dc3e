"""An experiment point and ``etsim run`` of the same inputs give the same result (timing fields aside)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from etsim.chakra import write_workload
from etsim.cli import main
from etsim.experiment import load_experiment, run_experiment
from etsim.producers.workloads.base import generate

from .conftest import RING8

# A training job of two groups per rank (tensor and data parallel) and a plain collective workload.
WORKLOADS = {
    "training": {"generate": "transformer", "model": "megatron-1.7b", "tp": 2, "dp": 4, "global_batch": 4},
    "collective": {"generate": "collective", "type": "all_reduce", "npus": 8, "size": 1 << 20},
}


def _without_timing(result: dict) -> dict:
    result["sim"].pop("wall_s")
    return result


@pytest.mark.parametrize("kind", sorted(WORKLOADS))
@pytest.mark.parametrize("model", ["flow", "analytical"])
def test_a_point_reports_what_etsim_run_reports(tmp_path: Path, kind: str, model: str) -> None:
    prefix = tmp_path / "wl" / kind
    prefix.parent.mkdir()
    write_workload(generate(WORKLOADS[kind]), prefix)
    topology = tmp_path / "ring8.yaml"
    topology.write_text(RING8)
    experiment = tmp_path / "e.yaml"
    experiment.write_text(f"name: same\nworkload: {prefix}\ntopology: {topology}\nmodel: {model}\n")
    out = tmp_path / "out"
    summary = run_experiment(load_experiment(experiment), out=out, jobs=1, plots=False)
    assert (summary.ok, summary.failed) == (1, 0)
    (line,) = (out / "results.jsonl").read_text().splitlines()
    from_point = json.loads(line)["result"]
    report = tmp_path / "run.json"
    with warnings.catch_warnings():  # (both record what the run says: compared below)
        warnings.simplefilter("ignore")
        assert main(["run", str(prefix), "--topology", str(topology), "--model", model, "--json", str(report)]) == 0
    from_run = json.loads(report.read_text())
    assert _without_timing(from_point) == _without_timing(from_run)
    assert from_run["groups"], "etsim run reports exposure per group"
    assert ("training" in from_run) == (kind == "training")
