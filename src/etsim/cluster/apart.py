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
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from etsim.cluster.merge import PlacedJob, merge_jobs
from etsim.network import NETWORK_MODELS, NetworkConfig
from etsim.network.routing import make_router
from etsim.progress import shown_on
from etsim.report.record import RunRecorder
from etsim.report.result import Result
from etsim.simulation import Reports, Simulation
from etsim.system.config import SystemConfig
from etsim.workers import BackgroundLost, fork_call

V = TypeVar("V")

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
    net: NetworkConfig,
    jobs: Sequence[PlacedJob],
    system: SystemConfig,
    reports: Reports,
    view: Callable[[int, Result, RunRecorder], V],
    progress: Any = None,
) -> tuple[list[tuple[Result, V]], int]:
    """Each job's own run on the cluster (the others idle) and what *view* makes of it; how many ran in a copy.

    With a CPU to spare, the jobs of the larger share of the work (by the nodes they will walk: every rank of a job
    with a straggler, fault or late start, else those of a few ranks) run in a forked copy of this process while
    this one runs the others; the figures are the same either way, and a copy that fails has its jobs run here.
    """

    def one(i: int, shown: Any) -> tuple[Result, V]:
        job = jobs[i]
        recorder = RunRecorder(internals=False)  # (the workload's nodes: the fast path and folding stay on)
        settings = restricted(system, job.gpus)
        workload = merge_jobs([job], net.topology.npus)
        run = Simulation(workload, topology=net, system=settings, reports=reports, observer=recorder,
                         progress=shown).run()  # fmt: skip
        return run, view(i, run, recorder)

    def some(indices: list[int]) -> list[tuple[Result, V]]:
        with shown_on(None):  # (the copy draws no progress over this process's)
            return [one(i, None) for i in indices]

    cost = [_walk_estimate(job, restricted(system, job.gpus)) for job in jobs]
    order = sorted(range(len(jobs)), key=lambda i: (-cost[i], i))
    away: list[int] = []
    for i in order:  # (the heaviest first, until the copy holds half the work)
        if sum(cost[k] for k in away) * 2 < sum(cost):
            away.append(i)
    here = [i for i in range(len(jobs)) if i not in away]
    background = fork_call(some, sorted(away)) if here and away else None
    out: dict[int, tuple[Result, V]] = {}
    try:
        for i in here if background is not None else range(len(jobs)):
            out[i] = one(i, progress)
    except BaseException:
        if background is not None:
            background.cancel()
        raise
    copied = 0
    if background is not None:
        try:
            out.update(zip(sorted(away), background.result(), strict=True))
            copied = len(away)
        except BackgroundLost:  # (run here: its error, if it has one, is raised as itself)
            out.update((i, one(i, progress)) for i in sorted(away))
    return [out[i] for i in range(len(jobs))], copied


def _walk_estimate(job: PlacedJob, system: SystemConfig) -> float:
    """The nodes a job's run will walk, roughly: all of them when something sets its ranks apart, else a tenth."""
    nodes = sum(len(trace.types) for trace in job.workload.traces)
    return float(nodes) if system.ranks_named(in_effect=True) or system.compute_jitter else nodes / 10


def combined(runs: Sequence[Result], jobs: Sequence[PlacedJob], copied: int = 0) -> Result:
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
        "apart": f"{len(runs)} jobs share no link: each ran as its own simulation"
        + (f" ({copied} of them in a second process, at the same time)" if copied else ""),
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
