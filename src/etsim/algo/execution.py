"""The symbolic execution behind :mod:`etsim.algo.verify`: every rank's graph run on symbolic chunk values.

:class:`Execution` holds each rank's buffers and runs the ranks' graphs in one interleaving (the module docstring
of :mod:`etsim.algo.verify` describes values, the order and what is wrong); :mod:`etsim.algo.verify_shared` runs
one rank of a graph every rank shares with the same node semantics.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from etsim import progress
from etsim.algo.dataflow import IN_PLACE, NodeData, Segment
from etsim.algo.graph import COMP, SEND, AlgoGraph
from etsim.algo.semantics import CollectiveLayout
from etsim.chakra.graph import CollectiveType

__all__ = ["Bad", "Execution", "Prep", "Slot", "Value", "Wrong", "lowest", "prepare", "ranks_text"]


class Bad:
    """A value no correct algorithm produces; ``reason`` says where it was made."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class Wrong(Exception):
    """Stops the execution with a WRONG verdict."""


#: A slot's value: None (never written), ``(chunk, ranks)``, or a bad value.
Value = tuple[int, int] | Bad | None


#: A chunk slot of one rank: ``(store, physical index, buffer label, chunk index in that buffer)``.
Slot = tuple[dict[int, Value], int, str, int]


@dataclass(slots=True)
class Prep:
    """A graph's columns in the form the execution loop reads (computed once per graph object)."""

    kinds: list[int]
    peers: list[int]
    tags: list[int]
    relative: bool
    data: list[NodeData | None]
    succ: list[tuple[int, ...]]
    indeg: list[int]
    roots: list[int]


def finish(
    r: int,
    v: int,
    preps: list[Prep],
    indeg: list[list[int]],
    done: list[int],
    know: list[list[int]] | None,
    append: Callable[[int], None],
) -> None:
    """Node *v* of rank *r* has run: release its successors (*append* queues a node of rank *r*)."""
    done[r] += 1
    deg = indeg[r]
    for s in preps[r].succ[v]:
        deg[s] -= 1
        if know is not None:
            know[r][s] |= know[r][v]
        if deg[s] == 0:
            append(s)


def ranks_text(bits: int, limit: int = 8) -> str:
    """The ranks in the bitset *bits*, the first *limit* of them, as ``[0, 3, … 5 more]``."""
    out: list[int] = []
    q = 0
    count = bits.bit_count()
    while bits and len(out) < limit:
        if bits & 1:
            out.append(q)
        bits >>= 1
        q += 1
    more = f", … {count - len(out)} more" if count > len(out) else ""
    return "[" + ", ".join(map(str, out)) + more + "]"


def lowest(bits: int) -> int:
    """The lowest rank in the bitset *bits*."""
    return (bits & -bits).bit_length() - 1


