"""Sweeps: axes, their Cartesian product and zip groups, expanded into points; ``--only`` selection."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from etsim.cluster.spec import ClusterSpec
from etsim.errors import ConfigError, EtsimError
from etsim.experiment.points import POINT_KEYS, Axis, Experiment, Point, PointSpec, label, point_cluster
from etsim.options import option_help
from etsim.producers.workloads.base import WORKLOAD_GENERATORS
from etsim.simulation.inputs import Values
from etsim.units import parse_size

__all__ = ["expand", "parse_axis", "select_points"]


def parse_axis(values: Values, key: Any, spec: Any, where: str) -> Axis:
    """One axis of ``sweep`` or ``zip`` (*where*): a list of values, or a mapping LABEL: VALUE."""
    if not isinstance(key, str) or not key:
        raise values.error([where], f"axis names must be strings, got {key!r}")
    if isinstance(spec, Mapping):
        if not spec:
            raise values.error([f"{where}.{key}"], "empty axis: give at least one value")
        labels = tuple(label(k) for k in spec)
        items = tuple(spec.values())
        wheres = tuple(f"{where}.{key}.{text}" for text in labels)
    elif isinstance(spec, list):
        if not spec:
            raise values.error([f"{where}.{key}"], "empty axis: give at least one value")
        items = tuple(spec)
        labels = tuple(label(v) for v in items)
        wheres = tuple(f"{where}.{key}[{i}]" for i in range(len(items)))
    else:
        raise values.error([f"{where}.{key}"], f"expected a list of values or a mapping LABEL: VALUE, got {spec!r}")
    if len(set(labels)) != len(labels):
        dup = next(text for text in labels if labels.count(text) > 1)
        raise values.error([f"{where}.{key}"], f"value {dup!r} appears twice")
    return Axis(key, items, labels, wheres)


def _set_dotted(target: dict[str, Any], path: list[str], value: Any, key: str) -> None:
    node = target
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"cannot set {key}: {part!r} holds {child!r}, not a mapping")
        node = child
    node[path[-1]] = copy.deepcopy(value)


def _as_mapping(values: Values, root: str, value: Any, axis_key: str) -> dict[str, Any]:
    """The value of point key *root* as a mapping a dotted axis can reach into."""
    if isinstance(value, dict):
        return copy.deepcopy(value)
    if root == "workload":
        raise ConfigError(
            f"{axis_key}: the workload is {value!r}, not a generator mapping {{generate: …}} whose parameters "
            f"an axis can set (generator parameters: "
            + "; ".join(f"{k}: {', '.join(option_help(cls.Options))}" for k, cls in WORKLOAD_GENERATORS.items())
            + ")"
        )
    if value is None and root in ("algo", "system", "model_options"):
        return {}
    if root == "algo" and isinstance(value, str):
        return {"default": value}
    if root in ("topology", "system") and isinstance(value, str):
        data = values.yaml_mapping(values.abspath(value), root)
        if root == "topology":
            data.setdefault("name", Path(value).stem)
        else:
            data = values.system_paths(data, Path(values.abspath(value)).parent)
        return data
    raise ConfigError(f"{axis_key}: {root} is {value!r}, which has no keys to set")


#: The most points one experiment may have (checked before any point is built).
MAX_POINTS = 100_000


def expand(
    values: Values, data: Mapping[str, Any], axes: list[Axis], groups: list[list[int]], repeat: int
) -> tuple[list[Point], list[str], list[str]]:
    """Every point of the experiment *data*, the collective types their workloads use, and a cluster's jobs.

    One point per combination of the axis *groups* (zipped axes move together), *repeat* times.
    """
    base = {k: data.get(k) for k in POINT_KEYS}
    whole = [i for i, a in enumerate(axes) if a.key in POINT_KEYS]
    partial = [i for i, a in enumerate(axes) if a.key not in POINT_KEYS]
    total = repeat
    for group in groups:
        total *= len(axes[group[0]].values)
    if total > MAX_POINTS:
        sizes = " x ".join(str(len(axes[g[0]].values)) for g in groups) or "1"
        raise values.error(
            ["sweep"],
            f"{sizes} combinations x repeat {repeat} make {total:,} points, more than etsim's limit of "
            f"{MAX_POINTS:,} per experiment; split it into several experiments or zip axes that move together",
        )
    width = max(4, len(str(total - 1)))
    points: list[Point] = []
    collectives: dict[str, None] = {}
    jobs: dict[str, None] = {}
    choices = [range(len(axes[g[0]].values)) for g in groups]
    for combo in itertools.product(*choices):
        pick = [0] * len(axes)
        for g, c in zip(groups, combo, strict=True):
            for i in g:
                pick[i] = c
        raw = dict(base)
        origins: dict[str, list[str]] = {k: [k] for k in POINT_KEYS}
        for i in whole:
            raw[axes[i].key] = axes[i].values[pick[i]]
            origins[axes[i].key] = [axes[i].where[pick[i]]]
        for i in partial:
            axis = axes[i]
            parts = axis.key.split(".")
            if parts[0] not in POINT_KEYS:
                parts = ["workload", *parts]
            root = parts[0]
            where = axis.where[pick[i]]
            try:
                if root == "cluster":
                    raw[root] = _set_cluster(values, raw[root], parts[1:], axis.values[pick[i]], axis.key)
                else:
                    mapping = _as_mapping(values, root, raw[root], axis.key)
                    _set_dotted(mapping, parts[1:], axis.values[pick[i]], axis.key)
                    raw[root] = mapping
            except EtsimError as exc:
                raise values.error([where], str(exc)) from None
            origins[root] = [*origins[root], where]
        if raw["cluster"] is not None:
            spec, cluster = _resolve_cluster(values, raw["cluster"], origins["cluster"])
            jobs.update((job.name, None) for job in cluster.jobs)
            workloads = cluster.job_workloads
        else:
            spec = _resolve(values, raw, origins)
            workloads = [spec.workload]
        for workload in workloads:
            collectives.update((name, None) for name in values.collectives(workload))
        labels = tuple(a.labels[pick[i]] for i, a in enumerate(axes))
        for r in range(repeat):
            index = len(points)
            points.append(Point(str(index).zfill(width), labels, r, _with_repeat(spec, r) if r else spec))
    return points, list(collectives), list(jobs)


def _with_repeat(spec: PointSpec, r: int) -> PointSpec:
    """Repeat *r* of a point: every seed of something drawn at random advances by *r*.

    TACOS seeds, a model's ``seed`` option, the system's ``jitter_seed`` (with ``compute_jitter``) and a training
    job's ``routing_seed`` (with ``expert_imbalance``): repeats of a point that draws nothing are identical.
    """
    algo = {
        k: {"tacos": {**v["tacos"], "seed": v["tacos"]["seed"] + r}} if isinstance(v, dict) else v
        for k, v in spec.algo.items()
    }
    options = dict(spec.model_options)
    if isinstance(options.get("seed"), int) and not isinstance(options["seed"], bool):
        options["seed"] += r
    system = dict(spec.system)
    if system.get("compute_jitter"):
        system["jitter_seed"] = int(system.get("jitter_seed", 0)) + r
    workload = spec.workload
    if isinstance(workload, dict) and workload.get("expert_imbalance"):
        workload = {**workload, "routing_seed": int(workload.get("routing_seed", 0)) + r}
    cluster = _cluster_with_repeat(spec.cluster, r) if spec.cluster is not None else None
    return PointSpec(workload, spec.topology, algo, spec.model, options, system, cluster)


def _cluster_with_repeat(cluster: dict[str, Any], r: int) -> dict[str, Any]:
    """A cluster point's repeat *r*: the seeds its systems (the cluster's, each job's) and jobs' routers draw from.

    (A cluster point's own system is its file's: the repeats of one with ``compute_jitter`` were identical.)
    """
    file = copy.deepcopy(dict(cluster["file"]))
    base = Path(cluster["base"], str(file.get("paths_from", ".")))
    holders = [file, *(job for job in file.get("jobs", []) if isinstance(job, dict))]
    systems = []
    for holder in holders:
        system = holder.get("system")
        if isinstance(system, str) and system:  # (a system file: read, with its paths made absolute)
            system = holder["system"] = Values("system", base).system(system, ["system"])
        if isinstance(system, dict):
            systems.append(system)
        workload = holder.get("workload")
        if isinstance(workload, dict) and workload.get("expert_imbalance"):
            workload["routing_seed"] = int(workload.get("routing_seed", 0)) + r
    if any(system.get("compute_jitter") for system in systems):
        # (the seed is one for the whole run: advanced where it is written, else given by the cluster's system)
        stated = [system for system in systems if "jitter_seed" in system]
        for system in stated:
            system["jitter_seed"] = int(system["jitter_seed"]) + r
        if not stated:
            own = file["system"] = file.get("system") or {}
            own["jitter_seed"] = r
    return {**cluster, "file": file}


def _cluster_source(values: Values, value: Any) -> dict[str, Any]:
    """A cluster point's value as ``{file, base, name}``.

    A cluster file is read (its paths resolve against its directory); an inline mapping's paths resolve against
    the experiment's directory. ``paths_from: DIR`` in the mapping moves that base (a point's ``config.yaml``).
    """
    if isinstance(value, dict) and set(value) == {"file", "base", "name"}:
        return value  # (already read: an earlier axis set a key of it)
    if isinstance(value, str) and value:
        path = Path(values.abspath(value))
        return {"file": values.yaml_mapping(str(path), "cluster"), "base": str(path.parent), "name": path.stem}
    if isinstance(value, Mapping):
        return {"file": copy.deepcopy(dict(value)), "base": str(values.base), "name": "cluster"}
    raise ConfigError(f"expected a cluster file or an inline cluster mapping, got {value!r}")


def _set_cluster(values: Values, value: Any, path: list[str], new: Any, axis_key: str) -> dict[str, Any]:
    """*value* (a cluster) with the key *path* set to *new*; ``cluster.placement`` sets every job's placement."""
    source = _cluster_source(values, value)
    mapping = copy.deepcopy(source["file"])
    if path == ["placement"]:
        jobs = mapping.get("jobs")
        if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
            raise ConfigError(f"{axis_key}: the cluster's jobs are not a list of mappings to place")
        for job in jobs:
            job["placement"] = copy.deepcopy(new)
    else:
        _set_dotted(mapping, path, new, axis_key)
    return {**source, "file": mapping}


