"""Static validation of Chakra ET workloads.

:func:`validate_workload` returns :class:`Issue` records, each an error (a simulator would
hang, crash or compute a wrong answer) or a warning (legal but suspicious, or unreadable by
some reference consumer). Every message names the file, rank and node and what is wrong.

Per rank: duplicate ids, dependencies on missing ids (data and control), cycles (one cycle is
printed), COMM nodes marked ``is_cpu_op``, SEND/RECV without src/dst/tag/size, collectives
without or with an unknown ``comm_type``, negative or zero sizes, attributes of the wrong kind
or written with a member older consumers misread. Across ranks: per (src, dst, tag) send and
receive counts and sizes, peers outside the workload, and the sequence of collectives of every
communicator group.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from etsim.chakra.attributes import EXPECTED_MEMBER
from etsim.chakra.dag import in_degrees, transpose
from etsim.chakra.dag import topological_order as dag_order
from etsim.chakra.graph import COLLECTIVE_NAMES, CollectiveType, NodeType, Trace, Workload
from etsim.errors import warn

__all__ = ["Issue", "find_cycle", "preflight", "topological_order", "validate_trace", "validate_workload"]

#: What a collective whose ``involved_dim`` leaves dimensions out is told (by ``validate``, and once by a run).
NARROWED = (
    "involved_dim leaves dimensions out, which etsim does not model: the collective runs over its whole group (a "
    "simulator that reads it runs the dimensions marked true)"
)
#: The end of the warning of a send or receive whose peer is its own rank (a run says it too: it is no transfer).
TO_ITSELF = "itself: it crosses no link, so no bandwidth and no copy are charged (only delays)"

_COMM_TYPES = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE)


@dataclass(frozen=True, slots=True)
class Issue:
    """One finding of the validator."""

    severity: str
    """``"error"`` or ``"warning"``."""
    message: str
    """Where (file, rank, node) and what is wrong."""
    blocking: bool = False
    """A simulator cannot run the workload at all (checked before every simulation)."""

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"


def topological_order(trace: Trace, *, include_ctrl: bool = True) -> list[int]:
    """Node positions in issue order: ready nodes smallest-id first (the order a walk issues them).

    Nodes on or behind a cycle are left out; compare the length with ``trace.num_nodes``.
    """
    sources = trace.dependency_csrs(include_ctrl=include_ctrl)
    succ_ptr, succ = transpose(trace.num_nodes, sources)
    return dag_order(succ_ptr, succ, in_degrees(trace.num_nodes, sources), key=trace.ids)


def find_cycle(trace: Trace, *, include_ctrl: bool = True) -> list[int] | None:
    """One dependency cycle as node positions (``[a, b, …]`` where each depends on the next), or None."""
    n = trace.num_nodes
    # Iterative DFS over dependency edges (child -> parent); colour 1 = on stack, 2 = done.
    colour = [0] * n

    def deps(i: int) -> list[int]:
        d = trace.data_idx[trace.data_ptr[i] : trace.data_ptr[i + 1]]
        if include_ctrl:
            d = d + trace.ctrl_idx[trace.ctrl_ptr[i] : trace.ctrl_ptr[i + 1]]
        return d

    for root in range(n):
        if colour[root]:
            continue
        stack: list[tuple[int, list[int], int]] = [(root, deps(root), 0)]
        path = [root]
        colour[root] = 1
        while stack:
            node, children, k = stack[-1]
            if k < len(children):
                stack[-1] = (node, children, k + 1)
                child = children[k]
                if colour[child] == 1:
                    return path[path.index(child) :]
                if colour[child] == 0:
                    colour[child] = 1
                    stack.append((child, deps(child), 0))
                    path.append(child)
            else:
                colour[node] = 2
                stack.pop()
                path.pop()
    return None


def validate_trace(
    trace: Trace,
    num_ranks: int | None = None,
    *,
    ignore_ctrl_deps: bool = False,
    symbolic_sizes: bool = True,
    cycles: bool = True,
    attributes: bool = True,
) -> list[Issue]:
    """Check one rank in isolation (and peers against *num_ranks* when known).

    With *ignore_ctrl_deps* (as a simulation run with ``--ignore-ctrl-deps``), dangling control
    dependencies are warnings and cycles are searched over data dependencies only. Issues a
    simulator cannot run past are marked :attr:`Issue.blocking`.

    Args:
        trace: the rank.
        num_ranks: ranks of the workload, to check peers.
        ignore_ctrl_deps: walk data dependencies only.
        symbolic_sizes: accept SEND/RECV sized by chunk counts (``msg_chunk_cnt`` of
            ``total_chunk_cnt``, as algorithm files are) instead of ``comm_size``.
        cycles: search for a dependency cycle (a walk of the whole graph).
        attributes: read every node's raw attributes for what only other readers stumble on (repeated attributes,
            ``involved_dim``): warnings, which a run's pre-flight check leaves out.
    """
    report = _TraceReport(trace)
    _check_structure(report, ignore_ctrl_deps=ignore_ctrl_deps, cycles=cycles, attributes=attributes)
    _check_comm_nodes(report, num_ranks, symbolic_sizes=symbolic_sizes, attributes=attributes)
    return report.issues


class _TraceReport:
    """The issues found in one rank's trace, each message prefixed with where it is."""

    __slots__ = ("issues", "trace")

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.issues: list[Issue] = []

    def error(self, pos: int, text: str, blocking: bool = False) -> None:
        """An error at node *pos*."""
        self.issues.append(Issue("error", f"{self.trace.describe(pos)}: {text}", blocking))

    def warning(self, pos: int, text: str) -> None:
        """A warning at node *pos*."""
        self.issues.append(Issue("warning", f"{self.trace.describe(pos)}: {text}"))


