"""Generators of runnable Chakra ET workloads (one :class:`~etsim.chakra.Trace` per rank).

Unlike Chakra's own generator, every communication node carries what a simulator needs:
SEND/RECV have ``comm_src``/``comm_dst``, ``comm_tag`` and ``comm_size``; collectives have
``comm_type`` and ``comm_size``; ``is_cpu_op`` is always written.
"""

from __future__ import annotations

from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import CollectiveType, Trace

__all__ = ["collective_workload", "data_parallel_workload", "ring_sendrecv_workload"]


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
