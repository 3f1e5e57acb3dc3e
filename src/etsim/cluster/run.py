"""Run a cluster: every job in one simulation on the shared network, then each job's view of it.

The jobs become one workload (:mod:`etsim.cluster.merge`) run by one :class:`~etsim.simulation.Simulation`, so
they share links under every network model exactly as the ranks of one job do. The system settings are the
cluster's and the jobs' together (a key two jobs set differently is refused: one system serves the run); a
job's ``start`` is its ranks' ``rank_start``, stragglers are ``compute_slowdown`` or ``slowdown_windows`` of their
GPUs, faults at time 0 are degraded or failed links of the topology, and later ones the network's
:class:`~etsim.network.faults.LinkChange` (under ``flow``).

Each job's :class:`JobResult` is the run seen from its ranks: its ranks and collectives renumbered to job ranks,
its communicator groups under their own names, its finish and duration (from its start), and with ``alone`` the
same job simulated by itself on the same placement (same stragglers and faults) and the ratio of the two. Every
message is charged to the job that sent it along its route, which gives the links jobs shared and what each
carried there.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from etsim.chakra.graph import Workload
from etsim.cluster.apart import combined, restricted, run_apart, share_no_link
from etsim.cluster.links import TrafficByPair, link_tables, traffic
from etsim.cluster.merge import PlacedJob, is_whole_cluster, job_group, job_pg_name, merge_jobs
from etsim.cluster.placement import node_of, place
from etsim.cluster.reliability import failure_rate, play
from etsim.cluster.settings import cluster_network, cluster_system, failures
from etsim.cluster.spec import ClusterSpec, JobEntry
from etsim.errors import ConfigError, warn
from etsim.network import NetworkConfig
from etsim.report.record import RunRecorder
from etsim.report.result import Result
from etsim.report.training import training_info, training_lines, training_report
from etsim.simulation import DEFAULT_REPORTS, NO_REPORTS, Simulation
from etsim.simulation.inputs import point_workload
from etsim.system.config import SystemConfig
from etsim.system.groups import CommGroups, groups_from_metadata, load_comm_groups

__all__ = ["ClusterResult", "JobResult", "run_cluster"]


@dataclass
class JobResult:
    """One job of a cluster run, seen from its own ranks."""

    name: str
    gpus: tuple[int, ...]
    start_ns: float
    finish_ns: float
    """When the job's last rank finished (cluster time)."""
    result: Result
    """The job's ranks, collectives and groups under its own rank numbers and group names."""
    alone_ns: float | None = None
    """The job's duration when it runs alone on the same placement (with ``alone``)."""
    goodput: dict[str, Any] | None = None
    """With the cluster file's ``reliability:``, the period played out (:func:`etsim.cluster.reliability.play`)."""
    lost: dict[str, Any] | None = None
    """A job whose GPU failed: ``{gpu, at_ns, step_ns, gpu_ns, collectives_done}``: its step is lost, ``step_ns`` of
    it on each of its GPUs (``gpu_ns`` in all), when its rank 0 had finished ``collectives_done`` collectives."""

    @property
    def duration_ns(self) -> float:
        """From its start to its finish."""
        return self.finish_ns - self.start_ns

    @property
    def slowdown(self) -> float | None:
        """Its duration over its duration alone (with ``alone``; None for a job that failed)."""
        if self.alone_ns is None or self.alone_ns <= 0 or self.lost is not None:
            return None
        return self.duration_ns / self.alone_ns

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: name, gpus, times, alone time and slowdown, and the job's result."""
        return {
            "name": self.name,
            "gpus": list(self.gpus),
            "start_ns": self.start_ns,
            "finish_ns": self.finish_ns,
            "duration_ns": self.duration_ns,
            "alone_ns": self.alone_ns,
            "slowdown": self.slowdown,
            **({"goodput": self.goodput} if self.goodput is not None else {}),
            **({"lost": self.lost} if self.lost is not None else {}),
            "result": self.result.to_dict(),
        }