def _check_structure(report: _TraceReport, *, ignore_ctrl_deps: bool, cycles: bool, attributes: bool) -> None:
    """The graph's own issues: no nodes, duplicate ids, missing dependencies, bad attributes, a cycle."""
    trace, issues, error, warning = report.trace, report.issues, report.error, report.warning
    where = trace.where()
    if trace.num_nodes == 0:
        issues.append(Issue("warning", f"{where}trace has no nodes"))
    for nid in sorted(set(trace.duplicate_ids)):
        issues.append(Issue("error", f"{where}node id {nid} is defined more than once", True))
    for pos, dep in trace.missing_data_deps:
        error(pos, f"data dependency on node id {dep}, which is not in the file", True)
    for pos, dep in trace.missing_ctrl_deps:
        if ignore_ctrl_deps:
            warning(pos, f"control dependency on node id {dep}, which is not in the file (ignored)")
        else:
            error(
                pos,
                f"control dependency on node id {dep}, which is not in the file "
                "(run with --ignore-ctrl-deps to walk data dependencies only)",
                True,
            )
    for pos, name, what in trace.bad_attributes:
        error(pos, f"attribute {name!r}: {what}")
    for pos, name, member in trace.member_mismatches:
        warning(pos, f"attribute {name!r} is written as {member}; the mlcommons feeder reads only the expected member")
    for pos, node in enumerate(trace.nodes or () if attributes else ()):
        names = [a.name for a in node.attr if a.name in EXPECTED_MEMBER]
        for name in sorted({n for n in names if names.count(n) > 1}):
            # (readers disagree on which counts: etsim and the reference feeder take the first, the old one the last)
            warning(pos, f"attribute {name!r} is given more than once: readers differ on which one counts")

    cycle = find_cycle(trace, include_ctrl=not ignore_ctrl_deps) if cycles else None
    if cycle is not None:
        chain = " -> ".join(str(trace.ids[p]) for p in [*cycle, cycle[0]])
        issues.append(Issue("error", f"{where}dependency cycle (each node waits for the next): {chain}"))


