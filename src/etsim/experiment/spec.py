"""Experiment files: schema, strict validation and expansion into points.

An experiment file is one YAML mapping (reference: ``docs/experiments.md``)::

    name: fig4                      # results/<name>/ unless --out says otherwise (default: file stem)
    description: free text
    workload: workloads/x           # a path, or {generate: KIND, …} (etsim.producers.workloads)
    topology: topologies/ring64.yaml  # a path, an inline topology mapping, or absent (default ring)
    algo: ring                      # name | ET family | MSCCL-IR XML | {all_reduce: …, default: …}
                                    # | {tacos: {chunks_per_npu: 2, seed: 0}}
    model: link                     # network model name or module:Class / file.py:Class
    model_options: {packet_size: 64 KiB}
    system: {chunks: 1}             # a system YAML's keys, inline, or a path
    sweep: {KEY: [V1, V2], …}       # Cartesian product; a list, or a mapping LABEL: VALUE
    zip: {KEY: [..], KEY2: [..]}    # axes that vary together (or a list of such groups)
    repeat: 1
    plots: [...]                    # etsim.experiment.plots

An axis KEY is a point key above (the whole value), a dotted key reaching into a mapping
(``workload.size``, ``system.chunks``, ``topology.bandwidth``, ``algo.all_gather``), or a bare
parameter of the workload generator (``size`` means ``workload.size``). Relative paths resolve
against the experiment file. Everything is checked before anything runs: each error is one
:class:`~etsim.errors.ConfigError` naming the file and the key.

A *point* is one simulation: the experiment's values with one value of every axis substituted,
resolved into a :class:`PointSpec` (absolute paths, generator parameters in bytes, the network
model made explicit). A point's ``config.yaml`` is an experiment file without a sweep, so
``etsim run --config`` and ``etsim experiment run`` read it with this same module.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etsim.experiment.plotspec import PlotSpec, parse_plots
from etsim.experiment.points import METRIC_COLUMNS, POINT_KEYS, TAIL_COLUMNS, Axis, Experiment, Point, PointSpec
from etsim.experiment.sweep import MAX_POINTS, expand, parse_axis, select_points
from etsim.files import read_yaml_mapping as read_yaml
from etsim.options import Integer, Name, Optional, Text, keys_named, option, parse_options
from etsim.simulation.inputs import Values

__all__ = [
    "POINT_KEYS",
    "Axis",
    "Experiment",
    "PlotSpec",
    "Point",
    "PointSpec",
    "load_experiment",
    "parse_plots",
    "point_config",
    "read_yaml",
    "select_points",
]


@dataclass(frozen=True, kw_only=True)
class ExperimentFile:
    """The top-level keys of an experiment file (the point keys are resolved by :class:`Values`)."""

    name: str | None = option(None, "results/<name>/ unless --out says otherwise (default: the file's stem)", Name())
    description: str | None = option(None, "free text", Optional(Text(what="text")))
    workload: Any = option(None, "a path, or {generate: KIND, …}")
    topology: Any = option(None, "a path, an inline topology mapping, or absent (the default ring)")
    algo: Any = option(None, "name | ET family | MSCCL-IR XML | {all_reduce: …, default: …} | {tacos: {…}}")
    model: Any = option(None, "network model name, module:Class or file.py:Class")
    model_options: Any = option(None, "the model's options")
    system: Any = option(None, "a system YAML's keys inline, or its path")
    cluster: Any = option(None, "a cluster file (docs/cluster.md), or its mapping inline: its jobs run at each point")
    sweep: Any = option(None, "axes: KEY: [V1, V2] (Cartesian product)")
    zip: Any = option(None, "axes that vary together")
    repeat: int = option(1, "runs of every point (seeds advance)", Integer(1, MAX_POINTS))
    plots: Any = option(None, "plots of the results")


def load_experiment(source: str | os.PathLike[str]) -> Experiment:
    """Load and validate an experiment file; expand its points.

    Raises:
        ConfigError: anything wrong in the file, before anything runs: an unknown key, a missing file, a bad
            unit, an empty sweep, a plot naming a column that does not exist, …; the message names
            the file and the key. What only a point's run finds (a topology smaller than its workload, an
            algorithm that cannot run there) fails that point, recorded with its error in the results.
    """
    path = Path(source)
    data, text = read_yaml(path)
    where = str(path)
    values = Values(where, path.resolve().parent)
    escaped = where.replace("{", "{{").replace("}", "}}")
    top = ExperimentFile(
        **parse_options(
            ExperimentFile,
            data,
            key=keys_named(where),
            unknown=escaped + ": {name}: unknown key; valid keys: {valid}",
            sort_valid=False,
        )
    )
    name = top.name if top.name is not None else path.stem
    if top.name is None:
        ExperimentFile.__dataclass_fields__["name"].metadata["parse"](name, key=f"{where}: name")
    description, repeat = top.description or "", top.repeat

    axes: list[Axis] = []
    groups: list[list[int]] = []
    if "sweep" in data:
        sweep = data["sweep"]
        if not isinstance(sweep, Mapping):
            raise values.error(["sweep"], "expected a mapping of axis keys to lists of values")
        if not sweep:
            raise values.error(["sweep"], "empty sweep: give at least one axis (or leave sweep out for one point)")
        for key, spec in sweep.items():
            axes.append(parse_axis(values, key, spec, "sweep"))
            groups.append([len(axes) - 1])
    if "zip" in data and data["zip"] not in (None, {}, []):
        zips = data["zip"]
        zip_groups = zips if isinstance(zips, list) else [zips]
        for gi, group in enumerate(zip_groups):
            gwhere = "zip" if not isinstance(zips, list) else f"zip[{gi}]"
            if not isinstance(group, Mapping) or not group:
                raise values.error([gwhere], "expected a mapping of axis keys to lists of equal length")
            members = []
            for key, spec in group.items():
                axes.append(parse_axis(values, key, spec, gwhere))
                members.append(len(axes) - 1)
            lengths = {axes[i].key: len(axes[i].values) for i in members}
            if len(set(lengths.values())) != 1:
                raise values.error([gwhere], f"zipped axes must have equal lengths, got {lengths}")
            groups.append(members)
    seen: set[str] = set()
    reserved = {"point", "repeat", "network_model", "status", *METRIC_COLUMNS, *TAIL_COLUMNS}
    for axis in axes:
        if axis.key in seen:
            raise values.error([axis.key], "the axis is given twice (sweep and zip share keys)")
        if axis.key in reserved or axis.key.endswith("_ns"):
            raise values.error([axis.key], "the axis name clashes with a result column")
        seen.add(axis.key)
        if axis.key.startswith("model."):
            raise values.error([axis.key], "model is a name; it has no keys to set (use model_options.KEY)")
    _refuse_aliases(values, axes)
    _check_cluster(values, data, axes)
    points, collectives, jobs = expand(values, data, axes, groups, repeat)
    experiment = Experiment(path, name, description, axes, repeat, points, collectives, [], text, jobs)
    experiment.plots = parse_plots(where, data.get("plots"), axes, experiment.numeric_columns, data.get("zip"))
    return experiment


#: What a cluster file holds: an experiment of clusters gives none of these itself.
_CLUSTER_HOLDS = ("workload", "topology", "algo", "model", "model_options", "system")


def _check_cluster(values: Values, data: Mapping[str, Any], axes: list[Axis]) -> None:
    """An experiment of clusters (``cluster``, or axes of it) sweeps cluster keys only, and names no workload."""
    roots = {axis.key.split(".")[0] for axis in axes}
    if "cluster" not in data and "cluster" not in roots:
        return
    for key in _CLUSTER_HOLDS:
        if key in data:
            raise values.error([key], "an experiment of clusters names it in the cluster file (its jobs, topology …)")
    for axis in axes:
        if axis.key.split(".")[0] != "cluster":
            raise values.error(
                [axis.key],
                "an experiment of clusters sweeps the cluster's keys: cluster, cluster.placement (every job's), "
                "cluster.jobs, cluster.stragglers, cluster.faults, cluster.topology, cluster.system.KEY …",
            )


def _refuse_aliases(values: Values, axes: list[Axis]) -> None:
    """Refuse two axes that set one value (``size`` and ``workload.size``): one would overwrite the other.

    Both would label the results while only one took effect. An axis of a whole point key and one of a key
    inside it (``topology`` and ``topology.bandwidth``) compose: the second sets a key of what the first picked.
    """
    seen: dict[tuple[str, ...], str] = {}
    for axis in axes:
        parts = axis.key.split(".")
        path = tuple(parts if parts[0] in POINT_KEYS else ["workload", *parts])
        other = seen.get(path)
        if other is not None:
            raise values.error([other, axis.key], f"the axes set the same value, {'.'.join(path)}; keep one of them")
        seen[path] = axis.key


def point_config(spec: PointSpec, directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The point as an experiment mapping without a sweep, paths relative to *directory*.

    Loading it with :func:`load_experiment` from a file in *directory* gives back *spec*.
    """
    d = os.fspath(directory)

    def rel(path: str) -> str:
        # Relative when the file and the config share a tree (a repository moved whole keeps working),
        # absolute when they only share the root.
        try:
            shared = os.path.commonpath([os.path.abspath(path), os.path.abspath(d)])
        except ValueError:  # pragma: no cover - different drives
            return path
        return os.path.relpath(path, d) if shared != os.path.sep else path

    def algo_value(v: str | dict[str, Any]) -> str | dict[str, Any]:
        return rel(v) if isinstance(v, str) and os.path.isabs(v) else v

    if spec.cluster is not None:  # its mapping as written, its paths resolved from where they were
        cluster = dict(spec.cluster["file"])
        base = os.path.join(spec.cluster["base"], str(cluster.pop("paths_from", ".")))
        named = {"name": spec.cluster["name"]} if "name" not in cluster else {}
        return {"cluster": {**named, **cluster, "paths_from": rel(os.path.normpath(base))}}
    out: dict[str, Any] = {"workload": rel(spec.workload) if isinstance(spec.workload, str) else spec.workload}
    if spec.topology is not None:
        out["topology"] = rel(spec.topology) if isinstance(spec.topology, str) else spec.topology
    if spec.algo:
        out["algo"] = {k: algo_value(v) for k, v in spec.algo.items()}
    module, sep, cls = spec.model.rpartition(":")
    out["model"] = f"{rel(module)}:{cls}" if sep and os.path.isabs(module) else spec.model
    if spec.model_options:
        out["model_options"] = spec.model_options
    if spec.system:
        system = dict(spec.system)
        if isinstance(system.get("comm_groups"), str):
            system["comm_groups"] = rel(system["comm_groups"])
        if isinstance(system.get("algorithms"), dict):
            system["algorithms"] = {k: algo_value(v) for k, v in system["algorithms"].items()}
        out["system"] = system
    return out