@dataclass
class ClusterResult:
    """What ``etsim cluster run`` reports: the jobs, the links they shared, and the whole run."""

    name: str
    jobs: list[JobResult]
    shared_links: list[dict[str, Any]]
    """Links that carried traffic of more than one job: per job, its bytes and its share of the link's time."""
    result: Result
    """The whole run (every GPU, cluster rank numbers)."""
    warnings: list[str] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    """Each fault (``link``, ``at_ns``, ``bandwidth`` left) and, with ``fault_costs``, ``cost_ns``: per job, how
    much longer it took than in the same run without that fault."""

    def job(self, name: str) -> JobResult:
        """The job named *name*."""
        return next(j for j in self.jobs if j.name == name)

    def table(self) -> str:
        """The jobs (finish, duration, alone, slowdown) and the links they shared, for a terminal."""
        from etsim.units import format_size, format_time

        stopped = [job.name for job in self.jobs if job.lost is not None]
        ended = f"every job ended at {format_time(self._ended())}; stopped by a failed GPU: {', '.join(stopped)}"
        lines = [f"cluster {self.name}: " + (ended if stopped else f"every job done at {format_time(self._ended())}")]
        lines += self._job_rows()
        if self.shared_links:
            lines.append(f"links carrying more than one job's traffic: {len(self.shared_links)}")
            for entry in self.shared_links[:20]:
                users = ", ".join(
                    f"{name} {format_size(use['bytes']) if use['bytes'] is not None else '?'}"
                    + (f" ({use['utilisation']:.0%} of its time)" if use["utilisation"] is not None else "")
                    for name, use in entry["jobs"].items()
                )
                parts = entry["jobs"].values()
                unknown = any(use["bytes"] is None or use["busy_ns"] is None for use in parts)
                note = " (each job's part not known: the run's link statistics have the whole)" if unknown else ""
                lines.append(f"  {entry['src']} -> {entry['dst']} ({entry['bandwidth_GBps']:g} GB/s): {users}{note}")
            if len(self.shared_links) > 20:
                lines.append(f"  ... {len(self.shared_links) - 20} more (--json has them all)")
        else:
            lines.append("no link carried more than one job's traffic")
        for job in self.jobs:
            g = job.goodput
            if g is not None:
                young = g["young_checkpoint_every_s"]
                lines.append(
                    f"job {job.name} over the period: goodput {g['goodput']:.2%} "
                    f"(expected {g['expected_goodput']:.2%}), "
                    f"{g['failures']} failures, {g['steps']:,} steps kept, {g['lost_h']:.2f} h lost, "
                    f"{g['restarting_h']:.2f} h restarting, {g['checkpointing_h']:.2f} h checkpointing"
                    + (f"; Young's checkpoint interval {format_time(young * 1e9)}" if young is not None else "")
                )
        for job in self.jobs:
            if job.result.training is not None:
                lines.append(f"job {job.name}:")
                lines += [f"  {line}" for line in training_lines(job.result.training)]
        for fault in self.faults:
            if "gpu" in fault:
                what = f"GPU {fault['gpu']} fails at {format_time(fault['at_ns'])}"
            elif "nic" in fault:
                how = "fails" if fault["bandwidth"] == 0 else f"runs at {fault['bandwidth']:.0%}"
                what = f"GPU {fault['nic']}'s NIC {how} from {format_time(fault['at_ns'])}"
            else:
                u, v = fault["link"]
                how = "fails" if fault["bandwidth"] == 0 else f"runs at {fault['bandwidth']:.0%}"
                what = f"link {u} - {v} {how} from {format_time(fault['at_ns'])}"
            cost = fault.get("cost_ns")
            spent = {n: "its step (failed)" if c is None else format_time(c) for n, c in (cost or {}).items()}
            costs = "" if cost is None else ": costs " + ", ".join(f"{n} {c}" for n, c in spent.items())
            lines.append(f"fault: {what}{costs}")
            if any(c is not None and c < 0 for c in (cost or {}).values()):
                if self._raises(fault):  # (a restore, partial or whole: without it the link stays down or slower)
                    lines.append("  (a negative cost: it restores the link, which the jobs would miss without it)")
                else:  # (max-min sharing is not monotone: a fault that slows one job frees the links it shared)
                    lines.append("  (a negative cost: that job finished sooner with the fault, which held back a job")
                    lines.append("  it shares links with and left it more of them)")
        for job in self.jobs:
            if job.lost is not None:
                lost = job.lost
                lines.append(
                    f"job {job.name} stopped at {format_time(lost['at_ns'])}: GPU {lost['gpu']} failed; its step is "
                    f"lost ({format_time(lost['step_ns'])} on each of its {len(job.gpus)} GPUs, "
                    f"{lost['collectives_done']} collectives done)"
                )
        return "\n".join(lines)

    def _job_rows(self) -> list[str]:
        """The table's jobs: start, finish, duration, alone and slowdown (and why one below 1 is right)."""
        from etsim.units import format_time

        heads = ("start", "finish", "duration", "alone")
        lines = [f"{'job':<16} {'GPUs':>5} " + " ".join(f"{h:>11}" for h in heads) + f" {'slowdown':>9}"]
        for job in self.jobs:
            alone = format_time(job.alone_ns) if job.alone_ns is not None else "-"
            slowdown = f"{job.slowdown:.3f}x" if job.slowdown is not None else "-"
            lines.append(
                f"{job.name:<16} {len(job.gpus):>5} {format_time(job.start_ns):>11} {format_time(job.finish_ns):>11} "
                f"{format_time(job.duration_ns):>11} {alone:>11} {slowdown:>9}"
            )
        faster = [job.name for job in self.jobs if job.slowdown is not None and job.slowdown < 1]
        if faster:  # (max-min sharing is not monotone: the run is right, and a reader would take it for a bug)
            names = ", ".join(faster)
            lines.append(f"  ({names}: faster beside the others than alone. Max-min sharing is not monotone: a")
            lines.append("  competitor that slows a job's messages off its critical path leaves more of their other")
            lines.append("  links to the messages on it)")
        return lines

    def _ended(self) -> float:
        """When the last job ended (a job stopped before it started ends at its start, after the run may have)."""
        return max([self.result.finish_ns, *(job.finish_ns for job in self.jobs)])

    def _raises(self, fault: dict[str, Any]) -> bool:
        """Whether a link or NIC fault raises its link above the share the faults before it had left it."""

        def where(f: dict[str, Any]) -> Any:
            return None if "gpu" in f else ("nic", f["nic"]) if "nic" in f else ("link", tuple(f["link"]))

        mine = (fault["at_ns"], self.faults.index(fault))
        earlier = [((f["at_ns"], k), f["bandwidth"]) for k, f in enumerate(self.faults)
                   if where(f) == where(fault) and (f["at_ns"], k) < mine]  # fmt: skip
        return where(fault) is not None and fault["bandwidth"] > (max(earlier)[1] if earlier else 1.0)

    def to_json(self, *, indent: int | None = 1) -> str:
        """The JSON document of :meth:`to_dict` (deterministic key order)."""
        import json

        return json.dumps(self.to_dict(), indent=indent)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{cluster, finish_ns, jobs: [...], shared_links: [...], network, sim, warnings}``."""
        return {
            "cluster": self.name,
            "finish_ns": self.result.finish_ns,
            "jobs": [j.to_dict() for j in self.jobs],
            "shared_links": self.shared_links,
            "faults": self.faults,
            "network": self.result.network,
            "sim": self.result.sim,
            "warnings": self.warnings,
        }


def _job_groups(spec: ClusterSpec, i: int, workload: Workload) -> CommGroups:
    """Job *i*'s communicator groups in its own ranks: its (or the cluster's) comm-group file, its metadata."""
    groups = CommGroups(workload.num_ranks)
    path = spec.job_systems[i].get("comm_groups") or spec.system.get("comm_groups")
    if path:
        for name, members in load_comm_groups(path, workload.num_ranks).groups.items():
            groups.add(name, members)
    groups_from_metadata(workload, groups)
    return groups


def _job_view(
    job: PlacedJob,
    start: float,
    run: Result,
    links: list[dict[str, Any]],
    recorder: RunRecorder,
    streams: int,
    renamed: bool = True,
) -> JobResult:
    """The run seen from *job*: its ranks, collectives and groups renumbered and renamed as the job knows them."""
    index = {gpu: r for r, gpu in enumerate(job.gpus)}
    ranks = [dataclasses.replace(run.ranks[gpu], rank=r) for r, gpu in enumerate(job.gpus)]
    collectives = [
        dataclasses.replace(c, rank=index[c.rank], group=[index[g] for g in c.group])
        for c in run.collectives
        if c.rank in index
    ]
    groups = []
    for entry in run.groups:
        name = job_group(job.name, str(entry["group"])) if renamed else str(entry["group"])
        if name is not None:
            rank = entry.get("rank_of_max")
            groups.append({**entry, "group": name, **({"rank_of_max": index[rank]} if rank in index else {})})
    finish = max([start, *(r.finish_ns for r in ranks)])  # (a job whose GPU failed before it started never ran)
    result = dataclasses.replace(
        run,
        finish_ns=finish,
        ranks=ranks,
        collectives=collectives,
        links=links,
        groups=groups,
        training=None,
        sim=dict(run.sim),
        network=dict(run.network),
        warnings=list(run.warnings),
    )
    info = training_info(job.workload.traces)
    if info is not None:  # a generated training job: its step report, over its own ranks and groups
        if renamed:
            info = {**info, "groups": {job_pg_name(job.name, g): role for g, role in info.get("groups", {}).items()}}
        report = training_report(info, result, recorder, comm_streams=streams, own_ranks=job.gpus, start_ns=start)
        result.training = report
    return JobResult(job.name, job.gpus, start, finish, result)


@dataclass
class _Runs:
    """What the simulations of a cluster give: the whole run, each job's result, the links jobs shared."""

    run: Result
    jobs: list[JobResult]
    shared: list[dict[str, Any]]
    durations: list[float]
    system: SystemConfig
    """The settings the jobs ran under (a shared run of several jobs: folding off)."""


