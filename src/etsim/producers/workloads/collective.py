"""``collective``: one or more collectives, back to back, on every rank (a microbenchmark)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import CollectiveType, Trace
from etsim.options import Integer, Optional, Size, option
from etsim.producers.workloads.base import (
    WORKLOAD_GENERATORS,
    CollectiveName,
    GroupName,
    Npus,
    WorkloadGenerator,
    check_npus,
    define_groups,
    every_rank_group,
)

__all__ = ["CollectiveGenerator", "collective_workload"]


def collective_workload(
    comm_type: CollectiveType | int, size: int, npus: int, *, count: int = 1, pg_name: str | None = None
) -> list[Trace]:
    """*count* back-to-back collectives of *size* bytes on every one of *npus* ranks.

    Size semantics follow the Chakra trace convention: the buffer for all-reduce and all-to-all, the per-rank
    input for all-gather, the whole input for reduce-scatter.
    """
    check_npus(npus)
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


@WORKLOAD_GENERATORS.register("collective")
class CollectiveGenerator(WorkloadGenerator):
    """*count* collectives of one type and size, back to back, on every rank."""

    name = "collective"
    summary = "one or more collectives on every rank"

    @dataclass(frozen=True, kw_only=True)
    class Options(WorkloadGenerator.Options):
        """The collective and how many."""

        type: str = option(help="collective type", parse=CollectiveName())
        size: int = option(help="bytes, e.g. '1 MiB' or 1048576 (Chakra's comm_size)", parse=Size())
        npus: int = option(help="ranks", parse=Npus())
        count: int = option(1, "back-to-back collectives", Integer(1))
        pg_name: str | None = option(None, "communicator group id for pg_name", Optional(GroupName()))

    def nodes(self, options: Any) -> int:
        """One node per collective per rank."""
        return options.count * options.npus

    def generate(self, options: Any) -> list[Trace]:
        """The collectives; a *pg_name* is defined in every rank's metadata as the group of every rank."""
        o = options
        traces = collective_workload(CollectiveName.type_of(o.type), o.size, o.npus, count=o.count, pg_name=o.pg_name)
        return define_groups(traces, self.comm_groups(o))

    def comm_groups(self, options: Any) -> dict[str, list[int]] | None:
        """The one group, every rank; None for the default group."""
        return every_rank_group(options.pg_name, options.npus)

    def collectives(self, options: Any) -> list[str]:
        """The one type."""
        return [options.type]
