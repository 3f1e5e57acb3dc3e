"""Dimension kinds: how the NPUs of one dimension of a regular topology are connected.

Regular topologies are products of one-dimensional dimensions (:class:`~etsim.network.topology.Dim`).
Everything that depends on a dimension's kind — its links, hop counts, dimension-order routes,
diameter and bisection — is answered by one :class:`DimensionKind` subclass, registered in
:data:`DIMENSION_KINDS`. A new kind is one subclass (in etsim, or a third-party package through the
``etsim.dimension_kinds`` entry points).

Coordinates are local to the dimension (``0 .. n-1``); :data:`SWITCH` stands for the dimension's
switch node in :meth:`DimensionKind.links` and :meth:`DimensionKind.path`.
"""

from __future__ import annotations

import functools
from typing import ClassVar

from etsim.registry import Registry

__all__ = [
    "DIMENSION_KINDS",
    "SWITCH",
    "DimensionKind",
    "FullyConnectedKind",
    "LineKind",
    "RingKind",
    "SwitchKind",
    "UniRingKind",
    "dimension_kind",
]

#: The dimension's switch, in :meth:`DimensionKind.links` and :meth:`DimensionKind.path`.
SWITCH = -1


class DimensionKind:
    """Base class of dimension kinds; every method takes the dimension's NPU count *n*.

    Contract for subclasses:

    - ``name`` (class attribute): the kind's name in topology files (``ring``, ``switch`` …).
    - :meth:`links` lists the directed links ``(u, v)`` between local coordinates (and
      :data:`SWITCH`), in the order they are created (link ids follow it); :meth:`num_links` counts
      them without listing them (override it where listing costs memory: it is checked first).
    - :meth:`path` gives the coordinates a dimension-order route visits after leaving ``a``,
      ending at ``b`` (``[]`` when ``a == b``); :meth:`hops` is its length.
    - :meth:`diameter` is the largest hop count; :meth:`bisection` the bandwidth (one direction)
      across the cut that halves the dimension by coordinate, for links of bandwidth *bandwidth*.
    """

    #: Name in topology files.
    name: ClassVar[str] = ""

    def links(self, n: int) -> list[tuple[int, int]]:
        """Directed links between coordinates (and :data:`SWITCH`), in creation order."""
        raise NotImplementedError

    def num_links(self, n: int) -> int:
        """How many :meth:`links` returns (default: lists them)."""
        return len(self.links(n))

    def path(self, a: int, b: int, n: int) -> list[int]:
        """Coordinates visited from *a* to *b*, *a* excluded."""
        raise NotImplementedError

    def hops(self, a: int, b: int, n: int) -> int:
        """Links crossed from *a* to *b*."""
        return len(self.path(a, b, n))

    def diameter(self, n: int) -> int:
        """Largest hop count between two coordinates."""
        raise NotImplementedError

    def bisection(self, n: int, bandwidth: float) -> float:
        """Bandwidth across the cut halving the dimension by coordinate (one direction)."""
        raise NotImplementedError


#: Dimension kinds by name: built-ins, the ``etsim.dimension_kinds`` entry points, ``module:Class``.
DIMENSION_KINDS: Registry[DimensionKind] = Registry("dimension kind", "etsim.dimension_kinds", DimensionKind)


@functools.lru_cache(maxsize=64)
def dimension_kind(name: str) -> DimensionKind:
    """The (shared) instance of the kind registered as *name* (kinds hold no state; the last 64 are kept).

    Raises:
        RegistryError: unknown name, listing the registered ones.
    """
    return DIMENSION_KINDS.get(name)()


def _steps(a: int, b: int, n: int, step: int) -> list[int]:
    out = []
    x = a
    while x != b:
        x = (x + step) % n
        out.append(x)
    return out


