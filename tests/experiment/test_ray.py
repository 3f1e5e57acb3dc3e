"""The Ray engine: a real (local, 2-CPU) Ray cluster runs a small sweep; the files equal the pool's."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.experiment import load_experiment, run_experiment

from .conftest import without_wall

pytest.importorskip("ray")


def test_ray_sweep_equals_the_local_pool(small: Path, tmp_path: Path) -> None:
    exp = load_experiment(small)
    summary = run_experiment(exp, out=tmp_path / "ray", engine="ray", jobs=2, plots=False)
    assert (summary.ok, summary.failed) == (6, 0)
    run_experiment(exp, out=tmp_path / "local", jobs=2, plots=False)
    assert without_wall(tmp_path / "ray") == without_wall(tmp_path / "local")


def test_an_unreachable_cluster_is_a_clear_error(small: Path, tmp_path: Path) -> None:
    from etsim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--ray-address 127.0.0.1:1: cannot reach a Ray cluster there"):
        exp = load_experiment(small)
        run_experiment(exp, out=tmp_path / "o", engine="ray", engine_options={"address": "127.0.0.1:1"})
