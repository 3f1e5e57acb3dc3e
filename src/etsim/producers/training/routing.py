"""How a mixture-of-experts layer's tokens spread over its experts: balanced, or drawn per micro-batch and layer.

A balanced router sends every expert the same number of routed copies (``top_k`` per token). Real routers do not:
with ``imbalance`` c > 0, the experts' shares of one micro-batch's copies in one layer are drawn from a symmetric
Dirichlet distribution with concentration ``α = 1 / c²`` (the shares of independent Gamma(α) draws, normalised),
so that an expert's load has a coefficient of variation close to c (exactly ``c·√((E−1)/(E + c²))``: for
DeepSeek-V3's 256 experts, 0.997·c at c = 0.5). Every source rank routes its tokens with the same shares (the hot
experts are hot for everyone), so a rank receives, from each peer, the share of its local experts.

With a ``capacity_factor`` f, an expert keeps at most ``f`` times the mean (``1/E`` of the copies) and drops the
rest, as Megatron-LM's token dropping does; without one the router is dropless. The draws are seeded by
``(seed, micro-batch, layer)``: the same job gives the same loads, whatever the process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from etsim.chakra.builder import TraceBuilder
    from etsim.producers.training.model import ModelSpec

__all__ = ["MOE_TAG_BASE", "Routing", "busiest_load", "exchange", "expert_shares", "load_summary", "rank_shares"]

#: Tags of the expert-parallel sends and receives start here (pipeline transfers use small tags).
MOE_TAG_BASE = 1 << 24


@dataclass(frozen=True)
class Routing:
    """The router's behaviour: ``imbalance`` (coefficient of variation of expert loads), capacity, seed."""

    imbalance: float = 0.0
    capacity_factor: float | None = None
    seed: int = 0

    @property
    def balanced(self) -> bool:
        """Whether every expert gets exactly its ``1/E`` share (nothing drawn, nothing dropped)."""
        return self.imbalance == 0 and (self.capacity_factor is None or self.capacity_factor >= 1)

    def keeps_all(self, ep: int) -> bool:
        """Whether every one of *ep* expert-parallel positions keeps its balanced share of the copies.

        So it does when the router is balanced, and with one position that holds every expert and drops nothing.
        """
        return self.balanced or (ep == 1 and self.capacity_factor is None)


@lru_cache(maxsize=1 << 16)
def expert_shares(routing: Routing, experts: int, micro_batch: int, layer: int) -> tuple[float, ...]:
    """Each expert's share of the copies it keeps in *layer* for *micro_batch* (they sum to 1 less the dropped)."""
    if routing.imbalance == 0:
        shares = [1.0 / experts] * experts
    else:
        import numpy as np

        rng = np.random.default_rng([routing.seed, micro_batch, layer])
        draws = rng.gamma(1.0 / routing.imbalance**2, size=experts)
        shares = (draws / draws.sum()).tolist()
    if routing.capacity_factor is not None:
        cap = routing.capacity_factor / experts
        shares = [min(s, cap) for s in shares]
    return tuple(shares)


def rank_shares(routing: Routing, experts: int, ep: int, micro_batch: int, layer: int) -> tuple[float, ...]:
    """The share of every source's copies that each expert-parallel position keeps (its ``experts / ep`` experts)."""
    shares = expert_shares(routing, experts, micro_batch, layer)
    local = experts // ep
    return tuple(sum(shares[q * local : (q + 1) * local]) for q in range(ep))


def busiest_load(routing: Routing, experts: int, ep: int, micro_batches: int, layer: int) -> float:
    """The busiest expert-parallel position's load in *layer* over the balanced one (1 for a balanced router).

    Averaged over the micro-batches: what its experts keep of their inputs, for the memory estimate.
    """
    if routing.keeps_all(ep):
        return 1.0
    loads = [0.0] * ep
    for mb in range(micro_batches):
        for q, share in enumerate(rank_shares(routing, experts, ep, mb, layer)):
            loads[q] += share * ep / micro_batches
    return max(loads)


def exchange(
    b: TraceBuilder,
    group: str,
    members: Sequence[int],
    position: int,
    sizes: Sequence[float],
    to_experts: bool,
    tag: int,
    deps: list[int],
    name: str,
) -> list[int]:
    """An all-to-all of unequal parts as the sends and receives NCCL runs it as; returns every node it made.

    *members* are the expert-parallel group's ranks by position (*group* its name: the nodes' ``pg_name``), *sizes*
    the bytes a source sends each position (proportional to its experts' shares). Toward the experts (dispatch, and
    the combine's gradient) this rank sends ``sizes[q]`` to position q and receives ``sizes[position]`` from every
    peer; back from them (combine, and the dispatch's gradient) the reverse. A part that rounds to no byte is not
    sent (both ends compute the same sizes).
    """
    nodes = []
    for q, peer in enumerate(members):
        if q == position:
            continue
        out, back = (sizes[q], sizes[position]) if to_experts else (sizes[position], sizes[q])
        if round(out) > 0:
            nodes.append(b.send(peer, round(out), tag, deps=deps, name=f"{name}_send_to{peer}", pg_name=group))
        if round(back) > 0:
            nodes.append(b.recv(peer, round(back), tag, deps=deps, name=f"{name}_recv_from{peer}", pg_name=group))
    return nodes


def load_summary(routing: Routing, model: ModelSpec, ep: int, micro_batches: int) -> dict[str, float]:
    """An unbalanced router's settings and what its draws gave (empty for a balanced one).

    ``expert_load_peak``: the busiest expert-parallel rank's load over the mean, ``dropped_copies``: the share of
    routed copies dropped; both averaged over micro-batches and MoE layers.
    """
    if routing.balanced:
        return {}
    peaks, dropped = [], []
    for mb in range(micro_batches):
        for layer in range(model.layers):
            if model.is_moe(layer):
                shares = rank_shares(routing, model.experts, ep, mb, layer)
                kept = sum(shares)
                peaks.append(max(shares) * ep / kept)
                dropped.append(1.0 - kept)
    out = {"expert_imbalance": routing.imbalance, "routing_seed": routing.seed,
           "expert_load_peak": sum(peaks) / len(peaks), "dropped_copies": sum(dropped) / len(dropped)}  # fmt: skip
    if routing.capacity_factor is not None:
        out["capacity_factor"] = routing.capacity_factor
    return out
