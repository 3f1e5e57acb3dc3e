"""The greedy link–chunk matching at the heart of TACOS, and the schedule it produces.

See :mod:`etsim.producers.tacos` for the algorithm and its differences from the reference.
"""

from __future__ import annotations

import gc
import heapq
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import permutations
from operator import itemgetter

import numpy as np

from etsim.errors import ConfigError
from etsim.producers.tacos.links import LinkGraph

__all__ = ["Schedule", "concat", "greedy_all_gather", "retime", "reverse"]


@dataclass(eq=False)
class Schedule:
    """Chunk transfers over logical links, in an order where every transfer follows its dependencies.

    Transfer ``x`` carries chunk ``chunk[x]`` over logical link ``link[x]`` from ``start[x]`` to
    ``start[x] + w[link[x]]``. A transfer depends on the previous transfer on its link and on every
    earlier transfer that delivered its chunk to its source. Transfers before :attr:`reduce_count`
    are reductions (Reduce-Scatter): the receiver adds the chunk into its own copy.

    Attributes:
        links: the logical network.
        chunks_per_npu: k; the collective has ``n·k`` chunks, chunk ``i·n + p`` belongs to position ``p``.
        w: time (ns) of one chunk on each logical link.
        link: logical link of each transfer.
        chunk: chunk of each transfer.
        start: start time (ns) of each transfer.
        reduce_count: number of leading reduction transfers.
        time_ns: completion time (last arrival).
    """

    links: LinkGraph
    chunks_per_npu: int
    w: list[float]
    link: array[int] = field(default_factory=lambda: array("i"))
    chunk: array[int] = field(default_factory=lambda: array("i"))
    start: array[float] = field(default_factory=lambda: array("d"))
    reduce_count: int = 0
    time_ns: float = 0.0

    @property
    def num_transfers(self) -> int:
        """Number of chunk transfers."""
        return len(self.link)

    def end(self, x: int) -> float:
        """Arrival time of transfer *x*."""
        return self.start[x] + self.w[self.link[x]]


def greedy_all_gather(lg: LinkGraph, w: Sequence[float], chunks_per_npu: int, seed: int) -> Schedule:
    """Synthesise an All-Gather over *lg* by greedy link–chunk matching (see the module docstring).

    At each event the destinations that may have gained a candidate (those that just received a chunk,
    and their out-neighbours) are examined; each looks at its free in-links whose source holds something
    it still needs. Those links pick in turn — fastest first, ties in a seeded random order — each
    preferring chunks the links after it cannot provide (so that none is left without one), then a
    seeded random chunk. A free link not examined has no candidate: it had none when last examined,
    its source has received nothing since, and its destination's needs only shrink.

    Args:
        lg: logical links.
        w: time (ns) one chunk occupies each link.
        chunks_per_npu: chunks each NPU starts with (k).
        seed: seed of the random tie-breaks.

    Returns:
        An ASAP schedule: each transfer starts when its link is free and its chunk has arrived.
    """
    n, k = lg.n, chunks_per_npu
    sched = Schedule(lg, k, list(w))
    if n <= 1:
        return sched
    gc_was_enabled = gc.isenabled()
    gc.disable()  # only short-lived lists of ints are allocated; the collector would just rescan them
    try:
        _greedy(sched, n, k, seed)
    finally:
        if gc_was_enabled:
            gc.enable()
    return sched


#: Most chunks for which the masks ``(1 << r) - 1`` are tabulated (the table takes nchunks²/16 bytes).
_BELOW_TABLE_MAX = 1 << 14


class _Below:
    """``below[r] == (1 << r) - 1``, computed on demand (for collectives with too many chunks to tabulate)."""

    def __getitem__(self, r: int) -> int:
        return (1 << r) - 1


class _Bit:
    """``bit[c] == 1 << c``, computed on demand (as :class:`_Below`)."""

    def __getitem__(self, c: int) -> int:
        return 1 << c


#: Largest in-degree whose link orders are drawn from a table of permutations (one random draw).
_PERM_TABLE_MAX = 6
_PERMS: list[list[tuple[int, ...]]] = [list(permutations(range(m))) for m in range(_PERM_TABLE_MAX + 1)]
#: ``_GETTERS[m][x](seq)``: the items of *seq* (length m >= 2) in the order of permutation ``_PERMS[m][x]``.
_GETTERS: list[list[itemgetter]] = [[itemgetter(*p) for p in perms] if len(perms[0]) > 1 else [] for perms in _PERMS]


