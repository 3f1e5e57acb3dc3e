"""Goodput over a long run: the seeded draw, Daly's expectation, and the cluster file's reliability block."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from etsim.cli import main
from etsim.cluster import load_cluster, run_cluster
from etsim.cluster.reliability import Reliability, expected_goodput, failure_rate, play

H = 3600e9  # ns per hour
MIN = 60e9


def test_without_failures_the_goodput_is_the_checkpoints_share_exactly() -> None:
    """48 segments of 29.5 min of work and a 30 s checkpoint fill the day exactly; τ/(τ+δ) of it is kept."""
    every, write = 29.5 * MIN, 30e9
    r = Reliability(hours=24, checkpoint_every=every, checkpoint_time=write)
    day = play(r, 0.0, step_ns=1e9)
    assert day["failures"] == 0 and day["restarting_h"] == 0
    assert day["goodput"] == pytest.approx(every / (every + write), rel=1e-12)
    assert day["expected_goodput"] == every / (every + write)
    assert day["steps"] == int(48 * every // 1e9)
    assert day["mtbf_h"] is None and day["young_checkpoint_every_s"] is None


def test_the_failure_rate_adds_up_the_components() -> None:
    r = Reliability(gpu_mtbf=50_000 * H, node_mtbf=10_000 * H, link_mtbf=100_000 * H, checkpoint_every=MIN)
    rate = failure_rate(r, gpus=1024, nodes=128, links=300)
    assert rate == pytest.approx(1024 / (50_000 * H) + 128 / (10_000 * H) + 300 / (100_000 * H), rel=1e-15)


def test_daly_expectation_in_its_limits() -> None:
    # No restart and no checkpoint cost: τ / (M (e^{τ/M} - 1)), about 1 - τ/(2M) when τ << M.
    m, tau = 100 * H, 0.5 * H
    assert expected_goodput(1 / m, tau, 0.0, 0.0) == pytest.approx(tau / (m * math.expm1(tau / m)), rel=1e-12)
    assert expected_goodput(1 / m, tau, 0.0, 0.0) == pytest.approx(1 - tau / (2 * m), abs=1e-5)
    # A restart of R costs e^{R/M} more wall time per unit of work.
    with_restart = expected_goodput(1 / m, tau, 0.0, 0.2 * H)
    assert expected_goodput(1 / m, tau, 0.0, 0.0) / with_restart == pytest.approx(math.exp(0.2 * H / m), rel=1e-12)


def test_the_seeded_draw_of_a_year_agrees_with_the_expectation() -> None:
    """A 1,024-GPU job (MTBF 48.8 h): a year of failures drawn lands within 0.2% of Daly's exact expectation."""
    r = Reliability(
        hours=24 * 365, gpu_mtbf=50_000 * H, checkpoint_every=30 * MIN, checkpoint_time=30e9, restart_time=10 * MIN
    )
    rate = failure_rate(r, gpus=1024, nodes=0, links=0)
    year = play(r, rate, step_ns=1e9)
    assert 150 < year["failures"] < 210  # 8,760 h / 48.8 h = 179 expected
    assert year["goodput"] == pytest.approx(year["expected_goodput"], abs=0.002)
    hours = year["kept_h"] + year["lost_h"] + year["checkpointing_h"] + year["restarting_h"]
    assert hours == pytest.approx(24 * 365, rel=1e-12)  # the period, all accounted for
    assert year == play(r, rate, step_ns=1e9)  # seeded
    assert year != play(r, rate, step_ns=1e9, stream=1)
    assert year["young_checkpoint_every_s"] == pytest.approx(math.sqrt(2 * 30e9 / rate) / 1e9)


def _file(tmp_path: Path, reliability: dict) -> Path:
    workload = {"generate": "collective", "type": "all_reduce", "npus": 8, "size": "1 MiB"}
    data = {
        "topology": {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 16},
        "model": "flow",
        "jobs": [{"name": "a", "workload": workload}, {"name": "b", "workload": workload}],
        "reliability": reliability,
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_cluster_file_plays_each_job_over_the_period(tmp_path) -> None:
    keys = {"hours": 24, "gpu_mtbf": "5000 h", "node_mtbf": "1000 h", "checkpoint_every": "30 min",
            "checkpoint_time": "20 s", "restart_time": "5 min", "seed": 3}  # fmt: skip
    result = run_cluster(load_cluster(_file(tmp_path, keys)))
    for i, job in enumerate(result.jobs):
        g = job.goodput
        assert g is not None
        # 8 GPUs in one node each (packed): 8/5000 + 1/1000 failures per hour.
        assert g["mtbf_h"] == pytest.approx(1 / (8 / 5000 + 1 / 1000))
        assert g["steps"] == int(g["kept_h"] * H // job.duration_ns)
        assert g == play(load_cluster(_file(tmp_path, keys)).reliability, 1 / (g["mtbf_h"] * H), job.duration_ns, i)
    assert "job a over the period: goodput" in result.table()


def test_a_bad_reliability_block_is_named(tmp_path, capsys) -> None:
    assert main(["cluster", "run", str(_file(tmp_path, {"gpu_mtbf": "5000 h"}))]) == 1
    assert "reliability.checkpoint_every: missing" in capsys.readouterr().err
    assert main(["cluster", "run", str(_file(tmp_path, {"checkpoint_every": "1 h", "mtbf": "1 h"}))]) == 1
    assert "reliability.mtbf" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"checkpoint_every": "0 s"}, "reliability.checkpoint_every: expected a time longer than 0"),
        ({"checkpoint_every": "1 ns", "hours": 1000}, "checkpoint intervals and"),
        ({"checkpoint_every": "1 h", "gpu_mtbf": "1 ns", "hours": 1000}, "failures, more than 10,000,000"),
    ],
)
def test_a_period_that_would_not_end_is_refused(keys, message) -> None:
    from etsim.errors import ConfigError

    r = Reliability(**{k: v for k, v in keys.items() if k == "hours"}, checkpoint_every=_ns(keys["checkpoint_every"]),
                    gpu_mtbf=_ns(keys["gpu_mtbf"]) if "gpu_mtbf" in keys else None)  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        play(r, failure_rate(r, gpus=1, nodes=0, links=0), step_ns=1e9)


def _ns(text: str) -> float:
    from etsim.units import parse_time

    return parse_time(text)
