"""``etsim cluster run FILE``: several jobs on one cluster (``docs/cluster.md``)."""

from __future__ import annotations

import argparse
import sys

from etsim.files import write_text

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``cluster`` to the ``etsim`` parser."""
    parser = subparsers.add_parser(
        "cluster",
        help="several jobs on one cluster: shared links, placements, stragglers, faults",
        description="Run the jobs of a cluster file together on its network; see docs/cluster.md.",
    )
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "run",
        help="run every job of FILE on the shared cluster; print each job's time and the links they shared",
        description="Run every job of FILE together on its cluster. With --alone, each job also runs by itself "
        "on the same GPUs, and its slowdown (together over alone) is reported.",
    )
    p.add_argument("file", help="cluster YAML")
    p.add_argument("--alone", action="store_true", help="also run each job alone on its GPUs: its slowdown")
    p.add_argument(
        "--fault-costs", action="store_true", help="also run without each fault in turn: what it cost each job"
    )
    p.add_argument("--json", metavar="OUT", help="write the result as JSON to OUT ('-' for standard output)")
    p.add_argument("--trace", metavar="OUT", help="write the run's timeline (Chrome/Perfetto JSON, .gz to compress)")
    p.add_argument("-q", "--quiet", action="store_true", help="show no progress")
    p.set_defaults(handler=cmd_cluster_run)


def cmd_cluster_run(args: argparse.Namespace) -> int:
    """Run the cluster file; print the jobs and shared links (and write the JSON)."""
    from etsim.cluster import load_cluster, run_cluster

    result = run_cluster(load_cluster(args.file), alone=args.alone, fault_costs=args.fault_costs, trace=args.trace)
    if args.json == "-":
        sys.stdout.write(result.to_json() + "\n")
        return 0
    if args.json:
        write_text(args.json, result.to_json() + "\n")
    print(result.table())
    return 0
