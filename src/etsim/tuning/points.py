"""What the tuner measures: one candidate algorithm on one (collective, size, group) point, or a whole workload.

A :class:`Point` runs one collective of ``size`` bytes over ``group`` (global NPU ranks) on the tuning
topology, every other NPU idle, with the candidate as the only algorithm configured for that collective. A
:class:`WorkloadPoint` runs a whole workload under a system configuration (the tuned table or one
algorithm). Both are plain picklable values, so :func:`etsim.tuning.runner.run_points` can send them to
worker processes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import CollectiveType, NodeType, Trace, Workload, parse_collective
from etsim.system.config import SystemConfig

__all__ = ["Point", "WorkloadPoint", "bus_bandwidth_factor", "point_workload"]


@dataclass(frozen=True, order=True)
class Point:
    """One candidate on one (collective, size, group) point."""

    collective: str
    """``all_reduce`` …"""
    size: int
    """``comm_size`` in bytes (the workload convention: an all-gather's is one rank's input)."""
    group: tuple[int, ...]
    """Global NPU ranks of the group."""
    candidate: str
    """An ``--algo`` value."""
    dimension: int | None = None
    """The topology dimension the group spans (None: several, or an irregular topology)."""

    @property
    def group_size(self) -> int:
        """Ranks in the group."""
        return len(self.group)


@dataclass(frozen=True)
class WorkloadPoint:
    """A whole workload under one system configuration."""

    workload: str
    """The workload as ``etsim run`` takes it."""
    label: str
    """What the configuration is (``tuned table``, ``ring`` …)."""
    system: SystemConfig = field(default_factory=SystemConfig)


def bus_bandwidth_factor(collective: str, group_size: int) -> float:
    """nccl-tests' bus-bandwidth factor (``reference/cost-models.md`` §7): 2(n−1)/n for all-reduce, etc."""
    n = group_size
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "reduce_scatter_block", "all_to_all"):
        return (n - 1) / n
    return 1.0


def point_workload(collective: str, size: int, group: Sequence[int], npus: int) -> Workload:
    """One collective of *size* bytes issued by every member of *group*; the other of *npus* ranks idle.

    A group smaller than *npus* is named ``"1"`` by a PyTorch-style ``process_group:init`` METADATA node.
    """
    ctype: CollectiveType = parse_collective(collective)
    whole = list(group) == list(range(npus))
    pg = None if whole else "1"
    meta = json.dumps([{"pg_name": "1", "ranks": list(group)}])
    traces: list[Trace] = []
    members = set(group)
    for rank in range(npus):
        b = TraceBuilder()
        deps: list[int] = []
        if not whole:
            deps = [b.node(NodeType.METADATA_NODE, "process_group:init")]
            b.nodes[-1].inputs.values = str([meta])
        if rank in members:
            b.collective(ctype, size, deps=deps, pg_name=pg)
        traces.append(b.build(rank=rank))
    return Workload(traces)
