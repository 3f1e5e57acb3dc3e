"""The recipes of docs/design.md, followed: each plug-in kind is one new file, and etsim uses it everywhere.

One plug-in module defines a workload generator, a topology kind, a network model with its bulk timing and an
experiment engine; a distribution's ``entry_points.txt`` publishes them (what a third-party package does; a
built-in is the same class in one new module of ``producers/workloads``, ``network/kinds``, ``network/models``
or ``experiment/engines``, which the registries import on their own). Nothing else in etsim changes.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from etsim.cli import main
from etsim.experiment.engines import ENGINES
from etsim.network.builders import TOPOLOGY_BUILDERS
from etsim.network.model import NETWORK_MODELS
from etsim.producers.workloads import WORKLOAD_GENERATORS

PLUGIN = '''
"""One file: a generator, a topology kind, a network model with bulk timing, an experiment engine."""

from dataclasses import dataclass

from etsim.chakra import CollectiveType, TraceBuilder
from etsim.experiment.engines import ExperimentEngine
from etsim.experiment.worker import run_point
from etsim.network.builders import TopologyBuilder, int_value, link_params, require
from etsim.network.bulk import BulkTiming
from etsim.network.model import NetworkModel
from etsim.network.topology import Dim, product
from etsim.options import Bandwidth, Integer, Size, Time, option
from etsim.producers.workloads import WorkloadGenerator
from etsim.producers.workloads.base import Npus
from etsim.workers import check_stop


class BurstGenerator(WorkloadGenerator):
    """``count`` all-to-alls of ``size`` bytes, back to back."""

    summary = "back-to-back all-to-alls"

    @dataclass(frozen=True, kw_only=True)
    class Options(WorkloadGenerator.Options):
        npus: int = option(help="ranks", parse=Npus())
        size: int = option(help="bytes per all-to-all", parse=Size())
        count: int = option(2, "all-to-alls", Integer(1))

    def generate(self, options):
        traces = []
        for rank in range(options.npus):
            b = TraceBuilder()
            prev = []
            for _ in range(options.count):
                prev = [b.collective(CollectiveType.ALL_TO_ALL, options.size, deps=prev)]
            traces.append(b.build(rank=rank))
        return traces


class ChainBuilder(TopologyBuilder):
    """``kind: chain``: NPUs on a line (a one-dimensional mesh)."""

    keys = frozenset({"npus", "bandwidth", "latency"})

    def build(self, data, name):
        bandwidth, latency = link_params(data)
        return product([Dim("line", int_value(require(data, "npus"), "npus"), bandwidth, latency)], name=name)


class FlatNetwork(NetworkModel):
    """Every message between two NPUs takes ``delay + size / bandwidth``: a crossbar without contention."""

    summary = "delay + size / bandwidth per message"
    congestion_aware = False

    @dataclass(frozen=True, kw_only=True)
    class Options(NetworkModel.Options):
        delay: float = option(100.0, "per message", Time(bare_unit="ns"))
        bandwidth: float = option(25.0, "per message", Bandwidth())

    def transfer(self, src, dst, size):
        if src == dst:
            return self.env.timeout(0)
        return self.env.timeout(self.options.delay + size / self.options.bandwidth)

    def bulk_timing(self):
        return FlatTiming(self)


class FlatTiming(BulkTiming):
    """The same floats as the event path: ``(t + after) + (delay + size / bandwidth)``."""

    def __init__(self, model):
        self.delay, self.bandwidth = model.options.delay, model.options.bandwidth

    def send(self, src, dst, size, t, after, cause):
        import numpy as np

        start = t + after if after > 0 else t
        return start + np.where(src == dst, 0.0, self.delay + size / self.bandwidth)


class SerialEngine(ExperimentEngine):
    """Every point in this process, in order."""

    summary = "this process, one point after another"

    def in_process(self, tasks):
        return True

    def run(self, tasks, on_outcome):
        for task in tasks:
            check_stop()
            on_outcome(run_point(task))
'''

ENTRY_POINTS = """
[etsim.workload_generators]
burst = etsim_recipe_plugin:BurstGenerator
[etsim.topology_kinds]
chain = etsim_recipe_plugin:ChainBuilder
[etsim.network_models]
flat = etsim_recipe_plugin:FlatNetwork
[etsim.experiment_engines]
serial = etsim_recipe_plugin:SerialEngine
"""

REGISTRIES = (WORKLOAD_GENERATORS, TOPOLOGY_BUILDERS, NETWORK_MODELS, ENGINES)


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The plug-in file and its distribution's metadata on sys.path."""
    (tmp_path / "etsim_recipe_plugin.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "etsim_recipe_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: etsim-recipe-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    for registry in REGISTRIES:
        registry.reload_entry_points()
    yield tmp_path
    monkeypatch.undo()
    for registry in REGISTRIES:
        registry.reload_entry_points()


def test_the_plug_ins_are_listed_by_their_registries(plugin: Path) -> None:
    assert "burst" in WORKLOAD_GENERATORS.names() and "chain" in TOPOLOGY_BUILDERS.names()
    assert "flat (delay + size / bandwidth per message)" in NETWORK_MODELS.describe()
    assert "serial" in ENGINES.names()


def test_a_generator_kind_model_and_engine_from_one_file_run_everywhere(
    plugin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The generator is an `etsim workload gen` kind, with flags from its declared parameters.
    # (64 ranks: large enough for the fast path, which leaves small collectives on the event path.)
    assert main(["workload", "gen", "burst", "--npus", "64", "--size", "64 KiB", "-o", str(plugin / "w")]) == 0
    # The topology kind and the model run it; the model's bulk timing gives the event path's result exactly.
    (plugin / "chain.yaml").write_text("kind: chain\nnpus: 64\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    args = [str(plugin / "w"), "--topology", str(plugin / "chain.yaml"), "--model", "flat", "--algo", "direct"]
    assert main(["run", *args, "--json", str(plugin / "fast.json"), "-q"]) == 0
    assert main(["run", *args, "--json", str(plugin / "slow.json"), "--no-fast-path", "-q"]) == 0
    fast, slow = (json.loads((plugin / f"{n}.json").read_text()) for n in ("fast", "slow"))
    assert fast["sim"]["bulk_parts"] > 0 and slow["sim"]["bulk_parts"] == 0
    for result in (fast, slow):
        del result["sim"]
    assert fast == slow
    # Each all-to-all sends a piece of 1 KiB to each other rank directly: delay + piece / bandwidth, twice.
    assert fast["finish_ns"] == pytest.approx(2 * (100.0 + 1024 / 25.0))
    # The engine runs an experiment, and every piece is a sweep axis there too.
    experiment = plugin / "e.yaml"
    experiment.write_text(
        "workload: {generate: burst, npus: 64, size: 64 KiB}\ntopology: chain.yaml\nmodel: flat\nalgo: direct\n"
        "sweep: {count: [1, 2], model_options.delay: [100 ns, 1 us]}\n"
    )
    out = plugin / "results"
    assert main(["experiment", "run", str(experiment), "--engine", "serial", "--out", str(out), "-q"]) == 0
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 5 and all(",ok," in row for row in rows[1:])
