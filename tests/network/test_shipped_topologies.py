from pathlib import Path

import pytest

from etsim.network import load_network

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
FILES = sorted(TOPOLOGIES.glob("*.yaml"))


def test_there_are_shipped_topologies():
    assert len(FILES) >= 20
    sizes = {load_network(f).topology.npus for f in FILES}
    assert {8, 16, 64, 1024} <= sizes


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_shipped_file_loads(path):
    config = load_network(path)
    topo = config.topology
    assert topo.npus >= 8
    assert topo.source == str(path)
    assert topo.name == path.stem
    assert len(topo.links) == topo.graph.number_of_edges()
    bisection, _ = topo.bisection_bandwidth()
    assert bisection > 0
    assert topo.diameter() >= 1
    assert path.name in (TOPOLOGIES / "README.md").read_text(), f"{path.name} is not described in topologies/README.md"
