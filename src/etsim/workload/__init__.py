"""The workload layer: the one dependency-graph walker, for workloads and algorithms alike."""

from etsim.workload.walker import Engine, GraphRun

__all__ = ["Engine", "GraphRun"]
