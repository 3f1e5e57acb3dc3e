"""Does an algorithm compute its collective? A symbolic execution of every rank's graph.

:func:`verify_graphs` runs the per-rank graphs of one algorithm over a group of ``n`` ranks on
symbolic data and compares every rank's output with the collective's definition. It needs the data
annotations of :mod:`etsim.algo.dataflow` (which chunks each node reads and writes); a graph
without them gets the verdict *cannot verify*, never an error.

**Values.** A chunk slot holds nothing (never written) or ``(c, ranks)``: input chunk ``c`` summed
over the ranks in the bitset ``ranks`` (one rank for data that was only copied). A reduction of two
values of different chunks, or of two values that share a rank (that contribution would count
twice), yields a *bad* value that remembers where it was made; so does reading a slot never
written. Bad values are reported only if they reach an output the collective defines, so an
algorithm that does something odd with scratch it never uses again is not refused.

**Execution.** Nodes run in one deterministic valid order (Kahn's algorithm over all ranks' graphs
joined by their messages): ranks take turns, first in, first out, and in its turn a rank runs every
node it can until it has to wait for a message (``lockstep=True``: one node per turn, another
valid order). A rank running ahead of its peers is what exposes a receive that does not wait for
what it overwrites, or a send that does not wait for what it reads. Messages match as in the
simulator: per ``(src, dst, tag)`` the k-th send executed pairs with the k-th receive; a receive
that finds no message waits for one. A receive whose size differs from its message's, a receive
that never gets a message (deadlock), a message nobody receives, and a read or write outside the
input or output buffer are wrong immediately. The verifier checks one interleaving; it does not
search all of them for data races (a read not ordered after the write it needs).

**Collectives** (``T`` total chunks, ``n`` ranks, ``k = T / n`` chunks per rank, root = position
0; ``in_q`` is rank ``q``'s input). This table is the single definition the verifier uses; it follows
MSCCL-IR's conventions and :func:`~etsim.chakra.graph.collective_buffer_bytes`:

==============  ========  ========  ===========================  ==========================  ============
collective      input     output    output chunk ``x`` of rank   in place, input chunk ``j``  checked on
                                    ``r`` must hold              is output chunk
==============  ========  ========  ===========================  ==========================  ============
all_reduce      T         T         Σ_q in_q[x]                  j                           every rank
reduce          T         T         Σ_q in_q[x]                  j                           root
broadcast       T         T         in_0[x]                      j                           every rank
all_gather      k         T         in_{x div k}[x mod k]        r·k + j                     every rank
gather          k         T         in_{x div k}[x mod k]        r·k + j                     root
reduce_scatter  T         k         Σ_q in_q[r·k + x]            j − r·k (output = input     every rank
                                                                 chunks r·k … r·k+k−1)
scatter         T         k         in_0[r·k + x]                as reduce_scatter           every rank
all_to_all      T         T         in_{x div k}[r·k + x mod k]  j                           every rank
barrier         —         —         (no data) every rank has heard, directly or through others, from every rank
==============  ========  ========  ===========================  ==========================  ============

*In place* (:data:`~etsim.algo.dataflow.IN_PLACE`) input and output are one buffer aliased as in the
table; *out of place* they are separate and the output starts unwritten. An algorithm declares the
placements it is written for (MSCCL-IR's ``inplace``/``outofplace``); each is verified.

**Cost.** Linear in the chunks the nodes move, about 2 µs per node: a 1024-rank ring all-reduce
(5.2 million nodes, a million output chunks) takes 11–14 s, twice its simulation; verdicts are
cached by the callers (:meth:`~etsim.system.algorithms.base.CollectiveAlgorithm.verify`). A graph every
rank shares is executed for rank 0 alone where that gives the same verdict (:mod:`etsim.algo.verify_shared`):
1.2 s for that all-reduce read from a family.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from etsim import progress
from etsim.algo.dataflow import OUT_OF_PLACE
from etsim.algo.execution import Execution, Prep, Wrong, prepare, ranks_text
from etsim.algo.graph import RECV, SEND, AlgoGraph
from etsim.algo.semantics import LAYOUTS
from etsim.algo.union import union_of
from etsim.algo.verify_shared import shared_verdict
from etsim.algo.verify_union import union_verdict
from etsim.chakra.graph import CollectiveType

if TYPE_CHECKING:
    from etsim.algo.semantics import CollectiveLayout
    from etsim.workers import Background

__all__ = ["BACKGROUND_NODES", "PendingVerdict", "Verdict", "verify_graphs", "verify_graphs_later"]

C = CollectiveType


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of a verification.

    Attributes:
        ok: True (computes the collective), False (does not), None (cannot tell, e.g. no data annotations).
        message: what was checked, the first missing piece, or why it cannot be checked.
        ambiguity: when receives that match only by the order they are posted in were found (two receives of
            one channel waiting at once), which; etsim pairs them in node order, another consumer may not.
    """

    ok: bool | None
    message: str
    ambiguity: str = ""

    def __str__(self) -> str:
        word = {True: "correct", False: "WRONG", None: "cannot verify"}[self.ok]
        return f"{word}: {self.message}"


