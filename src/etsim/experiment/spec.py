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

import copy
import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from etsim.chakra import COLLECTIVE_NAMES, NodeType, load_workload, resolve_family
from etsim.errors import ConfigError, EtsimError
from etsim.network import NETWORK_MODELS, NetworkConfig, load_network
from etsim.options import keys_named, option_help, parse_options
from etsim.producers.tacos.source import TacosParams
from etsim.producers.workloads.base import WORKLOAD_GENERATORS, generated_collectives, normalize
from etsim.system.config import load_system_config
from etsim.units import parse_size

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

#: Keys that make up a point (each may be a sweep axis).
POINT_KEYS = ("workload", "topology", "algo", "model", "model_options", "system")
_TOP_KEYS = ("name", "description", *POINT_KEYS, "sweep", "zip", "repeat", "plots")
_COLLECTIVE_KEYS = frozenset(COLLECTIVE_NAMES.values())
#: Result columns every results.csv has; ``<collective>_ns`` columns are inserted after ``exposed_comm_ns``.
METRIC_COLUMNS = ("finish_ns", "compute_ns", "comm_ns", "exposed_comm_ns")
TAIL_COLUMNS = ("messages", "bytes", "error", "warnings", "wall_s")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML keeps the last one silently)."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        try:
            duplicate = key in seen
        except TypeError:
            continue  # an unhashable key: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def read_yaml(path: str | os.PathLike[str], what: str = "experiment") -> tuple[dict[str, Any], str]:
    """Read a YAML mapping from *path*; return it and its text.

    Raises:
        ConfigError: unreadable file, bytes that are not UTF-8, invalid YAML, duplicate keys, or a
            document that is not a mapping; the message names the file.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{p}: expected a mapping of {what} keys at the top level, got {kind}")
    return data, text


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

    @property
    def axis_keys(self) -> list[str]:
        """Axis column names, in order."""
        return [a.key for a in self.axes]

    @property
    def columns(self) -> list[str]:
        """The header of ``results.csv``."""
        cols = ["point", *self.axis_keys]
        if self.repeat > 1:
            cols.append("repeat")
        cols += ["network_model", "status", *METRIC_COLUMNS, *(f"{c}_ns" for c in self.collectives), *TAIL_COLUMNS]
        return cols

    @property
    def numeric_columns(self) -> list[str]:
        """Result columns holding numbers (what a plot's ``y`` may name)."""
        return [*METRIC_COLUMNS, *(f"{c}_ns" for c in self.collectives), "messages", "bytes", "wall_s"]


def _label(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, Mapping | list):
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 30).strip()
    return str(value)


def _is_pathlike(value: str, base: Path) -> bool:
    """Whether an algorithm value names a file rather than a registered name.

    Registered names (and ``package.module:Class`` plug-ins) never contain a ``/``; a value with one,
    or ending in ``.et``/``.xml``, or naming a file or family next to the experiment, is a path.
    """
    if ":" in value:
        return False
    if "/" in value or os.sep in value or value.endswith((".et", ".xml")):
        return True
    p = base / value
    return p.exists() or Path(f"{p}.0.et").exists()


