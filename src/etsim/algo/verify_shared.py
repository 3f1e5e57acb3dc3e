"""Verifying a graph every rank shares by executing one rank: the others are its rotations.

When every rank runs one graph with relative peers (a native's, or a family read as one shared graph), rank
``q``'s execution is rank 0's rotated by ``q``, if the buffers allow it:

- every operand that addresses a store (the input, the output, which are one store in place, and each
  scratch buffer) addresses it the same way, relative (chunk ``off + q·k`` modulo ``T``) or absolute;
- a store addressed relatively starts at chunk 0 of a ``T``-chunk index space at every rank (or is scratch),
  so rotating it is a cyclic shift by ``q·k``; one addressed absolutely has the same base shift at every rank
  for every buffer name on it, and holds the input only if that shift is the input's;
- then rank ``q`` holds, at each mapped slot, rank 0's value with its chunk moved by ``q·k`` (when the input is
  addressed relatively; else kept) and its set of contributing ranks rotated by ``q``.

Under that rotation the message rank 0 receives from rank ``d`` is the rotation by ``d`` of what rank 0 itself
sent on its matching send (same tag, peer ``-d``), the ``k``-th receive of a channel meeting the ``k``-th send,
so :func:`shared_verdict` runs rank 0 alone with those messages: the interleaving in which every rank takes
the same local steps at once (a valid one: a message is sent at a step before the one receiving it). Every
rank's output is then rank 0's rotated, and is checked against the collective's definition like the full
execution's. Anything else (a store used both ways, a receive or send left unmatched, a deadlock, a wrong or
out-of-bounds chunk, receives that wait at once on a channel) is left to the full execution, which names it:
this path only ever says *correct*. ``tests/algo/test_verify_shared.py`` compares both on natives, MSCCL-IR
programs and graphs built to break the conditions.
"""

from __future__ import annotations

import itertools
from collections import deque

from etsim.algo.execution import Bad, Execution, Prep, Value, Wrong
from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph
from etsim.algo.semantics import CollectiveLayout
from etsim.chakra.graph import CollectiveType

__all__ = ["shared_verdict"]


class _Rotation:
    """How rank ``q``'s state maps onto rank 0's (stores, values), or ``reason`` why it does not."""

    def __init__(self, run: Execution, graph: AlgoGraph) -> None:
        n, total, k = run.n, run.total, run.k
        self.n, self.total, self.k, self.in_size = n, total, k, run.in_size
        self.full = (1 << n) - 1
        self.reason = ""
        layout = run.layout
        assert layout is not None
        alias = layout.alias if run.in_place else ""
        # Buffer name -> its base's shift per rank (bases are q·k or 0), its limit, its store.
        step = {"i": k if alias == "input_in_output" else 0, "o": k if alias == "output_in_input" else 0}
        limit = {"i": run.in_size, "o": run.out_size}
        store_of = {"i": "io", "o": "io"} if run.in_place else {"i": "i", "o": "o"}
        #: Store -> addressed relatively; store -> its shift per rank (absolute stores).
        self.rel: dict[str, bool] = {}
        self.step: dict[str, int] = {}
        for data in [*graph.data, *graph.setup]:
            for seg in () if data is None else (*data.dst, *data.src):
                name = seg.buf
                store = store_of.get(name, name)
                if self.rel.setdefault(store, seg.rel) != seg.rel:
                    self.reason = f"store {store!r} is addressed both relatively and absolutely"
                    return
                shift = step.get(name, 0)
                if seg.rel and (shift or limit.get(name, total) != total):
                    self.reason = f"buffer {name!r} is addressed relatively but is not a whole buffer at chunk 0"
                    return
                if not seg.rel and self.step.setdefault(store, shift) != shift:
                    self.reason = f"buffers on store {store!r} move differently from rank to rank"
                    return
        in_store = store_of["i"]
        #: The input chunk shift per rank of every value.
        self.delta = 0
        if self.rel.get(in_store, False):
            if step["i"] == 0 and run.in_size == total:
                self.delta = k  # the input rotates with its store
            elif step["i"] != k:
                self.reason = "the input is not a rotation of rank 0's"
        elif self.step.setdefault(in_store, step["i"]) != step["i"]:
            self.reason = "the input's store moves unlike the input"
        self.out_store = store_of["o"]
        self.out_step = step["o"]

    def value(self, value: Value, q: int) -> Value:
        """Rank 0's *value* as rank ``q`` holds it."""
        if value is None or isinstance(value, Bad) or not q:
            return value
        chunk, ranks = value
        if self.delta:
            chunk = (chunk + q * self.delta) % self.in_size
        return chunk, ((ranks << q) | (ranks >> (self.n - q))) & self.full

    def output_slot(self, q: int, x: int) -> int:
        """Rank 0's physical slot that rank ``q``'s output chunk *x* maps onto."""
        phys = q * self.out_step + x
        if self.rel.get(self.out_store, False):
            return (phys - q * self.k) % self.total
        return phys - q * self.step.get(self.out_store, 0)


