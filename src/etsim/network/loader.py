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
    network:                # optional: the model and its options (default: model: analytical)
      model: link
      packet_size: 4 KiB

ASTRA-sim's network YAML is accepted unchanged (recognised by its ``topology`` list)::

    topology: [Ring, Switch]       # Ring | FullyConnected | Switch (also etsim dimension kinds)
    npus_count: [4, 8]
    bandwidth: [50.0, 25.0]        # bare numbers: GB/s with ASTRA-sim's 1 GB = 2^30 B
    latency: [500.0, 700.0]        # bare numbers: ns

Every error is a :class:`~etsim.errors.TopologyError` of the form ``FILE: KEY: reason``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import simpy
import yaml

from etsim.errors import ConfigError, TopologyError
from etsim.network.model import NETWORK_MODELS, NetworkModel, build_model
from etsim.network.topology import (
    DIM_KINDS,
    Dim,
    Topology,
    fully_connected,
    graph,
    hypercube,
    mesh,
    product,
    ring,
    switch,
    torus,
    uni_ring,
    with_failures,
)
from etsim.units import parse_bandwidth, parse_time

__all__ = ["TOPOLOGY_KINDS", "NetworkConfig", "load_network", "load_topology", "topology_from_dict"]

#: Values of the ``kind`` key.
TOPOLOGY_KINDS = ("ring", "uni_ring", "fully_connected", "switch", "mesh", "torus", "hypercube", "product", "graph")

_COMMON_KEYS = {"kind", "name", "description", "failed", "network"}
_KIND_KEYS = {
    "ring": {"npus", "bandwidth", "latency", "bidirectional"},
    "uni_ring": {"npus", "bandwidth", "latency"},
    "fully_connected": {"npus", "bandwidth", "latency"},
    "switch": {"npus", "bandwidth", "latency"},
    "hypercube": {"npus", "bandwidth", "latency"},
    "mesh": {"shape", "bandwidth", "latency"},
    "torus": {"shape", "bandwidth", "latency"},
    "product": {"dims"},
    "graph": {"npus", "switches", "links", "bandwidth", "latency"},
}
_ASTRA_KEYS = {"topology", "npus_count", "bandwidth", "latency", "name", "description", "failed", "network"}
_ASTRA_KINDS = {"ring": "ring", "fullyconnected": "fully_connected", "switch": "switch"}
_DIM_KEYS = {"kind", "npus", "bandwidth", "latency"}


@dataclass(frozen=True)
class NetworkConfig:
    """A loaded network description: the topology plus the selected model and its options.

    Attributes:
        topology: the network graph.
        model: the model's registry name (or ``module:Class``).
        options: the model's options as written (already validated against the model's schema).
    """

    topology: Topology
    model: str = "analytical"
    options: Mapping[str, Any] = field(default_factory=dict)

    def build(self, env: simpy.Environment) -> NetworkModel:
        """Construct the model in *env* (see :func:`~etsim.network.model.build_model`)."""
        return build_model(env, self.topology, self.model, self.options)


def _read(source: str | Path | Mapping[str, Any]) -> tuple[Mapping[str, Any], str, Path | None]:
    if isinstance(source, Mapping):
        return source, "<topology>", None
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise TopologyError(f"{path}: expected a mapping of topology keys at the top level, got {type(data).__name__}")
    return data, str(path), path


def _require(data: Mapping[str, Any], key: str, prefix: str = "") -> Any:
    if key not in data:
        raise TopologyError(f"{prefix}{key}: missing")
    return data[key]


def _check_keys(data: Mapping[str, Any], allowed: set[str], what: str, prefix: str = "") -> None:
    for key in data:
        if key not in allowed:
            raise TopologyError(f"{prefix}{key}: unknown key for {what}; expected one of {', '.join(sorted(allowed))}")


def _int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"{key}: expected an integer, got {value!r}")
    return value


def _dim(entry: object, prefix: str) -> Dim:
    if not isinstance(entry, Mapping):
        raise TopologyError(f"{prefix}: expected a mapping {{kind, npus, bandwidth, latency}}, got {entry!r}")
    _check_keys(entry, _DIM_KEYS, "a dimension", f"{prefix}.")
    kind = _require(entry, "kind", f"{prefix}.")
    if kind not in DIM_KINDS:
        raise TopologyError(f"{prefix}.kind: unknown dimension kind {kind!r}; expected one of {', '.join(DIM_KINDS)}")
    npus = _int(_require(entry, "npus", f"{prefix}."), f"{prefix}.npus")
    if npus < 2:
        raise TopologyError(f"{prefix}.npus: a dimension needs at least 2 NPUs, got {npus}")
    bw = parse_bandwidth(_require(entry, "bandwidth", f"{prefix}."), key=f"{prefix}.bandwidth")
    lat = parse_time(_require(entry, "latency", f"{prefix}."), key=f"{prefix}.latency")
    return Dim(kind, npus, bw, lat)


