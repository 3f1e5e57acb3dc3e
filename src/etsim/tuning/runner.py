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
from etsim.chakra.graph import Workload, algorithm_collective, collective_buffer_bytes, parse_collective
from etsim.chakra.io import load_workload
from etsim.errors import EtsimError, EtsimWarning
from etsim.network import NetworkConfig, Topology, load_network
from etsim.report.result import Result
from etsim.simulation import DEFAULT_MODEL, NO_REPORTS, Simulation
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


_DIED = "the worker process died while measuring this point (crash or out of memory)"
#: What the worker server imports once, before any worker starts.
_PRELOAD = ("etsim.tuning.runner",)


class _Measurer:
    """Measures points on one setup: a worker's task function (sent to it once), or this process's.

    It builds the network on its first point and keeps it, with the workloads it loaded, for its later points:
    this state lives in the object, so each worker process has its own (unpickled empty, built on first use).
    """

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self._network: NetworkConfig | None = None
        self._workloads: dict[str, Workload] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"setup": self.setup}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["setup"])  # type: ignore[misc]

    def network(self) -> NetworkConfig:
        """The setup's network, built once."""
        if self._network is None:
            net = self.setup.topology
            if not isinstance(net, NetworkConfig):
                net = NetworkConfig(net, DEFAULT_MODEL) if isinstance(net, Topology) else load_network(os.fspath(net))
            self._network = net
        return self._network

    def __call__(self, batch: tuple[int, list[Point | WorkloadPoint]]) -> list[Measurement]:
        """Measure a batch of points (its first index, its points), in order."""
        return [self.measure(point) for point in batch[1]]

    def measure(self, point: Point | WorkloadPoint) -> Measurement:
        """Measure one point (see :func:`run_points`)."""
        setup = self.setup
        net = self.network()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", EtsimWarning)
            try:
                if isinstance(point, WorkloadPoint):
                    workload = self._workloads.get(point.workload)
                    if workload is None:
                        workload = self._workloads[point.workload] = load_workload(point.workload)
                    result = _simulate(workload, net, setup.model, point.system)
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
                    result = _simulate(workload, net, setup.model, config)
            except EtsimError as exc:
                return Measurement(point, None, f"skipped: {exc}")
        found = tuple(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, EtsimWarning)))
        return Measurement(point, result.finish_ns, "; ".join(found), found)


def _simulate(workload: Workload, net: NetworkConfig, model: str | None, system: SystemConfig) -> Result:
    """One measurement: a :class:`~etsim.simulation.Simulation` timed without reports (the tuner reads times)."""
    return Simulation(workload, topology=net, model=model, system=system, reports=NO_REPORTS).run()


def _skip_reason(point: Point, config: SystemConfig, net: NetworkConfig) -> str | None:
    """Why *point*'s candidate cannot serve its collective (None when it can)."""
    topo = net.topology
    dims = tuple(d.npus for d in topo.dims) if len(topo.dims) > 1 else None
    context = AlgorithmContext(
        base_dir=config.base_dir, dims=dims, ignore_ctrl_deps=config.ignore_ctrl_deps, topology=topo
    )
    _, algo = resolve_algorithm(point.candidate, context, origin="--candidates")
    ctype = algorithm_collective(parse_collective(point.collective))
    algo = algo.for_call(ctype, point.size, point.group)
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


def run_points(points: Sequence[Point | WorkloadPoint], setup: Setup, jobs: int | None = None) -> list[Measurement]:
    """Measure every point (in order); *jobs* worker processes (default: the CPU count; 1: this process).

    Errors of a point (a candidate that does not implement its collective, a deadlock …) make it a skipped
    :class:`Measurement` with the reason; the warnings of a run are kept on its measurement.
    """
    jobs = jobs or os.cpu_count() or 1
    watch = progress.stage("tuning", len(points), "points measured")
    measurer = _Measurer(setup)
    if jobs <= 1 or len(points) <= 1:
        found = []
        for p in points:
            found.append(measurer.measure(p))
            watch.advance()
        return found
    chunk = max(1, len(points) // (jobs * 4))
    batches = [(i, list(points[i : i + chunk])) for i in range(0, len(points), chunk)]
    measured: dict[int, list[Measurement]] = {}

    def on_result(batch: tuple[int, list[Point | WorkloadPoint]], out: list[Measurement]) -> None:
        measured[batch[0]] = out
        watch.advance(len(out))

    lost = run_in_workers(measurer, batches, jobs, on_result, preload=_PRELOAD)
    if lost:  # rerun point by point: only a point that kills its worker alone is lost for good
        probe_workers(_PRELOAD)
        singles = [(i, [point]) for start, batch in lost for i, point in enumerate(batch, start)]
        for i, [point] in run_in_workers(measurer, singles, min(jobs, len(singles)), on_result, preload=_PRELOAD):
            measured[i] = [Measurement(point, None, f"skipped: {_DIED}")]
    return [m for i in sorted(measured) for m in measured[i]]
