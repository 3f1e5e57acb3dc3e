"""``etsim workload gen …``: write runnable workloads."""

from __future__ import annotations

import argparse

from etsim.chakra.graph import CollectiveType
from etsim.chakra.io import write_workload
from etsim.errors import ConfigError
from etsim.producers.workloads import (
    collective_workload,
    data_parallel_workload,
    moe_workload,
    ring_sendrecv_workload,
)
from etsim.units import parse_size

__all__ = ["register"]

_COLLECTIVES = {c.name.lower(): c for c in CollectiveType}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``workload gen`` to the ``etsim`` parser."""
    workload = subparsers.add_parser("workload", help="generate workloads")
    sub = workload.add_subparsers(dest="workload_command", metavar="ACTION")
    sub.required = True
    gen = sub.add_parser("gen", help="write a generated workload as PREFIX.<rank>.et")
    kinds = gen.add_subparsers(dest="kind", metavar="KIND")
    kinds.required = True

    p = kinds.add_parser("collective", help="one or more collectives on every rank")
    p.add_argument("--type", required=True, choices=sorted(_COLLECTIVES), help="collective type")
    p.add_argument("--size", required=True, help="bytes, e.g. '1 MiB' or 1048576")
    p.add_argument("--npus", required=True, type=int)
    p.add_argument("--count", type=int, default=1, help="back-to-back collectives (default 1)")
    p.add_argument("--pg-name", help="communicator group id for pg_name")
    p.add_argument("-o", "--output", required=True, help="output prefix")
    p.set_defaults(handler=cmd_collective)

    p = kinds.add_parser("sendrecv", help="each rank sends to the next rank on a ring")
    p.add_argument("--size", required=True)
    p.add_argument("--npus", required=True, type=int)
    p.add_argument("-o", "--output", required=True, help="output prefix")
    p.set_defaults(handler=cmd_sendrecv)

    p = kinds.add_parser("dp", help="data-parallel training step(s) with overlapped gradient all-reduces")
    p.add_argument("--npus", required=True, type=int)
    p.add_argument("--layers", required=True, type=int)
    p.add_argument("--grad-size", required=True, help="all-reduce bytes per layer")
    p.add_argument("--fwd-us", type=int, default=100, help="forward compute per layer, µs (default 100)")
    p.add_argument("--bwd-us", type=int, default=100, help="input-gradient compute per layer, µs (default 100)")
    p.add_argument("--wg-us", type=int, help="weight-gradient compute per layer, µs (default: --bwd-us)")
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("-o", "--output", required=True, help="output prefix")
    p.set_defaults(handler=cmd_dp)

    p = kinds.add_parser(
        "moe",
        help="mixture-of-experts training step(s): expert-parallel all-to-alls, dense all-reduces of several sizes",
    )
    p.add_argument("--npus", required=True, type=int)
    p.add_argument("--ep-size", required=True, type=int, help="ranks per expert-parallel group (divides --npus)")
    p.add_argument("--layers", required=True, type=int)
    p.add_argument("--token-size", required=True, help="all-to-all bytes per rank and exchange, e.g. '4 MiB'")
    p.add_argument(
        "--dense-grad-sizes",
        required=True,
        help="dense-gradient all-reduces per layer over all ranks, comma-separated, e.g. '64 KiB,16 MiB'",
    )
    p.add_argument("--expert-grad-size", default="0", help="expert-gradient all-reduce per layer (default 0: none)")
    p.add_argument("--attn-us", type=int, default=50, help="attention compute per layer, µs (backward: twice)")
    p.add_argument("--expert-us", type=int, default=100, help="expert compute per layer, µs (backward: twice)")
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("-o", "--output", required=True, help="output prefix")
    p.set_defaults(handler=cmd_moe)


def _write(traces: list, prefix: str) -> int:  # type: ignore[type-arg]
    paths = write_workload(traces, prefix)
    print(f"wrote {len(paths)} file(s): {paths[0]} … {paths[-1]}" if len(paths) > 1 else f"wrote {paths[0]}")
    return 0


def _positive(value: int, flag: str) -> int:
    if value < 1:
        raise ConfigError(f"{flag} must be >= 1, got {value}")
    return value


def _npus(value: int) -> int:
    """``--npus``: at least 1, at most what a topology may hold (more could be written but never simulated)."""
    from etsim.network.topology import MAX_NPUS

    if value > MAX_NPUS:
        raise ConfigError(f"--npus {value:,}: larger than etsim's limit of {MAX_NPUS:,} NPUs per topology")
    return _positive(value, "--npus")


def cmd_collective(args: argparse.Namespace) -> int:
    """Write a collective microbenchmark."""
    size = parse_size(args.size, key="--size", default_unit="B")
    traces = collective_workload(
        _COLLECTIVES[args.type],
        size,
        _npus(args.npus),
        count=_positive(args.count, "--count"),
        pg_name=args.pg_name,
    )
    return _write(traces, args.output)


def cmd_sendrecv(args: argparse.Namespace) -> int:
    """Write a ring send/receive microbenchmark."""
    npus = _npus(args.npus)
    if npus < 2:
        raise ConfigError("--npus must be >= 2 for send/receive")
    return _write(ring_sendrecv_workload(parse_size(args.size, key="--size", default_unit="B"), npus), args.output)


def cmd_dp(args: argparse.Namespace) -> int:
    """Write a data-parallel training workload."""
    for flag, value in (("--fwd-us", args.fwd_us), ("--bwd-us", args.bwd_us), ("--wg-us", args.wg_us or 0)):
        if value < 0:
            raise ConfigError(f"{flag} must be >= 0, got {value}")
    traces = data_parallel_workload(
        _npus(args.npus),
        layers=_positive(args.layers, "--layers"),
        grad_bytes=parse_size(args.grad_size, key="--grad-size", default_unit="B"),
        fwd_micros=args.fwd_us,
        bwd_micros=args.bwd_us,
        wg_micros=args.wg_us,
        iterations=_positive(args.iterations, "--iterations"),
    )
    return _write(traces, args.output)


def cmd_moe(args: argparse.Namespace) -> int:
    """Write a mixture-of-experts training workload."""
    for flag, value in (("--attn-us", args.attn_us), ("--expert-us", args.expert_us)):
        if value < 0:
            raise ConfigError(f"{flag} must be >= 0, got {value}")
    npus = _npus(args.npus)
    ep = _positive(args.ep_size, "--ep-size")
    if npus % ep:
        raise ConfigError(f"--ep-size {ep} must divide --npus {npus}")
    dense = [
        parse_size(v.strip(), key="--dense-grad-sizes", default_unit="B") for v in args.dense_grad_sizes.split(",")
    ]
    traces = moe_workload(
        npus,
        ep_size=ep,
        layers=_positive(args.layers, "--layers"),
        token_bytes=parse_size(args.token_size, key="--token-size", default_unit="B"),
        dense_grad_bytes=dense,
        expert_grad_bytes=parse_size(args.expert_grad_size, key="--expert-grad-size", default_unit="B"),
        attn_micros=args.attn_us,
        expert_micros=args.expert_us,
        iterations=_positive(args.iterations, "--iterations"),
    )
    return _write(traces, args.output)
