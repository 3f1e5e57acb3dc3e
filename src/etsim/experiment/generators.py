"""Generated workloads of experiment files: ``workload: {generate: KIND, …}``.

Every ``etsim workload gen`` kind is available with the same parameters (flags written with
underscores: ``--grad-size`` is ``grad_size``), plus ``sequence``, several collectives one after the
other on every rank (the seed paper's two-collective workload):

=============  ===============================================================================
kind           parameters (required first; defaults in parentheses)
=============  ===============================================================================
``collective`` ``type``, ``size``, ``npus``, ``count`` (1), ``pg_name`` (none)
``sendrecv``   ``size``, ``npus`` (>= 2)
``dp``         ``npus``, ``layers``, ``grad_size``, ``fwd_us`` (100), ``bwd_us`` (100), ``wg_us``
               (``bwd_us``), ``iterations`` (1)
``sequence``   ``npus``, ``collectives`` (a list of ``{type, size, count}``; ``size`` defaults to the
               generator's ``size``, ``count`` to 1), ``size`` (none), ``pg_name`` (none)
=============  ===============================================================================

Sizes follow ``etsim workload gen``: the buffer for all-reduce and all-to-all, the
per-rank input for all-gather, the whole input for reduce-scatter. Bare numbers are bytes.

:func:`normalize_generator` validates a mapping and returns it with every default filled in and sizes
in bytes (the form written to a point's ``config.yaml``); :func:`build_generated` builds the traces.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etsim.chakra import COLLECTIVE_NAMES, CollectiveType, Trace, TraceBuilder
from etsim.errors import ConfigError
from etsim.network.topology import MAX_NPUS
from etsim.producers.workloads import collective_workload, data_parallel_workload, ring_sendrecv_workload
from etsim.units import parse_size

__all__ = ["GENERATORS", "build_generated", "generated_collectives", "normalize_generator"]

_COLLECTIVES = {name: CollectiveType(value) for value, name in COLLECTIVE_NAMES.items()}

#: Generator kind → its parameters in order (required ones first).
GENERATORS: dict[str, tuple[str, ...]] = {
    "collective": ("type", "size", "npus", "count", "pg_name"),
    "sendrecv": ("size", "npus"),
    "dp": ("npus", "layers", "grad_size", "fwd_us", "bwd_us", "wg_us", "iterations"),
    "sequence": ("npus", "collectives", "size", "pg_name"),
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "collective": ("type", "size", "npus"),
    "sendrecv": ("size", "npus"),
    "dp": ("npus", "layers", "grad_size"),
    "sequence": ("npus", "collectives"),
}


def _int(value: object, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}: expected an integer >= {minimum}, got {value!r}")
    return value


def _npus(value: object, key: str, minimum: int) -> int:
    npus = _int(value, key, minimum)
    if npus > MAX_NPUS:
        raise ConfigError(f"{key}: {npus:,} NPUs is more than etsim's limit of {MAX_NPUS:,} per topology")
    return npus


def _collective(value: object, key: str) -> str:
    name = str(value).lower().replace("-", "_")
    if not isinstance(value, str) or name not in _COLLECTIVES:
        raise ConfigError(f"{key}: unknown collective {value!r}; valid: {', '.join(sorted(_COLLECTIVES))}")
    return name


def _size(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{key}: expected a size such as '1 MiB', got {value!r}")
    return parse_size(value, key=key, default_unit="B")


def normalize_generator(spec: Mapping[str, Any], key: str = "workload") -> dict[str, Any]:
    """Validate a ``{generate: KIND, …}`` mapping; return it with defaults filled in and sizes in bytes.

    Args:
        spec: the mapping as written.
        key: where it sits, for messages (``workload``).

    Raises:
        ConfigError: unknown kind or parameter, a missing or invalid value; the message names the key.
    """
    kind = spec.get("generate")
    if kind not in GENERATORS:
        raise ConfigError(f"{key}.generate: unknown generator {kind!r}; valid: {', '.join(GENERATORS)}")
    params = GENERATORS[kind]
    for name in spec:
        if name != "generate" and name not in params:
            raise ConfigError(f"{key}.{name}: not a parameter of generate: {kind}; valid: {', '.join(params)}")
    for name in _REQUIRED[kind]:
        if spec.get(name) is None:
            raise ConfigError(f"{key}.{name}: missing (generate: {kind} needs {', '.join(_REQUIRED[kind])})")
    out: dict[str, Any] = {"generate": kind}
    if kind == "collective":
        out["type"] = _collective(spec["type"], f"{key}.type")
        out["size"] = _size(spec["size"], f"{key}.size")
        out["npus"] = _npus(spec["npus"], f"{key}.npus", 1)
        out["count"] = _int(spec.get("count", 1), f"{key}.count", 1)
        out["pg_name"] = _pg_name(spec.get("pg_name"), f"{key}.pg_name")
    elif kind == "sendrecv":
        out["size"] = _size(spec["size"], f"{key}.size")
        out["npus"] = _npus(spec["npus"], f"{key}.npus", 2)
    elif kind == "dp":
        out["npus"] = _npus(spec["npus"], f"{key}.npus", 1)
        out["layers"] = _int(spec["layers"], f"{key}.layers", 1)
        out["grad_size"] = _size(spec["grad_size"], f"{key}.grad_size")
        out["fwd_us"] = _int(spec.get("fwd_us", 100), f"{key}.fwd_us", 0)
        out["bwd_us"] = _int(spec.get("bwd_us", 100), f"{key}.bwd_us", 0)
        wg = spec.get("wg_us")
        out["wg_us"] = out["bwd_us"] if wg is None else _int(wg, f"{key}.wg_us", 0)
        out["iterations"] = _int(spec.get("iterations", 1), f"{key}.iterations", 1)
    else:
        out["npus"] = _npus(spec["npus"], f"{key}.npus", 1)
        default_size = spec.get("size")
        collectives = spec["collectives"]
        if not isinstance(collectives, list) or not collectives:
            raise ConfigError(f"{key}.collectives: expected a non-empty list such as [{{type: all_reduce}}]")
        steps = []
        for i, entry in enumerate(collectives):
            where = f"{key}.collectives[{i}]"
            if isinstance(entry, str):
                entry = {"type": entry}
            if not isinstance(entry, Mapping):
                raise ConfigError(f"{where}: expected a mapping {{type, size, count}}, got {entry!r}")
            for name in entry:
                if name not in ("type", "size", "count"):
                    raise ConfigError(f"{where}.{name}: unknown key; valid: type, size, count")
            if "type" not in entry:
                raise ConfigError(f"{where}.type: missing")
            size = entry.get("size", default_size)
            if size is None:
                raise ConfigError(f"{where}.size: missing (and the generator has no default size)")
            steps.append(
                {
                    "type": _collective(entry["type"], f"{where}.type"),
                    "size": _size(size, f"{where}.size" if "size" in entry else f"{key}.size"),
                    "count": _int(entry.get("count", 1), f"{where}.count", 1),
                }
            )
        out["collectives"] = steps
        out["pg_name"] = _pg_name(spec.get("pg_name"), f"{key}.pg_name")
    return out


def _pg_name(value: object, key: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(f"{key}: expected a communicator group id, got {value!r}")
    return str(value)


def generated_collectives(spec: Mapping[str, Any]) -> list[str]:
    """The collective types a normalized generator mapping produces, in order of first use."""
    kind = spec["generate"]
    if kind == "collective":
        return [spec["type"]]
    if kind == "dp":
        return ["all_reduce"]
    if kind == "sequence":
        return list(dict.fromkeys(step["type"] for step in spec["collectives"]))
    return []


def build_generated(spec: Mapping[str, Any]) -> list[Trace]:
    """Build the traces of a normalized generator mapping (see :func:`normalize_generator`)."""
    kind = spec["generate"]
    if kind == "collective":
        return collective_workload(
            _COLLECTIVES[spec["type"]], spec["size"], spec["npus"], count=spec["count"], pg_name=spec["pg_name"]
        )
    if kind == "sendrecv":
        return ring_sendrecv_workload(spec["size"], spec["npus"])
    if kind == "dp":
        return data_parallel_workload(
            spec["npus"],
            layers=spec["layers"],
            grad_bytes=spec["grad_size"],
            fwd_micros=spec["fwd_us"],
            bwd_micros=spec["bwd_us"],
            wg_micros=spec["wg_us"],
            iterations=spec["iterations"],
        )
    traces = []
    for rank in range(spec["npus"]):
        b = TraceBuilder()
        prev: list[int] = []
        for i, step in enumerate(spec["collectives"]):
            for j in range(step["count"]):
                # Each collective waits for the one before: the steps run back to back, in order.
                name = f"{step['type']}_{i}" + (f"_{j}" if step["count"] > 1 else "")
                ctype = _COLLECTIVES[step["type"]]
                prev = [b.collective(ctype, step["size"], deps=prev, name=name, pg_name=spec["pg_name"])]
        traces.append(b.build(rank=rank))
    return traces
