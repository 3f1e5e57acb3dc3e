"""Draw docs/cluster.md's placement figure: two data-parallel jobs on a 4:1 leaf-spine, packed, spread, random.

Runs the shipped cluster files (``clusters/two_dp_jobs_*.yaml``, each job also alone) and draws, per placement, the
step of each job together and alone, and what each shared uplink carried. Needs matplotlib (``etsim[plot]``).

    python scripts/cluster_placements.py                 # prints the table
    python scripts/cluster_placements.py --write         # and writes docs/figures/cluster_placements.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from etsim.cluster import load_cluster, run_cluster

REPO = Path(__file__).resolve().parents[1]
PLACEMENTS = ("packed", "spread", "random")


def main() -> None:
    """Run the three placements; print their table; with --write, draw the figure."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write docs/figures/cluster_placements.png")
    args = parser.parse_args()
    results = {
        p: run_cluster(load_cluster(REPO / "clusters" / f"two_dp_jobs_{p}.yaml"), alone=True) for p in PLACEMENTS
    }
    for placement, result in results.items():
        job = result.jobs[0]
        print(
            f"{placement:<8} a on {list(job.gpus)}: together {job.duration_ns / 1e6:.4f} ms, alone "
            f"{(job.alone_ns or 0) / 1e6:.4f} ms, slowdown {job.slowdown:.3f}x, {len(result.shared_links)} shared links"
        )
    if not args.write:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.2
    for k, placement in enumerate(PLACEMENTS):
        for j, job in enumerate(results[placement].jobs):
            x = k + (j - 0.5) * 2 * width
            ax.bar(
                x - width / 2, (job.alone_ns or 0) / 1e6, width, color="#9ecae1", label="alone" if k + j == 0 else None
            )
            ax.bar(
                x + width / 2, job.duration_ns / 1e6, width, color="#3182bd", label="together" if k + j == 0 else None
            )
            ax.text(x + width / 2, job.duration_ns / 1e6, f"{job.name}\n{job.slowdown:.2f}x", ha="center", va="bottom",
                    fontsize=8)  # fmt: skip
    ax.set_xticks(range(len(PLACEMENTS)), PLACEMENTS)
    ax.set_ylabel("step (ms)")
    ax.set_ylim(0, max(j.duration_ns for r in results.values() for j in r.jobs) / 1e6 * 1.25)
    ax.set_title("Two 8-NPU data-parallel jobs on a 4:1 leaf-spine (flow model)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    out = REPO / "docs" / "figures" / "cluster_placements.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
