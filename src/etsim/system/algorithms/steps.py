"""Building blocks shared by the native algorithms: ring phases, chains and binary trees.

Each helper appends nodes to an :class:`~etsim.algo.graph.AlgorithmBuilder` and returns
the node the next phase must wait for, so phases compose (the hierarchical algorithm chains ring
phases of several dimensions). Every helper gives each message its own tag (``tag``,
``tag + 1``, …) so sends and receives pair up unambiguously whatever order the simulator issues
them in.

Data annotations (:mod:`etsim.algo.dataflow`): the ring phases take ``block(j)``, the chunks of
the block ``j`` places after the rank's own along the ring, and annotate every send and every
storing receive with it; the chains annotate segment ``s`` as chunk ``s`` of buffer ``buf``. A
receive whose message is to be reduced stores it in a landing slot of its own (scratch ``t<tag>``)
and the COMP node after it adds it into the block: the reduction happens where the graph times it,
after everything the COMP waits for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from etsim.algo.dataflow import IN_PLACE, SegmentsLike, seg
from etsim.algo.graph import AlgoGraph, AlgorithmBuilder

__all__ = [
    "chain_broadcast",
    "chain_reduce",
    "empty_graph",
    "heap_tree",
    "ring_all_gather",
    "ring_reduce_scatter",
]

#: ``block(j)``: the chunks of the ring block ``j`` places after the rank's own (``j`` may be negative).
Blocks = Callable[[int], SegmentsLike]


def _at(block: Blocks | None, j: int) -> SegmentsLike | None:
    return None if block is None else block(j)


def _after(node: int | None) -> list[int]:
    return [] if node is None else [node]


def ring_reduce_scatter(
    b: AlgorithmBuilder,
    nxt: int,
    prv: int,
    steps: int,
    chunks: float,
    *,
    tag: int,
    after: Sequence[int] = (),
    block: Blocks | None = None,
) -> tuple[list[int], int]:
    """Write *steps* ring reduce-scatter steps of *chunks* chunks each.

    Step ``s`` sends to *nxt* the chunk reduced at step ``s - 1`` (the first step waits for the
    nodes *after*), receives one from *prv* and reduces it after the previous reduction. Data:
    step ``s`` sends ``block(-s-1)``, lands the message in ``t<tag>`` and its reduction adds it into
    ``block(-s-2)``, so after a full ring (``steps`` = ring size − 1) the rank holds its own block,
    ``block(0)``, fully reduced.

    All steps share one tag: each send depends on the previous one and each receive on the
    previous receive, so the k-th send matches the k-th receive and a rank holds
    one channel and one posted receive per phase, not one per step (what keeps a 1024-rank ring
    small).

    Returns:
        ``(done, next_tag)``: the nodes the next phase waits for (the last reduction, which
        follows all others; *after* when ``steps == 0``) and the first unused tag.
    """
    last = list(after)
    prev_recv: list[int] = []
    prev_send: list[int] = []
    for step in range(steps):
        prev_send = [b.send(nxt, chunks, tag, deps=last + prev_send, name=f"rs{step}_send", src=_at(block, -step - 1))]
        into = _at(block, -step - 2)
        land = None if into is None else seg(f"t{tag}", step * int(chunks), int(chunks))
        r = b.recv(prv, chunks, tag, deps=prev_recv, name=f"rs{step}_recv", dst=land)
        prev_recv = [r]
        last = [b.reduce(chunks, deps=[r, *last], name=f"rs{step}_reduce", dst=into, src=land)]
    return last, tag + 1


def ring_all_gather(
    b: AlgorithmBuilder,
    nxt: int,
    prv: int,
    steps: int,
    chunks: float,
    *,
    tag: int,
    after: Sequence[int] = (),
    block: Blocks | None = None,
    wait_sends: bool = False,
) -> tuple[list[int], int]:
    """Write *steps* ring all-gather steps: forward to *nxt* what was received from *prv* at the previous step.

    The first step sends what the nodes *after* produced. All steps share one tag (see
    :func:`ring_reduce_scatter`); each receive is posted after the previous one. Data: step ``s``
    sends ``block(-s)`` (the rank's own block first) and stores the message into ``block(-s-1)``.

    Returns:
        ``(done, next_tag)``: the nodes the next phase waits for: *after* (which produced the
        rank's own block) and every receive of this phase, since the data gathered is spread over
        all of them; and the first unused tag. (The receives alone do not imply *after*: no message
        the rank receives here passes through it, so a phase that waited only for them could send
        its own block before the reduction that produced it had finished.) With *wait_sends* the
        last send too, for a next phase that writes into the blocks this one sends (it must not
        overwrite a block before it has been forwarded).
    """
    last = list(after)
    received: list[int] = []
    prev_send: list[int] = []
    for step in range(steps):
        prev_send = [b.send(nxt, chunks, tag, deps=last + prev_send, name=f"ag{step}_send", src=_at(block, -step))]
        deps = last[-1:] if received else []
        last = [b.recv(prv, chunks, tag, deps=deps, name=f"ag{step}_recv", dst=_at(block, -step - 1))]
        received += last
    return [*after, *received, *(prev_send if wait_sends else ())], tag + 1


def chain_broadcast(
    b: AlgorithmBuilder, order: int, length: int, prv: int, nxt: int, segments: int, *, buf: str = "o"
) -> None:
    """Pipelined chain broadcast: the rank at place *order* of a chain of *length* ranks.

    Place 0 is the root. Each of *segments* segments (1 chunk, tag = segment) is forwarded as
    soon as it arrives and the previous segment's send has been delivered, so a link carries
    one segment at a time: ``(length - 2 + segments)`` message times in all. Segment ``s`` is
    chunk ``s`` of *buf*.
    """
    prev_send: int | None = None
    for s in range(segments):
        got = b.recv(prv, 1, s, name=f"bcast{s}_recv", dst=seg(buf, s)) if order > 0 else None
        if order < length - 1:
            deps = _after(got) + _after(prev_send)
            prev_send = b.send(nxt, 1, s, deps=deps, name=f"bcast{s}_send", src=seg(buf, s))


def chain_reduce(
    b: AlgorithmBuilder, order: int, length: int, prv: int, nxt: int, segments: int, *, buf: str = "o"
) -> None:
    """Pipelined chain reduction: the rank at place *order* of a chain ending at the root (last place).

    Place 0 starts each segment; every other place receives the partial segment, reduces it
    (after its previous reduction) and forwards it once its previous send was delivered. Segment
    ``s`` is chunk ``s`` of *buf*, reduced in place.
    """
    prev_send: int | None = None
    prev_red: int | None = None
    for s in range(segments):
        ready: int | None = None
        if order > 0:
            got = b.recv(prv, 1, s, name=f"reduce{s}_recv", dst=seg("t", s))
            deps = [got, *_after(prev_red)]
            prev_red = ready = b.reduce(1, deps=deps, name=f"reduce{s}", dst=seg(buf, s), src=seg("t", s))
        if order < length - 1:
            deps = _after(ready) + _after(prev_send)
            prev_send = b.send(nxt, 1, s, deps=deps, name=f"reduce{s}_send", src=seg(buf, s))


def heap_tree(size: int, mirrored: bool = False) -> tuple[list[int], list[list[int]]]:
    """A balanced binary tree over positions ``0..size-1``: ``(parent, children)``, parent -1 at the root.

    The tree is the binary heap (root 0, children of ``i`` are ``2i+1`` and ``2i+2``), depth
    ``floor(log2 size)``. ``mirrored`` maps position ``i`` to ``size - 1 - i``: its root is the
    last position and its interior nodes are the heap's leaves (for an even size every position
    is interior in at most one of the two trees, as in a double binary tree).
    """

    def pos(i: int) -> int:
        return size - 1 - i if mirrored else i

    parent = [-1] * size
    children: list[list[int]] = [[] for _ in range(size)]
    for i in range(1, size):
        p = (i - 1) // 2
        parent[pos(i)] = pos(p)
        children[pos(p)].append(pos(i))
    return parent, children


def empty_graph() -> AlgoGraph:
    """The graph of a collective over one rank: nothing to send (in place, the input already is the output)."""
    return AlgorithmBuilder(total_chunks=1, placement=IN_PLACE).build()
