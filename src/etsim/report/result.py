"""The :class:`Result` of a simulation and its table and JSON forms (times in ns)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from etsim.errors import ConfigError
from etsim.report.bandwidth import bandwidths
from etsim.report.tables import collective_lines, critical_path_summary, group_lines, link_lines
from etsim.units import format_size, format_time

__all__ = ["CollectiveRecord", "RankResult", "Result"]


def _collective_dicts(records: list[CollectiveRecord]) -> list[dict[str, Any]]:
    """The records as JSON mappings: the fields in declaration order, as ``asdict`` gives them, then the bandwidths.

    Built field by field: ``asdict``'s deep copies cost seconds on a training step's records.
    """
    out = []
    for c in records:
        algbw, busbw = c.bandwidths()
        out.append(
            {
                "rank": c.rank,
                "node_id": c.node_id,
                "type": c.type,
                "bytes": c.bytes,
                "group": list(c.group),
                "algorithm": c.algorithm,
                "start_ns": c.start_ns,
                "end_ns": c.end_ns,
                "rule": c.rule,
                "algbw_GBps": algbw,
                "busbw_GBps": busbw,
            }
        )
    return out


@dataclass(frozen=True, slots=True)
class RankResult:
    """Times of one rank."""

    rank: int
    finish_ns: float
    compute_ns: float
    """Time with at least one compute node running."""
    comm_ns: float
    """Time with at least one communication node (collective, send, receive) in flight."""
    exposed_comm_ns: float
    """Time with communication in flight and no compute running."""


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One rank's part of one collective."""

    rank: int
    node_id: int
    type: str
    bytes: int
    group: list[int]
    algorithm: str
    start_ns: float
    end_ns: float
    rule: str = ""
    """The selection rule that chose the algorithm (``algorithms[2]``, ``algorithms.all_reduce``, ``--algo``,
    ``built-in default``, ``per-node algorithm``)."""

    def bandwidths(self) -> tuple[float | None, float | None]:
        """``(algbw, busbw)`` in GB/s as nccl-tests defines them (:mod:`etsim.report.bandwidth`), or None."""
        return bandwidths(self.type, self.bytes, len(self.group), self.end_ns - self.start_ns)


@dataclass
class Result:
    """Everything a run reports; :meth:`to_json` gives the documented JSON document."""

    finish_ns: float
    ranks: list[RankResult]
    collectives: list[CollectiveRecord]
    network: dict[str, Any]
    sim: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    links: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What may make the numbers misleading (each also issued as an ``EtsimWarning``)."""
    groups: list[dict[str, Any]] = field(default_factory=list)
    """Communication and exposed communication per communicator group (:mod:`etsim.report.groups`)."""
    critical_path: dict[str, Any] | None = None
    """The chain of activities that set the finish time (:mod:`etsim.report.critical_path`)."""
    training: dict[str, Any] | None = None
    """The step report of a generated training job (:mod:`etsim.report.training`)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        out = {
            "finish_ns": self.finish_ns,
            "ranks": [asdict(r) for r in self.ranks],
            "collectives": _collective_dicts(self.collectives),
            "network": self.network,
            "sim": self.sim,
        }
        if self.config:
            out["config"] = self.config
        if self.links:
            out["links"] = self.links
        if self.groups:
            out["groups"] = self.groups
        if self.critical_path is not None:
            out["critical_path"] = self.critical_path
        if self.training is not None:
            out["training"] = self.training
        out["warnings"] = self.warnings
        return out

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "the document") -> Result:
        """Rebuild a result from :meth:`to_dict`'s mapping (e.g. a saved ``--json`` file).

        Raises:
            ConfigError: *data* is not an etsim result (names *source* and what is missing or wrong).
        """
        if isinstance(data, dict) and "cluster" in data and isinstance(data.get("jobs"), list):
            raise ConfigError(
                f"{source}: a cluster's result (etsim cluster run), not one run's: each job's is under jobs[i].result"
            )
        if not isinstance(data, dict) or "finish_ns" not in data or "ranks" not in data:
            raise ConfigError(f"{source}: not an etsim result (expected a JSON object with finish_ns and ranks)")
        _check_result(data, source)
        try:
            ranks = [RankResult(**r) for r in data["ranks"]]
            keys = CollectiveRecord.__dataclass_fields__
            collectives = [CollectiveRecord(**{k: c[k] for k in keys}) for c in data.get("collectives", [])]
            return cls(
                finish_ns=float(data["finish_ns"]),
                ranks=ranks,
                collectives=collectives,
                network=dict(data.get("network", {})),
                sim=dict(data.get("sim", {})),
                config=dict(data.get("config", {})),
                links=list(data.get("links", [])),
                warnings=list(data.get("warnings", [])),
                groups=list(data.get("groups", [])),
                critical_path=data.get("critical_path"),
                training=data.get("training"),
            )
        except (TypeError, KeyError, ValueError) as exc:
            raise ConfigError(f"{source}: not an etsim result ({type(exc).__name__}: {exc})") from None

    def to_json(self, *, indent: int | None = 1) -> str:
        """The JSON document (deterministic key order)."""
        return json.dumps(self.to_dict(), indent=indent)

    def table(self, *, max_ranks: int = 16) -> str:
        """A short human-readable summary."""
        lines = [f"finish time: {format_time(self.finish_ns)}  ({self.finish_ns:.1f} ns)"]
        ranks = self.ranks
        header = f"{'rank':>6} {'finish':>12} {'compute':>12} {'comm':>12} {'exposed comm':>13}"
        if len(ranks) <= max_ranks:
            lines.append(header)
            for r in ranks:
                lines.append(
                    f"{r.rank:>6} {format_time(r.finish_ns):>12} {format_time(r.compute_ns):>12} "
                    f"{format_time(r.comm_ns):>12} {format_time(r.exposed_comm_ns):>13}"
                )
        elif ranks:
            lines.append(f"{len(ranks)} ranks (min / mean / max):")
            for label, key in (
                ("finish", "finish_ns"),
                ("compute", "compute_ns"),
                ("comm", "comm_ns"),
                ("exposed comm", "exposed_comm_ns"),
            ):
                vals = [getattr(r, key) for r in ranks]
                lines.append(
                    f"  {label:<13} {format_time(min(vals)):>12} {format_time(sum(vals) / len(vals)):>12} "
                    f"{format_time(max(vals)):>12}"
                )
        if self.training is not None:
            from etsim.report.training import training_lines

            lines += training_lines(self.training)
        lines += collective_lines(self.collectives)
        lines += group_lines(self.groups)
        lines += link_lines(self.links, self.finish_ns)
        if self.critical_path is not None:
            lines += critical_path_summary(self.critical_path)
        net = self.network
        lines.append(
            f"network: {net.get('model')} on {net.get('topology')}, {net.get('messages')} messages, "
            f"{format_size(net.get('bytes', 0))}"
        )
        lines.append(f"simulated in {self.sim.get('wall_s', 0):.3f} s ({self.sim.get('events', 0)} events)")
        if self.sim.get("folded"):
            lines.append(f"replica folding: {self.sim['folded']} (exactly; --no-fold-replicas simulates every rank)")
        return "\n".join(lines)


