"""The command-line entry point: the command table and lazy sub-command imports."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys

import pytest

from etsim.cli import COMMAND_MODULES, COMMANDS, build_parser, main


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


def test_the_command_exits_without_teardown_but_with_everything_written(tmp_path, capsys):
    """``python -m etsim`` ends with os._exit once output is flushed and atexit handlers ran: the same output,
    files and exit codes as main() in process, and an atexit handler of the run still runs."""
    from etsim.cli import main

    args = ["run", "workloads/allreduce_8npus_1MiB.et", "--json", str(tmp_path / "a.json")]
    assert main(args) == 0
    expected = capsys.readouterr().out
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import atexit, pathlib, runpy, sys\n"
        f"atexit.register(lambda: pathlib.Path({str(tmp_path / 'ran')!r}).write_text('yes'))\n"
        "sys.argv = ['etsim', *sys.argv[1:]]\n"
        "runpy.run_module('etsim', run_name='__main__')\n"
    )
    args[-1] = str(tmp_path / "b.json")
    done = subprocess.run([sys.executable, str(hook), *args], capture_output=True, text=True, check=False)

    def timeless(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("simulated in")]

    assert done.returncode == 0 and timeless(done.stdout) == timeless(expected)
    assert (
        json.loads((tmp_path / "b.json").read_text())["finish_ns"]
        == json.loads((tmp_path / "a.json").read_text())["finish_ns"]
    )
    assert (tmp_path / "ran").read_text() == "yes"
    bad = subprocess.run([sys.executable, "-m", "etsim", "run", str(tmp_path / "missing")], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert bad.returncode == 1 and "no such file" in bad.stderr


@pytest.mark.parametrize(("environment", "advised"), [(None, "False"), ("1", "True")])
def test_the_command_turns_numpys_huge_page_advice_off_unless_told(tmp_path, environment, advised):
    """Large temporaries stall in the kernel's on-demand compaction when numpy advises huge pages (see console)."""
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import atexit, pathlib, runpy, sys\n"
        "def state():\n"
        "    from numpy._core.multiarray import _set_madvise_hugepage\n"
        f"    pathlib.Path({str(tmp_path / 'state')!r}).write_text(str(_set_madvise_hugepage(False)))\n"
        "atexit.register(state)\n"
        "sys.argv = ['etsim', 'run', 'workloads/allreduce_8npus_1MiB.et', '-q']\n"
        "runpy.run_module('etsim', run_name='__main__')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if environment is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = environment
    done = subprocess.run(
        [sys.executable, str(hook)], capture_output=True, text=True, check=False, cwd=_root(), env=env
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "state").read_text() == advised


def test_help_shows_no_sphinx_markup(capsys: pytest.CaptureFixture[str]) -> None:
    from etsim.producers.workloads.base import WORKLOAD_GENERATORS

    for name in WORKLOAD_GENERATORS.names():
        with pytest.raises(SystemExit):
            main(["workload", "gen", name, "--help"])
        out = capsys.readouterr().out
        assert ":mod:" not in out and ":class:" not in out and ":func:" not in out and "``" not in out, name


def test_a_ctrl_c_that_lands_in_a_callback_still_interrupts_the_command() -> None:
    """A KeyboardInterrupt raised inside a weak-reference callback (where imports take their module locks) cannot
    propagate: the interpreter printed a traceback and the command ran on. Under `etsim` it is delivered again."""
    code = (
        "import sys, weakref\n"
        "from etsim.cli import _keep_interrupts\n"
        "sys.unraisablehook = _keep_interrupts if sys.argv[1] == 'etsim' else sys.unraisablehook\n"
        "class Held: pass\n"
        "def swallowed(ref): raise KeyboardInterrupt\n"
        "held = Held(); ref = weakref.ref(held, swallowed)\n"
        "import time; deadline = time.monotonic() + 3\n"
        "try:\n"
        "    del held\n"
        "    while time.monotonic() < deadline: pass\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "else:\n"
        "    print('ran on')\n"
    )
    for hook, expected in (("etsim", "interrupted"), ("python", "ran on")):
        done = subprocess.run([sys.executable, "-c", code, hook], capture_output=True, text=True, timeout=60)
        assert done.stdout.strip() == expected, (hook, done.stdout, done.stderr)
        assert ("Traceback" in done.stderr) == (hook == "python")


def test_a_ctrl_c_while_a_module_defines_a_dataclass_is_an_interrupt_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python 3.11 wraps an exception from a class attribute's ``__set_name__`` in RuntimeError (``from`` it): a Ctrl-C
    that landed while a command's imports defined a dataclass ended the command with that RuntimeError's traceback.
    """
    import etsim.cli

    def importing(argv: object) -> int:
        raise RuntimeError("Error calling __set_name__ on 'Field' instance 'hops' in 'LinkGraph'") from (
            KeyboardInterrupt()
        )

    monkeypatch.setattr(etsim.cli, "_main", importing)
    assert main([]) == 130
    assert capsys.readouterr().err.strip() == "etsim: interrupted"
    monkeypatch.setattr(etsim.cli, "_main", lambda argv: (_ for _ in ()).throw(RuntimeError("other")))
    with pytest.raises(RuntimeError, match="other"):
        main([])


def test_a_mistyped_command_is_named_not_taken_for_a_missing_workload(tmp_path, capsys, monkeypatch):
    """`etsim valdate w` said 'unrecognized arguments: w' (valdate was taken for a workload); a word close to a
    command that names no file says which command was meant. A workload of such a name still runs."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["valdate", "w.et"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "'valdate' is not a command" in err and "`etsim validate`" in err
    from etsim.chakra import CollectiveType, write_workload
    from etsim.producers import collective_workload

    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4), tmp_path / "valdate")
    assert main(["valdate", "--quiet"]) == 0  # (the family valdate.0.et … is a workload: it runs)
    assert main(["nothing_close"]) == 1  # (no command near it: the missing workload's own error)
    assert "workload 'nothing_close': no such file" in capsys.readouterr().err