def _check_comm_nodes(
    report: _TraceReport, num_ranks: int | None, *, symbolic_sizes: bool, attributes: bool = True
) -> None:
    """Every node's type, and the attributes of every communication node (peers against *num_ranks*)."""
    trace, error, warning = report.trace, report.error, report.warning
    narrowed = set(trace.narrowed_dims)
    for pos, node_type in enumerate(trace.types):
        if node_type not in NodeType._value2member_map_:
            error(pos, f"unknown node type {node_type} (Chakra defines 0 to 7): the simulator cannot run it", True)
            continue
        if node_type not in _COMM_TYPES:
            continue
        host_op = bool(trace.is_cpu_op[pos])
        if host_op:
            error(pos, "communication node is marked is_cpu_op=true (some simulators reject it; etsim replays it)")
        size = trace.comm_size[pos]
        if node_type == NodeType.COMM_COLL_NODE:
            # A host-side collective is replayed for its duration: its attributes cannot stop a run.
            comm_type = trace.comm_type[pos]
            if comm_type is None:
                error(pos, "collective without a comm_type attribute", not host_op)
            elif comm_type not in COLLECTIVE_NAMES:
                error(pos, f"unknown comm_type {comm_type} (valid: 0..{max(COLLECTIVE_NAMES)})", not host_op)
            if size is None:
                error(pos, "collective without a comm_size attribute", not host_op)
            elif size < 0:
                error(pos, f"negative comm_size {size}", not host_op)
            elif size == 0 and comm_type != CollectiveType.BARRIER:
                warning(pos, "comm_size is 0; the collective completes at once")
            member = _involved_dim_member(trace, pos) if attributes else ""
            if member not in ("", "bool_list"):
                warning(pos, f"involved_dim is written as {member}: its readers take a bool_list (one stops)")
            if pos in narrowed:
                warning(pos, NARROWED)
            continue
        is_send = node_type == NodeType.COMM_SEND_NODE
        peer_key, self_key = ("comm_dst", "comm_src") if is_send else ("comm_src", "comm_dst")
        kind = "send" if is_send else "receive"
        peer = getattr(trace, peer_key)[pos]
        if size is None and symbolic_sizes and _symbolic_size(trace, pos):
            size = 1  # algorithm files may give sizes as chunk counts (msg_chunk_cnt of total_chunk_cnt)
        checks = ((peer_key, peer), ("comm_tag", trace.comm_tag[pos]), ("comm_size", size))
        missing = [k for k, v in checks if v is None]
        if missing:
            error(pos, f"{kind} without {', '.join(missing)}", True)
        if size is not None and size < 0:
            error(pos, f"negative comm_size {size}", True)
        elif size == 0:
            warning(pos, f"zero-byte {kind} (some simulators assert size > 0)")
        tag = trace.comm_tag[pos]
        if tag is not None and tag < 0:
            error(pos, f"negative comm_tag {tag}")
        if peer is not None and num_ranks is not None and not 0 <= peer < num_ranks:
            error(pos, f"{peer_key}={peer} is not a rank of this {num_ranks}-rank workload", True)
        own = getattr(trace, self_key)[pos]
        if own is not None and trace.rank is not None and own != trace.rank:
            error(pos, f"{self_key}={own} on a {kind} of rank {trace.rank} (must be the rank itself)")
        if peer is not None and trace.rank is not None and peer == trace.rank:
            warning(pos, f"{kind} {'to' if is_send else 'from'} {TO_ITSELF}")


def _involved_dim_member(trace: Trace, pos: int) -> str:
    """The member an ``involved_dim`` attribute is written as (``""`` without one)."""
    dims = next((a for a in trace.nodes[pos].attr if a.name == "involved_dim"), None) if trace.nodes else None
    return (dims.WhichOneof("value") or "") if dims is not None else ""


def _symbolic_size(trace: Trace, pos: int) -> bool:
    if not trace.nodes:
        return False
    names = {a.name for a in trace.nodes[pos].attr}
    return {"msg_chunk_cnt", "total_chunk_cnt"} <= names


