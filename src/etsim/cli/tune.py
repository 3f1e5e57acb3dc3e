"""``etsim tune``: simulate candidate algorithms per (collective, size, group), write the fastest as a table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from etsim.errors import ConfigError, warn
from etsim.files import write_text
from etsim.system.config import SystemConfig, load_system_config
from etsim.tuning import csv_text, msccl_files, nccl_tuner_csv, plot
from etsim.tuning.tune import TuneRequest, base_settings, compare_workload, expand_candidates, parse_sizes, tune
from etsim.units import format_size, format_time

__all__ = ["register"]

_EXPORTS = ("nccl-tuner", "msccl")


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
    p.add_argument("--topology", required=True, help="topology YAML")
    p.add_argument("--model", help="network model (default: the topology file's, else link)")
    p.add_argument("--system", help="base system YAML (chunks, costs, …); its algorithms are not used")
    p.add_argument(
        "--collective",
        action="append",
        default=[],
        metavar="C",
        help="collective to tune (repeatable or comma-separated; default all_reduce)",
    )
    p.add_argument(
        "--sizes", default="1KiB..1GiB", help="sizes: a list '4KiB,1MiB,64MiB' or a power-of-two range '1KiB..1GiB'"
    )
    p.add_argument("--group-sizes", help="group sizes, comma-separated: the first N NPUs (default: all of them)")
    p.add_argument(
        "--candidates",
        default="ring,direct,tree,hd",
        help="comma-separated --algo values: native names, ET families and MSCCL-IR files (globs allowed: "
        "'algorithms/*.et', 'path/*.xml'), tacos[:k=v,…] (default ring,direct,tree,hd)",
    )
    p.add_argument(
        "--workload",
        help="tune the (collective, size, group) calls this workload makes, then report its time with the table "
        "and with each candidate alone",
    )
    p.add_argument("--fallback", default="ring", help="the table's {default: ALGO} rule, or 'none' (default ring)")
    p.add_argument("--jobs", type=int, help="worker processes (default: the CPU count; 1 runs in this process)")
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


def _split(values: list[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _int_list(text: str, flag: str) -> list[int]:
    try:
        return sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(f"{flag}: expected comma-separated integers, got {text!r}") from None


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune, write the table, CSV, plot and exports; in workload mode, compare the whole workload."""
    if args.jobs is not None and args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    for fmt, _ in args.export:
        if fmt not in _EXPORTS:
            raise ConfigError(f"--export: unknown format {fmt!r}; valid: {', '.join(_EXPORTS)}")
    system = load_system_config(args.system) if args.system else SystemConfig()
    if args.workload and (args.collective or args.group_sizes):
        raise ConfigError("--workload tunes the calls the workload makes; do not give --collective or --group-sizes")
    request = TuneRequest(
        topology=args.topology,
        candidates=expand_candidates(args.candidates),
        collectives=_split(args.collective) or ["all_reduce"],
        sizes=parse_sizes(args.sizes),
        group_sizes=_int_list(args.group_sizes, "--group-sizes") if args.group_sizes else [],
        model=args.model,
        system=system,
        settings=base_settings(args.system),
        workload=args.workload,
        fallback=None if args.fallback == "none" else args.fallback,
        output=args.output,
    )
    result = tune(request, jobs=args.jobs)
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
        comparison = compare_workload(request, table, jobs=args.jobs)
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
