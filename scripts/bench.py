"""etsim benchmarks (scripts, not timed tests). Each case runs in a fresh process.

Usage: ``python scripts/bench.py [CASE ...] [--repeat N]``; with no case, runs all.
Prints one line per run (wall s, CPU s, peak RSS MB, and a case-specific rate) and the
median of the repetitions.

Cases:
  load-1m              read a 1,000,000-node trace (chain of COMP nodes with SEND/RECV every 10th node)
  load-1m-lean         the same with keep_raw=False (flat columns only)
  ring-ar-P-MODEL      full stack (workload -> system -> network): one 256 MiB ring all-reduce on P NPUs of a
                       bidirectional ring, 50 GB/s, 1 us, MODEL analytical or link (P = 256, 1024, 4096)
  heap-ring-P          the reference loop of performance.md: a bare heapq loop over the same ring all-reduce
                       with busy-until links, no simulator (the yardstick for the full-stack cases)
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NODES = 1_000_000


def make_trace(path: Path, nodes: int = NODES) -> None:
    """Write a *nodes*-node trace: each node depends on the previous; every 10th is a send."""
    from etsim.chakra.io import encode_varint
    from etsim.chakra.schema import et_def_pb2 as pb

    comp = pb.Node(name="comp", type=pb.COMP_NODE, duration_micros=3)
    comp.attr.add(name="is_cpu_op").bool_val = False
    send = pb.Node(name="send", type=pb.COMM_SEND_NODE)
    send.attr.add(name="is_cpu_op").bool_val = False
    send.attr.add(name="comm_dst").int32_val = 1
    send.attr.add(name="comm_size").int64_val = 65536
    send.attr.add(name="comm_tag").int32_val = 0
    with path.open("wb") as f:
        meta = pb.GlobalMetadata(version="1.0.0").SerializeToString()
        f.write(encode_varint(len(meta)) + meta)
        for i in range(nodes):
            node = send if i % 10 == 9 else comp
            node.id = i
            del node.data_deps[:]
            if i:
                node.data_deps.append(i - 1)
            payload = node.SerializeToString()
            f.write(encode_varint(len(payload)) + payload)


def heap_ring(p: int, size: float = 256 * 2**20, bw: float = 50.0, lat: float = 1000.0) -> tuple[float, int]:
    """Ring all-reduce on a bare heap: message (i, k) leaves NPU i when (i-1, k-1) arrived; links are
    busy-until values. Returns (finish time, messages)."""
    import heapq

    chunk = size / p
    t_ser = chunk / bw
    steps = 2 * (p - 1)
    link_free = [0.0] * p
    heap = [(0.0, i, 0) for i in range(p)]  # (ready time, npu, step)
    messages = 0
    finish = 0.0
    while heap:
        ready, i, k = heapq.heappop(heap)
        start = ready if ready > link_free[i] else link_free[i]
        link_free[i] = start + t_ser
        arrival = start + t_ser + lat
        messages += 1
        if k + 1 < steps:
            heapq.heappush(heap, (arrival, (i + 1) % p, k + 1))
        elif arrival > finish:
            finish = arrival
    return finish, messages


def run_case(case: str, workdir: Path) -> dict[str, float]:
    """Run one case in this process and return its measurements."""
    trace_path = workdir / "big.et"
    if case.startswith("ring-ar-"):
        from etsim.chakra import CollectiveType, Workload
        from etsim.network import ring
        from etsim.producers import collective_workload
        from etsim.simulation import simulate

        _, _, p_text, model = case.split("-")
        p = int(p_text)
        workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, 256 * 2**20, p))
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(workload, topology=ring(p, 50.0, 1000.0), model=model)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        closed = 2 * (p - 1) * (1000.0 + 256 * 2**20 / p / 50.0)
        assert abs(result.finish_ns - closed) <= 1e-9 * closed, (result.finish_ns, closed)
        msgs = result.network["messages"]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "messages": msgs, "msgs_per_cpu_s": msgs / cpu}
    if case.startswith("heap-ring-"):
        p = int(case.split("-")[2])
        t0, c0 = time.perf_counter(), time.process_time()
        _finish, msgs = heap_ring(p)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "messages": msgs, "msgs_per_cpu_s": msgs / cpu}
    if case in ("load-1m", "load-1m-lean"):
        from etsim.chakra import read_trace

        t0, c0 = time.perf_counter(), time.process_time()
        trace = read_trace(trace_path, keep_raw=case == "load-1m")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert trace.num_nodes == NODES
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "nodes_per_s": NODES / wall}
    raise SystemExit(f"unknown case {case!r}")


CASES = ("load-1m", "load-1m-lean", "heap-ring-256", "ring-ar-256-analytical", "ring-ar-256-link",
         "heap-ring-1024", "ring-ar-1024-analytical", "ring-ar-1024-link")  # fmt: skip


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--child":
        print(json.dumps(run_case(args[1], Path(args[2]))))
        return 0
    repeat = 3
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = int(args[i + 1])
        del args[i : i + 2]
    cases = args or list(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print(f"# {os.cpu_count()} cores, Python {sys.version.split()[0]}")
        if any(c.startswith("load-") for c in cases):
            t0 = time.perf_counter()
            make_trace(workdir / "big.et")
            size_mb = (workdir / "big.et").stat().st_size / 1e6
            print(f"# wrote {NODES} nodes ({size_mb:.1f} MB) in {time.perf_counter() - t0:.1f} s")
        for case in cases:
            runs = []
            for _ in range(repeat):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", case, str(workdir)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs.append(json.loads(out.stdout))
                print(case, " ".join(f"{k}={v:.3g}" for k, v in runs[-1].items()))
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"{case} MEDIAN of {repeat}:", " ".join(f"{k}={v:.3g}" for k, v in med.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