def _simulate(
    spec: ClusterSpec,
    net: NetworkConfig,
    placed: Sequence[PlacedJob],
    system: SystemConfig,
    recorder: TrafficByPair,
    may_part: bool,
    progress: Any,
) -> _Runs:
    """Run the jobs: apart when no link lies on two jobs' routes (and *may_part*), else in one simulation."""
    reports = dataclasses.replace(DEFAULT_REPORTS, training=False)
    gpus = [job.gpus for job in placed]
    names = [job.name for job in spec.jobs]
    streams = system.resources.comm_streams
    renamed = not is_whole_cluster(placed, net.topology.npus)
    if len(placed) > 1 and may_part and share_no_link(net, placed):

        def view(i: int, own: Result, recorder: RunRecorder) -> JobResult:
            """Job *i*'s result from its own run: its links its own, its step report from its recorder."""
            (duration,) = _durations(spec, [placed[i].gpus], own, [spec.jobs[i]])
            per_link = {e["link"]: [[e["bytes"], e["messages"]] if k == i else [0.0, 0] for k in range(len(placed))]
                        for e in own.links}  # fmt: skip
            durations = [duration if k == i else 0.0 for k in range(len(placed))]
            mine, _ = link_tables(net, per_link, own.links, names, durations)
            return _job_view(placed[i], spec.jobs[i].start, own, mine[i], recorder, streams)

        own, copied = run_apart(net, placed, system, reports, view, progress)
        run = combined([r for r, _ in own], placed, copied)
        return _Runs(run, [v for _, v in own], [], _durations(spec, gpus, run), system)
    if len(placed) > 1:  # (every message must be seen to be charged to its job: a folded run shows a few)
        system = system.with_overrides(fold_replicas=False)
    merged = merge_jobs(placed, net.topology.npus)
    run = Simulation(merged, topology=net, system=system, reports=reports, observer=recorder, progress=progress).run()
    durations = _durations(spec, gpus, run)
    if len(placed) == 1:  # one job: every link's traffic is its own (a folded run's mirrored, exactly)
        job = _job_view(placed[0], spec.jobs[0].start, run, run.links, recorder, streams, renamed)
        return _Runs(run, [job], [], durations, system)
    run.sim.setdefault(
        "not_folded",
        "several jobs that may share links: every rank of every job is simulated, each message charged to its job",
    )
    owner = {gpu: i for i, ranks in enumerate(gpus) for gpu in ranks}
    mine, shared = link_tables(net, traffic(net, recorder.pairs, owner, len(placed)), run.links, names, durations)
    jobs = [
        _job_view(job, spec.jobs[i].start, run, mine[i], recorder, streams, renamed) for i, job in enumerate(placed)
    ]
    sent = [[0, 0.0] for _ in placed]  # (each job's own messages and bytes, as its own run would count them)
    for (src, _), (size, count) in sorted(recorder.pairs.items()):
        sent[owner[src]][0] += int(count)
        sent[owner[src]][1] += size
    for done, (count, nbytes) in zip(jobs, sent, strict=True):
        done.result.network.update(messages=count, bytes=nbytes)
    return _Runs(run, jobs, shared, durations, system)


