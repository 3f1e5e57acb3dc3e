"""etsim: a discrete-event simulator for distributed ML systems driven by Chakra execution traces.

The public API, importable from ``etsim`` itself (each name loads its module when first used)::

    from etsim import SystemConfig, load_workload, simulate

    result = simulate(load_workload("workloads/dp_8npus_4layers"), topology="topologies/ring8.yaml",
                      system=SystemConfig(algorithms={"all_reduce": "halving_doubling"}))
    print(result.finish_ns, result.ranks[0].exposed_comm_ns)

- running: :func:`simulate` (one call), :class:`Simulation` (one run, phase by phase), :class:`Reports` (what a
  result reports), :class:`Result`;
- workloads: :func:`load_workload`, :func:`write_workload`, :class:`Workload`, :class:`Trace`,
  :class:`TraceBuilder`, :class:`CollectiveType`, :func:`generate` (a registered workload generator);
- networks: :class:`Topology`, :func:`load_topology`, :func:`load_network`, :class:`NetworkConfig`,
  :class:`NetworkModel` (the plug-in base of network models);
- systems: :class:`SystemConfig`, :func:`load_system_config`, :class:`CollectiveAlgorithm` (the plug-in base of
  collective algorithms);
- plug-ins: :func:`allowing_plugins` (``module:Class`` and ``file.py:Class`` names import code only inside it, or
  with ``ETSIM_ALLOW_PLUGINS=1``: a downloaded file must not run code shipped with it);
- errors: :class:`EtsimError` and its subclasses, :class:`EtsimWarning`.

Layers (each a subpackage, depending downward only): ``chakra`` (the trace format), ``algo``, ``network``
(topologies, routing, network models), then the system, workload and simulation layers (``docs/design.md``).
"""

from typing import TYPE_CHECKING

from etsim.errors import (
    ConfigError,
    DeadlockError,
    EtsimError,
    EtsimWarning,
    RegistryError,
    SimulationError,
    TopologyError,
    TraceError,
    ValidationError,
)
from etsim.lazy import lazy_attributes

__version__ = "0.1.0"

#: Where each public name lives (loaded on first use: ``import etsim`` stays light).
_HOMES = {
    "simulate": "simulation",
    "Simulation": "simulation",
    "Reports": "simulation",
    "Result": "report.result",
    "load_workload": "chakra.io",
    "write_workload": "chakra.io",
    "Workload": "chakra.graph",
    "Trace": "chakra.graph",
    "CollectiveType": "chakra.graph",
    "TraceBuilder": "chakra.builder",
    "generate": "producers.workloads.base",
    "Topology": "network.topology",
    "load_topology": "network.loader",
    "load_network": "network.loader",
    "NetworkConfig": "network.loader",
    "NetworkModel": "network.model",
    "SystemConfig": "system.config",
    "load_system_config": "system.config",
    "CollectiveAlgorithm": "system.algorithms.base",
    "allowing_plugins": "registry",
}

__getattr__ = lazy_attributes(__name__, _HOMES)

if TYPE_CHECKING:
    from etsim.chakra.builder import TraceBuilder
    from etsim.chakra.graph import CollectiveType, Trace, Workload
    from etsim.chakra.io import load_workload, write_workload
    from etsim.network.loader import NetworkConfig, load_network, load_topology
    from etsim.network.model import NetworkModel
    from etsim.network.topology import Topology
    from etsim.producers.workloads.base import generate
    from etsim.registry import allowing_plugins
    from etsim.report.result import Result
    from etsim.simulation import Reports, Simulation, simulate
    from etsim.system.algorithms.base import CollectiveAlgorithm
    from etsim.system.config import SystemConfig, load_system_config

__all__ = [
    "CollectiveAlgorithm",
    "CollectiveType",
    "ConfigError",
    "DeadlockError",
    "EtsimError",
    "EtsimWarning",
    "NetworkConfig",
    "NetworkModel",
    "RegistryError",
    "Reports",
    "Result",
    "Simulation",
    "SimulationError",
    "SystemConfig",
    "Topology",
    "TopologyError",
    "Trace",
    "TraceBuilder",
    "TraceError",
    "ValidationError",
    "Workload",
    "__version__",
    "allowing_plugins",
    "generate",
    "load_network",
    "load_system_config",
    "load_topology",
    "load_workload",
    "simulate",
    "write_workload",
]


def __dir__() -> list[str]:
    return sorted(__all__)
