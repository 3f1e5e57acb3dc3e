"""The shipped cluster files run, and tell the placement story docs/cluster.md tells."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.cluster import load_cluster, run_cluster

CLUSTERS = Path(__file__).resolve().parents[2] / "clusters"


def _run(placement: str):
    return run_cluster(load_cluster(CLUSTERS / f"two_dp_jobs_{placement}.yaml"), alone=True)


def test_the_cluster_files_are_shipped() -> None:
    assert sorted(p.name for p in CLUSTERS.glob("*.yaml")) == [
        "two_dp_jobs_packed.yaml", "two_dp_jobs_random.yaml", "two_dp_jobs_spread.yaml",
    ]  # fmt: skip


def test_packed_jobs_keep_to_their_leaves_and_run_as_fast_as_alone() -> None:
    result = _run("packed")
    assert result.shared_links == []
    assert [job.slowdown for job in result.jobs] == [1.0, 1.0]
    assert [job.gpus for job in result.jobs] == [tuple(range(8)), tuple(range(8, 16))]
    assert f"{result.jobs[0].duration_ns / 1e6:.4f}" == "10.4992"  # docs/cluster.md's table
    assert f"{result.jobs[0].result.ranks[0].exposed_comm_ns / 1e6:.1f}" == "8.3"


@pytest.mark.parametrize("placement", ["spread", "random"])
def test_jobs_across_the_leaves_share_the_uplinks_and_slow_each_other_down(placement: str) -> None:
    result = _run(placement)
    assert all(1.5 < job.slowdown < 2.0 for job in result.jobs)
    gpus = {"spread": (0, 1, 4, 5, 8, 9, 12, 13), "random": (0, 2, 4, 5, 8, 11, 12, 15)}[placement]
    assert result.jobs[0].gpus == gpus  # docs/cluster.md's table, and its numbers:
    assert [f"{result.jobs[0].duration_ns / 1e6:.4f}", f"{result.jobs[0].alone_ns / 1e6:.4f}"] == ["19.8945", "10.5032"]
    assert f"{result.jobs[0].slowdown:.3f}" == "1.894"
    uses = result.shared_links[0]["jobs"]
    assert [uses["a"]["bytes"], f"{uses['a']['utilisation']:.0%}"] == [448 * 2**20, "47%"]
    uplinks = {(e["src"], e["dst"]) for e in result.shared_links}
    assert uplinks == {(f"s{leaf}", "s4") for leaf in range(4)} | {("s4", f"s{leaf}") for leaf in range(4)}
    # The alone time is the packed one but for the extra hops: the slowdown is the shared uplinks'.
    packed = _run("packed").jobs[0].duration_ns
    assert result.jobs[0].alone_ns == pytest.approx(packed, rel=1e-3)
