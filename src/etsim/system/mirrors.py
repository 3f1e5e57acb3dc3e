"""Collectives over groups with mirrored members (replica folding): which members run, and what mirrors can run.

Under replica folding (``workload/fold.py``) a mirrored rank never runs: it is the image ``g(rep)`` of its
representative under an element ``g`` of the fold's group of shifts, and messages to it are received by the
representative. A collective over a group with mirrored members is exact only if every mirrored member's part is its
representative's moved by ``g``: the same graph with peers relative to the rank (ring, direct), or graphs by position
(NCCL's, laid over nodes and NICs) where the mirror's graph is the representative's with every peer moved by ``g``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from etsim.algo.graph import AlgoGraph
from etsim.errors import FoldConflict

if TYPE_CHECKING:
    from etsim.system.algorithms.base import CollectiveAlgorithm

__all__ = ["Mirrors"]


class Mirrors:
    """Which members of a group run, and whether an algorithm's graphs let the others mirror them.

    Args:
        simulated: the ranks that run, or None: all of them.
        mirror_of: for a mirrored rank, its representative and the map ``g`` of the representative's ranks to the
            mirror's (``g(rep)`` is the rank); None: graphs by position are refused where members are mirrored.
    """

    def __init__(
        self,
        simulated: frozenset[int] | None,
        mirror_of: Callable[[int], tuple[int, Callable[[int], int]]] | None = None,
    ) -> None:
        self.simulated = simulated
        self.mirror_of = mirror_of
        self._members_run: dict[tuple[int, ...], int] = {}
        self._follow: dict[tuple[int, int, tuple[int, ...]], bool] = {}

    def members_run(self, group: tuple[int, ...]) -> int:
        """How many members of *group* run."""
        if self.simulated is None:
            return len(group)
        found = self._members_run.get(group)
        if found is None:
            found = self._members_run[group] = sum(1 for r in group if r in self.simulated)
        return found

    def check(
        self,
        graph: AlgoGraph | None,
        group: tuple[int, ...],
        label: str,
        where: str,
        graph_at: Callable[[int], AlgoGraph],
        algorithm: CollectiveAlgorithm,
    ) -> None:
        """Refuse (:class:`~etsim.errors.FoldConflict`) an algorithm whose mirrored members *group* cannot take.

        *graph*: the part's one graph (None: several phases), *graph_at*: the graph of a group position.
        """
        if self.members_run(group) == len(group) or (graph is not None and graph.relative_peers):
            return
        if graph is None or not self.follow(group, graph_at, algorithm):
            raise FoldConflict(
                f"{where}: algorithm {label!r} does not run, on group {list(group)[:8]}"
                f"{'…' if len(group) > 8 else ''}, graphs its mirrored members can take from the simulated ones "
                "(one graph with peers relative to the rank, or graphs that move with the ranks)" + algorithm.fold_hint
            )

    def follow(self, group: tuple[int, ...], graph_at: Callable[[int], AlgoGraph], algorithm: object) -> bool:
        """Whether each mirrored member's graph is its representative's (a member too), peers moved (cached)."""
        key = (id(algorithm), id(graph_at(0)), group)
        found = self._follow.get(key)
        if found is None:
            found = self._follow[key] = self._mirrors_follow(group, graph_at)
        return found

    def _mirrors_follow(self, group: tuple[int, ...], graph_at: Callable[[int], AlgoGraph]) -> bool:
        if self.mirror_of is None or self.simulated is None:
            return False
        index = {r: q for q, r in enumerate(group)}
        for q, rank in enumerate(group):
            if rank in self.simulated:
                continue
            rep, image = self.mirror_of(rank)
            if rep not in index:
                return False
            mine, theirs = graph_at(q), graph_at(index[rep])
            moved = [-1 if p < 0 else index.get(image(group[p]), -2) for p in theirs.peers]
            if mine.peers != moved or not mine.runs_like(theirs):
                return False
        return True