class _SharedExecution(Execution):
    """Rank 0 of a shared graph, receiving rotated copies of its own messages."""

    def __init__(self, graph: AlgoGraph, n: int, collective: CollectiveType, layout: CollectiveLayout,
                 placement: str, total: int) -> None:  # fmt: skip
        super().__init__([graph] * n, collective, layout, placement, total, ranks=1)  # rank 0's buffers only

    def run_rank0(self, prep: Prep, rotation: _Rotation, *, lazy: bool = False) -> bool:
        """Execute rank 0 to the end; False if the full execution must decide (see the module docstring).

        *lazy*: a matched receive completes only when nothing else is ready (every rank runs ahead of its messages,
        which shows a send that does not wait for what it reads); else at once (which shows a receive that does
        not wait for what it overwrites).
        """
        graph = self.graphs[0]
        for c in graph.setup:
            values = [self._read(s, 0, -1) for s in self._slots(0, c.src, -1)]
            for (store, idx, _, _), value in zip(self._slots(0, c.dst, -1), values, strict=True):
                store[idx] = value
        n = self.n
        kinds, peers, tags, succ = prep.kinds, prep.peers, prep.tags, prep.succ
        deg = list(prep.indeg)
        queue = deque(prep.roots)
        # Channel (d, tag): what rank 0 receives from rank d, i.e. its own sends to peer -d, rotated by d.
        sent: dict[tuple[int, int], deque[list[Value]]] = {}
        waiting: dict[tuple[int, int], deque[int]] = {}
        arrived: deque[tuple[int, int, list[Value]]] = deque()  # matched receives not completed yet (lazy)
        done = 0
        rotate = rotation.value

        def complete(v: int, d: int, payload: list[Value]) -> None:
            nonlocal done
            if d:
                payload = [rotate(value, d) for value in payload]
            self._receive(0, v, (payload, v, 0), 0, None)
            done += 1
            for s in succ[v]:
                deg[s] -= 1
                if not deg[s]:
                    queue.append(s)

        matched = arrived.append if lazy else (lambda item: complete(*item))
        while queue or arrived:
            if not queue:
                complete(*arrived.popleft())
                continue
            v = queue.popleft()
            kind = kinds[v]
            if kind == SEND:
                key = ((-peers[v]) % n, tags[v])
                payload = self._send(0, v)
                waiters = waiting.get(key)
                if waiters:
                    matched((waiters.popleft(), key[0], payload))
                else:
                    sent.setdefault(key, deque()).append(payload)
            elif kind == RECV:
                key = (peers[v] % n, tags[v])
                ready = sent.get(key)
                if ready:
                    matched((v, key[0], ready.popleft()))
                else:
                    waiters = waiting.setdefault(key, deque())
                    if waiters:
                        return False  # two receives of one channel wait at once: the full execution words it
                    waiters.append(v)
                continue
            elif kind == COMP and prep.data[v] is not None:
                self._local(0, v)
            done += 1
            for s in succ[v]:
                deg[s] -= 1
                if not deg[s]:
                    queue.append(s)
        return done == len(kinds) and not any(waiting.values()) and not any(sent.values())

    def ordering(self, prep: Prep) -> tuple[bool, bool]:
        """Whether rank 0's graph orders its channels, and its chunk accesses, by its own dependencies.

        The first: every two sends of one channel and every two receives of one are ordered; the second: every two
        accesses to a chunk slot of which one writes are (every rank's graph then does the same). With both, every
        interleaving ends the same (messages match the same way and carry the same values, and no receive waits
        beside another of its channel): the full execution finds what this one finds.
        """
        kinds, peers, tags, succ, data = prep.kinds, prep.peers, prep.tags, prep.succ, prep.data
        size = len(kinds)
        if size > MAX_ORDERED_NODES:
            return False, False
        order = _topological(prep)
        if order is None:
            return False, False
        rank = [0] * size
        for i, v in enumerate(order):
            rank[v] = i
        below = [0] * size  # bit w of below[v]: w is v or follows v
        for v in reversed(order):
            bits = 1 << v
            for s in succ[v]:
                bits |= below[s]
            below[v] = bits
        accesses: dict[tuple[int, int], list[tuple[int, int, bool]]] = {}
        channels: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        for v in range(size):
            kind = kinds[v]
            if kind in (SEND, RECV):  # (peers are offsets modulo n: -1 and n-1 are one channel)
                channels.setdefault((kind, peers[v] % self.n, tags[v]), []).append((rank[v], v))
            d = data[v]
            if d is None:
                continue
            read_segs = d.src if kind == SEND or d.op != "store" else ()
            more = d.dst if kind == COMP and d.op == "reduce" else ()
            for segs, write in ((read_segs, False), (more, False), (d.dst, True)):
                for store, idx, _, _ in self._slots(0, segs, v):
                    accesses.setdefault((id(store), idx), []).append((rank[v], v, write))
        for chain in channels.values():
            chain.sort()
            for (_, u), (_, v) in itertools.pairwise(chain):
                if not below[u] >> v & 1:
                    return False, False
        for slot_accesses in accesses.values():
            slot_accesses.sort()
            last_write = -1
            reads: list[int] = []
            for _, v, write in slot_accesses:
                if last_write >= 0 and last_write != v and not below[last_write] >> v & 1:
                    return True, False
                if write:
                    if any(r != v and not below[r] >> v & 1 for r in reads):
                        return True, False
                    last_write, reads = v, []
                else:
                    reads.append(v)
        return True, True

    def check_rotated(self, rotation: _Rotation) -> bool:
        """Whether every rank's output, rank 0's rotated, holds what the collective defines."""
        layout = self.layout
        assert layout is not None
        n, k = self.n, self.k
        full = (1 << n) - 1
        store, base, _, _ = self.mem[0]["o"]
        assert base == 0  # rank 0's buffers start at chunk 0 of their store
        by_arrays = self._check_rotated_arrays(rotation, store)
        if by_arrays is not None:
            return by_arrays
        for q in range(1 if layout.root_only else n):
            for x in range(self.out_size):
                c, origin = layout.expect(q, x, k)
                got = rotation.value(store.get(rotation.output_slot(q, x)), q)
                if (
                    got is None
                    or isinstance(got, Bad)
                    or got[0] != c
                    or got[1] != (full if origin is None else 1 << origin)
                ):
                    return False
        return True

    def _check_rotated_arrays(self, rotation: _Rotation, store: dict[int, Value]) -> bool | None:
        """:meth:`check_rotated` a rank at a time over numpy arrays, or None when a value is not plain.

        Plain: rank 0's output slots hold nothing, a bad value, a chunk of every rank or a chunk of one rank (whose
        rotation is that of its rank). The layout's expectation is arithmetic, so it takes arrays as well.
        """
        import numpy as np

        layout = self.layout
        assert layout is not None
        n, k, total = self.n, self.k, self.total
        full = (1 << n) - 1
        size = max(total, max(store, default=0) + 1)
        chunk = np.full(size, -1, dtype=np.int64)
        kind = np.zeros(size, dtype=np.int8)  # 0 nothing or bad, 1 every rank, 2 one rank
        origin = np.zeros(size, dtype=np.int64)
        for slot, value in store.items():
            if slot < 0:
                return None
            if value is None or isinstance(value, Bad):
                continue
            c, ranks = value
            chunk[slot] = c
            if ranks == full:
                kind[slot] = 1
            elif ranks and not ranks & (ranks - 1):
                kind[slot] = 2
                origin[slot] = ranks.bit_length() - 1
            else:
                return None
        x = np.arange(self.out_size, dtype=np.int64)
        relative_store = rotation.rel.get(rotation.out_store, False)
        store_step = rotation.step.get(rotation.out_store, 0)
        for q in range(1 if layout.root_only else n):
            phys = q * rotation.out_step + x
            slots = (phys - q * k) % total if relative_store else phys - q * store_step
            if len(slots) and (slots.min() < 0 or slots.max() >= size):
                return None
            got_kind = kind[slots]
            got_chunk = chunk[slots]
            if q and rotation.delta:
                got_chunk = (got_chunk + q * rotation.delta) % rotation.in_size
            want_chunk, want_origin = layout.expect(q, x, k)  # type: ignore[arg-type]  # (arithmetic: arrays too)
            if want_origin is None:
                ok = (got_kind == 1) & (got_chunk == want_chunk)
            else:
                ok = (got_kind == 2) & (got_chunk == want_chunk) & ((origin[slots] + q) % n == want_origin)
            if not ok.all():
                return False
        return True


