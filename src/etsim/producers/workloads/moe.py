"""``moe``: mixture-of-experts training steps (expert-parallel all-to-alls, dense all-reduces of several sizes)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import CollectiveType, NodeType, Trace
from etsim.errors import ConfigError, warn
from etsim.options import Integer, ListOf, Size, option
from etsim.producers.workloads.base import WORKLOAD_GENERATORS, Npus, Rewrite, WorkloadGenerator, check_npus

__all__ = ["MoeGenerator", "moe_groups", "moe_workload"]


def moe_groups(npus: int, ep_size: int) -> dict[str, list[int]]:
    """The process groups of :func:`moe_workload`, by ``pg_name``.

    ``"0"`` is every rank; ``"1"`` … ``"E"`` the expert-parallel groups (consecutive blocks of *ep_size*
    ranks); then, when there are several blocks, the expert-data-parallel groups ``"E+1"`` … (the ranks
    that hold the same experts, one per block).
    """
    blocks = npus // ep_size
    groups = {"0": list(range(npus))}
    for g in range(blocks):
        groups[str(1 + g)] = list(range(g * ep_size, (g + 1) * ep_size))
    if blocks > 1:
        for j in range(ep_size):
            groups[str(1 + blocks + j)] = list(range(j, npus, ep_size))
    return groups


def moe_workload(
    npus: int,
    *,
    ep_size: int,
    layers: int,
    token_bytes: int,
    dense_grad_bytes: Sequence[int],
    expert_grad_bytes: int = 0,
    attn_micros: int = 50,
    expert_micros: int = 100,
    iterations: int = 1,
) -> list[Trace]:
    """A mixture-of-experts training step (or several): all-to-all, all-reduces of several sizes, compute.

    Per layer and rank, forward: attention compute (``attn_micros``), an all-to-all of the token
    activations (*token_bytes*, the buffer each rank exchanges) within its expert-parallel group
    (:func:`moe_groups`), the experts' compute (``expert_micros``), an all-to-all back. Backward, layer
    L-1 … 0: the mirror all-to-alls around the experts' backward compute (2 × ``expert_micros``), whose
    weight gradient is all-reduced (*expert_grad_bytes*, skipped when 0 or when one block holds every expert)
    among the ranks holding the same experts; then the attention backward (2 × ``attn_micros``), whose dense
    weight gradients — one all-reduce per size in *dense_grad_bytes* (small norms and biases, large
    projections), over all ranks — start as soon as the weight gradient exists and overlap the layers below,
    as data-parallel frameworks do. The next iteration's forward pass of a layer waits for its all-reduces.

    Every rank's trace starts with a PyTorch-style ``process_group:init`` METADATA node naming the groups,
    so the workload runs without a comm-group file.

    Raises:
        ValueError: *npus* not a multiple of *ep_size*, no layers or iterations, or a negative size or time.
    """
    check_npus(npus)
    if ep_size < 1 or npus % ep_size:
        raise ValueError(f"npus ({npus}) must be a multiple of the expert-parallel size ({ep_size})")
    if layers < 1 or iterations < 1:
        raise ValueError("layers and iterations must be >= 1")
    if min([token_bytes, expert_grad_bytes, attn_micros, expert_micros, *dense_grad_bytes]) < 0:
        raise ValueError("sizes and compute times must be >= 0")
    groups = moe_groups(npus, ep_size)
    blocks = npus // ep_size
    meta = [
        {"pg_name": name, "pg_desc": "default_pg" if name == "0" else "moe", "backend_config": "cuda:nccl",
         "pg_size": len(ranks), "ranks": ranks}
        for name, ranks in groups.items()
    ]  # fmt: skip
    a2a, ar = CollectiveType.ALL_TO_ALL, CollectiveType.ALL_REDUCE
    traces = []
    for rank in range(npus):
        ep = str(1 + rank // ep_size)
        edp = str(1 + blocks + rank % ep_size) if blocks > 1 else None
        b = TraceBuilder()
        init = b.node(NodeType.METADATA_NODE, "process_group:init")
        b.nodes[-1].inputs.values = str([json.dumps(meta)])
        prev = [init]
        reduced: list[list[int]] = [[] for _ in range(layers)]
        for it in range(iterations):
            for layer in range(layers):
                p = f"it{it}_l{layer}"
                attn = b.comp(f"{p}_attn_fwd", duration_micros=attn_micros, deps=prev + reduced[layer])
                out = b.collective(a2a, token_bytes, deps=[attn], name=f"{p}_dispatch", pg_name=ep)
                expert = b.comp(f"{p}_expert_fwd", duration_micros=expert_micros, deps=[out])
                prev = [b.collective(a2a, token_bytes, deps=[expert], name=f"{p}_combine", pg_name=ep)]
            for layer in reversed(range(layers)):
                p = f"it{it}_l{layer}"
                back = b.collective(a2a, token_bytes, deps=prev, name=f"{p}_combine_grad", pg_name=ep)
                expert = b.comp(f"{p}_expert_bwd", duration_micros=2 * expert_micros, deps=[back])
                reduced[layer] = []
                if edp is not None and expert_grad_bytes > 0:
                    reduced[layer].append(
                        b.collective(ar, expert_grad_bytes, deps=[expert], name=f"{p}_expert_grads", pg_name=edp)
                    )
                back = b.collective(a2a, token_bytes, deps=[expert], name=f"{p}_dispatch_grad", pg_name=ep)
                attn = b.comp(f"{p}_attn_bwd", duration_micros=2 * attn_micros, deps=[back])
                for k, size in enumerate(dense_grad_bytes):
                    reduced[layer].append(b.collective(ar, size, deps=[attn], name=f"{p}_dense_grads{k}"))
                prev = [attn]
        traces.append(b.build(rank=rank))
    return traces


@WORKLOAD_GENERATORS.register("moe")
class MoeGenerator(WorkloadGenerator):
    """Mixture-of-experts training step(s) (:func:`moe_workload`)."""

    name = "moe"
    summary = "mixture-of-experts training step(s): expert-parallel all-to-alls, dense all-reduces of several sizes"

    @dataclass(frozen=True, kw_only=True)
    class Options(WorkloadGenerator.Options):
        """The expert-parallel layout, the model and its compute times."""

        npus: int = option(help="ranks", parse=Npus())
        ep_size: int = option(help="ranks per expert-parallel group (divides npus)", parse=Integer(1))
        layers: int = option(help="layers", parse=Integer(1))
        token_size: int = option(help="all-to-all bytes per rank and exchange, e.g. '4 MiB'", parse=Size())
        dense_grad_sizes: list[int] = option(
            help="dense-gradient all-reduces per layer over all ranks, e.g. '64 KiB,16 MiB'",
            parse=ListOf(Size(), example="['64 KiB', '16 MiB']"),
        )
        expert_grad_size: int = option(0, "expert-gradient all-reduce per layer (0: none)", Size())
        attn_us: int = option(50, "attention compute per layer, µs (backward: twice)", Integer(0))
        expert_us: int = option(100, "expert compute per layer, µs (backward: twice)", Integer(0))
        iterations: int = option(1, "training steps", Integer(1))

    def check(self, options: Any, key: Callable[[str], str]) -> Any:
        """The expert-parallel size divides the NPUs."""
        if options.npus % options.ep_size:
            raise ConfigError(f"{key('ep_size')} {options.ep_size} must divide {key('npus')} {options.npus}")
        return options

    def nodes(self, options: Any) -> int:
        """Per rank, layer and step: computes, all-to-alls, one all-reduce per size (9 + sizes); a few more per rank."""
        per_rank = (9 + len(options.dense_grad_sizes)) * options.layers * options.iterations + 16
        return per_rank * options.npus

    def generate(self, options: Any) -> list[Trace]:
        """The training steps (an expert-gradient size with no effect is warned about)."""
        o = options
        if o.expert_grad_size and o.ep_size == o.npus:
            warn(
                f"expert_grad_size {o.expert_grad_size} B has no effect: with ep_size {o.ep_size} = npus every expert "
                "is on one rank only, so no rank holds a replica to all-reduce its gradient with"
            )
        return moe_workload(
            o.npus,
            ep_size=o.ep_size,
            layers=o.layers,
            token_bytes=o.token_size,
            dense_grad_bytes=o.dense_grad_sizes,
            expert_grad_bytes=o.expert_grad_size,
            attn_micros=o.attn_us,
            expert_micros=o.expert_us,
            iterations=o.iterations,
        )

    def collectives(self, options: Any) -> list[str]:
        """All-to-alls, then all-reduces."""
        return ["all_to_all", "all_reduce"]

    def rewrites(self, options: Any) -> list[Rewrite]:
        """The expert-parallel size ×2 or ÷2 (dividing the NPUs).

        The same experts, tokens and compute per rank, exchanged among more or fewer ranks, with their
        gradients reduced among fewer or more copies.
        """
        o = options
        sizes = [s for s in (o.ep_size * 2, o.ep_size // 2) if s >= 1 and o.npus % s == 0 and s != o.ep_size]
        return [Rewrite((("ep_size", s),), "dp") for s in sizes]
