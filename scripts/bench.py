"""etsim benchmarks (scripts, not timed tests). Each case runs in a fresh process.

Usage: ``python scripts/bench.py [CASE ...] [--repeat N]``; with no case, runs all.
Prints one line per run (wall s, CPU s, peak RSS MB, and a case-specific rate) and the
median of the repetitions.

Cases:
  load-1m        read a 1,000,000-node trace (chain of COMP nodes with SEND/RECV every 10th node)
  load-1m-lean   the same with keep_raw=False (flat columns only)
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


def run_case(case: str, workdir: Path) -> dict[str, float]:
    """Run one case in this process and return its measurements."""
    trace_path = workdir / "big.et"
    if case in ("load-1m", "load-1m-lean"):
        from etsim.chakra import read_trace

        t0, c0 = time.perf_counter(), time.process_time()
        trace = read_trace(trace_path, keep_raw=case == "load-1m")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert trace.num_nodes == NODES
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "nodes_per_s": NODES / wall}
    raise SystemExit(f"unknown case {case!r}")


CASES = ("load-1m", "load-1m-lean")


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
        t0 = time.perf_counter()
        make_trace(workdir / "big.et")
        size_mb = (workdir / "big.et").stat().st_size / 1e6
        print(f"# wrote {NODES} nodes ({size_mb:.1f} MB) in {time.perf_counter() - t0:.1f} s; {os.cpu_count()} cores")
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
