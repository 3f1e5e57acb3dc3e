"""Validate the ``flow`` model against packet-level ``link`` (store-and-forward of small packets, FIFO links).

For every case of the matrix (shipped topologies × native algorithms × all-reduce sizes) it simulates the
all-reduce under ``flow`` and under ``link`` with ``packet_size`` (4 KiB, or 512 B for messages under 1 MiB,
where a 4 KiB packet is no longer small against a chunk), and prints a Markdown table: both times, the error of
``flow``, store-and-forward ``link`` and ``analytical`` relative to packet-level, and the wall time of each.

    python scripts/validate_flow.py                 # the full matrix (the table in docs/network-models.md)
    python scripts/validate_flow.py --quick         # the reduced matrix of the default test suite
    python scripts/validate_flow.py --json out.json # also write every row

``tests/network/test_flow_validation.py`` runs the same cases (``--quick`` ones by default, all of them with
``-m slow``) and checks each against the tolerance this script reports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from etsim.chakra import CollectiveType, Workload  # noqa: E402
from etsim.network import load_network  # noqa: E402
from etsim.producers import collective_workload  # noqa: E402
from etsim.simulation import simulate  # noqa: E402
from etsim.system.config import SystemConfig  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
#: topology file (under topologies/, or an inline mapping) → the algorithms that run on it.
TOPOLOGIES: dict[str, tuple[str, ...]] = {
    "ring16": ("ring", "direct", "halving_doubling", "tree"),
    "switch16": ("ring", "direct", "halving_doubling", "tree"),
    "fully_connected16": ("ring", "direct", "halving_doubling", "tree"),
    "hypercube16": ("ring", "direct", "halving_doubling", "tree"),
    "torus4x4": ("ring", "direct", "halving_doubling", "tree", "hierarchical"),
    "mesh4x4": ("ring", "direct", "halving_doubling", "tree", "hierarchical"),
    "mesh4x4x4": ("ring", "halving_doubling", "hierarchical"),
    "ring4_switch4": ("ring", "direct", "halving_doubling", "tree", "hierarchical"),
    "mesh4x4_degraded": ("ring", "direct", "tree"),
}
SIZES = (64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB)
#: The reduced matrix of the default test suite: (topology, algorithm, size).
QUICK = (
    ("ring16", "ring", 1 * MiB),
    ("switch16", "direct", 16 * MiB),
    ("switch16", "tree", 16 * MiB),
    ("torus4x4", "hierarchical", 1 * MiB),
    ("hypercube16", "halving_doubling", 16 * MiB),
    ("mesh4x4", "ring", 16 * MiB),
    ("ring4_switch4", "hierarchical", 16 * MiB),
)
#: Where flow and packet-level differ by more than 5%, the largest |error| accepted (the measured one, rounded up
#: to the next point): the arbitration differs (max-min fair flows against FIFO queues of packets, which lets a
#: pipelined tree's or a contended direct exchange's first messages through first), or, at 64 KiB, 512-byte
#: packets still pay store-and-forward per hop. Every other case must be within 5%.
TOLERANCE: dict[tuple[str, str, int], float] = {
    ("ring16", "direct", 64 * KiB): 0.46,
    ("ring16", "direct", 1 * MiB): 0.08,
    ("ring16", "halving_doubling", 64 * KiB): 0.48,
    ("ring16", "halving_doubling", 1 * MiB): 0.08,
    ("ring16", "tree", 64 * KiB): 0.18,
    ("ring16", "tree", 1 * MiB): 0.17,
    ("ring16", "tree", 16 * MiB): 0.17,
    ("ring16", "tree", 64 * MiB): 0.17,
    ("switch16", "tree", 64 * KiB): 0.12,
    ("hypercube16", "ring", 1 * MiB): 0.08,
    ("hypercube16", "direct", 64 * KiB): 0.12,
    ("hypercube16", "direct", 16 * MiB): 0.06,
    ("hypercube16", "direct", 64 * MiB): 0.07,
    ("torus4x4", "direct", 64 * KiB): 0.20,
    ("torus4x4", "direct", 1 * MiB): 0.06,
    ("torus4x4", "halving_doubling", 64 * KiB): 0.16,
    ("torus4x4", "tree", 64 * KiB): 0.09,
    ("torus4x4", "tree", 1 * MiB): 0.10,
    ("torus4x4", "tree", 16 * MiB): 0.10,
    ("torus4x4", "tree", 64 * MiB): 0.10,
    ("mesh4x4", "ring", 1 * MiB): 0.09,
    ("mesh4x4", "direct", 64 * KiB): 0.14,
    ("mesh4x4", "direct", 1 * MiB): 0.14,
    ("mesh4x4", "direct", 16 * MiB): 0.14,
    ("mesh4x4", "direct", 64 * MiB): 0.14,
    ("mesh4x4", "halving_doubling", 64 * KiB): 0.16,
    ("mesh4x4x4", "ring", 1 * MiB): 0.13,
    ("mesh4x4x4", "halving_doubling", 64 * KiB): 0.12,
    ("ring4_switch4", "direct", 64 * KiB): 0.07,
    ("mesh4x4_degraded", "direct", 64 * KiB): 0.25,
    ("mesh4x4_degraded", "tree", 1 * MiB): 0.12,
    ("mesh4x4_degraded", "tree", 16 * MiB): 0.14,
    ("mesh4x4_degraded", "tree", 64 * MiB): 0.14,
}
#: Inline topologies of the matrix.
INLINE: dict[str, dict[str, Any]] = {
    "mesh4x4_degraded": {
        "kind": "mesh",
        "shape": [4, 4],
        "bandwidth": "50 GB/s",
        "latency": "500 ns",
        "failed": [{"link": [1, 2]}, {"link": [5, 9]}, {"link": [10, 11]}],
    },
}


HEADER = (
    "| topology | algorithm | size | packet-level | flow | error | store-and-forward | analytical | flow s "
    "| packets s |\n|---|---|---|---|---|---|---|---|---|---|"
)


def topology(name: str) -> Any:
    """The topology of a matrix entry."""
    source: Any = INLINE.get(name) or str(ROOT / "topologies" / f"{name}.yaml")
    return load_network(source).topology


def packet_size(size: int, npus: int) -> int:
    """A packet small against the all-reduce's chunks: 4 KiB, or 512 B below 1 MiB."""
    return 4 * KiB if size >= MiB else 512


