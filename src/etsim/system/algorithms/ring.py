"""``ring``: every collective as steps between ring neighbours (position ``i`` sends to ``i + 1``).

==============  ==========================================================================
collective      graph (p ranks, buffer S as in ``collective_buffer_bytes``)
==============  ==========================================================================
all_reduce      reduce-scatter then all-gather: 2(p−1) steps of S/p to the next rank, the
                first p−1 followed by a reduction (bandwidth-optimal, 2(p−1)/p·S sent)
reduce_scatter  p−1 steps of S/p with reductions
all_gather      p−1 steps of S/p (S = the gathered output)
all_to_all      relay: step k forwards p−k chunks of S/p (p(p−1)/2 in all)
broadcast       chain 0 → 1 → … → p−1 from root 0, pipelined in ``segments`` segments
reduce          chain 1 → 2 → … → p−1 → 0 to root 0, pipelined in ``segments`` segments
barrier         p−1 steps of zero-byte tokens (a ring all-gather of nothing)
==============  ==========================================================================

Symmetric collectives use relative peers, so one cached graph serves every rank.

Data (annotations for :mod:`etsim.algo.verify`): the reduce-scatter and all-gather phases move
block ``r − s − 1`` (resp. ``r − s``) of the buffer at step ``s``, in place, and leave rank ``r``
owning chunk ``r``; the chains move segment ``s`` as chunk ``s``, in place. The all-to-all relay is
out of place: the receiver keeps the chunk meant for it (``o`` at its origin's offset) and stores
the ones it forwards in a scratch buffer per step (``s1``, ``s2``, …); the copy of the rank's own
piece from input to output is declared as an untimed setup copy (the graph has no node for it).
"""

from __future__ import annotations

from etsim.algo.dataflow import IN_PLACE, OUT_OF_PLACE, Segment, seg
from etsim.algo.graph import AlgoGraph, AlgorithmBuilder
from etsim.chakra.graph import CollectiveType
from etsim.errors import ConfigError
from etsim.system.algorithms.base import ALGORITHMS, BuiltAlgorithm
from etsim.system.algorithms.steps import (
    chain_broadcast,
    chain_reduce,
    empty_graph,
    ring_all_gather,
    ring_reduce_scatter,
)

__all__ = ["RingAlgorithm"]

C = CollectiveType


@ALGORITHMS.register("ring")
class RingAlgorithm(BuiltAlgorithm):
    """Ring algorithms (see the module docstring).

    Args:
        segments: number of pipeline segments of the rooted chain collectives (broadcast,
            reduce); 1 is the plain chain, ``(p−2+k)(α + Sβ/k)`` with k segments.
    """

    name = "ring"
    verified_by_tests = True  # tests/system/algorithms/test_verify.py
    collectives = frozenset(
        {C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER, C.ALL_TO_ALL, C.BROADCAST, C.REDUCE, C.BARRIER}
    )

    def __init__(self, segments: int = 1) -> None:
        if segments < 1:
            raise ConfigError(f"ring: segments must be at least 1, not {segments}")
        self.segments = segments
        super().__init__()

    def shares_graph(self, collective: CollectiveType) -> bool:
        """Symmetric collectives use one graph with relative peers for every rank."""
        return collective not in (C.BROADCAST, C.REDUCE)

    def _build(self, collective: CollectiveType, p: int, position: int) -> AlgoGraph:
        if p == 1:
            return empty_graph()
        if collective == C.BROADCAST:
            b = AlgorithmBuilder(total_chunks=self.segments, placement=IN_PLACE)
            chain_broadcast(b, position, p, (position - 1) % p, (position + 1) % p, self.segments)
            return b.build()
        if collective == C.REDUCE:
            b = AlgorithmBuilder(total_chunks=self.segments, placement=IN_PLACE)
            order = (position - 1) % p  # the chain starts right after the root and ends at it
            chain_reduce(b, order, p, (position - 1) % p, (position + 1) % p, self.segments)
            return b.build()
        if collective == C.BARRIER:
            b = AlgorithmBuilder(total_chunks=1, relative_peers=True)
            ring_all_gather(b, 1, -1, p - 1, 0, tag=0)
            return b.build()
        if collective == C.ALL_TO_ALL:
            b = AlgorithmBuilder(total_chunks=p, relative_peers=True, placement=OUT_OF_PLACE)
            b.setup_copy(1, src=seg("i", 0, 1, rel=True), dst=seg("o", 0, 1, rel=True))  # own piece, not timed
            got: list[int] = []
            for k in range(1, p):
                # Step k carries chunks for ranks r+1 … r+p-k (from the input, then from scratch s{k-1});
                # the receiver keeps the first (from rank r-k+1) and stores the rest in s{k}.
                src = seg("i", 1, p - 1, rel=True) if k == 1 else seg(f"s{k - 1}", 1, p - k, rel=True)
                b.send(1, p - k, k - 1, deps=got, name=f"a2a{k}_send", src=src)
                dst = [seg("o", -k, 1, rel=True)]
                if p - k - 1:
                    dst.append(seg(f"s{k}", 1, p - k - 1, rel=True))
                got = [b.recv(-1, p - k, k - 1, name=f"a2a{k}_recv", dst=dst)]
            return b.build()
        b = AlgorithmBuilder(total_chunks=p, relative_peers=True, placement=IN_PLACE)
        tag = 0
        last: list[int] = []
        # In place, a reduce-scatter's output lies in its input, so its phase addresses the input.
        buf = "i" if collective == C.REDUCE_SCATTER else "o"

        def block(j: int) -> Segment:
            return seg(buf, j, rel=True)

        if collective in (C.ALL_REDUCE, C.REDUCE_SCATTER):
            last, tag = ring_reduce_scatter(b, 1, -1, p - 1, 1, tag=tag, block=block)
        if collective in (C.ALL_REDUCE, C.ALL_GATHER):
            ring_all_gather(b, 1, -1, p - 1, 1, tag=tag, after=last, block=block)
        return b.build()
