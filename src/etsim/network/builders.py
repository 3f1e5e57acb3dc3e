"""Topology kinds and file formats: what the ``kind:`` of a topology file builds.

Every value of ``kind:`` is a :class:`TopologyBuilder` registered in :data:`TOPOLOGY_BUILDERS`; the built-ins
are one module each in :mod:`etsim.network.kinds` (ring, uni_ring, fully_connected, switch, hypercube, mesh,
torus, product, graph), which the registry imports on its first lookup. A new kind is one subclass in one new
module there, registered with ``@TOPOLOGY_BUILDERS.register("name")``; outside etsim, publish it through the
``etsim.topology_kinds`` entry points, or name it as ``kind: package.module:Class``. The registry's names are
the only list of kinds.

Files of other simulators (no ``kind:`` key) are read by a :class:`TopologyFormat` from
:data:`TOPOLOGY_FORMATS` (entry points ``etsim.topology_formats``) that recognises their keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from etsim.errors import TopologyError
from etsim.network.topology import Topology, link_bandwidth, link_latency
from etsim.registry import Registry

__all__ = [
    "COMMON_KEYS",
    "TOPOLOGY_BUILDERS",
    "TOPOLOGY_FORMATS",
    "NpusBuilder",
    "ShapeBuilder",
    "TopologyBuilder",
    "TopologyFormat",
    "build_topology",
    "check_keys",
    "int_value",
    "link_params",
    "require",
]

#: Keys every topology file may have, whatever its kind or format.
COMMON_KEYS = frozenset({"kind", "name", "description", "failed", "degraded", "network"})


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
TOPOLOGY_BUILDERS: Registry[TopologyBuilder] = Registry(
    "topology kind", "etsim.topology_kinds", TopologyBuilder, builtins="etsim.network.kinds"
)
#: Foreign topology file formats: the ``etsim.topology_formats`` entry points.
TOPOLOGY_FORMATS: Registry[TopologyFormat] = Registry("topology file format", "etsim.topology_formats", TopologyFormat)


def link_params(data: Mapping[str, Any]) -> tuple[float, float]:
    """The ``bandwidth`` (bytes per ns) and ``latency`` (ns) every link of a regular kind has."""
    return (
        link_bandwidth(require(data, "bandwidth"), "bandwidth", bare_unit=None),
        link_latency(require(data, "latency"), "latency", bare_unit=None),
    )


class NpusBuilder(TopologyBuilder):
    """A kind of ``npus``, ``bandwidth`` and ``latency`` made by ``function(npus, bandwidth, latency, name=…)``."""

    keys = frozenset({"npus", "bandwidth", "latency"})
    function: ClassVar[Any]

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """The topology of ``npus`` NPUs."""
        bw, lat = link_params(data)
        return type(self).function(int_value(require(data, "npus"), "npus"), bw, lat, name=name)


class ShapeBuilder(TopologyBuilder):
    """A kind of ``shape``, ``bandwidth`` and ``latency`` made by ``function(shape, bandwidth, latency, name=…)``."""

    keys = frozenset({"shape", "bandwidth", "latency"})
    function: ClassVar[Any]

    def build(self, data: Mapping[str, Any], name: str | None) -> Topology:
        """The topology of the given ``shape``."""
        bw, lat = link_params(data)
        return type(self).function(require(data, "shape"), bw, lat, name=name)


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
