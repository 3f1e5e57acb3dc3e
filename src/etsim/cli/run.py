"""``etsim run WORKLOAD …`` (also ``python -m etsim WORKLOAD …``): simulate a workload."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from etsim.chakra.graph import COLLECTIVE_NAMES, algorithm_collective, parse_collective
from etsim.chakra.io import load_workload, resolve_family
from etsim.errors import ConfigError, warn
from etsim.files import write_text
from etsim.network.loader import NetworkConfig, load_network
from etsim.network.model import DEFAULT_MODEL, NETWORK_MODELS
from etsim.options import Integer, add_arguments, arguments_given, flag_name, option, parse_arguments, parse_options
from etsim.report.result import Result
from etsim.report.tables import critical_path_lines
from etsim.simulation import Reports, Simulation
from etsim.system.algorithms.sources import claiming_source
from etsim.system.config import SystemConfig, load_system_config
from etsim.system.rules import SelectionRule
from etsim.units import format_size

if TYPE_CHECKING:
    from etsim.cluster import ClusterResult

#: --trace-limit's default (etsim.report.trace.DEFAULT_LIMIT, not imported here to keep start-up light).
DEFAULT_LIMIT = 1_000_000

__all__ = ["parse_algo_options", "register"]

#: System settings ``etsim run`` takes as flags (the rest only in a system YAML, ``--system``).
SYSTEM_FLAGS = (
    "comm_groups",
    "chunks",
    "reduction_bandwidth",
    "endpoint_delay",
    "ignore_ctrl_deps",
    "fast_path",
    "fold_replicas",
)


@dataclass(frozen=True, kw_only=True)
class TraceSettings:
    """How much of a run ``--trace`` writes."""

    trace_limit: int = option(
        DEFAULT_LIMIT, "with --trace: write at most N events; a cut trace says so", Integer(1), metavar="N"
    )


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``run`` to the ``etsim`` parser."""
    p = subparsers.add_parser(
        "run",
        help="simulate a workload (default command: `etsim WORKLOAD …` means `etsim run WORKLOAD …`)",
        description="Simulate a Chakra ET workload on a topology and print per-rank and per-collective times.",
    )
    p.add_argument(
        "workload",
        nargs="?",
        help="a family prefix P (P.0.et …), P.et, a directory with one family, or one .et file",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="run one experiment point (DIR/points/<id>/config.yaml) instead of WORKLOAD and options",
    )
    p.add_argument(
        "--algo",
        action="append",
        default=[],
        metavar="[COLL=]ALGO",
        help="algorithm for all collectives or for one (all_reduce=ring): a native name (ring, direct, "
        "halving_doubling, tree, hierarchical, …) or a Chakra ET family path; repeatable",
    )
    p.add_argument(
        "--topology",
        help="topology YAML (default: a bidirectional ring of the workload's ranks, at least 2, 50 GB/s, 500 ns)",
    )
    p.add_argument(
        "--model", help=f"network model: {NETWORK_MODELS.describe(DEFAULT_MODEL)}, or package.module:Class (a plug-in)"
    )
    p.add_argument(
        "--system", help="system YAML (algorithms, chunks, reduction_bandwidth, endpoint_delay, resources, …)"
    )
    # The system settings that have flags: declared once, on SystemConfig (etsim.options).
    add_arguments(p, SystemConfig, only=SYSTEM_FLAGS)
    p.add_argument("--json", metavar="OUT", help="write the result as JSON to OUT ('-' for standard output)")
    p.add_argument(
        "--trace",
        metavar="OUT",
        help="write a timeline (Chrome trace JSON; OUT.json.gz is gzipped) to open in the Perfetto UI or chrome://tracing",
    )
    p.add_argument(
        "--trace-messages", action="store_true", help="with --trace: every message as slices joined by flow arrows"
    )
    add_arguments(p, TraceSettings)  # --trace-limit
    p.add_argument(
        "--critical-path", action="store_true", help="print the critical path (the JSON holds it as critical_path)"
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the finish time (no table, no progress bar, no trace note)",
    )
    p.set_defaults(handler=cmd_run)


def _algorithm_name(collective: str) -> str:
    return COLLECTIVE_NAMES[algorithm_collective(parse_collective(collective))]


def parse_algo_options(values: list[str]) -> dict[str, str]:
    """``["ring", "all_gather=direct"]`` → ``{"default": "ring", "all_gather": "direct"}``."""
    out: dict[str, str] = {}
    for value in values:
        coll, sep, algo = value.partition("=")
        if sep and coll in COLLECTIVE_NAMES.values():
            key = coll
        elif sep and "/" not in coll and "." not in coll and ":" not in coll:  # (tacos:seed=1 is an algorithm)
            valid = ", ".join(sorted(COLLECTIVE_NAMES.values()))
            raise ConfigError(f"--algo {value!r}: unknown collective {coll!r}; valid: {valid}")
        else:
            key, algo = "default", value
        if key in out:
            what = "a default algorithm" if key == "default" else f"{key}"
            raise ConfigError(f"--algo is given twice for {what} ({out[key]!r} and {algo!r}); give it once")
        out[key] = algo
    return out


def _with_cli_rules(
    rules: tuple[SelectionRule, ...], algorithms: dict[str, str], cli: dict[str, str]
) -> tuple[SelectionRule, ...]:
    """A selection table with ``--algo`` applied: ``COLL=ALGO`` rules first, ``ALGO`` replacing its default."""
    first = [
        SelectionRule(algorithms[k], "--algo", f"--algo {k}={v}", collective=k)
        for k, v in cli.items()
        if k != "default"
    ]
    kept = [r for r in rules if not (r.is_default and "default" in cli)]
    last = (
        [SelectionRule(algorithms["default"], "--algo", f"--algo {cli['default']}", is_default=True)]
        if "default" in cli
        else []
    )
    return (*first, *kept, *last)


