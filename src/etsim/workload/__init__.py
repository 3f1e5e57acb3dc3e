"""The workload layer: the one dependency-graph walker, for workloads and algorithms alike.

Modules: :mod:`~etsim.workload.runs` (the walk and its two kinds), :mod:`~etsim.workload.messages`
(point-to-point matching), :mod:`~etsim.workload.collectives` (collective calls and their stream
queue) and :mod:`~etsim.workload.engine` (time, wiring, deadlock report).
"""

from etsim.workload.engine import Engine
from etsim.workload.observe import RunObserver
from etsim.workload.runs import AlgoRun, GraphRun, WorkloadRun

__all__ = ["AlgoRun", "Engine", "GraphRun", "RunObserver", "WorkloadRun"]
