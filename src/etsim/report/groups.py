"""Communication and exposed communication per communicator group (``pg_name``), from a recorded run.

A rank's collectives on group G are *in flight* while any of its G collectives runs; they are
*exposed* while one runs and no compute does (compute as in the per-rank figures: COMP nodes and
host-side ops). Workload SEND/RECV count as the group ``p2p``. This splits each rank's
``exposed_comm_ns`` by group, so data-, tensor- and pipeline-parallel traffic can be told apart;
when two groups are exposed at the same moment, both count it, so the groups' figures can add up to
more than the rank's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from etsim.chakra.graph import NodeType
from etsim.workload.runs import CPU

if TYPE_CHECKING:
    from etsim.chakra.graph import Trace
    from etsim.report.record import RunRecorder
    from etsim.report.result import Result

__all__ = ["P2P", "exposure_by_group", "exposure_from_ranks", "single_group"]

#: The group name of workload point-to-point sends and receives.
P2P = "p2p"

_T_COMP = int(NodeType.COMP_NODE)
_T_COLL = int(NodeType.COMM_COLL_NODE)
_T_P2P = (int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE))


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, f in sorted(intervals):
        if out and s <= out[-1][1]:
            if f > out[-1][1]:
                out[-1] = (out[-1][0], f)
        else:
            out.append((s, f))
    return out


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(f - s for s, f in intervals)


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the union *a* outside the union *b* (both sorted and disjoint)."""
    total = 0.0
    i = 0
    for s, f in a:
        t = s
        while i < len(b) and b[i][1] <= t:
            i += 1
        k = i
        while k < len(b) and b[k][0] < f:
            if b[k][0] > t:
                total += b[k][0] - t
            t = max(t, b[k][1])
            k += 1
        if f > t:
            total += f - t
    return total


#: A rank's compute intervals, and its communication ones per group: ``{group: (intervals, nodes)}`` in node order.
Intervals = tuple[list[tuple[float, float]], dict[str, tuple[list[tuple[float, float]], list[int]]]]


def _rank_intervals(rec: RunRecorder, run: Any) -> Intervals:
    """A recorded rank's compute intervals, and its communication ones per group (with their nodes).

    Compute: COMP nodes and host-side collectives; communication: collectives (group ``pg_name``, ``"0"`` for the
    world) and workload SEND/RECV (group :data:`P2P`, or the ``pg_name`` they name: an all-to-all of unequal parts
    sent peer by peer); groups in the order of their first node. Nodes that never started are left out. Kept on the
    recorder (the group and the step reports both read them: a rank's walk once).
    """
    found = rec.rank_intervals.get(run.rank)
    if found is None:
        found = rec.rank_intervals[run.rank] = _intervals(rec, run)
    return found


def _intervals(rec: RunRecorder, run: Any) -> Intervals:
    """:func:`_rank_intervals`, computed.

    The nodes are sorted into compute and communication, and the communication into groups, as arrays: a rank of a
    long training step has hundreds of thousands of nodes, a few groups.
    """
    import numpy as np  # (here: a run that reports no groups starts without it)

    tr = run.trace
    starts, finishes = rec.start[run.rank], rec.finish[run.rank]
    if not starts:
        return [], {}
    types = np.array(tr.types, dtype=np.int64)
    began = np.array(starts, dtype=np.float64)
    ended = np.array(finishes, dtype=np.float64)
    started = ~np.isnan(began)
    coll = types == _T_COLL
    compute = started & ((types == _T_COMP) | (coll & (np.array(run.node_class, dtype=np.int64) == CPU)))
    mine = list(zip(began[compute].tolist(), ended[compute].tolist(), strict=True))
    talking = np.flatnonzero(started & ~compute & (coll | np.isin(types, _T_P2P)))
    if not len(talking):
        return mine, {}
    names = np.array(tr.pg_name, dtype=object)[talking]
    unnamed = ~names.astype(bool)  # (None or "": a collective's group is the world, "0"; a send's or receive's, p2p)
    names[unnamed & coll[talking]] = "0"
    names[unnamed & ~coll[talking]] = P2P
    comm = {}
    for group in dict.fromkeys(names.tolist()):  # (in the order of their first node)
        nodes = talking[names == group]
        comm[group] = (list(zip(began[nodes].tolist(), ended[nodes].tolist(), strict=True)), nodes.tolist())
    return mine, comm


def _group_figures(rec: RunRecorder, run: Any) -> dict[str, tuple[int, float, float, float]]:
    """A recorded rank's ``{group: (calls, bytes, time in flight, time exposed)}`` (ns)."""
    mine, communication = _rank_intervals(rec, run)
    compute = _union(mine)
    sizes = run.trace.comm_size
    out = {}
    for group, (spans, nodes) in communication.items():
        size = 0.0
        for j in nodes:  # (added in node order, as always)
            size += sizes[j] or 0
        busy = _union(spans)
        out[group] = (len(spans), size, _length(busy), _minus(busy, compute))
    return out


