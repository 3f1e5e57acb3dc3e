"""The ``etsim`` command line.

Each sub-command lives in a module exposing ``register(subparsers)``, listed in :data:`COMMANDS` (sub-command
name → module; :data:`COMMAND_MODULES` is derived from it); the registered handler receives the parsed
arguments and returns an exit code. Errors of type :class:`~etsim.errors.EtsimError` are printed as one
``etsim: error: …`` line with exit code 1.

An error's first line says what is wrong on its own; an error of more lines (a deadlock report, say) shows
:data:`ERROR_LINES` of them and how many more ``--verbose`` (accepted anywhere on the line) prints.

Plug-ins named as import paths (``package.module:Class``, ``file.py:Class``) load only when the user allows it:
``--allow-plugins`` anywhere on the line allows every one, and a name the user typed on the command line (a
flag's value, ``KEY=NAME`` or a comma-separated list item) is allowed by being typed; a name that only a file
gives is refused (see :func:`etsim.registry.plugins_allowed`).
"""

from __future__ import annotations

import _thread
import argparse
import atexit
import contextlib
import difflib
import glob
import importlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from etsim import __version__, progress
from etsim.errors import EtsimError, EtsimWarning
from etsim.registry import allowing_plugins

__all__ = ["ERROR_LINES", "build_parser", "console", "main"]

#: Lines of an error message printed without ``--verbose``.
ERROR_LINES = 3

#: Seconds after which a Ctrl-C swallowed by a callback is raised again (:func:`_keep_interrupts`).
REDELIVERY_S = 0.01

#: Sub-command name → the module that registers it, in the order of ``etsim --help``. Only the module of
#: the command being run is imported, so a run does not pay for every other command's imports.
COMMANDS = {
    "run": "etsim.cli.run",
    "report": "etsim.cli.report",
    "plot": "etsim.cli.report",
    "inspect": "etsim.cli.trace",
    "validate": "etsim.cli.trace",
    "jsonize": "etsim.cli.trace",
    "visualize": "etsim.cli.trace",
    "workload": "etsim.cli.workload",
    "algo": "etsim.cli.algo",
    "topology": "etsim.cli.topology",
    "convert": "etsim.cli.convert",
    "astra": "etsim.compat.cli",
    "synth": "etsim.cli.synth",
    "experiment": "etsim.cli.experiment",
    "cluster": "etsim.cli.cluster",
    "tune": "etsim.cli.tune",
    "optimise": "etsim.cli.optimise",
}