class _Loader:
    """Validation state of one experiment file: base directory, caches of resolved values."""

    def __init__(self, where: str, base: Path) -> None:
        self.where = where
        self.base = base
        self.cache: dict[tuple[str, str], Any] = {}
        self.collective_cache: dict[str, list[str]] = {}

    def error(self, keys: Iterable[str], message: str) -> ConfigError:
        names = ", ".join(dict.fromkeys(keys))
        return ConfigError(f"{self.where}: {names}: {message}" if names else f"{self.where}: {message}")

    def yaml_mapping(self, path: str, what: str) -> dict[str, Any]:
        """A YAML file's mapping, read once per experiment (a fresh copy each time)."""
        token = ("yaml", path)
        if token not in self.cache:
            self.cache[token] = read_yaml(path, what)[0]
        return copy.deepcopy(self.cache[token])

    def abspath(self, value: str, base: Path | None = None) -> str:
        return os.path.normpath(os.path.join(base or self.base, os.path.expanduser(value)))

    # --- the point keys -------------------------------------------------------------------------------------

    def cached(self, kind: str, value: Any, keys: list[str], resolve: Any) -> Any:
        token = (kind, json.dumps(value, sort_keys=True, default=str))
        if token not in self.cache:
            try:
                self.cache[token] = resolve(value)
            except EtsimError as exc:
                raise self.error(keys, str(exc)) from None
        return self.cache[token]

    def workload(self, value: Any, keys: list[str]) -> str | dict[str, Any]:
        def resolve(v: Any) -> str | dict[str, Any]:
            if isinstance(v, str) and v:
                path = self.abspath(v)
                resolve_family(path)  # a missing or incomplete family is an error now, not per point
                return path
            if isinstance(v, Mapping) and "generate" in v:
                return normalize(v, key="workload")
            raise ConfigError(f"expected a workload path or {{generate: KIND, …}}, got {v!r}")

        if value is None:
            raise self.error(keys, "missing: every experiment names a workload")
        result: str | dict[str, Any] = self.cached("workload", value, keys, resolve)
        return result

    def topology(self, value: Any, keys: list[str]) -> tuple[str | dict[str, Any] | None, str]:
        """Resolved topology and the model its file selects."""

        def resolve(v: Any) -> tuple[str | dict[str, Any] | None, str]:
            if v is None:
                default = next(f.default for f in fields(NetworkConfig) if f.name == "model")
                return None, str(default)
            if isinstance(v, str) and v:
                path = self.abspath(v)
                if not os.path.isfile(path):
                    raise ConfigError(f"no such topology file {path}")
                return path, load_network(path).model
            if isinstance(v, Mapping):
                return dict(v), load_network(v).model
            raise ConfigError(f"expected a topology file or an inline topology mapping, got {v!r}")

        result: tuple[str | dict[str, Any] | None, str] = self.cached("topology", value, keys, resolve)
        return result

    def model(self, value: Any, default: str, keys: list[str]) -> str:
        def resolve(v: Any) -> str:
            if v is None:
                return default
            if not isinstance(v, str) or not v:
                raise ConfigError(f"expected a network model name, got {v!r}")
            module, sep, cls = v.rpartition(":")
            if sep and module.endswith(".py"):
                v = f"{self.abspath(module)}:{cls}"
            NETWORK_MODELS.get(v)
            return v

        token = {"model": value, "default": default}
        result: str = self.cached("model", token, keys, lambda t: resolve(t["model"]))
        return result

    def model_options(self, value: Any, model: str, keys: list[str]) -> dict[str, Any]:
        def resolve(v: Any) -> dict[str, Any]:
            if v is None:
                return {}
            if not isinstance(v, Mapping):
                raise ConfigError(f"expected a mapping of model options, got {v!r}")
            NETWORK_MODELS.get(model).parse_options(v, key="model_options")
            return dict(v)

        token = {"model": model, "options": value}
        result: dict[str, Any] = self.cached("model_options", token, keys, lambda v: resolve(v["options"]))
        return result

    def system(self, value: Any, keys: list[str]) -> dict[str, Any]:
        def resolve(v: Any) -> dict[str, Any]:
            if v is None:
                return {}
            if isinstance(v, str) and v:
                path = Path(self.abspath(v))
                data, _ = read_yaml(path, "system")
                return self._system_paths(data, path.parent)
            if isinstance(v, Mapping):
                return self._system_paths(v, self.base)
            raise ConfigError(f"expected a system mapping or the path of a system YAML, got {v!r}")

        result: dict[str, Any] = self.cached("system", value, keys, resolve)
        return result

    def _system_paths(self, data: Mapping[str, Any], base: Path) -> dict[str, Any]:
        out = dict(data)
        if isinstance(out.get("comm_groups"), str):
            out["comm_groups"] = self.abspath(out["comm_groups"], base)
        if isinstance(out.get("algorithms"), Mapping):
            out["algorithms"] = {
                str(k): self._algo_value(v, f"system.algorithms.{k}", base) if isinstance(v, str) else v
                for k, v in out["algorithms"].items()
            }
        load_system_config(out, base_dir=str(base))  # every key checked once, with its own messages
        return out

    def _algo_value(self, value: Any, key: str, base: Path | None = None) -> str | dict[str, Any]:
        base = base or self.base
        if isinstance(value, str) and value:
            if not _is_pathlike(value, base):
                return value  # a registered name (checked when the point runs: the registry names them all)
            path = self.abspath(value, base)
            if value.endswith(".xml"):
                if not os.path.isfile(path):
                    raise ConfigError(f"{key}: no such MSCCL-IR file {path}")
                return path
            try:
                resolve_family(path)
            except EtsimError as exc:
                raise ConfigError(f"{key}: {exc}") from None
            return path
        if isinstance(value, Mapping) and set(value) == {"tacos"}:
            return {"tacos": self._tacos(value["tacos"], f"{key}.tacos")}
        raise ConfigError(f"{key}: expected an algorithm name, a file, or {{tacos: {{…}}}}, got {value!r}")

    @staticmethod
    def _tacos(value: Any, key: str) -> dict[str, Any]:
        """TACOS parameters as declared (:class:`~etsim.producers.tacos.source.TacosParams`).

        ``size`` absent means the point's own size.
        """
        value = {} if value is None else value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping such as {{chunks_per_npu: 2, seed: 0}}")
        given = parse_options(
            TacosParams,
            {k: v for k, v in value.items() if not (k == "size" and v is None)},  # null: the point's own size
            key=keys_named(prefix=f"{key}."),
            unknown="{key}: unknown TACOS parameter; valid: {valid}",
            sort_valid=False,
        )
        defaults = TacosParams()
        out = {f.name: given.get(f.name, getattr(defaults, f.name)) for f in fields(TacosParams)}
        out["size"] = given.get("size")
        return out

    def algo(self, value: Any, keys: list[str]) -> dict[str, str | dict[str, Any]]:
        def resolve(v: Any) -> dict[str, str | dict[str, Any]]:
            if v is None:
                return {}
            if isinstance(v, str):
                return {"default": self._algo_value(v, "algo")}
            if not isinstance(v, Mapping):
                raise ConfigError(f"expected an algorithm or a mapping {{all_reduce: ring, default: …}}, got {v!r}")
            if set(v) == {"tacos"}:
                return {"default": self._algo_value(v, "algo")}
            out: dict[str, str | dict[str, Any]] = {}
            for coll, algo in v.items():
                if coll != "default" and coll not in _COLLECTIVE_KEYS:
                    valid = ", ".join(["default", *sorted(_COLLECTIVE_KEYS), "tacos"])
                    raise ConfigError(f"algo.{coll}: unknown collective; valid keys: {valid}")
                out[str(coll)] = self._algo_value(algo, f"algo.{coll}")
            return out

        result: dict[str, str | dict[str, Any]] = self.cached("algo", value, keys, resolve)
        return result

    def collectives(self, workload: str | dict[str, Any]) -> list[str]:
        """Collective types the (resolved) workload uses."""
        token = json.dumps(workload, sort_keys=True)
        if token not in self.collective_cache:
            if isinstance(workload, dict):
                found = generated_collectives(workload)
            else:
                wl = load_workload(workload)
                types: dict[str, None] = {}
                for trace in wl:
                    for t, c, cpu in zip(trace.types, trace.comm_type, trace.is_cpu_op, strict=True):
                        if t == NodeType.COMM_COLL_NODE and not cpu and c in COLLECTIVE_NAMES:
                            types[COLLECTIVE_NAMES[c]] = None
                found = list(types)
            self.collective_cache[token] = found
        return self.collective_cache[token]

    # --- axes and points ------------------------------------------------------------------------------------

    def axis(self, key: Any, spec: Any, where: str) -> Axis:
        if not isinstance(key, str) or not key:
            raise self.error([where], f"axis names must be strings, got {key!r}")
        if isinstance(spec, Mapping):
            if not spec:
                raise self.error([f"{where}.{key}"], "empty axis: give at least one value")
            labels = tuple(_label(k) for k in spec)
            values = tuple(spec.values())
            wheres = tuple(f"{where}.{key}.{label}" for label in labels)
        elif isinstance(spec, list):
            if not spec:
                raise self.error([f"{where}.{key}"], "empty axis: give at least one value")
            values = tuple(spec)
            labels = tuple(_label(v) for v in values)
            wheres = tuple(f"{where}.{key}[{i}]" for i in range(len(values)))
        else:
            raise self.error([f"{where}.{key}"], f"expected a list of values or a mapping LABEL: VALUE, got {spec!r}")
        if len(set(labels)) != len(labels):
            dup = next(label for label in labels if labels.count(label) > 1)
            raise self.error([f"{where}.{key}"], f"value {dup!r} appears twice")
        return Axis(key, values, labels, wheres)


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


