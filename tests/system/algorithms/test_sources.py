"""Algorithm sources: the registry that turns an ``--algo`` value into an algorithm, open to plug-ins."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from etsim.chakra import CollectiveType, Workload
from etsim.errors import ConfigError
from etsim.network import ring
from etsim.producers import collective_workload
from etsim.producers.msccl.source import MscclAlgorithm
from etsim.simulation import simulate
from etsim.system.algorithms import SOURCES, AlgorithmContext, ChakraAlgorithm, resolve_algorithm
from etsim.system.algorithms.ring import RingAlgorithm
from etsim.system.config import SystemConfig

PLUGIN = '''
"""A third-party algorithm format: a ring all-reduce described in JSON."""
import json

from etsim.algo.graph import AlgorithmBuilder
from etsim.chakra.graph import CollectiveType
from etsim.system.algorithms import AlgorithmSource, CollectiveAlgorithm


class JsonRing(CollectiveAlgorithm):
    name = "json-ring"
    source = "json"
    collectives = frozenset({CollectiveType.ALL_REDUCE})

    def __init__(self, npus):
        self.npus = npus

    def supports(self, collective, group_size):
        return None if group_size == self.npus else f"written for {self.npus} ranks"

    def graph(self, collective, group_size, position):
        p = group_size
        b = AlgorithmBuilder(total_chunks=p, relative_peers=True)
        last = []
        for step in range(2 * (p - 1)):
            s = b.send(1, 1, 0, deps=last + ([] if step == 0 else [prev_send]))
            prev_send = s
            r = b.recv(-1, 1, 0, deps=[] if step == 0 else [prev_recv])
            prev_recv = r
            last = [b.reduce(1, deps=[r, *last])] if step < p - 1 else [r]
        return b.build()


class JsonSource(AlgorithmSource):
    name = "json"
    priority = 40

    def claims(self, spec):
        return spec.endswith(".algo.json")

    def load(self, spec, context):
        with open(context.path(spec)) as f:
            return JsonRing(json.load(f)["npus"])
'''


@pytest.fixture
def json_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Install a plug-in distribution on sys.path with an ``etsim.algorithm_sources`` entry point."""
    (tmp_path / "json_algo_plugin.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "json_algo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: json-algo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[etsim.algorithm_sources]\njson = json_algo_plugin:JsonSource\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    SOURCES.reload_entry_points()
    yield tmp_path
    monkeypatch.undo()
    SOURCES.reload_entry_points()


def test_a_third_party_source_plugs_in_through_its_entry_point(json_plugin: Path) -> None:
    assert "json" in SOURCES.names()
    (json_plugin / "ring8.algo.json").write_text(json.dumps({"npus": 8}))
    label, algo = resolve_algorithm("ring8.algo.json", AlgorithmContext(base_dir=str(json_plugin)))
    assert algo.source == "json" and label == "ring8.algo.json"
    workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 8))
    topo = ring(8, 50.0, 500.0)
    plugin = simulate(
        workload, topology=topo, system=SystemConfig(algorithms={"default": str(json_plugin / "ring8.algo.json")})
    )
    native = simulate(workload, topology=topo, system=SystemConfig(algorithms={"default": "ring"}))
    assert plugin.finish_ns == native.finish_ns
    assert plugin.collectives[0].algorithm.endswith("ring8.algo.json")


def test_sources_are_asked_in_priority_order(repo: Path, corpus: Path) -> None:
    context = AlgorithmContext(base_dir=str(repo))
    assert isinstance(resolve_algorithm("ring", context)[1], RingAlgorithm)
    xml = next((corpus / "msccl").rglob("*.xml"))
    assert isinstance(resolve_algorithm(str(xml), context)[1], MscclAlgorithm)
    assert isinstance(resolve_algorithm("algorithms/ring_allreduce_8npus", context)[1], ChakraAlgorithm)


def test_an_unknown_spec_names_the_algorithms_and_the_family_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--algo 'nosuch' is neither an algorithm name \(.*ring.*\) nor a Chakra ET"):
        resolve_algorithm("nosuch", AlgorithmContext(base_dir=str(tmp_path)))