def cmd_run(args: argparse.Namespace) -> int:
    """Load, simulate, print and optionally write JSON."""
    if getattr(args, "trace_messages", False) and not getattr(args, "trace", None):
        raise ConfigError("--trace-messages adds the messages to the --trace file: give --trace FILE too")
    if getattr(args, "trace", None) == "-":
        raise ConfigError("--trace writes a file (a Chrome trace, often large): give a path, not '-'")
    if args.config is not None or args.workload is None:
        return _run_config(args)
    config = load_system_config(args.system) if args.system else SystemConfig()
    algorithms = dict(config.algorithms)
    cli_algorithms = parse_algo_options(args.algo)
    algorithms.update(cli_algorithms)
    origins = {k: v for k, v in config.algorithm_origins.items() if k not in cli_algorithms}
    changes: dict[str, object] = {"algorithms": algorithms, "algorithm_origins": origins}
    # --algo paths are relative to the working directory (a system file's are relative to the file).
    for key, value in cli_algorithms.items():
        if not value:
            raise ConfigError(f"--algo {key}=: no algorithm given")
        if args.system and claiming_source(value).reads_files:
            algorithms[key] = str(Path(value).resolve())
    if config.algorithm_rules and cli_algorithms:
        changes["algorithm_rules"] = _with_cli_rules(config.algorithm_rules, algorithms, cli_algorithms)
    given = arguments_given(args, SystemConfig, only=SYSTEM_FLAGS)
    flags = parse_options(SystemConfig, given, key=flag_name, text=True)
    if flags.get("comm_groups"):
        flags["comm_groups"] = str(Path(flags["comm_groups"]).resolve())  # flags are relative to the working directory
    config = config.with_overrides(**changes, **flags)
    trace_limit = parse_arguments(args, TraceSettings).trace_limit
    topology: NetworkConfig | None = None
    if args.topology is not None:
        # Loaded before the traces, so that a workload of more ranks than the topology has NPUs is refused
        # from its file count at once (not after reading every trace).
        topology = replace(load_network(args.topology), label=args.topology)
        ranks = len(resolve_family(args.workload))
        if ranks > topology.topology.npus:
            raise ConfigError(
                f"the workload has {ranks} ranks but topology {args.topology} has only {topology.topology.npus} NPUs"
            )
    workload = load_workload(args.workload)
    # A timeline records node times and every message (up to --trace-limit); the critical path every message.
    reports = Reports(
        critical_path=args.critical_path,
        messages=bool(args.trace),
        message_limit=trace_limit,
        timeline=bool(args.trace),
    )
    simulation = Simulation(workload, topology=topology, model=args.model, system=config, reports=reports)
    result = simulation.run()
    # (a reduce-scatter-block runs as a reduce-scatter, and takes that collective's algorithm)
    issued = {name for c in result.collectives for name in (c.type.lower(), _algorithm_name(c.type))}
    for key, algo in cli_algorithms.items():
        if key != "default" and key not in issued:
            warn(f"--algo {key}={algo}: the workload issues no {key}; it had no effect")
    recorder = simulation.recorder
    if args.trace and recorder is not None:
        from etsim.report.trace import write_chrome_trace

        written = write_chrome_trace(recorder, args.trace, messages=args.trace_messages, limit=trace_limit)
        if not args.quiet:
            print(
                f"etsim: trace: {written.events:,} events, {format_size(written.size)} in {written.path} "
                "(open it in the Perfetto UI, ui.perfetto.dev, or chrome://tracing)",
                file=sys.stderr,
            )
    return _report(args, result, f"workload {args.workload}: {workload.num_ranks} ranks")


def _run_config(args: argparse.Namespace) -> int:
    """``--config FILE``: the point's own workload, topology, algorithm, model and system, nothing else."""
    # (--trace and --critical-path need a recorded run: with a WORKLOAD only, for now)
    given = [f"--{k.replace('_', '-')}" for k in ("algo", "topology", "model", "system", "trace", "critical_path")
             if getattr(args, k)]  # fmt: skip
    given += [flag_name(name) if value is not False else f"--no-{flag_name(name)[2:]}"
              for name, value in arguments_given(args, SystemConfig, only=SYSTEM_FLAGS).items()]  # fmt: skip
    if args.config is None:
        raise ConfigError("give a WORKLOAD, or --config FILE")
    if args.workload is not None or given:
        extra = ", ".join(([args.workload] if args.workload else []) + given)
        raise ConfigError(f"--config FILE holds the whole point; drop {extra}")
    from etsim.experiment import simulate_config

    return _report(args, simulate_config(args.config), f"point {args.config}")


def _report(args: argparse.Namespace, result: Result | ClusterResult, title: str) -> int:
    if args.json == "-":
        sys.stdout.write(result.to_json() + "\n")
    elif args.json:
        write_text(args.json, result.to_json() + "\n")
    if args.json == "-":
        return 0
    if args.quiet:
        print(result.table().splitlines()[0])  # the finish time: one line
        return 0
    print(title)
    print(result.table())
    if isinstance(result, Result) and result.critical_path is not None:
        print("\n".join(critical_path_lines(result.critical_path)))
    return 0