def preflight(workload: Workload, *, ignore_ctrl_deps: bool = False) -> list[Issue]:
    """The blocking issues of *workload*: what a simulation checks before it starts.

    The same checks as :func:`validate_workload` (one validator), restricted to what no run can
    get past and without the whole-graph cycle search (a cycle stops a run with a deadlock report).
    """
    n = workload.num_ranks
    found: list[Issue] = []
    selves: list[Issue] = []
    for trace in workload:
        issues = validate_trace(
            trace, n, ignore_ctrl_deps=ignore_ctrl_deps, symbolic_sizes=False, cycles=False, attributes=False
        )
        found.extend(i for i in issues if i.blocking)
        selves.extend(i for i in issues if i.message.endswith(TO_ITSELF))
    if selves:  # (a run would otherwise time them as free in silence)
        warn(selves[0].message + (f" (and {len(selves) - 1} more sends and receives)" if len(selves) > 1 else ""))
    narrowed = [(t, pos) for t in workload for pos in t.narrowed_dims if t.types[pos] == NodeType.COMM_COLL_NODE]
    if narrowed:  # (a run would otherwise ignore it in silence; `etsim validate` names every node)
        trace, pos = narrowed[0]
        more = f" (and {len(narrowed) - 1} more collectives)" if len(narrowed) > 1 else ""
        warn(f"{trace.describe(pos)}{more}: {NARROWED}")
    return found


def validate_workload(workload: Workload, *, ignore_ctrl_deps: bool = False) -> list[Issue]:
    """Check every rank and the cross-rank consistency of point-to-point and collective traffic."""
    num_ranks = workload.num_ranks
    issues: list[Issue] = []
    for trace in workload.traces:
        issues.extend(validate_trace(trace, num_ranks, ignore_ctrl_deps=ignore_ctrl_deps))
    if num_ranks > 1:
        # Issue order per rank, computed once, with the dependencies a run would enforce.
        orders = [topological_order(t, include_ctrl=not ignore_ctrl_deps) for t in workload.traces]
        issues.extend(_check_point_to_point(workload, orders))
        issues.extend(_check_collectives(workload, orders))
        loose: list[tuple[set[tuple[str, int]], dict[str, int]]] = []
        for trace, order in zip(workload.traces, orders, strict=True):
            found, unchained, counts = _unordered_collectives(trace, order, include_ctrl=not ignore_ctrl_deps)
            issues.extend(found)
            loose.append((unchained, counts))
        issues.extend(_orders_that_differ(workload, loose))
    return issues


def _orders_that_differ(workload: Workload, loose: list[tuple[set[tuple[str, int]], dict[str, int]]]) -> list[Issue]:
    """Collectives #k−1 and #k of a group that dependencies order on some ranks but not on others.

    Collectives are matched across a group by issue order: where one rank's #k may go before its #k−1 (a
    dependency rewired to an earlier node) while the others' cannot, that rank can pair them with different
    nodes of the others, without an error when they agree in type and size.
    """
    for group, k in sorted({key for unchained, _ in loose for key in unchained}):
        issued = [r for r, (_, counts) in enumerate(loose) if counts.get(group, 0) > k]
        free = [r for r in issued if (group, k) in loose[r][0]]
        chained = [r for r in issued if (group, k) not in loose[r][0]]
        if free and chained:
            rank = free[0]
            return [
                Issue(
                    "warning",
                    f"{workload.traces[rank].where()}collective #{k} of group {group!r} does not depend on #{k - 1} "
                    f"on ranks {free[:8]}{' …' if len(free) > 8 else ''}, though it does on ranks "
                    f"{chained[:8]}{' …' if len(chained) > 8 else ''}: collectives are matched across the group by "
                    "issue order, and those ranks may issue them in another order than the rest; add a dependency",
                )
            ]
    return []


#: Pairs of collectives per rank whose readiness order :func:`validate_workload` searches the ancestors for.
MAX_ORDER_SEARCHES = 256


def _deps(csrs: list[tuple[list[int], list[int]]], pos: int) -> set[int]:
    return {d for ptr, idx in csrs for d in idx[ptr[pos] : ptr[pos + 1]]}


def _ready_before(csrs: list[tuple[list[int], list[int]]], first: int, then: int) -> bool:
    """Whether every dependency of *first* is a dependency of *then* or one of their ancestors."""
    needed = _deps(csrs, first)
    stack = list(_deps(csrs, then))
    seen = set(stack)
    needed -= seen
    while stack and needed:
        for d in _deps(csrs, stack.pop()):
            if d not in seen:
                seen.add(d)
                needed.discard(d)
                stack.append(d)
    return not needed


