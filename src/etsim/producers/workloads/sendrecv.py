"""``sendrecv``: every rank sends to the next rank on a ring (point-to-point, no collective)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import Trace
from etsim.options import Size, option
from etsim.producers.workloads.base import WORKLOAD_GENERATORS, Npus, WorkloadGenerator, check_npus

__all__ = ["SendRecvGenerator", "ring_sendrecv_workload"]


def ring_sendrecv_workload(size: int, npus: int, *, tag: int = 0) -> list[Trace]:
    """Every rank sends *size* bytes to the next rank on a ring and receives from the previous one."""
    check_npus(npus)
    if npus < 2:
        raise ValueError("a send/receive workload needs at least 2 NPUs")
    traces = []
    for rank in range(npus):
        b = TraceBuilder()
        b.send(dst=(rank + 1) % npus, size=size, tag=tag)
        b.recv(src=(rank - 1) % npus, size=size, tag=tag)
        traces.append(b.build(rank=rank))
    return traces


@WORKLOAD_GENERATORS.register("sendrecv")
class SendRecvGenerator(WorkloadGenerator):
    """Each rank sends *size* bytes to the next rank on a ring and receives from the previous one."""

    name = "sendrecv"
    summary = "each rank sends to the next rank on a ring"

    @dataclass(frozen=True, kw_only=True)
    class Options(WorkloadGenerator.Options):
        """The message and the ring."""

        size: int = option(help="bytes per message, e.g. '1 MiB'", parse=Size())
        npus: int = option(help="ranks (at least 2)", parse=Npus(2))

    def generate(self, options: Any) -> list[Trace]:
        """The ring of messages."""
        return ring_sendrecv_workload(options.size, options.npus)

    def collectives(self, options: Any) -> list[str]:
        """None."""
        return []
