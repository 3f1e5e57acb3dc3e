"""Run an experiment: select its points, stream their results, show progress, draw its plots."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from etsim.errors import ConfigError, RegistryError
from etsim.experiment.engines import default_jobs, make_engine
from etsim.experiment.results import ResultsDir
from etsim.experiment.spec import Experiment, select_points
from etsim.experiment.worker import PointOutcome, PointTask
from etsim.workers import stop_on_signals

if TYPE_CHECKING:
    from etsim.experiment.engines import ExperimentEngine
    from etsim.experiment.points import Point

__all__ = ["Progress", "RunSummary", "default_directory", "run_experiment"]


def default_directory(experiment: Experiment) -> Path:
    """``results/<name>`` in the working directory."""
    return Path("results") / experiment.name


class Progress:
    """Points done / failed / ETA: a tqdm bar on a terminal, a plain line every few seconds otherwise.

    Args:
        total: points to run.
        stream: where to write (None: nothing).
        interval: seconds between plain lines.
    """

    def __init__(self, total: int, stream: TextIO | None, *, interval: float = 5.0) -> None:
        self.total = total
        self.stream = stream
        self.done = 0
        self.failed = 0
        self.interval = interval
        self.t0 = time.perf_counter()
        self._last = self.t0
        self._bar: Any = None
        if stream is not None and _isatty(stream):
            from tqdm import tqdm

            self._bar = tqdm(total=total, file=stream, unit="pt", dynamic_ncols=True, leave=True)

    def update(self, outcome: PointOutcome) -> None:
        """Count one finished point."""
        self.done += 1
        self.failed += outcome.status != "ok"
        if self._bar is not None:
            self._bar.update(1)
            if self.failed:
                self._bar.set_postfix_str(f"{self.failed} failed", refresh=False)
            return
        now = time.perf_counter()
        if self.stream is not None and (now - self._last >= self.interval or self.done == self.total):
            self._last = now
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def line(self, now: float) -> str:
        """The plain progress line."""
        elapsed = now - self.t0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = f", ETA {(self.total - self.done) / rate:.0f} s" if rate > 0 and self.done < self.total else ""
        return (
            f"etsim: {self.done}/{self.total} points ({self.done - self.failed} ok, {self.failed} failed), "
            f"{elapsed:.1f} s{eta}"
        )

    def close(self) -> None:
        """End the bar."""
        if self._bar is not None:
            self._bar.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass
class RunSummary:
    """What :func:`run_experiment` did."""

    directory: Path
    selected: int
    """Points the run covered (after ``--only``)."""
    ran: int = 0
    ok: int = 0
    failed: int = 0
    warned: int = 0
    """Points whose simulation warned (see the ``warnings`` column)."""
    skipped: int = 0
    """Finished points kept from an earlier run (``--resume``)."""
    wall_s: float = 0.0
    plots: list[Path] = field(default_factory=list)
    plot_note: str = ""


def run_experiment(
    experiment: Experiment,
    *,
    out: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    engine: str = "local",
    engine_options: dict[str, Any] | None = None,
    resume: bool = False,
    force: bool = False,
    only: Sequence[str] = (),
    progress: TextIO | None = None,
    plots: bool = True,
) -> RunSummary:
    """Run *experiment*'s points (those matching *only*) and write its result directory.

    Args:
        experiment: a loaded experiment (:func:`~etsim.experiment.spec.load_experiment`).
        out: the result directory (default ``results/<name>``).
        jobs: parallel workers (default: every CPU this process may use).
        engine: a name in :data:`~etsim.experiment.engines.ENGINES` (``local``: a process pool; ``ray``).
        engine_options: the engine's options (``{"address": …}`` for ``ray``), as values or command-line text.
        resume: keep finished points of an earlier run, rerun failed and missing ones.
        force: start over when the directory already holds results.
        only: ``AXIS=VALUE`` filters.
        progress: stream for the progress display (None: silent).
        plots: draw the declared plots at the end (when matplotlib is installed).

    Raises:
        ConfigError: bad options, results in the way, or an engine that cannot start.
        KeyboardInterrupt: Ctrl-C or SIGTERM; everything finished so far is on disk, in order.
    """
    if not isinstance(experiment, Experiment):
        raise ConfigError(f"run_experiment: expected an Experiment (load_experiment(PATH)), got {experiment!r:.80}")
    only = [only] if isinstance(only, str) else list(only)  # (one filter as a string, not letter by letter)
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    try:
        runner = make_engine(engine, jobs or default_jobs(), engine_options)
    except RegistryError as exc:
        raise ConfigError(f"--engine {engine!r}: {exc}") from None
    points = select_points(experiment, only)
    if not points:
        raise ConfigError(f"--only {' '.join(only)}: no point matches all of these")
    directory = Path(out) if out is not None else default_directory(experiment)
    results = ResultsDir(directory, experiment)
    todo = results.open(points, resume=resume, force=force)
    summary = RunSummary(directory, len(points), skipped=len(points) - len(todo))
    bar = Progress(len(todo), progress)
    t0 = time.perf_counter()

    def on_outcome(outcome: PointOutcome) -> None:
        results.write(outcome)
        bar.update(outcome)
        summary.ran += 1
        summary.warned += bool(outcome.warnings)

    _run_points(runner, results, todo, on_outcome, bar)
    summary.wall_s = time.perf_counter() - t0
    selected = {p.id for p in points}
    statuses = [s for pid, s in results.status.items() if pid in selected]
    summary.ok = statuses.count("ok")
    summary.failed = len(statuses) - summary.ok
    if plots and experiment.plots:
        _draw_plots(experiment, directory, summary)
    return summary


def _run_points(
    runner: ExperimentEngine,
    results: ResultsDir,
    todo: list[Point],
    on_outcome: Callable[[PointOutcome], None],
    bar: Progress,
) -> None:
    """Run the points *todo* on *runner* while a thread writes their configs; the results files closed after.

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM (:func:`~etsim.workers.stop_on_signals`).
    """
    tasks = [PointTask(p.id, p.spec) for p in todo]
    # The configs are written while the workers start and simulate (a thousand small files take as long as
    # a thousand small simulations); the thread is mostly in system calls, which release the GIL.
    # A stopped sweep stops writing them too (within one file), so Ctrl-C ends it at once.
    stop_writing = threading.Event()
    writer = threading.Thread(target=results.write_configs, args=(todo, stop_writing), name="etsim-configs")
    writer.start()
    finished = False
    try:
        with stop_on_signals(immediate=runner.in_process(len(tasks)), again="--resume continues the sweep"):
            if tasks:
                runner.run(tasks, on_outcome)
        finished = True
    finally:
        if not finished:
            stop_writing.set()
        writer.join()
        bar.close()
        results.close()


def _draw_plots(experiment: Experiment, directory: Path, summary: RunSummary) -> None:
    """Draw the experiment's plots into *directory*, noting in *summary* what was drawn or why nothing was."""
    from etsim.experiment.plots import PlotUnavailable, draw_plots

    try:
        summary.plots = draw_plots(experiment.plots, directory)
    except PlotUnavailable as exc:
        summary.plot_note = str(exc)
