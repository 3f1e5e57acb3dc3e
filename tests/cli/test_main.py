"""The command-line entry point: the command table and lazy sub-command imports."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from etsim.cli import COMMAND_MODULES, COMMANDS, build_parser


def test_command_table_names_what_each_module_registers():
    """COMMANDS must list exactly the sub-commands each module registers (it is used without importing them)."""
    registered: dict[str, str] = {}
    for module in COMMAND_MODULES:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(module).register(sub)
        registered.update(dict.fromkeys(sub.choices, module))
    assert registered == COMMANDS


def test_full_parser_has_every_command():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)


def test_a_run_imports_no_other_command_and_no_heavy_optional_module(tmp_path):
    """`etsim WORKLOAD` imports neither the heavy sub-commands nor numpy, networkx, lxml or matplotlib."""
    code = (
        "import sys; from etsim.cli import main; "
        "rc = main(['workloads/allreduce_8npus_1MiB.et', '--quiet']); "
        "heavy = sorted(m for m in ('numpy', 'networkx', 'lxml', 'matplotlib', 'ray', 'etsim.tuning', "
        "'etsim.producers.tacos.synthesis', 'etsim.producers.msccl.parse', 'etsim.experiment') if m in sys.modules); "
        "print(rc, heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=_root())
    assert out.stdout.strip().splitlines()[-1] == "0 []", out.stdout + out.stderr  # (-q prints the finish time)


def _root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2])