def _resolve_cluster(values: Values, value: Any, origins: list[str]) -> tuple[PointSpec, ClusterSpec]:
    """A cluster point's spec, and its cluster checked (once per distinct cluster)."""
    source = values.cached("cluster_source", value, origins, lambda v: _cluster_source(values, v))

    cluster: ClusterSpec = values.cached("cluster", source, origins, point_cluster)
    spec = PointSpec("", cluster.topology, {}, cluster.model, cluster.model_options, {}, source)
    return spec, cluster


def _resolve(values: Values, raw: Mapping[str, Any], origins: Mapping[str, list[str]]) -> PointSpec:
    workload = values.workload(raw["workload"], origins["workload"])
    topology, topo_model = values.topology(raw["topology"], origins["topology"])
    model = values.model(
        raw["model"], topo_model, origins["model"] if raw["model"] is not None else origins["topology"]
    )
    options = values.model_options(raw["model_options"], model, origins["model_options"])
    system = values.system(raw["system"], origins["system"])
    algo = values.algo(raw["algo"], origins["algo"])
    return PointSpec(workload, topology, algo, model, options, system)


def select_points(experiment: Experiment, only: Sequence[str]) -> list[Point]:
    """The points matching every ``AXIS=VALUE`` filter (several values of one axis: any of them).

    Values match an axis label as written, or equal it as a YAML scalar or a size (``1KiB`` matches
    ``1 KiB``).

    Raises:
        ConfigError: a filter naming no axis, or a value no point has.
    """
    wanted: dict[int, set[str]] = {}
    keys = experiment.axis_keys
    for item in only:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"--only {item!r}: expected AXIS=VALUE")
        if key == "repeat" and experiment.repeat > 1:
            raise ConfigError("--only repeat=…: filter by the axes; repeats always run together")
        if key not in keys:
            raise ConfigError(f"--only {item!r}: no axis {key!r}; axes: {', '.join(keys) or 'none'}")
        axis = experiment.axes[keys.index(key)]
        found = _match_label(axis, value.strip())
        if found is None:
            raise ConfigError(
                f"--only {item!r}: {key} has no value {value.strip()!r}; values: {', '.join(axis.labels)}"
            )
        wanted.setdefault(keys.index(key), set()).add(found)
    return [p for p in experiment.points if all(p.labels[i] in labels for i, labels in wanted.items())]


def _match_label(axis: Axis, value: str) -> str | None:
    if value in axis.labels:
        return value
    try:
        parsed = label(yaml.safe_load(value))
    except yaml.YAMLError:
        parsed = value
    if parsed in axis.labels:
        return parsed
    try:
        size = parse_size(value, default_unit="B")
    except EtsimError:
        return None
    for text in axis.labels:
        try:
            if parse_size(text, default_unit="B") == size:
                return text
        except EtsimError:
            continue
    return None