def run_cluster(
    spec: ClusterSpec,
    *,
    alone: bool = False,
    fault_costs: bool = False,
    trace: str | os.PathLike[str] | None = None,
    progress: Any = None,
    together: bool = False,
) -> ClusterResult:
    """Run every job of *spec* on its cluster; the options run more, to compare.

    Jobs whose routes share no link run apart, each its own simulation (:mod:`etsim.cluster.apart`: the same
    figures, folded where a job is symmetric); *together* runs them in one simulation all the same.

    With *alone*, each job also runs by itself on the same placement (its slowdown); with *fault_costs*, the
    cluster runs again without each fault in turn (what the fault cost each job); with *trace*, the run's timeline
    is written there (a Chrome/Perfetto trace, each GPU's process named by its job and job rank).

    Raises:
        ConfigError: a placement that does not fit, a straggler or fault that names no GPU or link, jobs whose
            system settings disagree (named by their keys).
        DeadlockError, SimulationError: as :meth:`~etsim.simulation.Simulation.run` raises them.
    """
    net = cluster_network(spec)
    topo = net.topology
    placed = _placed(spec, net)
    gpus = [job.gpus for job in placed]
    recorder = TrafficByPair()
    renamed = not is_whole_cluster(placed, topo.npus)
    group_names = [[job_pg_name(j.name, None), *(job_pg_name(j.name, g) for g in j.groups.groups)] for j in placed]
    groups = group_names if renamed else None
    system = cluster_system(spec, gpus, groups=groups)
    runs = _simulate(spec, net, placed, system, recorder, trace is None and not together, progress)
    run, jobs, durations, shared, system = runs.run, runs.jobs, runs.durations, runs.shared, runs.system
    if trace is not None:
        from etsim.report.trace import write_chrome_trace

        processes = {gpu: f"job {job.name} · rank {r} (GPU {gpu})" for job in placed for r, gpu in enumerate(job.gpus)}
        write_chrome_trace(recorder, trace, links=False, process_names=processes)
    if alone:
        for i, job in enumerate(placed):  # (at its own start, with the same stragglers and faults: only alone)
            if "apart" in run.sim:  # (its own run was this one)
                jobs[i].alone_ns = jobs[i].duration_ns
                continue
            by_itself = Simulation(
                merge_jobs([job], topo.npus),
                topology=net,
                system=restricted(cluster_system(spec, gpus, groups), job.gpus),
                reports=NO_REPORTS,
            ).run()
            jobs[i].alone_ns = max(by_itself.ranks[g].finish_ns for g in job.gpus) - spec.jobs[i].start
    failed = {int(r): t for r, t in run.sim.get("failed", {}).items()}
    _mark_lost(spec, jobs, failed)
    faults = [_fault_entry(spec, i, placed) for i in range(len(spec.faults))]
    if fault_costs:
        for i, entry in enumerate(faults):
            without = dataclasses.replace(spec, faults=[f for k, f in enumerate(spec.faults) if k != i])
            settings = cluster_system(without, gpus, groups=groups).with_overrides(fold_replicas=system.fold_replicas)
            healthy = Simulation(
                merge_jobs(placed, topo.npus), topology=cluster_network(without), system=settings, reports=NO_REPORTS
            ).run()
            entry["cost_ns"] = {  # (a job that failed did not finish: no duration to compare)
                job.name: None if job.lost is not None else d - h
                for job, d, h in zip(jobs, durations, _durations(spec, gpus, healthy), strict=True)
            }
    if spec.reliability is not None:
        nodes = node_of(topo)
        for i, done in enumerate(jobs):
            used = len({nodes[g] for g in done.gpus})
            rate = failure_rate(spec.reliability, len(done.gpus), used, len(done.result.links))
            done.goodput = play(spec.reliability, rate, done.duration_ns, stream=i)
    return ClusterResult(spec.name, jobs, shared, run, list(run.warnings) + _rerouted(net, placed, run), faults)


