"""System parameters: algorithms per collective, chunking, reduction and endpoint costs, NPU resources.

A system YAML (``--system FILE``) holds the same keys as :class:`SystemConfig`; unknown keys
are errors naming the key. Units are strings (``100 GB/s``, ``10 ns``).

Defaults make a plain run directly comparable with the α-β closed forms: one chunk, no
endpoint delay, no reduction cost. Turn them on with ``chunks: 4``, ``endpoint_delay: 10 ns``,
``reduction_bandwidth: 100 GB/s``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from etsim.errors import ConfigError
from etsim.units import parse_bandwidth, parse_time

__all__ = ["AstraCompat", "Resources", "SystemConfig", "load_system_config", "parse_flops"]

_FLOPS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_flops(value: object, *, key: str) -> float:
    """Parse ``"312 TFLOP/s"`` (or ``TFLOPS``) into operations per ns."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([KMGTP]?)FLOP(?:/s|S)\s*", str(value))
    if not m:
        raise ConfigError(f"{key}: expected a rate like '312 TFLOP/s', got {value!r}")
    try:
        number = float(m.group(1))
    except ValueError:
        raise ConfigError(f"{key}: bad number in {value!r}") from None
    if number <= 0:
        raise ConfigError(f"{key}: must be positive, got {value!r}")
    return number * _FLOPS[m.group(2)] / 1e9


@dataclass(frozen=True, kw_only=True)
class Resources:
    """Per-NPU limits on nodes in flight (0 = unlimited).

    The defaults are ASTRA-sim's hardware slots: one CPU op, one GPU compute op and one
    communication op (collective, send, memory access) at a time; receives take no slot.
    """

    compute_streams: int = 1
    comm_streams: int = 1
    cpu_ops: int = 1


