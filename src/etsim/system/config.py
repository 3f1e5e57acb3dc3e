"""System parameters: algorithms per collective, chunking, reduction and endpoint costs, NPU resources.

A system YAML (``--system FILE``) holds the same keys as :class:`SystemConfig`; unknown keys
are errors naming the key. Units are strings (``100 GB/s``, ``10 ns``).

Defaults make a plain run directly comparable with the α-β closed forms: one chunk, no
endpoint delay, no reduction cost. Turn them on with ``chunks: 4``, ``endpoint_delay: 10 ns``,
``reduction_bandwidth: 100 GB/s``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from etsim.errors import ConfigError
from etsim.files import read_text
from etsim.system.rules import SelectionRule, parse_rules
from etsim.units import parse_bandwidth, parse_time

__all__ = [
    "CHUNKINGS",
    "MAX_CHUNKS",
    "STREAM_ORDERS",
    "Resources",
    "SystemConfig",
    "chunk_sizes",
    "load_system_config",
    "parse_flops",
]

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

    The defaults model an accelerator with one CPU op, one GPU compute op and one
    communication op (collective, send, memory access) at a time; receives take no slot.
    """

    compute_streams: int = 1
    comm_streams: int = 1
    cpu_ops: int = 1


#: Values of :attr:`SystemConfig.stream_order`.
STREAM_ORDERS = ("fifo", "lifo")
#: Values of :attr:`SystemConfig.chunking`.
CHUNKINGS = ("equal", "whole")
#: The most chunks (streams) one collective may be split into.
MAX_CHUNKS = 1_000_000


def chunk_sizes(size: int, chunks: int, group_size: int, *, per_rank_size: bool, rule: str = "equal") -> list[float]:
    """Bytes of each chunk (stream) a collective of *size* bytes is split into.

    Args:
        size: the collective's ``comm_size``.
        chunks: the number of chunks asked for.
        group_size: ranks in the communicator group.
        per_rank_size: the size is per rank (all-gather), not the whole buffer.
        rule: ``equal`` — *chunks* equal shares (fractional bytes allowed); ``whole`` — ``ceil(size /
            chunk)`` chunks of ``chunk = size // chunks`` whole bytes each, the last one included (so the
            chunks may carry a little more than *size*), with ``chunk`` raised to one byte per rank when
            the size is a whole buffer (a chunk never splits below a byte per rank).
    """
    if chunks > MAX_CHUNKS:
        raise ConfigError(
            f"a collective of {size} bytes split into {chunks:,} chunks: more than {MAX_CHUNKS:,} chunks per "
            "collective is refused (chunks / preferred-dataset-splits too large)"
        )
    if rule == "equal":
        return [size / chunks] * chunks
    chunk = size // chunks
    if not per_rank_size and chunk < group_size:
        chunk = group_size
        size = chunks * group_size
    if chunk <= 0:
        return [float(size)]
    return [float(chunk)] * -(-size // chunk)


@dataclass(frozen=True, kw_only=True)
class SystemConfig:
    """Everything the system and workload layers need besides the workload and the network."""

    algorithms: dict[str, str] = field(default_factory=dict)
    """Collective name (``all_reduce`` …, or ``default``) → algorithm name or ET family path."""
    algorithm_origins: dict[str, str] = field(default_factory=dict)
    """Where each ``algorithms`` entry was given (``FILE: algorithms.KEY``; absent means ``--algo``), for messages."""
    algorithm_rules: tuple[SelectionRule, ...] = ()
    """The selection table (the list form of ``algorithms``: first matching rule wins, see
    :mod:`etsim.system.rules`); when given, it replaces the mapping ``algorithms``."""
    node_algorithms: dict[int, str] = field(default_factory=dict)
    """Workload node id → algorithm for that collective node only (overrides the per-collective choice)."""
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
    """Path of a comm-group file (JSON `{"1": [0, 1]}` or etsim YAML)."""
    ignore_ctrl_deps: bool = False
    """Walk ``data_deps`` only (PyTorch-derived traces keep call-stack parents in ``ctrl_deps``)."""
    base_dir: str = "."
    """Directory relative paths in this config resolve against."""
    # -- how collectives are split, queued and costed; the defaults match the α-β closed forms.
    chunking: str = "equal"
    """How a collective's bytes split into chunks: ``equal`` or ``whole`` (see :func:`chunk_sizes`)."""
    stream_order: str = "fifo"
    """Order in which the queued chunks (streams) of one collective start: ``fifo`` or ``lifo``."""
    active_streams: int = 0
    """Chunks of one collective in flight at once; the others wait in the queue (0 = all at once)."""
    stream_delay: float = 0.0
    """ns each chunk stream waits before its first step."""
    phase_delay: float = 0.0
    """ns between consecutive dimension phases of multi-dimensional algorithms (``hierarchical``)."""
    reduction_passes: int = 1
    """Memory passes per reduced byte (3 = read two operands, write one): a reduction of m bytes costs
    ``passes · m / reduction_bandwidth``."""
    integer_ns: bool = False
    """Truncate each reduction's ``m / reduction_bandwidth`` to whole ns before multiplying by the passes."""
    min_compute_ns: float = 0.0
    """Replayed COMP durations shorter than this take this long (e.g. 1 ns for 0 µs nodes)."""
    synchronise_collectives: bool = True
    """A collective completes on a rank only once every member of its group has issued it (a barrier
    of zero bytes synchronises; a broadcast root waits for its receivers)."""
    families_as_written: bool = False
    """Run ingested Chakra ET algorithm families as written: one stream, the files' absolute sizes, no
    endpoint or stream delay, COMP nodes cost their own duration (at least ``min_compute_ns``)."""
    fast_path: bool = True
    """Evaluate collectives whose ranks share one algorithm graph in bulk (exactly the event path's
    result, far fewer events; ``workload/bulk.py``); false walks every message (``--no-fast-path``)."""

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
        text = read_text(path, "system file")
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        base = base_dir or str(path.parent)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of keys to values")
    known = {f.name for f in fields(SystemConfig)} - {
        "base_dir",
        "node_algorithms",
        "algorithm_origins",
        "algorithm_rules",
    }
    values: dict[str, Any] = {"base_dir": base}
    for key, value in data.items():
        k = f"{where}: {key}"
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r}; valid keys: {', '.join(sorted(known))}")
        if key == "algorithms" and isinstance(value, list):
            values["algorithm_rules"] = parse_rules(value, where)
        elif key == "algorithms":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(
                    f"{k}: expected a mapping like {{all_reduce: ring, default: ring}} or a list of rules like "
                    "[{collective: all_reduce, max_bytes: 256 KiB, algorithm: tree}, {default: ring}]"
                )
            values[key] = {str(c): v for c, v in value.items()}
            values["algorithm_origins"] = {str(c): f"{where}: algorithms.{c}" for c in value}
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
        elif key in ("ignore_ctrl_deps", "integer_ns", "families_as_written", "synchronise_collectives", "fast_path"):
            if not isinstance(value, bool):
                raise ConfigError(f"{k}: expected true or false")
            values[key] = value
        elif key in ("stream_delay", "phase_delay", "min_compute_ns"):
            values[key] = parse_time(value, key=k)
        elif key in ("reduction_passes", "active_streams"):
            values[key] = _positive_int(value, k, minimum=1 if key == "reduction_passes" else 0)
        elif key in ("chunking", "stream_order"):
            choices = CHUNKINGS if key == "chunking" else STREAM_ORDERS
            if value not in choices:
                raise ConfigError(f"{k}: expected one of {', '.join(choices)}, got {value!r}")
            values[key] = value
    return SystemConfig(**values)
