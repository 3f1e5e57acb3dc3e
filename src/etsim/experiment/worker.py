"""Run points: build each point's inputs (cached per process) and run a :class:`~etsim.simulation.Simulation`.

Workers of a sweep run many points; a point's workload, topology, system configuration and
synthesised algorithms are built once per process and reused by every later point that names the
same resolved value (bounded caches keyed by the value's canonical JSON). :func:`simulate_point` is the one
place a :class:`~etsim.experiment.spec.PointSpec` becomes a simulation, used alike by the
sweep workers and by ``etsim run --config``; its result is the one ``etsim run`` gives for the same inputs.
"""

from __future__ import annotations

import json
import os
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from etsim import progress
from etsim.cache import BoundedCache
from etsim.chakra import COLLECTIVE_NAMES, NodeType, Workload
from etsim.chakra.graph import collective_buffer_bytes
from etsim.cluster import ClusterResult, run_cluster
from etsim.errors import ConfigError, EtsimError
from etsim.experiment.points import point_cluster
from etsim.experiment.spec import PointSpec
from etsim.files import ProcessDirectory
from etsim.network import NetworkConfig, load_network
from etsim.report.record import RunRecorder
from etsim.report.result import Result
from etsim.report.training import training_columns
from etsim.simulation import Simulation
from etsim.simulation.inputs import point_workload
from etsim.stamp import input_stamp
from etsim.system.config import SystemConfig, load_system_config

# The synthesiser's public functions, imported here only (they may move; this is the one line to change).
from etsim.producers.tacos import COLLECTIVES as TACOS_COLLECTIVES  # isort: skip
from etsim.producers.tacos import synthesize, write_synthesis  # isort: skip

__all__ = [
    "PointOutcome",
    "PointTask",
    "cluster_columns",
    "remove_synthesis_dir",
    "run_batch",
    "run_point",
    "simulate_cluster_point",
    "simulate_point",
]

# A sweep revisits few distinct inputs, some of them large: each process keeps the last ones it built.
_NETWORKS: BoundedCache[NetworkConfig] = BoundedCache(32)
_SYSTEMS: BoundedCache[SystemConfig] = BoundedCache(64)
_SYNTHESES: BoundedCache[str] = BoundedCache(64)
# Where this process writes the algorithm families it synthesises (removed when it ends).
_SYNTHESIS_DIR = ProcessDirectory("etsim-synth-")


def _key(value: Any) -> str:
    # (with the stamp of the files it names: a file edited while this process lives is read again)
    return json.dumps(value, sort_keys=True) + input_stamp(value)


def _network(spec: str | dict[str, Any] | None) -> NetworkConfig | None:
    """The point's network, built once per process; one from a file is named by its path, as etsim run names it."""
    if spec is None:
        return None

    def build() -> NetworkConfig:
        net = load_network(spec)
        return replace(net, label=spec) if isinstance(spec, str) else net

    return _NETWORKS.get(_key(spec), build)


def _system(spec: dict[str, Any]) -> SystemConfig:
    return _SYSTEMS.get(_key(spec), lambda: load_system_config(dict(spec)))


def remove_synthesis_dir() -> None:
    """Remove this process's directory of synthesised families (at exit, and as a pool worker ends).

    A pool worker calls it itself: multiprocessing ends its children with ``os._exit``, which runs no
    ``atexit`` handler.
    """
    _SYNTHESIS_DIR.remove()


def _workload_collectives(workload: Workload) -> dict[str, int]:
    """Collective name → ``comm_size`` of its first occurrence on rank 0 (or the first rank that has one)."""
    found: dict[str, int] = {}
    for trace in workload:
        for t, c, size, cpu in zip(trace.types, trace.comm_type, trace.comm_size, trace.is_cpu_op, strict=True):
            if t == NodeType.COMM_COLL_NODE and not cpu and c in COLLECTIVE_NAMES and size is not None:
                found.setdefault(COLLECTIVE_NAMES[c], size)
    return found