def _as_mapping(loader: _Loader, root: str, value: Any, axis_key: str) -> dict[str, Any]:
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
        data = loader.yaml_mapping(loader.abspath(value), root)
        if root == "topology":
            data.setdefault("name", Path(value).stem)
        else:
            data = loader._system_paths(data, Path(loader.abspath(value)).parent)
        return data
    raise ConfigError(f"{axis_key}: {root} is {value!r}, which has no keys to set")


def _expand(loader: _Loader, data: Mapping[str, Any], axes: list[Axis], groups: list[list[int]], repeat: int,
            ) -> tuple[list[Point], list[str]]:  # fmt: skip
    base = {k: data.get(k) for k in POINT_KEYS}
    whole = [i for i, a in enumerate(axes) if a.key in POINT_KEYS]
    partial = [i for i, a in enumerate(axes) if a.key not in POINT_KEYS]
    total = repeat
    for group in groups:
        total *= len(axes[group[0]].values)
    width = max(4, len(str(total - 1)))
    points: list[Point] = []
    collectives: dict[str, None] = {}
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
                mapping = _as_mapping(loader, root, raw[root], axis.key)
                _set_dotted(mapping, parts[1:], axis.values[pick[i]], axis.key)
            except EtsimError as exc:
                raise loader.error([where], str(exc)) from None
            raw[root] = mapping
            origins[root] = [*origins[root], where]
        spec = _resolve(loader, raw, origins)
        for name in loader.collectives(spec.workload):
            collectives[name] = None
        labels = tuple(a.labels[pick[i]] for i, a in enumerate(axes))
        for r in range(repeat):
            index = len(points)
            points.append(Point(str(index).zfill(width), labels, r, _with_repeat(spec, r) if r else spec))
    return points, list(collectives)


