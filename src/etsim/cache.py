"""Bounded caches: the one kind of process-wide memory etsim keeps between calls.

A module may keep what it built for reuse (a synthesised algorithm, a sweep worker's workload) only in a
:class:`BoundedCache`: at most ``size`` entries, the least recently used dropped first, so that a long sweep or
tuning session never grows without bound; or, where lookups must run at C speed (``map(table.get, keys)`` over a
million nodes), in a :class:`CappedTable`, which starts again when it is full.

Keys that are objects compared by identity (a topology, a list of graphs) are given with
:meth:`BoundedCache.get`'s ``keep``: the entry holds them, so their ids are not reused while it lives, and a hit is
checked to be the very same objects.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

__all__ = ["BoundedCache", "CappedTable"]

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """A least-recently-used cache of at most *size* values.

    - :meth:`get` returns the value under *key*, made by ``make()`` on a miss;
    - more than *size* entries drop the least recently used one;
    - ``keep`` (objects the key names by their ``id``) is held with the entry and must be the same objects on a hit;
    - :meth:`clear` empties it (tests, or a caller that knows the inputs changed).

    Args:
        size: the most entries kept (>= 1).
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"BoundedCache: size must be >= 1, got {size}")
        self.size = size
        self._items: OrderedDict[Hashable, tuple[tuple[object, ...], V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable, make: Callable[[], V], *, keep: Sequence[object] = ()) -> V:
        """The value cached under *key* (with the same *keep* objects), or ``make()``'s, cached."""
        found = self._items.get(key)
        if (
            found is not None
            and len(found[0]) == len(keep)
            and all(a is b for a, b in zip(found[0], keep, strict=True))
        ):
            self._items.move_to_end(key)
            return found[1]
        value = make()
        self._items[key] = (tuple(keep), value)
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        """Drop every entry."""
        self._items.clear()


class CappedTable(dict):  # type: ignore[type-arg]
    """A dict of at most *size* entries that starts again (empties) when :meth:`put` finds it full.

    Reads are a plain dict's (``table.get`` in C); writes go through :meth:`put`, which keeps the bound.

    Args:
        size: the most entries kept (>= 1).
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"CappedTable: size must be >= 1, got {size}")
        super().__init__()
        self.size = size

    def put(self, key: Hashable, value: object) -> None:
        """Store *value* under *key*, emptying the table first if it is full."""
        if len(self) >= self.size:
            self.clear()
        self[key] = value
