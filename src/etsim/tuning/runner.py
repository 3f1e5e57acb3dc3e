"""Run tuning points, in parallel: the one place that decides how simulations are farmed out.

:func:`run_points` takes :class:`~etsim.tuning.points.Point` and :class:`~etsim.tuning.points.WorkloadPoint`
values and returns one :class:`Measurement` each, in the same order. With ``jobs == 1`` everything runs in
this process; otherwise ``jobs`` worker processes (:func:`etsim.workers.run_in_workers`) take them in chunks,
each worker building the network once (and so synthesising a ``tacos`` candidate once per group).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from etsim import progress
from etsim.chakra.graph import Workload, collective_buffer_bytes, parse_collective
from etsim.chakra.io import load_workload
from etsim.errors import EtsimError, EtsimWarning
from etsim.network import NetworkConfig, Topology, load_network
from etsim.simulation import DEFAULT_MODEL, simulate
from etsim.system.algorithms.sources import AlgorithmContext, resolve_algorithm
from etsim.system.config import SystemConfig
from etsim.tuning.points import Point, WorkloadPoint, point_workload
from etsim.workers import probe_workers, run_in_workers

__all__ = ["Measurement", "Setup", "run_points"]


@dataclass(frozen=True)
class Setup:
    """Where the points run: the network, the model and the base system settings."""

    topology: str | Topology | NetworkConfig
    model: str | None = None
    system: SystemConfig = field(default_factory=SystemConfig)


@dataclass(frozen=True)
class Measurement:
    """The time a point took, or why it could not be measured."""

    point: Point | WorkloadPoint
    time_ns: float | None
    """Finish time of the run (ns); None when the candidate was skipped."""
    note: str = ""
    """Why it was skipped, or the warnings of the run (``; ``-separated)."""
    warnings: tuple[str, ...] = ()


_STATE: dict[str, Any] = {}
_DIED = "the worker process died while measuring this point (crash or out of memory)"
#: What the worker server imports once, before any worker starts.
_PRELOAD = ("etsim.tuning.runner",)


def _init(setup: Setup) -> None:
    """Build the network once per process (a worker's initialiser, or the in-process run)."""
    net = setup.topology
    if not isinstance(net, NetworkConfig):
        net = NetworkConfig(net, DEFAULT_MODEL) if isinstance(net, Topology) else load_network(os.fspath(net))
    _STATE.clear()
    _STATE.update(setup=setup, network=net, workloads={})


def _skip_reason(point: Point, config: SystemConfig, net: NetworkConfig) -> str | None:
    """Why *point*'s candidate cannot serve its collective (None when it can)."""
    topo = net.topology
    dims = tuple(d.npus for d in topo.dims) if len(topo.dims) > 1 else None
    context = AlgorithmContext(
        base_dir=config.base_dir, dims=dims, ignore_ctrl_deps=config.ignore_ctrl_deps, topology=topo
    )
    _, algo = resolve_algorithm(point.candidate, context, origin="--candidates")
    ctype = parse_collective(point.collective)
    bind = getattr(algo, "for_group", None)
    if bind is not None:
        algo = bind(point.group)
    reason = algo.supports(ctype, point.group_size)
    if reason is not None:
        return reason
    window = getattr(algo, "byte_window", None)
    if window is not None:
        low, high = window
        buffer = collective_buffer_bytes(ctype, point.size, point.group_size)
        if buffer < low or (high is not None and buffer > high):
            upper = "no upper bound" if high is None else f"{high}"
            return (
                f"{point.candidate!r} declares buffers of {low} to {upper} bytes (minBytes/maxBytes), not {buffer:.0f}"
            )
    return None


def _measure(point: Point | WorkloadPoint) -> Measurement:
    setup: Setup = _STATE["setup"]
    net: NetworkConfig = _STATE["network"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EtsimWarning)
        try:
            if isinstance(point, WorkloadPoint):
                cache: dict[str, Workload] = _STATE["workloads"]
                workload = cache.get(point.workload)
                if workload is None:
                    workload = cache[point.workload] = load_workload(point.workload)
                result = simulate(workload, topology=net, model=setup.model, system=point.system)
            else:
                config = replace(
                    setup.system,
                    algorithms={point.collective: point.candidate},
                    algorithm_origins={point.collective: "--candidates"},
                    algorithm_rules=(),
                )
                reason = _skip_reason(point, config, net)
                if reason is not None:
                    return Measurement(point, None, f"skipped: {reason}")
                workload = point_workload(point.collective, point.size, point.group, net.topology.npus)
                result = simulate(workload, topology=net, model=setup.model, system=config)
        except EtsimError as exc:
            return Measurement(point, None, f"skipped: {exc}")
    found = tuple(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, EtsimWarning)))
    return Measurement(point, result.finish_ns, "; ".join(found), found)


def run_points(points: Sequence[Point | WorkloadPoint], setup: Setup, jobs: int | None = None) -> list[Measurement]:
    """Measure every point (in order); *jobs* worker processes (default: the CPU count; 1: this process).

    Errors of a point (a candidate that does not implement its collective, a deadlock …) make it a skipped
    :class:`Measurement` with the reason; the warnings of a run are kept on its measurement.
    """
    jobs = jobs or os.cpu_count() or 1
    watch = progress.stage("tuning", len(points), "points measured")
    if jobs <= 1 or len(points) <= 1:
        saved = dict(_STATE)
        try:
            _init(setup)
            found = []
            for p in points:
                found.append(_measure(p))
                watch.advance()
            return found
        finally:
            _STATE.clear()
            _STATE.update(saved)
    chunk = max(1, len(points) // (jobs * 4))
    batches = [(i, list(points[i : i + chunk])) for i in range(0, len(points), chunk)]
    measured: dict[int, list[Measurement]] = {}

    def on_result(batch: tuple[int, list[Point | WorkloadPoint]], out: list[Measurement]) -> None:
        measured[batch[0]] = out
        watch.advance(len(out))

    options: dict[str, Any] = {"initializer": _init, "initargs": (setup,), "preload": _PRELOAD}
    lost = run_in_workers(_measure_batch, batches, jobs, on_result, **options)
    if lost:  # rerun point by point: only a point that kills its worker alone is lost for good
        probe_workers(_PRELOAD)
        singles = [(i, [point]) for start, batch in lost for i, point in enumerate(batch, start)]
        for i, [point] in run_in_workers(_measure_batch, singles, min(jobs, len(singles)), on_result, **options):
            measured[i] = [Measurement(point, None, f"skipped: {_DIED}")]
    return [m for i in sorted(measured) for m in measured[i]]


def _measure_batch(batch: tuple[int, list[Point | WorkloadPoint]]) -> list[Measurement]:
    return [_measure(point) for point in batch[1]]