def shared_verdict(
    graph: AlgoGraph, n: int, collective: CollectiveType, layout: CollectiveLayout, placement: str, total: int,
    prep: Prep,
) -> str | None:  # fmt: skip
    """Whether *graph*, run by every one of *n* ranks with relative peers, computes *collective* in *placement*.

    Returns ``""`` when it does, and every interleaving ends the same (:meth:`_SharedExecution.ordering`: the full
    execution would find the same); for a graph that orders its channels but relies on other ranks to order its
    chunk accesses, run by at least :data:`SYMMETRIC_RANK_NODES` rank-nodes, a note saying it was checked in two
    symmetric interleavings; None when this path cannot tell (the full execution must decide).
    """
    if n < 2 or not graph.relative_peers or total % n or not all(0 <= p < n for p in graph.peers if p >= 0):
        return None
    run = _SharedExecution(graph, n, collective, layout, placement, total)
    rotation = _Rotation(run, graph)
    if rotation.reason:
        return None
    try:
        channels_ordered, exact = run.ordering(prep)
        if not exact and (not channels_ordered or n * len(graph.kinds) < SYMMETRIC_RANK_NODES):
            return None
        for lazy in (False,) if exact else (False, True):
            if lazy:  # a fresh rank 0 for the second interleaving
                run = _SharedExecution(graph, n, collective, layout, placement, total)
            if not run.run_rank0(prep, rotation, lazy=lazy) or not run.check_rotated(rotation):
                return None
    except Wrong:
        return None
    return "" if exact else SYMMETRIC_NOTE


#: Shared graphs whose order relies on other ranks are checked symmetrically from this many rank-nodes (the full
#: execution takes about 3 µs a rank-node: 16 s for a 1024-rank ring all-reduce family).
SYMMETRIC_RANK_NODES = 2_000_000
#: What a verdict says of such a check.
SYMMETRIC_NOTE = (
    "; every rank runs one graph, so rank 0 was executed for all, in two symmetric interleavings (every rank ahead of "
    "its messages, every rank taking them at once) rather than the rank-order one"
)


#: Graphs of more nodes are verified by the full execution (the order check keeps a bit per pair of nodes).
MAX_ORDERED_NODES = 40_000


def _topological(prep: Prep) -> list[int] | None:
    deg = list(prep.indeg)
    order = list(prep.roots)
    succ = prep.succ
    for v in order:  # grows as it goes
        for s in succ[v]:
            deg[s] -= 1
            if not deg[s]:
                order.append(s)
    return order if len(order) == len(deg) else None