def _unordered_collectives(
    trace: Trace, order: list[int], *, include_ctrl: bool
) -> tuple[list[Issue], set[tuple[str, int]], dict[str, int]]:
    """Consecutive collectives of one group on this rank that differ and that no dependency orders.

    Which one a rank issues first then depends on timing, which may differ between the group's ranks: the
    collectives would be paired with different ones on different ranks (a runtime hangs or mixes them up).
    Also returned: ``(group, k)`` of every collective #k that does not depend on the group's #k−1 here, and
    the count of each group's collectives (compared across ranks by :func:`_orders_that_differ`).
    """
    csrs = trace.dependency_csrs(include_ctrl=include_ctrl)
    searches = 0  # readiness searches walk ancestors: a bounded number per rank keeps huge traces quick
    # Per node: for each group, the sequence number of the last of its collectives among the node's ancestors.
    seen: list[dict[str, int] | None] = [None] * trace.num_nodes
    count: dict[str, int] = {}
    last: dict[str, int] = {}
    found: list[Issue] = []
    unchained: set[tuple[str, int]] = set()
    for pos in order:
        merged: dict[str, int] | None = None
        for ptr, idx in csrs:
            for d in idx[ptr[pos] : ptr[pos + 1]]:
                before = seen[d]
                if not before or before is merged:
                    continue
                if merged is None:
                    merged = before
                else:
                    merged = {g: max(merged.get(g, -1), before.get(g, -1)) for g in merged.keys() | before.keys()}
        if trace.types[pos] == NodeType.COMM_COLL_NODE and not trace.is_cpu_op[pos]:
            group = trace.pg_name[pos] or "0"
            k = count.get(group, 0)
            count[group] = k + 1
            prev = last.get(group)
            if prev is not None and (merged or {}).get(group, -1) < k - 1:
                unchained.add((group, k))
                same = (trace.comm_type[prev], trace.comm_size[prev]) == (trace.comm_type[pos], trace.comm_size[pos])
                # When everything one waits for is behind the other too, that one is ready first (or with it, and
                # issued first by id) on every rank, whatever the timing.
                if not same and searches < MAX_ORDER_SEARCHES:
                    searches += 1
                    unordered = not _ready_before(csrs, prev, pos) and not _ready_before(csrs, pos, prev)
                else:
                    unordered = False
                if unordered and not found:
                    found.append(
                        Issue(
                            "warning",
                            f"{trace.describe(pos)} ({_coll_label(trace.comm_type[pos], trace.comm_size[pos])}) and "
                            f"{trace.describe(prev)} ({_coll_label(trace.comm_type[prev], trace.comm_size[prev])}) "
                            f"are collectives of group {group!r} that no dependency orders: which is issued first "
                            "depends on timing and may differ between the group's ranks (etsim refuses a run where "
                            "it does; other simulators may pair different collectives); add a dependency",
                        )
                    )
            last[group] = pos
            merged = dict(merged or {})
            merged[group] = k
        seen[pos] = merged
    return found, unchained, count