def _tacos(spec: dict[str, Any], collective: str, size: int, net: NetworkConfig | None, n: int, topo_key: str) -> str:
    """Synthesise (once per process) a TACOS algorithm for *collective*; return its family prefix."""
    if net is None:
        raise ConfigError("algo: TACOS synthesis needs a topology (the default ring is not a file)")
    params = spec["tacos"]
    topology = net.topology
    group = list(range(n)) if n < topology.npus else None
    # Synthesis buffers follow MSCCL-IR's chunk accounting: the all-gather output, every other buffer as is.
    buffer = params["size"] if params["size"] is not None else collective_buffer_bytes(collective, size, n)
    key = _key([collective, buffer, params, topo_key, group])

    def build() -> str:
        syn = synthesize(
            topology,
            collective,
            size=buffer,
            chunks_per_npu=params["chunks_per_npu"],
            seed=params["seed"],
            runs=params["runs"],
            group=group,
        )
        prefix = os.path.join(_SYNTHESIS_DIR.path(), f"tacos_{time.monotonic_ns()}")
        write_synthesis(syn, prefix)
        return prefix

    return _SYNTHESES.get(key, build)


def _algorithms(
    spec: PointSpec, workload: Workload, net: NetworkConfig | None, labels: dict[str, str]
) -> dict[str, str]:
    """The point's ``algo`` as SystemConfig algorithms (TACOS specs synthesised into family paths).

    *labels* receives family path → a label naming the TACOS parameters, for the result records.
    """
    out: dict[str, str] = {}
    used: dict[str, int] | None = None
    topo_key = _key(spec.topology)
    for coll, value in spec.algo.items():
        if isinstance(value, str):
            out[coll] = value
            continue
        if used is None:
            used = _workload_collectives(workload)
        targets = [coll] if coll != "default" else list(used)
        for target in targets:
            if target not in used:
                continue  # the workload has no such collective: nothing to synthesise
            if target not in TACOS_COLLECTIVES:
                raise ConfigError(
                    f"algo: TACOS synthesises {', '.join(TACOS_COLLECTIVES)}; the workload also has {target} "
                    f"(give it its own algorithm: algo: {{{target}: …, default: {{tacos: …}}}})"
                )
            out[target] = _tacos(value, target, used[target], net, workload.num_ranks, topo_key)
            params = ", ".join(f"{k}={v}" for k, v in value["tacos"].items() if v is not None)
            labels[out[target]] = f"tacos({params})"
    return out


def simulate_point(spec: PointSpec, recorder: RunRecorder | None = None) -> Result:
    """Simulate one point exactly as its ``config.yaml`` describes (watched by *recorder*, if given).

    Raises:
        EtsimError: the point cannot be simulated (the message says why).
    """
    if spec.cluster is not None:
        raise ConfigError("a cluster point runs its jobs together: simulate_cluster_point, or etsim cluster run")
    workload = point_workload(spec.workload)
    net = _network(spec.topology)
    system = _system(spec.system)
    labels: dict[str, str] = {}
    algorithms = {**system.algorithms, **_algorithms(spec, workload, net, labels)}
    system = system.with_overrides(algorithms=algorithms)
    options = spec.model_options or None
    # The reports etsim run gives (groups, the training step report): the same inputs give the same result.
    result = Simulation(
        workload, topology=net, model=spec.model, model_options=options, system=system, observer=recorder
    ).run()
    if labels:  # a synthesised family lives in a temporary directory: name it by its parameters instead
        result.collectives = [replace(c, algorithm=labels.get(c.algorithm, c.algorithm)) for c in result.collectives]
    return result


def simulate_cluster_point(spec: PointSpec) -> ClusterResult:
    """Run a cluster point: its jobs together, and each alone on its GPUs (their slowdown)."""
    source = spec.cluster
    if source is None:
        raise ConfigError("not a cluster point")
    return run_cluster(point_cluster(source), alone=True)


def cluster_columns(result: ClusterResult) -> dict[str, Any]:
    """The results.csv columns of each job of a cluster point (``JOB.duration_ns`` …)."""
    out: dict[str, Any] = {}
    for job in result.jobs:
        out.update({f"{job.name}.duration_ns": job.duration_ns, f"{job.name}.alone_ns": job.alone_ns})
        out[f"{job.name}.slowdown"] = job.slowdown
    return out