@dataclass(frozen=True, kw_only=True)
class AstraCompat:
    """ASTRA-sim's system-layer conventions as a policy the layers consult (``etsim astra``).

    Set on :attr:`SystemConfig.astra`; None (the default) keeps etsim's own behaviour. Times are whole
    ns. What it changes:

    - every collective stream starts after one endpoint delay (and every message pays one, as
      :attr:`SystemConfig.endpoint_delay` does in either mode);
    - reductions cost ``3 * floor(bytes / local_mem_bw)`` ns (two reads and a write; ``local-mem-bw`` in
      GB/s of 10^9 bytes, i.e. bytes per ns);
    - a collective of S bytes is split into ``preferred-dataset-splits`` streams of ``S // splits`` bytes
      (raised to the group size for collectives other than all-gather), at most
      ``active-chunks-per-dimension`` of them in flight, queued LIFO or FIFO;
    - COMP nodes of 0 µs take 1 ns.
    """

    endpoint_delay: int = 10
    local_mem_bw: float = 0.0
    preferred_dataset_splits: int = 1
    active_chunks_per_dimension: int = 1
    scheduling_policy: str = "LIFO"

    def reduction_time(self, nbytes: float) -> float:
        """Ns of a reduction of *nbytes* bytes."""
        if self.local_mem_bw <= 0:
            return 0.0
        return 3.0 * math.floor(nbytes / self.local_mem_bw)

    def stream_sizes(self, size: int, group_size: int, *, all_gather: bool) -> list[int]:
        """Bytes of each stream (chunk) a collective of *size* bytes is split into."""
        splits = self.preferred_dataset_splits
        chunk = size // splits
        if not all_gather and chunk < group_size:
            chunk = group_size
            size = splits * group_size
        if chunk <= 0:
            return [size]
        streams = -(-size // chunk)
        return [chunk] * (streams - 1) + [size - chunk * (streams - 1)]


@dataclass(frozen=True, kw_only=True)
class SystemConfig:
    """Everything the system and workload layers need besides the workload and the network."""

    algorithms: dict[str, str] = field(default_factory=dict)
    """Collective name (``all_reduce`` …, or ``default``) → algorithm name or ET family path."""
    node_algorithms: dict[int, str] = field(default_factory=dict)
    """Workload node id → algorithm for that collective node only (ASTRA-sim's per-node custom)."""
    chunks: int = 1
    """Split every collective into this many pipelined chunks (concurrent algorithm instances)."""
    reduction_bandwidth: float | None = None
    """Bytes per ns a reduction processes; None = reductions are free."""
    endpoint_delay: float = 0.0
    """ns added before every message enters the network."""
    resources: Resources = field(default_factory=Resources)
    peak_flops: float | None = None
    """Operations per ns for the roofline model (with ``memory_bandwidth``); None = replay durations."""
    memory_bandwidth: float | None = None
    """Bytes per ns of local memory for the roofline model."""
    remote_memory_bandwidth: float = 50.0
    """Bytes per ns for MEM_LOAD/MEM_STORE nodes (default 50 GB/s)."""
    remote_memory_latency: float = 0.0
    """ns per MEM_LOAD/MEM_STORE node."""
    comm_groups: str | None = None
    """Path of a comm-group file (ASTRA-sim JSON or etsim YAML)."""
    ignore_ctrl_deps: bool = False
    """Walk ``data_deps`` only (PyTorch-derived traces keep call-stack parents in ``ctrl_deps``)."""
    base_dir: str = "."
    """Directory relative paths in this config resolve against."""
    astra: AstraCompat | None = None
    """ASTRA-sim compatibility policy (``etsim astra``), or None."""

    def with_overrides(self, **changes: Any) -> SystemConfig:
        """A copy with some fields replaced (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def resolve_path(self, value: str) -> str:
        """*value* made absolute relative to :attr:`base_dir` (absolute paths unchanged)."""
        return os.fspath(Path(self.base_dir) / value) if not os.path.isabs(value) else value


def _positive_int(value: object, key: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}: expected an integer >= {minimum}, got {value!r}")
    return value


def load_system_config(source: str | os.PathLike[str] | dict[str, Any], *, base_dir: str | None = None) -> SystemConfig:
    """Build a :class:`SystemConfig` from a YAML file or mapping, rejecting unknown keys."""
    where = "system config"
    if isinstance(source, dict):
        data = source
        base = base_dir or "."
    else:
        path = Path(source)
        where = str(path)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        base = base_dir or str(path.parent)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of keys to values")
    known = {f.name for f in fields(SystemConfig)} - {"base_dir", "astra", "node_algorithms"}
    values: dict[str, Any] = {"base_dir": base}
    for key, value in data.items():
        k = f"{where}: {key}"
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r}; valid keys: {', '.join(sorted(known))}")
        if key == "algorithms":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(f"{k}: expected a mapping like {{all_reduce: ring, default: ring}}")
            values[key] = {str(c): v for c, v in value.items()}
        elif key == "chunks":
            values[key] = _positive_int(value, k)
        elif key in ("reduction_bandwidth", "memory_bandwidth", "remote_memory_bandwidth"):
            if value is None and key == "remote_memory_bandwidth":
                raise ConfigError(f"{k}: expected a bandwidth such as '50 GB/s'")
            bandwidth = None if value is None else parse_bandwidth(value, key=k)
            if bandwidth is not None and bandwidth <= 0:
                raise ConfigError(f"{k}: must be positive, got {value!r}")
            values[key] = bandwidth
        elif key in ("endpoint_delay", "remote_memory_latency"):
            values[key] = parse_time(value, key=k)
        elif key == "peak_flops":
            values[key] = None if value is None else parse_flops(value, key=k)
        elif key == "resources":
            if not isinstance(value, dict):
                raise ConfigError(f"{k}: expected a mapping")
            names = {f.name for f in fields(Resources)}
            for rk, rv in value.items():
                if rk not in names:
                    raise ConfigError(f"{k}.{rk}: unknown resource; valid: {', '.join(sorted(names))}")
                _positive_int(rv, f"{k}.{rk}", minimum=0)
            values[key] = Resources(**value)
        elif key == "comm_groups":
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{k}: expected the path of a comm-group file, got {value!r}")
            values[key] = value
        elif key == "ignore_ctrl_deps":
            if not isinstance(value, bool):
                raise ConfigError(f"{k}: expected true or false")
            values[key] = value
    return SystemConfig(**values)