def exposure_by_group(rec: RunRecorder) -> list[dict[str, Any]]:
    """Communication and exposed communication per group of the run *rec* recorded, sorted by group name.

    Each entry: ``{group, ranks, calls, bytes, comm_ns_max, exposed_comm_ns_mean, exposed_comm_ns_max,
    rank_of_max}`` (ns; ``ranks`` that issued at least one of its operations, ``calls`` and ``bytes``
    over all ranks). The world group is ``"0"`` (``pg_name`` empty or ``"0"``).
    """
    engine = rec.engine
    if engine is None:
        return []
    per_group: dict[str, dict[int, tuple[float, float]]] = {}  # group -> rank -> (in flight, exposed)
    calls: dict[str, int] = {}
    sizes: dict[str, float] = {}
    fold = engine.fold
    # Per simulated rank and group: calls, bytes, time in flight and exposed (a folded run's mirrors reuse them, on
    # the groups their representative's map onto: the same intervals, so the same figures).
    of_rank: dict[int, dict[str, tuple[int, float, float, float]]] = {}
    for run in engine.runs:
        rank = run.rank
        rep = rank if fold is None else fold.rep[rank]
        figures = of_rank.get(rep)
        if figures is None:
            figures = of_rank[rep] = _group_figures(rec, engine.runs[rep])
        for group, (count, size, busy, hidden) in figures.items():
            if rep != rank:  # a mirrored rank (replica folding)
                group = fold.image_group(group, fold.elem[rank])  # type: ignore[union-attr]
            per_group.setdefault(group, {})[rank] = (busy, hidden)
            calls[group] = calls.get(group, 0) + count
            sizes[group] = sizes.get(group, 0.0) + size
    out = []
    for group in sorted(per_group):
        comm = {rank: busy for rank, (busy, _) in per_group[group].items()}
        exposed = {rank: hidden for rank, (_, hidden) in per_group[group].items()}
        worst = max(sorted(exposed), key=lambda r: exposed[r])
        out.append(
            {
                "group": group,
                "ranks": len(exposed),
                "calls": calls[group],
                "bytes": sizes[group],
                "comm_ns_max": max(comm.values()),
                "exposed_comm_ns_mean": sum(exposed.values()) / len(exposed),
                "exposed_comm_ns_max": exposed[worst],
                "rank_of_max": worst,
            }
        )
    return out


def single_group(traces: Sequence[Trace]) -> str | None:
    """The one group all communication of *traces* belongs to ("" if there is none), or None if several.

    With one group, its exposure is each rank's ``exposed_comm_ns``: :func:`exposure_from_ranks` gives it
    without recording the run.
    """
    names: set[str] = set()
    for tr in traces:
        for j, t in enumerate(tr.types):
            if t == _T_COLL and not tr.is_cpu_op[j]:
                names.add(tr.pg_name[j] or "0")
            elif t in _T_P2P:
                names.add(tr.pg_name[j] or P2P)
            else:
                continue
            if len(names) > 1:
                return None
    return next(iter(names), "")


def exposure_from_ranks(result: Result, traces: Sequence[Trace], group: str) -> list[dict[str, Any]]:
    """:func:`exposure_by_group`'s entry for a run whose communication is all in *group*, from its per-rank times."""
    if not group:
        return []
    calls = 0
    size = 0.0
    members = []
    for rank, tr in enumerate(traces):
        mine = [j for j, t in enumerate(tr.types) if (t == _T_COLL and not tr.is_cpu_op[j]) or t in _T_P2P]
        if mine:
            members.append(rank)
            calls += len(mine)
            size += sum(tr.comm_size[j] or 0 for j in mine)
    ranks = [r for r in result.ranks if r.rank in set(members)]
    exposed = {r.rank: r.exposed_comm_ns for r in ranks}
    worst = max(sorted(exposed), key=lambda r: exposed[r])
    return [
        {
            "group": group,
            "ranks": len(exposed),
            "calls": calls,
            "bytes": size,
            "comm_ns_max": max(r.comm_ns for r in ranks),
            "exposed_comm_ns_mean": sum(exposed.values()) / len(exposed),
            "exposed_comm_ns_max": exposed[worst],
            "rank_of_max": worst,
        }
    ]


def exposure_by_role(rec: RunRecorder, roles: dict[str, str]) -> tuple[dict[str, list[float]], list[float]]:
    """Exposed communication of each rank per *role* (``roles``: ``pg_name`` → role; workload SEND/RECV are ``pp``).

    Returns ``({role: [exposed ns of each rank]}, [exposed ns of each rank's communication other than pp])``: a
    rank's communication of one role is exposed while some of it is in flight and no compute runs (as in
    :func:`exposure_by_group`, but the groups of one role merged, so a rank counts each moment once).
    """
    engine = rec.engine
    if engine is None:
        return {}, []
    per_role: dict[str, list[float]] = {}
    others: list[float] = []
    ranks = len(engine.runs)
    for run in engine.runs:
        mine, intervals_of = _rank_intervals(rec, run)
        comm: dict[str, list[tuple[float, float]]] = {}
        for group, (spans, _) in intervals_of.items():  # (each role's spans are sorted when joined)
            role = "pp" if group == P2P else roles.get(group, "other")
            comm.setdefault(role, []).extend(spans)
        compute = _union(mine)
        for role, intervals in comm.items():
            per_role.setdefault(role, [0.0] * ranks)[run.rank] = _minus(_union(intervals), compute)
        rest = [iv for role, intervals in comm.items() if role != "pp" for iv in intervals]
        others.append(_minus(_union(rest), compute))
    if engine.fold is not None:  # a folded run: mirrored ranks take their representative's values
        mirror = engine.fold.rep
        others = [others[mirror[r]] for r in range(ranks)]
        for values in per_role.values():
            values[:] = [values[mirror[r]] for r in range(ranks)]
    return per_role, others
