"""``--engine local`` (the default): a pool of worker processes on this machine.

A worker that dies (a crash, the OOM killer) takes its batch with it. The points of lost batches are run again,
one per task; a point that kills its worker when it runs alone is recorded as failed, so a dead worker never stops
the sweep nor loses finished points. With one job (or one point) the points run in this process.
"""

from __future__ import annotations

from collections.abc import Sequence

from etsim.experiment.engines import ENGINES, Callback, ExperimentEngine, batch_size, batches, died
from etsim.experiment.worker import PointOutcome, PointTask, remove_synthesis_dir, run_batch, run_point
from etsim.workers import check_stop, probe_workers, run_in_workers

__all__ = ["LocalEngine", "run_local", "run_serial"]

#: What the worker server imports once, before any worker starts.
_PRELOAD = ("etsim.experiment.worker",)


@ENGINES.register("local")
class LocalEngine(ExperimentEngine):
    """Worker processes on this machine (``--jobs`` of them; one job runs the points in this process)."""

    name = "local"
    summary = "worker processes on this machine"

    def in_process(self, tasks: int) -> bool:
        """One job or one point: in this process."""
        return self.jobs <= 1 or tasks <= 1

    def run(self, tasks: Sequence[PointTask], on_outcome: Callback) -> None:
        """Run the points on a pool of worker processes (or here, see :meth:`in_process`)."""
        run_local(tasks, on_outcome, self.jobs)


def run_serial(tasks: Sequence[PointTask], on_outcome: Callback, jobs: int = 1) -> None:
    """Run every point in this process, in order (``--jobs 1``)."""
    del jobs
    for task in tasks:
        check_stop()
        on_outcome(run_point(task))


def _pool_round(batch_list: list[list[PointTask]], workers: int, on_outcome: Callback) -> list[PointTask]:
    """Run *batch_list* on *workers* fresh worker processes; return the points of batches whose worker died."""

    def on_result(batch: list[PointTask], outcomes: list[PointOutcome]) -> None:
        for outcome in outcomes:
            on_outcome(outcome)

    lost = run_in_workers(run_batch, batch_list, workers, on_result, finalizer=remove_synthesis_dir, preload=_PRELOAD)
    return [task for batch in lost for task in batch]


def run_local(tasks: Sequence[PointTask], on_outcome: Callback, jobs: int) -> None:
    """Run the points on a pool of *jobs* worker processes (``--engine local``, the default)."""
    if jobs <= 1 or len(tasks) <= 1:
        run_serial(tasks, on_outcome)
        return
    workers = min(jobs, len(tasks))
    lost = _pool_round(batches(tasks, batch_size(len(tasks), workers)), workers, on_outcome)
    if lost:
        probe_workers(_PRELOAD)
        # One point per task: only points in flight when a worker dies are lost again.
        lost = _pool_round(batches(lost, 1), min(workers, len(lost)), on_outcome)
    for task in lost:
        # Alone on a one-worker pool: a death now is this point's own doing.
        if _pool_round([[task]], 1, on_outcome):
            on_outcome(died(task))
