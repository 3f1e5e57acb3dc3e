"""Generators of runnable Chakra ET workloads (one :class:`~etsim.chakra.Trace` per rank).

Unlike Chakra's own generator, every communication node carries what a simulator needs:
SEND/RECV have ``comm_src``/``comm_dst``, ``comm_tag`` and ``comm_size``; collectives have
``comm_type`` and ``comm_size``; ``is_cpu_op`` is always written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import CollectiveType, NodeType, Trace

__all__ = [
    "collective_workload",
    "data_parallel_workload",
    "moe_groups",
    "moe_workload",
    "ring_sendrecv_workload",
]


def _check_npus(npus: int) -> None:
    if npus < 1:
        raise ValueError(f"npus must be >= 1, got {npus}")


def collective_workload(
    comm_type: CollectiveType | int, size: int, npus: int, *, count: int = 1, pg_name: str | None = None
) -> list[Trace]:
    """*count* back-to-back collectives of *size* bytes on every one of *npus* ranks.

    Size semantics follow the Chakra trace convention: the buffer for all-reduce and all-to-all, the per-rank
    input for all-gather, the whole input for reduce-scatter.
    """
    _check_npus(npus)
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    traces = []
    for rank in range(npus):
        b = TraceBuilder()
        prev: list[int] = []
        for i in range(count):
            name = f"{CollectiveType(int(comm_type)).name}_{i}" if count > 1 else ""
            prev = [b.collective(comm_type, size, deps=prev, name=name, pg_name=pg_name)]
        traces.append(b.build(rank=rank))
    return traces


def ring_sendrecv_workload(size: int, npus: int, *, tag: int = 0) -> list[Trace]:
    """Every rank sends *size* bytes to the next rank on a ring and receives from the previous one."""
    _check_npus(npus)
    if npus < 2:
        raise ValueError("a send/receive workload needs at least 2 NPUs")
    traces = []
    for rank in range(npus):
        b = TraceBuilder()
        b.send(dst=(rank + 1) % npus, size=size, tag=tag)
        b.recv(src=(rank - 1) % npus, size=size, tag=tag)
        traces.append(b.build(rank=rank))
    return traces


def data_parallel_workload(
    npus: int,
    *,
    layers: int,
    grad_bytes: int,
    fwd_micros: int,
    bwd_micros: int,
    wg_micros: int | None = None,
    iterations: int = 1,
) -> list[Trace]:
    """One (or more) data-parallel training steps, as in Fig. 2(a) of the seed paper.

    Per iteration and rank: the forward pass runs layer 0 … L-1; the backward pass runs layer
    L-1 … 0, each layer computing its input gradient (``bwd_micros``, on the critical path) and
    its weight gradient (``wg_micros``, default ``bwd_micros``). Each layer's weight-gradient
    all-reduce of ``grad_bytes`` starts as soon as that weight gradient exists, so it overlaps
    the backward pass of the layers below. The next iteration's forward pass of a layer waits
    for that layer's all-reduce (the optimiser update needs the reduced gradient).
    """
    _check_npus(npus)
    if layers < 1 or iterations < 1:
        raise ValueError("layers and iterations must be >= 1")
    wg = bwd_micros if wg_micros is None else wg_micros
    traces = []
    for rank in range(npus):
        b = TraceBuilder()
        reduced: list[int | None] = [None] * layers
        prev: list[int] = []
        for it in range(iterations):
            for layer in range(layers):
                deps = list(prev)
                if reduced[layer] is not None:
                    deps.append(reduced[layer])  # type: ignore[arg-type]
                prev = [b.comp(f"it{it}_fwd_l{layer}", duration_micros=fwd_micros, deps=deps)]
            for layer in reversed(range(layers)):
                weight_grad = b.comp(f"it{it}_wg_l{layer}", duration_micros=wg, deps=prev)
                reduced[layer] = b.collective(
                    CollectiveType.ALL_REDUCE, grad_bytes, deps=[weight_grad], name=f"it{it}_allreduce_l{layer}"
                )
                if layer > 0:
                    prev = [b.comp(f"it{it}_ig_l{layer}", duration_micros=bwd_micros, deps=[weight_grad])]
        traces.append(b.build(rank=rank))
    return traces


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
    _check_npus(npus)
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