# -- checking a document before anything reads it (a hand-edited or foreign JSON is named, never a traceback) --

# Per record kind: field -> what it must be (a trailing "?" marks a field that may be absent).
_RANK_FIELDS = {"rank": "int", "finish_ns": "num", "compute_ns": "num", "comm_ns": "num", "exposed_comm_ns": "num"}
_COLLECTIVE_FIELDS = {
    "rank": "int", "node_id": "int", "type": "str", "bytes": "num", "group": "ints", "algorithm": "str",
    "start_ns": "num", "end_ns": "num", "rule": "str?",
}  # fmt: skip
_LINK_FIELDS = {
    "link": "int", "src": "node", "dst": "node", "bytes": "num", "busy_ns": "num", "messages": "int",
    "bandwidth_GBps": "num", "utilisation": "num|null?",
}  # fmt: skip
_GROUP_FIELDS = {
    "group": "str", "ranks": "int", "calls": "int", "bytes": "num", "comm_ns_max": "num",
    "exposed_comm_ns_mean": "num", "exposed_comm_ns_max": "num", "rank_of_max": "int",
}  # fmt: skip
_NETWORK_FIELDS = {"model": "str?", "topology": "str?", "messages": "int?", "bytes": "num?", "dims": "list?"}
_SIM_FIELDS = {"events": "int?", "wall_s": "num?", "bulk_parts": "int?", "reruns": "int?"}
_TOTAL_FIELDS = {"compute_ns": "num", "exposed_comm_ns": "num", "memory_ns": "num", "other_ns": "num"}
_NODE_FIELDS = {
    "rank": "int?", "ranks": "ints?", "node_id": "int", "name": "str?", "type": "str", "start_ns": "num",
    "end_ns": "num", "compute_ns": "num", "exposed_comm_ns": "num", "memory_ns": "num", "other_ns": "num",
    "wait_ns": "num", "collective": "str?", "algorithm": "str?", "bytes": "num?", "group_size": "int?",
}  # fmt: skip
_HELD_FIELDS = {"rank": "int", "compute_ns": "num", "share": "num", "alike": "bool|null?"}
_SEGMENT_FIELDS = {
    "rank": "int", "node_id": "int", "kind": "str", "start_ns": "num", "end_ns": "num", "detail": "str",
}  # fmt: skip
_DIM_FIELDS = {"kind": "str", "npus": "int"}
_TRAINING_FIELDS = {
    "iteration_ns": "num", "tokens_per_s": "num", "model_tflops_per_gpu": "num", "hardware_tflops_per_gpu": "num",
    "mfu": "num", "hfu": "num", "bubble_fraction": "num", "exposed_comm_ns": "dict", "peak_activation_bytes": "list?",
    "memory_bytes_per_gpu": "list?", "fits_in_memory": "bool|null?", "job": "dict?", "memory_terms": "dict?",
    "stage_compute_ns": "list?", "pipeline_layers": "list?",
}  # fmt: skip

