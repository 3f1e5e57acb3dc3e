"""Producers of Chakra ET files: workload generators (and, later, algorithm converters)."""

from etsim.producers.workloads import collective_workload, data_parallel_workload, moe_workload, ring_sendrecv_workload

__all__ = ["collective_workload", "data_parallel_workload", "moe_workload", "ring_sendrecv_workload"]