def _with_repeat(spec: PointSpec, r: int) -> PointSpec:
    """Repeat *r* of a point: TACOS seeds and a model's ``seed`` option advance by *r*."""
    algo = {
        k: {"tacos": {**v["tacos"], "seed": v["tacos"]["seed"] + r}} if isinstance(v, dict) else v
        for k, v in spec.algo.items()
    }
    options = dict(spec.model_options)
    if isinstance(options.get("seed"), int) and not isinstance(options["seed"], bool):
        options["seed"] += r
    return PointSpec(spec.workload, spec.topology, algo, spec.model, options, spec.system)


def _resolve(loader: _Loader, raw: Mapping[str, Any], origins: Mapping[str, list[str]]) -> PointSpec:
    workload = loader.workload(raw["workload"], origins["workload"])
    topology, topo_model = loader.topology(raw["topology"], origins["topology"])
    model = loader.model(
        raw["model"], topo_model, origins["model"] if raw["model"] is not None else origins["topology"]
    )
    options = loader.model_options(raw["model_options"], model, origins["model_options"])
    system = loader.system(raw["system"], origins["system"])
    algo = loader.algo(raw["algo"], origins["algo"])
    return PointSpec(workload, topology, algo, model, options, system)


def parse_plots(
    where: str, value: Any, axes: Sequence[Axis], numeric: Sequence[str], zip_value: Any = None
) -> list[PlotSpec]:
    """Validate an experiment's ``plots`` entry against its axes and numeric result columns.

    *zip_value* is the experiment's ``zip`` entry: an axis zipped with a plotted or pinned one needs no pin.

    Raises:
        ConfigError: naming *where* and the plot key.
    """
    return _plots(_Loader(where, Path(".")), value, list(axes), list(numeric), zip_partners(zip_value))


def zip_partners(zip_value: Any) -> dict[str, frozenset[str]]:
    """Axis key → the other keys of its ``zip`` group (the axes whose value its value decides)."""
    groups = zip_value if isinstance(zip_value, list) else [zip_value]
    partners: dict[str, frozenset[str]] = {}
    for group in groups:
        if isinstance(group, Mapping):
            keys = frozenset(str(k) for k in group)
            for key in keys:
                partners[key] = keys - {key}
    return partners


