"""ASTRA-sim's native collectives: one phase per logical dimension, each an algorithm state machine.

ASTRA-sim runs a collective as streams (chunks), each a list of *phases*, one per logical dimension of
the ``*-implementation`` list, each with that dimension's algorithm (``ring``, ``direct``,
``halvingDoubling``, ``doubleBinaryTree``; ``oneRing`` & co. are one ring over all NPUs). A phase waits
in its dimension's queue on its rank, so streams pipeline across dimensions. This module builds, per
rank, the phase graphs etsim's walker runs (the general mechanisms: :class:`~etsim.system.algorithms.base.Phase`,
exit nodes and gated nodes of :class:`~etsim.algo.graph.AlgoGraph`); what each phase does follows
ASTRA-sim's state machines as described in ``docs/astra-sim.md``:

==================  ==========================================================================
phases per stream   all-reduce ``localBWAware``: reduce-scatter on each dimension but the last,
                    all-reduce on the last, all-gather back (descending); all-reduce ``baseline``
                    and every other collective: the same collective on each dimension (all-gather
                    in descending order). RS divides the size by the dimension, AG multiplies it,
                    AR and A2A keep it; a ``doubleBinaryTree`` phase is always an all-reduce of its
                    input and keeps the size.
ring                reduce-scatter / all-gather / all-reduce as steps to the next index; all-to-all
                    as n(n−1)/2 sequential single-chunk messages. An endpoint delay before the phase;
                    every receipt is processed (an endpoint delay after arrival, the reduction where
                    the step reduces) and releases the next send, which does not wait for the
                    rank's previous send; the phase ends at its last processed receipt.
direct              one endpoint delay (a COMP) before each of the n−1 concurrent sends; a receipt
                    costs one more, plus the reduction for reductions. All-reduce phase 2: the packet
                    to offset j leaves at the j-th finished reduction, but not before the first one
                    finishing after every phase-1 receipt (a gated node).
halvingDoubling     exchanges with the index at distance 1, 2, …, n/2 (sizes S/2 … S/n), back for
                    all-gather; no reduction charged after the first exchange.
doubleBinaryTree    the whole phase size up one of two trees and back down (see :func:`tree_roles`);
                    leaves pay an endpoint delay to start and one at the end, every receipt at a
                    non-leaf a processed bundle (endpoint delay + reduction); intermediates and the
                    root end the phase when they send down (exit nodes), before their sends land.
==================  ==========================================================================

Queues: with ``Q`` queues per dimension (``--num-queues-per-dim``), phases take queues round robin;
for a ``localBWAware`` all-reduce the reduce-scatter and last all-reduce phases use the first half,
the all-gather phases the second half (anticlockwise rings). With one queue, every phase of dimension
``d`` waits in queue ``d``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from etsim.algo.graph import AlgoGraph, AlgorithmBuilder
from etsim.chakra.graph import CollectiveType
from etsim.errors import ConfigError
from etsim.system.algorithms.base import CollectiveAlgorithm, Phase
from etsim.system.algorithms.sources import AlgorithmContext, AlgorithmSource

__all__ = ["AstraCollective", "AstraSource", "astra_spec", "tree_roles"]

C = CollectiveType
RS, AG, AR, A2A = "rs", "ag", "ar", "a2a"
_KIND = {C.ALL_REDUCE: AR, C.REDUCE_SCATTER: RS, C.ALL_GATHER: AG, C.ALL_TO_ALL: A2A}
#: ASTRA-sim's algorithm names (lower case, digits of ``directK`` dropped) -> etsim's phase kind.
NAMES = {
    "ring": "ring",
    "direct": "direct",
    "halvingdoubling": "hd",
    "doublebinarytree": "dbt",
    "onering": "ring",
    "onedirect": "direct",
    "onehalvingdoubling": "hd",
}


def astra_spec(names: Sequence[str], optimization: str, queues: int) -> str:
    """The ``--algo`` value of an ASTRA-sim implementation list (read by :class:`AstraSource`)."""
    return f"astra:{','.join(names)};opt={optimization};queues={queues}"


@dataclass(frozen=True, slots=True)
class _Plan:
    """One phase of a stream: dimension, algorithm, collective kind, input size in units, queue group."""

    dim: int
    algorithm: str
    kind: str
    size: int
    half: str  # "all", "first" or "last": which of the dimension's queues it may take


def tree_roles(n: int, low_root: bool) -> tuple[list[int], list[list[int]]]:
    """ASTRA-sim's binary tree over positions ``0..n-1`` (n a power of two): ``(parent, children)``.

    A complete binary tree of ``n − 1`` nodes, numbered in order, hangs under a root with one child.
    ``low_root`` False (DBMAX): the root is the last position and in-order position q is position q;
    True (DBMIN): the root is position 0 and q is position q + 1. Parent −1 marks the root.
    """
    k = n.bit_length() - 1
    shift = 1 if low_root else 0
    root = 0 if low_root else n - 1
    parent = [-1] * n
    children: list[list[int]] = [[] for _ in range(n)]
    top = (1 << (k - 1)) - 1 if k >= 1 else 0
    for q in range(n - 1):
        ones = (~q & (q + 1)).bit_length() - 1  # trailing one bits
        step = 1 << ones
        up = root if q == top else shift + (q - step if (q >> (ones + 1)) & 1 else q + step)
        parent[q + shift] = up
        children[up].append(q + shift)
    for c in children:
        c.sort()
    return parent, children


class AstraCollective(CollectiveAlgorithm):
    """ASTRA-sim's native collective for an implementation list (see the module docstring).

    Args:
        names: the ``*-implementation`` list (one name per logical dimension).
        optimization: ``baseline`` or ``localBWAware``.
        queues: queues per dimension (``--num-queues-per-dim``).
        dims: the network's dimension sizes (dimension 0 first); None for one dimension.
        endpoint_delay: ns of one endpoint (memory-bus) delay.
    """

    name = "astra"
    collectives = frozenset({C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER, C.ALL_TO_ALL})
    needs_dims: ClassVar[bool] = True

    def __init__(
        self,
        names: Sequence[str],
        optimization: str = "baseline",
        queues: int = 1,
        dims: Sequence[int] | None = None,
        endpoint_delay: float = 10.0,
    ) -> None:
        first = names[0].lower()
        self.flat = first.startswith("one")  # one logical ring over all NPUs, the rest is ignored
        self.names = [NAMES[n.lower().rstrip("0123456789")] for n in (names[:1] if self.flat else names)]
        self.optimization = optimization
        self.queues = queues
        self.dims = tuple(dims) if dims else None
        self.e = endpoint_delay
        self._graphs: dict[tuple[Any, ...], AlgoGraph] = {}

    # -- what runs where ------------------------------------------------------------------------------

    def _dims(self, group_size: int) -> list[tuple[int, int]]:
        """``(size, stride)`` of each logical dimension for a group of *group_size* ranks."""
        if self.flat or self.dims is None or math.prod(self.dims) != group_size:
            # one ring over the group (a sub-group runs as one ring, as in ASTRA-sim)
            return [(group_size, 1)]
        out, stride = [], 1
        for n in self.dims:
            out.append((n, stride))
            stride *= n
        return out

    def _names(self, group_size: int) -> list[str]:
        """The implementations the dimensions of *group_size* ranks run.

        A group smaller than the system runs as one ring, and ASTRA-sim replaces a list of several implementations
        with ``Ring`` there (``CommunicatorGroup.cc``: a 1 MiB all-reduce of a 4-NPU group ran ``direct``, the
        list's first, 12283 cycles for its 33829).
        """
        if self.flat or self.dims is None or math.prod(self.dims) == group_size or len(self.names) == 1:
            return self.names
        return ["ring"]

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """The four simulated collectives; halvingDoubling refuses all-to-all and non-powers of two."""
        reason = super().supports(collective, group_size)
        if reason is not None:
            return reason
        dims = self._dims(group_size)
        if len(dims) > len(self.names):
            # ASTRA-sim reads an implementation for every dimension (its list indexed by dimension): a shorter list
            # would leave the last dimensions out, and the collective would not combine across them.
            shape = " x ".join(str(n) for n, _ in dims)
            return (f"ASTRA-sim's implementation list names {len(self.names)} for {len(dims)} dimensions ({shape}): "
                    "give one per dimension (e.g. astra:" + ",".join(["ring"] * len(dims)) + ")")  # fmt: skip
        for (n, _), algo in zip(dims, self._names(group_size), strict=False):
            if algo in ("hd", "dbt") and n & (n - 1):
                return f"ASTRA-sim's {algo} needs a power-of-two dimension size, not {n}"
            if algo == "hd" and collective == C.ALL_TO_ALL:
                return "ASTRA-sim's halvingDoubling does not implement all-to-all ('unknown communication type')"
        return None

    def _too_few_bytes(self, collective: CollectiveType, group_size: int, size: float | None) -> str:
        """The base class's check, but not where ASTRA-sim itself moves other bytes than the collective needs.

        A ``doubleBinaryTree`` phase is an all-reduce of its chunk whatever the collective (module docstring).
        """
        if "dbt" in self._names(group_size) and collective != C.ALL_REDUCE:
            return ""
        return super()._too_few_bytes(collective, group_size, size)

    def plan(self, collective: CollectiveType, group_size: int) -> list[_Plan]:
        """The phases of one stream, with sizes in units of ``buffer / group_size``."""
        dims = self._dims(group_size)
        names = self._names(group_size)[: len(dims)]
        p = group_size
        active = [d for d, (n, _) in enumerate(dims) if n > 1]
        kind = _KIND[collective]
        plans: list[_Plan] = []
        if kind == AR and self.optimization == "localBWAware" and active:
            size = p
            for d in active[:-1]:
                plans.append(self._phase(d, names[d], RS, size, "first"))
                size = plans[-1].size if names[d] == "dbt" else size // dims[d][0]
            last = active[-1]
            plans.append(self._phase(last, names[last], AR, size, "first"))
            for d in reversed(active[:-1]):
                plans.append(self._phase(d, names[d], AG, size, "last"))
                size = size if names[d] == "dbt" else size * dims[d][0]
            return plans
        order = list(reversed(active)) if kind == AG else active
        size = 1 if kind == AG else p  # all-gather starts from the shard (one unit), the others from the buffer
        for d in order:
            plans.append(self._phase(d, names[d], kind, size, "all"))
            if names[d] != "dbt":
                size = size // dims[d][0] if kind == RS else size * dims[d][0] if kind == AG else size
        return plans

    @staticmethod
    def _phase(d: int, algorithm: str, kind: str, size: int, half: str) -> _Plan:
        return _Plan(d, algorithm, AR if algorithm == "dbt" else kind, size, half)

    def _queue(self, plan: _Plan, state: dict[str, Any]) -> tuple[tuple[int, int], bool]:
        """The phase's queue ``(dimension, index)`` and whether its ring runs anticlockwise."""
        q = self.queues
        if q == 1:
            return (plan.dim, 0), plan.half == "last"
        first = q // 2
        lo, count = (0, first) if plan.half == "first" else (first, q - first) if plan.half == "last" else (0, q)
        key = f"rr:{plan.dim}:{plan.half}"
        index = lo + state.get(key, 0) % count
        state[key] = state.get(key, 0) + 1
        anticlockwise = plan.half == "last" or (plan.half == "all" and index >= first)
        return (plan.dim, index), anticlockwise

    # -- the algorithm interface -----------------------------------------------------------------------

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """Not used: this algorithm is made of phases (see :meth:`phases`)."""
        raise ConfigError("ASTRA-sim collectives run as phases; they have no single graph")

    def phases(
        self, collective: CollectiveType, group_size: int, position: int, *, stream: int, state: dict[str, Any]
    ) -> list[Phase]:
        """Per rank and stream: the phase graphs, their queues, and the tree each tree phase uses."""
        dims = self._dims(group_size)
        out = []
        for plan in self.plan(collective, group_size):
            queue, anticlockwise = self._queue(plan, state)
            n, stride = dims[plan.dim]
            low_root = False
            if plan.algorithm == "dbt":
                # which tree: alternates with every tree phase this rank creates on this dimension
                counter = f"dbt:{collective.name}:{plan.dim}"
                low_root = state.get(counter, 0) % 2 == 1
                state[counter] = state.get(counter, 0) + 1
            # A ring or direct phase over the whole group is the same graph on every rank, shifted: one
            # graph with relative peers serves them all (and lets the fast path evaluate it in bulk).
            shared = n == group_size and plan.algorithm in ("ring", "direct")
            key = (plan, group_size, -1 if shared else position, anticlockwise, low_root)
            graph = self._graphs.get(key)
            if graph is None:
                graph = self._graphs[key] = self._build(
                    plan, n, stride, group_size, 0 if shared else position, anticlockwise, low_root, shared
                )
            delays = plan.algorithm in ("ring", "hd")  # their endpoint delays are the system's
            out.append(Phase(graph, queue=queue, start_delay=delays, endpoint_delay=delays))
        return out

    # -- phase graphs ---------------------------------------------------------------------------------------

    def _build(
        self, plan: _Plan, n: int, stride: int, p: int, r: int, anticlockwise: bool, low_root: bool, relative: bool
    ) -> AlgoGraph:
        x = (r // stride) % n
        base = r - x * stride

        def at(index: int) -> int:
            return base + (index % n) * stride  # with relative peers (r = 0): the offset from the rank

        b = AlgorithmBuilder(total_chunks=p, relative_peers=relative)
        if plan.algorithm == "ring":
            nxt, prv = (at(x - 1), at(x + 1)) if anticlockwise else (at(x + 1), at(x - 1))
            self._ring(b, plan, n, nxt, prv)
        elif plan.algorithm == "direct":
            self._direct(b, plan, n, x, at)
        elif plan.algorithm == "hd":
            self._halving_doubling(b, plan, n, x, at)
        else:
            self._tree(b, plan, n, x, at, low_root)
        return b.build()

    @staticmethod
    def _ring(b: AlgorithmBuilder, plan: _Plan, n: int, nxt: int, prv: int) -> None:
        """ASTRA-sim's ring: a packet goes out when the previous one received has been processed, never later.

        The first send leaves after the phase's start delay; the k-th receipt is processed (the message's
        endpoint delay, paid on arrival, then the reduction for reduce-scatter and an all-reduce's first half)
        and releases the next send, which does not wait for the rank's own previous send; the phase ends when
        its last receipt is processed (an exit node), its own last send possibly still in flight.
        """
        if plan.kind == A2A:
            steps, m, reducing = n * (n - 1) // 2, plan.size // n, 0
        elif plan.kind == AG:  # the input is one rank's shard; n−1 sends of it
            steps, m, reducing = n - 1, plan.size, 0
        else:
            steps, m = (2 if plan.kind == AR else 1) * (n - 1), plan.size // n
            reducing = n - 1
        processed: list[int] = []
        prev_recv: list[int] = []
        for k in range(steps):
            b.send(nxt, m, 0, deps=processed, name=f"ring{k}_send")
            prev_recv = [b.recv(prv, m, 0, deps=prev_recv, name=f"ring{k}_recv")]
            if k < reducing:
                processed = [b.reduce(m, deps=prev_recv + processed, name=f"ring{k}_reduce")]
            else:
                processed = [b.reduce(0, deps=prev_recv + processed, duration_ns=0.0, name=f"ring{k}_done")]
        b.mark_exits(*processed)

    def _direct(self, b: AlgorithmBuilder, plan: _Plan, n: int, x: int, at: Any) -> None:
        m = plan.size if plan.kind == AG else plan.size // n
        e = self.e
        for j in range(1, n):
            ready = b.reduce(0, duration_ns=e, name=f"d_bundle_{j}")
            b.send(at(x + j), m, 0, deps=[ready], name=f"d_send_{j}")
        recvs, reduced = [], []
        for j in range(1, n):
            got = b.recv(at(x - j), m, 0, name=f"d_recv_{j}")
            recvs.append(got)
            bundle = b.reduce(0, deps=[got], duration_ns=e, name=f"d_received_{j}")
            if plan.kind in (RS, AR):
                reduced.append(b.reduce(m, deps=[bundle], name=f"d_reduce_{j}"))
        if plan.kind != AR:
            return
        # Phase 2: the packet to offset j leaves at the j-th finished reduction, and not before the first
        # reduction that finishes once every phase-1 receipt is in.
        everything_in = b.reduce(0, deps=recvs, duration_ns=0, name="d_all_received")
        for j in range(1, n):
            send = b.send(at(x + j), m, 1, deps=reduced, name=f"d2_send_{j}")
            if e > 0:
                b.gate(send, j, everything_in)
            # Without an endpoint delay (ASTRA-sim refuses 0; `etsim run` may run one) every reduction can
            # finish by the last receipt, so no reduction follows the arming: phase 2 then waits for them all.
        for j in range(1, n):
            got = b.recv(at(x - j), m, 1, name=f"d2_recv_{j}")
            b.reduce(0, deps=[got], duration_ns=e, name=f"d2_received_{j}")

    @staticmethod
    def _halving_doubling(b: AlgorithmBuilder, plan: _Plan, n: int, x: int, at: Any) -> None:
        steps = []
        dist, size = 1, plan.size // 2
        while dist < n:
            steps.append((dist, size))
            dist, size = dist * 2, size // 2
        last: list[int] = []
        tag = 0
        if plan.kind in (RS, AR):
            for step, (dist, size) in enumerate(steps):
                partner = at(x ^ dist)
                b.send(partner, size, tag, deps=last, name=f"hd{tag}_send")
                got = b.recv(partner, size, tag, deps=last, name=f"hd{tag}_recv")
                last = [b.reduce(size, deps=[got], name=f"hd{tag}_reduce")] if step else [got]
                tag += 1
        if plan.kind in (AG, AR):
            # all-gather halves: sizes from the smallest up (for AG the input is a shard of size / n)
            shard = plan.size // n if plan.kind == AR else plan.size
            for i, (dist, _) in enumerate(reversed(steps)):
                partner = at(x ^ dist)
                size = shard << i
                b.send(partner, size, tag, deps=last, name=f"hd{tag}_send")
                last = [b.recv(partner, size, tag, deps=last, name=f"hd{tag}_recv")]
                tag += 1

    def _tree(self, b: AlgorithmBuilder, plan: _Plan, n: int, x: int, at: Any, low_root: bool) -> None:
        parent, children = tree_roles(n, low_root)
        up, down = parent[x], children[x]
        s, e = plan.size, self.e

        def processed(after: int, name: str) -> int:
            bundle = b.reduce(0, deps=[after], duration_ns=e, name=f"{name}_bundle")
            return b.reduce(s, deps=[bundle], name=f"{name}_reduce")

        if not down:  # leaf
            start = b.reduce(0, duration_ns=e, name="leaf_start")
            b.send(at(up), s, 0, deps=[start], name="leaf_up")
            got = b.recv(at(up), s, 1, name="leaf_down")
            b.mark_exits(b.reduce(0, deps=[got], duration_ns=e, name="leaf_end"))
            return
        received = [processed(b.recv(at(c), s, 0, name=f"up_from_{c}"), f"child_{c}") for c in down]
        if up >= 0:  # intermediate
            b.send(at(up), s, 0, deps=received, name="up")
            ready = processed(b.recv(at(up), s, 1, name="down_from_parent"), "parent")
        else:  # root: its only child's sum comes back down at once
            ready = received[-1]
        for c in down:
            b.send(at(c), s, 1, deps=[ready], name=f"down_to_{c}")
        b.mark_exits(ready)


class AstraSource(AlgorithmSource):
    """``astra:NAMES;opt=OPTIMIZATION;queues=Q``: an ASTRA-sim implementation list as an algorithm.

    Published through the ``etsim.algorithm_sources`` entry point ``astra`` (``etsim astra`` writes
    these values; see :func:`astra_spec`).
    """

    name = "astra"
    priority = 10

    def claims(self, spec: str) -> bool:
        """Values starting with ``astra:``."""
        return spec.startswith("astra:")

    def load(self, spec: str, context: AlgorithmContext) -> CollectiveAlgorithm:
        """Parse the list and options."""
        body = spec[len("astra:") :]
        names_text, *options = body.split(";")
        values = dict(option.split("=", 1) for option in options if "=" in option)
        names = [n for n in names_text.split(",") if n]
        unknown = [n for n in names if n.lower().rstrip("0123456789") not in NAMES]
        if not names or unknown:
            raise ConfigError(f"{spec!r}: unknown ASTRA-sim algorithm(s) {unknown}; ASTRA-sim knows {sorted(NAMES)}")
        try:
            queues = int(values.get("queues", "1"))
        except ValueError:
            raise ConfigError(f"{spec!r}: queues must be an integer") from None
        return AstraCollective(
            names,
            optimization=values.get("opt", "baseline"),
            queues=max(queues, 1),
            dims=context.dims,
            endpoint_delay=context.phase_delay,
        )
