"""What input files name, resolved: workloads, topologies, systems, models and algorithms, against the file's place.

Experiment files and cluster files name their inputs the same way (a workload path or ``{generate: …}``, a topology
file or inline mapping, a system mapping or file, a model and its options): :class:`Values` resolves them, paths
made absolute, generators normalised, files checked once; it holds the state of one file's validation (its
directory, caches of resolved values), so that a key resolved for one point is not resolved again for the next.
:func:`point_workload` builds a resolved workload once per process.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from etsim.cache import BoundedCache
from etsim.chakra import COLLECTIVE_NAMES, NodeType, load_workload, resolve_family
from etsim.chakra.graph import Workload
from etsim.errors import ConfigError, EtsimError
from etsim.files import read_yaml_mapping
from etsim.network import NETWORK_MODELS, NetworkConfig, load_network
from etsim.options import keys_named, parse_options
from etsim.producers.tacos.source import TacosParams
from etsim.producers.workloads.base import generate, generated_collectives, normalize
from etsim.stamp import input_stamp
from etsim.system.config import load_system_config

__all__ = ["Values", "error_at", "point_workload"]

_COLLECTIVE_KEYS = frozenset(COLLECTIVE_NAMES.values())
# A sweep revisits few distinct inputs, some of them large: each process keeps the last workloads it built.
_WORKLOADS: BoundedCache[Workload] = BoundedCache(16)


def error_at(where: str, keys: Iterable[str], message: str) -> ConfigError:
    """``WHERE: KEY, KEY: message`` (keys once each, in order), or ``WHERE: message`` without keys."""
    names = ", ".join(dict.fromkeys(keys))
    return ConfigError(f"{where}: {names}: {message}" if names else f"{where}: {message}")


def point_workload(spec: str | dict[str, Any]) -> Workload:
    """A resolved workload (a path or a generator mapping), built once per process."""

    def build() -> Workload:
        if isinstance(spec, dict):
            return Workload(generate(spec), source=f"generate: {spec['generate']}")
        return load_workload(spec)

    # (keyed with the stamp of its files: a workload regenerated at the same path is read again)
    return _WORKLOADS.get(json.dumps(spec, sort_keys=True) + input_stamp(spec), build)


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
    return os.path.exists(p) or os.path.exists(Path(f"{p}.0.et"))


class Values:
    """Validation state of one experiment file: base directory, caches of resolved values."""

    def __init__(self, where: str, base: Path) -> None:
        self.where = where
        self.base = base
        self.cache: dict[tuple[str, str], Any] = {}
        self.collective_cache: dict[str, list[str]] = {}

    def error(self, keys: Iterable[str], message: str) -> ConfigError:
        """``FILE: KEY, …: message``."""
        return error_at(self.where, keys, message)

    def yaml_mapping(self, path: str, what: str) -> dict[str, Any]:
        """A YAML file's mapping, read once per experiment (a fresh copy each time)."""
        token = ("yaml", path)
        if token not in self.cache:
            self.cache[token] = read_yaml_mapping(path, what)[0]
        return copy.deepcopy(self.cache[token])

    def abspath(self, value: str, base: Path | None = None) -> str:
        """*value* (``~`` expanded) made absolute against *base* (default: the experiment's directory)."""
        return os.path.normpath(os.path.join(base or self.base, os.path.expanduser(value)))

    # --- the point keys -------------------------------------------------------------------------------------

    def cached(self, kind: str, value: Any, keys: list[str], resolve: Any) -> Any:
        """``resolve(value)``, once per distinct *value* of this *kind*; an error names the file and *keys*."""
        token = (kind, json.dumps(value, sort_keys=True, default=str))
        if token not in self.cache:
            try:
                self.cache[token] = resolve(value)
            except EtsimError as exc:
                raise self.error(keys, str(exc)) from None
        return self.cache[token]

    def workload(self, value: Any, keys: list[str]) -> str | dict[str, Any]:
        """An absolute workload path (its family checked), or a normalised generator mapping."""

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
        """The network model's name (a plug-in file made absolute), *default* when none is given."""

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
        """The model options as written, checked against *model*'s declarations."""

        def resolve(v: Any) -> dict[str, Any]:
            if v is None:
                return {}
            if not isinstance(v, Mapping):
                raise ConfigError(f"expected a mapping of model options, got {v!r}")
            NETWORK_MODELS.get(model).checked_options(v, key="model_options")
            return dict(v)

        token = {"model": model, "options": value}
        result: dict[str, Any] = self.cached("model_options", token, keys, lambda v: resolve(v["options"]))
        return result

    def system(self, value: Any, keys: list[str]) -> dict[str, Any]:
        """A system mapping (inline, or read from its file) with absolute paths, checked."""

        def resolve(v: Any) -> dict[str, Any]:
            if v is None:
                return {}
            if isinstance(v, str) and v:
                path = Path(self.abspath(v))
                data, _ = read_yaml_mapping(path, "system")
                return self.system_paths(data, path.parent)
            if isinstance(v, Mapping):
                return self.system_paths(v, self.base)
            raise ConfigError(f"expected a system mapping or the path of a system YAML, got {v!r}")

        result: dict[str, Any] = self.cached("system", value, keys, resolve)
        return result

    def system_paths(self, data: Mapping[str, Any], base: Path) -> dict[str, Any]:
        """A system mapping with its paths made absolute against *base*, checked."""
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
        """Collective (or ``default``) → algorithm name, absolute path, or ``{tacos: {…}}``."""

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
