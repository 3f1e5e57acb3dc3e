"""``etsim astra``: run ASTRA-sim inputs with ASTRA-sim's flags and print its finish lines."""

from __future__ import annotations

import argparse
import sys

from etsim.compat.astra import astra_output, run_astra
from etsim.files import write_text

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``astra`` to the ``etsim`` parser."""
    p = subparsers.add_parser(
        "astra",
        help="run ASTRA-sim inputs (workload prefix, system JSON, network YAML) with its conventions",
        description="Reproduce ASTRA-sim's analytical back end: per rank `sys[i] finished, T cycles, "
        "exposed communication E cycles.`",
    )
    p.add_argument("--workload-configuration", required=True, metavar="PREFIX", help="Chakra ET prefix")
    p.add_argument("--system-configuration", required=True, metavar="JSON", help="ASTRA-sim system JSON")
    p.add_argument("--network-configuration", required=True, metavar="YAML", help="ASTRA-sim network YAML")
    p.add_argument("--remote-memory-configuration", metavar="JSON", help="ASTRA-sim remote-memory JSON")
    p.add_argument("--comm-group-configuration", metavar="JSON", default="empty", help="comm-group JSON")
    p.add_argument(
        "--model",
        choices=("unaware", "aware"),
        default="unaware",
        help="congestion-unaware (default) or congestion-aware analytical back end",
    )
    p.add_argument(
        "--num-queues-per-dim", type=int, default=1, metavar="Q", help="queues per network dimension (default 1)"
    )
    p.add_argument("--json", metavar="OUT", help="also write etsim's JSON result to OUT ('-' for standard output)")
    p.set_defaults(handler=cmd_astra)


def cmd_astra(args: argparse.Namespace) -> int:
    """Simulate and print ASTRA-sim's per-rank lines."""
    result = run_astra(
        args.workload_configuration,
        args.system_configuration,
        args.network_configuration,
        remote_memory=args.remote_memory_configuration,
        comm_groups=args.comm_group_configuration,
        model=args.model,
        queues_per_dim=args.num_queues_per_dim,
        warn=lambda text: print(f"etsim: warning: {text}", file=sys.stderr),
    )
    if args.json == "-":
        sys.stdout.write(result.to_json() + "\n")
        return 0
    print(astra_output(result))
    if args.json:
        write_text(args.json, result.to_json() + "\n")
    return 0
