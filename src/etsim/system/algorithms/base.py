"""The :class:`CollectiveAlgorithm` plug-in point and its registry."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

from etsim import progress
from etsim.algo.graph import RECV, SEND, AlgoGraph
from etsim.algo.semantics import minimum_bytes
from etsim.algo.verify import PendingVerdict, Verdict, verify_graphs, verify_graphs_later
from etsim.chakra.graph import CollectiveType, collective_buffer_bytes
from etsim.errors import ConfigError, warn
from etsim.registry import Registry

__all__ = ["ALGORITHMS", "BuiltAlgorithm", "CollectiveAlgorithm", "DeferredCheck", "DeferredChecks", "Phase"]

#: How many times the most bytes a correct algorithm sends (the least a collective needs; an all-reduce's one-shot, n/2
#: times that) graphs of absolute sizes may send before a run says they were likely written for a larger call.
OVERSIZED = 4.0


@dataclass(frozen=True, slots=True)
class DeferredCheck:
    """What :meth:`CollectiveAlgorithm.check_correct` leaves when the verification runs beside its caller.

    Attributes:
        settle: waits for the verdict; raises what ``check_correct`` would have raised.
        cancel: ends the verification, whose verdict is no longer wanted (nothing is left running).
    """

    settle: Callable[[], None]
    cancel: Callable[[], None]


class DeferredChecks:
    """The checks verifications running beside a simulation left, settled in the order they were left.

    The simulation owns it and hands it to its :class:`~etsim.system.collective.System`, which adds what
    :meth:`CollectiveAlgorithm.check_correct` leaves (:meth:`add`). Each check is kept with the *mark* of the run's
    warnings when it was left (``mark()``: how many had been recorded): a check that refuses late stands for a
    refusal made at that point, so the warnings recorded after it are not the run's.

    Args:
        mark: how many warnings the run has recorded so far (default: none are tracked).
    """

    def __init__(self, mark: Callable[[], int] = lambda: 0) -> None:
        self._mark = mark
        self._pending: list[tuple[DeferredCheck, int]] = []
        #: After :meth:`settle` raised: the mark of the check that raised (the warnings to keep), else None.
        self.raised_at: int | None = None

    def add(self, check: DeferredCheck) -> None:
        """Keep *check*, marked with the warnings recorded so far."""
        self._pending.append((check, self._mark()))

    def settle(self) -> None:
        """Make every check in order (each waits for its verdict).

        Raises:
            ConfigError: an algorithm does not compute its collective, as verifying it first would have said. Then, as
                with any error a check raises, :attr:`raised_at` says which warnings to keep and the other checks are
                cancelled.
        """
        pending = self._pending
        try:
            while pending:
                pending[0][0].settle()
                pending.pop(0)
        except Exception:
            self.raised_at = pending[0][1]
            self.cancel()
            raise
        except BaseException:
            self.cancel()
            raise

    def cancel(self) -> None:
        """End every verification still running (an interrupt, a refusal)."""
        for check, _ in self._pending:
            check.cancel()
        self._pending.clear()


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of a rank's part of a collective: a graph, walked after the previous phase of its stream.

    Attributes:
        graph: what the rank does in this phase.
        queue: the rank's queue the phase waits in before it starts (at most ``active_streams`` phases
            of one queue run at once; e.g. one queue per topology dimension).
        start_delay: the phase waits the system's ``stream_delay`` before its first node.
        endpoint_delay: its messages pay the system's ``endpoint_delay``.
    """

    graph: AlgoGraph
    queue: Hashable = 0
    start_delay: bool = True
    endpoint_delay: bool = True


