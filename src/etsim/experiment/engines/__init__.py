"""Where the points of a sweep run: the :class:`ExperimentEngine` plug-in point and its registry.

Engines are found in :data:`ENGINES`: the built-ins are one module each in this package (``local``: a pool of
worker processes on this machine; ``ray``: a Ray cluster), others come from the ``etsim.experiment_engines``
entry points or a ``package.module:Class`` path. ``etsim experiment run --engine NAME`` offers every registered
name, and each engine's options become flags ``--NAME-OPTION`` (``--ray-address``).

Engines send *batches* of points (a worker runs a batch one point after the other, reusing its cached inputs) and
hand each point's outcome to a callback as its batch finishes. Batches are small enough to keep every worker busy
to the end and large enough that the per-task cost of the engine (~0.1 ms for a process pool, ~0.6 ms for Ray;
``shared/reference/performance.md`` §4) disappears next to the simulations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from etsim.experiment.worker import PointOutcome, PointTask
from etsim.options import flag_name, parse_options
from etsim.registry import Registry
from etsim.workers import POLL, STOP, check_stop, default_jobs

__all__ = [
    "ENGINES",
    "POLL",
    "STOP",
    "Callback",
    "ExperimentEngine",
    "batch_size",
    "batches",
    "check_stop",
    "default_jobs",
    "died",
    "make_engine",
]

#: What an engine calls once per point.
Callback = Callable[[PointOutcome], None]

_DIED = "the worker process died while running this point (crash or out of memory)"


class ExperimentEngine:
    """Base class of experiment engines: run every point of a sweep, report each outcome.

    Contract for subclasses:

    - Constructed as ``Engine(jobs, **options)`` (*jobs*: the workers to use); options are the fields of a frozen
      dataclass ``Options`` (subclassing ``ExperimentEngine.Options``) declared with
      :func:`~etsim.options.option`, parsed by :func:`make_engine` (flags ``--NAME-OPTION`` on the command line).
    - :meth:`run` runs every task and calls ``on_outcome`` exactly once per task, from the calling thread, in any
      order, as points finish (so finished results are written while others run).
    - A point whose worker dies is reported as failed (:func:`died`), never lost nor retried forever; one
      point's failure never stops the others.
    - :func:`~etsim.workers.check_stop` is called at least every :data:`~etsim.workers.POLL` seconds while
      waiting; it raises KeyboardInterrupt when the sweep is stopped, and the engine then ends its workers.
    - :attr:`in_process` says whether points run in the calling process (a stop then interrupts the running
      point at once).
    """

    #: Registry name (informational; the registry key is what selects it).
    name: ClassVar[str] = ""
    #: Where the points run, in a few words (``--engine`` help).
    summary: ClassVar[str] = ""

    @dataclass(frozen=True, kw_only=True)
    class Options:
        """Options every engine accepts (none)."""

    def __init__(self, jobs: int, **options: Any) -> None:
        self.jobs = jobs
        self.options = type(self).Options(**options)

    def in_process(self, tasks: int) -> bool:
        """Whether *tasks* points would run in this process."""
        return False

    def run(self, tasks: Sequence[PointTask], on_outcome: Callback) -> None:
        """Run every task; call *on_outcome* once per task."""
        raise NotImplementedError


#: Experiment engines: the modules of this package, the ``etsim.experiment_engines`` entry points, ``module:Class``.
ENGINES: Registry[ExperimentEngine] = Registry(
    "experiment engine", "etsim.experiment_engines", ExperimentEngine, builtins="etsim.experiment.engines"
)


def make_engine(name: str, jobs: int, options: dict[str, Any] | None = None) -> ExperimentEngine:
    """The engine registered as *name* with *options* as given on the command line (text) or in code.

    Raises:
        RegistryError: unknown engine (the message lists the registered ones).
        ConfigError: an unknown option or a bad value, named as its flag (``--ray-address``).
    """
    cls = ENGINES.get(name)
    values = parse_options(
        cls.Options,
        options or {},
        key=lambda option: flag_name(option, name),
        unknown=f"{{key}}: engine {name!r} has no such option; its options: {{valid}}",
        text=True,
    )
    return cls(jobs, **values)


def batch_size(points: int, workers: int, *, per_worker: int = 8, cap: int = 32) -> int:
    """Points per task: about *per_worker* tasks per worker, at most *cap* points each."""
    return max(1, min(cap, math.ceil(points / (workers * per_worker))))


def batches(tasks: Sequence[PointTask], size: int) -> list[list[PointTask]]:
    """*tasks* cut into lists of *size* (the last one shorter)."""
    return [list(tasks[i : i + size]) for i in range(0, len(tasks), size)]


def died(task: PointTask) -> PointOutcome:
    """The outcome of a point whose worker died while running it alone (a crash, the OOM killer)."""
    return PointOutcome(task.id, "failed", {"network_model": task.spec.model}, None, _DIED, 0.0)
