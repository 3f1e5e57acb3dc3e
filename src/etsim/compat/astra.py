"""Run ASTRA-sim inputs and reproduce its analytical back end's numbers.

This is configuration, not a second simulator: ASTRA-sim's system JSON becomes a
:class:`~etsim.system.config.SystemConfig` whose general settings take ASTRA-sim's values
(:func:`astra_settings`: integer-byte chunking, a LIFO/FIFO stream queue with ASTRA-sim's active
streams and one endpoint delay per stream, three memory passes per reduced byte truncated to whole
ns, 1 ns minimum compute, custom collectives run as written); its network YAML is read by
:class:`~etsim.compat.network.AstraNetworkFormat` (1 GB = 2^30 bytes, latency in ns), and the network
model runs with integer-ns truncation (congestion-unaware: the whole message charged to the first
dimension where source and destination differ; congestion-aware: store-and-forward per hop). Native
algorithm lists (``ring,direct;…`` per dimension) become ``astra:`` specs served by
:mod:`etsim.compat.collectives` (ASTRA-sim's implementations, one phase per dimension), custom collectives
ingested Chakra ET families.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from etsim.chakra.graph import COLLECTIVE_NAMES, CollectiveType, NodeType, Workload
from etsim.chakra.io import load_workload
from etsim.compat.collectives import NAMES, astra_spec
from etsim.errors import ConfigError, EtsimWarning
from etsim.errors import warn as _warn  # (run_astra's *warn* parameter names where its notes go)
from etsim.files import parse_json, read_text
from etsim.network import load_network
from etsim.report.result import Result
from etsim.simulation import NO_REPORTS, simulate
from etsim.system.config import SystemConfig
from etsim.system.costs import CostModel
from etsim.workload.observe import RunObserver

if TYPE_CHECKING:
    from etsim.workload.engine import Engine
    from etsim.workload.runs import GraphRun

__all__ = [
    "MODEL_OPTIONS",
    "SYSTEM_KEYS",
    "astra_output",
    "astra_settings",
    "gpu_compute_ns",
    "load_astra_remote_memory",
    "load_astra_system",
    "run_astra",
]

#: Network model and options of each back end: whole-ns truncation; the unaware one charges a
#: message to the first dimension where source and destination differ.
MODEL_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "unaware": ("analytical", {"integer_ns": True, "dimension_charge": "first_differing"}),
    "aware": ("link", {"integer_ns": True}),
}


def astra_settings(
    *,
    endpoint_delay: int = 10,
    local_mem_bw: float = 0.0,
    preferred_dataset_splits: int = 1,
    active_chunks_per_dimension: int = 1,
    scheduling_policy: str = "LIFO",
    queues_per_dim: int = 1,
) -> dict[str, Any]:
    """The :class:`~etsim.system.config.SystemConfig` settings that reproduce ASTRA-sim's system layer.

    - a collective of S bytes is split into ``ceil(S / chunk)`` streams of ``chunk = S // splits`` bytes
      each, the last one too (raised to the system's NPU count for collectives other than all-gather); each
      stream is a list of phases, one per dimension, that wait in per-dimension queues running
      ``ceil(active-chunks-per-dimension / queues)`` phases each (``etsim.compat.collectives``);
      collectives in a queue are ordered LIFO or FIFO (EXPLICIT behaves as LIFO: one collective is in
      flight per rank, so the order never matters);
    - ring and halvingDoubling phases start after one endpoint delay and every message pays one, on arrival
      (the receiver processes it; before it enters the network, contention could order messages differently);
      the workload's
      own SEND/RECV messages pay none (its workload layer hands them to the network directly); collectives on a
      communicator group (a ``pg_name``) pay 10 ns in place of the endpoint delay (such a group is a local
      dimension whose delay is fixed);
    - reductions cost ``3 * floor(bytes / local_mem_bw)`` ns (two reads and a write; ``local-mem-bw`` in
      GB/s of 10^9 bytes, i.e. bytes per ns);
    - COMP nodes of 0 µs take 1 ns; multi-dimensional phases start after one endpoint delay;
    - custom (Chakra ET) collectives run as written.
    """
    return {
        "endpoint_delay": float(endpoint_delay),
        "p2p_endpoint_delay": False,
        "endpoint_delay_at": "receive",
        "group_endpoint_delay": 10.0,
        "chunks": preferred_dataset_splits,
        "chunking": "whole_system",
        "stream_order": "fifo" if scheduling_policy == "FIFO" else "lifo",
        "active_streams": -(-active_chunks_per_dimension // queues_per_dim),
        "stream_delay": float(endpoint_delay),
        "phase_delay": endpoint_delay,
        "reduction_bandwidth": float(local_mem_bw) if local_mem_bw > 0 else None,
        "reduction_passes": 3,
        "shared_reductions": False,
        "integer_ns": True,
        "min_compute_ns": 1.0,
        "families_as_written": True,
        "synchronise_collectives": False,  # no cross-NPU barrier: ranks leave a collective on their own messages
    }


_COLLECTIVE_KEYS = {
    "all-reduce": "all_reduce",
    "all-gather": "all_gather",
    "reduce-scatter": "reduce_scatter",
    "all-to-all": "all_to_all",
}

#: Keys of ASTRA-sim's system JSON that etsim reads.
SYSTEM_KEYS = frozenset(
    {
        "scheduling-policy",
        "collective-optimization",
        "preferred-dataset-splits",
        "active-chunks-per-dimension",
        "endpoint-delay",
        "local-mem-bw",
        "peak-perf",
        "roofline-enabled",
        "replay-only",
        "per-node-custom-implementation",
        *(f"{c}-implementation" for c in _COLLECTIVE_KEYS),
        *(f"{c}-implementation-custom" for c in _COLLECTIVE_KEYS),
    }
)
#: Keys ASTRA-sim reads that change nothing here (LogGP shared bus, debug traces).
_IGNORED_KEYS = frozenset(
    {
        "local-reduction-delay",
        "L",
        "o",
        "g",
        "G",
        "model-shared-bus",
        "trace-enabled",
        "track-local-mem",
        "local-mem-trace-filename",
        "boost-mode",
    }
)


def _int(data: dict[str, Any], key: str, where: str, default: int | None, minimum: int) -> int:
    value = data.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: {key!r} is required")
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < minimum:
        raise ConfigError(f"{where}: {key!r} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _algorithm(names: Any, key: str, where: str, optimization: str, queues: int) -> str:
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where}: {key!r} must be a non-empty list of algorithm names")
    for name in names:
        if name.lower().rstrip("0123456789") not in NAMES:  # directK -> direct
            raise ConfigError(f"{where}: {key!r}: unknown algorithm {name!r}; ASTRA-sim knows {sorted(NAMES)}")
    return astra_spec(names, optimization, queues)


def _read_json_object(p: Path) -> dict[str, Any]:
    """The JSON object in file *p*; unreadable files, bad JSON and non-objects are ConfigErrors."""
    data = parse_json(read_text(p, "JSON file"), str(p))
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a JSON object")
    return data


def load_astra_system(
    path: str | os.PathLike[str], *, warn: Callable[[str], None] | None = None, queues_per_dim: int = 1
) -> SystemConfig:
    """Read ASTRA-sim's system JSON into a :class:`SystemConfig` with ASTRA-sim's settings.

    Unknown or unsupported keys are named through *warn*; invalid values are errors.
    *queues_per_dim* is ASTRA-sim's ``--num-queues-per-dim``.
    """
    p = Path(path)
    where = str(p)
    data = _read_json_object(p)
    for key in sorted(data):
        if key in _IGNORED_KEYS and warn:
            warn(f"{where}: {key!r} is accepted but has no effect in etsim")
        elif key not in SYSTEM_KEYS and key not in _IGNORED_KEYS and warn:
            warn(f"{where}: unknown key {key!r} ignored")
    policy = data.get("scheduling-policy", "LIFO")
    if policy not in ("LIFO", "FIFO", "EXPLICIT"):
        raise ConfigError(f"{where}: 'scheduling-policy' must be LIFO, FIFO or EXPLICIT, got {policy!r}")
    optimization = data.get("collective-optimization", "baseline")
    if optimization not in ("baseline", "localBWAware"):
        raise ConfigError(f"{where}: 'collective-optimization' must be baseline or localBWAware, got {optimization!r}")
    splits = _int(data, "preferred-dataset-splits", where, None, 1)
    active = _int(data, "active-chunks-per-dimension", where, 1, 1)
    endpoint = _int(data, "endpoint-delay", where, 10, 0)
    local_bw = data.get("local-mem-bw", 0)
    if isinstance(local_bw, bool) or not isinstance(local_bw, int | float) or local_bw < 0:
        raise ConfigError(f"{where}: 'local-mem-bw' must be a number of GB/s >= 0, got {local_bw!r}")
    algorithms: dict[str, str] = {}
    for prefix, coll in _COLLECTIVE_KEYS.items():
        custom = data.get(f"{prefix}-implementation-custom")
        if custom is not None:
            if not isinstance(custom, list) or len(custom) != 1 or not isinstance(custom[0], str):
                raise ConfigError(f"{where}: '{prefix}-implementation-custom' must be a list with one ET prefix")
            algorithms[coll] = os.path.abspath(custom[0])  # ASTRA-sim resolves it against the working directory
        elif f"{prefix}-implementation" in data:
            key = f"{prefix}-implementation"
            algorithms[coll] = _algorithm(data[key], key, where, optimization, queues_per_dim)
    node_algorithms: dict[int, str] = {}
    per_node = data.get("per-node-custom-implementation")
    if per_node:
        if not isinstance(per_node, str):
            raise ConfigError(f"{where}: 'per-node-custom-implementation' must be the path of a YAML file")
        text = read_text(per_node, f"per-node-custom-implementation file of {where}")
        try:
            mapping = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{per_node}: not valid YAML: {exc}") from None
        if not isinstance(mapping, dict):
            raise ConfigError(f"{per_node}: expected a mapping of workload node id to ET prefix")
        for node_id, prefix in mapping.items():
            if isinstance(node_id, bool) or not isinstance(node_id, int) or not isinstance(prefix, str):
                raise ConfigError(f"{per_node}: {node_id!r}: {prefix!r}: expected a node id and an ET prefix")
            node_algorithms[node_id] = os.path.abspath(prefix)
    if bool(data.get("replay-only", 0)):  # (ASTRA-sim then replays every node for its duration, collectives too)
        raise ConfigError(f"{where}: 'replay-only' replays every node for its duration, collectives included: etsim "
                          "does not reproduce that (it would simulate the communication); remove it")  # fmt: skip
    peak = data.get("peak-perf")
    peak_flops: float | None = None
    if bool(data.get("roofline-enabled", 0)) and not bool(data.get("replay-only", 0)):
        if not (isinstance(peak, int | float) and peak > 0 and local_bw > 0):
            raise ConfigError(f"{where}: 'roofline-enabled' needs 'peak-perf' (TFLOPS) and 'local-mem-bw' > 0")
        peak_flops = float(peak) * 1e3  # TFLOPS -> operations per ns
    return SystemConfig(
        algorithms=algorithms,
        node_algorithms=node_algorithms,
        peak_flops=peak_flops,
        memory_bandwidth=float(local_bw) if peak_flops else None,  # GB/s of 10^9 B = bytes per ns
        base_dir=os.getcwd(),
        **astra_settings(
            endpoint_delay=endpoint,
            local_mem_bw=float(local_bw),
            preferred_dataset_splits=splits,
            active_chunks_per_dimension=active,
            scheduling_policy=policy,
            queues_per_dim=queues_per_dim,
        ),
    )


def load_astra_remote_memory(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ASTRA-sim's remote-memory JSON (``memory-type``, ``remote-mem-latency``, ``remote-mem-bw``)."""
    p = Path(path)
    data = _read_json_object(p)
    kinds = ("NO_MEMORY_EXPANSION", "PER_NODE_MEMORY_EXPANSION", "PER_NPU_MEMORY_EXPANSION", "MEMORY_POOL")
    if data.get("memory-type") not in kinds:
        raise ConfigError(f"{p}: 'memory-type' must be one of {', '.join(kinds)}")
    return data


def run_astra(
    workload: str | os.PathLike[str],
    system: str | os.PathLike[str],
    network: str | os.PathLike[str],
    *,
    remote_memory: str | os.PathLike[str] | None = None,
    comm_groups: str | os.PathLike[str] | None = None,
    model: str = "unaware",
    warn: Callable[[str], None] | None = None,
    queues_per_dim: int = 1,
    fast_path: bool = True,
) -> Result:
    """Simulate ASTRA-sim inputs (workload prefix, system JSON, network YAML) the way ASTRA-sim does.

    ``fast_path=False`` walks every message (the results are the same).
    """
    if model not in ("unaware", "aware"):
        raise ConfigError(f"--model must be unaware or aware, got {model!r}")
    net = load_network(os.fspath(network))
    dims = len(net.topology.dims)
    if model == "aware" and dims > 1:
        raise ConfigError(
            f"{network}: the congestion-aware back end supports 1-dimensional networks only (ASTRA-sim stops "
            f"with 'only support 1-dim topology'); this one has {dims} dimensions — use --model unaware, or "
            "`etsim run --model link`, whose congestion-aware model handles any topology"
        )
    if queues_per_dim < 1:
        raise ConfigError(f"--num-queues-per-dim must be at least 1, got {queues_per_dim}")
    config = load_astra_system(system, warn=warn, queues_per_dim=queues_per_dim)
    if comm_groups and os.fspath(comm_groups) != "empty":
        config = config.with_overrides(comm_groups=os.path.abspath(comm_groups))
    wl: Workload = load_workload(workload)
    npus = net.topology.npus
    if wl.num_ranks != npus:
        raise ConfigError(
            f"the network {network} has {npus} NPUs but workload {workload} has {wl.num_ranks} rank files "
            "(ASTRA-sim reads one file per NPU)"
        )
    has_memory = any(t in (NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE) for tr in wl for t in tr.types)
    if remote_memory is not None:
        mem = load_astra_remote_memory(remote_memory)
        if has_memory and mem["memory-type"] == "NO_MEMORY_EXPANSION":
            raise ConfigError(f"{remote_memory}: memory-type NO_MEMORY_EXPANSION but the workload has MEM nodes")
        if has_memory and mem["memory-type"] in ("MEMORY_POOL", "PER_NODE_MEMORY_EXPANSION"):  # (timed per NPU)
            (warn or _warn)(
                f"{remote_memory}: memory-type {mem['memory-type']}: etsim times every NPU's requests on its own "
                "(PER_NPU_MEMORY_EXPANSION); ASTRA-sim serialises a pool's, or a node's, requests"
            )
        changes: dict[str, Any] = {}
        for key, field_name, minimum in (
            ("remote-mem-latency", "remote_memory_latency", 0.0),
            ("remote-mem-bw", "remote_memory_bandwidth", None),
        ):
            if key not in mem:
                continue
            value = mem[key]
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok or (value < minimum if minimum is not None else value <= 0):
                need = ">= 0" if minimum is not None else "> 0"
                raise ConfigError(f"{remote_memory}: {key!r} must be a number {need}, got {value!r}")
            changes[field_name] = float(value)
        config = config.with_overrides(**changes)
    _refuse_what_astra_sim_refuses(wl, config, system)  # (after the input files: their errors first)
    name, options = MODEL_OPTIONS[model]
    if not fast_path:
        config = config.with_overrides(fast_path=False)
    customs = any(os.path.isabs(v) for v in config.algorithms.values()) or bool(config.node_algorithms)
    watch = _SimultaneousSends() if model == "aware" and customs else None
    # ASTRA-sim reports times only: no recording for reports (which would keep the fast path off).
    result = _in_astra_terms_run(
        lambda: simulate(
            wl, topology=net, model=name, model_options=options, system=config, observer=watch, reports=NO_REPORTS
        )
    )
    result.sim["gpu_compute_ns"] = gpu_compute_ns(wl, config)
    return result


def _in_astra_terms_run(run: Callable[[], Result]) -> Result:
    """*run*'s result, with its warnings and errors saying ``etsim astra``'s options (:data:`_ASTRA_TERMS`)."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:  # (the caller's filters apply: one of each, say)
            result = run()
    except ConfigError as exc:
        if _in_astra_terms(str(exc)) == str(exc):
            raise
        raise ConfigError(_in_astra_terms(str(exc))) from None
    finally:
        for w in caught:  # (again, outside the recording: the caller's filters decide)
            text = _in_astra_terms(str(w.message)) if issubclass(w.category, EtsimWarning) else w.message
            warnings.warn_explicit(text, w.category, w.filename, w.lineno)
    result.warnings = [_in_astra_terms(text) for text in result.warnings]
    return result


#: What etsim's messages suggest, said with ``etsim astra``'s options.
_ASTRA_TERMS = (
    ("use --model flow (congestion-aware, the default) for a physical bound",
     "as ASTRA-sim's congestion-unaware back end does (--model aware: its congestion-aware one)"),
    ("use --model flow (the default) for a physical bound",
     "as ASTRA-sim's congestion-unaware back end does (--model aware: its congestion-aware one)"),
    ("(--comm-groups)", "(--comm-group-configuration)"),
)  # fmt: skip


def _in_astra_terms(text: str) -> str:
    for said, meant in _ASTRA_TERMS:
        text = text.replace(said, meant)
    return text


def gpu_compute_ns(wl: Workload, config: SystemConfig) -> list[float]:
    """Per rank, the summed time of its GPU COMP nodes: what ASTRA-sim subtracts for its "exposed communication".

    Its hardware counter adds each GPU compute node's time (replayed or from the roofline) and counts the CPU's
    apart; etsim's rank ``compute_ns`` is the time any compute, CPU or GPU, was under way. ASTRA-sim runs one GPU
    COMP node at a time, so the sum is also their time under way.
    """
    costs = CostModel(config)
    comp = NodeType.COMP_NODE
    out = []
    for trace in wl:
        cpu = trace.is_cpu_op
        out.append(
            sum(costs.compute_time(trace, j) for j, kind in enumerate(trace.types) if kind == comp and not cpu[j])
        )
    return out


#: The collectives ASTRA-sim simulates (its workload layer throws "Unsupported collective comm type" for the others,
#: and replays BROADCAST for its duration, which etsim does not reproduce here).
_SIMULATED = {CollectiveType[name.upper()]: prefix for prefix, name in _COLLECTIVE_KEYS.items()}


def _refuse_what_astra_sim_refuses(wl: Workload, config: SystemConfig, system: str | os.PathLike[str]) -> None:
    """Stop where ASTRA-sim stops.

    A collective on the CPU, one of a type it does not simulate, one whose system file names no implementation:
    etsim ran them, or ran its own algorithm, where ASTRA-sim throws.
    """
    custom = set(config.node_algorithms)
    for trace in wl:
        for pos, node_type in enumerate(trace.types):
            if node_type != NodeType.COMM_COLL_NODE:
                continue
            where = trace.describe(pos)
            if trace.is_cpu_op[pos]:
                raise ConfigError(
                    f"{where}: a collective marked is_cpu_op (ASTRA-sim: 'Comm node should not be on CPU')"
                )
            kind = trace.comm_type[pos]
            if kind not in _SIMULATED:
                name = CollectiveType(kind).name if kind in CollectiveType._value2member_map_ else str(kind)
                raise ConfigError(f"{where}: {name}: ASTRA-sim does not simulate this collective (it throws "
                                  "'Unsupported collective comm type'; BROADCAST it replays for its "
                                  "duration)")  # fmt: skip
            if trace.ids[pos] not in custom and COLLECTIVE_NAMES[kind] not in config.algorithms:
                raise ConfigError(f"{where}: {system} names no '{_SIMULATED[kind]}-implementation' (ASTRA-sim: 'No "
                                  "collective implementation found')")  # fmt: skip


class _SimultaneousSends(RunObserver):
    """Says when a custom collective's rank issues two sends onto one link at one instant (aware back end only).

    Their order decides who waits under the congestion-aware back end. ASTRA-sim issues ready nodes in the
    hash order of its ready set, etsim by node id: both are valid, and the times can differ, so etsim says so
    rather than claim to reproduce it.
    """

    def attach(self, engine: Engine) -> None:
        self.engine = engine
        self.custom = engine.system.written_as_is()  # a live view: filled as the families are first used
        self.last: dict[tuple[int, int], tuple[float, int]] = {}
        self.found: tuple[str, int, float, int, int] | None = None

    def message_sent(self, run: GraphRun, j: int, src: int, dst: int, tag: int, size: float) -> None:
        call = getattr(run, "call", None)
        if self.found is not None or call is None or call.algorithm not in self.custom:
            return
        now = self.engine.env.now
        route = self.engine.network.router.lookup(src, dst)
        if not route:
            return
        key = (src, route[0])
        previous = self.last.get(key)
        if previous is not None and previous[0] == now and previous[1] != dst:
            self.found = (call.algorithm, src, now, previous[1], dst)
        self.last[key] = (now, dst)

    def finished(self, engine: Engine) -> None:
        if self.found is not None:
            label, rank, now, first, second = self.found
            _warn(
                f"custom collective {label!r}: rank {rank} sends to ranks {first} and {second} over one link at "
                f"{now:.0f} ns; ASTRA-sim's congestion-aware back end issues simultaneous sends in the hash order of "
                "its ready nodes, etsim in node order, so its times may differ from these (the unaware back end "
                "agrees exactly)"
            )


def astra_output(result: Result) -> str:
    """ASTRA-sim's per-rank finish lines (``exposed communication`` = finish − GPU compute time).

    The GPU compute time is :func:`gpu_compute_ns`'s, recorded by :func:`run_astra` (a result from elsewhere gives
    the rank's compute time under way).
    """
    gpu = result.sim.get("gpu_compute_ns")
    lines = []
    for r in result.ranks:
        finish = int(r.finish_ns)
        compute = int(gpu[r.rank]) if gpu is not None else int(r.compute_ns)
        lines.append(f"sys[{r.rank}] finished, {finish} cycles, exposed communication {finish - compute} cycles.")
    return "\n".join(lines)
