"""Physical lower bounds on a run's collectives, checked against what the run reported.

A collective cannot finish before its members have pushed the bytes it needs through their links. For
one instance of a collective (the same call on every member of its group), every byte it must move
crosses the members' links between the first member's start and the last member's end, so that window
must be at least the bandwidth bound of :class:`~etsim.network.bounds.CollectiveBounds`.

Latency is not counted, so the bound is conservative: a run below it is impossible on this network.
Congestion-unaware models (``analytical``, ``ideal``) can go below it; congestion-aware ones never
should (a property test holds them to it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from etsim.chakra.graph import collective_buffer_bytes, parse_collective
from etsim.network.bounds import CollectiveBounds, TimeBound
from etsim.network.model import LinkStats
from etsim.network.topology import Topology
from etsim.report.result import CollectiveRecord
from etsim.units import format_bandwidth, format_size, format_time

__all__ = ["BoundViolation", "collective_bound_violations", "describe_violations", "link_bound_warning"]

#: Relative slack for float rounding: a window shorter than the bound by less than this is not a violation.
TOLERANCE = 1e-9


@dataclass(frozen=True)
class BoundViolation:
    """One collective instance that finished faster than its members' links allow.

    Attributes:
        collective: its type (``ALL_REDUCE`` …).
        bytes: its ``comm_size``.
        group: its members.
        start_ns, end_ns: the first member's start and the last member's end.
        bound_ns: the least time its bytes need (see the module docstring).
        reason: which term set the bound, in words.
    """

    collective: str
    bytes: float
    group: tuple[int, ...]
    start_ns: float
    end_ns: float
    bound_ns: float
    reason: str


def _instances(records: Sequence[CollectiveRecord], weights: Sequence[int] | None) -> list[list[CollectiveRecord]]:
    """Records grouped into complete instances: the k-th call of (group, type, size) on each member is one instance.

    *weights*: how many members each record stands for (itself and its mirrors, which have its times), or None: 1.
    """
    # Groups by number: records of one call share their group's list (made a tuple and numbered once), and a key of
    # a small number hashes in no time where a 1,024-member tuple is hashed whole at every lookup.
    numbers: dict[tuple[int, ...], int] = {}
    number_of: dict[int, int] = {}
    sizes: list[int] = []
    per_rank: dict[tuple[int, str, float, int], list[tuple[float, int, int]]] = defaultdict(list)
    for i, rec in enumerate(records):
        number = number_of.get(id(rec.group))
        if number is None:
            members = tuple(rec.group)
            number = numbers.get(members)
            if number is None:
                number = numbers[members] = len(sizes)
                sizes.append(len(members))
            number_of[id(rec.group)] = number
        per_rank[(number, rec.type, rec.bytes, rec.rank)].append((rec.start_ns, rec.node_id, i))
    instances: dict[tuple[int, str, float, int], list[int]] = defaultdict(list)
    covered: dict[tuple[int, str, float, int], int] = defaultdict(int)
    for (number, kind, size, _rank), calls in per_rank.items():
        calls.sort()
        for k, (_, _, i) in enumerate(calls):
            instances[(number, kind, size, k)].append(i)
            covered[(number, kind, size, k)] += 1 if weights is None else weights[i]
    return [[records[i] for i in members] for key, members in instances.items() if covered[key] == sizes[key[0]]]


def collective_bound_violations(
    records: Sequence[CollectiveRecord],
    topology: Topology,
    in_network: AbstractSet[str] = frozenset(),
    weights: Sequence[int] | None = None,
) -> list[BoundViolation]:
    """Every collective instance of *records* that took less than its bandwidth bound on *topology*.

    Records of the algorithms labelled in *in_network* reduce in switches: their bound is the in-network one.
    *weights*: how many members of its instance each record stands for (a folded run's record and its mirrors,
    which have its times; None: each record itself): an instance is checked once its members are all counted.
    """
    bounds = CollectiveBounds(topology)
    found: list[BoundViolation] = []
    # Training steps repeat a few calls many times.
    known: dict[tuple[str, float, tuple[int, ...], bool], TimeBound] = {}
    for recs in _instances(records, weights):
        group = tuple(recs[0].group)
        if len(group) < 2:
            continue
        key = (recs[0].type, recs[0].bytes, group, recs[0].algorithm in in_network)
        bound = known.get(key)
        if bound is None:
            try:
                kind = parse_collective(recs[0].type)
            except ValueError:
                continue
            buffer = collective_buffer_bytes(kind, recs[0].bytes, len(group))
            bound = known[key] = bounds.bandwidth(kind, buffer, group, in_network=key[3])
        start = min(r.start_ns for r in recs)
        end = max(r.end_ns for r in recs)
        if end - start < bound.ns * (1 - TOLERANCE):
            found.append(BoundViolation(recs[0].type, recs[0].bytes, group, start, end, bound.ns, bound.reason))
    return found


def describe_violations(
    violations: Sequence[BoundViolation], model: str, aware: bool, *, count: int | None = None
) -> str:
    """One warning text for *violations* (non-empty) under network model *model*; *count*: how many in all."""
    worst = min(violations, key=lambda v: (v.end_ns - v.start_ns) / v.bound_ns)
    members = f"ranks {worst.group[0]}..{worst.group[-1]}" if len(worst.group) > 2 else f"ranks {list(worst.group)}"
    total = len(violations) if count is None else count
    text = (
        f"{total} collective(s) finished faster than their bytes can cross the links: e.g. "
        f"{worst.collective.lower()} of {format_size(worst.bytes)} over {len(worst.group)} {members} took "
        f"{format_time(worst.end_ns - worst.start_ns)} (from {format_time(worst.start_ns)}), but "
        f"{worst.reason}, which takes {format_time(worst.bound_ns)}; "
    )
    if aware:
        return text + f"network model {model!r} should never allow this (a bug in the model: please report it)"
    return text + f"network model {model!r} ignores contention; use --model flow (the default) for a physical bound"


def link_bound_warning(stats: Sequence[LinkStats], finish: float, model: str) -> str | None:
    """The warning of a congestion-unaware run that finished before its busiest link could carry its bytes, or None."""
    over = [s for s in stats if s.busy > finish * (1 + 1e-9) and s.busy > 0]
    if not over:
        return None
    worst = max(over, key=lambda s: s.busy)
    return (
        f"network model {model!r} ignores contention, and this result is faster than the links can carry: "
        f"link {worst.link} ({worst.src} -> {worst.dst}) carried {format_size(worst.bytes)}, which takes "
        f"{format_time(worst.busy)} at {format_bandwidth(worst.bandwidth)}, but the run finished at "
        f"{format_time(finish)} ({len(over)} link(s) like this); use --model flow (congestion-aware, the default) "
        "for a physical bound"
    )