_EXPECTED = {
    "num": "a finite number",
    "int": "an integer",
    "str": "a string",
    "node": "an NPU rank or a switch name",
    "ints": "a list of integers",
    "num|null": "a finite number or null",
    "list": "a list",
    "dict": "an object",
    "bool|null": "true, false or null",
}


def _bad(source: str, key: str, what: str, value: Any) -> ConfigError:
    return ConfigError(f"{source}: not an etsim result: {key}: expected {what}, got {value!r}"[:400])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _valid(kind: str, value: Any) -> bool:
    if kind == "num":
        return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if kind == "num|null":
        return value is None or _valid("num", value)
    if kind == "int":
        return _is_int(value) and abs(value) < 1 << 63
    if kind == "str":
        return isinstance(value, str)
    if kind == "node":
        return _valid("int", value) or isinstance(value, str)
    if kind == "ints":
        return isinstance(value, list) and all(_valid("int", v) for v in value)
    if kind == "dict":
        return isinstance(value, dict)
    if kind == "bool|null":
        return value is None or isinstance(value, bool)
    return isinstance(value, list)  # "list"


def _fields(item: Any, spec: dict[str, str], key: str, source: str) -> None:
    """*item* is an object whose fields are what *spec* says (each problem names its key)."""
    if not isinstance(item, dict):
        raise _bad(source, key, "an object", item)
    for f, kind in spec.items():
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if f not in item:
            if optional:
                continue
            raise _bad(source, f"{key}.{f}", _EXPECTED[kind], "nothing (the key is missing)")
        if not _valid(kind, item[f]):
            raise _bad(source, f"{key}.{f}", _EXPECTED[kind], item[f])


def _number(value: Any, key: str, source: str) -> None:
    if not _valid("num", value):
        raise _bad(source, key, "a finite number", value)


def _records(data: dict[str, Any], name: str, spec: dict[str, str], source: str) -> None:
    """``data[name]`` (absent: empty) is a list of objects as *spec* says."""
    value = data.get(name, [])
    if not isinstance(value, list):
        raise _bad(source, name, "a list", value)
    for i, item in enumerate(value):
        _fields(item, spec, f"{name}[{i}]", source)


def _check_result(data: dict[str, Any], source: str) -> None:
    """The parts of a result the tables and plots read, checked: each problem names its key."""
    from etsim.network.topology import MAX_NPUS

    _number(data["finish_ns"], "finish_ns", source)
    _records(data, "ranks", _RANK_FIELDS, source)
    _records(data, "collectives", _COLLECTIVE_FIELDS, source)
    _records(data, "links", _LINK_FIELDS, source)
    _records(data, "groups", _GROUP_FIELDS, source)
    _fields(data.get("network", {}), _NETWORK_FIELDS, "network", source)
    _fields(data.get("sim", {}), _SIM_FIELDS, "sim", source)
    if not isinstance(data.get("config", {}), dict):
        raise _bad(source, "config", "an object", data["config"])
    for i, dim in enumerate(data.get("network", {}).get("dims", [])):
        _fields(dim, _DIM_FIELDS, f"network.dims[{i}]", source)
        if not 1 <= dim["npus"] <= MAX_NPUS:
            raise _bad(source, f"network.dims[{i}].npus", f"an NPU count from 1 to {MAX_NPUS:,}", dim["npus"])
    training = data.get("training")
    if training is not None:
        _fields(training, _TRAINING_FIELDS, "training", source)
        _fields(training["exposed_comm_ns"], dict.fromkeys(training["exposed_comm_ns"], "num"),
                "training.exposed_comm_ns", source)  # fmt: skip
    warnings = data.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise _bad(source, "warnings", "a list of strings", warnings)
    path = data.get("critical_path")
    if path is None:
        return
    if not isinstance(path, dict):
        raise _bad(source, "critical_path", "an object", path)
    _fields(path.get("totals"), _TOTAL_FIELDS, "critical_path.totals", source)
    end = path.get("end")
    if not isinstance(end, dict) or not all(_is_int(end.get(k)) for k in ("rank", "node_id")):
        raise _bad(source, "critical_path.end", "an object with rank and node_id", end)
    _records(path, "nodes", _NODE_FIELDS, f"{source}: critical_path")
    for i, node in enumerate(path.get("nodes", [])):
        if "rank" not in node and not node.get("ranks"):
            raise _bad(source, f"critical_path.nodes[{i}]", "a rank or a list of ranks", node)
    _records(path, "segments", _SEGMENT_FIELDS, f"{source}: critical_path")
    held = path.get("held_back")
    if held is not None:
        _fields(held, _HELD_FIELDS, "critical_path.held_back", source)
        through = held.get("through")
        if through is not None:
            _fields(through, _NODE_FIELDS, "critical_path.held_back.through", source)
            if "rank" not in through and not through.get("ranks"):
                raise _bad(source, "critical_path.held_back.through", "a rank or a list of ranks", through)
