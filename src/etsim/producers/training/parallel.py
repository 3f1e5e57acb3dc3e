"""How a training job's ranks are laid out and in which order each pipeline stage runs its micro-batches.

Ranks follow Megatron-LM's order, tensor-parallel fastest: ``rank = tp + T·(cp + C·(dp + D·pp))``, so a
tensor-parallel group is consecutive ranks (one node's NVSwitch), then context, data and pipeline. Expert
parallelism splits each data-parallel group into blocks of ``E`` consecutive data-parallel ranks; expert tensor
parallelism splits each expert over ``ETP`` consecutive tensor-parallel ranks, which hold the same experts. With
``ETP = T`` this is Megatron-Core's expert layout (its rank order ``etp, ep, edp`` with the tensor-parallel ranks
fastest); with ``ETP = 1`` each tensor-parallel rank holds whole experts and exchanges tokens with its own
data-parallel peers (Megatron-LM's layout before Megatron-Core's "parallel folding", which also lets ``ep`` span
tensor-parallel ranks: not modelled).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from etsim.errors import ConfigError

__all__ = ["SCHEDULES", "Layout", "Op", "in_flight", "schedule"]

#: Pipeline schedules.
SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class Layout:
    """The degrees of parallelism and the rank ↔ coordinates maps."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int = 1
    experts: bool = False
    """Whether the model has experts (then the ``edp`` groups exist, whatever ``ep``)."""
    etp: int = 1
    """Expert tensor parallelism: the tensor-parallel ranks (consecutive) each expert is split over."""
    tied: bool = False
    """Whether the first and last pipeline stages hold copies of one word embedding (then the ``emb`` groups exist)."""

    @property
    def ranks(self) -> int:
        """All ranks."""
        return self.tp * self.cp * self.dp * self.pp

    @property
    def dense_copies(self) -> int:
        """The ranks holding the same dense weights (a ``dp`` group: data and context parallel), ZeRO's shards."""
        return self.dp * self.cp

    @property
    def expert_copies(self) -> int:
        """The ranks holding the same experts (an ``edp`` group), ZeRO's shards of them."""
        return max(1, self.tp * self.cp * self.dp // (self.ep * self.etp))

    def coords(self, rank: int) -> tuple[int, int, int, int]:
        """``(tp, cp, dp, pp)`` coordinates of *rank*."""
        t, rest = rank % self.tp, rank // self.tp
        c, rest = rest % self.cp, rest // self.cp
        d, p = rest % self.dp, rest // self.dp
        return t, c, d, p

    def rank(self, t: int, c: int, d: int, p: int) -> int:
        """The rank at these coordinates."""
        return t + self.tp * (c + self.cp * (d + self.dp * p))

    def groups(self) -> dict[str, list[list[int]]]:
        """Communicator groups by role: ``{role: [ranks of each group]}``, for roles whose groups have 2+ ranks.

        Roles: ``tp``, ``cp``, ``dp`` (data-parallel gradients: the data- and context-parallel ranks that hold
        the same weights), ``ep`` (expert-parallel all-to-alls), ``etp`` (the ranks one expert is split over: the
        gathers and reduce-scatters of its tokens), ``edp`` (expert gradients: every rank of a stage that holds
        the same share of the same experts) and ``emb`` (a tied word embedding's two copies: the first and the last
        stage's rank of one pipeline, Megatron-LM's embedding group).
        """
        out: dict[str, list[list[int]]] = {}
        coords = [self.coords(r) for r in range(self.ranks)]

        def by(role: str, fn: Callable[[tuple[int, int, int, int]], tuple[int, ...]]) -> None:
            found: dict[tuple[int, ...], list[int]] = {}
            for r, c in enumerate(coords):
                found.setdefault(fn(c), []).append(r)
            groups = [g for g in found.values() if len(g) > 1]
            if groups:
                out[role] = groups

        ep, etp = self.ep, self.etp
        by("tp", lambda c: (c[1], c[2], c[3]))
        by("cp", lambda c: (c[0], c[2], c[3]))
        by("dp", lambda c: (c[0], c[3]))
        if ep > 1:
            by("ep", lambda c: (c[0], c[1], c[3], c[2] // ep))
        if self.experts and etp > 1:
            by("etp", lambda c: (c[1], c[2], c[3], c[0] // etp))
        if self.experts:
            by("edp", lambda c: (c[3], c[2] % ep, c[0] % etp))
        if self.tied and self.pp > 1:
            last = self.pp - 1
            out["emb"] = [[r, self.rank(*c[:3], last)] for r, c in enumerate(coords) if c[3] == 0]
        return out


@dataclass(frozen=True)
class Op:
    """One step of a stage's schedule: the forward (``"F"``) or backward (``"B"``) of a micro-batch on a chunk."""

    kind: str
    micro_batch: int
    chunk: int
    """The stage's model chunk, 0 .. v-1 (model chunk ``chunk · p + stage``)."""


def schedule(name: str, stages: int, stage: int, micro_batches: int, chunks: int = 1) -> list[Op]:
    """The order in which *stage* runs its forward and backward passes.

    - ``gpipe``: every forward, then every backward;
    - ``1f1b``: ``p - stage - 1`` warm-up forwards, then one forward and one backward in turn, then the
      remaining backwards (PipeDream-Flush); at most ``p - stage`` micro-batches in flight;
    - ``interleaved``: Megatron-LM's interleaved 1F1B over *chunks* model chunks per stage (needs the
      micro-batches to be a multiple of the stages).
    """
    m, p, v = micro_batches, stages, chunks
    if name == "gpipe":
        return [Op("F", i, 0) for i in range(m)] + [Op("B", i, 0) for i in range(m)]
    if name == "1f1b":
        warm = min(p - stage - 1, m)
        ops = [Op("F", i, 0) for i in range(warm)]
        for i in range(m - warm):
            ops += [Op("F", warm + i, 0), Op("B", i, 0)]
        return ops + [Op("B", i, 0) for i in range(m - warm, m)]
    if name != "interleaved":
        raise ConfigError(f"unknown pipeline schedule {name!r}; valid: {', '.join(SCHEDULES)}")
    if m % p:
        raise ConfigError(f"the interleaved schedule needs the micro-batches ({m}) to be a multiple of stages ({p})")
    total = m * v

    def forward(k: int) -> Op:
        group, within = divmod(k, p * v)
        return Op("F", group * p + within % p, within // p)

    def backward(k: int) -> Op:
        group, within = divmod(k, p * v)
        return Op("B", group * p + within % p, v - 1 - within // p)

    warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
    ops = [forward(k) for k in range(warm)]
    for k in range(total - warm):
        ops += [forward(warm + k), backward(k)]
    return ops + [backward(k) for k in range(total - warm, total)]


def in_flight(ops: list[Op]) -> int:
    """The most micro-batch chunks a schedule holds activations for at once (forwarded, not yet backwarded)."""
    held = peak = 0
    for op in ops:
        held += 1 if op.kind == "F" else -1
        peak = max(peak, held)
    return peak
