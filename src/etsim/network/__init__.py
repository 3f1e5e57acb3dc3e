"""The network layer: topologies, routing and network models.

Typical use::

    import simpy
    from etsim.network import load_network

    net = load_network("topologies/ring8.yaml")      # topology + model name + options
    env = simpy.Environment()
    model = net.build(env)                            # a NetworkModel (default: flow)
    done = model.transfer(0, 3, 1 << 20)              # a SimPy event, fires on delivery
    env.run(done)

Topologies can also be built in Python (:func:`ring`, :func:`mesh`, :func:`product`, :func:`graph`,
…) and models built directly with :func:`build_model` or by name from :data:`NETWORK_MODELS`.
This layer depends only on :mod:`etsim.units`, :mod:`etsim.errors` and :mod:`etsim.registry`.
"""

from __future__ import annotations

from etsim.network.irregular import graph, with_failures
from etsim.network.loader import NetworkConfig, load_network, load_topology, topology_from_dict
from etsim.network.model import NETWORK_MODELS, LinkStats, NetworkModel, build_model, option
from etsim.network.models.analytical import AnalyticalNetwork
from etsim.network.models.flow import FlowNetwork
from etsim.network.models.ideal import IdealNetwork
from etsim.network.models.link import LinkNetwork
from etsim.network.routing import ROUTERS, DimensionOrderRouter, Router, ShortestPathRouter, make_router
from etsim.network.topology import (
    Dim,
    Topology,
    fully_connected,
    hypercube,
    mesh,
    product,
    ring,
    switch,
    torus,
    uni_ring,
)

__all__ = [
    "NETWORK_MODELS",
    "ROUTERS",
    "AnalyticalNetwork",
    "Dim",
    "DimensionOrderRouter",
    "FlowNetwork",
    "IdealNetwork",
    "LinkNetwork",
    "LinkStats",
    "NetworkConfig",
    "NetworkModel",
    "Router",
    "ShortestPathRouter",
    "Topology",
    "build_model",
    "fully_connected",
    "graph",
    "hypercube",
    "load_network",
    "load_topology",
    "make_router",
    "mesh",
    "option",
    "product",
    "ring",
    "switch",
    "topology_from_dict",
    "torus",
    "uni_ring",
    "with_failures",
]
