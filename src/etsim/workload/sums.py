"""Sums of message sizes as the event path's sequential additions give them, computed at once where that is exact."""

from __future__ import annotations

from typing import Any

__all__ = ["add_all", "add_repeated"]


def add_all(total: float, sizes: Any) -> float:
    """``total`` plus every size in turn, as sequential additions would give it."""
    whole = float(sizes.sum()) if len(sizes) else 0.0
    if total.is_integer() and bool((sizes == sizes.round()).all()) and abs(total) + abs(sizes).sum() < 2.0**53:
        return total + whole  # every partial sum is an exact integer
    for size in sizes.tolist():
        total += size
    return total


def add_repeated(total: float, size: float, count: int) -> float:
    """``total`` plus *count* times *size*, as *count* sequential additions would give it."""
    if size.is_integer() and total.is_integer() and abs(total) + abs(size) * count < 2.0**53:
        return total + size * count  # every partial sum is an exact integer
    for _ in range(count):
        total += size
    return total
