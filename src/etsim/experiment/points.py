"""What an experiment is made of: axes, points and their resolved specs, and the result columns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from etsim.cluster.spec import ClusterSpec, cluster_spec
from etsim.producers.workloads.base import WORKLOAD_GENERATORS

__all__ = [
    "JOB_COLUMNS",
    "METRIC_COLUMNS",
    "POINT_KEYS",
    "TAIL_COLUMNS",
    "TRAINING_COLUMNS",
    "Axis",
    "Experiment",
    "PlotSpec",
    "Point",
    "PointSpec",
    "label",
    "point_cluster",
]

#: Keys that make up a point (each may be a sweep axis).
POINT_KEYS = ("workload", "topology", "algo", "model", "model_options", "system", "cluster")
#: The columns of each job of a cluster experiment (``JOB.duration_ns`` …; :mod:`etsim.cluster`).
JOB_COLUMNS = ("duration_ns", "alone_ns", "slowdown")
#: Result columns every results.csv has; ``<collective>_ns`` columns are inserted after ``exposed_comm_ns``.
METRIC_COLUMNS = ("finish_ns", "compute_ns", "comm_ns", "exposed_comm_ns")
TAIL_COLUMNS = ("messages", "bytes", "error", "warnings", "wall_s")
#: The step-report columns of experiments whose workload is a generated training job (:mod:`etsim.report.training`).
TRAINING_COLUMNS = (
    "iteration_ns", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu", "hfu",
    "bubble_fraction", "exposed_tp_ns", "exposed_pp_ns", "exposed_dp_ns", "exposed_ep_ns", "exposed_cp_ns",
)  # fmt: skip


@dataclass(frozen=True)
class Axis:
    """One sweep axis: a key and its values, each with the label written to results."""

    key: str
    values: tuple[Any, ...]
    labels: tuple[str, ...]
    """The value as written (a scalar's text, a mapping in YAML flow style) or the label given."""
    where: tuple[str, ...]
    """Where each value sits in the file (``sweep.size[2]``), for messages."""


@dataclass(frozen=True)
class PointSpec:
    """A fully resolved point: what :func:`etsim.simulation.simulate` is called with.

    Paths are absolute; generator sizes are bytes; the model is explicit. JSON-serialisable, so
    it is what a worker receives and what caches are keyed on.
    """

    workload: str | dict[str, Any]
    """An absolute workload path, or a normalized generator mapping."""
    topology: str | dict[str, Any] | None
    """An absolute topology path, an inline topology mapping, or None (simulate's default ring)."""
    algo: dict[str, str | dict[str, Any]]
    """Collective name or ``default`` → algorithm name, absolute path, or ``{tacos: {…}}``."""
    model: str
    model_options: dict[str, Any]
    system: dict[str, Any]
    """A system mapping (as :func:`~etsim.system.config.load_system_config` reads) with absolute paths."""
    cluster: dict[str, Any] | None = None
    """A cluster point: ``{file: the cluster file's mapping, base: the directory its paths resolve against, name}``
    (then the other fields only describe it: the cluster file holds the workloads, topology, model and system)."""

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain mapping."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Point:
    """One simulation of an experiment."""

    id: str
    """Zero-padded index in the full expansion (stable under ``--only``); results are ordered by it."""
    labels: tuple[str, ...]
    """The value of every axis as written, in :attr:`Experiment.axes` order."""
    repeat: int
    spec: PointSpec


@dataclass(frozen=True)
class PlotSpec:
    """One plot declared in an experiment (drawn by :mod:`etsim.experiment.plots`)."""

    name: str
    x: str
    y: str
    series: str | None = None
    facet: str | None = None
    baseline: str | None = None
    """A label of the ``series`` axis: y becomes relative to that series."""
    relative: str = "slowdown"
    """``slowdown`` (y / baseline) or ``speedup`` (baseline / y)."""
    where: dict[str, str] = field(default_factory=dict)
    logx: bool | None = None
    """None: log scale when x holds sizes or times spanning more than a factor of 100."""
    logy: bool = False
    title: str | None = None
    xlabel: str | None = None
    ylabel: str | None = None
    formats: tuple[str, ...] = ("png", "svg")


@dataclass
class Experiment:
    """A loaded, validated experiment."""

    path: Path | None
    name: str
    description: str
    axes: list[Axis]
    repeat: int
    points: list[Point]
    collectives: list[str]
    """Collective types any point's workload uses (each gets a ``<type>_ns`` column)."""
    plots: list[PlotSpec]
    text: str = ""
    """The file as written."""
    jobs: list[str] = field(default_factory=list)
    """The jobs of a cluster experiment's points (each gets the :data:`JOB_COLUMNS`)."""

    @property
    def axis_keys(self) -> list[str]:
        """Axis column names, in order."""
        return [a.key for a in self.axes]

    @property
    def training(self) -> bool:
        """Whether some point's workload is a generated training job (the step-report columns are added)."""
        return any(_training_generator(p.spec.workload) for p in self.points)

    @property
    def columns(self) -> list[str]:
        """The header of ``results.csv``."""
        cols = ["point", *self.axis_keys]
        if self.repeat > 1:
            cols.append("repeat")
        cols += ["network_model", "status", *METRIC_COLUMNS, *(f"{c}_ns" for c in self.collectives)]
        cols += [*self.job_columns, *(TRAINING_COLUMNS if self.training else ()), *TAIL_COLUMNS]
        return cols

    @property
    def job_columns(self) -> list[str]:
        """``JOB.duration_ns``, ``JOB.alone_ns``, ``JOB.slowdown`` for each job of a cluster experiment."""
        return [f"{job}.{column}" for job in self.jobs for column in JOB_COLUMNS]

    @property
    def numeric_columns(self) -> list[str]:
        """Result columns holding numbers (what a plot's ``y`` may name)."""
        training = TRAINING_COLUMNS if self.training else ()
        collectives = (f"{c}_ns" for c in self.collectives)
        return [*METRIC_COLUMNS, *collectives, *self.job_columns, *training, "messages", "bytes", "wall_s"]


def point_cluster(source: Mapping[str, Any]) -> ClusterSpec:
    """A cluster point's cluster (``PointSpec.cluster``), checked.

    Its file's mapping, paths resolved from ``base`` (moved by the mapping's ``paths_from``).
    """
    base = Path(source["base"]) / str(source["file"].get("paths_from", "."))
    file = {k: v for k, v in source["file"].items() if k != "paths_from"}
    name = source["name"]
    # (an inline mapping's name is "cluster": the experiment's key already says so)
    where = "inline mapping" if name == "cluster" else f"cluster {name}"
    return cluster_spec(file, where=where, base=base.resolve(), name=name)


def _training_generator(workload: Any) -> bool:
    """Whether *workload* (a point's resolved spec) is made by a generator of training jobs (step reports)."""
    if not isinstance(workload, Mapping) or "generate" not in workload:
        return False
    return WORKLOAD_GENERATORS.get(workload["generate"]).training_job


def label(value: Any) -> str:
    """A value as an axis label: a scalar's text, a mapping or list in YAML flow style."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, Mapping | list):
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 30).strip()
    return str(value)
