"""``--engine ray``: the points as Ray tasks, on a Ray cluster (``--ray-address``) or a local one.

A local cluster is started with ``--jobs`` CPUs and shut down at the end; a cluster given by address is left
running. Workers must have etsim installed and see the experiment's input files at the same paths (a shared
file system). Ray does not retry tasks: a lost batch is run again point by point, as the local pool does.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from etsim.errors import ConfigError
from etsim.experiment.engines import ENGINES, Callback, ExperimentEngine, batch_size, batches, died
from etsim.experiment.worker import PointTask, run_batch
from etsim.options import Optional, Text, option
from etsim.workers import PASSED_ENVIRONMENT, POLL, check_stop

__all__ = ["RayEngine", "run_ray"]


@ENGINES.register("ray")
class RayEngine(ExperimentEngine):
    """A Ray cluster (``pip install 'etsim[ray]'``)."""

    name = "ray"
    summary = "a Ray cluster"

    @dataclass(frozen=True, kw_only=True)
    class Options(ExperimentEngine.Options):
        """Where the cluster is."""

        address: str | None = option(
            None, "a Ray cluster to use (default: start a local one)", Optional(Text(empty=False)), metavar="ADDR"
        )

    options: Options

    def run(self, tasks: Sequence[PointTask], on_outcome: Callback) -> None:
        """Run the points as Ray tasks."""
        run_ray(tasks, on_outcome, self.jobs, self.options.address)


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
        # The user's choices that live in the environment (plug-ins allowed) reach the cluster's workers.
        passed = {name: os.environ[name] for name in PASSED_ENVIRONMENT if name in os.environ}
        options: dict[str, Any] = {"runtime_env": {"env_vars": passed}} if passed else {}
        remote = ray.remote(num_cpus=1, max_retries=0, **options)(run_batch)
        lost = _ray_round(ray, remote, batches(tasks, batch_size(len(tasks), workers, cap=64)), on_outcome)
        if lost:
            for task in _ray_round(ray, remote, batches(lost, 1), on_outcome):
                on_outcome(died(task))
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
