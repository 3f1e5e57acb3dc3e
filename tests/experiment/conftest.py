"""Fixtures for experiment tests: experiment files and a misbehaving network model, written in code."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RING8 = "kind: ring\nnpus: 8\nbandwidth: 50 GB/s\nlatency: 500 ns\n"
SWITCH8 = "kind: switch\nnpus: 8\nbandwidth: 50 GB/s\nlatency: 500 ns\n"

# A model that misbehaves on request: it fails (a clean EtsimError) unless a marker file exists, or kills the
# process running it. Loaded by file path, as a user's own model would be.
TROUBLE_MODEL = """
import os
import warnings
from dataclasses import dataclass

from etsim.errors import SimulationError
from etsim.network import IdealNetwork, option


def _text(value, *, key):
    return str(value)


class Trouble(IdealNetwork):
    name = "trouble"

    @dataclass(frozen=True, kw_only=True)
    class Options(IdealNetwork.Options):
        crash: str = option("", "exit the process with this message", _text)
        needs: str = option("", "fail unless this file exists", _text)
        bug: str = option("", "raise an unexpected exception", _text)
        warn: str = option("", "warn with this message", _text)

    def setup(self):
        if self.options.crash:
            os._exit(3)
        if self.options.bug:
            raise ZeroDivisionError(self.options.bug)
        if self.options.warn:
            warnings.warn(self.options.warn, UserWarning, stacklevel=1)
        if self.options.needs and not os.path.exists(self.options.needs):
            raise SimulationError(f"trouble: {self.options.needs} is missing")
"""


@pytest.fixture
def write(tmp_path: Path):
    """write(name, text) -> path: a dedented file in tmp_path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    return _write


@pytest.fixture
def small(write) -> Path:
    """A 6-point experiment on 8 NPUs: size x algo, with a plot."""
    write("ring8.yaml", RING8)
    write("switch8.yaml", SWITCH8)
    return write(
        "small.yaml",
        """
        name: small
        workload: {generate: collective, type: all_reduce, npus: 8, size: 1 MiB}
        topology: ring8.yaml
        model: analytical
        sweep:
          size: [1 KiB, 1 MiB, 64 MiB]
          algo: [ring, direct]
        plots:
          - {name: speed, x: size, y: finish_ns, series: algo, baseline: ring}
        """,
    )


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def without_wall(directory: Path) -> tuple[str, list[dict]]:
    """results.csv without its wall_s column and results.jsonl without wall-clock fields."""
    data = list(csv.reader(io.StringIO((directory / "results.csv").read_text())))
    col = data[0].index("wall_s")
    text = "\n".join(",".join(r[:col] + r[col + 1 :]) for r in data)
    reports = []
    for line in (directory / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        record.pop("wall_s")
        if record["result"]:
            record["result"]["sim"].pop("wall_s")
        reports.append(record)
    return text, reports
