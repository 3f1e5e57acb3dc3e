"""Algorithm and bus bandwidth of collectives, as nccl-tests defines them.

``algbw = S / t`` with ``t`` the collective's duration on a rank and ``S`` the size nccl-tests counts:
the buffer of an all-reduce, broadcast or reduce; the whole input of a reduce-scatter and the whole
output of an all-gather (etsim's all-gather ``comm_size`` is the per-rank input, so ``S`` is ``n``
times it); the buffer of an all-to-all. ``busbw = algbw × factor``, the factor making it comparable
with a link's peak bandwidth:

==================  ==============
collective          factor
==================  ==============
all_reduce          2(n−1)/n
reduce_scatter      (n−1)/n
all_gather          (n−1)/n
all_to_all          (n−1)/n
broadcast, reduce   1
==================  ==============

Units: bytes per ns, which is GB/s with GB = 10^9 bytes (nccl-tests' unit). Where a figure would be
meaningless it is None, never a number: a group of one rank (busbw would be 0 and algbw measures no
transfer), a collective that took no time, and collectives nccl-tests does not define (gather,
scatter, barrier).
"""

from __future__ import annotations

from etsim.chakra.graph import collective_buffer_bytes

__all__ = ["bandwidths", "bus_factor", "nccl_bytes"]

_FACTORS = {
    "ALL_REDUCE": lambda n: 2 * (n - 1) / n,
    "REDUCE_SCATTER": lambda n: (n - 1) / n,
    "REDUCE_SCATTER_BLOCK": lambda n: (n - 1) / n,
    "ALL_GATHER": lambda n: (n - 1) / n,
    "ALL_TO_ALL": lambda n: (n - 1) / n,
    "BROADCAST": lambda n: 1.0,
    "REDUCE": lambda n: 1.0,
}


def bus_factor(collective: str, n: int) -> float | None:
    """nccl-tests' bus-bandwidth factor of *collective* (``ALL_REDUCE`` …) over *n* ranks, or None."""
    factor = _FACTORS.get(collective.upper())
    return factor(n) if factor is not None and n >= 2 else None


def nccl_bytes(collective: str, comm_size: float, n: int) -> float:
    """The size ``S`` nccl-tests divides by the time, for a workload node of *comm_size* bytes."""
    return collective_buffer_bytes(collective, comm_size, n)


def bandwidths(collective: str, comm_size: float, n: int, duration_ns: float) -> tuple[float | None, float | None]:
    """``(algbw, busbw)`` in GB/s (bytes per ns) of one rank's collective, or None where undefined."""
    factor = bus_factor(collective, n)
    if factor is None or not duration_ns > 0:
        return None, None
    algbw = nccl_bytes(collective, comm_size, n) / duration_ns
    return algbw, algbw * factor