def _rerouted(net: NetworkConfig, placed: Sequence[PlacedJob], run: Result) -> list[str]:
    """A warning, said and returned, when a link fails during a run of several jobs sharing it.

    Their tables charge routes from before the failure (one job's tables are the run's own statistics, detours
    included).
    """
    cut = [change.link for change in net.changes if change.share == 0]
    if not cut or len(placed) < 2 or "apart" in run.sim:
        return []
    u, v = cut[0]
    note = (
        f"link {u} - {v} fails during the run: each job's links and the shared links charge its messages along "
        "their routes before the failure; the run's own link statistics count the detours"
    )
    warn(note)
    return [note]


def _placed(spec: ClusterSpec, net: NetworkConfig) -> list[PlacedJob]:
    """The jobs with their workloads built, their groups read and their GPUs chosen (stragglers' GPUs checked)."""
    topo = net.topology
    workloads = [point_workload(w) for w in spec.job_workloads]
    gpus = place([job.placement for job in spec.jobs], [w.num_ranks for w in workloads], topo, spec.where)
    for i, straggler in enumerate(spec.stragglers):
        outside = [g for g in straggler.gpus if g >= topo.npus]
        if outside:
            raise ConfigError(f"{spec.where}: stragglers[{i}].gpus: GPU {outside[0]} is not one of 0..{topo.npus - 1}")
        used = {g for job in gpus for g in job}
        if not used.intersection(straggler.gpus):
            warn(f"{spec.where}: stragglers[{i}]: no job runs on GPUs {list(straggler.gpus)}: it has no effect")
    for i, fault in enumerate(spec.faults):
        if fault.gpu is None:
            continue
        if fault.gpu >= topo.npus:
            raise ConfigError(f"{spec.where}: faults[{i}].gpu: GPU {fault.gpu} is not one of 0..{topo.npus - 1}")
        if not any(fault.gpu in job for job in gpus):
            warn(f"{spec.where}: faults[{i}]: no job runs on GPU {fault.gpu}: its failure has no effect")
    return [
        PlacedJob(job.name, w, _job_groups(spec, i, w), gpus[i])
        for i, (job, w) in enumerate(zip(spec.jobs, workloads, strict=True))
    ]