def _greedy(sched: Schedule, n: int, k: int, seed: int) -> None:
    """The event loop of :func:`greedy_all_gather`; appends the transfers to *sched*.

    Kept long on purpose: it runs once per link-chunk match of a synthesis (tens of millions for a 32×32 mesh), with
    every list bound to a local; helper calls in the loop would cost more than the matching itself.
    """
    lg = sched.links
    nchunks = n * k
    shuffle = random.Random(seed).shuffle
    src, dst = lg.src, lg.dst
    wl = sched.w
    nlinks = len(src)
    ins = lg.in_links()
    in_src = [[src[lid] for lid in lids] for lids in ins]
    # out-neighbours (destinations of out-links) of each position
    nbrs: list[list[int]] = [[] for _ in range(n)]
    for lid in range(nlinks):
        nbrs[src[lid]].append(dst[lid])
    # destinations whose in-links differ in w: their links are ordered fastest first
    mixed = [len({wl[lid] for lid in ins[d]}) > 1 for d in range(n)]
    # With a single w, every transfer started at an event ends at the next one: one pending time at
    # a time, and every link is free at every event (``busy`` is then not maintained).
    uniform = len(set(wl)) == 1
    uniform_w = wl[0]
    perms = _PERMS
    getters = _GETTERS
    # (a table of n·k masks holds (n·k)²/16 bytes: on demand past 16,384 chunks)
    bit: list[int] | _Bit = [1 << c for c in range(nchunks)] if nchunks <= _BELOW_TABLE_MAX else _Bit()
    below: list[int] | _Below = [(1 << c) - 1 for c in range(nchunks)] if nchunks <= _BELOW_TABLE_MAX else _Below()
    full = (1 << nchunks) - 1
    hold = [0] * n
    need = [0] * n
    for p in range(n):
        own = 0
        for i in range(k):
            own |= bit[i * n + p]
        hold[p] = own
        need[p] = full ^ own
    remaining = n * (n - 1) * k  # (chunk, NPU) pairs not yet matched
    busy = bytearray(nlinks)
    seen = [-1] * n
    t_link, t_chunk, t_start = sched.link, sched.chunk, sched.start
    # arrival time -> (links freed, destinations, chunks each receives as a bitset)
    pending: dict[float, tuple[list[int], list[int], list[int]]] = {}
    times: list[float] = []
    t = 0.0
    epoch = 0
    affected = list(range(n))
    last = 0.0
    # seeded random numbers, drawn in blocks: chunk offsets in [0, nchunks), permutation indices in
    # [0, 720) (720 = 6! is a multiple of m! for every in-degree m <= 6)
    gen = np.random.default_rng(seed)
    block = max(1 << 14, 2 * (nlinks + n))
    rpool: list[int] = []
    ppool: list[int] = []
    rj = pj = block
    while True:
        if remaining:
            if rj > block - nlinks:  # an event draws at most one chunk offset per link …
                rpool = gen.integers(0, nchunks, block).tolist()
                rj = 0
            if pj > block - n:  # … and one permutation per destination
                ppool = gen.integers(0, 720, block).tolist()
                pj = 0
            ev_l: list[int] = []
            ev_c: list[int] = []
            ev_d: list[int] = []  # with uniform w: destinations and the chunks (bitset) they will receive
            ev_m: list[int] = []
            for d in affected:
                nd = need[d]
                if not nd:
                    continue
                if uniform:  # every link is free at every event
                    lids = ins[d]
                    cands = [hold[s] & nd for s in in_src[d]]
                else:
                    lids = [lid for lid in ins[d] if not busy[lid]]
                    cands = [hold[src[lid]] & nd for lid in lids]
                m = len(lids)
                if m > 1:
                    # a seeded random order, then fastest first
                    if m <= _PERM_TABLE_MAX:
                        x = ppool[pj] % len(perms[m])
                        pj += 1
                        if mixed[d]:
                            order = sorted(perms[m][x], key=lambda i: wl[lids[i]])
                            lids = [lids[i] for i in order]
                            cands = [cands[i] for i in order]
                        else:
                            get = getters[m][x]
                            lids = get(lids)
                            cands = get(cands)
                    else:
                        order = list(range(m))
                        shuffle(order)
                        if mixed[d]:
                            order.sort(key=lambda i: wl[lids[i]])
                        lids = [lids[i] for i in order]
                        cands = [cands[i] for i in order]
                    # not_later[i]: complement of what the links after i can provide
                    not_later = [-1] * m
                    acc = 0
                    for i in range(m - 1, 0, -1):
                        acc |= cands[i]
                        not_later[i - 1] = ~acc
                elif m:
                    not_later = [-1]
                else:
                    continue
                first = True
                for lid, cand, nl in zip(lids, cands, not_later, strict=True):
                    if first:  # cands were computed against this nd
                        first = False
                    else:
                        cand &= nd
                    if not cand:
                        continue
                    pref = cand & nl
                    if pref:
                        cand = pref
                    # a seeded random chunk: the highest candidate below a random r, else the highest
                    lo = cand & below[rpool[rj]]
                    rj += 1
                    c = lo.bit_length() - 1 if lo else cand.bit_length() - 1
                    nd ^= bit[c]
                    ev_l.append(lid)
                    ev_c.append(c)
                if uniform:
                    got = need[d] ^ nd
                    if got:
                        ev_d.append(d)
                        ev_m.append(got)
                need[d] = nd
            count = len(ev_l)
            if count:
                remaining -= count
                t_link.extend(ev_l)
                t_chunk.extend(ev_c)
                t_start.extend([t] * count)
                if uniform:
                    _add_pending(pending, times, t + uniform_w, (ev_l, ev_d, ev_m))
                else:
                    # (a link is examined once per event, with its destination: marking it now is enough)
                    for lid in ev_l:
                        busy[lid] = 1
                    by_end: dict[float, tuple[list[int], list[int], list[int]]] = {}
                    for lid, c in zip(ev_l, ev_c, strict=True):
                        end = t + wl[lid]
                        entry = by_end.get(end)
                        if entry is None:
                            by_end[end] = ([lid], [dst[lid]], [bit[c]])
                        else:
                            entry[0].append(lid)
                            entry[1].append(dst[lid])
                            entry[2].append(bit[c])
                    for end, entry in by_end.items():
                        _add_pending(pending, times, end, entry)
        if not times:
            break
        t = heapq.heappop(times)
        arr_l, arr_d, arr_m = pending.pop(t)
        last = t
        epoch += 1
        affected = []
        if not uniform:
            for lid in arr_l:
                busy[lid] = 0
        for d, got in zip(arr_d, arr_m, strict=True):
            hold[d] |= got
            if seen[d] != epoch:
                seen[d] = epoch
                affected.append(d)
        for d in affected[:]:
            for v in nbrs[d]:
                if seen[v] != epoch:
                    seen[v] = epoch
                    affected.append(v)
    if remaining:  # cannot happen on a strongly connected graph
        raise ConfigError(f"synthesis stalled with {remaining} chunk deliveries unmatched")
    sched.time_ns = last