class _Unverifiable(Exception):
    """Stops the execution with a cannot-verify verdict."""


def _placements(graphs: Sequence[AlgoGraph]) -> tuple[str, ...]:
    declared = {g.placement for g in graphs if g.placement}
    if len(declared) > 1:
        raise _Unverifiable("the ranks declare different buffer placements (in place / out of place)")
    places = declared.pop() if declared else ()
    return places or (OUT_OF_PLACE,)


def verify_graphs(graphs: Sequence[AlgoGraph], collective: CollectiveType | int, *, lockstep: bool = False) -> Verdict:
    """Check that the per-rank *graphs* (rank *i* at index *i*) compute *collective* (module docstring).

    By default each rank runs ahead until it must wait for a message; with *lockstep* ranks run
    one node per turn instead (another valid interleaving, for tests that want both).

    Returns:
        A :class:`Verdict`: ``ok`` True with what was checked, False with the first missing piece
        (``rank R, chunk C: missing contributions of ranks [...]``, ``… holds rank Q's chunk …``,
        a deadlock or a doubly counted contribution), or None with why it cannot be checked.
    """
    collective = C(int(collective))
    n = len(graphs)
    name = collective.name.lower()
    if n == 0:
        return Verdict(None, "no ranks")
    if collective == C.BARRIER:
        return _barrier_verdict(graphs, lockstep)
    layout = LAYOUTS.get(collective)
    if layout is None:  # pragma: no cover - every collective has a layout
        return Verdict(None, f"no definition of {name}")
    distinct = list({id(g): g for g in graphs}.values())  # symmetric algorithms share one graph
    try:
        total = _chunk_total(graphs, distinct, layout)
        places = _placements(graphs)
    except _Unverifiable as exc:
        return Verdict(None, str(exc))
    return _verify_placements(graphs, distinct, collective, layout, places, total, lockstep)


def _barrier_verdict(graphs: Sequence[AlgoGraph], lockstep: bool) -> Verdict:
    """Whether every rank hears, directly or through others, from every rank before it leaves the barrier."""
    n = len(graphs)
    try:
        heard = Execution(graphs, C.BARRIER, None, OUT_OF_PLACE, 1).run(
            prepare(graphs), causal=True, turn=int(lockstep)
        )
    except Wrong as exc:
        return Verdict(False, str(exc))
    assert heard is not None
    full = (1 << n) - 1
    for r, bits in enumerate(heard):
        if bits != full:
            return Verdict(
                False, f"rank {r} can leave the barrier before ranks {ranks_text(full & ~bits)} have entered it"
            )
    return Verdict(True, f"barrier over {n} ranks: every rank hears from every rank before it leaves")


def _chunk_total(graphs: Sequence[AlgoGraph], distinct: list[AlgoGraph], layout: CollectiveLayout) -> int:
    """The chunks per buffer every rank's graph is written for.

    Raises:
        _Unverifiable: graphs without data annotations or with gated nodes, absolute sizes, ranks that
            disagree, or a total that cannot be split into the collective's pieces.
    """
    n = len(graphs)
    if not all(g.annotated for g in distinct):
        if not any(any(d is not None for d in g.data) for g in distinct):
            raise _Unverifiable("no data annotations (the graphs say how much each node moves, not which chunks)")
        r = next(i for i, g in enumerate(graphs) if not g.annotated)
        g = graphs[r]
        v = next(i for i, k in enumerate(g.kinds) if k in (SEND, RECV) and g.data_of(i) is None)
        raise _Unverifiable(f"rank {r}, node {g.names[v]!r} has no data annotation")
    if any(g.gates for g in distinct):
        why = "gated nodes (released in completion order, before all their dependencies) are not verified"
        raise _Unverifiable(why)
    # A rank without messages read from a file has no chunk count; it takes the others'.
    totals = {g.total_chunks for g in distinct if g.total_chunks is not None or SEND in g.kinds or RECV in g.kinds}
    if None in totals:
        raise _Unverifiable("sizes are absolute bytes, not chunks of the collective's buffer")
    if len(totals) > 1:
        raise _Unverifiable(f"the ranks disagree on the chunks per buffer ({sorted(t or 0 for t in totals)})")
    total = int(totals.pop() or 0) if totals else n
    if layout.needs_pieces and total % n:
        raise _Unverifiable(f"{total} chunks cannot be split into equal pieces for {n} ranks")
    return total