def _plots(
    loader: _Loader, value: Any, axes: list[Axis], numeric: list[str], zipped: Mapping[str, frozenset[str]]
) -> list[PlotSpec]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise loader.error(["plots"], "expected a list of plots")
    axis_keys = [a.key for a in axes]
    by_key = {a.key: a for a in axes}
    known = {f.name for f in fields(PlotSpec)}
    plots: list[PlotSpec] = []
    for i, entry in enumerate(value):
        key = f"plots[{i}]"
        if not isinstance(entry, Mapping):
            raise loader.error([key], f"expected a mapping {{x: AXIS, y: COLUMN, …}}, got {entry!r}")
        for name in entry:
            if name not in known:
                raise loader.error([f"{key}.{name}"], f"unknown plot key; valid: {', '.join(sorted(known))}")
        for name in ("x", "y"):
            if name not in entry:
                raise loader.error([f"{key}.{name}"], "missing")
        kwargs: dict[str, Any] = dict(entry)
        for name in ("x", "series", "facet"):
            v = kwargs.get(name)
            if v is not None and v not in axis_keys:
                raise loader.error([f"{key}.{name}"], f"{v!r} is not an axis; axes: {', '.join(axis_keys) or 'none'}")
        if kwargs["y"] not in numeric:
            raise loader.error(
                [f"{key}.y"], f"{kwargs['y']!r} is not a result column; numeric columns: {', '.join(numeric)}"
            )
        used = [kwargs.get(n) for n in ("x", "series", "facet")]
        if len([u for u in used if u]) != len({u for u in used if u}):
            raise loader.error([key], "x, series and facet must be different axes")
        where = kwargs.get("where") or {}
        if not isinstance(where, Mapping):
            raise loader.error([f"{key}.where"], "expected a mapping AXIS: VALUE")
        where = {str(k): _label(v) for k, v in where.items()}
        for axis_key, label in where.items():
            if axis_key not in by_key:
                raise loader.error([f"{key}.where.{axis_key}"], f"not an axis; axes: {', '.join(axis_keys)}")
            if label not in by_key[axis_key].labels:
                raise loader.error(
                    [f"{key}.where.{axis_key}"],
                    f"{label!r} is not a value of the axis; values: {', '.join(by_key[axis_key].labels)}",
                )
        decided = {u for u in used if u} | set(where)  # these axes' values decide their zip partners'
        for a in axes:
            if a.key not in decided and len(a.values) > 1 and not zipped.get(a.key, frozenset()) & decided:
                raise loader.error(
                    [key],
                    f"axis {a.key!r} has {len(a.values)} values but is not the plot's x, series or facet; "
                    f"pick one with where: {{{a.key}: VALUE}}",
                )
        kwargs["where"] = where
        baseline = kwargs.get("baseline")
        if baseline is not None:
            if not kwargs.get("series"):
                raise loader.error([f"{key}.baseline"], "a baseline is one series: give the plot a series axis")
            baseline = _label(baseline)
            if baseline not in by_key[kwargs["series"]].labels:
                values = ", ".join(by_key[kwargs["series"]].labels)
                raise loader.error([f"{key}.baseline"], f"{baseline!r} is not a value of {kwargs['series']}: {values}")
            kwargs["baseline"] = baseline
        if kwargs.get("relative", "slowdown") not in ("slowdown", "speedup"):
            raise loader.error([f"{key}.relative"], "expected slowdown or speedup")
        for name in ("logx", "logy"):
            if name in kwargs and kwargs[name] is not None and not isinstance(kwargs[name], bool):
                raise loader.error([f"{key}.{name}"], "expected true or false")
        formats = kwargs.get("formats", ["png", "svg"])
        if not isinstance(formats, list) or not formats or any(f not in ("png", "svg", "pdf") for f in formats):
            raise loader.error([f"{key}.formats"], "expected a list of png, svg, pdf")
        kwargs["formats"] = tuple(formats)
        name = kwargs.get("name") or f"{kwargs['y']}_vs_{kwargs['x']}" + (
            f"_by_{kwargs['series']}" if kwargs.get("series") else ""
        )
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise loader.error([f"{key}.name"], f"expected a file name of letters, digits, '.', '_', '-', got {name!r}")
        if any(p.name == name for p in plots):
            raise loader.error([f"{key}.name"], f"two plots are named {name!r}")
        kwargs["name"] = name
        for name in ("title", "xlabel", "ylabel"):
            if kwargs.get(name) is not None:
                kwargs[name] = str(kwargs[name])
        plots.append(PlotSpec(**kwargs))
    return plots