class CollectiveAlgorithm:
    """Base class of collective algorithms: say, per rank, which messages a collective sends.

    Contract for subclasses:

    - ``collectives`` (class attribute) lists the :class:`~etsim.chakra.CollectiveType` values
      the algorithm implements; :meth:`supports` may refine it by group size (e.g. powers of two).
    - :meth:`graph` returns the :class:`~etsim.algo.graph.AlgoGraph` of the rank at group
      position ``position`` for a collective over ``group_size`` ranks. Peers are group
      positions (or offsets, with ``relative_peers``); the system maps them to global ranks.
    - Sizes are symbolic chunk counts (``total_chunks`` set) relative to the collective buffer
      (:func:`~etsim.chakra.graph.collective_buffer_bytes`), so the graph does not depend on
      the message size; absolute byte sizes are allowed for ingested files that carry them.
    - Graphs are pure functions of ``(collective, group_size, position)``; the system caches
      them, so returning the same object for every position is fine.
    - Sends and receives must pair up across ranks per (src, dst, tag), in order; COMP nodes
      are reductions (costed by the system's reduction bandwidth unless they carry a duration).
    - Algorithms never touch the network: the simulator walks the graph with the same walker as
      workloads.
    - Optionally, :meth:`for_call` returns the algorithm that serves one call, when that depends on the call: its
      group (an algorithm synthesised for the group's NPUs) or its size (a runtime that chooses its algorithm,
      protocol and channels per call, as NCCL does). It must return the same object for the same call (the
      system caches graphs by the algorithm's identity), and a ``label`` attribute on it names what was chosen in
      the results (default: the spec as written).
    - Optionally, :meth:`phases` splits a rank's part of one chunk (stream) into phases walked one
      after another, each waiting in a queue of the rank (e.g. one phase per topology dimension, so
      that streams pipeline across dimensions); the default is one phase, :meth:`graph`.
    - Optionally, ``synchronises_itself = True`` says the graphs carry every wait the call has, as a runtime's
      kernels do: a rank leaves the call when its own messages are done (NCCL's broadcast root does not wait for
      its receivers; its all-reduce ranks wait for each other through their messages). The run then adds no
      barrier of its own (``synchronise_collectives`` does not apply to it).
    - Graphs may say which chunks each node moves (:mod:`etsim.algo.dataflow`); then
      :meth:`verify` checks that the algorithm computes its collective, and the system refuses
      one that does not before running it (:meth:`check_correct`). A class whose own body sets
      ``verified_by_tests = True`` (the natives) is checked by etsim's test suite instead of at
      run time; subclasses that change the graphs must not inherit that claim (it is read from
      the class itself, not its bases).
    - Optionally, :attr:`fold_hint` says why a replica fold cannot mirror the members of a call and what setting
      would let it (appended to the fold's refusal); the default says nothing.
    """

    #: Registry name.
    name: ClassVar[str] = ""
    #: Where the algorithm comes from: ``native`` (built in code), ``chakra-et`` or ``msccl-ir`` (read from files).
    source: ClassVar[str] = "native"
    #: Collectives implemented.
    collectives: ClassVar[frozenset[CollectiveType]] = frozenset()
    #: The test suite verifies this class's graphs (read from the class's own body, never inherited).
    verified_by_tests: ClassVar[bool] = False
    #: Switches reduce for it (NVLink SHARP, SHARP): fewer bytes cross the NPUs' links than any algorithm whose
    #: NPUs reduce needs, so the run checks it against the in-network bound (``network/bounds.py``).
    reduces_in_network: bool = False
    #: Its graphs carry every wait of the call (a rank leaves on its own messages): no barrier is added.
    synchronises_itself: ClassVar[bool] = False
    _verdicts: dict[tuple[int, int], Verdict]

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """None if the algorithm can run *collective* on *group_size* ranks, else the reason it cannot."""
        if collective not in self.collectives:
            supported = ", ".join(sorted(c.name.lower() for c in self.collectives)) or "nothing"
            return f"algorithm {self.name!r} does not implement {collective.name.lower()} (it implements {supported})"
        if group_size < 1:
            return f"algorithm {self.name!r}: a group needs at least one rank, not {group_size}"
        return None

    @property
    def fold_hint(self) -> str:
        """Why a replica fold cannot mirror this algorithm's members, and what would let it ("" : nothing to say)."""
        return ""

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """The algorithm graph of the rank at *position* (0..group_size-1)."""
        raise NotImplementedError

    def for_call(self, collective: CollectiveType, size: int, group: tuple[int, ...]) -> CollectiveAlgorithm:
        """The algorithm serving one call: this one, unless the algorithm depends on the call.

        The call is *collective* on *size* bytes (``comm_size``) over *group* (global ranks by position); see the
        class docstring.
        """
        return self

    def phases(
        self, collective: CollectiveType, group_size: int, position: int, *, stream: int, state: dict[str, Any]
    ) -> list[Phase]:
        """The phases of the rank at *position* for chunk *stream* (default: one phase, :meth:`graph`).

        Args:
            collective: the collective.
            group_size: ranks in the group.
            position: the rank's position in the group.
            stream: the chunk (stream) index of this collective call.
            state: a dictionary kept per rank and algorithm for the whole run, in which an algorithm
                may keep what it counts across calls (e.g. which of two trees comes next).
        """
        return [Phase(self.graph(collective, group_size, position))]

    def check(self, collective: CollectiveType, group_size: int) -> None:
        """Raise :class:`~etsim.errors.ConfigError` if :meth:`supports` gives a reason."""
        reason = self.supports(collective, group_size)
        if reason is not None:
            raise ConfigError(reason)

    def verify(self, collective: CollectiveType, group_size: int) -> Verdict:
        """Whether the algorithm computes *collective* on *group_size* ranks.

        Runs :func:`~etsim.algo.verify.verify_graphs` on the graphs of every position, once per
        algorithm object, collective and group size (cached). A collective or size the
        algorithm does not support gives a cannot-verify verdict with the reason.
        """
        cache = self._verdict_cache()
        key = (int(collective), group_size)
        verdict = cache.get(key)
        if verdict is None:
            graphs = self._graphs_to_verify(collective, group_size)
            verdict = verify_graphs(graphs, collective) if isinstance(graphs, list) else graphs
            cache[key] = verdict
        return verdict

    def _verdict_cache(self) -> dict[tuple[int, int], Verdict]:
        cache: dict[tuple[int, int], Verdict] | None = getattr(self, "_verdicts", None)
        if cache is None:
            cache = self._verdicts = {}
        return cache

    def _graphs_to_verify(self, collective: CollectiveType, group_size: int) -> list[AlgoGraph] | Verdict:
        """Every position's graph, or the cannot-verify verdict of an algorithm whose graphs are not verified."""
        reason = self.supports(collective, group_size)
        if reason is not None:
            return Verdict(None, reason)
        if type(self).phases is not CollectiveAlgorithm.phases:
            return Verdict(None, f"algorithm {self.name!r} runs as phases; phased algorithms are not verified")
        return [self.graph(collective, group_size, r) for r in range(group_size)]

    def _verify_later(
        self, collective: CollectiveType, group_size: int
    ) -> tuple[Callable[[], Verdict], Callable[[], None]] | None:
        """:meth:`verify` running beside the caller (:func:`~etsim.algo.verify.verify_graphs_later`), or None.

        The verdict (cached as :meth:`verify` caches it), and what ends the verification when it is not wanted.
        """
        cache = self._verdict_cache()
        key = (int(collective), group_size)
        if key in cache:
            return None
        running: dict[tuple[int, int], PendingVerdict] = self.__dict__.setdefault("_verdicts_running", {})
        pending = running.get(key)
        if pending is None:
            graphs = self._graphs_to_verify(collective, group_size)
            pending = verify_graphs_later(graphs, collective) if isinstance(graphs, list) else None
            if pending is None:
                return None
            running[key] = pending
        started = pending

        def verdict() -> Verdict:
            if key not in cache:
                cache[key] = started()
                running.pop(key, None)
            return cache[key]

        def cancel() -> None:
            if key not in cache:
                started.cancel()
                running.pop(key, None)

        return verdict, cancel

    def check_correct(
        self,
        collective: CollectiveType,
        group_size: int,
        *,
        where: str = "",
        label: str = "",
        size: float | None = None,
        later: list[DeferredCheck] | None = None,
    ) -> None:
        """Raise :class:`~etsim.errors.ConfigError` if :meth:`verify` finds the algorithm wrong.

        Algorithms whose class declares ``verified_by_tests`` are not verified here (their graphs
        are checked by etsim's tests for every collective and several group sizes). Graphs that cannot
        be verified (no data annotations, custom programs) must still move what any algorithm computing the
        collective must (:func:`~etsim.algo.semantics.minimum_bytes`, for a call of *size* bytes; graphs of absolute
        sizes are not compared when *size* is None, as when families run as written): fewer is an error, never a
        time faster than the collective allows.

        *later*: a caller that can go on before the verdict is known (a simulation) passes a list. A verification
        that runs beside it (:func:`~etsim.algo.verify.verify_graphs_later`) then leaves there a
        :class:`DeferredCheck`; the caller settles every such check before it trusts what it computed, and before
        it reports any other error, or cancels them.
        """
        if type(self).__dict__.get("verified_by_tests", False):
            return
        if size is not None:
            self._warn_oversized(collective, group_size, label, size)
        found = self._verify_later(collective, group_size) if later is not None else None
        if found is None:
            self._judge(self.verify(collective, group_size), collective, group_size, where, label, size)
            return
        assert later is not None
        verdict, cancel = found
        later.append(DeferredCheck(lambda: self._judge(verdict(), collective, group_size, where, label, size), cancel))

    def _judge(
        self, verdict: Verdict, collective: CollectiveType, group_size: int, where: str, label: str, size: float | None
    ) -> None:
        """Raise what :meth:`check_correct` raises for *verdict*."""
        prefix = f"{where}: " if where else ""
        name = label or self.name
        if verdict.ok is False:
            raise ConfigError(
                f"{prefix}algorithm {name!r} does not compute {collective.name.lower()} over "
                f"{group_size} ranks: {verdict.message}"
            )
        if verdict.ok is None:
            short = self._too_few_bytes(collective, group_size, size)
            if short:
                raise ConfigError(
                    f"{prefix}algorithm {name!r} cannot compute {collective.name.lower()} over {group_size} ranks: "
                    f"{short} (it cannot be verified: {verdict.message})"
                )

    def _warn_oversized(self, collective: CollectiveType, group_size: int, label: str, size: float) -> None:
        """Warn (once per algorithm) when graphs of absolute sizes move :data:`OVERSIZED` times what the call needs.

        Such graphs run as written, whatever the call's size: far more bytes than any algorithm computing the call
        moves means they were written for a larger call (fewer is an error: :meth:`_too_few_bytes`).
        """
        checked: set[tuple[int, int, float]] = self.__dict__.setdefault("_sizes_checked", set())
        key = (int(collective), group_size, size)
        if key in checked or self.__dict__.get("_oversized_warned") or self.supports(collective, group_size):
            return
        checked.add(key)
        if type(self).phases is not CollectiveAlgorithm.phases or self.graph(collective, group_size, 0).total_chunks:
            return  # (chunk counts scale with the call)
        graphs = [self.graph(collective, group_size, r) for r in range(group_size)]
        if any(g.total_chunks is not None for g in graphs):
            return
        sent = sum(_moved(graphs)[0])
        need = minimum_bytes(collective, group_size, collective_buffer_bytes(collective, size, group_size))["total"]
        # (a one-shot all-reduce, each rank's whole buffer to every peer, sends n/2 times the least: no more than that)
        most = need * (group_size / 2 if collective == CollectiveType.ALL_REDUCE and group_size > 2 else 1)
        if need > 0 and sent > OVERSIZED * most:
            self._oversized_warned = True
            warn(
                f"algorithm {label or self.name!r} gives absolute sizes (comm_size), which run as written: its "
                f"{group_size} ranks send {sent:g} bytes for a {size:g}-byte {collective.name.lower()}, "
                f"{sent / need:.0f}x the {need:g} it needs at least; written for a larger call? (sizes written as "
                "chunk counts, msg_chunk_cnt of total_chunk_cnt, scale with the call)"
            )

    def _too_few_bytes(self, collective: CollectiveType, group_size: int, size: float | None) -> str:
        """Why the graphs move fewer bytes than any algorithm computing *collective* must, or ``""``."""
        if self.supports(collective, group_size) is not None:
            return ""
        watch = progress.stage(f"reading the graphs of {self.name}", group_size, "ranks")
        if type(self).phases is not CollectiveAlgorithm.phases:
            return self._too_few_phased(collective, group_size, watch)
        graphs = []
        for r in range(group_size):
            graphs.append(self.graph(collective, group_size, r))
            watch.advance()
        totals = {g.total_chunks for g in graphs}
        if len(totals) != 1:
            return ""  # the ranks disagree on their units: the verifier says so
        chunks = next(iter(totals))
        if chunks is None and size is None:
            return ""
        buffer = collective_buffer_bytes(collective, size or 0.0, group_size) if chunks is None else float(chunks)
        unit = "chunks" if chunks is not None else "bytes"
        need = minimum_bytes(collective, group_size, buffer)
        sent, received = _moved(graphs)
        slack = 1 - 1e-9
        total, out, into = need["total"], need["sent_per_rank"], need["received_per_rank"]
        if sum(sent) < total * slack:
            return f"its {group_size} ranks send {sum(sent):g} {unit} in all, and at least {total:g} are needed"
        for r in range(group_size):
            if sent[r] < out * slack:
                return f"rank {r} sends {sent[r]:g} {unit}, and at least {out:g} are needed"
            if received[r] < into * slack:
                return f"rank {r} receives {received[r]:g} {unit}, and at least {into:g} are needed"
        return ""

    def _too_few_phased(self, collective: CollectiveType, group_size: int, watch: progress.Stage) -> str:
        """:meth:`_too_few_bytes` for phases: each phase's sends as shares of the buffer, summed per rank."""
        sent = [0.0] * group_size
        for r in range(group_size):
            for phase in self.phases(collective, group_size, r, stream=0, state={}):
                g = phase.graph
                if not g.total_chunks:
                    return ""  # (absolute sizes: shares of no buffer)
                sent[r] += sum(a for k, a in zip(g.kinds, g.chunks, strict=True) if k == SEND) / g.total_chunks
            watch.advance()
        need = minimum_bytes(collective, group_size, 1.0)
        total, out, slack = need["total"], need["sent_per_rank"], 1 - 1e-9
        if sum(sent) < total * slack:
            return f"its {group_size} ranks send {sum(sent):.4g} buffers in all, and at least {total:.4g} are needed"
        worst = min(range(group_size), key=sent.__getitem__)
        if sent[worst] < out * slack:
            return f"rank {worst} sends {sent[worst]:.4g} buffers, and at least {out:.4g} are needed"
        return ""

    def check_position(self, collective: CollectiveType, group_size: int, position: int) -> None:
        """:meth:`check`, and raise :class:`~etsim.errors.ConfigError` if *position* is not in the group."""
        self.check(collective, group_size)
        if not 0 <= position < group_size:
            raise ConfigError(f"algorithm {self.name!r}: position {position} is outside a group of {group_size} ranks")


