"""``etsim inspect | validate | jsonize | visualize``: tools for Chakra ET files."""

from __future__ import annotations

import argparse
import json
import sys

from etsim.chakra.io import load_workload, read_trace, resolve_family
from etsim.chakra.jsonize import jsonize
from etsim.chakra.summary import summarize_trace, write_graph
from etsim.chakra.validate import validate_workload
from etsim.errors import ConfigError, TraceError
from etsim.files import write_text

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the trace tools to the ``etsim`` parser."""
    workload_help = "a family prefix P (P.0.et …), P.et, a directory with one family, or one .et file"

    p = subparsers.add_parser("inspect", help="summarise a workload per rank")
    p.add_argument("workload", help=workload_help)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_inspect)

    p = subparsers.add_parser("validate", help="check a workload; exit 1 on errors")
    p.add_argument("workload", help=workload_help)
    p.add_argument(
        "--ignore-ctrl-deps",
        action="store_true",
        help="treat control dependencies as a simulation would with this flag",
    )
    p.add_argument(
        "--max", type=int, default=50, metavar="N", help="print at most N issues of each severity (default 50)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print errors only")
    p.set_defaults(handler=cmd_validate)

    p = subparsers.add_parser("jsonize", help="dump a .et file as JSON (like chakra_jsonizer)")
    p.add_argument("file", help="one .et file")
    p.add_argument("--array", action="store_true", help="write one valid JSON array instead of concatenated objects")
    p.add_argument("-o", "--output", help="output file (default: standard output)")
    p.set_defaults(handler=cmd_jsonize)

    p = subparsers.add_parser("visualize", help="write one rank's dependency graph as .dot or .graphml")
    p.add_argument("workload", help=workload_help)
    p.add_argument("--rank", type=int, default=0, help="rank to draw (default 0)")
    p.add_argument("-o", "--output", required=True, help="output file ending in .dot or .graphml")
    p.set_defaults(handler=cmd_visualize)


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print per-rank node counts, collectives, bytes and critical-path length."""
    workload = load_workload(args.workload)
    summaries = [summarize_trace(t) for t in workload]
    if args.json:
        print(json.dumps([s.as_dict() for s in summaries], indent=2))
        return 0
    print(f"workload {args.workload}: {workload.num_ranks} rank(s)")
    for s in summaries:
        print(f"rank {s.rank}  {s.path}")
        print(f"  nodes: {s.nodes}  (" + ", ".join(f"{k} {v}" for k, v in s.nodes_by_type.items()) + ")")
        for name, sizes in s.collectives.items():
            desc = ", ".join(f"{count} x {size} B" for size, count in sizes.items())
            print(f"  {name}: {desc}")
        print(
            f"  bytes: collectives {s.collective_bytes}, sent {s.send_bytes}, received {s.recv_bytes}, "
            f"total {s.total_bytes}"
        )
        print(f"  compute: {s.compute_micros} us replayed")
        if s.critical_path_nodes < 0:
            cp = "none (the data dependencies form a cycle)"
        elif s.critical_path_deps == "data":
            cp = f"{s.critical_path_nodes} nodes (data dependencies only: the control dependencies form a cycle)"
        else:
            cp = f"{s.critical_path_nodes} nodes"
        print(f"  critical path: {cp}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Print errors and warnings; exit 1 if there is any error."""
    if args.max < 0:
        raise ConfigError(f"--max must be >= 0, got {args.max}")
    workload = load_workload(args.workload)
    issues = validate_workload(workload, ignore_ctrl_deps=args.ignore_ctrl_deps)
    errors = [i for i in issues if i.severity == "error"]
    warnings = [] if args.quiet else [i for i in issues if i.severity == "warning"]
    for group in (errors, warnings):
        for issue in group[: args.max]:
            print(issue)
        if len(group) > args.max:
            print(f"... and {len(group) - args.max} more {group[0].severity}(s)")
    nodes = sum(t.num_nodes for t in workload)
    status = "FAILED" if errors else "OK"
    print(
        f"{status}: {workload.num_ranks} rank(s), {nodes} nodes, {len(errors)} error(s), "
        f"{sum(i.severity == 'warning' for i in issues)} warning(s)",
        file=sys.stderr,
    )
    return 1 if errors else 0


def cmd_jsonize(args: argparse.Namespace) -> int:
    """Write the JSON dump."""
    text = jsonize(args.file, array=args.array)
    if args.output:
        write_text(args.output, text, TraceError)
    else:
        sys.stdout.write(text)
    return 0


def cmd_visualize(args: argparse.Namespace) -> int:
    """Draw one rank's graph."""
    paths = resolve_family(args.workload)
    if not 0 <= args.rank < len(paths):
        raise TraceError(f"workload {args.workload!r} has ranks 0..{len(paths) - 1}; --rank {args.rank} is not one")
    out = write_graph(read_trace(paths[args.rank], rank=args.rank), args.output)
    print(f"wrote {out}")
    return 0
