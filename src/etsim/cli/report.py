"""``etsim report RESULT.json`` and ``etsim plot timeline|links``: look at a saved run without re-running it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etsim.errors import ConfigError
from etsim.files import read_text, write_text
from etsim.options import Integer, add_arguments, option, parse_arguments
from etsim.report.result import Result
from etsim.report.tables import TABLES, critical_path_lines, render

__all__ = ["load_result", "register"]


@dataclass(frozen=True, kw_only=True)
class TimelinePlot:
    """``etsim plot timeline``'s settings."""

    max_ranks: int = option(16, "draw the first N ranks", Integer(1), metavar="N")


@dataclass(frozen=True, kw_only=True)
class LinksPlot:
    """``etsim plot links``'s settings."""

    top: int = option(30, "bars for the K busiest links", Integer(1), metavar="K")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``report`` and ``plot`` to the ``etsim`` parser."""
    p = subparsers.add_parser(
        "report",
        help="re-render a saved result (--json output) as the table, or as Markdown / CSV tables for papers",
        description="Print the table of a result written by `etsim run --json`, without re-running it.",
    )
    p.add_argument("result", help="a result JSON written by `etsim run … --json OUT`")
    p.add_argument(
        "--format", choices=("text", "markdown", "csv"), default=None, help="text (the run's table; the default), "
        "markdown (tables under headings; the default with --table) or csv (one table)",
    )  # fmt: skip
    p.add_argument(
        "--table",
        action="append",
        choices=tuple(TABLES),
        help="with --format markdown: the tables to print (repeatable; default: all that have rows); "
        "with csv: the one table (default: collectives)",
    )
    p.add_argument("-o", "--output", metavar="OUT", help="write to OUT instead of standard output")
    p.set_defaults(handler=cmd_report)

    plot = subparsers.add_parser(
        "plot",
        help="draw a trace as a Gantt chart, or a result's link utilisation (needs matplotlib: etsim[plot])",
        description="Pictures for papers: `plot timeline TRACE` (a trace from `etsim run --trace`) and "
        "`plot links RESULT.json` (grid for 2-D meshes and tori, heatmap and bar chart otherwise).",
    )
    kinds = plot.add_subparsers(dest="what", metavar="WHAT")
    kinds.required = True
    tl = kinds.add_parser("timeline", help="Gantt chart of a Chrome trace (.json or .json.gz)")
    tl.add_argument("trace", help="a trace written by `etsim run … --trace OUT`")
    tl.add_argument("-o", "--output", required=True, metavar="OUT", help="picture file (.png, .pdf, .svg, …)")
    add_arguments(tl, TimelinePlot)
    tl.add_argument("--title", help="figure title")
    tl.set_defaults(handler=cmd_plot_timeline)
    lk = kinds.add_parser("links", help="link utilisation of a result JSON")
    lk.add_argument("result", help="a result JSON written by `etsim run … --json OUT`")
    lk.add_argument("-o", "--output", required=True, metavar="OUT", help="picture file (.png, .pdf, .svg, …)")
    add_arguments(lk, LinksPlot)
    lk.set_defaults(handler=cmd_plot_links)


def _read_json(path: str, what: str) -> Any:
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not a {what}: invalid JSON at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not a {what}: JSON nested too deeply") from None


def load_result(path: str) -> Result:
    """Read a result JSON; one clear error if it is not one (a trace is named as one)."""
    try:
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
    except OSError:
        gzipped = False  # read_text names the problem
    if gzipped:
        raise ConfigError(f"{path}: this is a gzipped trace (etsim run --trace), not an etsim result (run --json)")
    data = _read_json(path, "result JSON")
    if isinstance(data, dict) and "traceEvents" in data:
        raise ConfigError(f"{path}: this is a trace (etsim run --trace), not an etsim result (etsim run --json)")
    return Result.from_dict(data, source=path)


def cmd_report(args: argparse.Namespace) -> int:
    """Print a saved result as the table, Markdown or CSV."""
    if args.format is None:
        args.format = "markdown" if args.table else "text"
    if args.format == "text" and args.table:
        raise ConfigError("--table goes with --format markdown or csv")
    if args.format == "csv" and args.table and len(args.table) != 1:
        raise ConfigError("--format csv prints one table; give --table once")
    result = load_result(args.result)
    if args.format == "text":
        text = result.table()
        if result.critical_path is not None:
            text += "\n" + "\n".join(critical_path_lines(result.critical_path))
        text += "\n"
    elif args.format == "csv":
        text = render(result, "csv", args.table or ["collectives"])
    else:
        text = render(result, "markdown", args.table or list(TABLES))
    if args.output:
        write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def _picture(output: str, name: str) -> str:
    """Where a plot goes: ``-o DIR`` means ``DIR/NAME.png``, a path without a suffix gets ``.png`` (as matplotlib)."""
    path = Path(output)
    if os.path.isdir(path):
        return str(path / f"{name}.png")
    return output if path.suffix else f"{output}.png"


def cmd_plot_timeline(args: argparse.Namespace) -> int:
    """Draw a trace as a Gantt chart."""
    from etsim.report.plots import load_trace_events, plot_timeline

    max_ranks = parse_arguments(args, TimelinePlot).max_ranks
    args.output = _picture(args.output, "timeline")
    drawn = plot_timeline(load_trace_events(args.trace), args.output, max_ranks=max_ranks, title=args.title)
    note = ""
    if drawn["processes_drawn"] < drawn["processes"]:
        note = f" (first {drawn['processes_drawn']} of {drawn['processes']} processes; --max-ranks to change)"
    print(f"{args.output}: {drawn['slices']:,} slices on {drawn['rows']} rows{note}")
    return 0


def cmd_plot_links(args: argparse.Namespace) -> int:
    """Draw the link utilisation of a saved result."""
    from etsim.report.plots import plot_links

    top = parse_arguments(args, LinksPlot).top
    result = load_result(args.result)
    args.output = _picture(args.output, "links")
    layout = plot_links(result.to_dict(), args.output, top=top)
    print(f"{args.output}: link utilisation ({layout})")
    return 0
