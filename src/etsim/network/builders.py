"""Topology kinds and file formats: what the ``kind:`` of a topology file builds.

Every value of ``kind:`` is a :class:`TopologyBuilder` registered in :data:`TOPOLOGY_BUILDERS`
(built-ins: ring, uni_ring, fully_connected, switch, hypercube, mesh, torus, product, graph). A new
kind is one subclass: register it with ``@TOPOLOGY_BUILDERS.register("name")``, through the
``etsim.topology_kinds`` entry points, or name it as ``kind: package.module:Class``.

Files of other simulators (no ``kind:`` key) are read by a :class:`TopologyFormat` from
:data:`TOPOLOGY_FORMATS` (entry points ``etsim.topology_formats``) that recognises their keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from etsim.errors import TopologyError
from etsim.network.dims import DIMENSION_KINDS
from etsim.network.irregular import graph
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
from etsim.registry import Registry
from etsim.units import parse_bandwidth, parse_time

__all__ = [
    "COMMON_KEYS",
    "TOPOLOGY_BUILDERS",
    "TOPOLOGY_FORMATS",
    "TOPOLOGY_KINDS",
    "TopologyBuilder",
    "TopologyFormat",
    "build_topology",
    "check_keys",
    "int_value",
    "require",
]

#: Keys every topology file may have, whatever its kind or format.
COMMON_KEYS = frozenset({"kind", "name", "description", "failed", "network"})


def require(data: Mapping[str, Any], key: str, prefix: str = "") -> Any:
    """``data[key]``, or a :class:`TopologyError` ``PREFIXKEY: missing``."""
    if key not in data:
        raise TopologyError(f"{prefix}{key}: missing")
    return data[key]


def check_keys(data: Mapping[str, Any], allowed: set[str] | frozenset[str], what: str, prefix: str = "") -> None:
    """Raise a :class:`TopologyError` naming the first key of *data* not in *allowed*."""
    for key in data:
        if key not in allowed:
            raise TopologyError(f"{prefix}{key}: unknown key for {what}; expected one of {', '.join(sorted(allowed))}")


def int_value(value: object, key: str) -> int:
    """*value* if it is an integer (not a bool), else a :class:`TopologyError` naming *key*."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"{key}: expected an integer, got {value!r}")
    return value


class TopologyBuilder:
    """Base class of topology kinds (the values of ``kind:``).

    Contract for subclasses:

    - ``keys`` (class attribute): the keys the kind accepts besides :data:`COMMON_KEYS`; others
      are errors naming the key.
    - :meth:`build` returns the :class:`~etsim.network.topology.Topology` for a file's mapping;
      bad values raise :class:`~etsim.errors.TopologyError` naming the key (the loader adds the
      file name). ``failed:`` and ``network:`` are handled by the loader, not the builder.
    """

    #: Keys of this kind (besides the common ones).
    keys: ClassVar[frozenset[str]] = frozenset()

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """The topology described by *data*."""
        raise NotImplementedError


class TopologyFormat:
    """Base class of foreign topology file formats (files without ``kind:``).

    Contract for subclasses:

    - ``keys`` (class attribute): the top-level keys the format accepts.
    - :meth:`detect` says whether a mapping is in this format (by its keys, without raising).
    - :meth:`build` returns the topology, raising :class:`~etsim.errors.TopologyError` naming the key.
    """

    #: Keys of the format.
    keys: ClassVar[frozenset[str]] = frozenset()
    #: How messages name a file of this format ("an XYZ network file").
    what: ClassVar[str] = "a topology file"

    def detect(self, data: Mapping[str, Any]) -> bool:
        """True if *data* is in this format."""
        raise NotImplementedError

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """The topology described by *data*."""
        raise NotImplementedError


#: Topology kinds: built-ins, the ``etsim.topology_kinds`` entry points, ``module:Class``.
TOPOLOGY_BUILDERS: Registry[TopologyBuilder] = Registry("topology kind", "etsim.topology_kinds", TopologyBuilder)
#: Foreign topology file formats: the ``etsim.topology_formats`` entry points.
TOPOLOGY_FORMATS: Registry[TopologyFormat] = Registry(
    "topology file format", "etsim.topology_formats", TopologyFormat
)


def _link_params(data: Mapping[str, Any]) -> tuple[float, float]:
    return (
        parse_bandwidth(require(data, "bandwidth"), key="bandwidth"),
        parse_time(require(data, "latency"), key="latency"),
    )


@TOPOLOGY_BUILDERS.register("ring")
class RingBuilder(TopologyBuilder):
    """``kind: ring`` — ``npus``, ``bandwidth``, ``latency``, ``bidirectional`` (default true)."""

    keys = frozenset({"npus", "bandwidth", "latency", "bidirectional"})

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """A ring (see :func:`~etsim.network.topology.ring`)."""
        bw, lat = _link_params(data)
        npus = int_value(require(data, "npus"), "npus")
        bidirectional = data.get("bidirectional", True)
        if not isinstance(bidirectional, bool):
            raise TopologyError(f"bidirectional: expected true or false, got {bidirectional!r}")
        return ring(npus, bw, lat, bidirectional=bidirectional, name=name)


class _NpusBuilder(TopologyBuilder):
    keys = frozenset({"npus", "bandwidth", "latency"})
    function: ClassVar[Any]

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        bw, lat = _link_params(data)
        return type(self).function(int_value(require(data, "npus"), "npus"), bw, lat, name=name)


