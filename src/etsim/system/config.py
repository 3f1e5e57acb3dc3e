"""System parameters: algorithms per collective, chunking, reduction and endpoint costs, NPU resources.

A system YAML (``--system FILE``) holds the same keys as :class:`SystemConfig`; unknown keys
are errors naming the key. Units are strings (``100 GB/s``, ``10 ns``).

Defaults make a plain run directly comparable with the α-β closed forms: one chunk, no
endpoint delay, no reduction cost. Turn them on with ``chunks: 4``, ``endpoint_delay: 10 ns``,
``reduction_bandwidth: 100 GB/s``.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from etsim.errors import ConfigError
from etsim.files import parse_yaml, read_text
from etsim.options import (
    MAX_BANDWIDTH,
    MAX_TIME,
    Bandwidth,
    Boolean,
    Choice,
    Flops,
    Integer,
    Nested,
    Number,
    Optional,
    Text,
    Time,
    keys_named,
    option,
    option_fields,
    parse_options,
)
from etsim.system.algorithms.nccl.settings import NcclSettings
from etsim.system.rules import SelectionRule, parse_rules

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

#: Parse ``"312 TFLOP/s"`` (or ``TFLOPS``) into operations per ns.
parse_flops = Flops()


def check_built(obj: Any, prefix: str = "") -> None:
    """Check the options of a dataclass built in Python: what a file's parsers would have refused, as an error.

    Values given in Python are in etsim's own units already (bytes per ns, ns, operations per ns), so they skip the
    parsers that read files; a negative bandwidth, a chunk count of 0 or a misspelt choice ran (or failed deep in the
    run) unchecked. Types, ranges and choices are checked here, each named by its key (*prefix* + name); numpy's
    numbers count as numbers, and per-rank mappings and windows are stored as a file's parser gives them.
    """
    for f in option_fields(type(obj)):
        value = getattr(obj, f.name)
        checked = _check_value(f.metadata.get("parse"), value, prefix + f.name)
        if checked is not value:
            object.__setattr__(obj, f.name, checked)  # (frozen: set once, as built)


def _check_value(parse: Any, value: Any, key: str) -> Any:
    """*value* (per-rank mappings and windows as a file's parser gives them) if it is one *parse* could give."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if isinstance(parse, Optional):
        return value if value is None else _check_value(parse.inner, value, key)
    if parse is _rank_times:
        if not isinstance(value, Mapping) or not all(_ns(v, math.inf) for v in value.values()):
            raise ConfigError(f"{key}: expected a mapping of rank to ns (numbers >= 0), got {value!r}")
        return {_rank_key(rank, key): float(when) for rank, when in value.items()}
    if parse is _compute_slowdown or parse is _node_priorities:
        return parse(dict(value) if isinstance(value, Mapping) else value, key)
    if parse is _slowdown_windows:
        return _windows(value, key)
    if isinstance(parse, Integer):
        low, high = parse.minimum, parse.maximum
        ok = real and isinstance(value, numbers.Integral) and (low is None or int(value) >= low) and (
            high is None or int(value) <= high)  # fmt: skip
        expected = "an integer " + _range(low, high)
    elif isinstance(parse, Number):
        least, most = parse.minimum, parse.maximum
        ok = real and math.isfinite(value) and (least is None or value >= least) and (most is None or value <= most)
        expected = "a finite number " + _range(least, most)
    elif isinstance(parse, Time):
        ok, expected = _ns(value, parse.maximum), "ns (a finite number >= 0)"
    elif isinstance(parse, Bandwidth):
        ok, expected = real and 0 < value <= MAX_BANDWIDTH, "bytes per ns (a number > 0)"
    elif isinstance(parse, Flops):
        ok, expected = real and 0 < value < math.inf, "operations per ns (a number > 0)"
    elif isinstance(parse, Boolean):
        ok, expected = _truth(value), "true or false"
    elif isinstance(parse, Choice):
        ok, expected = value in parse.choices, "one of " + ", ".join(parse.choices)
    elif isinstance(parse, Text):
        ok, expected = value is None or isinstance(value, str | os.PathLike), "a string"
    elif isinstance(parse, Nested):
        ok, expected = isinstance(value, parse.cls), f"a {parse.cls.__name__}"
    else:
        return value
    if not ok:
        numeric = isinstance(parse, Integer | Number | Time | Bandwidth | Flops) and isinstance(value, str)
        text = " (in Python, numbers in etsim's units: load_system_config reads text)" if numeric else ""
        raise ConfigError(f"{key}: expected {expected.strip()}, got {value!r}{text}")
    return value


def _truth(value: Any) -> bool:
    """Whether *value* is a truth value (numpy's, and 0 or 1, too)."""
    try:
        return not isinstance(value, str) and value in (0, 1)
    except (TypeError, ValueError):  # (an array: no single truth)
        return False


def _ns(value: Any, most: float) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 <= float(value) <= most


def _windows(value: Any, key: str) -> tuple[tuple[int, float, float, float], ...]:
    """``slowdown_windows`` given as ``(rank, from_ns, until_ns, factor)`` rows, checked, as tuples of floats."""
    rows = value if isinstance(value, list | tuple) else None
    if rows is None or not all(isinstance(w, list | tuple) and len(w) == 4 for w in rows):
        raise ConfigError(f"{key}: expected (rank, from_ns, until_ns, factor) rows, got {value!r}")
    out = []
    for i, (rank, start, until, factor) in enumerate(rows):
        if not (_ns(start, MAX_TIME) and _ns(until, math.inf) and start < until):
            raise ConfigError(f"{key}[{i}]: expected from_ns < until_ns (ns >= 0), got {start!r}, {until!r}")
        out.append((_rank_key(rank, f"{key}[{i}]"), float(start), float(until), _factor(factor, f"{key}[{i}]")))
    return tuple(out)


def _range(low: float | None, high: float | None) -> str:
    return " and ".join([*([f">= {low}"] if low is not None else []), *([f"<= {high}"] if high is not None else [])])


@dataclass(frozen=True, kw_only=True)
class Resources:
    """Per-NPU limits on nodes in flight (0 = unlimited).

    The defaults model an accelerator with one CPU op, one GPU compute op and one
    communication op (collective, send, memory access) at a time; receives take no slot.
    """

    compute_streams: int = option(1, "GPU compute nodes in flight at once (0 = unlimited)", Integer(0))
    comm_streams: int = option(1, "communication nodes (collectives, sends, memory accesses) in flight", Integer(0))
    cpu_ops: int = option(1, "CPU nodes in flight at once (0 = unlimited)", Integer(0))

    def __post_init__(self) -> None:
        check_built(self, "resources.")


#: Values of :attr:`SystemConfig.stream_order`.
STREAM_ORDERS = ("fifo", "lifo")
#: Values of :attr:`SystemConfig.chunking`.
CHUNKINGS = ("equal", "whole", "whole_system")
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
            the size is a whole buffer (a chunk never splits below a byte per rank); ``whole_system`` — the same,
            *group_size* being every NPU of the system's (a group's chunk never below a byte per NPU of it).
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