def _verify_placements(
    graphs: Sequence[AlgoGraph],
    distinct: list[AlgoGraph],
    collective: CollectiveType,
    layout: CollectiveLayout,
    places: tuple[str, ...],
    total: int,
    lockstep: bool,
) -> Verdict:
    """The verdict over every placement the graphs declare.

    Each placement is settled by rank 0's run when every rank shares one graph, by the union of the graphs when
    it proves their copies right, and otherwise by executing every rank.
    """
    n = len(graphs)
    name = collective.name.lower()
    checked = 0
    ambiguity = ""
    shared = distinct[0] if len(distinct) == 1 and not lockstep else None
    notes = ""
    preps: dict[int, Prep] = {}

    def prep_of(some: Sequence[AlgoGraph]) -> dict[int, Prep]:
        """The execution's preparation of *some* graphs, made once for every placement."""
        missing = [g for g in some if id(g) not in preps]
        if missing:
            preps.update(prepare(missing))
        return preps

    for place in places:
        note = None
        if shared is not None:  # every rank's outcome is rank 0's rotated (etsim.algo.verify_shared)
            note = shared_verdict(shared, n, collective, layout, place, total, prep_of([shared])[id(shared)])
        elif not lockstep:  # copies over the union of the graphs (etsim.algo.verify_union)
            watch = progress.stage(f"verifying {name} over {n} ranks in bulk", 2, "steps")
            union = union_of(graphs)
            watch.advance()
            if not isinstance(union, str) and union_verdict(graphs, union, layout, place, total):
                note = ""
            watch.advance()
        if note is not None:
            out_size = total // n if layout.piece_output else total
            checked = max(checked, out_size * (1 if layout.root_only else n))
            notes = notes or note
            continue
        run = Execution(graphs, collective, layout, place, total)
        tag = f" ({place.replace('_', ' ')})" if len(places) > 1 else ""
        try:
            run.run(prep_of(graphs), causal=False, turn=int(lockstep))
        except Wrong as exc:
            return Verdict(False, f"{exc}{tag}")
        found = run.check()
        if found is not None:
            message, wrong, count = found
            return Verdict(False, f"{message}{tag} ({wrong:,} of {count:,} output chunks wrong)")
        checked = max(checked, run.out_size * (1 if layout.root_only else n))
        ambiguity = ambiguity or run.ambiguity
    where = " and ".join(p.replace("_", " ") for p in places)
    setup = sum(len(g.setup) for g in graphs)
    note = f" (with {setup} untimed local cop{'y' if setup == 1 else 'ies'} the graphs declare)" if setup else ""
    message = f"{name} over {n} ranks, {where}: all {checked:,} output chunks hold what they should{note}{notes}"
    return Verdict(True, message, ambiguity)


#: Families of ranks' graphs of at least this many nodes in all are verified by :func:`verify_graphs_later` in a
#: copy of the process (below, a fork costs more than it saves).
BACKGROUND_NODES = 200_000


class PendingVerdict:
    """A verification running in a forked copy of the process (:func:`verify_graphs_later`).

    Calling it waits for the verdict (made once; a copy that died or raised is redone here); :meth:`cancel` ends the
    copy when the verdict is no longer wanted.
    """

    def __init__(self, job: Background, graphs: Sequence[AlgoGraph], collective: CollectiveType | int) -> None:
        self._job, self._graphs, self._collective = job, graphs, collective
        self._verdict: Verdict | None = None

    def __call__(self) -> Verdict:
        """The verdict, waited for once (the seconds waited shown as progress)."""
        if self._verdict is None:
            import time

            from etsim.workers import BackgroundLost

            name = CollectiveType(int(self._collective)).name.lower()
            label = f"verifying {name} over {len(self._graphs):,} ranks beside the run"
            watch = progress.stage(label, None, "s waited")
            start = time.perf_counter()

            def waiting() -> None:
                waited = int(time.perf_counter() - start)
                if waited > watch.done:
                    watch.advance(waited - watch.done)

            try:
                self._verdict = self._job.result(waiting)
            except BackgroundLost:
                self._verdict = verify_graphs(self._graphs, self._collective)
        return self._verdict

    def cancel(self) -> None:
        """End the copy (killed and reaped) unless its verdict was taken."""
        self._job.cancel()


def verify_graphs_later(graphs: Sequence[AlgoGraph], collective: CollectiveType | int) -> PendingVerdict | None:
    """:func:`verify_graphs` of *graphs* running beside the caller, which asks for the verdict when it needs it.

    Only a large family is (:data:`BACKGROUND_NODES` nodes over its ranks), verified by rank 0's execution when
    every rank shares its graph, else over the union of the ranks' graphs. That union is made here, before the copy
    of the process is forked, so that the copy and the caller (whose fast path evaluates the same union) share it.
    None means the caller verifies now: the family is small, there is no union, or the process cannot fork
    (:func:`~etsim.workers.fork_call`). A copy that dies, or raises, has its verification redone in this process
    when the verdict is asked for: the verdict never depends on where it was made.
    """
    from etsim.workers import fork_call

    if sum(g.num_nodes for g in graphs) < BACKGROUND_NODES:
        return None
    if len({id(g) for g in graphs}) > 1 and isinstance(union_of(graphs), str):
        return None
    job = fork_call(_verify_quietly, graphs, int(collective))
    return PendingVerdict(job, graphs, collective) if job is not None else None


def _verify_quietly(graphs: Sequence[AlgoGraph], collective: int) -> Verdict:
    """:func:`verify_graphs` with no progress shown (the process that waits for it shows its own)."""
    with progress.shown_on(None):
        return verify_graphs(graphs, collective)