def _check_point_to_point(workload: Workload, orders: list[list[int]]) -> list[Issue]:
    # (src, dst, tag) -> list of (size, trace, pos) in issue order, for sends and for receives.
    sends: dict[tuple[int, int, int], list[tuple[int, Trace, int]]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[tuple[int, Trace, int]]] = defaultdict(list)
    for rank, trace in enumerate(workload.traces):
        for pos in orders[rank]:
            node_type = trace.types[pos]
            tag, size = trace.comm_tag[pos], trace.comm_size[pos]
            if node_type == NodeType.COMM_SEND_NODE and trace.comm_dst[pos] is not None and tag is not None:
                sends[(rank, trace.comm_dst[pos], tag)].append((size or 0, trace, pos))  # type: ignore[index]
            elif node_type == NodeType.COMM_RECV_NODE and trace.comm_src[pos] is not None and tag is not None:
                recvs[(trace.comm_src[pos], rank, tag)].append((size or 0, trace, pos))  # type: ignore[index]
    issues: list[Issue] = []
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        if not (0 <= src < workload.num_ranks and 0 <= dst < workload.num_ranks):
            continue  # already reported as a peer outside the workload
        s, r = sends.get(key, []), recvs.get(key, [])
        if len(s) != len(r):
            extra = s[len(r)] if len(s) > len(r) else r[len(s)]
            issues.append(
                Issue(
                    "error",
                    f"rank {src} -> rank {dst} tag {tag}: {len(s)} sends but {len(r)} receives; "
                    f"first unmatched: {extra[1].describe(extra[2])}",
                )
            )
        free = [(t, p) for _, t, p in r if not t.data_deps(p) and not t.ctrl_deps(p)]
        if len(free) > 1:
            (t0, p0), (t1, p1) = free[:2]
            issues.append(
                Issue(
                    "warning",
                    f"rank {src} -> rank {dst} tag {tag}: {len(free)} receives depend on nothing ({t0.describe(p0)}, "
                    f"{t1.describe(p1)}, …): they meet their sends only in the order they are posted, which a "
                    "consumer may choose otherwise; give each transfer its own tag (etsim's writers do)",
                )
            )
        for (s_size, s_trace, s_pos), (r_size, r_trace, r_pos) in zip(s, r, strict=False):
            if s_size != r_size:
                issues.append(
                    Issue(
                        "error",
                        f"size mismatch: {s_trace.describe(s_pos)} sends {s_size} bytes but the matching "
                        f"{r_trace.describe(r_pos)} receives {r_size} bytes",
                    )
                )
                break
    return issues


def _check_collectives(workload: Workload, orders: list[list[int]]) -> list[Issue]:
    # Group by pg_name; "" and "0" mean all ranks. Members of other groups are the ranks that use them.
    sequences: dict[str, dict[int, list[tuple[int | None, int | None, int]]]] = defaultdict(dict)
    for rank, trace in enumerate(workload.traces):
        for pos in orders[rank]:
            if trace.types[pos] != NodeType.COMM_COLL_NODE:
                continue
            group = trace.pg_name[pos] or "0"
            sequences[group].setdefault(rank, []).append((trace.comm_type[pos], trace.comm_size[pos], pos))
    issues: list[Issue] = []
    for group, per_rank in sorted(sequences.items()):
        members = range(workload.num_ranks) if group == "0" else sorted(per_rank)
        label = "all ranks" if group == "0" else f"group {group!r}"
        ref_rank = min(per_rank)
        ref = per_rank[ref_rank]
        for rank in members:
            seq = per_rank.get(rank, [])
            trace = workload.traces[rank]
            for k in range(max(len(ref), len(seq))):
                if k >= len(seq):
                    r_type, r_size, r_pos = ref[k]
                    issues.append(
                        Issue(
                            "error",
                            f"{trace.where()}issues {len(seq)} collectives on {label} but rank {ref_rank} issues "
                            f"{len(ref)}; missing #{k} like {workload.traces[ref_rank].describe(r_pos)} "
                            f"({_coll_label(r_type, r_size)})",
                        )
                    )
                    break
                if k >= len(ref):
                    issues.append(
                        Issue(
                            "error",
                            f"{trace.describe(seq[k][2])}: collective #{k} on {label} has no counterpart on rank "
                            f"{ref_rank} (which issues {len(ref)})",
                        )
                    )
                    break
                if seq[k][:2] != ref[k][:2]:
                    issues.append(
                        Issue(
                            "error",
                            f"{trace.describe(seq[k][2])}: collective #{k} on {label} is "
                            f"{_coll_label(*seq[k][:2])} but on rank {ref_rank} it is {_coll_label(*ref[k][:2])}",
                        )
                    )
                    break
    return issues


def _coll_label(comm_type: int | None, size: int | None) -> str:
    name = COLLECTIVE_NAMES.get(comm_type, f"comm_type {comm_type}") if comm_type is not None else "no comm_type"
    return f"{name} of {size} bytes"