def _node_priorities(value: object, key: str = "node_priorities") -> dict[str, int]:
    """``{"RANK:NODE": int}``, checked."""
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping of 'RANK:NODE' to an integer priority, got {value!r}")
    out: dict[str, int] = {}
    for name, priority in value.items():
        parts = str(name).split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ConfigError(f"{key}: {name!r} is not 'RANK:NODE' (two integers, e.g. '0:12')")
        if isinstance(priority, bool) or not isinstance(priority, numbers.Integral) or abs(int(priority)) > 1 << 31:
            raise ConfigError(f"{key}.{name}: expected an integer priority, got {priority!r}")
        out[f"{int(parts[0])}:{int(parts[1])}"] = int(priority)
    return out


def _compute_slowdown(value: object, key: str = "compute_slowdown") -> dict[int, float]:
    """``{rank: factor}``, checked: a rank is a non-negative integer, a factor a finite number > 0."""
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping of rank to a slowdown factor ({{3: 1.5}}), got {value!r}")
    return {_rank_key(rank, key): _factor(factor, f"{key}.{rank}") for rank, factor in value.items()}


def _factor(factor: object, key: str) -> float:
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not 0 < float(factor) < math.inf:
        raise ConfigError(f"{key}: expected a finite factor > 0 (2 = compute twice as long), got {factor!r}")
    return float(factor)  # (numpy's too)


def _rank_key(rank: object, key: str) -> int:
    text = str(rank).strip()
    if isinstance(rank, bool) or not text.isdigit():
        raise ConfigError(f"{key}: {rank!r} is not a rank (a non-negative integer)")
    return int(text)