def _add_pending(
    pending: dict[float, tuple[list[int], list[int], list[int]]],
    times: list[float],
    end: float,
    arrivals: tuple[list[int], list[int], list[int]],
) -> None:
    """Queue *arrivals* at time *end*: (links freed, destinations, chunks each receives as a bitset)."""
    entry = pending.get(end)
    if entry is None:
        pending[end] = arrivals
        heapq.heappush(times, end)
    else:
        for have, more in zip(entry, arrivals, strict=True):
            have.extend(more)


def reverse(ag: Schedule) -> Schedule:
    """The time reverse of an All-Gather *ag* synthesised on a transposed graph: a Reduce-Scatter.

    Transfer ``u → v`` during ``[t, t + w]`` on the transposed graph becomes ``v → u`` during
    ``[T − t − w, T − t]`` on the original graph (same logical link id). The order is reversed, which
    keeps dependencies first.
    """
    lg = ag.links.transposed()
    rs = Schedule(lg, ag.chunks_per_npu, ag.w, reduce_count=ag.num_transfers, time_ns=ag.time_ns)
    total = ag.time_ns
    w = ag.w
    for x in range(ag.num_transfers - 1, -1, -1):
        lid = ag.link[x]
        rs.link.append(lid)
        rs.chunk.append(ag.chunk[x])
        rs.start.append(total - ag.start[x] - w[lid])
    return rs


def retime(sched: Schedule) -> Schedule:
    """Recompute every start as soon as possible, in place; return *sched*.

    ``start[x] = max(end of the previous transfer on its link, latest arrival of its chunk at its
    source)`` — the time the simulator issues the corresponding SEND.
    """
    lg = sched.links
    n = lg.n
    nchunks = n * sched.chunks_per_npu
    src, dst, w = lg.src, lg.dst, sched.w
    free = [0.0] * lg.num_links
    avail: dict[int, float] = {}
    link, chunk, start = sched.link, sched.chunk, sched.start
    last = 0.0
    for x in range(len(link)):
        lid = link[x]
        c = chunk[x]
        t = free[lid]
        a = avail.get(src[lid] * nchunks + c, 0.0)
        if a > t:
            t = a
        start[x] = t
        end = t + w[lid]
        free[lid] = end
        key = dst[lid] * nchunks + c
        if end > avail.get(key, 0.0):
            avail[key] = end
        if end > last:
            last = end
    sched.time_ns = last
    return sched


def concat(first: Schedule, second: Schedule) -> Schedule:
    """*first* then *second* on the same links (All-Reduce = Reduce-Scatter then All-Gather), retimed."""
    out = Schedule(second.links, second.chunks_per_npu, second.w, reduce_count=first.reduce_count)
    for s in (first, second):
        out.link.extend(s.link)
        out.chunk.extend(s.chunk)
        out.start.extend(s.start)
    return retime(out)
