"""Replica folding: simulate one rank of each set of symmetric ranks, exactly.

A data-parallel training job runs the same graph on every replica (and, in Megatron-LM's layout, on every
tensor-parallel rank), and a GPU cluster treats them alike: the whole run is invariant under the rank shifts that
move each rank to the next replica or tensor-parallel rank, and under the group G they generate. Its state then
stays invariant at every instant, so simulating one rank of each orbit of G (the set S) gives every rank's times,
the others mirroring their representative. The simulation of the quotient:

- only the ranks of S run; a rank ``d`` outside S is ``g(rep)`` for its representative ``rep`` and an element
  ``g`` of G, and finishes when ``rep`` does;
- a message from a rank of S to such a ``d`` stands for its whole orbit: it is received as the message
  ``g⁻¹(src) → rep`` that ``rep``'s receive waits for;
- every link of a route is replaced by the representative of its orbit (the link attached to a rank of S): the
  links of S carry exactly the flows that each link of their orbit carries in the full run, so contention is the
  full run's;
- collectives over groups with mirrored members run only their members in S: the algorithm's graph must be one
  graph with peers relative to the rank (ring, direct) over positions G rotates, or graphs by position (NCCL's, laid
  over nodes and NICs) where each mirrored member's is its representative's with every peer moved by ``g``
  (checked when the collective first runs: ``system/mirrors.py``).

Folding applies when every condition is checked true (:func:`find_fold`): the workload names its layout (a
generated training job's ``etsim_training``), each rank's trace equals its image's with peers and groups
relabelled, every shift maps every communicator group onto one, the topology is an intact product whose
dimensions a shift permutes are switches, fully connected or rings it rotates, routing is dimension-order, node
priorities are the same on a rank and its image, and no setting tells ranks apart (:func:`settings_differ`). A
fold whose collectives turn out not to hold is tried again without its data-parallel shift, then by that shift alone
(:func:`smaller_fold`); anything else runs in full: folding only ever saves time.
``tests/workload/test_fold.py`` compares folded and full runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from etsim.chakra.graph import NodeType, Trace
from etsim.errors import FoldConflict
from etsim.network.routing import Router
from etsim.network.symmetry import link_images, symmetry_violation
from etsim.network.topology import Topology
from etsim.producers.training.describe import ParallelLayout, parallel_layout
from etsim.system.config import SystemConfig
from etsim.system.groups import CommGroups

__all__ = [
    "FoldedRouter",
    "ReplicaFold",
    "Shift",
    "find_fold",
    "mirrored_trace",
    "replica_shifts",
    "settings_differ",
    "smaller_fold",
]

# Trace columns a replica's image must hold unchanged (peers and groups are compared relabelled).
_SAME_COLUMNS = (
    "ids", "names", "types", "duration_micros", "data_ptr", "data_idx", "ctrl_ptr", "ctrl_idx",
    "is_cpu_op", "comm_type", "comm_size", "comm_tag", "comm_priority", "num_ops", "tensor_size",
    "duplicate_ids", "missing_data_deps", "missing_ctrl_deps", "bad_attributes", "member_mismatches",
)  # fmt: skip


@dataclass(frozen=True)
class Shift:
    """A rank permutation that adds ``step`` to one digit of the rank, ``(rank // stride) % modulus``, mod modulus."""

    stride: int
    modulus: int
    step: int
    role: str
    """What it moves (``tp``, ``dp``): for the result's description."""

    def move(self, rank: int, k: int) -> int:
        """*rank* shifted *k* times (negative: backwards)."""
        digit = (rank // self.stride) % self.modulus
        return rank + (((digit + k * self.step) % self.modulus) - digit) * self.stride

    def permutation(self, n: int) -> list[int]:
        """The shift as a list: ``out[r]`` = the image of rank *r*."""
        return [self.move(r, 1) for r in range(n)]


@dataclass
class ReplicaFold:
    """Commuting rank shifts under which a run is invariant, and the ranks simulated for them.

    An element of the group they generate is a tuple ``g`` (how many steps of each shift). Each rank *r* is
    ``g(rep[r])`` for one simulated rank ``rep[r]`` and one element ``elem[r]``.

    Attributes:
        shifts: the generators.
        simulated: the ranks that run (one per orbit), ascending.
        replicas: the size of every orbit (how many ranks each simulated rank stands for).
        description: what was folded, for the result.
    """

    shifts: list[Shift]
    ranks: int
    description: str = ""
    simulated: list[int] = field(default_factory=list)
    replicas: int = 1
    rep: list[int] = field(default_factory=list)
    elem: list[tuple[int, ...]] = field(default_factory=list)
    #: Shifts an earlier fold had and this one was tried without (:func:`smaller_fold`).
    dropped: list[Shift] = field(default_factory=list)
    _images: dict[tuple[str, tuple[int, ...]], str] = field(default_factory=dict)
    _step: list[dict[str, str]] = field(default_factory=list)
    _orbits: dict[tuple[int, ...], int] = field(default_factory=dict)
    _link_rep: list[int] = field(default_factory=list)
    _senders: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rep, self.elem = [], []
        for r in range(self.ranks):
            digits = [(r // s.stride) % s.modulus for s in self.shifts]
            self.elem.append(tuple(d // s.step for d, s in zip(digits, self.shifts, strict=True)))
            self.rep.append(r - sum((d - d % s.step) * s.stride for d, s in zip(digits, self.shifts, strict=True)))
        self.simulated = [r for r in range(self.ranks) if self.rep[r] == r]
        self.replicas = self.ranks // len(self.simulated)

    def apply(self, g: Sequence[int], rank: int) -> int:
        """``g(rank)``."""
        for k, s in zip(g, self.shifts, strict=True):
            if k:
                rank = s.move(rank, k)
        return rank

    def mirror(self, rank: int) -> tuple[int, Callable[[int], int]]:
        """*rank*'s representative and the map of its ranks to *rank*'s (``g`` with ``g(rep) = rank``)."""
        g = self.elem[rank]
        return self.rep[rank], lambda r: self.apply(g, r)

    def back(self, rank: int, g: Sequence[int]) -> int:
        """``g⁻¹(rank)``."""
        return self.apply([-k for k in g], rank)

    def elements(self) -> list[tuple[int, ...]]:
        """Every element of the group, the identity first."""
        return list(itertools.product(*(range(s.modulus // s.step) for s in self.shifts)))

    def channel(self, src: int, dst: int, tag: int) -> tuple[int, int, int]:
        """The channel a message ``src → dst`` is received on: its orbit's member whose receiver is simulated."""
        rep = self.rep[dst]
        if rep == dst:
            return src, dst, tag
        key = src * self.ranks + dst  # (a message per call: the sender's image computed once per pair)
        sender = self._senders.get(key)
        if sender is None:
            sender = self._senders[key] = self.back(src, self.elem[dst])
        return sender, rep, tag

    def group_orbit(self, group: Sequence[int]) -> int:
        """How many groups the elements map *group* onto (itself included)."""
        key = tuple(group)
        found = self._orbits.get(key)
        if found is None:
            found = self._orbits[key] = len({frozenset(self.apply(g, m) for m in group) for g in self.elements()})
        return found

    def image_group(self, name: str, g: Sequence[int]) -> str:
        """The name of the group ``g`` maps group *name* onto (:meth:`bind_groups` first)."""
        key = (name, tuple(g))
        found = self._images.get(key)
        if found is None:
            found = name
            for i, k in enumerate(g):
                for _ in range(k):
                    found = self._step[i].get(found, found)
            self._images[key] = found
        return found

    def bind_groups(self, groups: CommGroups) -> None:
        """Learn where each shift maps each group (every shift maps groups onto groups: :func:`find_fold` checked)."""
        self._step = []
        for shift in self.shifts:
            images = group_images(groups, shift.permutation(self.ranks))
            self._step.append({name: image for name, image in images.items() if image is not None})

    def bind_links(self, topology: Topology) -> None:
        """Compute each link's orbit representative (the link of its orbit attached to a simulated rank)."""

        def to_representative(npu: int) -> Callable[[int], int]:
            g = self.elem[npu]
            return lambda rank: self.back(rank, g)

        reps: list[int] = []
        for link, rep in enumerate(link_images(topology, to_representative)):
            if rep is None:
                u, v = topology.links[link]
                raise FoldConflict(f"link {u} -> {v} joins two switches: not a product topology's link")
            reps.append(rep)
        self._link_rep = reps

    def fold_route(self, route: Sequence[int]) -> list[int] | None:
        """*route* with each link replaced by its orbit's representative; None if two links fold onto one."""
        reps = self._link_rep
        out = [reps[link] for link in route]
        return out if len(set(out)) == len(out) else None

    def link_orbits(self) -> dict[int, list[int]]:
        """Each representative link → every link of its orbit, ascending."""
        out: dict[int, list[int]] = {}
        for link, rep in enumerate(self._link_rep):
            out.setdefault(rep, []).append(link)
        return out


def replica_shifts(traces: Sequence[Trace]) -> list[list[Shift]]:
    """The shifts a generated training job may be invariant under, per role, the smallest first.

    Ranks follow Megatron-LM's order, ``rank = t + T·(c + C·(d + D·p))``: ``tp`` moves every rank by ``s``
    tensor-parallel ranks (any divisor of ``tp``: 1 unless expert tensor parallelism's groups need more), ``dp`` by
    ``s`` data-parallel replicas (any divisor of ``dp``: the checks of
    :func:`find_fold` decide, expert-parallel groups included, whose positions a shift rotates). Empty for a
    workload that does not describe its layout (the ``etsim_training`` metadata).
    """
    layout = parallel_layout(traces) or _placed_layout(traces)
    if layout is None:
        return []
    tp, cp, dp = layout.tp, layout.cp, layout.dp
    roles = []
    if tp > 1:
        roles.append([Shift(1, tp, s, "tp") for s in range(1, tp) if tp % s == 0])
    if dp > 1:
        roles.append([Shift(tp * cp, dp, s, "dp") for s in range(1, dp) if dp % s == 0])
    return roles


def _placed_layout(traces: Sequence[Trace]) -> ParallelLayout | None:
    """The layout of one job placed on a block of a larger cluster's GPUs, the others idle (``etsim cluster``).

    The job's ranks must be a contiguous block starting at a multiple of ``tp·cp·dp``: the shifts, digit
    arithmetic on GPU numbers, then move the job's GPUs among themselves and the idle GPUs among themselves.
    """
    busy = [r for r, trace in enumerate(traces) if len(trace.types)]
    if not busy or busy[-1] - busy[0] + 1 != len(busy) or len(busy) == len(traces):
        return None
    first = busy[0]
    layout = parallel_layout(traces[first : busy[-1] + 1])
    if layout is None or first % (layout.tp * layout.cp * layout.dp):
        return None
    return layout


def settings_differ(config: SystemConfig) -> str | None:
    """Why the system settings make replicas differ (no fold can mirror them), or None.

    Stragglers and start times named per rank, noise drawn per rank, and reductions taking turns at an NPU's
    reduction unit: those issued at one instant queue in the run's event order, which follows rank ids, so a shift of
    the ranks does not keep it (the full run's replicas differ).
    """
    apart = config.ranks_named(in_effect=True)
    if apart.keys() & {"compute_slowdown", "compute_delay", "slowdown_windows"}:
        return "compute_slowdown makes ranks differ (a straggler)"
    if "rank_start" in apart:
        return "rank_start starts ranks at different times"
    if config.compute_jitter > 0:
        return "compute_jitter draws different times per rank"
    if config.reduction_bandwidth and config.shared_reductions:
        return "reductions take turns at each NPU's reduction unit in the run's event order (shared_reductions)"
    return None


def find_fold(
    traces: Sequence[Trace],
    groups: CommGroups,
    topology: Topology,
    router: str,
    priorities: Mapping[str, int] | None = None,
) -> tuple[ReplicaFold | None, str]:
    """The fold of a run, or None and why not (see the module docstring for the conditions).

    *priorities* (``SystemConfig.node_priorities``, ``"RANK:NODE"`` → priority) must be the same on a rank and its
    image: a node issued early on one rank only makes the ranks differ.
    """
    roles = replica_shifts(traces)
    if not roles:
        return None, "the workload does not declare replicas"
    if router != "default" or not topology.regular or topology.npus != len(traces):
        return None, "folding needs an intact product topology of the workload's ranks and dimension-order routing"
    n = len(traces)
    used = {
        pg_name
        for trace in traces
        for t, pg_name in zip(trace.types, trace.pg_name, strict=True)
        if t == NodeType.COMM_COLL_NODE
    }
    world = bool(used & {None, "", "0"})
    chosen: list[Shift] = []
    why = "no shift of the replicas is a symmetry of the topology"
    for options in roles:
        for shift in options:
            perm = shift.permutation(n)
            reason = (
                symmetry_violation(topology, perm)
                or _priorities_symmetric(priorities or {}, perm)
                or _groups_symmetric(groups, perm, world, used)
                or _traces_symmetric(traces, perm, groups)
            )
            if reason is None:
                chosen.append(shift)
                break
            why = reason
    if not chosen:
        return None, why
    return _fold_of(chosen, traces, groups, topology), ""


def smaller_fold(
    fold: ReplicaFold, traces: Sequence[Trace], groups: CommGroups, topology: Topology
) -> ReplicaFold | None:
    """The fold to try after *fold* did not hold (None when none is left).

    Without its last shift (the data-parallel one); a fold left with one shift, by the shifts dropped before it.

    The collectives of the groups a data-parallel shift rotates may not be mirrored (NCCL's trees over nodes),
    where a tensor-parallel shift, which maps each such group onto another group, all of whose members then
    mirror, still holds; and the other way round (rings inside a node that do not turn with the position, as over
    the direct links of four GPUs), the data-parallel shift alone holds.
    """
    if len(fold.shifts) >= 2:
        smaller = _fold_of(fold.shifts[:-1], traces, groups, topology)
        smaller.dropped = [*fold.dropped, fold.shifts[-1]]
        return smaller
    if fold.dropped:
        return _fold_of(fold.dropped, traces, groups, topology)
    return None


def _fold_of(chosen: list[Shift], traces: Sequence[Trace], groups: CommGroups, topology: Topology) -> ReplicaFold:
    """The fold of the *chosen* shifts, described and bound to the topology's links and the groups."""
    n = len(traces)
    fold = ReplicaFold(chosen, n)
    parts = " × ".join(f"{s.role} ({s.modulus // s.step})" for s in chosen)
    busy = sum(1 for trace in traces if len(trace.types))
    # (a job placed on part of a cluster: its own ranks counted, the idle GPUs cost nothing)
    whose = "" if busy == n else "the job's "
    simulated = sum(1 for r in fold.simulated if len(traces[r].types)) if whose else len(fold.simulated)
    fold.description = (
        f"{parts}: simulated {simulated} of {whose}{busy} ranks, each standing for {fold.replicas} that mirror it"
    )
    fold.bind_links(topology)
    fold.bind_groups(groups)
    return fold


def _priorities_symmetric(priorities: Mapping[str, int], shift: list[int]) -> str | None:
    """None if every node priority is the same at the image of its rank."""
    for key, priority in priorities.items():
        rank, node = key.split(":")
        if priorities.get(f"{shift[int(rank)]}:{node}", 0) != priority:
            return f"node_priorities: {key} has no counterpart on rank {shift[int(rank)]} (the replicas would differ)"
    return None


def _rotates(members: Sequence[int], image: Sequence[int]) -> bool:
    """Whether *image* (the members' images, in the members' order) is the members rotated by a constant."""
    where = {r: p for p, r in enumerate(members)}
    n = len(members)
    turn = where.get(image[0], -1)
    return turn >= 0 and all(where.get(x) == (p + turn) % n for p, x in enumerate(image))


def _groups_symmetric(
    groups: CommGroups, shift: list[int], world: bool = False, used: set[str | None] | None = None
) -> str | None:
    """None if τ maps every group onto a group, shifting the positions of groups it maps to themselves cyclically.

    *world*: the workload also has collectives over every rank (no ``pg_name``), which τ must rotate too. *used*:
    the groups some collective names (None: all); a group no collective uses need not be rotated (a placed job's
    world, declared for its ranks, say).
    """
    if world and not _rotates(range(len(shift)), shift):
        return "the replica shift does not rotate the ranks of the workload's collectives over every rank"
    known = {frozenset(members) for members in groups.groups.values()}
    for name, members in groups.groups.items():
        image = [shift[r] for r in members]
        if frozenset(image) not in known:
            return f"the replica shift does not map communicator group {name!r} onto a group"
        if frozenset(image) != frozenset(members) or (used is not None and name not in used):
            continue
        if not _rotates(members, image):
            return f"the replica shift does not rotate communicator group {name!r}"
    return None


def group_images(groups: CommGroups, shift: Sequence[int]) -> dict[str, str | None]:
    """Each group's name → the name of the group τ maps it onto (None: no group has its image's members).

    Groups with the same members are distinct communicators (a job's tensor-parallel group may also be its
    expert-gradient group): the k-th of the groups with the image's members, in the order groups were named, is
    the image of the k-th with the group's own members.
    """
    names_of: dict[frozenset[int], list[str]] = {}
    for name, members in groups.groups.items():
        names_of.setdefault(frozenset(members), []).append(name)
    out: dict[str, str | None] = {}
    for member_set, names in names_of.items():
        images = names_of.get(frozenset(shift[r] for r in member_set), [])
        for k, name in enumerate(names):
            out[name] = images[k] if len(images) == len(names) else None
    return out


def _traces_symmetric(traces: Sequence[Trace], shift: list[int], groups: CommGroups) -> str | None:
    """None if every rank's image runs the rank's trace with peers and groups relabelled by τ."""
    image_name: dict[str | None, str | None] = {None: None, "": "", "0": "0"}
    image_name.update(group_images(groups, shift))
    for r, trace in enumerate(traces):
        other = traces[shift[r]]
        for column in _SAME_COLUMNS:
            mine, theirs = getattr(trace, column), getattr(other, column)
            if mine is not theirs and mine != theirs:  # (a generator's replicas share their columns)
                return f"ranks {r} and {shift[r]} differ in their {column} (not replicas of each other)"
        for column in ("comm_src", "comm_dst"):
            mine = [None if v is None or not 0 <= v < len(shift) else shift[v] for v in getattr(trace, column)]
            if mine != getattr(other, column):
                return f"ranks {r} and {shift[r]} differ in their {column} (not replicas of each other)"
        if [image_name.get(v, v) for v in trace.pg_name] != other.pg_name:
            return f"ranks {r} and {shift[r]} differ in their pg_name (not replicas of each other)"
    return None


class FoldedRouter(Router):
    """Routes of a folded run: the wrapped router's, each link replaced by its orbit's representative."""

    def __init__(self, inner: Router, fold: ReplicaFold) -> None:
        super().__init__(inner.topology)
        self.inner = inner
        self.fold = fold

    def route(self, src: int, dst: int) -> list[int]:
        """The wrapped route, folded (:meth:`ReplicaFold.fold_route`)."""
        route = self.inner.lookup(src, dst)
        folded = self.fold.fold_route(route)
        if folded is None:
            raise FoldConflict(f"the route {src} -> {dst} crosses two links of one orbit of mirrored replicas")
        return folded

    def checked_route(self, src: int, dst: int) -> list[int]:
        """:meth:`route` as it is: the wrapped router validated the unfolded route."""
        return self.route(src, dst)


def mirrored_trace(trace: Trace) -> Trace:
    """The stand-in of a mirrored rank: its metadata and no nodes (its results are its representative's)."""
    return Trace(metadata=trace.metadata, nodes=[], path=trace.path, rank=trace.rank)