def _rank_times(value: object, key: str = "rank_start") -> dict[int, float]:
    """``{rank: time}``, checked (when each named rank starts; what each compute node of a rank adds)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping of rank to a time ({{3: 10 us}}), got {value!r}")
    return {_rank_key(rank, key): Time()(when, key=f"{key}.{rank}") for rank, when in value.items()}


def _slowdown_windows(value: object, key: str = "slowdown_windows") -> tuple[tuple[int, float, float, float], ...]:
    """``[{ranks: [...], factor: F, from: T, until: T}, …]`` → ``(rank, from_ns, until_ns, factor)`` rows, checked."""
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of {{ranks: [R, …], factor: F, from: T, until: T}}, got {value!r}")
    rows = []
    for i, entry in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(entry, dict) or not {"ranks", "factor"} <= set(entry) <= {"ranks", "factor", "from", "until"}:
            raise ConfigError(f"{where}: expected {{ranks: [R, …], factor: F, from: T, until: T}}, got {entry!r}")
        ranks = entry["ranks"]
        if not isinstance(ranks, list) or not ranks:
            raise ConfigError(f"{where}.ranks: expected a non-empty list of ranks, got {ranks!r}")
        factor = _factor(entry["factor"], f"{where}.factor")
        start = Time(bare_unit="ns")(entry.get("from", 0), key=f"{where}.from")
        until = Time()(entry["until"], key=f"{where}.until") if "until" in entry else math.inf
        if not start < until:
            raise ConfigError(f"{where}: until must come after from")
        rows += [(_rank_key(r, f"{where}.ranks"), start, until, factor) for r in ranks]
    return tuple(rows)


@dataclass(frozen=True, kw_only=True)
class SystemConfig:
    """Everything the system and workload layers need besides the workload and the network.

    Every field declared with :func:`~etsim.options.option` is a system YAML key of the same name (and, where
    ``etsim run`` has one, a flag); the others are set by the program, not by files.
    """

    algorithms: dict[str, str] = option(
        help="algorithm per collective ({all_reduce: ring, default: direct}), or a selection table (a list of rules)",
        default_factory=dict,
        flag=False,
    )
    """Collective name (``all_reduce`` …, or ``default``) → algorithm name or ET family path."""
    algorithm_origins: dict[str, str] = field(default_factory=dict)
    """Where each ``algorithms`` entry was given (``FILE: algorithms.KEY``; absent means ``--algo``), for messages."""
    algorithm_rules: tuple[SelectionRule, ...] = ()
    """The selection table (the list form of ``algorithms``: first matching rule wins, see
    :mod:`etsim.system.rules`); when given, it replaces the mapping ``algorithms``."""
    node_algorithms: dict[int, str] = field(default_factory=dict)
    """Workload node id → algorithm for that collective node only (overrides the per-collective choice)."""
    node_priorities: dict[str, int] = option(
        help="issue order among ready nodes of one slot class: {'RANK:NODE': priority}, lower first (default 0)",
        parse=_node_priorities,
        default_factory=dict,
        flag=False,
    )
    """``"RANK:NODE"`` → priority: when nodes of one slot class (compute, communication, CPU) are ready on a rank at
    once, the lowest priority takes a free slot first, then the smallest node id (the default order). A rewrite of
    the issue order that keeps every dependency (``etsim optimise``'s reordering move)."""
    compute_slowdown: dict[int, float] = option(
        help="stragglers: {RANK: factor}, each of the rank's compute nodes takes factor times as long (2 = half speed)",
        parse=_compute_slowdown,
        default_factory=dict,
        flag=False,
    )
    """Rank → factor multiplying the duration of every compute node of that rank (a slow GPU). Ranks whose
    compute differs are not mirror images: replica folding is off in such a run (said in its plan)."""
    compute_jitter: float = option(
        0.0,
        "noise: each compute node takes a random factor as long, lognormal with mean 1 and this sigma (0: none)",
        Number(0, 1),
        metavar="SIGMA",
    )
    """σ of the lognormal factor ``exp(N(−σ²/2, σ))`` (mean 1) drawn for every compute node of every rank, from
    ``numpy.random.default_rng([jitter_seed, rank])`` in node order: the same inputs and seed give the same run."""
    compute_delay: dict[int, float] = option(
        help="stragglers: {RANK: time}, each of the rank's compute nodes takes this much longer (after factors)",
        parse=_rank_times,
        default_factory=dict,
        flag=False,
    )
    """Rank → time added to every compute node of the rank (a fixed cost per kernel: a slow launch, a noisy
    neighbour), after :attr:`compute_slowdown`, jitter and windows multiplied it."""
    slowdown_windows: tuple[tuple[int, float, float, float], ...] = option(
        help="stragglers for a while: [{ranks: [R, ...], factor: F, from: TIME, until: TIME}], compute nodes that "
        "start in the window take factor times as long",
        parse=_slowdown_windows,
        default_factory=tuple,
        flag=False,
    )
    """``(rank, from_ns, until_ns, factor)`` rows: a compute node of the rank that *starts* at a time in
    ``[from, until)`` takes ``factor`` times as long, on top of :attr:`compute_slowdown` (factors of overlapping
    windows multiply). A node is timed once, when it starts: one that straddles a window's edge is not split."""
    rank_start: dict[int, float] = option(
        help="ranks that start late: {RANK: time} (a job arriving on a shared cluster; default: every rank at 0)",
        parse=_rank_times,
        default_factory=dict,
        flag=False,
    )
    """Rank → when its first nodes are issued (ns); ranks not named start at 0."""
    rank_fail: dict[int, float] = option(
        help="ranks whose GPU fails: {RANK: time}, after which they issue nothing (their job stops)",
        parse=_rank_times,
        default_factory=dict,
        flag=False,
    )
    """Rank → when it fails (ns): from then on it starts no node; what it had in flight drains. The run ends when
    every other rank has finished; a failed rank's result ends at its failure (``Result.sim["failed"]``)."""
    jitter_seed: int = option(0, "seed of compute_jitter's random factors", Integer(0), metavar="N")
    """The seed of :attr:`compute_jitter` (one stream per rank)."""
    chunks: int = option(1, "split each collective into N pipelined chunks", Integer(1), metavar="N")
    """Split every collective into this many pipelined chunks (concurrent algorithm instances)."""
    reduction_bandwidth: float | None = option(
        None, "cost reductions at this bandwidth, e.g. '100 GB/s' (default: free)", Optional(Bandwidth())
    )
    """Bytes per ns a reduction processes; None = reductions are free."""
    shared_reductions: bool = option(
        True,
        "reductions on one NPU take turns at its reduction_bandwidth (across chunks, collectives and streams); "
        "false: each runs at the full bandwidth",
        Boolean(),
        flag=False,
    )
    """One reduction unit per NPU: algorithm reductions priced by ``reduction_bandwidth`` run one at a time in
    the order they become ready (FIFO), so k concurrent reductions of m bytes end k·m/bandwidth after they
    start, never sooner. False: every reduction has the whole bandwidth (what the compatibility
    mode of :mod:`etsim.compat` reproduces)."""
    endpoint_delay: float = option(0.0, "delay added to every message, e.g. '10 ns'", Time())
    """ns added before every message enters the network."""
    endpoint_delay_at: str = option(
        "send", "where a message pays endpoint_delay: before it enters the network, or once it has arrived and its "
        "receive is posted",
        Choice("send", "receive"), flag=False,
    )  # fmt: skip
    """``send``: a message waits ``endpoint_delay`` before it enters the network; ``receive``: it enters at once
    and is delivered ``endpoint_delay`` after it arrives (the receiver's processing, as in the compatibility mode
    of :mod:`etsim.compat`; it matters when messages contend for links)."""
    group_endpoint_delay: float | None = option(
        None,
        "endpoint and stream delay of collectives on a named communicator group (default: endpoint_delay and "
        "stream_delay)",
        Optional(Time()),
        flag=False,
    )
    """For collectives whose ``pg_name`` names a communicator group (not the world): the delay every message and
    every stream pays instead of ``endpoint_delay`` and ``stream_delay`` (None: those); the compatibility mode
    (:mod:`etsim.compat`) runs such groups as a local dimension with a fixed delay of 10 ns."""
    p2p_endpoint_delay: bool = option(
        True, "workload SEND/RECV messages pay endpoint_delay too (false: only collectives' messages)", Boolean(),
        flag=False,
    )  # fmt: skip
    """Whether the workload's own point-to-point messages (pipeline sends) pay ``endpoint_delay``; False: only the
    messages of collective algorithms do (what the compatibility mode of :mod:`etsim.compat` reproduces)."""
    resources: Resources = option(
        help="nodes in flight per NPU: compute_streams, comm_streams, cpu_ops",
        default_factory=Resources,
        parse=Nested(Resources, unknown="{key}: unknown resource; valid: {valid}"),
        flag=False,
    )
    peak_flops: float | None = option(
        None, "roofline peak compute rate, e.g. '312 TFLOP/s' (default: replay durations)", Optional(Flops())
    )
    """Operations per ns for the roofline model (with ``memory_bandwidth``); None = replay durations."""
    memory_bandwidth: float | None = option(
        None, "local memory bandwidth for the roofline model", Optional(Bandwidth()), flag=False
    )
    """Bytes per ns of local memory for the roofline model."""
    remote_memory_bandwidth: float = option(50.0, "bandwidth of MEM_LOAD/MEM_STORE nodes", Bandwidth(), flag=False)
    """Bytes per ns for MEM_LOAD/MEM_STORE nodes (default 50 GB/s)."""
    remote_memory_latency: float = option(0.0, "latency of each MEM_LOAD/MEM_STORE node", Time(), flag=False)
    """ns per MEM_LOAD/MEM_STORE node."""
    comm_groups: str | None = option(
        None,
        'communicator groups: JSON {"1": [0, 1]} or YAML groups: {1: [0, 1]}',
        Text(empty=False, what="the path of a comm-group file"),
        metavar="FILE",
    )
    """Path of a comm-group file (JSON `{"1": [0, 1]}` or etsim YAML)."""
    ignore_ctrl_deps: bool = option(False, "walk data dependencies only", Boolean())
    """Walk ``data_deps`` only (PyTorch-derived traces keep call-stack parents in ``ctrl_deps``)."""
    base_dir: str = "."
    """Directory relative paths in this config resolve against."""
    where: str = ""
    """The file it was read from (empty: built in code), for messages about its keys."""
    # -- how collectives are split, queued and costed; the defaults match the α-β closed forms.
    chunking: str = option("equal", "how a collective's bytes split into chunks", Choice(*CHUNKINGS), flag=False)
    """How a collective's bytes split into chunks: ``equal`` or ``whole`` (see :func:`chunk_sizes`)."""
    stream_order: str = option("fifo", "order queued chunks start in", Choice(*STREAM_ORDERS), flag=False)
    """Order in which the queued chunks (streams) of one collective start: ``fifo`` or ``lifo``."""
    active_streams: int = option(0, "chunks of one collective in flight at once (0 = all)", Integer(0), flag=False)
    """Chunks of one collective in flight at once; the others wait in the queue (0 = all at once)."""
    stream_delay: float = option(0.0, "delay before each chunk stream's first step", Time(), flag=False)
    """ns each chunk stream waits before its first step."""
    phase_delay: float = option(0.0, "delay between dimension phases", Time(), flag=False)
    """ns between consecutive dimension phases of multi-dimensional algorithms (``hierarchical``)."""
    reduction_passes: int = option(1, "memory passes per reduced byte", Integer(1, 1000), flag=False)
    """Memory passes per reduced byte (3 = read two operands, write one): a reduction of m bytes costs
    ``passes · m / reduction_bandwidth``."""
    integer_ns: bool = option(False, "truncate reduction and roofline compute times to whole ns", Boolean(), flag=False)
    """Truncate each reduction's ``m / reduction_bandwidth`` to whole ns before multiplying by the passes, and each
    roofline COMP time to whole ns."""
    min_compute_ns: float = option(0.0, "the shortest a replayed COMP node takes", Time(), flag=False)
    """Replayed COMP durations shorter than this take this long (e.g. 1 ns for 0 µs nodes)."""
    synchronise_collectives: bool = option(
        True, "a collective completes only once every member has issued it", Boolean(), flag=False
    )
    """A collective completes on a rank only once every member of its group has issued it (a barrier
    of zero bytes synchronises; a broadcast root waits for its receivers)."""
    families_as_written: bool = option(False, "run ingested algorithm families as written", Boolean(), flag=False)
    """Run ingested Chakra ET algorithm families as written: one stream, the files' absolute sizes, no
    endpoint or stream delay, COMP nodes cost their own duration (at least ``min_compute_ns``)."""
    fast_path: bool = option(
        True,
        "evaluate collectives whose ranks share one algorithm graph in bulk (the results are the event path's, "
        "bit for bit; off walks every message, only slower)",
        Boolean(),
    )
    """Evaluate collectives whose ranks share one algorithm graph in bulk (exactly the event path's
    result, far fewer events; ``workload/bulk.py``); false walks every message (``--no-fast-path``)."""

    fold_replicas: bool = option(
        True,
        "simulate one of each set of symmetric data-parallel replicas when the run is provably the same for all "
        "(the others mirror it; off simulates every rank, only slower)",
        Boolean(),
    )
    """Simulate one of each set of symmetric replicas when the workload, its groups and the topology are provably
    invariant under moving every rank to the next replica (``workload/fold.py``); the other ranks' results mirror
    theirs, exactly. False simulates every rank (``--no-fold-replicas``)."""

    nccl: NcclSettings = option(
        help="how the nccl algorithm runs collectives: NCCL's knobs (algo, proto, min_channels, max_channels, "
        "min_ctas, max_ctas, nvls, collnet), its version and launch (gpus_per_process)",
        parse=Nested(NcclSettings, unknown="{key}: unknown NCCL setting {name!r}; valid: {valid}"),
        default_factory=NcclSettings,
        flag=False,
    )
    """NCCL's knobs for the ``nccl`` algorithm (``system/algorithms/nccl/settings.py``; ``docs/nccl.md``)."""

    def ranks_named(self, *, in_effect: bool = False) -> dict[str, list[int]]:
        """The per-rank settings (straggler factors, delays, windows, late starts, failures) → the ranks they name.

        With *in_effect*, only the entries that change something (a factor of 1, a delay or start of 0 do not):
        each makes its ranks differ from their replicas, so a run with any simulates every rank.
        """
        named = {
            "compute_slowdown": [r for r, f in self.compute_slowdown.items() if f != 1.0 or not in_effect],
            "compute_delay": [r for r, d in self.compute_delay.items() if d or not in_effect],
            "slowdown_windows": [row[0] for row in self.slowdown_windows],
            "rank_start": [r for r, t in self.rank_start.items() if t or not in_effect],
            "rank_fail": list(self.rank_fail),
        }
        return {key: ranks for key, ranks in named.items() if ranks}

    def __post_init__(self) -> None:
        algorithms = self.algorithms
        if isinstance(algorithms, Mapping) and not isinstance(algorithms, dict):
            object.__setattr__(self, "algorithms", algorithms := dict(algorithms))
        if not isinstance(algorithms, dict) or not all(isinstance(v, str) for v in algorithms.values()):
            raise ConfigError(
                f"SystemConfig.algorithms: expected a mapping like {{'all_reduce': 'ring', 'default': 'direct'}}, "
                f"got {algorithms!r}"
            )
        check_built(self, "SystemConfig.")

    def with_overrides(self, **changes: Any) -> SystemConfig:
        """A copy with some fields replaced (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def resolve_path(self, value: str) -> str:
        """*value* made absolute relative to :attr:`base_dir` (absolute paths unchanged)."""
        return os.fspath(Path(self.base_dir) / value) if not os.path.isabs(value) else value


def load_system_config(source: str | os.PathLike[str] | dict[str, Any], *, base_dir: str | None = None) -> SystemConfig:
    """Build a :class:`SystemConfig` from a YAML file or mapping, rejecting unknown keys."""
    where = "system config"
    if isinstance(source, dict):
        data = source
        base = base_dir or "."
    else:
        path = Path(source)
        where = str(path)
        data = parse_yaml(read_text(path, "system file"), str(path)) or {}
        base = base_dir or str(path.parent)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of keys to values")
    escaped = where.replace("{", "{{").replace("}", "}}")
    values = parse_options(
        SystemConfig, data, key=keys_named(where), unknown=escaped + ": unknown key {name!r}; valid keys: {valid}"
    )
    values["base_dir"] = base
    values["where"] = "" if isinstance(source, dict) else where
    if "algorithms" in values:
        algorithms = values["algorithms"]
        if isinstance(algorithms, list):
            values["algorithm_rules"] = parse_rules(algorithms, where)
            del values["algorithms"]
        elif isinstance(algorithms, dict) and all(isinstance(v, str) for v in algorithms.values()):
            values["algorithms"] = {str(c): v for c, v in algorithms.items()}
            values["algorithm_origins"] = {str(c): f"{where}: algorithms.{c}" for c in algorithms}
        else:
            raise ConfigError(
                f"{where}: algorithms: expected a mapping like {{all_reduce: ring, default: ring}} or a list of rules "
                "like [{collective: all_reduce, max_bytes: 256 KiB, algorithm: tree}, {default: ring}]"
            )
    return SystemConfig(**values)