def _build_native(data: Mapping[str, Any], name: str | None) -> Topology:
    kind = _require(data, "kind")
    if kind not in TOPOLOGY_KINDS:
        raise TopologyError(f"kind: unknown topology kind {kind!r}; expected one of {', '.join(TOPOLOGY_KINDS)}")
    _check_keys(data, _KIND_KEYS[kind] | _COMMON_KEYS, f"kind {kind}")
    if kind == "product":
        dims = _require(data, "dims")
        if not isinstance(dims, list) or not dims:
            raise TopologyError(f"dims: expected a non-empty list of dimensions, got {dims!r}")
        return product([_dim(d, f"dims[{i}]") for i, d in enumerate(dims)], name=name)
    if kind == "graph":
        links = _require(data, "links")
        if not isinstance(links, list):
            raise TopologyError(f"links: expected a list of links, got {links!r}")
        return graph(
            _int(_require(data, "npus"), "npus"),
            links,
            switches=data.get("switches", 0),
            bandwidth=data.get("bandwidth"),
            latency=data.get("latency"),
            name=name,
        )
    bw = parse_bandwidth(_require(data, "bandwidth"), key="bandwidth")
    lat = parse_time(_require(data, "latency"), key="latency")
    if kind in ("mesh", "torus"):
        shape = _require(data, "shape")
        return (mesh if kind == "mesh" else torus)(shape, bw, lat, name=name)
    npus = _int(_require(data, "npus"), "npus")
    if kind == "ring":
        bidirectional = data.get("bidirectional", True)
        if not isinstance(bidirectional, bool):
            raise TopologyError(f"bidirectional: expected true or false, got {bidirectional!r}")
        return ring(npus, bw, lat, bidirectional=bidirectional, name=name)
    builder = {"uni_ring": uni_ring, "fully_connected": fully_connected, "switch": switch, "hypercube": hypercube}[kind]
    return builder(npus, bw, lat, name=name)


def _build_astra(data: Mapping[str, Any], name: str | None) -> Topology:
    _check_keys(data, _ASTRA_KEYS, "an ASTRA-sim network file")
    lists = {}
    for key in ("topology", "npus_count", "bandwidth", "latency"):
        value = _require(data, key)
        if not isinstance(value, list) or not value:
            raise TopologyError(f"{key}: expected a non-empty list (one entry per dimension), got {value!r}")
        lists[key] = value
    lengths = {key: len(value) for key, value in lists.items()}
    if len(set(lengths.values())) != 1:
        raise TopologyError(f"topology, npus_count, bandwidth and latency must have equal lengths, got {lengths}")
    dims = []
    for i, kind in enumerate(lists["topology"]):
        text = str(kind)
        internal = _ASTRA_KINDS.get(text.lower().replace("_", ""), text if text in DIM_KINDS else None)
        if internal is None:
            raise TopologyError(f"topology[{i}]: unknown dimension {kind!r}; expected Ring, FullyConnected or Switch")
        npus = _int(lists["npus_count"][i], f"npus_count[{i}]")
        if npus < 2:
            raise TopologyError(f"npus_count[{i}]: each dimension needs more than one NPU, got {npus}")
        bw = parse_bandwidth(lists["bandwidth"][i], key=f"bandwidth[{i}]", default_unit="GiB/s")
        lat = parse_time(lists["latency"][i], key=f"latency[{i}]", default_unit="ns")
        dims.append(Dim(internal, npus, bw, lat))
    kind = dims[0].kind if len(dims) == 1 else "product"
    return product(dims, kind=kind, name=name)


def _apply_failures(topology: Topology, failed: object) -> Topology:
    if not isinstance(failed, list):
        raise TopologyError(f"failed: expected a list such as [{{npu: 3}}, {{link: [0, 1]}}], got {failed!r}")
    npus: list[int] = []
    for i, entry in enumerate(failed):
        key = f"failed[{i}]"
        if not isinstance(entry, Mapping) or not ({"npu"} == set(entry) or "link" in entry):
            raise TopologyError(f"{key}: expected {{npu: RANK}} or {{link: [U, V]}}, got {entry!r}")
        if "npu" in entry:
            npus.append(_int(entry["npu"], f"{key}.npu"))
    try:
        topology = with_failures(topology, npus=npus)
    except TopologyError as exc:
        raise TopologyError(f"failed: {exc}") from None
    for i, entry in enumerate(failed):
        if "link" not in entry:
            continue
        key = f"failed[{i}]"
        _check_keys(entry, {"link", "bidirectional"}, "a failed link", f"{key}.")
        link = entry["link"]
        if not isinstance(link, list) or len(link) != 2:
            raise TopologyError(f"{key}.link: expected [U, V], got {link!r}")
        bidirectional = entry.get("bidirectional", True)
        if not isinstance(bidirectional, bool):
            raise TopologyError(f"{key}.bidirectional: expected true or false, got {bidirectional!r}")
        try:
            topology = with_failures(topology, links=[(link[0], link[1])], bidirectional=bidirectional)
        except TopologyError as exc:
            raise TopologyError(f"{key}: {exc}") from None
    return topology


def _topology(data: Mapping[str, Any], name: str | None, source: Path | None) -> Topology:
    given = data.get("name")
    if given is not None and not isinstance(given, str):
        raise TopologyError(f"name: expected a string, got {given!r}")
    name = given or name or (source.stem if source else None)
    astra = "kind" not in data and "topology" in data
    topo = _build_astra(data, name) if astra else _build_native(data, name)
    if "failed" in data:
        topo = _apply_failures(topo, data["failed"])
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
        source: a path to a YAML file in etsim's or ASTRA-sim's format, or a mapping.
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
            raise TopologyError(f"network: expected a mapping such as {{model: link}}, got {network!r}")
        options = dict(network)
        model = options.pop("model", "analytical")
        if not isinstance(model, str):
            raise TopologyError(f"network.model: expected a model name, got {model!r}")
        module, sep, cls = model.rpartition(":")
        if sep and module.endswith(".py") and path is not None and not os.path.isabs(module):
            # A model defined in a user's file is found next to the topology file, not the working directory.
            model = f"{path.parent / module}:{cls}"
        try:
            NETWORK_MODELS.get(model).parse_options(options, key="network")
        except ConfigError as exc:
            message = str(exc)
            raise TopologyError(message if message.startswith("network.") else f"network.model: {message}") from None
    except ConfigError as exc:
        raise TopologyError(f"{where}: {exc}") from None
    return NetworkConfig(topology, model, options)
