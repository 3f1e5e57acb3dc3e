"""Topology and network YAML files.

etsim's own format (one mapping; units written out)::

    kind: ring              # ring | uni_ring | fully_connected | switch | mesh | torus | hypercube | product | graph
    npus: 8                 # ring, uni_ring, fully_connected, switch, hypercube (power of two), graph
    shape: [4, 4, 4]        # mesh, torus
    bandwidth: 50 GB/s      # per link and direction (graph: default for links without one)
    latency: 500 ns         # per link (graph: default for links without one)
    dims:                   # product: dimension 0 varies fastest (rank = x0 + n0·x1 + …)
      - {kind: ring, npus: 4, bandwidth: 200 GB/s, latency: 100 ns}  # ring|uni_ring|line|fully_connected|switch
      - {kind: switch, npus: 8, bandwidth: 50 GB/s, latency: 1 us}
    switches: 2             # graph: a count (names s0, s1, …) or a list of names
    links:                  # graph: bidirectional defaults to true
      - {src: 0, dst: s0, bandwidth: 100 GB/s, latency: 200 ns, bidirectional: true}
    failed: [{npu: 3}, {link: [0, 1]}]   # any kind; {link: [u, v], bidirectional: false} fails u -> v only
    name: my-topology       # optional (default: the file name without .yaml)
    description: free text  # optional
    network:                # optional: the model and its options (default: model: flow)
      model: link
      packet_size: 4 KiB

Other simulators' file formats are read by registered formats
(:data:`~etsim.network.builders.TOPOLOGY_FORMATS`, e.g. one in :mod:`etsim.compat`), recognised by
their keys when ``kind`` is absent. New kinds register a builder in
:data:`~etsim.network.builders.TOPOLOGY_BUILDERS`.

Every error is a :class:`~etsim.errors.TopologyError` of the form ``FILE: KEY: reason``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import simpy

from etsim.errors import ConfigError, TopologyError, warn
from etsim.files import parse_yaml, read_text
from etsim.network.builders import build_topology, check_keys, int_value
from etsim.network.faults import LinkChange
from etsim.network.irregular import degrade_factor, with_degraded, with_failures
from etsim.network.model import DEFAULT_MODEL, NETWORK_MODELS, NetworkModel, build_model
from etsim.network.routing import ROUTERS
from etsim.network.topology import Topology

__all__ = ["NetworkConfig", "load_network", "load_topology", "topology_from_dict"]


@dataclass(frozen=True)
class NetworkConfig:
    """A loaded network description: the topology plus the selected model and its options.

    Attributes:
        topology: the network graph.
        model: the model's registry name (or ``module:Class``).
        options: the model's options as written (already validated against the model's schema).
        label: how results name this network (None: the topology's name); a caller that loaded it from a file may
            give the file's path, as a run given the path would name it.
        changes: links that degrade, fail or recover during the run (:mod:`etsim.network.faults`; ``flow`` only).
    """

    topology: Topology
    model: str = DEFAULT_MODEL
    options: Mapping[str, Any] = field(default_factory=dict)
    label: str | None = None
    changes: tuple[LinkChange, ...] = ()

    def build(self, env: simpy.Environment) -> NetworkModel:
        """Construct the model in *env* (see :func:`~etsim.network.model.build_model`)."""
        return build_model(env, self.topology, self.model, self.options)

    def options_for(self, model: str) -> dict[str, Any]:
        """The options to run *model* with: all of them for the file's model.

        For another model, those it takes too (every model's ``router`` and ``seed``, and its own, such as
        ``integer_ns``); the others are warned about as unused (they were all dropped in silence, the router too).
        """
        if model == self.model:
            return dict(self.options)
        common = {f.name for f in dataclasses.fields(NETWORK_MODELS.get(model).Options)}  # (what *model* takes)
        dropped = sorted(k for k in self.options if k not in common)
        if dropped:
            warn(f"network options {', '.join(dropped)} are {self.model}'s: not used with model {model}")
        return {k: v for k, v in self.options.items() if k in common}


def _read(source: str | Path | Mapping[str, Any]) -> tuple[Mapping[str, Any], str, Path | None]:
    if isinstance(source, Mapping):
        return source, "<topology>", None
    path = Path(source)
    text = read_text(path, "topology file", TopologyError)
    data = parse_yaml(text, str(path), TopologyError)
    if not isinstance(data, Mapping):
        raise TopologyError(f"{path}: expected a mapping of topology keys at the top level, got {type(data).__name__}")
    return data, str(path), path


def _apply_failures(topology: Topology, failed: object) -> Topology:
    if not isinstance(failed, list):
        raise TopologyError(f"failed: expected a list such as [{{npu: 3}}, {{link: [0, 1]}}], got {failed!r}")
    npus: list[int] = []
    for i, entry in enumerate(failed):
        key = f"failed[{i}]"
        if not isinstance(entry, Mapping) or not ({"npu"} == set(entry) or "link" in entry):
            raise TopologyError(f"{key}: expected {{npu: RANK}} or {{link: [U, V]}}, got {entry!r}")
        if "npu" in entry:
            npus.append(int_value(entry["npu"], f"{key}.npu"))
    try:
        topology = with_failures(topology, npus=npus)
    except TopologyError as exc:
        raise TopologyError(f"failed: {exc}") from None
    for i, entry in enumerate(failed):
        if "link" not in entry:
            continue
        key = f"failed[{i}]"
        link, bidirectional = _link_entry(entry, key, "a failed link")
        try:
            topology = with_failures(topology, links=[link], bidirectional=bidirectional)
        except TopologyError as exc:
            raise TopologyError(f"{key}: {exc}") from None
    return topology


def _apply_degraded(topology: Topology, degraded: object) -> Topology:
    """``degraded: [{link: [U, V], factor: F, bidirectional: true}]``: links running at F times their bandwidth."""
    if not isinstance(degraded, list):
        raise TopologyError(f"degraded: expected a list such as [{{link: [0, 1], factor: 0.5}}], got {degraded!r}")
    for i, entry in enumerate(degraded):
        key = f"degraded[{i}]"
        if not isinstance(entry, Mapping) or "link" not in entry or "factor" not in entry:
            raise TopologyError(f"{key}: expected {{link: [U, V], factor: F}}, got {entry!r}")
        link, bidirectional = _link_entry(entry, key, "a degraded link", {"factor"})
        factor = degrade_factor(entry["factor"], f"{key}.factor")
        try:
            topology = with_degraded(topology, [link], factor, bidirectional=bidirectional)
        except TopologyError as exc:
            raise TopologyError(f"{key}: {exc}") from None
    return topology


def _link_entry(
    entry: Mapping[str, Any], key: str, what: str, extra: frozenset[str] | set[str] = frozenset()
) -> tuple[tuple[Any, Any], bool]:
    """The ``link: [U, V]`` and ``bidirectional`` (default true) of a failed or degraded link entry, checked."""
    check_keys(entry, {"link", "bidirectional", *extra}, what, f"{key}.")
    link = entry["link"]
    if not isinstance(link, list) or len(link) != 2:
        raise TopologyError(f"{key}.link: expected [U, V], got {link!r}")
    bidirectional = entry.get("bidirectional", True)
    if not isinstance(bidirectional, bool):
        raise TopologyError(f"{key}.bidirectional: expected true or false, got {bidirectional!r}")
    return (link[0], link[1]), bidirectional


def _topology(data: Mapping[str, Any], name: str | None, source: Path | None) -> Topology:
    given = data.get("name")
    if given is not None and not isinstance(given, str):
        raise TopologyError(f"name: expected a string, got {given!r}")
    name = given or name or (source.stem if source else None)
    topo = build_topology(data, name)
    if "failed" in data:
        topo = _apply_failures(topo, data["failed"])
    if "degraded" in data:
        topo = _apply_degraded(topo, data["degraded"])
    topo.source = str(source) if source else None
    return topo


def topology_from_dict(data: Mapping[str, Any], *, where: str = "<topology>", name: str | None = None) -> Topology:
    """Build a topology from a parsed YAML mapping (either format); errors are prefixed with *where*."""
    try:
        return _topology(data, name, None)
    except ConfigError as exc:
        raise TopologyError(f"{where}: {exc}") from None


def load_topology(source: str | Path | Mapping[str, Any], *, name: str | None = None) -> Topology:
    """Load a topology from a YAML file (or an already parsed mapping).

    Args:
        source: a path to a YAML file (etsim's format or a registered foreign one), or a mapping.
        name: topology name when the file gives none (default: the file stem).

    Raises:
        TopologyError: ``FILE: KEY: reason`` for an unknown key or kind, a bad unit, a disconnected
            graph, a link to a missing node, a hypercube that is not a power of two, ….
    """
    return load_network(source, name=name).topology


def load_network(source: str | Path | Mapping[str, Any], *, name: str | None = None) -> NetworkConfig:
    """Load a topology file together with its optional ``network:`` block (model and options).

    The model class is resolved and its options validated here, so a bad model name or option is
    reported with the file name; :meth:`NetworkConfig.build` then constructs the model.

    Args:
        source: a path to a YAML file or a mapping (see the module docstring for the format).
        name: topology name when the file gives none.

    Raises:
        TopologyError: invalid topology or network block (the message names the file and key).
    """
    data, where, path = _read(source)
    try:
        topology = _topology(data, name, path)
        network = data.get("network", {})
        if network is None:
            network = {}
        if not isinstance(network, Mapping):
            raise TopologyError(f"network: expected a mapping such as {{model: flow}}, got {network!r}")
        options = dict(network)
        model = options.pop("model", DEFAULT_MODEL)
        if not isinstance(model, str):
            raise TopologyError(f"network.model: expected a model name, got {model!r}")
        module, sep, cls = model.rpartition(":")
        if sep and module.endswith(".py") and path is not None and not os.path.isabs(module):
            # A model defined in a user's file is found next to the topology file, not the working directory.
            model = f"{path.parent / module}:{cls}"
        try:
            NETWORK_MODELS.get(model).checked_options(options, key="network")
        except ConfigError as exc:
            message = str(exc)
            raise TopologyError(message if message.startswith("network.") else f"network.model: {message}") from None
        router = options.get("router")
        if isinstance(router, str) and ":" not in router and router not in ROUTERS.names():  # (plug-ins load later)
            raise TopologyError(f"network.router: unknown router {router!r}; valid: {', '.join(ROUTERS.names())}")
    except ConfigError as exc:
        raise TopologyError(f"{where}: {exc}") from None
    return NetworkConfig(topology, model, options)
