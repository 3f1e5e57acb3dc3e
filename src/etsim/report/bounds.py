"""Physical lower bounds on a run's collectives, checked against what the run reported.

A collective cannot finish before its members have pushed the bytes it needs through their links. For
one instance of a collective (the same call on every member of its group), every byte it must move
leaves a member through that NPU's outgoing links and enters one through its incoming links, between
the first member's start and the last member's end. With :func:`~etsim.algo.semantics.minimum_bytes`
(per rank sent and received, and the total over ranks), the instance's window must be at least

- ``sent_per_rank / injection(r)`` and ``received_per_rank / ejection(r)`` for every member r, where
  injection (ejection) is the sum of the bandwidths of the NPU's outgoing (incoming) links;
- ``total / Σ injection`` and ``total / Σ ejection`` over the members.

Latency is not counted, so the bound is conservative: a run below it is impossible on this network.
Congestion-unaware models (``analytical``, ``ideal``) can go below it; congestion-aware ones never
should (a property test holds them to it).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from etsim.algo.semantics import minimum_bytes
from etsim.chakra.graph import collective_buffer_bytes, parse_collective
from etsim.network.topology import Topology
from etsim.report.result import CollectiveRecord
from etsim.units import format_bandwidth, format_size, format_time

__all__ = ["BoundViolation", "collective_bound_violations", "describe_violations"]

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


def _npu_bandwidths(topology: Topology) -> tuple[dict[int, float], dict[int, float]]:
    """Per NPU: the summed bandwidth (B/ns) of its outgoing links, and of its incoming links."""
    out: dict[int, float] = defaultdict(float)
    into: dict[int, float] = defaultdict(float)
    npus = topology.npus
    for (u, v), bw in zip(topology.links, topology.bandwidths, strict=True):
        if isinstance(u, int) and u < npus:
            out[u] += bw
        if isinstance(v, int) and v < npus:
            into[v] += bw
    return out, into


def _instances(records: Sequence[CollectiveRecord]) -> list[list[CollectiveRecord]]:
    """Records grouped into instances: the k-th call of (group, type, size) on each member is one instance."""
    per_rank: dict[tuple[tuple[int, ...], str, float, int], list[CollectiveRecord]] = defaultdict(list)
    for rec in records:
        per_rank[(tuple(rec.group), rec.type, rec.bytes, rec.rank)].append(rec)
    instances: dict[tuple[tuple[int, ...], str, float, int], list[CollectiveRecord]] = defaultdict(list)
    for (group, kind, size, _rank), recs in per_rank.items():
        recs.sort(key=lambda r: (r.start_ns, r.node_id))
        for k, rec in enumerate(recs):
            instances[(group, kind, size, k)].append(rec)
    return [recs for (group, *_), recs in instances.items() if len(recs) == len(group)]


def collective_bound_violations(records: Sequence[CollectiveRecord], topology: Topology) -> list[BoundViolation]:
    """Every collective instance of *records* that took less than its bandwidth bound on *topology*."""
    inject, eject = _npu_bandwidths(topology)
    found: list[BoundViolation] = []
    for recs in _instances(records):
        group = tuple(recs[0].group)
        n = len(group)
        if n < 2:
            continue
        try:
            kind = parse_collective(recs[0].type)
        except ValueError:
            continue
        buffer = collective_buffer_bytes(kind, recs[0].bytes, n)
        need = minimum_bytes(kind, n, buffer)
        start = min(r.start_ns for r in recs)
        end = max(r.end_ns for r in recs)
        bound, reason = 0.0, ""
        terms = []
        for r in group:
            terms.append((need["sent_per_rank"], inject.get(r, 0.0), f"rank {r} must send", "outgoing"))
            terms.append((need["received_per_rank"], eject.get(r, 0.0), f"rank {r} must receive", "incoming"))
        terms.append((need["total"], sum(inject.get(r, 0.0) for r in group), "the group must send", "outgoing"))
        terms.append((need["total"], sum(eject.get(r, 0.0) for r in group), "the group must receive", "incoming"))
        for nbytes, bandwidth, who, way in terms:
            if nbytes <= 0:
                continue
            t = nbytes / bandwidth if bandwidth > 0 else math.inf
            if t > bound:
                bound = t
                reason = f"{who} {format_size(nbytes)} through {format_bandwidth(bandwidth)} of {way} links"
        if end - start < bound * (1 - TOLERANCE):
            found.append(BoundViolation(recs[0].type, recs[0].bytes, group, start, end, bound, reason))
    return found


def describe_violations(violations: Sequence[BoundViolation], model: str, aware: bool) -> str:
    """One warning text for *violations* (non-empty) under network model *model*."""
    worst = min(violations, key=lambda v: (v.end_ns - v.start_ns) / v.bound_ns)
    members = f"ranks {worst.group[0]}..{worst.group[-1]}" if len(worst.group) > 2 else f"ranks {list(worst.group)}"
    text = (
        f"{len(violations)} collective(s) finished faster than their bytes can cross the links: e.g. "
        f"{worst.collective.lower()} of {format_size(worst.bytes)} over {len(worst.group)} {members} took "
        f"{format_time(worst.end_ns - worst.start_ns)} (from {format_time(worst.start_ns)}), but "
        f"{worst.reason}, which takes {format_time(worst.bound_ns)}; "
    )
    if aware:
        return text + f"network model {model!r} should never allow this (a bug in the model: please report it)"
    return text + f"network model {model!r} ignores contention; use --model flow (the default) for a physical bound"
