"""Experiments: YAML-driven sweeps of simulations, run in parallel, with results tables and plots.

Typical use::

    from etsim.experiment import load_experiment, run_experiment

    experiment = load_experiment("experiments/seed_fig4.yaml")
    summary = run_experiment(experiment, out="results/fig4", only=["size=1 MiB"])
    print(summary.ok, summary.failed)        # results/fig4/results.csv, results.jsonl, plots/

The layer sits on :func:`etsim.simulation.simulate` and touches nothing below it. Modules:
:mod:`~etsim.experiment.spec` (the file format, validation, points; ``workload: {generate: …}`` is any
registered workload generator, :mod:`etsim.producers.workloads`), :mod:`~etsim.experiment.worker` (a point →
``simulate()``, cached inputs), :mod:`~etsim.experiment.engines` (process pool, Ray),
:mod:`~etsim.experiment.results` (CSV/JSONL, resume), :mod:`~etsim.experiment.plots` (matplotlib). Reference:
``docs/experiments.md``.
"""

from etsim.cluster import ClusterResult
from etsim.errors import ConfigError
from etsim.experiment.runner import RunSummary, run_experiment
from etsim.experiment.spec import Experiment, PlotSpec, Point, PointSpec, load_experiment, select_points
from etsim.experiment.worker import simulate_cluster_point, simulate_point
from etsim.report.result import Result

__all__ = [
    "Experiment",
    "PlotSpec",
    "Point",
    "PointSpec",
    "Result",
    "RunSummary",
    "load_config_point",
    "load_experiment",
    "run_experiment",
    "select_points",
    "simulate_config",
    "simulate_point",
]


def load_config_point(path: str) -> Point:
    """The one point of a point configuration file.

    That is ``DIR/points/<id>/config.yaml``, or any experiment file without a sweep.

    Raises:
        ConfigError: the file is invalid or describes more than one point.
    """
    experiment = load_experiment(path)
    if len(experiment.points) != 1:
        raise ConfigError(
            f"{path}: --config takes one point; this file has {len(experiment.points)} "
            "(run it with `etsim experiment run`)"
        )
    return experiment.points[0]


def simulate_config(path: str) -> Result | ClusterResult:
    """Simulate the one point of *path* exactly as a sweep ran it (``etsim run --config``).

    A cluster point gives its :class:`~etsim.cluster.ClusterResult` (its jobs together, and each alone).
    """
    spec = load_config_point(path).spec
    return simulate_cluster_point(spec) if spec.cluster is not None else simulate_point(spec)
