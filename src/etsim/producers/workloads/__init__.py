"""Generators of runnable Chakra ET workloads (one :class:`~etsim.chakra.Trace` per rank).

Unlike Chakra's own generator, every communication node carries what a simulator needs:
SEND/RECV have ``comm_src``/``comm_dst``, ``comm_tag`` and ``comm_size``; collectives have
``comm_type`` and ``comm_size``; ``is_cpu_op`` is always written.

Each generator is one module here, with its function (``collective_workload`` …) and its
:class:`~etsim.producers.workloads.base.WorkloadGenerator` (parameters declared once, for ``etsim workload gen``,
experiments and Python); :data:`~etsim.producers.workloads.base.WORKLOAD_GENERATORS` finds them.
"""

from etsim.producers.workloads.base import WORKLOAD_GENERATORS, WorkloadGenerator, generate, normalize
from etsim.producers.workloads.collective import collective_workload
from etsim.producers.workloads.dp import data_parallel_workload
from etsim.producers.workloads.moe import moe_groups, moe_workload
from etsim.producers.workloads.sendrecv import ring_sendrecv_workload

__all__ = [
    "WORKLOAD_GENERATORS",
    "WorkloadGenerator",
    "collective_workload",
    "data_parallel_workload",
    "generate",
    "moe_groups",
    "moe_workload",
    "normalize",
    "ring_sendrecv_workload",
]
