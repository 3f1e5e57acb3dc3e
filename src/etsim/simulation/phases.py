"""The pieces of a run's phases (``simulation/__init__.py``): what it reports, its plan, its warnings, its collector.

- :class:`Reports`: what the collect phase adds to a result beyond the run's own figures;
- :class:`Plan`: what an attempt of the run phase may shorten (replica folding, the fast path) and what earlier
  attempts ruled out; :meth:`Plan.after` is the plan after a conflict;
- :class:`WarningLog`: the warnings a run records, handed on to the caller when it ends (only the attempt that
  completes speaks);
- :func:`collector_paused`: the cyclic garbage collector off for the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import warnings
from collections.abc import Hashable, Iterator
from dataclasses import dataclass

from etsim.errors import ConfigError, EtsimWarning, FastPathConflict, FoldConflict
from etsim.workload.fold import ReplicaFold

__all__ = ["DEFAULT_REPORTS", "MAX_FAST_RERUNS", "NO_REPORTS", "Plan", "Reports", "WarningLog", "collector_paused"]

#: Attempts with the fast path before a run falls back to the event path for every collective.
MAX_FAST_RERUNS = 3


@dataclass(frozen=True, kw_only=True)
class Reports:
    """What the collect phase adds to a :class:`Result` beyond the run's own figures.

    Attributes:
        groups: exposed communication per communicator group (``Result.groups``). A workload with several groups
            is recorded for it, which keeps the fast path off (its figures are the same either way).
        training: the step report of a generated training job (``Result.training``), when the workload is one.
        critical_path: the critical path (``Result.critical_path``); records every message.
        messages: record every message (a timeline of messages); implied by *critical_path*.
        message_limit: record at most this many messages (None: all).
        timeline: record node times even when no report needs them (to write a timeline afterwards).
    """

    groups: bool = True
    training: bool = True
    critical_path: bool = False
    messages: bool = False
    message_limit: int | None = None
    timeline: bool = False

    def __post_init__(self) -> None:
        flags = {name: getattr(self, name) for name in ("groups", "training", "critical_path", "messages", "timeline")}
        for name, value in flags.items():
            if not isinstance(value, bool):
                raise ConfigError(f"Reports.{name}: expected true or false, got {value!r}")
        limit = self.message_limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ConfigError(f"Reports.message_limit: expected None or a count >= 0, got {limit!r}")


#: What ``etsim run`` reports: exposure per communicator group, a training job's step report.
DEFAULT_REPORTS = Reports()
#: The run's own figures only: no recording, no report (the fastest run; what regression snapshots compare).
NO_REPORTS = Reports(groups=False, training=False)


@dataclass(frozen=True)
class Plan:
    """What an attempt of the run phase may shorten, and what earlier attempts ruled out.

    Attributes:
        fold: the replica fold to simulate under, or None: every rank runs.
        fold_note: why there is no fold (for a refusal that names it).
        fast_excluded: collective parts (``("part", namespace)``) and graphs (``("graph", signature)``) the fast
            path must leave to the event path; None: the fast path is off.
        reruns: attempts redone so far because a fast-path part could not be proven exact.
    """

    fold: ReplicaFold | None
    fold_note: str
    fast_excluded: frozenset[Hashable] | None
    reruns: int = 0
    dropped: bool = False
    """A fold was planned and did not hold (``fold_note`` says why): every rank ran."""

    def after(self, conflict: FoldConflict | FastPathConflict) -> Plan:
        """The plan that rules out what *conflict* found: every rank runs, or that part takes the event path."""
        if isinstance(conflict, FoldConflict):
            return dataclasses.replace(self, fold=None, fold_note=f"the fold did not hold: {conflict}", dropped=True)
        reruns = self.reruns + 1
        if conflict.namespace is None:  # nothing in particular: every collective on the event path
            reruns = MAX_FAST_RERUNS
        excluded = set(self.fast_excluded or ())
        excluded.add(("part", conflict.namespace))
        if conflict.signature is not None:
            excluded.add(("graph", conflict.signature))
        return Plan(self.fold, self.fold_note, frozenset(excluded) if reruns < MAX_FAST_RERUNS else None, reruns)


class WarningLog:
    """The warnings a run records: every one is handed on to the caller's filters when the run ends.

    Only the attempt that completes speaks: :meth:`mark` and :meth:`truncate` drop what a redone attempt said.
    """

    def __init__(self) -> None:
        self.caught: list[warnings.WarningMessage] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Record every warning while the block runs; hand them all on as it ends, however it ends."""
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", EtsimWarning)
                self.caught = caught
                yield
        finally:
            for w in self.caught:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)

    def mark(self) -> int:
        """How many warnings are recorded so far."""
        return len(self.caught)

    def truncate(self, mark: int) -> None:
        """Drop the warnings recorded after *mark*."""
        del self.caught[mark:]

    def messages(self) -> list[str]:
        """The recorded etsim warnings' texts, each once, in the order first said."""
        return list(dict.fromkeys(str(w.message) for w in self.caught if issubclass(w.category, EtsimWarning)))


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the block runs (it runs after).

    A run makes millions of objects that live until it ends (a family's graphs, the union, the caches) or die young
    (events), none in cycles worth collecting: the collector would only traverse them again and again (0.3 s of the
    TACOS 32×32 family's run).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
