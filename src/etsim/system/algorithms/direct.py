"""``direct``: every rank talks to every other rank at once (one step per phase).

==============  ==========================================================================
collective      graph (p ranks, buffer S as in ``collective_buffer_bytes``)
==============  ==========================================================================
all_reduce      direct reduce-scatter (chunk j of S/p to rank j, p−1 concurrent sends,
                reductions one after another) then direct all-gather of the reduced chunk
reduce_scatter  the first phase of all_reduce
all_gather      own chunk (S/p of the gathered output) to every other rank
all_to_all      p−1 concurrent sends of S/p
gather          every rank sends its S/p to root 0
scatter         root 0 sends chunk j (S/p) to rank j
broadcast       root 0 sends S to every rank
reduce          every rank sends S to root 0, which reduces them one after another
barrier         zero-byte messages between every pair
==============  ==========================================================================

On a fully connected network without contention each phase costs one message time; with a
single port per rank it costs p−1 of them (the network model decides). Symmetric collectives
use relative peers, so one cached graph serves every rank.

Data (annotations for :mod:`etsim.algo.verify`): chunk ``j`` is rank ``j``'s piece; each send
carries the piece its destination owns (all-to-all, reduce-scatter) or the sender's own
(all-gather, the all-reduce's second phase), and each receive stores or reduces it at its place.
Every graph is in place except the all-to-all's, whose own piece is an untimed setup copy.
"""

from __future__ import annotations

from etsim.algo.dataflow import IN_PLACE, OUT_OF_PLACE, Segment, seg
from etsim.algo.graph import AlgoGraph, AlgorithmBuilder
from etsim.chakra.graph import CollectiveType
from etsim.system.algorithms.base import ALGORITHMS, BuiltAlgorithm
from etsim.system.algorithms.steps import empty_graph

__all__ = ["DirectAlgorithm"]

C = CollectiveType
_ROOTED = frozenset({C.GATHER, C.SCATTER, C.BROADCAST, C.REDUCE})


def _exchange(
    b: AlgorithmBuilder,
    p: int,
    chunks: float,
    tag: int,
    *,
    after: int | None,
    reduce: bool,
    data: tuple[str, bool] | None = None,
) -> int | None:
    """Send *chunks* to every other rank (relative peers) and receive as much from each.

    *data* ``(buf, own)`` annotates the messages: with *own* every rank sends its own piece of
    *buf* and stores what it receives at the sender's place (a gather), else it sends each rank
    that rank's piece and receives (reduces, with *reduce*) its own (a scatter).

    Returns the node the next phase waits for: the last reduction (if *reduce*), else the
    last receive.
    """
    deps = [] if after is None else [after]

    def piece(off: int) -> Segment | None:
        return None if data is None else seg(data[0], off, rel=True)

    own = data is not None and data[1]
    for off in range(1, p):
        b.send(off, chunks, tag, deps=deps, name=f"d{tag}_send_{off}", src=piece(0 if own else off))
    last = after
    for off in range(1, p):
        into = piece(-off if own else 0)
        # A message to reduce lands in scratch; the reduction after it adds it in.
        land = seg(f"t{tag}", (off - 1) * int(chunks), int(chunks)) if reduce and into is not None else into
        got = b.recv(-off, chunks, tag, name=f"d{tag}_recv_{off}", dst=land)
        if reduce:
            deps = [got] + ([] if last is None else [last])
            add = (into, land) if into is not None else (None, None)
            last = b.reduce(chunks, deps=deps, name=f"d{tag}_reduce_{off}", dst=add[0], src=add[1])
        else:
            last = got
    return last


@ALGORITHMS.register("direct")
class DirectAlgorithm(BuiltAlgorithm):
    """Direct (all-pairs, one step per phase) algorithms; see the module docstring. Root is position 0."""

    name = "direct"
    verified_by_tests = True  # tests/system/algorithms/test_verify.py
    collectives = frozenset(
        {
            C.ALL_REDUCE,
            C.REDUCE_SCATTER,
            C.ALL_GATHER,
            C.ALL_TO_ALL,
            C.GATHER,
            C.SCATTER,
            C.BROADCAST,
            C.REDUCE,
            C.BARRIER,
        }
    )

    def shares_graph(self, collective: CollectiveType) -> bool:
        """Symmetric collectives use one graph with relative peers for every rank."""
        return collective not in _ROOTED

    def _build(self, collective: CollectiveType, p: int, position: int) -> AlgoGraph:
        if p == 1:
            return empty_graph()
        if collective in _ROOTED:
            return self._rooted(collective, p, position)
        b = AlgorithmBuilder(total_chunks=p if collective != C.BARRIER else 1, relative_peers=True, placement=IN_PLACE)
        if collective == C.BARRIER:
            _exchange(b, p, 0, 0, after=None, reduce=False)
        elif collective == C.ALL_GATHER:
            _exchange(b, p, 1, 0, after=None, reduce=False, data=("o", True))
        elif collective == C.ALL_TO_ALL:
            # Out of place: input chunk q goes to rank q, output chunk q comes from rank q, and the own
            # piece is an untimed setup copy (the graph has no node for it).
            b.graph.placement = (OUT_OF_PLACE,)
            b.setup_copy(1, src=seg("i", 0, 1, rel=True), dst=seg("o", 0, 1, rel=True))
            for off in range(1, p):
                b.send(off, 1, 0, name=f"d0_send_{off}", src=seg("i", off, rel=True))
            for off in range(1, p):
                b.recv(-off, 1, 0, name=f"d0_recv_{off}", dst=seg("o", -off, rel=True))
        else:
            # In place, a reduce-scatter's output is its own piece of the input.
            buf = "i" if collective == C.REDUCE_SCATTER else "o"
            last = _exchange(b, p, 1, 0, after=None, reduce=True, data=(buf, False))
            if collective == C.ALL_REDUCE:
                _exchange(b, p, 1, 1, after=last, reduce=False, data=(buf, True))
        return b.build()

    @staticmethod
    def _rooted(collective: CollectiveType, p: int, position: int) -> AlgoGraph:
        whole = collective in (C.BROADCAST, C.REDUCE)
        b = AlgorithmBuilder(total_chunks=1 if whole else p, placement=IN_PLACE)
        to_root = collective in (C.GATHER, C.REDUCE)
        reduce = collective == C.REDUCE
        # Whole-buffer collectives move chunk 0; gather and scatter move rank j's piece j.
        if position != 0:
            if to_root:
                b.send(0, 1, 0, name="to_root", src=seg("i", 0))
            else:
                b.recv(0, 1, 0, name="from_root", dst=seg("o", 0))
            return b.build()
        last: int | None = None
        for peer in range(1, p):
            piece = seg("o", 0 if whole else peer)
            if not to_root:
                b.send(peer, 1, 0, name=f"to_{peer}", src=seg("i", 0 if whole else peer))
                continue
            land = seg("t", peer) if reduce else piece  # a message to reduce lands in scratch first
            got = b.recv(peer, 1, 0, name=f"from_{peer}", dst=land)
            if collective == C.REDUCE:
                deps = [got] + ([] if last is None else [last])
                last = b.reduce(1, deps=deps, name=f"reduce_{peer}", dst=piece, src=land)
        return b.build()
