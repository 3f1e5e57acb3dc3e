"""Benchmark TACOS-style synthesis: wall and CPU time per topology, collective time vs lower bound.

Usage: python scripts/bench_synthesis.py [--repeat 3] [--cases mesh16x16,mesh32x32,mesh64x64,torus8x8x8,...]
       [--collective all_gather] [--chunks-per-npu 1]

Reference (reference/synthesis.md §1.7, TACOS v1.3.0, 2-D mesh, 1 chunk per NPU, 1 GiB, CPU seconds on a
shared 2-core machine): 256 NPUs 0.81 s, 1024 NPUs 65 s (≈ 1.06e-8 · N^3.26 s).
"""

from __future__ import annotations

import argparse
import statistics
import time

from etsim.network import hypercube, mesh, ring, torus
from etsim.producers.tacos import synthesize

CASES = {
    "mesh16x16": lambda: mesh([16, 16], "50 GB/s", "500 ns"),
    "mesh32x32": lambda: mesh([32, 32], "50 GB/s", "500 ns"),
    "mesh64x64": lambda: mesh([64, 64], "50 GB/s", "500 ns"),
    "torus8x8x8": lambda: torus([8, 8, 8], "50 GB/s", "500 ns"),
    "hypercube1024": lambda: hypercube(1024, "50 GB/s", "500 ns"),
    "ring256": lambda: ring(256, "50 GB/s", "500 ns"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the median is reported")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--collective", default="all_gather")
    ap.add_argument("--chunks-per-npu", type=int, default=1)
    ap.add_argument("--size", type=float, default=float(1 << 30), help="bytes (default 1 GiB)")
    args = ap.parse_args()
    print(
        f"{'case':<12} {'NPUs':>5} {'transfers':>10} {'wall s':>8} {'cpu s':>8} {'min cpu':>8}  "
        f"{'time/bound':>10}  runs  (time/bound: the worst seed)"
    )
    for name in args.cases.split(","):
        topo = CASES[name]()
        walls, cpus, ratios = [], [], []
        syn = None
        for seed in range(args.repeat):
            c0 = time.process_time()
            syn = synthesize(topo, args.collective, size=args.size, chunks_per_npu=args.chunks_per_npu, seed=seed)
            cpus.append(time.process_time() - c0)
            walls.append(syn.wall_s)
            ratios.append(syn.time_ns / syn.bound.value)
        assert syn is not None
        ratio = max(ratios)
        print(
            f"{name:<12} {topo.npus:>5} {syn.schedule.num_transfers:>10} {statistics.median(walls):>8.2f} "
            f"{statistics.median(cpus):>8.2f} {min(cpus):>8.2f}  {ratio:>10.4f}  {args.repeat}  "
            f"(time {syn.time_ns / 1e3:.1f} us, bound {syn.bound.value / 1e3:.1f} us)",
            flush=True,
        )


if __name__ == "__main__":
    main()
