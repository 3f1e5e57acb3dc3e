"""``dp``: data-parallel training steps whose gradient all-reduces overlap the backward pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import CollectiveType, Trace
from etsim.options import Integer, Optional, Size, option
from etsim.producers.workloads.base import WORKLOAD_GENERATORS, Npus, WorkloadGenerator, check_npus

__all__ = ["DataParallelGenerator", "data_parallel_workload"]


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
    L-1 … 0, each layer computing its input gradient (``bwd_micros``, on the critical path; not layer 0, whose
    input is the data, needing none) and its weight gradient (``wg_micros``, default ``bwd_micros``). Each layer's
    weight-gradient all-reduce of ``grad_bytes`` starts as soon as that weight gradient exists, so it overlaps
    the backward pass of the layers below. The next iteration's forward pass of a layer waits
    for that layer's all-reduce (the optimiser update needs the reduced gradient).
    """
    check_npus(npus)
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


@WORKLOAD_GENERATORS.register("dp")
class DataParallelGenerator(WorkloadGenerator):
    """Data-parallel training step(s): forward, backward, one gradient all-reduce per layer."""

    name = "dp"
    summary = "data-parallel training step(s) with overlapped gradient all-reduces"

    @dataclass(frozen=True, kw_only=True)
    class Options(WorkloadGenerator.Options):
        """The model and its compute times."""

        npus: int = option(help="ranks", parse=Npus())
        layers: int = option(help="layers", parse=Integer(1))
        grad_size: int = option(help="all-reduce bytes per layer", parse=Size())
        fwd_us: int = option(100, "forward compute per layer, µs", Integer(0))
        bwd_us: int = option(100, "input-gradient compute per layer but the first (its input needs none), µs",
                             Integer(0))  # fmt: skip
        wg_us: int | None = option(None, "weight-gradient compute per layer, µs (default bwd_us)", Optional(Integer(0)))

        iterations: int = option(1, "training steps", Integer(1))

        def __post_init__(self) -> None:
            if self.wg_us is None:  # the default follows bwd_us
                object.__setattr__(self, "wg_us", self.bwd_us)

    def nodes(self, options: Any) -> int:
        """Per rank, layer and step: forward, two backward computes and an all-reduce."""
        return 4 * options.layers * options.iterations * options.npus

    def generate(self, options: Any) -> list[Trace]:
        """The training steps."""
        o = options
        return data_parallel_workload(
            o.npus,
            layers=o.layers,
            grad_bytes=o.grad_size,
            fwd_micros=o.fwd_us,
            bwd_micros=o.bwd_us,
            wg_micros=o.wg_us,
            iterations=o.iterations,
        )

    def collectives(self, options: Any) -> list[str]:
        """All-reduces only."""
        return ["all_reduce"]
