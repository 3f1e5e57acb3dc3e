"""``etsim workload gen KIND …``: write runnable workloads, one sub-command per registered generator."""

from __future__ import annotations

import argparse
import json
import os

from etsim.chakra.io import write_workload
from etsim.files import write_text
from etsim.options import add_arguments, arguments_given, flag_name, plain_help
from etsim.producers.workloads.base import WORKLOAD_GENERATORS, parse

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``workload gen`` to the ``etsim`` parser: a KIND per generator, its flags from its parameters."""
    workload = subparsers.add_parser("workload", help="generate workloads")
    sub = workload.add_subparsers(dest="workload_command", metavar="ACTION")
    sub.required = True
    gen = sub.add_parser("gen", help="write a generated workload as PREFIX.<rank>.et")
    kinds = gen.add_subparsers(dest="kind", metavar="KIND")
    kinds.required = True
    for name, generator in WORKLOAD_GENERATORS.items():
        if name.startswith("etsim-test-"):
            continue
        p = kinds.add_parser(name, help=generator.summary, description=plain_help((generator.__doc__ or "").strip()))
        add_arguments(p, generator.Options)
        p.add_argument("-o", "--output", required=True, help="output prefix")
        p.set_defaults(handler=cmd_gen)


def cmd_gen(args: argparse.Namespace) -> int:
    """Generate the workload the parameters describe and write one file per rank."""
    cls = WORKLOAD_GENERATORS.get(args.kind)
    generator, options = parse(args.kind, arguments_given(args, cls.Options), key=flag_name, text=True)
    paths = write_workload(generator.generate(options), args.output)
    print(f"wrote {len(paths)} file(s): {paths[0]} … {paths[-1]}" if len(paths) > 1 else f"wrote {paths[0]}")
    groups = generator.comm_groups(options)
    path = f"{args.output}.comm_groups.json"
    if groups:
        write_text(path, json.dumps(groups) + "\n")
        print(f"wrote {path} ({len(groups)} communicator groups, the comm-group JSON other simulators read)")
    elif os.path.exists(path):  # (an earlier family's groups are not this one's)
        os.remove(path)
    return 0