@dataclass(frozen=True)
class PointTask:
    """What a worker receives: a point id and its resolved spec."""

    id: str
    spec: PointSpec


@dataclass(frozen=True)
class PointOutcome:
    """What a worker returns for one point."""

    id: str
    status: str
    """``ok`` or ``failed``."""
    metrics: dict[str, Any]
    """Result columns (``finish_ns`` …, ``<collective>_ns``, ``messages``, ``bytes``, ``network_model``)."""
    report: str | None
    """The full JSON report (one line), None for a failed point."""
    error: str
    wall_s: float
    warnings: tuple[str, ...] = ()
    """Warnings the simulation raised (a model ignoring contention it met, a fallback algorithm, …)."""
    fits_in_memory: bool | None = None
    """A generated training job's memory estimate against its GPU's capacity (None: no estimate, or not such a job)."""


def metrics(result: Result) -> dict[str, Any]:
    """The results.csv columns of one result (times in ns; per-rank maxima)."""
    ranks = result.ranks
    out: dict[str, Any] = {
        "network_model": result.network.get("model", ""),
        "finish_ns": result.finish_ns,
        "compute_ns": max((r.compute_ns for r in ranks), default=0.0),
        "comm_ns": max((r.comm_ns for r in ranks), default=0.0),
        "exposed_comm_ns": max((r.exposed_comm_ns for r in ranks), default=0.0),
        "messages": result.network.get("messages", 0),
        "bytes": result.network.get("bytes", 0),
    }
    # Per collective type: each rank's summed durations of that type's collectives, the slowest rank's.
    per_rank: dict[str, dict[int, float]] = {}
    for c in result.collectives:
        by_rank = per_rank.setdefault(c.type.lower(), {})
        by_rank[c.rank] = by_rank.get(c.rank, 0.0) + (c.end_ns - c.start_ns)
    for ctype, by_rank in per_rank.items():
        out[f"{ctype}_ns"] = max(by_rank.values())
    if result.training is not None:
        out.update(training_columns(result.training))
    return out


def run_point(task: PointTask) -> PointOutcome:
    """Run one point; a failure becomes a ``failed`` outcome with its message, never an exception."""
    t0 = time.perf_counter()
    failed = {"network_model": task.spec.model}
    # Warnings are results too: recorded with the point (a worker has no terminal to print them on, and a
    # warnings filter set to "error" must not turn them into failures).
    with warnings.catch_warnings(record=True) as caught, progress.shown_on(None):  # the sweep shows its own
        warnings.simplefilter("always")
        try:
            if task.spec.cluster is not None:
                clustered = simulate_cluster_point(task.spec)
                report = clustered.to_json(indent=None)
                columns = {**metrics(clustered.result), **cluster_columns(clustered)}
                return PointOutcome(task.id, "ok", columns, report, "", _since(t0), _messages(caught))
            result = simulate_point(task.spec)
        except EtsimError as exc:
            return PointOutcome(task.id, "failed", failed, None, str(exc), _since(t0), _messages(caught))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a bug or an exhausted machine: recorded, so the sweep goes on
            where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
            at = f" (at {os.path.basename(where.filename)}:{where.lineno})" if where else ""
            message = f"internal error: {type(exc).__name__}: {exc}{at}"
            return PointOutcome(task.id, "failed", failed, None, message, _since(t0), _messages(caught))
    report = result.to_json(indent=None)
    fits = result.training.get("fits_in_memory") if result.training is not None else None
    return PointOutcome(task.id, "ok", metrics(result), report, "", _since(t0), _messages(caught), fits)


def _messages(caught: list[warnings.WarningMessage]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(w.message) for w in caught))


def _since(t0: float) -> float:
    return time.perf_counter() - t0


def run_batch(tasks: Sequence[PointTask]) -> list[PointOutcome]:
    """Run points one after the other in this process (the unit of work sent to a worker)."""
    return [run_point(task) for task in tasks]
