"""``hierarchical``: ring phases per dimension of a multi-dimensional system (bandwidth-aware order).

Ranks are laid out as in the topologies, dimension 0 fastest: ``rank = x0 + n0·x1 + n0·n1·x2 + …``.
Each phase is a ring among the ranks that differ only in one coordinate.

==============  ==========================================================================
collective      graph (dims n0 × n1 × … × n(k−1) = p, buffer S)
==============  ==========================================================================
all_reduce      ring reduce-scatter in dimension 0 (n0−1 steps of S/n0), then in dimension
                1 on the 1/n0 kept (steps of S/(n0·n1)), …, then in the last dimension —
                which with the following all-gather is a ring all-reduce there — and ring
                all-gathers back from the last dimension to dimension 0. The largest
                messages use dimension 0, the smallest the last one.
reduce_scatter  the reduce-scatter half
all_gather      the all-gather half (S = gathered output; dimension 0 moves the most)
==============  ==========================================================================

Without ``dims`` (or with one dimension) every collective is the plain ring. A communicator group smaller than
the system (a tensor-parallel group inside a node, a data-parallel group across nodes) runs over the dimensions it
spans: the group must hold every rank of those dimensions that agrees with it in the others (a whole
sub-grid), in rank order; its phases are those dimensions' rings. A group whose ranks differ in one coordinate only
(the first and last pipeline stage's GPUs, whose tied embedding Megatron-LM all-reduces) runs that dimension's ring
over its ranks, whether or not it holds the whole line.

Data (annotations for :mod:`etsim.algo.verify`; in place): chunks are numbered like ranks. The
dimension-``d`` phase works on the chunks that agree with the rank in coordinates below ``d``;
its ring block ``b`` is those whose coordinate ``d`` is ``b`` (a strided segment), so after the
reduce-scatter phases rank ``r`` holds chunk ``r``. The baseline's per-dimension all-reduces use
contiguous blocks of the whole buffer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from etsim.algo.dataflow import IN_PLACE, Segment, seg
from etsim.algo.graph import AlgoGraph, AlgorithmBuilder
from etsim.chakra.graph import CollectiveType
from etsim.errors import ConfigError
from etsim.system.algorithms.base import ALGORITHMS, BuiltAlgorithm
from etsim.system.algorithms.steps import empty_graph, ring_all_gather, ring_reduce_scatter

__all__ = ["HierarchicalAlgorithm", "HierarchicalBaselineAlgorithm"]

C = CollectiveType


@ALGORITHMS.register("hierarchical")
class HierarchicalAlgorithm(BuiltAlgorithm):
    """Dimension-by-dimension ring composition (see the module docstring).

    Args:
        dims: NPUs per dimension, dimension 0 first (``(4, 8)`` for 4×8); their product must be
            the group size. ``None`` treats the group as one dimension.
    """

    name = "hierarchical"
    verified_by_tests = True  # tests/system/algorithms/test_verify.py
    collectives = frozenset({C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER})
    #: The system passes the topology's dimension sizes as ``dims``.
    needs_dims = True
    #: All-reduce as one all-reduce per dimension instead of reduce-scatter/all-gather phases.
    baseline = False

    def __init__(self, dims: Sequence[int] | None = None, *, phase_delay: float = 0.0) -> None:
        if dims is not None:
            dims = tuple(int(d) for d in dims)
            if not dims or any(d < 1 for d in dims):
                raise ConfigError(f"hierarchical: dims must be positive sizes, not {dims}")
        self.dims: tuple[int, ...] | None = dims
        #: ns between consecutive dimension phases (``SystemConfig.phase_delay``).
        self.phase_delay = phase_delay
        self._spanned: dict[tuple[int, ...], HierarchicalAlgorithm] = {}
        super().__init__()

    def for_call(self, collective: CollectiveType, size: int, group: tuple[int, ...]) -> HierarchicalAlgorithm:
        """This algorithm over the dimensions *group* spans, when it is a whole sub-grid of ``dims`` in rank order."""
        dims = self.dims
        if dims is None or len(group) == math.prod(dims) or len(group) < 2:
            return self
        strides = [math.prod(dims[:d]) for d in range(len(dims))]
        coords = [tuple((r // s) % n for s, n in zip(strides, dims, strict=True)) for r in group]
        spanned = tuple(d for d in range(len(dims)) if len({c[d] for c in coords}) > 1)
        sub = tuple(dims[d] for d in spanned)
        distinct = len(set(coords)) == len(group) and list(group) == sorted(group)
        if distinct and len(spanned) == 1:
            sub = (len(group),)  # ranks of one line, all of it or not: that dimension's ring over them
        elif not (distinct and len(group) == math.prod(sub)):
            return self  # (supports() names the mismatch)
        if sub not in self._spanned:
            self._spanned[sub] = type(self)(sub, phase_delay=self.phase_delay)
        return self._spanned[sub]

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """As the base class, and refuse a group size other than the product of ``dims``."""
        reason = super().supports(collective, group_size)
        if reason is None and self.dims is not None and math.prod(self.dims) != group_size:
            shape = "x".join(map(str, self.dims))
            reason = (
                f"algorithm {self.name!r} with dims {shape} covers {math.prod(self.dims)} ranks, and a group of "
                f"{group_size} is not a whole sub-grid of them (every rank of the dimensions it spans, in rank order)"
            )
        return reason

    def _build(self, collective: CollectiveType, p: int, r: int) -> AlgoGraph:
        if p == 1:
            return empty_graph()
        dims = self.dims or (p,)
        b = AlgorithmBuilder(total_chunks=p, placement=IN_PLACE)
        buf = "i" if collective == C.REDUCE_SCATTER else "o"  # in place, the output lies in the input
        # Per dimension: ring neighbours of r, the chunks a step moves there, and its ring blocks.
        phases = []
        blocks = []
        coords = []
        stride = held = 1
        for n in dims:
            x = (r // stride) % n
            nxt = r + ((x + 1) % n - x) * stride
            prv = r + ((x - 1) % n - x) * stride
            held *= n
            phases.append((n, nxt, prv, p // held))
            coords.append(x)
            blocks.append(self._blocks(buf, x, n, r % stride, stride, p // held, held))
            stride *= n
        tag = 0
        last: list[int] = []

        def boundary(deps: list[int]) -> list[int]:
            if not self.phase_delay or not deps:
                return deps
            return [b.reduce(0, deps=deps, duration_ns=self.phase_delay, name="phase")]

        if self.baseline and collective == C.ALL_REDUCE:
            # One full all-reduce per dimension, in order, over contiguous blocks of the whole buffer.
            for (n, nxt, prv, _), x in zip(phases, coords, strict=True):
                whole = self._blocks(buf, x, n, 0, p // n, p // n, 1)
                after = boundary(last)
                last, tag = ring_reduce_scatter(b, nxt, prv, n - 1, p // n, tag=tag, after=after, block=whole)
                # The next dimension reduces into the blocks this all-gather forwards: it waits for the last send.
                last, tag = ring_all_gather(
                    b, nxt, prv, n - 1, p // n, tag=tag, after=last, block=whole, wait_sends=True
                )
            return b.build()
        if collective in (C.ALL_REDUCE, C.REDUCE_SCATTER):
            for (n, nxt, prv, chunks), block in zip(phases, blocks, strict=True):
                after = boundary(last)
                last, tag = ring_reduce_scatter(b, nxt, prv, n - 1, chunks, tag=tag, after=after, block=block)
        if collective in (C.ALL_REDUCE, C.ALL_GATHER):
            for i, ((n, nxt, prv, chunks), block) in enumerate(zip(reversed(phases), reversed(blocks), strict=True)):
                # The last dimension's reduce-scatter and all-gather form one all-reduce phase.
                after = last if i == 0 and collective == C.ALL_REDUCE else boundary(last)
                last, tag = ring_all_gather(b, nxt, prv, n - 1, chunks, tag=tag, after=after, block=block)
        return b.build()

    @staticmethod
    def _blocks(buf: str, x: int, n: int, first: int, step: int, cnt: int, stride: int) -> Callable[[int], Segment]:
        """Ring blocks of a phase at ring position *x* of *n*.

        Block ``b`` is *cnt* chunks every *stride* from ``first + b·step``.
        """

        def block(j: int) -> Segment:
            return seg(buf, first + ((x + j) % n) * step, cnt, stride=stride)

        return block


@ALGORITHMS.register("hierarchical_baseline")
class HierarchicalBaselineAlgorithm(HierarchicalAlgorithm):
    """As ``hierarchical``, but an all-reduce is one full ring all-reduce per dimension.

    Each dimension reduces the whole buffer in turn.
    """

    name = "hierarchical_baseline"
    verified_by_tests = True  # tests/system/algorithms/test_verify.py
    baseline = True
