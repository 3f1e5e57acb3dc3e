"""``tree``: binary-tree reductions and broadcasts; all-reduce on a double binary tree.

==============  ==========================================================================
collective      graph (p ranks, buffer S as in ``collective_buffer_bytes``)
==============  ==========================================================================
all_reduce      double binary tree: two complementary binary trees each carry half of S;
                in each, children send their half to the parent, which reduces them one
                after another and passes the sum up; the root then broadcasts it down
                (not pipelined). Both trees run at once.
broadcast       root 0 sends S down one binary tree
reduce          S reduced up one binary tree to root 0
==============  ==========================================================================

The first tree is the binary heap over positions (root 0, children of i are 2i+1 and 2i+2,
depth ⌊log2 p⌋); the second is its mirror image (position i ↦ p−1−i, root p−1). Like NCCL's
double binary tree, with an even number of ranks the leaves of one tree are exactly the
interior nodes of the other, so no rank forwards data in both trees. Without contention both
all-reduce halves take 2⌊log2 p⌋ message times of S/2.

Data (annotations for :mod:`etsim.algo.verify`; in place): the first tree carries chunk 0, the
second chunk 1 (broadcast and reduce: the one chunk); a child's partial lands in scratch and the
reduction after the receive adds it into the parent's chunk; the root's result is stored down the
tree.
"""

from __future__ import annotations

from etsim.algo.dataflow import IN_PLACE, seg
from etsim.algo.graph import AlgoGraph, AlgorithmBuilder
from etsim.chakra.graph import CollectiveType
from etsim.system.algorithms.base import ALGORITHMS, BuiltAlgorithm
from etsim.system.algorithms.steps import empty_graph, heap_tree

__all__ = ["TreeAlgorithm"]

C = CollectiveType


def _tree_reduce(
    b: AlgorithmBuilder, parent: int, children: list[int], chunks: float, tag: int, chunk: int = 0
) -> int | None:
    """Receive from each child and reduce (in turn), then send to *parent* (-1: none); data: output *chunk*.

    Returns the last reduction (None for a leaf).
    """
    last: int | None = None
    for i, child in enumerate(children):
        land = seg(f"t{tag}", i)  # the child's partial lands here; the reduction adds it in
        got = b.recv(child, chunks, tag, name=f"t{tag}_up_recv_{child}", dst=land)
        deps = [got] + ([] if last is None else [last])
        last = b.reduce(chunks, deps=deps, name=f"t{tag}_up_reduce_{child}", dst=seg("o", chunk), src=land)
    if parent >= 0:
        b.send(parent, chunks, tag, deps=[] if last is None else [last], name=f"t{tag}_up_send", src=seg("o", chunk))
    return last


def _tree_broadcast(
    b: AlgorithmBuilder, parent: int, children: list[int], chunks: float, tag: int, after: int | None, chunk: int = 0
) -> None:
    """Receive from *parent* (-1: the root, which waits for *after*) and send to every child; data: output *chunk*."""
    ready = b.recv(parent, chunks, tag, name=f"t{tag}_down_recv", dst=seg("o", chunk)) if parent >= 0 else after
    for child in children:
        deps = [] if ready is None else [ready]
        b.send(child, chunks, tag, deps=deps, name=f"t{tag}_down_send_{child}", src=seg("o", chunk))


@ALGORITHMS.register("tree")
class TreeAlgorithm(BuiltAlgorithm):
    """Binary-tree algorithms; all-reduce on a double binary tree (see the module docstring)."""

    name = "tree"
    verified_by_tests = True  # tests/system/algorithms/test_verify.py
    collectives = frozenset({C.ALL_REDUCE, C.BROADCAST, C.REDUCE})

    @staticmethod
    def _build(collective: CollectiveType, p: int, r: int) -> AlgoGraph:
        if p == 1:
            return empty_graph()
        parent, children = heap_tree(p)
        if collective == C.BROADCAST:
            b = AlgorithmBuilder(total_chunks=1, placement=IN_PLACE)
            _tree_broadcast(b, parent[r], children[r], 1, 0, None)
        elif collective == C.REDUCE:
            b = AlgorithmBuilder(total_chunks=1, placement=IN_PLACE)
            _tree_reduce(b, parent[r], children[r], 1, 0)
        else:
            b = AlgorithmBuilder(total_chunks=2, placement=IN_PLACE)
            mparent, mchildren = heap_tree(p, mirrored=True)
            # Tags: 0/1 up the first/second tree, 2/3 down them; the first tree carries chunk 0, the second chunk 1.
            last1 = _tree_reduce(b, parent[r], children[r], 1, 0, 0)
            last2 = _tree_reduce(b, mparent[r], mchildren[r], 1, 1, 1)
            _tree_broadcast(b, parent[r], children[r], 1, 2, last1, 0)
            _tree_broadcast(b, mparent[r], mchildren[r], 1, 3, last2, 1)
        return b.build()