@TOPOLOGY_BUILDERS.register("uni_ring")
class UniRingBuilder(_NpusBuilder):
    """``kind: uni_ring`` — ``npus``, ``bandwidth``, ``latency``."""

    function = uni_ring


@TOPOLOGY_BUILDERS.register("fully_connected")
class FullyConnectedBuilder(_NpusBuilder):
    """``kind: fully_connected`` — ``npus``, ``bandwidth``, ``latency``."""

    function = fully_connected


@TOPOLOGY_BUILDERS.register("switch")
class SwitchBuilder(_NpusBuilder):
    """``kind: switch`` — ``npus``, ``bandwidth``, ``latency``."""

    function = switch


@TOPOLOGY_BUILDERS.register("hypercube")
class HypercubeBuilder(_NpusBuilder):
    """``kind: hypercube`` — ``npus`` (a power of two), ``bandwidth``, ``latency``."""

    function = hypercube


class _ShapeBuilder(TopologyBuilder):
    keys = frozenset({"shape", "bandwidth", "latency"})
    function: ClassVar[Any]

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        bw, lat = _link_params(data)
        return type(self).function(require(data, "shape"), bw, lat, name=name)


@TOPOLOGY_BUILDERS.register("mesh")
class MeshBuilder(_ShapeBuilder):
    """``kind: mesh`` — ``shape`` ([x, y] or [x, y, z]), ``bandwidth``, ``latency``."""

    function = mesh


@TOPOLOGY_BUILDERS.register("torus")
class TorusBuilder(_ShapeBuilder):
    """``kind: torus`` — ``shape``, ``bandwidth``, ``latency``."""

    function = torus


def dimension(entry: object, prefix: str) -> Dim:
    """One ``{kind, npus, bandwidth, latency}`` entry of a product's ``dims``."""
    if not isinstance(entry, Mapping):
        raise TopologyError(f"{prefix}: expected a mapping {{kind, npus, bandwidth, latency}}, got {entry!r}")
    check_keys(entry, {"kind", "npus", "bandwidth", "latency"}, "a dimension", f"{prefix}.")
    kind = require(entry, "kind", f"{prefix}.")
    kinds = DIMENSION_KINDS.names()
    if kind not in kinds:
        raise TopologyError(f"{prefix}.kind: unknown dimension kind {kind!r}; expected one of {', '.join(kinds)}")
    npus = int_value(require(entry, "npus", f"{prefix}."), f"{prefix}.npus")
    if npus < 2:
        raise TopologyError(f"{prefix}.npus: a dimension needs at least 2 NPUs, got {npus}")
    bw = parse_bandwidth(require(entry, "bandwidth", f"{prefix}."), key=f"{prefix}.bandwidth")
    lat = parse_time(require(entry, "latency", f"{prefix}."), key=f"{prefix}.latency")
    return Dim(kind, npus, bw, lat)


@TOPOLOGY_BUILDERS.register("product")
class ProductBuilder(TopologyBuilder):
    """``kind: product`` — ``dims``: a list of ``{kind, npus, bandwidth, latency}``, dimension 0 first."""

    keys = frozenset({"dims"})

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """The Cartesian product of the dimensions."""
        dims = require(data, "dims")
        if not isinstance(dims, list) or not dims:
            raise TopologyError(f"dims: expected a non-empty list of dimensions, got {dims!r}")
        return product([dimension(d, f"dims[{i}]") for i, d in enumerate(dims)], name=name)


@TOPOLOGY_BUILDERS.register("graph")
class GraphBuilder(TopologyBuilder):
    """``kind: graph`` — ``npus``, ``switches``, ``links`` and default ``bandwidth``/``latency``."""

    keys = frozenset({"npus", "switches", "links", "bandwidth", "latency"})

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """An explicit graph (see :func:`~etsim.network.topology.graph`)."""
        links = require(data, "links")
        if not isinstance(links, list):
            raise TopologyError(f"links: expected a list of links, got {links!r}")
        return graph(
            int_value(require(data, "npus"), "npus"),
            links,
            switches=data.get("switches", 0),
            bandwidth=data.get("bandwidth"),
            latency=data.get("latency"),
            name=name,
        )


#: The built-in values of ``kind``.
TOPOLOGY_KINDS = ("ring", "uni_ring", "fully_connected", "switch", "mesh", "torus", "hypercube", "product", "graph")


def build_topology(data: Mapping[str, Any], name: str | None) -> Topology:
    """Build the topology of a file's mapping: by its ``kind``, else by a format that recognises it.

    Raises:
        TopologyError: ``KEY: reason`` (unknown kind, unknown key, bad value, …).
    """
    if "kind" not in data:
        for _, fmt_cls in TOPOLOGY_FORMATS.items():
            fmt = fmt_cls()
            if fmt.detect(data):
                check_keys(data, fmt.keys, fmt.what)
                return fmt.build(data, name)
    kind = require(data, "kind")
    names = TOPOLOGY_BUILDERS.names()
    if not isinstance(kind, str) or (kind not in names and ":" not in kind):
        raise TopologyError(f"kind: unknown topology kind {kind!r}; expected one of {', '.join(names)}")
    builder = TOPOLOGY_BUILDERS.get(kind)()
    check_keys(data, builder.keys | COMMON_KEYS, f"kind {kind}")
    return builder.build(data, name)
