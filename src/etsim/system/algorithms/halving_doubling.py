"""``halving_doubling``: recursive halving and doubling between partners ``rank XOR 2^k`` (p = 2^K).

==============  ==========================================================================
collective      graph (p = 2^K ranks, buffer S as in ``collective_buffer_bytes``)
==============  ==========================================================================
all_reduce      Rabenseifner: recursive-halving reduce-scatter (partners at distance p/2,
                p/4, …, 1 exchange S/2, S/4, …, S/p and reduce) then recursive-doubling
                all-gather (distance 1 … p/2, sizes S/p … S/2): 2·K messages per rank,
                2(p−1)/p·S sent
reduce_scatter  the recursive-halving half (K steps)
all_gather      the recursive-doubling half (K steps, S = gathered output)
==============  ==========================================================================

After the reduce-scatter, rank r holds chunk r. Group sizes that are not powers of two are
refused (:meth:`HalvingDoublingAlgorithm.supports` says so).

Data (annotations for :mod:`etsim.algo.verify`; in place): halving keeps the half of the held
range whose ``dist`` bit matches the rank's and sends the other (the partner's half lands in
scratch and the reduction adds it in); doubling sends the held block (``size`` chunks from ``r``
with its low bits cleared) and stores the partner's beside it.
"""

from __future__ import annotations

from etsim.algo.dataflow import IN_PLACE, seg
from etsim.algo.graph import AlgoGraph, AlgorithmBuilder
from etsim.chakra.graph import CollectiveType
from etsim.system.algorithms.base import ALGORITHMS, BuiltAlgorithm
from etsim.system.algorithms.steps import empty_graph

__all__ = ["HalvingDoublingAlgorithm"]

C = CollectiveType


@ALGORITHMS.register("halving_doubling")
class HalvingDoublingAlgorithm(BuiltAlgorithm):
    """Recursive halving / doubling (see the module docstring)."""

    name = "halving_doubling"
    verified_by_tests = True  # tests/system/algorithms/test_verify.py
    collectives = frozenset({C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER})

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """As the base class, and refuse group sizes that are not powers of two."""
        reason = super().supports(collective, group_size)
        if reason is None and group_size & (group_size - 1):
            reason = (
                f"algorithm {self.name!r} needs a power-of-two group size, not {group_size} "
                f"(use ring or direct for {group_size} ranks)"
            )
        return reason

    @staticmethod
    def _build(collective: CollectiveType, p: int, r: int) -> AlgoGraph:
        if p == 1:
            return empty_graph()
        b = AlgorithmBuilder(total_chunks=p, placement=IN_PLACE)
        tag = 0
        last: int | None = None
        buf = "i" if collective == C.REDUCE_SCATTER else "o"  # in place, the output lies in the input
        if collective in (C.ALL_REDUCE, C.REDUCE_SCATTER):
            dist, size = p // 2, p // 2  # this step keeps half of the `2·size` chunks held
            base = 0  # the held range is [base, base + 2·size)
            while dist >= 1:
                deps = [] if last is None else [last]
                keep = base + (r & dist)
                give = base + ((r & dist) ^ dist)
                b.send(r ^ dist, size, tag, deps=deps, name=f"halve{tag}_send", src=seg(buf, give))
                land = seg(f"t{tag}", 0, size)  # lands in scratch; the reduction adds it into the kept half
                got = b.recv(r ^ dist, size, tag, name=f"halve{tag}_recv", dst=land)
                base = keep
                last = b.reduce(size, deps=[got, *deps], name=f"halve{tag}_reduce", dst=seg(buf, keep), src=land)
                dist //= 2
                size //= 2
                tag += 1
        if collective in (C.ALL_REDUCE, C.ALL_GATHER):
            # Step k sends everything held: the reduced chunk and every block received so far.
            held = [] if last is None else [last]
            dist = size = 1
            while dist < p:
                mine, theirs = r & ~(dist - 1), (r ^ dist) & ~(dist - 1)
                b.send(r ^ dist, size, tag, deps=held, name=f"double{tag}_send", src=seg(buf, mine))
                held = [*held, b.recv(r ^ dist, size, tag, name=f"double{tag}_recv", dst=seg(buf, theirs))]
                dist *= 2
                size *= 2
                tag += 1
        return b.build()


#: Short alias.
ALGORITHMS.register("hd")(HalvingDoublingAlgorithm)