@DIMENSION_KINDS.register("ring")
class RingKind(DimensionKind):
    """Bidirectional ring: neighbours linked both ways; routes take the shorter way, ties ``+1``."""

    name = "ring"

    def links(self, n: int) -> list[tuple[int, int]]:
        """``i ↔ i+1`` (mod n); a 2-NPU ring has one pair of links."""
        out = []
        for i in range(n if n > 2 else n - 1):
            u, v = i, (i + 1) % n
            out += [(u, v), (v, u)]
        return out

    def path(self, a: int, b: int, n: int) -> list[int]:
        """The shorter way round (``+1`` on a tie)."""
        forward = (b - a) % n
        return _steps(a, b, n, 1 if forward <= n - forward else -1)

    def hops(self, a: int, b: int, n: int) -> int:
        """``min(d, n - d)`` for ring distance d."""
        d = (b - a) % n
        return min(d, n - d)

    def diameter(self, n: int) -> int:
        """``n // 2``."""
        return n // 2

    def bisection(self, n: int, bandwidth: float) -> float:
        """Two links cross the cut (one for a 2-NPU ring)."""
        return bandwidth if n == 2 else 2 * bandwidth


@DIMENSION_KINDS.register("uni_ring")
class UniRingKind(DimensionKind):
    """Unidirectional ring: ``i → i+1`` only."""

    name = "uni_ring"

    def links(self, n: int) -> list[tuple[int, int]]:
        """``i → i+1`` (mod n)."""
        if n == 2:
            return [(0, 1), (1, 0)]
        return [(i, (i + 1) % n) for i in range(n)]

    def path(self, a: int, b: int, n: int) -> list[int]:
        """Always the ``+1`` way."""
        return _steps(a, b, n, 1)

    def hops(self, a: int, b: int, n: int) -> int:
        """``(b - a) mod n``."""
        return (b - a) % n

    def diameter(self, n: int) -> int:
        """``n - 1``."""
        return n - 1

    def bisection(self, n: int, bandwidth: float) -> float:
        """One link crosses the cut each way."""
        return bandwidth


@DIMENSION_KINDS.register("line")
class LineKind(DimensionKind):
    """A line (a mesh dimension): neighbours linked both ways, no wrap-around."""

    name = "line"

    def links(self, n: int) -> list[tuple[int, int]]:
        """``i ↔ i+1`` for ``i < n-1``."""
        out = []
        for i in range(n - 1):
            out += [(i, i + 1), (i + 1, i)]
        return out

    def path(self, a: int, b: int, n: int) -> list[int]:
        """Straight towards *b*."""
        return _steps(a, b, n, 1 if b > a else -1)

    def hops(self, a: int, b: int, n: int) -> int:
        """``|b - a|``."""
        return abs(b - a)

    def diameter(self, n: int) -> int:
        """``n - 1``."""
        return n - 1

    def bisection(self, n: int, bandwidth: float) -> float:
        """One link crosses the cut each way."""
        return bandwidth


@DIMENSION_KINDS.register("fully_connected")
class FullyConnectedKind(DimensionKind):
    """A dedicated link for every ordered pair of NPUs."""

    name = "fully_connected"

    def num_links(self, n: int) -> int:
        """``n·(n-1)``."""
        return n * (n - 1)

    def links(self, n: int) -> list[tuple[int, int]]:
        """Every ordered pair."""
        return [(u, v) for u in range(n) for v in range(n) if u != v]

    def path(self, a: int, b: int, n: int) -> list[int]:
        """The direct link."""
        return [] if a == b else [b]

    def hops(self, a: int, b: int, n: int) -> int:
        """1 (0 to itself)."""
        return 0 if a == b else 1

    def diameter(self, n: int) -> int:
        """1."""
        return 1

    def bisection(self, n: int, bandwidth: float) -> float:
        """Every pair across the cut has its own link."""
        half = n // 2
        return half * (n - half) * bandwidth


@DIMENSION_KINDS.register("switch")
class SwitchKind(DimensionKind):
    """A star: every NPU has a link to and from the dimension's switch."""

    name = "switch"

    def links(self, n: int) -> list[tuple[int, int]]:
        """``i → switch`` and ``switch → i`` for every NPU."""
        out = []
        for i in range(n):
            out += [(i, SWITCH), (SWITCH, i)]
        return out

    def path(self, a: int, b: int, n: int) -> list[int]:
        """Through the switch."""
        return [] if a == b else [SWITCH, b]

    def hops(self, a: int, b: int, n: int) -> int:
        """2 (0 to itself)."""
        return 0 if a == b else 2

    def diameter(self, n: int) -> int:
        """2."""
        return 2

    def bisection(self, n: int, bandwidth: float) -> float:
        """The smaller half's NPU → switch links."""
        return n // 2 * bandwidth