class Execution:
    """One symbolic execution of an algorithm in one placement (see the module docstring)."""

    def __init__(
        self,
        graphs: Sequence[AlgoGraph],
        collective: CollectiveType,
        layout: CollectiveLayout | None,
        placement: str,
        total: int,
        *,
        ranks: int | None = None,
    ) -> None:
        """*ranks*: make the buffers of ranks ``0 .. ranks-1`` only (default every rank)."""
        self.graphs = graphs
        #: Two receives of one channel found waiting at once (the first such pair, in words), or "".
        self.ambiguity = ""
        self.n = n = len(graphs)
        self.collective = collective
        self.layout = layout
        self.in_place = placement == IN_PLACE
        self.total = total
        self.k = total // n if total % n == 0 else 0
        self.shift = self.k  # relative offsets move by k chunks per position
        if layout is not None:
            k = self.k
            self.in_size = k if layout.piece_input else total
            self.out_size = k if layout.piece_output else total
        else:
            self.in_size = self.out_size = 0
        # Per rank: buffer name -> (store, base, limit or -1 for scratch, label).
        self.mem: list[dict[str, tuple[dict[int, Value], int, int, str]]] = []
        for r in range(n if ranks is None else ranks):
            self.mem.append(self._buffers(r))

    def _buffers(self, r: int) -> dict[str, tuple[dict[int, Value], int, int, str]]:
        layout = self.layout
        if layout is None:
            return {}
        inp: dict[int, Value] = {}
        if self.in_place:
            out = inp
            in_base = r * self.k if layout.alias == "input_in_output" else 0
            out_base = r * self.k if layout.alias == "output_in_input" else 0
        else:
            out = {}
            in_base = out_base = 0
        for c in range(self.in_size):
            inp[in_base + c] = (c, 1 << r)
        return {"i": (inp, in_base, self.in_size, "input"), "o": (out, out_base, self.out_size, "output")}

    # -- slots -----------------------------------------------------------------------------
    def _where(self, r: int, v: int) -> str:
        return f"rank {r}, node {self.graphs[r].names[v]!r}" if v >= 0 else f"rank {r}, untimed setup copy"

    def _slots(self, r: int, segs: tuple[Segment, ...], v: int) -> list[Slot]:
        """``(store, physical index, buffer label, chunk)`` per chunk of *segs* for rank *r* (bounds checked)."""
        mem = self.mem[r]
        if len(segs) == 1 and segs[0].cnt == 1:  # the common case, without the general loop
            s = segs[0]
            entry = mem.get(s.buf)
            if entry is not None:
                store, base, limit, label = entry
                idx = (s.off + r * self.shift) % self.total if s.rel else s.off
                if idx >= 0 and (limit < 0 or idx < limit):
                    return [(store, base + idx, label, idx)]
        out = []
        for s in segs:
            entry = mem.get(s.buf)
            if entry is None:
                entry = mem[s.buf] = ({}, 0, -1, f"scratch {s.buf!r}")
            store, base, limit, label = entry
            if s.rel:
                off, cnt, stride, total = s.off + r * self.shift, s.cnt or 0, s.stride, self.total
                idxs = [(off + j * stride) % total for j in range(cnt)] if cnt != 1 else [off % total]
            elif s.cnt == 1:
                idxs = [s.off]
            else:
                idxs = list(range(s.off, s.off + (s.cnt or 0) * s.stride, s.stride))
            for idx in idxs:
                if idx < 0 or (limit >= 0 and idx >= limit):
                    size = f"the {limit}-chunk {label}" if limit >= 0 else label
                    raise Wrong(
                        f"{self._where(r, v)} addresses {label} chunk {idx}, outside {size} of a {self._coll()}"
                    )
                out.append((store, base + idx, label, idx))
        return out

    def _coll(self) -> str:
        return self.collective.name.lower()

    # -- values ----------------------------------------------------------------------------
    def _read(self, slot: Slot, r: int, v: int) -> Value:
        value = slot[0].get(slot[1])
        if value is None:
            return Bad(f"{self._where(r, v)} reads {slot[2]} chunk {slot[3]} before anything was written there")
        return value

    def _combine(self, a: Value, b: Value, slot: Slot, r: int, v: int) -> Value:
        if isinstance(a, Bad) or a is None:
            return a
        if isinstance(b, Bad) or b is None:
            return b
        if a[0] != b[0]:
            return Bad(
                f"{self._where(r, v)} adds input chunk {b[0]} to {slot[2]} chunk {slot[3]}, "
                f"which holds input chunk {a[0]}"
            )
        both = a[1] & b[1]
        if both:
            return Bad(
                f"{slot[2]} chunk {slot[3]} on {self._where(r, v)} would count rank {lowest(both)}'s contribution twice"
            )
        return (a[0], a[1] | b[1])

    # -- execution -------------------------------------------------------------------------
    def run(self, prep: dict[int, Prep], causal: bool, turn: int = 0) -> list[int] | None:
        """Execute every node; return the ranks each rank has heard from (with *causal*), else None.

        Ranks take turns; in its turn a rank runs up to *turn* ready nodes (0: until it must wait). Kept long on
        purpose: it is the verifier's loop over every node of every rank, its state bound to locals once.
        """
        graphs, n = self.graphs, self.n
        if not causal:
            for r, g in enumerate(graphs):
                for c in g.setup:
                    values = [self._read(s, r, -1) for s in self._slots(r, c.src, -1)]
                    for (store, idx, _, _), value in zip(self._slots(r, c.dst, -1), values, strict=True):
                        store[idx] = value
        preps = [prep[id(g)] for g in graphs]
        indeg = [list(p.indeg) for p in preps]
        know = [[1 << r] * len(p.kinds) for r, p in enumerate(preps)] if causal else None
        channels: dict[tuple[int, int, int], tuple[deque, deque]] = {}  # type: ignore[type-arg]
        # Each rank runs its ready nodes until it has to wait for a message; ranks take turns (first in, first out).
        ready: list[deque[int]] = [deque(p.roots) for p in preps]
        active: deque[int] = deque(r for r in range(n) if ready[r])
        queued = [bool(q) for q in ready]
        done = [0] * n
        data_needed = not causal

        send, receive, local = self._send, self._receive, self._local
        watch = progress.stage(f"verifying {self._coll()} over {n} ranks", None, "rank turns")
        while active:
            watch.advance()
            r = active.popleft()
            queued[r] = False
            p, queue, deg = preps[r], ready[r], indeg[r]
            kinds, succ = p.kinds, p.succ
            budget = turn or -1
            while queue:
                if not budget:  # the turn is over: the rest waits for the rank's next turn
                    queued[r] = True
                    active.append(r)
                    break
                budget -= 1
                v = queue.popleft()
                kind = kinds[v]
                if kind != COMP:
                    peer = p.peers[v]
                    if p.relative:
                        peer = (peer + r) % n
                    elif not 0 <= peer < n:
                        raise Wrong(f"{self._where(r, v)}: peer {peer} is outside the {n}-rank group")
                    if kind == SEND:
                        key = (r, peer, p.tags[v])
                        chan = channels.get(key)
                        if chan is None:
                            chan = channels[key] = (deque(), deque())
                        msg = (send(r, v) if data_needed else [], v, know[r][v] if know is not None else 0)
                        if chan[1]:  # a receive is waiting for it: it completes now
                            w = chan[1].popleft()
                            if not chan[1] and not chan[0]:
                                del channels[key]  # (a channel per transfer when tags are unique: keep few)
                            receive(peer, w, msg, r, know)
                            finish(peer, w, preps, indeg, done, know, ready[peer].append)
                            if not queued[peer] and peer != r:
                                queued[peer] = True
                                active.append(peer)
                        else:
                            chan[0].append(msg)
                    else:
                        key = (peer, r, p.tags[v])
                        chan = channels.get(key)
                        if chan is None:
                            chan = channels[key] = (deque(), deque())
                        if not chan[0]:
                            if chan[1] and not self.ambiguity:
                                self.ambiguity = (
                                    f"rank {r}: receives {graphs[r].names[chan[1][0]]!r} and {graphs[r].names[v]!r} "
                                    f"from rank {peer} with tag {p.tags[v]} wait at once, so they match their sends "
                                    "only by the order they are posted in (a consumer that posts them otherwise pairs "
                                    "them wrongly; etsim's writers give every transfer its own tag)"
                                )
                            chan[1].append(v)
                            continue
                        msg = chan[0].popleft()
                        if not chan[0] and not chan[1]:
                            del channels[key]
                        receive(r, v, msg, peer, know)
                elif data_needed and p.data[v] is not None:
                    local(r, v)
                # finish v (inlined finish: this loop runs once per node)
                done[r] += 1
                for w in succ[v]:
                    deg[w] -= 1
                    if know is not None:
                        know[r][w] |= know[r][v]
                    if not deg[w]:
                        queue.append(w)
        self._check_finished(preps, done, indeg, channels)
        if know is None:
            return None
        heard = []
        for r in range(n):
            acc = 1 << r
            for x in know[r]:
                acc |= x
            heard.append(acc)
        return heard

    def _send(self, r: int, v: int) -> list[Value]:
        data = self.graphs[r].data[v]
        assert data is not None
        values = [self._read(slot, r, v) for slot in self._slots(r, data.src, v)]
        if data.dst:
            for (store, idx, _, _), value in zip(self._slots(r, data.dst, v), values, strict=True):
                store[idx] = value
        return values

    def _receive(
        self,
        r: int,
        v: int,
        msg: tuple[list[Value], int, int],
        sender: int,
        know: list[list[int]] | None,
    ) -> None:
        payload, sent_by, heard = msg
        g = self.graphs[r]
        if know is not None:
            know[r][v] |= heard
            return
        data = g.data[v]
        assert data is not None
        size = int(g.chunks[v])
        if len(payload) != size:
            other = self.graphs[sender].names[sent_by]
            raise Wrong(
                f"{self._where(r, v)} receives {size} chunks but the message it matches (rank {sender}, "
                f"node {other!r}) carries {len(payload)}"
            )
        dst = self._slots(r, data.dst, v)
        if data.op == "reduce":
            src = self._slots(r, data.src, v)
            combine, read = self._combine, self._read
            payload = [combine(read(s, r, v), m, d, r, v) for s, m, d in zip(src, payload, dst, strict=True)]
        for (store, idx, _, _), value in zip(dst, payload, strict=True):
            store[idx] = value

    def _local(self, r: int, v: int) -> None:
        data = self.graphs[r].data[v]
        assert data is not None
        src = [self._read(s, r, v) for s in self._slots(r, data.src, v)]
        dst = self._slots(r, data.dst, v)
        if data.op == "reduce":
            src = [self._combine(self._read(d, r, v), x, d, r, v) for d, x in zip(dst, src, strict=True)]
        for (store, idx, _, _), value in zip(dst, src, strict=True):
            store[idx] = value

    def _check_finished(
        self,
        preps: list[Prep],
        done: list[int],
        indeg: list[list[int]],
        channels: dict[tuple[int, int, int], tuple[deque, deque]],  # type: ignore[type-arg]
    ) -> None:
        graphs = self.graphs
        for (src, dst, tag), (_, waiting) in sorted(channels.items()):
            if waiting:
                v = waiting[0]
                raise Wrong(
                    f"rank {dst}, node {graphs[dst].names[v]!r} (receive from rank {src}, tag {tag}) never gets a "
                    f"message: rank {src} sends fewer messages to rank {dst} with tag {tag} than rank {dst} "
                    "receives, so the algorithm deadlocks"
                )
        for (src, dst, tag), (queued, _) in sorted(channels.items()):
            if queued:
                v = queued[0][1]
                raise Wrong(
                    f"rank {src}, node {graphs[src].names[v]!r}: {len(queued)} message(s) to rank {dst} with tag "
                    f"{tag} that no receive of rank {dst} takes"
                )
        for r, p in enumerate(preps):
            if done[r] != len(p.kinds):
                stuck = next(v for v, d in enumerate(indeg[r]) if d > 0)
                raise Wrong(f"rank {r}, node {graphs[r].names[stuck]!r} never runs (its dependencies never finish)")

    # -- end state -------------------------------------------------------------------------
    def check(self) -> tuple[str, int, int] | None:
        """The first wrong output slot as a message, with (wrong, checked) counts; None if all are right."""
        layout = self.layout
        assert layout is not None
        n, k = self.n, self.k
        full = (1 << n) - 1
        first = None
        wrong = checked = 0
        for r in range(n):
            if layout.root_only and r != 0:
                continue
            store, base, _, _ = self.mem[r]["o"]
            for x in range(self.out_size):
                checked += 1
                c, origin = layout.expect(r, x, k)
                bits = full if origin is None else 1 << origin
                got = store.get(base + x)
                if got is not None and not isinstance(got, Bad) and got[0] == c and got[1] == bits:
                    continue
                wrong += 1
                if first is None:
                    first = f"rank {r}, chunk {x}: " + self._describe(got, c, origin, bits)
        return None if first is None else (first, wrong, checked)

    def _describe(self, got: Value, c: int, origin: int | None, bits: int) -> str:
        want = f"chunk {c} reduced over all {self.n} ranks" if origin is None else f"rank {origin}'s chunk {c}"
        if got is None:
            return f"never written (it should hold {want})"
        if isinstance(got, Bad):
            return f"{got.reason} (it should hold {want})"
        gc, gbits = got
        if origin is None and gc == c:
            return f"missing contributions of ranks {ranks_text(bits & ~gbits)}"
        if gbits.bit_count() == 1:
            have = f"rank {lowest(gbits)}'s chunk {gc}"
        else:
            have = f"chunk {gc} summed over ranks {ranks_text(gbits)}"
        return f"holds {have} instead of {want}"


def prepare(graphs: Sequence[AlgoGraph]) -> dict[int, Prep]:
    """Each distinct graph's :class:`Prep`, by ``id`` (ranks that share a graph share its prep)."""
    prep: dict[int, Prep] = {}
    for g in graphs:
        if id(g) in prep:
            continue
        _, _, indeg = g.successors()
        data: list[NodeData | None] = g.data if len(g.data) == g.num_nodes else [None] * g.num_nodes
        roots = [v for v, d in enumerate(indeg) if d == 0]
        prep[id(g)] = Prep(g.kinds, g.peers, g.tags, g.relative_peers, data, g.successor_lists(), indeg, roots)
    return prep
