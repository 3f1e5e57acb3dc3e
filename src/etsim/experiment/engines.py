"""Where points run: in this process, on a local process pool, or on a Ray cluster.

Both parallel engines send *batches* of points (a worker runs a batch one point after the other,
reusing its cached inputs) and hand each point's outcome to a callback as its batch finishes.
Batches are small enough to keep every worker busy to the end and large enough that the per-task
cost of the engine (~0.1 ms for a process pool, ~0.6 ms for Ray; ``shared/reference/performance.md``
§4) disappears next to the simulations.

A worker that dies (a crash, the OOM killer) takes its batch with it. The points of lost batches
are run again, one per task; a point that kills its worker when it runs alone is recorded as
failed, so a dead worker never stops the sweep nor loses finished points.
"""

from __future__ import annotations

import logging
import math
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from etsim.errors import ConfigError
from etsim.experiment.worker import PointOutcome, PointTask, remove_synthesis_dir, run_batch, run_point
from etsim.workers import POLL, STOP, check_stop, default_jobs, probe_workers, run_in_workers

__all__ = ["ENGINES", "POLL", "STOP", "batch_size", "check_stop", "default_jobs", "run_local", "run_ray", "run_serial"]

Callback = Callable[[PointOutcome], None]

_DIED = "the worker process died while running this point (crash or out of memory)"
#: What the worker server imports once, before any worker starts.
_PRELOAD = ("etsim.experiment.worker",)


def batch_size(points: int, workers: int, *, per_worker: int = 8, cap: int = 32) -> int:
    """Points per task: about *per_worker* tasks per worker, at most *cap* points each."""
    return max(1, min(cap, math.ceil(points / (workers * per_worker))))


def _batches(tasks: Sequence[PointTask], size: int) -> list[list[PointTask]]:
    return [list(tasks[i : i + size]) for i in range(0, len(tasks), size)]


def run_serial(tasks: Sequence[PointTask], on_outcome: Callback, jobs: int = 1) -> None:
    """Run every point in this process, in order (``--jobs 1``)."""
    del jobs
    for task in tasks:
        check_stop()
        on_outcome(run_point(task))


def _pool_round(batches: list[list[PointTask]], workers: int, on_outcome: Callback) -> list[PointTask]:
    """Run *batches* on *workers* fresh worker processes; return the points of batches whose worker died."""

    def on_result(batch: list[PointTask], outcomes: list[PointOutcome]) -> None:
        for outcome in outcomes:
            on_outcome(outcome)

    lost = run_in_workers(run_batch, batches, workers, on_result, finalizer=remove_synthesis_dir, preload=_PRELOAD)
    return [task for batch in lost for task in batch]


def run_local(tasks: Sequence[PointTask], on_outcome: Callback, jobs: int) -> None:
    """Run the points on a pool of *jobs* worker processes (``--engine local``, the default)."""
    if jobs <= 1 or len(tasks) <= 1:
        run_serial(tasks, on_outcome)
        return
    workers = min(jobs, len(tasks))
    lost = _pool_round(_batches(tasks, batch_size(len(tasks), workers)), workers, on_outcome)
    if lost:
        probe_workers(_PRELOAD)
        # One point per task: only points in flight when a worker dies are lost again.
        lost = _pool_round(_batches(lost, 1), min(workers, len(lost)), on_outcome)
    for task in lost:
        # Alone on a one-worker pool: a death now is this point's own doing.
        if _pool_round([[task]], 1, on_outcome):
            on_outcome(PointOutcome(task.id, "failed", {"network_model": task.spec.model}, None, _DIED, 0.0))


def run_ray(tasks: Sequence[PointTask], on_outcome: Callback, jobs: int, address: str | None = None) -> None:
    """Run the points as Ray tasks (``--engine ray``), on the cluster at *address* or a local one.

    A local cluster is started with *jobs* CPUs and shut down at the end; a cluster given by address
    is left running. Workers must have etsim installed and see the experiment's input files at the
    same paths (a shared file system).

    Raises:
        ConfigError: Ray is not installed, or the cluster cannot be reached.
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("--engine ray needs Ray: python -m pip install 'etsim[ray]'") from None
    started = not ray.is_initialized()
    if started:
        if address:
            _check_reachable(address)
        # Ray installs a SIGTERM handler of its own (a crash dump, exit 1): the sweep's, which puts the results
        # in order and exits 143, stays in charge.
        sigterm = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
        try:
            if address:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            else:
                ray.init(num_cpus=jobs, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
        except Exception as exc:  # Ray reports a cluster it cannot start or reach in many exception types
            raise ConfigError(
                f"--engine ray: cannot start or reach a Ray cluster ({address or 'local'}): {exc}"
            ) from None
        finally:
            if sigterm is not None:
                signal.signal(signal.SIGTERM, sigterm)
    try:
        workers = max(1, int(ray.cluster_resources().get("CPU", jobs)))
        # Tasks are not retried by Ray: a lost batch is rerun point by point below, like the local pool.
        remote = ray.remote(num_cpus=1, max_retries=0)(run_batch)
        lost = _ray_round(ray, remote, _batches(tasks, batch_size(len(tasks), workers, cap=64)), on_outcome)
        if lost:
            for task in _ray_round(ray, remote, _batches(lost, 1), on_outcome):
                on_outcome(PointOutcome(task.id, "failed", {"network_model": task.spec.model}, None, _DIED, 0.0))
    finally:
        if started:
            ray.shutdown()


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a ``HOST:PORT`` nobody listens on (Ray itself retries for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return  # "auto", "ray://…": left to Ray
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConfigError(f"--ray-address {address}: cannot reach a Ray cluster there: {exc.strerror or exc}") from None


def _ray_round(ray: Any, remote: Any, batches: list[list[PointTask]], on_outcome: Callback) -> list[PointTask]:
    pending = {remote.remote(batch): batch for batch in batches}
    lost: list[PointTask] = []
    try:
        while pending:
            check_stop()
            done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL)
            for ref in done:
                batch = pending.pop(ref)
                try:
                    outcomes = ray.get(ref)
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.RayTaskError) as exc:
                    if isinstance(exc, ray.exceptions.RayTaskError) and not _worker_died(exc):
                        raise
                    lost.extend(batch)
                    continue
                for outcome in outcomes:
                    on_outcome(outcome)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    return lost


def _worker_died(exc: BaseException) -> bool:
    cause = getattr(exc, "cause", None)
    return type(cause).__name__ in ("WorkerCrashedError", "SystemExit") or "died" in str(exc).lower()


#: ``--engine`` value → runner(tasks, on_outcome, jobs[, address]).
ENGINES: dict[str, Callable[..., None]] = {"local": run_local, "ray": run_ray}
