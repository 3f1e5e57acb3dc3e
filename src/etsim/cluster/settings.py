"""A cluster file's settings as one run takes them: its network with its faults, and one system for every job.

:func:`cluster_network` applies the faults to the topology (from the start) or schedules them (later);
:func:`cluster_system` merges the cluster's and the jobs' system settings, each job's per-rank ones moved to its
GPUs and its clock, with the jobs' starts, the stragglers and the GPUs that fail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from etsim.cluster.merge import job_pg_name
from etsim.cluster.placement import node_of
from etsim.cluster.spec import ClusterSpec
from etsim.errors import ConfigError, TopologyError
from etsim.network import NetworkConfig, Topology, load_network
from etsim.network.faults import LinkChange
from etsim.network.irregular import with_degraded, with_failures
from etsim.system.config import SystemConfig, load_system_config

__all__ = ["PER_RANK", "cluster_network", "cluster_system", "fabric_links", "failures"]


def cluster_network(spec: ClusterSpec) -> NetworkConfig:
    """The cluster's network with its faults: links degraded or failed from the start, or changing later on.

    A fault sets a link's bandwidth to its share of the topology's (the healthy link's) from its time on: a later
    one on the same link overrides it (a restore to 100% after a degradation at 0 restores the link; two at 0 do not
    compound). A link failed from 0 leaves the network unless a later fault brings it back (then it fails at 0 as a
    change of the run: ``flow`` only).
    """
    net = load_network(spec.topology)
    topo = net.topology
    at_zero: dict[tuple[Any, Any], float] = {}  # directed link → its share from 0 (the last fault at 0 wins)
    later: list[tuple[float, tuple[Any, Any], float]] = []
    for i, fault in enumerate(spec.faults):
        key = f"{spec.where}: faults[{i}]"
        if fault.gpu is not None:  # (a GPU: the system's rank_fail)
            continue
        links = fabric_links(topo, fault.nic, f"{key}.nic") if fault.nic is not None else [fault.link]
        for link in links:
            if not isinstance(link, list | tuple) or len(link) != 2:
                raise ConfigError(f"{key}.link: expected [U, V], got {link!r}")
            pairs = [(link[0], link[1]), (link[1], link[0])] if fault.bidirectional else [(link[0], link[1])]
            for pair in pairs:
                try:
                    LinkChange(fault.at, pair, fault.bandwidth, bidirectional=False).link_ids(topo)
                except ConfigError as exc:
                    raise ConfigError(f"{key}.link: {exc}") from None
                if fault.at > 0:
                    later.append((fault.at, pair, fault.bandwidth))
                else:
                    at_zero[pair] = fault.bandwidth
    back = {pair for _, pair, _ in later}
    changes = [LinkChange(0.0, pair, 0.0, bidirectional=False) for pair, share in at_zero.items() if share == 0 and
               pair in back]  # fmt: skip
    try:
        failed = [pair for pair, share in at_zero.items() if share == 0 and pair not in back]
        if failed:
            topo = with_failures(topo, links=failed, bidirectional=False)
        for pair, share in at_zero.items():
            if 0 < share < 1:
                topo = with_degraded(topo, [pair], share, bidirectional=False)
    except (TopologyError, ConfigError) as exc:
        raise ConfigError(f"{spec.where}: faults: {exc}") from None
    for at, pair, share in later:  # (a share of the healthy link: the topology's at 0 may be degraded)
        base = at_zero.get(pair, 1.0)
        changes.append(LinkChange(at, pair, share / base if 0 < base < 1 else share, bidirectional=False))
    label = spec.topology if isinstance(spec.topology, str) else (topo.name or "topology")
    return dataclasses.replace(
        net, topology=topo, model=spec.model, options=dict(spec.model_options), label=label, changes=tuple(changes)
    )


def fabric_links(topology: Topology, gpu: int, key: str) -> list[tuple[Any, Any]]:
    """The links from *gpu* to the switches that reach other nodes' GPUs: its NIC's (a rail's, on a gpu_cluster)."""
    if not 0 <= gpu < topology.npus:
        raise ConfigError(f"{key}: GPU {gpu} is not one of 0..{topology.npus - 1}")
    nodes, switches, graph = node_of(topology), set(topology.switches), topology.graph

    def onward(s: Any) -> bool:  # (another node's GPU, or another switch: a leaf's spines reach the other leaves)
        return any(n in switches or (isinstance(n, int) and nodes[n] != nodes[gpu]) for n in graph.successors(s))

    fabric = [s for s in graph.successors(gpu) if s in switches and onward(s)]
    if not fabric:
        raise ConfigError(f"{key}: GPU {gpu} has no link to a switch that reaches other nodes (no NIC to fault)")
    return [(gpu, s) for s in sorted(fabric, key=str)]


def failures(spec: ClusterSpec, gpus: Sequence[tuple[int, ...]]) -> list[tuple[int, float]]:
    """The GPUs that fail and when: the cluster system's ``rank_fail``, the jobs' (on their GPUs) and the faults'."""
    out = [item for config in _by_gpu(spec, gpus) for item in config.rank_fail.items()]
    return out + [(fault.gpu, fault.at) for fault in spec.faults if fault.gpu is not None]


def _by_gpu(spec: ClusterSpec, gpus: Sequence[tuple[int, ...]]) -> list[SystemConfig]:
    """The per-rank settings by GPU, on the cluster's clock: the cluster system's, then each job's moved there."""
    cluster = load_system_config({k: v for k, v in spec.system.items() if k in PER_RANK})
    return [cluster] + [
        _on_gpus(load_system_config({k: v for k, v in system.items() if k in PER_RANK}), ranks, job.start, f"jobs[{i}]")
        for i, (system, ranks, job) in enumerate(zip(spec.job_systems, gpus, spec.jobs, strict=True))
    ]


#: The system settings that name ranks: a job's name its own ranks, the cluster's its GPUs.
PER_RANK = frozenset({"compute_slowdown", "compute_delay", "slowdown_windows", "rank_start", "rank_fail"})


def _on_gpus(config: SystemConfig, gpus: Sequence[int], start: float, where: str) -> SystemConfig:
    """A job's per-rank settings (*config*) moved to its *gpus*, their times to the cluster's clock (+ *start*)."""
    named = config.ranks_named()
    for key, ranks in named.items():
        bad = sorted(r for r in ranks if r >= len(gpus))
        if bad:
            raise ConfigError(f"{where}.system.{key}: rank {bad[0]} is not one of the job's ranks 0..{len(gpus) - 1}")
    return config.with_overrides(
        compute_slowdown={gpus[r]: f for r, f in config.compute_slowdown.items()},
        compute_delay={gpus[r]: d for r, d in config.compute_delay.items()},
        slowdown_windows=tuple((gpus[r], a + start, b + start, f) for r, a, b, f in config.slowdown_windows),
        rank_start={gpus[r]: t + start for r, t in config.rank_start.items()},
        rank_fail={gpus[r]: t + start for r, t in config.rank_fail.items()},
    )


def cluster_system(
    spec: ClusterSpec,
    gpus: Sequence[tuple[int, ...]],
    groups: Sequence[Sequence[str]] | None = None,
) -> SystemConfig:
    """The run's settings: the cluster's and the jobs' (which must agree), starts and stragglers by GPU.

    With *groups* (each job's merged group names), a job's own ``algorithms`` become selection rules for its groups
    (:func:`_job_rules`), before the cluster's: jobs may use different algorithms. A job's per-rank settings
    (:data:`PER_RANK`) name its own ranks, at times from its own start: they are moved to its GPUs and the
    cluster's clock. Any other setting is the whole run's: a job gives it as the cluster does, or every job alike.
    """
    merged = {k: v for k, v in spec.system.items() if k != "comm_groups" and k not in PER_RANK}
    setter: dict[str, int] = {}
    rules: list[dict[str, Any]] = []
    for i, system in enumerate(spec.job_systems):
        for key, value in system.items():
            if key == "comm_groups" or key in PER_RANK:
                continue
            if key == "algorithms" and groups is not None:
                rules += _job_rules(value, spec.jobs[i].name, groups[i])
                continue
            if key in setter and merged[key] != value:
                raise ConfigError(
                    f"{spec.where}: jobs[{i}].system.{key}: differs from jobs[{setter[key]}]'s; the jobs of a cluster "
                    "run under one system, so give it once (the cluster's system) or the same in every job"
                )
            if key in spec.system and spec.system[key] != value and key != "algorithms":  # (a job's own goes first)
                raise ConfigError(f"{spec.where}: jobs[{i}].system.{key}: differs from the cluster's system's")
            setter.setdefault(key, i)
            merged[key] = value
    for key, i in setter.items():  # (one job's setting applied to every job, in silence)
        if key not in spec.system and any(key not in system for system in spec.job_systems):
            raise ConfigError(
                f"{spec.where}: jobs[{i}].system.{key}: a setting of the whole run, which not every job gives; give "
                "it in the cluster's system (or the same in every job)"
            )
    if rules:
        merged["algorithms"] = rules + _job_rules(merged.get("algorithms", {}), None, None)
    return load_system_config(merged).with_overrides(**_per_gpu(spec, gpus))


def _per_gpu(spec: ClusterSpec, gpus: Sequence[tuple[int, ...]]) -> dict[str, Any]:
    """The per-rank settings of the run, by GPU.

    The cluster's, the jobs' moved to their GPUs, the jobs' starts, the stragglers and the failures (a GPU that fails
    stops its whole job).
    """
    starts = {gpu: job.start for job, ranks in zip(spec.jobs, gpus, strict=True) for gpu in ranks if job.start}
    constant: dict[int, float] = {}
    delays: dict[int, float] = {}
    windows: list[tuple[int, float, float, float]] = []
    failing: dict[int, float] = {}
    for mine in _by_gpu(spec, gpus):  # (the cluster's, then the jobs')
        for gpu, factor in mine.compute_slowdown.items():
            constant[gpu] = constant.get(gpu, 1.0) * factor
        for gpu, delay in mine.compute_delay.items():
            delays[gpu] = delays.get(gpu, 0.0) + delay
        windows += mine.slowdown_windows
        for gpu, when in mine.rank_start.items():
            starts[gpu] = max(starts.get(gpu, 0.0), when)
    for straggler in spec.stragglers:
        for gpu in straggler.gpus if straggler.delay else ():
            delays[gpu] = delays.get(gpu, 0.0) + straggler.delay
        if straggler.slowdown == 1.0:
            continue
        if straggler.start == 0 and straggler.until is None:
            for gpu in straggler.gpus:
                constant[gpu] = constant.get(gpu, 1.0) * straggler.slowdown
        else:
            until = float("inf") if straggler.until is None else straggler.until
            windows += [(gpu, straggler.start, until, straggler.slowdown) for gpu in straggler.gpus]
    for failed, when in failures(spec, gpus):  # (the others of its job would wait for it forever)
        for gpu in next((ranks for ranks in gpus if failed in ranks), (failed,)):
            failing[gpu] = min(failing.get(gpu, when), when)
    return {"compute_slowdown": constant, "compute_delay": delays, "slowdown_windows": tuple(windows),
            "rank_start": starts, "rank_fail": failing}  # fmt: skip


def _job_rules(algorithms: Any, job: str | None, names: Sequence[str] | None) -> list[dict[str, Any]]:
    """A system's ``algorithms`` (a mapping or a selection table) as rules, limited to *job*'s groups *names*."""
    if isinstance(algorithms, dict):
        table = [
            {"algorithm": a} if c == "default" else {"collective": c, "algorithm": a} for c, a in algorithms.items()
        ]
    elif isinstance(algorithms, list):
        table = [
            {"algorithm": r["default"]} if isinstance(r, dict) and set(r) == {"default"} else r for r in algorithms
        ]
    else:
        raise ConfigError(f"algorithms: expected a mapping or a list of rules, got {algorithms!r}")
    if job is None or names is None:
        return table
    out = []
    for rule in table:
        own = rule.get("pg_name") if isinstance(rule, dict) else None
        named = [job_pg_name(job, str(g)) for g in (own if isinstance(own, list) else [own])] if own else list(names)
        out.append({**rule, "pg_name": named})
    return out
