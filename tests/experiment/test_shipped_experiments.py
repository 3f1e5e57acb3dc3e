"""The shipped experiments run (at a reduced size) and agree point by point with `etsim run`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from etsim.chakra import write_workload
from etsim.cli import main
from etsim.experiment import load_experiment, run_experiment
from etsim.producers.workloads import generate as build_generated

from .conftest import REPO, rows

EXPERIMENTS = sorted((REPO / "experiments").glob("*.yaml"))


def test_the_experiments_are_shipped() -> None:
    assert [p.name for p in EXPERIMENTS] == [
        "algorithms_vs_size.yaml", "cluster_placements.yaml", "degraded_mesh.yaml", "gpt3_parallelism.yaml",
        "moe_expert_parallelism.yaml", "moe_router_imbalance.yaml", "seed_fig4.yaml", "straggler_sweep.yaml",
    ]  # fmt: skip


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_shipped_experiment_validates_and_names_its_model(path: Path, capsys) -> None:
    exp = load_experiment(path)
    # Training jobs take tens of seconds a point, a straggler's 1,024 ranks a minute, a cluster runs every job twice;
    # collective sweeps are cheap and wide.
    workload = exp.points[0].spec.workload
    huge = isinstance(workload, dict) and workload.get("npus", 0) >= 1024
    assert exp.plots and len(exp.points) >= (12 if exp.training or exp.jobs else 6 if huge else 30)
    # The model is explicit, whatever the default model becomes (a cluster's, in its cluster file).
    assert "model:" in (
        path.read_text() if not exp.jobs else (REPO / "clusters" / "two_dp_jobs_packed.yaml").read_text()
    )
    assert main(["experiment", "show", str(path)]) == 0
    assert f"{len(exp.points)} of {len(exp.points)} points" in capsys.readouterr().out


def test_seed_fig4_reduced_matches_etsim_run_point_by_point(tmp_path: Path, capsys) -> None:
    path = REPO / "experiments" / "seed_fig4.yaml"
    exp = load_experiment(path)
    out = tmp_path / "fig4"
    summary = run_experiment(exp, out=out, only=["size=16 KiB"], jobs=2)
    assert (summary.ok, summary.failed) == (24, 0)  # 8 topologies x 3 models
    assert {p.name for p in (out / "plots").iterdir()} >= {"slowdown.png", "slowdown.svg"}
    table = rows(out / "results.csv")
    # The same points through the command line: the workload written as files, the XMLs given to --algo.
    point = next(p for p in exp.points if p.labels[1] == "16 KiB")  # all 24 points share this workload
    prefix = tmp_path / "wl" / "seq"
    prefix.parent.mkdir()
    write_workload(build_generated(point.spec.workload), prefix)
    topologies = {p.labels[0]: p.spec.topology for p in exp.points}
    models = {"analytical": "analytical", "flow": "flow", "packet-level": "link"}
    for row in table:
        assert row["status"] == "ok" and row["network_model"] == models[row["model"]]
        report = tmp_path / f"{row['point']}.json"
        if row["model"] == "packet-level":  # model options have no flag: the point's own config gives them
            argv = ["run", "--config", str(out / "points" / row["point"] / "config.yaml")]
        else:
            argv = ["run", str(prefix), "--topology", str(topologies[row["topology"]]), "--model", row["model"]]
            argv += ["--algo", f"all_reduce={REPO / 'algorithms' / 'msccl_ring_allreduce_64npus.xml'}"]
            argv += ["--algo", f"all_gather={REPO / 'algorithms' / 'msccl_ring_allgather_64npus.xml'}"]
        assert main([*argv, "--json", str(report), "--quiet"]) == 0
        alone = json.loads(report.read_text())
        assert float(row["finish_ns"]) == alone["finish_ns"], row["topology"]
        assert int(row["messages"]) == alone["network"]["messages"]
    by = {(r["topology"], r["model"]): float(r["finish_ns"]) for r in table}
    # Every topology is at least as slow as the 1-D ring for the ring algorithm (the paper's Fig. 4).
    assert all(by[(t, m)] >= by[("ring", m)] for t, m in by)


@pytest.mark.parametrize(("name", "only"), [("algorithms_vs_size", "size=64 KiB"), ("degraded_mesh", "size=256 KiB")])
def test_other_experiments_run_reduced(name: str, only: str, tmp_path: Path) -> None:
    exp = load_experiment(REPO / "experiments" / f"{name}.yaml")
    summary = run_experiment(exp, out=tmp_path / name, only=[only], jobs=2, plots=False)
    assert summary.failed == 0 and summary.ok == summary.selected >= 6
    table = rows(tmp_path / name / "results.csv")
    tacos = [r for r in table if r["algo"] == "tacos"]
    ring = [r for r in table if r["algo"] == "ring"]
    assert tacos and ring
    # A synthesised algorithm beats the linear ring on a mesh (the ring's row wrap-around is 4 hops).
    assert min(float(r["finish_ns"]) for r in tacos) < min(float(r["finish_ns"]) for r in ring)


def test_ring_xmls_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_msccl_ring.py"), "--check"], capture_output=True
    )
    assert result.returncode == 0, result.stderr.decode()


def test_ring_xml_generator_reproduces_the_corpus_byte_for_byte(corpus: Path) -> None:
    generated = corpus / "msccl" / "generated"
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import gen_msccl_ring
    finally:
        sys.path.pop(0)
    assert gen_msccl_ring.allreduce_ring(8) == (generated / "allreduce_ring_n8_c1_i1_LL128.xml").read_text()


def test_the_moe_experiment_runs_reduced_with_the_step_report_columns(tmp_path: Path) -> None:
    exp = load_experiment(REPO / "experiments" / "moe_expert_parallelism.yaml")
    summary = run_experiment(exp, out=tmp_path / "moe", only=["workload.ep=8", "workload.ep=4"], jobs=2, plots=False)
    assert summary.failed == 0 and summary.ok == 6
    table = rows(tmp_path / "moe" / "results.csv")
    by = {(r["topology"], r["workload.ep"]): r for r in table}
    for r in table:
        assert float(r["iteration_ns"]) == float(r["finish_ns"]) and 0 < float(r["mfu"]) < 1
        assert float(r["exposed_ep_ns"]) > 0
    # Eight expert-parallel ranks send tokens across the rails, so a 4:1 oversubscribed fabric costs more there.
    assert float(by[("dgx_h100_oversubscribed", "8")]["exposed_ep_ns"]) > float(by[("dgx_h100", "8")]["exposed_ep_ns"])
    # A faster fabric is never slower.
    assert float(by[("dgx_h100", "8")]["finish_ns"]) <= float(by[("dgx_h100_oversubscribed", "8")]["finish_ns"])