def load_experiment(source: str | os.PathLike[str]) -> Experiment:
    """Load and validate an experiment file; expand its points.

    Raises:
        ConfigError: anything wrong, before anything runs: an unknown key, a missing file, a bad
            unit, an empty sweep, a plot naming a column that does not exist, …; the message names
            the file and the key.
    """
    path = Path(source)
    data, text = read_yaml(path)
    where = str(path)
    loader = _Loader(where, path.resolve().parent)
    for key in data:
        if key not in _TOP_KEYS:
            raise loader.error([str(key)], f"unknown key; valid keys: {', '.join(_TOP_KEYS)}")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise loader.error(["name"], f"expected a name of letters, digits, '.', '_', '-', got {name!r}")
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise loader.error(["description"], "expected text")
    repeat = data.get("repeat", 1)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise loader.error(["repeat"], f"expected an integer >= 1, got {repeat!r}")

    axes: list[Axis] = []
    groups: list[list[int]] = []
    if "sweep" in data:
        sweep = data["sweep"]
        if not isinstance(sweep, Mapping):
            raise loader.error(["sweep"], "expected a mapping of axis keys to lists of values")
        if not sweep:
            raise loader.error(["sweep"], "empty sweep: give at least one axis (or leave sweep out for one point)")
        for key, spec in sweep.items():
            axes.append(loader.axis(key, spec, "sweep"))
            groups.append([len(axes) - 1])
    if "zip" in data and data["zip"] not in (None, {}, []):
        zips = data["zip"]
        zip_groups = zips if isinstance(zips, list) else [zips]
        for gi, group in enumerate(zip_groups):
            gwhere = "zip" if not isinstance(zips, list) else f"zip[{gi}]"
            if not isinstance(group, Mapping) or not group:
                raise loader.error([gwhere], "expected a mapping of axis keys to lists of equal length")
            members = []
            for key, spec in group.items():
                axes.append(loader.axis(key, spec, gwhere))
                members.append(len(axes) - 1)
            lengths = {axes[i].key: len(axes[i].values) for i in members}
            if len(set(lengths.values())) != 1:
                raise loader.error([gwhere], f"zipped axes must have equal lengths, got {lengths}")
            groups.append(members)
    seen: set[str] = set()
    reserved = {"point", "repeat", "network_model", "status", *METRIC_COLUMNS, *TAIL_COLUMNS}
    for axis in axes:
        if axis.key in seen:
            raise loader.error([axis.key], "the axis is given twice (sweep and zip share keys)")
        if axis.key in reserved or axis.key.endswith("_ns"):
            raise loader.error([axis.key], "the axis name clashes with a result column")
        seen.add(axis.key)
        if axis.key.startswith("model."):
            raise loader.error([axis.key], "model is a name; it has no keys to set (use model_options.KEY)")
    points, collectives = _expand(loader, data, axes, groups, repeat)
    experiment = Experiment(path, name, description, axes, repeat, points, collectives, [], text)
    experiment.plots = _plots(
        loader, data.get("plots"), axes, experiment.numeric_columns, zip_partners(data.get("zip"))
    )
    return experiment


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
        label = _match_label(axis, value.strip())
        if label is None:
            raise ConfigError(
                f"--only {item!r}: {key} has no value {value.strip()!r}; values: {', '.join(axis.labels)}"
            )
        wanted.setdefault(keys.index(key), set()).add(label)
    return [p for p in experiment.points if all(p.labels[i] in labels for i, labels in wanted.items())]


def _match_label(axis: Axis, value: str) -> str | None:
    if value in axis.labels:
        return value
    try:
        parsed = _label(yaml.safe_load(value))
    except yaml.YAMLError:
        parsed = value
    if parsed in axis.labels:
        return parsed
    try:
        size = parse_size(value, default_unit="B")
    except EtsimError:
        return None
    for label in axis.labels:
        try:
            if parse_size(label, default_unit="B") == size:
                return label
        except EtsimError:
            continue
    return None


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