def _fault_entry(spec: ClusterSpec, i: int, placed: Sequence[PlacedJob]) -> dict[str, Any]:
    """Fault *i* as the result lists it: its link and bandwidth left, or its GPU and the job it stopped."""
    fault = spec.faults[i]
    entry: dict[str, Any] = {"at_ns": fault.at}
    if fault.link is not None:
        entry.update(link=list(fault.link), bandwidth=fault.bandwidth)
    elif fault.nic is not None:
        entry.update(nic=fault.nic, bandwidth=fault.bandwidth)
    else:
        entry.update(gpu=fault.gpu, job=next((j.name for j in placed if fault.gpu in j.gpus), None))
    return entry


def _mark_lost(spec: ClusterSpec, jobs: Sequence[JobResult], failed: dict[int, float]) -> None:
    """Each job whose GPUs failed (``failed``: GPU → when) says what it lost."""
    named = failures(spec, [job.gpus for job in jobs])  # (the GPU a fault or a rank_fail named: its job stops)
    for job in jobs:
        when = min((failed[g] for g in job.gpus if g in failed), default=None)
        if when is None:
            continue
        gpu = next(g for g, at in named if g in job.gpus and at == when)
        finished = sum(1 for c in job.result.collectives if c.rank == 0 and c.end_ns <= when)
        step = max(0.0, when - job.start_ns)  # (a GPU that failed before its job started: nothing ran, none lost)
        job.lost = {"gpu": gpu, "at_ns": when, "step_ns": step, "gpu_ns": step * len(job.gpus),
                    "collectives_done": finished}  # fmt: skip


def _durations(
    spec: ClusterSpec, gpus: Sequence[tuple[int, ...]], run: Result, jobs: Sequence[JobEntry] | None = None
) -> list[float]:
    """Each job's duration in *run*: its last rank's finish minus its start (*jobs*: these of the file's jobs)."""
    finishes = [max((run.ranks[g].finish_ns for g in ranks), default=0.0) for ranks in gpus]
    return [max(0.0, f - job.start) for f, job in zip(finishes, spec.jobs if jobs is None else jobs, strict=True)]