def _moved(graphs: list[AlgoGraph]) -> tuple[list[float], list[float]]:
    """What each position's graph sends and receives, in its units (chunks, or bytes for absolute sizes)."""
    sent, received = [0.0] * len(graphs), [0.0] * len(graphs)
    for r, g in enumerate(graphs):
        for kind, amount in zip(g.kinds, g.chunks, strict=True):
            if kind == SEND:
                sent[r] += amount
            elif kind == RECV:
                received[r] += amount
    return sent, received


class BuiltAlgorithm(CollectiveAlgorithm):
    """A native algorithm whose graphs a subclass builds in :meth:`_build`; :meth:`graph` caches them.

    Subclasses implement ``_build(collective, group_size, position)`` and, when one graph with
    relative peers serves every rank of a collective, return True from :meth:`shares_graph`.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int, int], AlgoGraph] = {}

    def shares_graph(self, collective: CollectiveType) -> bool:
        """True if every position uses the same graph for *collective* (relative peers)."""
        return False

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """The (cached) graph of the rank at *position*."""
        self.check_position(collective, group_size, position)
        key = (int(collective), group_size, -1 if self.shares_graph(collective) else position)
        graph = self._cache.get(key)
        if graph is None:
            graph = self._cache[key] = self._build(collective, group_size, position)
        return graph

    def _build(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        raise NotImplementedError


#: Algorithm registry: built-ins, the ``etsim.collectives`` entry points, ``module:Class``.
ALGORITHMS: Registry[CollectiveAlgorithm] = Registry("collective algorithm", "etsim.collectives", CollectiveAlgorithm)
