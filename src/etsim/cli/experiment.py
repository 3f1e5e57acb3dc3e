"""``etsim experiment run|show|plot``: YAML-driven sweeps (reference: ``docs/experiments.md``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from etsim.errors import ConfigError
from etsim.experiment.engines import ENGINES
from etsim.options import add_arguments, arguments_given, flag_name

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``experiment`` to the ``etsim`` parser."""
    parser = subparsers.add_parser(
        "experiment",
        help="run YAML-driven sweeps in parallel (local cores or Ray), with results tables and plots",
        description="Experiments: a YAML file names a workload, topology, algorithm, model and system, and "
        "sweep axes over any of them; see docs/experiments.md.",
    )
    sub = parser.add_subparsers(dest="experiment_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser(
        "run",
        help="run an experiment's points; stream DIR/results.csv and results.jsonl; draw its plots",
        description="Run every point of FILE (or those --only selects) and write DIR/results.csv, "
        "DIR/results.jsonl, DIR/points/<id>/config.yaml and DIR/plots/. Exit code 1 if any point failed.",
    )
    p.add_argument("file", help="experiment YAML")
    p.add_argument("--out", metavar="DIR", help="result directory (default: results/<name>)")
    p.add_argument("--jobs", "-j", type=int, metavar="N", help="parallel workers (default: all CPUs)")
    p.add_argument(
        "--engine", default="local", help=f"where points run: {ENGINES.describe('local')}, or package.module:Class"
    )
    for name, engine in ENGINES.items():  # each engine's options: --NAME-OPTION
        add_arguments(p, engine.Options, prefix=name)
    p.add_argument("--resume", action="store_true", help="keep finished points of DIR; rerun failed and missing")
    p.add_argument("--force", action="store_true", help="discard DIR's earlier results and start over")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="AXIS=VALUE",
        help="run only points with this axis value (repeatable; one axis given twice: either value)",
    )
    p.add_argument("--no-plots", action="store_true", help="do not draw the declared plots")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display or summary")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("show", help="list the points an experiment would run, without running them")
    p.add_argument("file", help="experiment YAML")
    p.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE", help="as for run")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser("plot", help="redraw an experiment's plots from its results.csv (nothing is run)")
    p.add_argument("source", help="experiment YAML, or a result directory (which holds experiment.yaml)")
    p.add_argument("--out", metavar="DIR", help="result directory of an experiment YAML (default: results/<name>)")
    p.set_defaults(handler=cmd_plot)


def cmd_run(args: argparse.Namespace) -> int:
    """Run the sweep and print a summary."""
    from etsim.experiment import load_experiment, run_experiment

    experiment = load_experiment(args.file)
    summary = run_experiment(
        experiment,
        out=args.out,
        jobs=args.jobs,
        engine=args.engine,
        engine_options=_engine_options(args),
        resume=args.resume,
        force=args.force,
        only=args.only,
        progress=None if args.quiet else sys.stderr,
        plots=not args.no_plots,
    )
    if not args.quiet:
        kept = f", {summary.skipped} kept from before" if summary.skipped else ""
        print(
            f"experiment {experiment.name}: {summary.selected} points, ran {summary.ran} in {summary.wall_s:.1f} s"
            f"{kept}: {summary.ok} ok, {summary.failed} failed"
            + (f", {summary.warned} with warnings (see the warnings column)" if summary.warned else "")
        )
        print(f"results: {summary.directory / 'results.csv'}, {summary.directory / 'results.jsonl'}")
        if summary.plots:
            print(f"plots: {', '.join(str(p) for p in summary.plots)}")
        elif summary.plot_note:
            print(f"plots not drawn: {summary.plot_note}")
    if summary.failed:
        print(
            f"etsim: {summary.failed} of {summary.selected} points failed; their errors are in "
            f"{summary.directory / 'results.csv'} (rerun them with --resume)",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print the points as a table."""
    from etsim.experiment import load_experiment, select_points

    experiment = load_experiment(args.file)
    points = select_points(experiment, args.only)
    axes = experiment.axes
    shape = " x ".join(f"{a.key} ({len(a.values)})" for a in axes) or "no axes"
    repeat = f", {experiment.repeat} repeats each" if experiment.repeat > 1 else ""
    print(f"experiment {experiment.name}: {len(points)} of {len(experiment.points)} points ({shape}{repeat})")
    if experiment.description:
        print(experiment.description.strip())
    header = ["point", *experiment.axis_keys, *(["repeat"] if experiment.repeat > 1 else []), "network_model"]
    rows = [[p.id, *p.labels, *([str(p.repeat)] if experiment.repeat > 1 else []), p.spec.model] for p in points]
    widths = [min(48, max(len(h), *(len(r[i]) for r in rows))) for i, h in enumerate(header)]

    def cut(text: str, width: int) -> str:
        return text if len(text) <= width else text[: width - 1] + "…"

    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(cut(c, w).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if experiment.plots:
        print("plots: " + ", ".join(p.name for p in experiment.plots))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Redraw the plots from the CSV."""
    from etsim.experiment import load_experiment
    from etsim.experiment.plots import draw_plots, plots_of_directory
    from etsim.experiment.runner import default_directory

    source = Path(args.source)
    if os.path.isdir(source):
        if args.out:
            raise ConfigError("--out is for an experiment YAML; a result directory is its own output")
        directory = source
        plots = plots_of_directory(directory)
    else:
        experiment = load_experiment(source)
        directory = Path(args.out) if args.out else default_directory(experiment)
        plots = experiment.plots
    if not plots:
        print(f"{source}: the experiment declares no plots")
        return 0
    written = draw_plots(plots, directory)
    print(f"plots: {', '.join(str(p) for p in written)}")
    return 0


def _engine_options(args: argparse.Namespace) -> dict[str, object]:
    """The chosen engine's options given as flags; another engine's flag is an error naming it."""
    options: dict[str, object] = {}
    for name, engine in ENGINES.items():
        given = arguments_given(args, engine.Options, prefix=name)
        if given and name != args.engine:
            flags = ", ".join(flag_name(option, name) for option in given)
            raise ConfigError(f"{flags} is an option of --engine {name}, not of --engine {args.engine}")
        if name == args.engine:
            options = given
    return options
