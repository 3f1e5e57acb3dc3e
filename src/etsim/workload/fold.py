"""Replica folding: simulate one of each set of symmetric replicas, exactly.

A data-parallel training job runs the same graph on every replica, and a GPU cluster treats every replica alike:
the whole run is invariant under the rank permutation τ that moves each rank to the next replica. Its state then
stays invariant at every instant, so simulating the ranks of one *fundamental domain* S (replicas ``0 .. s-1``)
gives every rank's times, the others mirroring their representative in S. The simulation of the quotient:

- only the ranks of S run; a rank outside S is ``τ^k`` of its representative ``rep`` and finishes when it does;
- a message from a rank of S to a rank ``d`` outside it stands for its whole orbit: it is received as the message
  ``τ^-k(src) → rep(d)`` (``d = τ^k(rep(d))``) that ``rep(d)``'s receive waits for;
- every link of a route is replaced by the representative of its orbit (the link attached to a rank of S): the
  links of S carry exactly the flows that each link of their orbit carries in the full run, so contention is the
  full run's;
- collectives over groups that cross replicas run only their members in S: τ must shift the group's positions
  cyclically and the algorithm's graph must be one graph with peers relative to the rank (ring, direct), which a
  cyclic shift leaves unchanged.

Folding applies when every condition is checked true (:func:`find_fold`): the workload says which ranks are
replicas (a generated training job's ``etsim_training`` layout), each rank's trace equals its image's with peers
and groups relabelled, τ maps every communicator group onto one, the topology is an intact product whose
dimensions τ permutes are switches, fully connected or rings it rotates, and routing is dimension-order. Anything
else runs in full: folding only ever saves time. ``tests/workload/test_fold.py`` compares folded and full runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from etsim.chakra.graph import Trace
from etsim.errors import FoldConflict
from etsim.network.routing import Router
from etsim.network.topology import Topology
from etsim.producers.training.job import TRAINING_ATTR
from etsim.system.groups import CommGroups

__all__ = ["FoldedRouter", "ReplicaFold", "find_fold", "mirrored_trace", "replica_shifts"]

# Dimension kinds every permutation of their coordinates leaves unchanged.
_ANY_PERMUTATION = frozenset({"switch", "fully_connected"})
# Dimension kinds a rotation of their coordinates leaves unchanged.
_ROTATIONS = frozenset({"ring", "uni_ring"})
# Trace columns a replica's image must hold unchanged (peers and groups are compared relabelled).
_SAME_COLUMNS = (
    "ids", "names", "types", "duration_micros", "data_ptr", "data_idx", "ctrl_ptr", "ctrl_idx",
    "is_cpu_op", "comm_type", "comm_size", "comm_tag", "comm_priority", "num_ops", "tensor_size",
)  # fmt: skip


@dataclass
class ReplicaFold:
    """A rank permutation τ under which a run is invariant, and the ranks simulated for it.

    Attributes:
        shift: ``shift[r]`` = τ(r).
        simulated: the ranks that run (one per orbit of τ), ascending.
        rep: ``rep[r]``, the simulated rank *r* mirrors.
        power: ``power[r]`` = k with ``r = τ^k(rep[r])``.
        orbit: ``orbit[rep]`` = ``[rep, τ(rep), τ²(rep), …]`` for each simulated rank.
        replicas: the length of every orbit (how many ranks each simulated rank stands for).
        description: what was folded, for the result.
    """

    shift: list[int]
    simulated: list[int]
    replicas: int
    description: str = ""
    rep: list[int] = field(default_factory=list)
    power: list[int] = field(default_factory=list)
    orbit: dict[int, list[int]] = field(default_factory=dict)
    group_images: list[dict[str, str]] = field(default_factory=list)
    """``group_images[k][name]``: the name of the group τ^k maps group *name* onto."""
    _link_rep: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.shift)
        self.rep = [-1] * n
        self.power = [0] * n
        for r in self.simulated:
            orbit = [r]
            x = self.shift[r]
            while x != r:
                orbit.append(x)
                x = self.shift[x]
            self.orbit[r] = orbit
            for k, x in enumerate(orbit):
                self.rep[x] = r
                self.power[x] = k

    def back(self, rank: int, k: int) -> int:
        """``τ^-k(rank)``."""
        orbit = self.orbit[self.rep[rank]]
        return orbit[(self.power[rank] - k) % len(orbit)]

    def channel(self, src: int, dst: int, tag: int) -> tuple[int, int, int]:
        """The channel a message ``src → dst`` is received on: its orbit's member whose receiver is simulated."""
        k = self.power[dst]
        if k == 0:
            return src, dst, tag
        return self.back(src, k), self.rep[dst], tag

    def bind_groups(self, groups: CommGroups) -> None:
        """Compute :attr:`group_images` (τ maps every group onto a group: :func:`find_fold` checked it)."""
        name_of = {frozenset(members): name for name, members in groups.groups.items()}
        step = {name: name_of[frozenset(self.shift[r] for r in members)] for name, members in groups.groups.items()}
        images = [{name: name for name in step}]
        for _ in range(1, self.replicas):
            images.append({name: step[image] for name, image in images[-1].items()})
        self.group_images = images

    def bind_links(self, topology: Topology) -> None:
        """Compute each link's orbit representative (the link of its orbit attached to a simulated rank)."""
        reps: list[int] = []
        ids = topology.link_ids
        switch_of: dict[tuple[int, int], str] = {}
        dim_of = topology.switch_dimensions()
        for u, v in topology.links:
            if isinstance(u, int) and isinstance(v, int):
                k = self.power[u]
                reps.append(ids[self.back(u, k), self.back(v, k)])
                continue
            rank, sw = (u, v) if isinstance(u, int) else (v, u)
            if not isinstance(rank, int) or isinstance(sw, int):
                raise FoldConflict(f"link {u} -> {v} joins two switches: not a product topology's link")
            dim = dim_of[sw]
            rep = self.rep[rank]
            key = (dim, rep)
            found = switch_of.get(key)
            if found is None:
                stride = topology.strides[dim]
                base = rep - ((rep // stride) % topology.dims[dim].npus) * stride
                found = switch_of[key] = topology.dim_switch(dim, base)
            reps.append(ids[(rep, found) if isinstance(u, int) else (found, rep)])
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


def replica_shifts(traces: Sequence[Trace]) -> tuple[int, int, int, int] | None:
    """``(inner, replicas, outer, step)`` of a generated training job: ``rank = i + inner·(replica + R·o)``.

    ``step`` is the smallest replica shift that maps the job's expert-parallel blocks onto blocks. None for a
    workload that does not describe its replicas.
    """
    if not traces:
        return None
    for attr in traces[0].metadata.attr:
        if attr.name == TRAINING_ATTR and attr.WhichOneof("value") == "string_val":
            try:
                info = json.loads(attr.string_val)
                inner, replicas, outer = int(info["tp"]) * int(info["cp"]), int(info["dp"]), int(info["pp"])
                step = int(info.get("ep", 1))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                return None
            if inner * replicas * outer != len(traces) or replicas < 2 or step < 1 or replicas % step:
                return None
            return inner, replicas, outer, step
    return None


def find_fold(
    traces: Sequence[Trace], groups: CommGroups, topology: Topology, router: str
) -> tuple[ReplicaFold | None, str]:
    """The fold of a run, or None and why not (see the module docstring for the conditions)."""
    shape = replica_shifts(traces)
    if shape is None:
        return None, "the workload does not declare replicas"
    if router != "default" or not topology.regular or topology.npus != len(traces):
        return None, "folding needs an intact product topology of the workload's ranks and dimension-order routing"
    inner, replicas, outer, step = shape
    why = "no replica shift is a symmetry of the topology"
    for s in range(step, replicas, step):
        if replicas % s:
            continue
        shift = [
            i + inner * ((d + s) % replicas + replicas * o)
            for o in range(outer)
            for d in range(replicas)
            for i in range(inner)
        ]
        reason = _topology_symmetric(topology, shift) or _groups_symmetric(groups, shift, s, replicas, inner)
        if reason is not None:
            why = reason
            continue
        reason = _traces_symmetric(traces, shift, groups)
        if reason is not None:
            return None, reason
        simulated = [i + inner * (d + replicas * o) for o in range(outer) for d in range(s) for i in range(inner)]
        fold = ReplicaFold(shift, simulated, replicas // s)
        fold.description = (
            f"{replicas // s} data-parallel replica groups mirror each other: simulated {len(simulated)} of "
            f"{len(traces)} ranks, the others mirror them"
        )
        fold.bind_links(topology)
        fold.bind_groups(groups)
        return fold, ""
    return None, why


def _topology_symmetric(topology: Topology, shift: list[int]) -> str | None:
    """None if τ acts on the topology's coordinates one dimension at a time as a symmetry of each dimension."""
    maps: list[dict[int, int]] = [{} for _ in topology.dims]
    for r, image in enumerate(shift):
        for d, (a, b) in enumerate(zip(topology.coords(r), topology.coords(image), strict=True)):
            if maps[d].setdefault(a, b) != b:
                return f"the replica shift is not a per-dimension permutation of topology {topology.name}"
    for d, (dim, mapping) in enumerate(zip(topology.dims, maps, strict=True)):
        if all(a == b for a, b in mapping.items()):
            continue
        if dim.kind in _ANY_PERMUTATION:
            continue
        n = dim.npus
        turn = (mapping[0] - 0) % n
        if dim.kind in _ROTATIONS and all(b == (a + turn) % n for a, b in mapping.items()):
            continue
        return f"the replica shift permutes dimension {d} ({dim.kind}) of topology {topology.name}, not a symmetry"
    return None


def _groups_symmetric(groups: CommGroups, shift: list[int], s: int, replicas: int, inner: int) -> str | None:
    """None if τ maps every group onto a group, shifting the positions of groups it maps to themselves cyclically."""
    by_members = {frozenset(members): members for members in groups.groups.values()}
    for name, members in groups.groups.items():
        image = [shift[r] for r in members]
        target = by_members.get(frozenset(image))
        if target is None:
            return f"the replica shift does not map communicator group {name!r} onto a group"
        if frozenset(image) != frozenset(members):
            continue
        n = len(members)
        turn = members.index(image[0])
        if any(members.index(x) != (p + turn) % n for p, x in enumerate(image)):
            return f"the replica shift does not rotate communicator group {name!r}"
    return None


def _traces_symmetric(traces: Sequence[Trace], shift: list[int], groups: CommGroups) -> str | None:
    """None if every rank's image runs the rank's trace with peers and groups relabelled by τ."""
    name_of = {frozenset(members): name for name, members in groups.groups.items()}
    image_name: dict[str | None, str | None] = {None: None, "": "", "0": "0"}
    for name, members in groups.groups.items():
        image_name[name] = name_of.get(frozenset(shift[r] for r in members))
    for r, trace in enumerate(traces):
        other = traces[shift[r]]
        for column in _SAME_COLUMNS:
            if getattr(trace, column) != getattr(other, column):
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

    def lookup(self, src: int, dst: int) -> list[int]:
        """Cached :meth:`route` (the wrapped router validated the unfolded route)."""
        key = (src, dst)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self.route(src, dst)
        return found


def mirrored_trace(trace: Trace) -> Trace:
    """The stand-in of a mirrored rank: its metadata and no nodes (its results are its representative's)."""
    return Trace(metadata=trace.metadata, nodes=[], path=trace.path, rank=trace.rank)
