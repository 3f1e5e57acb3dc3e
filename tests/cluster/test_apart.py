"""Jobs whose routes share no link run apart (``cluster/apart.py``): the same figures, folded where they can be.

Every comparison is against the same cluster run with ``together=True`` (one simulation of every rank, each
message charged to its job): equal to the bit but for the simulation statistics, and, where a job folds, the
collective records of the ranks its fold mirrors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from etsim.cluster import load_cluster, run_cluster
from etsim.cluster.apart import share_no_link
from etsim.cluster.run import _placed
from etsim.cluster.settings import cluster_network as _network

REPO = Path(__file__).resolve().parents[2]
SMALL = {"layers": 4, "hidden": 256, "heads": 8, "vocab": 1000, "seq": 128}


def _job(name: str, placement: Any = "packed", **values: Any) -> dict[str, Any]:
    layout = {"tp": 2, "pp": 2, "dp": 8, **values}
    return {"name": name, "workload": {"generate": "transformer", "model": SMALL, "global_batch": 32, **layout},
            "placement": placement}  # fmt: skip


def _spec(tmp_path: Path, jobs: list[dict[str, Any]], **keys: Any) -> Any:
    system = {"resources": {"comm_streams": 0}, "algorithms": {"default": "ring"}}
    data = {"topology": {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 64}, "model": "flow", "system": system,
            "jobs": jobs, **keys}  # fmt: skip
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_cluster(path)


def _figures(result: Any, collectives: bool = True) -> dict[str, Any]:
    data = result.to_dict()
    data.pop("sim")
    for job in data["jobs"]:
        job["result"].pop("sim")
        if not collectives:
            job["result"].pop("collectives")
    return data


@pytest.mark.parametrize("model", ["flow", "link", "analytical"])
def test_jobs_that_share_no_link_run_apart_and_give_the_shared_runs_figures(tmp_path: Path, model: str) -> None:
    spec = _spec(tmp_path, [_job("a"), _job("b")], model=model)
    assert share_no_link(_network(spec), _placed(spec, _network(spec)))
    apart, together = run_cluster(spec, alone=True), run_cluster(spec, alone=True, together=True)
    assert apart.result.sim["apart"].startswith("2 jobs share no link")
    assert together.result.sim["not_folded"].startswith("several jobs that may share links")
    # each job on an aligned block of nodes folds by its shifts; the shared run could not
    assert [job.result.sim["folded"] for job in apart.jobs] == [
        "tp (2) × dp (2): simulated 8 of the job's 32 ranks, each standing for 4 that mirror it"
    ] * 2
    assert _figures(apart, collectives=False) == _figures(together, collectives=False)
    unfolded = _spec(tmp_path, [_job("a"), _job("b")], model=model)
    unfolded.system["fold_replicas"] = False
    assert _figures(run_cluster(unfolded)) == _figures(run_cluster(unfolded, together=True))


def test_a_straggler_unfolds_its_own_job_only(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [_job("a"), _job("b")], stragglers=[{"gpus": [3], "slowdown": 1.5}])
    apart, together = run_cluster(spec), run_cluster(spec, together=True)
    a, b = apart.jobs
    assert "folded" not in a.result.sim and a.result.sim["not_folded"].startswith("compute_slowdown makes ranks")
    assert "simulated" in b.result.sim["folded"]
    assert a.result.ranks[3].compute_ns == pytest.approx(1.5 * b.result.ranks[3].compute_ns, rel=1e-12)
    assert _figures(apart, collectives=False) == _figures(together, collectives=False)


def test_jobs_that_may_share_a_link_run_together() -> None:
    # Spread over the leaves of a 4:1 leaf-spine, the two jobs' all-reduces meet on the uplinks: one simulation.
    spec = load_cluster(REPO / "clusters" / "two_dp_jobs_spread.yaml")
    net = _network(spec)
    assert not share_no_link(net, _placed(spec, net))
    result = run_cluster(spec)
    assert "apart" not in result.result.sim and result.shared_links


def test_a_link_that_changes_during_the_run_keeps_the_jobs_together(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [_job("a"), _job("b")], faults=[{"link": [0, "s0"], "at": "1 us",
                                                           "bandwidth": "50%"}])  # fmt: skip
    net = _network(spec)
    assert net.changes and not share_no_link(net, _placed(spec, net))


def test_the_command_runs_apart_jobs_two_at_a_time_with_the_same_figures(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    spec = _spec(tmp_path, [_job("a"), _job("b")], stragglers=[{"gpus": [40], "slowdown": 1.25}])
    out = tmp_path / "apart.json"
    done = subprocess.run([sys.executable, "-m", "etsim", "cluster", "run", spec.where, "--json", str(out), "-q"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    apart = json.loads(out.read_text())
    assert apart["sim"]["apart"].endswith("(1 of them in a second process, at the same time)")
    together = json.loads(run_cluster(spec, together=True).to_json())
    for data in (apart, together):
        data.pop("sim")
        for job in data["jobs"]:
            job["result"].pop("sim")
            job["result"].pop("collectives")
    assert apart == together
