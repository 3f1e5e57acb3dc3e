"""Jobs that can share no link run apart: each job its own simulation, folded where it is symmetric.

Jobs meet only on links (they never share ranks): when no link lies on a route between two GPUs of one job and
also on a route between two GPUs of another (routes are fixed by (source, destination) while links never change
during the run), no model can make one job's traffic touch another's. Each job then runs alone on the cluster
— the others' GPUs idle — and gives to the bit the figures it has in the shared run (the flow model re-shares
rates per connected component of the links in use, the other models per link or per message): its own run may
be folded (``workload/fold.py``: a job on an aligned block of GPUs, with no straggler, fault or late start),
where the shared run must simulate every rank to charge each message to its job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from etsim.cluster.merge import PlacedJob, merge_jobs
from etsim.network import NETWORK_MODELS, NetworkConfig
from etsim.network.routing import make_router
from etsim.report.record import RunRecorder
from etsim.report.result import Result
from etsim.simulation import Reports, Simulation
from etsim.system.config import SystemConfig

__all__ = ["combined", "run_apart", "share_no_link"]

#: Past this many (source, destination) pairs over all jobs, the routes are not enumerated: the jobs run together.
MAX_PAIRS = 4_000_000


def share_no_link(net: NetworkConfig, jobs: Sequence[PlacedJob]) -> bool:
    """Whether no link lies on routes of two jobs (every route between two GPUs of a job counted)."""
    if net.changes or sum(len(job.gpus) ** 2 for job in jobs) > MAX_PAIRS:
        return False
    router = make_router(NETWORK_MODELS.get(net.model).checked_options(net.options).router, net.topology)
    owner: dict[int, int] = {}
    for i, job in enumerate(jobs):
        for src in job.gpus:
            for dst in job.gpus:
                if src == dst:
                    continue
                for link in router.route(src, dst):
                    if owner.setdefault(link, i) != i:
                        return False
    return True


def restricted(system: SystemConfig, gpus: Sequence[int]) -> SystemConfig:
    """*system* with its per-rank settings kept for *gpus* only (the other GPUs are idle in a job's own run)."""
    mine = set(gpus)
    return system.with_overrides(
        compute_slowdown={g: f for g, f in system.compute_slowdown.items() if g in mine},
        compute_delay={g: d for g, d in system.compute_delay.items() if g in mine},
        slowdown_windows=tuple(w for w in system.slowdown_windows if w[0] in mine),
        rank_start={g: t for g, t in system.rank_start.items() if g in mine},
        rank_fail={g: t for g, t in system.rank_fail.items() if g in mine},
    )


def run_apart(
    net: NetworkConfig, jobs: Sequence[PlacedJob], system: SystemConfig, reports: Reports, progress: Any = None
) -> list[tuple[Result, RunRecorder]]:
    """Each job's own run on the cluster (the others idle), with the recorder its step report reads."""
    out = []
    for job in jobs:
        recorder = RunRecorder(internals=False)  # (the workload's nodes: the fast path and folding stay on)
        run = Simulation(
            merge_jobs([job], net.topology.npus),
            topology=net,
            system=restricted(system, job.gpus),
            reports=reports,
            observer=recorder,
            progress=progress,
        ).run()
        out.append((run, recorder))
    return out


def combined(runs: Sequence[Result], jobs: Sequence[PlacedJob]) -> Result:
    """The whole cluster's result from the jobs' own runs: each GPU from its job's run, links and counts summed."""
    owner = {gpu: i for i, job in enumerate(jobs) for gpu in job.gpus}
    first = runs[0]
    ranks = [runs[owner.get(g, 0)].ranks[g] for g in range(len(first.ranks))]
    collectives = [c for i, run in enumerate(runs) for c in run.collectives if owner.get(c.rank) == i]
    links = sorted((entry for run in runs for entry in run.links), key=lambda entry: entry["link"])
    groups = sorted({str(g["group"]): g for run in runs for g in run.groups}.values(), key=lambda g: str(g["group"]))
    warnings = list(dict.fromkeys(w for run in runs for w in run.warnings))
    network = dict(first.network)
    network["messages"] = sum(run.network.get("messages", 0) for run in runs)
    network["bytes"] = sum(run.network.get("bytes", 0) for run in runs)
    sim: dict[str, Any] = {
        "events": sum(run.sim.get("events", 0) for run in runs),
        "wall_s": sum(run.sim.get("wall_s", 0.0) for run in runs),
        "bulk_parts": sum(run.sim.get("bulk_parts", 0) for run in runs),
        "reruns": sum(run.sim.get("reruns", 0) for run in runs),
        "apart": f"{len(runs)} jobs share no link: each ran as its own simulation",
    }
    failed = {k: v for run in runs for k, v in run.sim.get("failed", {}).items()}
    if failed:
        sim["failed"] = failed
    return dataclasses.replace(
        first,
        finish_ns=max(run.finish_ns for run in runs),
        ranks=ranks,
        collectives=collectives,
        links=links,
        groups=groups,
        warnings=warnings,
        network=network,
        sim=sim,
        critical_path=None,
        training=None,
    )
