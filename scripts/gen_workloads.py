"""Regenerate the shipped workloads in ``workloads/`` (deterministic: same bytes every time).

Usage: ``python scripts/gen_workloads.py [OUTDIR]`` (default: the repository's workloads/).
"""

from __future__ import annotations

import sys
from pathlib import Path

from etsim.chakra import CollectiveType, write_workload
from etsim.producers import collective_workload, data_parallel_workload, moe_workload, ring_sendrecv_workload

MiB = 1 << 20

#: name -> (function, arguments); the README in workloads/ describes each.
WORKLOADS = {
    "allreduce_8npus_1MiB": lambda: collective_workload(CollectiveType.ALL_REDUCE, MiB, 8),
    "allgather_8npus_1MiB": lambda: collective_workload(CollectiveType.ALL_GATHER, MiB, 8),
    "reducescatter_8npus_1MiB": lambda: collective_workload(CollectiveType.REDUCE_SCATTER, MiB, 8),
    "alltoall_8npus_1MiB": lambda: collective_workload(CollectiveType.ALL_TO_ALL, MiB, 8),
    "allreduce_64npus_64MiB": lambda: collective_workload(CollectiveType.ALL_REDUCE, 64 * MiB, 64),
    "sendrecv_ring_8npus_1MiB": lambda: ring_sendrecv_workload(MiB, 8),
    "dp_8npus_4layers": lambda: data_parallel_workload(
        8, layers=4, grad_bytes=16 * MiB, fwd_micros=200, bwd_micros=200, wg_micros=150, iterations=2
    ),
    "moe_16npus_2layers": lambda: moe_workload(
        16, ep_size=4, layers=2, token_bytes=2 * MiB, dense_grad_bytes=[32 * 1024, 16 * MiB], expert_grad_bytes=4 * MiB
    ),
}


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "workloads"
    for name, make in WORKLOADS.items():
        paths = write_workload(make(), out / name)
        print(f"{name}: {len(paths)} ranks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
