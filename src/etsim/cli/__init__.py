"""The ``etsim`` command line.

Each sub-command lives in a module exposing ``register(subparsers)`` (listed in
:data:`COMMAND_MODULES`); the registered handler receives the parsed arguments and returns an exit
code. Errors of type :class:`~etsim.errors.EtsimError` are printed as one ``etsim: error: …`` line
with exit code 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from etsim import __version__
from etsim.errors import EtsimError, EtsimWarning

__all__ = ["build_parser", "main"]

#: Sub-command modules, in the order they appear in ``etsim --help``.
COMMAND_MODULES = (
    "etsim.cli.run",
    "etsim.cli.report",
    "etsim.cli.trace",
    "etsim.cli.workload",
    "etsim.cli.algo",
    "etsim.cli.topology",
    "etsim.cli.convert",
    "etsim.compat.cli",
    "etsim.cli.synth",
    "etsim.cli.experiment",
    "etsim.cli.tune",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="etsim",
        description="Simulate distributed ML systems from Chakra execution traces.",
    )
    parser.add_argument("--version", action="version", version=f"etsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def _command_names(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def _show_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    if issubclass(category, EtsimWarning):
        _clear_progress()
        print(f"etsim: warning: {message}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _clear_progress() -> None:
    """Erase a progress line on a terminal before a message, so the two do not share a line."""
    if sys.stderr.isatty():
        sys.stderr.write("\r" + " " * 78 + "\r")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `etsim WORKLOAD …` means `etsim run WORKLOAD …`.
    commands = _command_names(parser)
    if argv and not argv[0].startswith("-") and argv[0] not in commands:
        argv.insert(0, "run")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        # etsim's warnings are one line each on stderr, whatever the interpreter's filters say.
        warnings.simplefilter("always", EtsimWarning)
        warnings.showwarning = _show_warning
        try:
            return int(args.handler(args) or 0)
        except EtsimError as exc:
            _clear_progress()
            print(f"etsim: error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("etsim: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            return 0
