"""The public API: what ``etsim`` exports, that each name is what it says, and a run through it alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import etsim

EXPORTED = {
    # running
    "simulate", "Simulation", "Reports", "Result",
    # workloads
    "load_workload", "write_workload", "Workload", "Trace", "TraceBuilder", "CollectiveType", "generate",
    # networks
    "Topology", "load_topology", "load_network", "NetworkConfig", "NetworkModel",
    # systems
    "SystemConfig", "load_system_config", "CollectiveAlgorithm",
    # plug-ins
    "allowing_plugins",
    # errors
    "EtsimError", "ConfigError", "DeadlockError", "RegistryError", "SimulationError", "TopologyError", "TraceError",
    "ValidationError", "EtsimWarning",
    "__version__",
}  # fmt: skip


def test_all_lists_the_public_names_and_each_resolves() -> None:
    assert set(etsim.__all__) == EXPORTED
    assert len(etsim.__all__) == len(EXPORTED)
    for name in etsim.__all__:
        assert getattr(etsim, name) is not None, name
    assert dir(etsim) == sorted(EXPORTED)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = etsim.nothing_here  # type: ignore[attr-defined]


def test_exported_names_are_the_library_objects() -> None:
    from etsim.chakra.io import load_workload
    from etsim.report.result import Result
    from etsim.simulation import Simulation, simulate
    from etsim.system.config import SystemConfig

    assert etsim.simulate is simulate and etsim.Simulation is Simulation and etsim.Result is Result
    assert etsim.load_workload is load_workload and etsim.SystemConfig is SystemConfig
    assert issubclass(etsim.ConfigError, etsim.EtsimError)


def test_import_etsim_stays_light() -> None:
    code = "import sys, etsim; print(sorted(m for m in ('simpy', 'numpy', 'networkx', 'lxml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_run_through_the_public_api(tmp_path: Path) -> None:
    from etsim import (
        CollectiveType,
        Reports,
        Simulation,
        SystemConfig,
        TraceBuilder,
        Workload,
        load_workload,
        simulate,
        write_workload,
    )
    from etsim import Topology as TopologyClass

    traces = []
    for rank in range(4):
        builder = TraceBuilder()
        builder.collective(CollectiveType.ALL_REDUCE, 1 << 20)
        traces.append(builder.build(rank=rank))
    write_workload(Workload(traces), tmp_path / "ar")
    workload = load_workload(tmp_path / "ar")
    topology = tmp_path / "ring4.yaml"
    topology.write_text("kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    config = SystemConfig(algorithms={"all_reduce": "ring"})
    result = simulate(workload, topology=topology, model="analytical", system=config, reports=Reports())
    # The ring all-reduce's closed form, 2(p-1)(α + n/(pB)), to the nanosecond.
    assert result.finish_ns == pytest.approx(2 * 3 * (500 + (1 << 20) / 4 / 50), abs=1e-6)
    assert result.groups and result.groups[0]["group"] == "0"  # the reports etsim run gives
    simulation = Simulation(workload, topology=topology, model="analytical", system=config)  # (the same reports)
    assert simulation.run().to_dict() | {"sim": {}} == result.to_dict() | {"sim": {}}
    bare = simulate(workload, topology=topology, model="analytical", system=config)  # the run's own figures only
    assert not bare.groups and bare.finish_ns == result.finish_ns
    assert isinstance(etsim.load_topology(topology), TopologyClass)


def test_the_readme_python_examples_run(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python block of the README that imports from ``etsim`` alone runs as written, from the repository."""
    import re

    blocks = re.findall(r"```python\n(.*?)```", (repo / "README.md").read_text(), re.S)
    public = [b for b in blocks if b.startswith("from etsim import")]
    assert len(public) >= 2
    monkeypatch.chdir(repo)
    for block in public:
        exec(compile(block, "README.md", "exec"), {})
