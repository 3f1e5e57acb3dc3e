"""``etsim tune``: simulate candidate algorithms per (collective, size, group), write the fastest as a table."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from etsim.errors import ConfigError, warn
from etsim.files import write_text
from etsim.options import (
    Integer,
    Optional,
    add_arguments,
    arguments_given,
    flag_name,
    option,
    parse_arguments,
    parse_options,
)
from etsim.system.config import SystemConfig, load_system_config
from etsim.tuning import csv_text, msccl_files, nccl_tuner_csv, plot
from etsim.tuning.tune import TuneRequest, base_settings, compare_workload, tune
from etsim.units import format_size, format_time
from etsim.workers import stop_on_signals

__all__ = ["register"]

_EXPORTS = ("nccl-tuner", "msccl")
#: Plot files etsim tune writes (matplotlib's formats, by suffix).
PLOT_FORMATS = (".png", ".svg", ".pdf")


@dataclass(frozen=True, kw_only=True)
class TuneWorkers:
    """Where ``etsim tune`` measures."""

    jobs: int | None = option(
        None, "worker processes (default: the CPU count; 1 runs in this process)", Optional(Integer(1)), metavar="N"
    )


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``tune`` to the ``etsim`` parser."""
    p = subparsers.add_parser(
        "tune",
        help="find the fastest algorithm per collective call on a topology; write it as a selection table",
        description="Simulate each candidate algorithm alone on each (collective, size, group) point, write the "
        "fastest per point as a selection table (a system YAML for --system, adjacent sizes with the same winner "
        "merged), a CSV of every measured time and a plot; optionally export the table for NCCL's tuner plugin "
        "or as MSCCL-IR files with size windows. See docs/tuning.md.",
    )
    add_arguments(p, TuneRequest)  # --topology, --candidates, --collective, --sizes, … (declared on TuneRequest)
    p.add_argument("--system", help="base system YAML (chunks, costs, …); its algorithms are not used")
    add_arguments(p, TuneWorkers)  # --jobs
    p.add_argument("-o", "--output", required=True, help="the selection table (system YAML) to write")
    p.add_argument("--csv", help="CSV of every measured time (default: OUTPUT with .csv)")
    p.add_argument("--plot", help="plot (PNG) of time vs size per candidate (default: OUTPUT with .png; 'none')")
    p.add_argument("--metric", choices=("time", "busbw"), default="time", help="what the plot shows (default time)")
    p.add_argument(
        "--export",
        nargs=2,
        action="append",
        default=[],
        metavar=("FORMAT", "OUT"),
        help="also write the table for a runtime: 'nccl-tuner FILE' (NCCL's tuner-plugin CSV) or 'msccl DIR' "
        "(the chosen MSCCL-IR files with minBytes/maxBytes set); repeatable",
    )
    p.set_defaults(handler=cmd_tune)


def _flag(name: str) -> str:
    """The flag of a :class:`TuneRequest` option (``collectives`` is ``--collective``)."""
    return "--collective" if name == "collectives" else flag_name(name)


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune, write the table, CSV, plot and exports; in workload mode, compare the whole workload.

    Ctrl-C and SIGTERM stop it at once (exit 130 / 143), as they stop a sweep, also where the shell started it with
    SIGINT ignored; what it measured so far is not kept (the table is written at the end).
    """
    with stop_on_signals(immediate=True, again="nothing was written: run the command again"):
        return _tune(args)


def _tune(args: argparse.Namespace) -> int:
    jobs = parse_arguments(args, TuneWorkers).jobs
    if args.plot and args.plot != "none" and Path(args.plot).suffix.lower() not in PLOT_FORMATS:
        formats = ", ".join(PLOT_FORMATS)
        raise ConfigError(f"--plot {args.plot}: the file's suffix says its format; use one of {formats} (or 'none')")
    for fmt, target in args.export:
        if fmt not in _EXPORTS:
            raise ConfigError(f"--export: unknown format {fmt!r}; valid: {', '.join(_EXPORTS)}")
        # (checked before the tuning: its results were lost when the export could not be written after it)
        if fmt == "msccl" and Path(target).is_file():
            raise ConfigError(f"--export msccl {target}: a file; MSCCL-IR files are written to a directory")
        if fmt == "nccl-tuner" and Path(target).is_dir():
            raise ConfigError(f"--export nccl-tuner {target}: a directory; give the CSV file to write")
    for flag, path in (("-o", args.output), ("--csv", args.csv), ("--plot", args.plot)):
        if path and Path(path).is_dir():
            raise ConfigError(f"{flag} {path}: a directory; give the file to write")
    system = load_system_config(args.system) if args.system else SystemConfig()
    given = arguments_given(args, TuneRequest)
    if "workload" in given and ({"collectives", "group_sizes", "sizes"} & set(given)):
        raise ConfigError(
            "--workload tunes the calls the workload makes, at their sizes; do not give --collective, --group-sizes "
            "or --sizes"
        )
    options = parse_options(TuneRequest, given, key=_flag, text=True)
    request = TuneRequest(**options, system=system, settings=base_settings(args.system), output=args.output)
    result = tune(request, jobs=jobs)
    out = Path(args.output)
    write_text(out, result.table_text)
    csv_path = Path(args.csv) if args.csv else out.with_suffix(".csv")
    write_text(csv_path, csv_text(result.measurements, result.tuned))
    print(f"wrote {out} ({len(result.rules)} rules for {len(result.tuned)} tuned points) and {csv_path}")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    said = dict.fromkeys(
        f"tuning {getattr(m.point, 'candidate', '')}: {w}" for m in result.measurements for w in m.warnings
    )
    for message in said:
        warn(message)
    if args.plot != "none":
        plot_path = Path(args.plot) if args.plot else out.with_suffix(".png")
        try:
            plot(plot_path, result.measurements, result.tuned, request.candidates, metric=args.metric)
            print(f"wrote {plot_path}")
        except ImportError:
            print("note: no plot: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
    table = load_system_config(out)
    for fmt, target in args.export:
        header = [f"written by etsim tune from {out} (topology {args.topology})"]
        if fmt == "nccl-tuner":
            text, notes = nccl_tuner_csv(table.algorithm_rules, header)
            write_text(target, text)
            print(f"wrote {target} (NCCL tuner-plugin CSV)")
        else:
            paths, notes = msccl_files(table.algorithm_rules, target, table.base_dir)
            print(f"wrote {len(paths)} MSCCL-IR file(s) to {target}")
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    print(f"{'collective':<15} {'group':>5} {'size':>10}  {'fastest':<20} {'time':>12}")
    for t in result.tuned:
        size, time = format_size(t.size), format_time(t.time_ns)
        print(f"{t.series[0]:<15} {t.series[1]:>5} {size:>10}  {t.candidate:<20} {time:>12}")
    if request.workload:
        comparison = compare_workload(request, table, jobs=jobs)
        tuned = comparison[0].time_ns
        print(f"\nworkload {request.workload}: finish time with the tuned table vs each candidate alone")
        for m in comparison:
            label = getattr(m.point, "label", "")
            if m.time_ns is None:
                print(f"  {label:<20} {'-':>12}  {m.note}")
                continue
            gain = ""
            if tuned and m is not comparison[0]:
                change = 100 * (1 - tuned / m.time_ns)
                gain = f"  tuned is {change:.1f}% faster" if change >= 0 else f"  tuned is {-change:.1f}% slower"
            print(f"  {label:<20} {format_time(m.time_ns):>12}{gain}")
            for w in m.warnings:
                print(f"      warning: {w}", file=sys.stderr)
    return 0
