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

Data annotations (for :mod:`etsim.chakra.verify`) follow the natives': ``astra_ring``'s relay sends
the chunks of etsim's ring relay one message at a time, out of place (in place a receive would
overwrite input it has not yet sent, since every send waits for the previous receive);
``astra_halving_doubling`` splits by the low bits first, so it moves strided sets of chunks
(``c ≡ r mod 2·dist``).
"""

from __future__ import annotations

from etsim.chakra.algorithm import AlgoGraph, AlgorithmBuilder
from etsim.chakra.dataflow import IN_PLACE, OUT_OF_PLACE, Segment, seg
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
    verified_by_tests = True  # tests/system/algorithms/test_verify.py

    def _build(self, collective: CollectiveType, p: int, position: int) -> AlgoGraph:
        if collective != C.ALL_TO_ALL:
            return super()._build(collective, p, position)
        if p == 1:
            return empty_graph()
        # Out of place: in place, each receive would overwrite input not yet sent (sends wait on receives).
        b = AlgorithmBuilder(total_chunks=p, relative_peers=True, placement=OUT_OF_PLACE)
        b.setup_copy(1, src=seg("i", 0, 1, rel=True), dst=seg("o", 0, 1, rel=True))  # own piece, not timed
        prev_send: list[int] = []
        prev_recv: list[int] = []
        # Message (k, j), k = 1 … p-1, j = 0 … p-k-1, carries what the ring relay's step k carries at
        # place j: the chunk for rank r+1+j, from the input (k = 1) or scratch s{k-1}; the receiver
        # keeps place 0 (its own, from rank r-k+1) and stores the rest in s{k}.
        i = 0
        for k in range(1, p):
            for j in range(p - k):
                src = seg("i", 1 + j, 1, rel=True) if k == 1 else seg(f"s{k - 1}", 1 + j, 1, rel=True)
                dst = seg("o", -k, 1, rel=True) if j == 0 else seg(f"s{k}", j, 1, rel=True)
                prev_send = [b.send(1, 1, 0, deps=prev_recv + prev_send, name=f"a2a{i}_send", src=src)]
                prev_recv = [b.recv(-1, 1, 0, deps=prev_recv, name=f"a2a{i}_recv", dst=dst)]
                i += 1
        return b.build()


class AstraHalvingDoublingAlgorithm(HalvingDoublingAlgorithm):
    """``halving_doubling`` in ASTRA-sim's step order (see the module docstring)."""

    name = "astra_halving_doubling"
    verified_by_tests = True  # tests/system/algorithms/test_verify.py

    @staticmethod
    def _build(collective: CollectiveType, p: int, r: int) -> AlgoGraph:
        if p == 1:
            return empty_graph()
        b = AlgorithmBuilder(total_chunks=p, placement=IN_PLACE)
        last: list[int] = []
        sizes = []
        dist, size = 1, p // 2
        while dist < p:
            sizes.append((dist, size))
            dist, size = dist * 2, size // 2
        tag = 0
        buf = "i" if collective == C.REDUCE_SCATTER else "o"  # in place, the output lies in the input

        def chunks_of(q: int, dist: int, size: int) -> Segment:
            # The chunks c ≡ q (mod 2·dist): what rank q keeps at this step (size of them).
            return seg(buf, q % (2 * dist), size, stride=2 * dist)

        if collective in (C.ALL_REDUCE, C.REDUCE_SCATTER):
            for step, (dist, size) in enumerate(sizes):
                b.send(r ^ dist, size, tag, deps=last, name=f"rs{tag}_send", src=chunks_of(r ^ dist, dist, size))
                mine = chunks_of(r, dist, size)
                if step:  # the message lands in scratch and the (charged) reduction adds it in
                    land = seg(f"t{tag}", 0, size)
                    got = b.recv(r ^ dist, size, tag, deps=last, name=f"rs{tag}_recv", dst=land)
                    last = [b.reduce(size, deps=[got], name=f"rs{tag}_reduce", dst=mine, src=land)]
                else:  # the first reduction is not charged: the receive itself adds the message in
                    last = [b.recv(r ^ dist, size, tag, deps=last, name=f"rs{tag}_recv", dst=mine, reduce=True)]
                tag += 1
        if collective in (C.ALL_REDUCE, C.ALL_GATHER):
            for dist, size in reversed(sizes):
                b.send(r ^ dist, size, tag, deps=last, name=f"ag{tag}_send", src=chunks_of(r, dist, size))
                got = b.recv(r ^ dist, size, tag, deps=last, name=f"ag{tag}_recv", dst=chunks_of(r ^ dist, dist, size))
                last = [got]
                tag += 1
        return b.build()


class AstraDirectAlgorithm(DirectAlgorithm):
    """``direct`` with concurrent reductions (see the module docstring)."""

    name = "astra_direct"
    verified_by_tests = True  # tests/system/algorithms/test_verify.py

    def _build(self, collective: CollectiveType, p: int, position: int) -> AlgoGraph:
        if collective not in (C.ALL_REDUCE, C.REDUCE_SCATTER) or p == 1:
            return super()._build(collective, p, position)
        b = AlgorithmBuilder(total_chunks=p, relative_peers=True, placement=IN_PLACE)
        buf = "i" if collective == C.REDUCE_SCATTER else "o"  # in place, the output lies in the input
        own = seg(buf, 0, rel=True)
        for off in range(1, p):
            b.send(off, 1, 0, name=f"rs_send_{off}", src=seg(buf, off, rel=True))
        reduced = [
            b.reduce(1, deps=[b.recv(-off, 1, 0, name=f"rs_recv_{off}", dst=seg("t", off))], dst=own, src=seg("t", off))
            for off in range(1, p)
        ]
        if collective == C.ALL_REDUCE:
            for off in range(1, p):
                b.send(off, 1, 1, deps=reduced, name=f"ag_send_{off}", src=own)
            for off in range(1, p):
                b.recv(-off, 1, 1, name=f"ag_recv_{off}", dst=seg(buf, -off, rel=True))
        return b.build()