def case(name: str, algorithm: str, size: int) -> dict[str, Any]:
    """One row: the all-reduce of *size* bytes under every model."""
    topo = topology(name)
    workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, size, topo.npus))
    system = SystemConfig(algorithms={"default": algorithm})
    row: dict[str, Any] = {"topology": name, "algorithm": algorithm, "size": size, "npus": topo.npus}
    packet = packet_size(size, topo.npus)
    runs = {
        "flow": ("flow", {}),
        "packet": ("link", {"packet_size": packet}),
        "link": ("link", {}),
        "analytical": ("analytical", {}),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, (model, options) in runs.items():
            t0 = time.perf_counter()
            result = simulate(workload, topology=topo, model=model, model_options=options, system=system)
            row[f"{key}_ns"] = result.finish_ns
            row[f"{key}_s"] = time.perf_counter() - t0
    row["packet_size"] = packet
    for key in ("flow", "link", "analytical"):
        row[f"{key}_err"] = row[f"{key}_ns"] / row["packet_ns"] - 1
    return row


def matrix(quick: bool) -> list[tuple[str, str, int]]:
    """Every (topology, algorithm, size) of the full or the reduced matrix."""
    if quick:
        return list(QUICK)
    return [(name, algorithm, size) for name, algorithms in TOPOLOGIES.items() for algorithm in algorithms
            for size in SIZES]  # fmt: skip


def tolerance(name: str, algorithm: str, size: int) -> float:
    """The largest |error| of flow against packet-level accepted for a case (5% unless :data:`TOLERANCE` says)."""
    return TOLERANCE.get((name, algorithm, size), 0.05)


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def main() -> int:
    """Run the matrix and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the reduced matrix of the default test suite")
    parser.add_argument("--json", help="write every row to this file")
    args = parser.parse_args()
    rows = []
    print(HEADER)
    for name, algorithm, size in matrix(args.quick):
        row = case(name, algorithm, size)
        rows.append(row)
        print(
            f"| {name} | {algorithm} | {_size(size)} | {row['packet_ns'] / 1e3:.2f} µs | {row['flow_ns'] / 1e3:.2f} µs "
            f"| {100 * row['flow_err']:+.1f}% | {100 * row['link_err']:+.1f}% | {100 * row['analytical_err']:+.1f}% "
            f"| {row['flow_s']:.2f} | {row['packet_s']:.2f} |",
            flush=True,
        )
    worst = max(rows, key=lambda r: abs(r["flow_err"]))
    within = sum(abs(r["flow_err"]) <= 0.05 for r in rows)
    print(
        f"\nflow within 5% of packet-level on {within} of {len(rows)} cases; worst {100 * worst['flow_err']:+.1f}% "
        f"({worst['topology']}, {worst['algorithm']}, {_size(worst['size'])})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