#: Sub-command modules, in the order they appear in ``etsim --help``.
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser with every sub-command registered (or only *command*'s module)."""
    parser = argparse.ArgumentParser(
        prog="etsim",
        description="Simulate distributed ML systems from Chakra execution traces.",
    )
    parser.add_argument("--version", action="version", version=f"etsim {__version__}")
    parser.add_argument(
        "--verbose", action="store_true", help="print errors in full (a deadlock report, say); accepted anywhere"
    )
    parser.add_argument(
        "--allow-plugins",
        action="store_true",
        help="let files name plug-ins to import (module:Class, file.py:Class); accepted anywhere on the line. "
        "Without it only plug-ins named on the command line or installed as entry points load",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES if command is None else (COMMANDS[command],):
        importlib.import_module(name).register(subparsers)
    return parser


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
    progress.clear()


def console() -> NoReturn:
    """The ``etsim`` command (and ``python -m etsim``): :func:`main`, then exit without tearing the interpreter down.

    A large run leaves millions of objects behind (a family's graphs, the caches that keep them) that the
    interpreter would free one by one as it exits: 0.6 s for a family of two million nodes. Once the output is
    flushed and the exit handlers have run (``atexit``: logging, multiprocessing, coverage), the process ends
    instead. Every file etsim writes is closed by then (``with`` blocks).

    Before numpy is imported, it is told not to ask for transparent huge pages (``NUMPY_MADVISE_HUGEPAGE=0``,
    unless the environment says otherwise). Where the kernel compacts memory on demand for regions that ask
    (``defrag: madvise``, a common default), every large temporary array numpy makes and frees can stall in that
    compaction: the union pass over a family of two million nodes took 0.3–0.5 s longer with them.
    """
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    sys.unraisablehook = _keep_interrupts
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # (a closed pipe: what could be written was)
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(code)


def _keep_interrupts(unraisable: Any) -> None:
    """``sys.unraisablehook``: a Ctrl-C that landed in a callback the interpreter cannot raise from is delivered again.

    Python raises KeyboardInterrupt in whatever code runs when the signal arrives: inside a weak-reference
    callback (the import system's module locks use them) it cannot propagate, so the interpreter printed
    "Exception ignored … KeyboardInterrupt" with a traceback and the command went on as if never interrupted.
    Here the interrupt is raised again a moment later (:data:`REDELIVERY_S`, from a timer thread: raised from
    this hook, it would be swallowed the same way), in the code running then; other unraisable errors are
    printed as before.
    """
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            timer = threading.Timer(REDELIVERY_S, _thread.interrupt_main, (signal.SIGINT,))
            timer.daemon = True
            timer.start()
        return  # (under another handler, that handler has seen the signal already)
    sys.__unraisablehook__(unraisable)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # at any moment, a command's imports included
        return _interrupted(exc)
    except RuntimeError as exc:
        # Python 3.11 wraps what a class attribute's __set_name__ raises in a RuntimeError: a Ctrl-C that lands
        # while an imported module defines a dataclass arrives so.
        if isinstance(exc.__cause__, KeyboardInterrupt):
            return _interrupted(exc.__cause__)
        raise


def _interrupted(exc: KeyboardInterrupt) -> int:
    signum = getattr(exc, "signum", signal.SIGINT)
    print("etsim: interrupted" if signum == signal.SIGINT else "etsim: terminated", file=sys.stderr)
    return 128 + int(signum)


def _typed_names(argv: Sequence[str]) -> set[str]:
    """Every plug-in name typed on the line: each argument, its value after ``=``, its comma-separated items."""
    names: set[str] = set()
    for arg in argv:
        for part in (arg, arg.partition("=")[2]):
            names.add(part)
            names.update(part.split(","))
    return {name for name in names if ":" in name and ";" not in name}


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    end = argv.index("--") if "--" in argv else len(argv)
    allow_all = "--allow-plugins" in argv[:end]
    verbose = "--verbose" in argv[:end]
    argv = [a for i, a in enumerate(argv) if i >= end or a not in ("--allow-plugins", "--verbose")]
    with allowing_plugins(None if allow_all else _typed_names(argv)):
        return _run_parsed(argv, verbose)


def _error_text(message: str, verbose: bool) -> str:
    """*message* as printed: whole with *verbose*, else its first :data:`ERROR_LINES` lines and what was left out."""
    lines = message.splitlines() or [""]
    if verbose or len(lines) <= ERROR_LINES:
        return message
    kept = "\n".join(lines[:ERROR_LINES])
    return f"{kept}\n  ... {len(lines) - ERROR_LINES} more lines: add --verbose to see them"


def _refuse_mistyped_command(word: str) -> None:
    """Exit 2 when *word*, taken for a workload, is no file but is close to a command's name (``valdate``)."""
    if os.path.exists(word) or glob.glob(glob.escape(word) + ".*"):
        return
    near = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.75)
    if near:
        print(
            f"etsim: error: {word!r} is not a command (did you mean `etsim {near[0]}`?) and no workload of that "
            f"name exists (`etsim run {word}` runs one)",
            file=sys.stderr,
        )
        raise SystemExit(2)


def _run_parsed(argv: list[str], verbose: bool = False) -> int:
    if argv and not argv[0].startswith("-"):
        # `etsim WORKLOAD …` means `etsim run WORKLOAD …`.
        if argv[0] not in COMMANDS:
            _refuse_mistyped_command(argv[0])
            argv.insert(0, "run")
        parser = build_parser(argv[0])
    else:
        parser = build_parser()
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        # etsim's warnings are one line each on stderr, whatever the interpreter's filters say.
        warnings.simplefilter("always", EtsimWarning)
        warnings.showwarning = _show_warning
        try:
            # Long jobs show their progress on stderr (after a few seconds; not with -q).
            with progress.shown_on(None if getattr(args, "quiet", False) else sys.stderr):
                return int(args.handler(args) or 0)
        except EtsimError as exc:
            _clear_progress()
            print(f"etsim: error: {_error_text(str(exc), verbose)}", file=sys.stderr)
            return 1
        except BrokenPipeError:
            return 0
