"""etsim: a discrete-event simulator for distributed ML systems driven by Chakra execution traces.

Layers (each a subpackage, depending downward only): ``chakra`` (the trace format), ``network``
(topologies, routing, network models), then the system, workload and simulation layers.
"""

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

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DeadlockError",
    "EtsimError",
    "EtsimWarning",
    "RegistryError",
    "SimulationError",
    "TopologyError",
    "TraceError",
    "ValidationError",
    "__version__",
]
