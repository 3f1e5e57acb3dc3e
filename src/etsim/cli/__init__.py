"""The ``etsim`` command line.

Each sub-command lives in a module of this package exposing ``register(subparsers)``; the
registered handler receives the parsed arguments and returns an exit code. Errors of type
:class:`~etsim.errors.EtsimError` are printed as one ``etsim: error: …`` line with exit code 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from etsim.errors import EtsimError

__all__ = ["build_parser", "main"]

#: Sub-command modules, in the order they appear in ``etsim --help``.
COMMAND_MODULES = ("run", "trace", "workload", "algo", "topology", "convert", "astra", "synth", "experiment")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="etsim",
        description="Simulate distributed ML systems from Chakra execution traces.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"etsim.cli.{name}").register(subparsers)
    return parser


def _command_names(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `etsim WORKLOAD …` means `etsim run WORKLOAD …`.
    commands = _command_names(parser)
    if argv and not argv[0].startswith("-") and argv[0] not in commands:
        argv.insert(0, "run")
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except EtsimError as exc:
        print(f"etsim: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("etsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
