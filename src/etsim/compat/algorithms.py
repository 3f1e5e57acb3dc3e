"""ASTRA-sim's own versions of ``ring`` and ``halvingDoubling``, used by ``etsim astra``.

They are published through the ``etsim.collectives`` entry points of this package (names
``astra_ring``, ``astra_direct``, ``astra_halving_doubling``), like any third-party algorithm.

They differ from etsim's natives only where ASTRA-sim's state machines do something else, so
that compatibility runs reproduce its numbers:

- ``astra_ring`` all-to-all sends the p(p−1)/2 relayed chunks as that many sequential
  single-chunk messages to the next rank (etsim's ``ring`` forwards p−k chunks in one message at
  step k); every other collective is etsim's ``ring``.
- ``astra_direct`` reduces each received block on arrival, concurrently (ASTRA-sim charges one
  reduction time for a direct reduce-scatter); an all-reduce's second phase starts when every
  reduction is done (exact on FullyConnected and Switch; ASTRA-sim releases it packet by packet
  in receipt order, which only differs when hop counts differ, i.e. on a Ring).
- ``astra_halving_doubling`` exchanges with partners at distance 1, 2, …, p/2 while halving the
  message (S/2, S/4, …, S/p), then back; the reduction after the first exchange is not charged
  (ASTRA-sim's closed form sums reductions from the second step on).
"""

from __future__ import annotations

from etsim.chakra.algorithm import AlgoGraph, AlgorithmBuilder
from etsim.chakra.graph import CollectiveType
from etsim.system.algorithms.direct import DirectAlgorithm
from etsim.system.algorithms.halving_doubling import HalvingDoublingAlgorithm
from etsim.system.algorithms.ring import RingAlgorithm
from etsim.system.algorithms.steps import empty_graph

__all__ = ["AstraDirectAlgorithm", "AstraHalvingDoublingAlgorithm", "AstraRingAlgorithm"]

C = CollectiveType


class AstraRingAlgorithm(RingAlgorithm):
    """``ring`` with ASTRA-sim's quadratic all-to-all (see the module docstring)."""

    name = "astra_ring"

    def _build(self, collective: CollectiveType, p: int, position: int) -> AlgoGraph:
        if collective != C.ALL_TO_ALL:
            return super()._build(collective, p, position)
        if p == 1:
            return empty_graph()
        b = AlgorithmBuilder(total_chunks=p, relative_peers=True)
        prev_send: list[int] = []
        prev_recv: list[int] = []
        for i in range(p * (p - 1) // 2):
            prev_send = [b.send(1, 1, 0, deps=prev_recv + prev_send, name=f"a2a{i}_send")]
            prev_recv = [b.recv(-1, 1, 0, deps=prev_recv, name=f"a2a{i}_recv")]
        return b.build()


class AstraHalvingDoublingAlgorithm(HalvingDoublingAlgorithm):
    """``halving_doubling`` in ASTRA-sim's step order (see the module docstring)."""

    name = "astra_halving_doubling"

    @staticmethod
    def _build(collective: CollectiveType, p: int, r: int) -> AlgoGraph:
        if p == 1:
            return empty_graph()
        b = AlgorithmBuilder(total_chunks=p)
        last: list[int] = []
        sizes = []
        dist, size = 1, p // 2
        while dist < p:
            sizes.append((dist, size))
            dist, size = dist * 2, size // 2
        tag = 0
        if collective in (C.ALL_REDUCE, C.REDUCE_SCATTER):
            for step, (dist, size) in enumerate(sizes):
                b.send(r ^ dist, size, tag, deps=last, name=f"rs{tag}_send")
                got = b.recv(r ^ dist, size, tag, deps=last, name=f"rs{tag}_recv")
                last = [b.reduce(size, deps=[got], name=f"rs{tag}_reduce")] if step else [got]
                tag += 1
        if collective in (C.ALL_REDUCE, C.ALL_GATHER):
            for dist, size in reversed(sizes):
                b.send(r ^ dist, size, tag, deps=last, name=f"ag{tag}_send")
                last = [b.recv(r ^ dist, size, tag, deps=last, name=f"ag{tag}_recv")]
                tag += 1
        return b.build()


class AstraDirectAlgorithm(DirectAlgorithm):
    """``direct`` with concurrent reductions (see the module docstring)."""

    name = "astra_direct"

    def _build(self, collective: CollectiveType, p: int, position: int) -> AlgoGraph:
        if collective not in (C.ALL_REDUCE, C.REDUCE_SCATTER) or p == 1:
            return super()._build(collective, p, position)
        b = AlgorithmBuilder(total_chunks=p, relative_peers=True)
        for off in range(1, p):
            b.send(off, 1, 0, name=f"rs_send_{off}")
        reduced = [b.reduce(1, deps=[b.recv(-off, 1, 0, name=f"rs_recv_{off}")]) for off in range(1, p)]
        if collective == C.ALL_REDUCE:
            for off in range(1, p):
                b.send(off, 1, 1, deps=reduced, name=f"ag_send_{off}")
            for off in range(1, p):
                b.recv(-off, 1, 1, name=f"ag_recv_{off}")
        return b.build()
