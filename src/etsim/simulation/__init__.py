"""Build the layers from a resolved configuration, run SimPy, return a :class:`~etsim.report.Result`.

Typical use::

    from etsim.chakra import load_workload
    from etsim.simulation import simulate

    result = simulate(load_workload("workloads/allreduce_8npus_1MiB"), topology="topologies/ring8.yaml")
    print(result.finish_ns)
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
import warnings
from collections.abc import Hashable, Mapping
from typing import Any, TextIO

from etsim.chakra.graph import Workload
from etsim.chakra.validate import preflight
from etsim.errors import (
    ConfigError,
    DeadlockError,
    EtsimWarning,
    FastPathConflict,
    FoldConflict,
    SimulationError,
    warn,
)
from etsim.network import NetworkConfig, Topology, build_model, load_network, ring
from etsim.network.model import DEFAULT_MODEL, CountingEnvironment, LinkStats
from etsim.progress import Display
from etsim.progress import current as current_display
from etsim.report.bounds import collective_bound_violations, describe_violations
from etsim.report.result import CollectiveRecord, RankResult, Result
from etsim.system.collective import System
from etsim.system.config import SystemConfig
from etsim.system.groups import CommGroups, groups_from_metadata, load_comm_groups
from etsim.units import format_bandwidth, format_size, format_time
from etsim.workload.engine import Engine
from etsim.workload.fold import FoldedRouter, ReplicaFold, find_fold, mirrored_trace
from etsim.workload.observe import RunObserver

__all__ = [
    "DEFAULT_BANDWIDTH",
    "DEFAULT_LATENCY",
    "DEFAULT_MODEL",
    "MAX_MESSAGES",
    "MAX_WALKED_NODES",
    "MESSAGE_WARNING",
    "check_workload",
    "default_topology",
    "simulate",
]

#: Attempts with the fast path before a run falls back to the event path for every collective.
MAX_FAST_RERUNS = 3
#: A run expected to send more messages than this is announced with a warning before it starts.
MESSAGE_WARNING = 20_000_000
#: Runs that would walk more messages than this are refused (at ~3 µs a message, more than ten minutes).
MAX_MESSAGES = 200_000_000
#: Runs that would walk more workload nodes than this are refused (a few hundred bytes each while running).
MAX_WALKED_NODES = 50_000_000

#: The default topology when none is given: a bidirectional ring of the workload's ranks.
DEFAULT_BANDWIDTH = 50.0  # bytes per ns (50 GB/s)
DEFAULT_LATENCY = 500.0  # ns


def default_topology(num_ranks: int) -> Topology:
    """A bidirectional ring of *num_ranks* NPUs (at least 2), 50 GB/s and 500 ns per link."""
    return ring(max(num_ranks, 2), DEFAULT_BANDWIDTH, DEFAULT_LATENCY)


def check_workload(workload: Workload, config: SystemConfig) -> None:
    """Reject what the walker cannot run, naming the first problems (:func:`etsim.chakra.validate.preflight`)."""
    problems = [issue.message for issue in preflight(workload, ignore_ctrl_deps=config.ignore_ctrl_deps)]
    if problems:
        more = "" if len(problems) <= 10 else "\n... and more (run `etsim validate`)"
        raise SimulationError("the workload cannot be simulated:\n" + "\n".join(problems[:10]) + more)


def _attach_progress(engine: Engine, display: Display, wall0: float, expected: int) -> None:
    """Show the run's progress on *display*, checked every few thousand messages."""
    total = sum(len(run.indeg) for run in engine.runs)

    def report(eng: Engine) -> None:
        if not display.due():
            return
        # The bar follows the messages sent against those expected (a single collective moves it too),
        # or the workload nodes finished when no collective is expected.
        done = total - sum(run.remaining for run in eng.runs)
        collectives = len(eng.collectives) - len(eng.open_calls)
        fraction = min(eng.messages / expected, 1.0) if expected else (done / total if total else 1.0)
        width = 20
        filled = int(width * fraction)
        display.show(
            f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} nodes, {collectives} collectives done, "
            f"{eng.messages}/{expected or '?'} messages, t = {format_time(eng.env.now)}"
        )

    engine.on_progress(report, every=4096)


def simulate(
    workload: Workload,
    *,
    topology: str | os.PathLike[str] | Topology | NetworkConfig | None = None,
    model: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    system: SystemConfig | None = None,
    progress: TextIO | None = None,
    progress_interval: float = 0.5,
    observer: RunObserver | None = None,
) -> Result:
    """Simulate *workload* and return its :class:`~etsim.report.Result`.

    Args:
        workload: one trace per rank.
        topology: a topology YAML path, a built :class:`~etsim.network.Topology`, a loaded
            :class:`~etsim.network.NetworkConfig`, or None for :func:`default_topology`.
        model: network model name (overrides the topology file's ``network.model``; default
            :data:`DEFAULT_MODEL`).
        model_options: the model's options (override the file's).
        system: system parameters (default :class:`~etsim.system.config.SystemConfig`).
        progress: a stream to show the run's progress on (e.g. ``sys.stderr``; a line redrawn on a
            terminal, plain lines elsewhere), or None: the display of :func:`etsim.progress.shown_on`, if any.
        progress_interval: seconds before the first update (with *progress*).
        observer: a :class:`~etsim.workload.observe.RunObserver` that watches the run (timelines,
            critical path), or None.

    Everything that may make the result misleading is issued as an
    :class:`~etsim.errors.EtsimWarning` and listed in ``Result.warnings``.

    Raises:
        DeadlockError: the run cannot progress, or messages were sent that nothing received; the
            message names stuck ranks and nodes.
        SimulationError, ConfigError: inconsistent inputs, named precisely.
    """
    caught: list[warnings.WarningMessage] = []
    excluded: set[Hashable] = set()
    reruns = 0
    fold = True
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", EtsimWarning)
            while True:
                del caught[:]  # only the attempt that completes speaks
                # An attempt makes millions of objects that live until it ends (a family's graphs, the union, the
                # caches) or die young (events), none in cycles worth collecting: the cyclic collector would only
                # traverse them again and again (0.3 s of the TACOS 32×32 family's run). It runs after the attempt.
                gc_was_enabled = gc.isenabled()
                gc.disable()
                try:
                    result = _simulate(
                        workload,
                        topology,
                        model,
                        model_options,
                        system,
                        progress,
                        progress_interval,
                        observer,
                        fast_excluded=excluded if reruns < MAX_FAST_RERUNS else None,
                        fold=fold,
                        recorded=caught,
                    )
                    break
                except FoldConflict:
                    fold = False  # something the mirrors cannot reproduce: simulate every rank
                except FastPathConflict as conflict:
                    # A part evaluated ahead could not be proven exact: run again with it on the event path.
                    reruns += 1
                    if conflict.namespace is None:
                        reruns = MAX_FAST_RERUNS
                    excluded.add(("part", conflict.namespace))
                    if conflict.signature is not None:
                        excluded.add(("graph", conflict.signature))
                finally:
                    if gc_was_enabled:
                        gc.enable()
    finally:
        # Hand every warning on to the caller's filters (the CLI prints them; pytest may raise them).
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    result.warnings = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, EtsimWarning)))
    result.sim["reruns"] = reruns
    return result


def _network(
    topology: str | os.PathLike[str] | Topology | NetworkConfig | None, n: int
) -> tuple[NetworkConfig, str, bool]:
    """The network to run on, its label, and whether it is the default one."""
    if topology is None:
        net = NetworkConfig(default_topology(n), DEFAULT_MODEL)
        npus = net.topology.npus
        label = f"default ring of {npus} NPUs ({format_bandwidth(DEFAULT_BANDWIDTH)}, {format_time(DEFAULT_LATENCY)})"
        return net, label, True
    if isinstance(topology, NetworkConfig):
        return topology, topology.topology.name, False
    if isinstance(topology, Topology):
        return NetworkConfig(topology, DEFAULT_MODEL), topology.name, False
    return load_network(os.fspath(topology)), os.fspath(topology), False


def _simulate(
    workload: Workload,
    topology: str | os.PathLike[str] | Topology | NetworkConfig | None,
    model: str | None,
    model_options: Mapping[str, Any] | None,
    system: SystemConfig | None,
    progress: TextIO | None,
    progress_interval: float,
    observer: RunObserver | None = None,
    *,
    fast_excluded: set[Hashable] | None = None,
    fold: bool = True,
    recorded: list[warnings.WarningMessage] | None = None,
) -> Result:
    config = system or SystemConfig()
    if fast_excluded is None:
        config = config.with_overrides(fast_path=False)
    n = workload.num_ranks
    if n == 0:
        raise ConfigError("the workload has no ranks")
    net, topo_label, default = _network(topology, n)
    topo = net.topology
    if topo.npus < n:
        raise ConfigError(f"the workload has {n} ranks but topology {topo_label} has only {topo.npus} NPUs")
    idle = [r for r in topo.live_npus if r >= n]
    if idle and not default:
        which = f"NPU {idle[0]}" if len(idle) == 1 else f"NPUs {idle[0]}..{idle[-1]}"
        warn(
            f"topology {topo_label} has {len(topo.live_npus)} NPUs but the workload has only {n} rank files; "
            f"{which} stay idle (a missing rank file? rank r runs on NPU r)"
        )
    failed = sorted(r for r in getattr(topo, "failed_npus", ()) if r < n)
    if failed:
        raise ConfigError(f"workload ranks {failed} sit on failed NPUs of topology {topo_label}")
    model_name = model or net.model
    options = dict(net.options) if model is None or model == net.model else {}
    options.update(model_options or {})

    groups = CommGroups(n)
    if config.comm_groups:
        for name, members in load_comm_groups(config.resolve_path(config.comm_groups), n).groups.items():
            groups.add(name, members)
    groups_from_metadata(workload, groups)

    wall0 = time.perf_counter()
    # Time is a float from the start, so whole-ns runs report 1034.0 on every path (the fast path's times
    # come from float arrays; SimPy would keep int + int as an int).
    env = CountingEnvironment(0.0)
    network = build_model(env, topo, model_name, options)
    traces = list(workload.traces)
    folded: ReplicaFold | None = None
    fold_note = "replica folding is off"
    if fold and config.fold_replicas:
        folded, fold_note = find_fold(traces, groups, topo, network.options.router, config.node_priorities)
    if folded is not None:
        # A mirrored rank's trace is its representative's relabelled, parse problems included: check the latter.
        traces = [t if folded.rep[r] == r else mirrored_trace(t) for r, t in enumerate(traces)]
        network.router = FoldedRouter(network.router, folded)
    walked_nodes = sum(t.num_nodes for t in traces)
    if walked_nodes > MAX_WALKED_NODES:
        why = "" if folded is not None else f" (every rank runs: {fold_note})"
        raise ConfigError(
            f"this run would walk {walked_nodes:,} workload nodes, more than etsim's limit of {MAX_WALKED_NODES:,}"
            f"{why}; fewer micro-batches or ranks make it smaller"
        )
    check_workload(Workload(traces), config)
    dims = [d.npus for d in topo.dims] if len(getattr(topo, "dims", ())) > 1 else None
    sys_layer = System(config, groups, dims=dims, topology=topo)
    sys_layer.deferred_checks = []  # large families are verified beside the run, settled before any result
    sys_layer.recorded_warnings = recorded
    if folded is not None:
        sys_layer.simulated = frozenset(folded.simulated)
    expected = sys_layer.message_estimate(traces)
    walked = expected
    if expected > min(MESSAGE_WARNING, MAX_MESSAGES) and config.fast_path and network.offers_bulk_timing():
        timing = network.bulk_timing()
        stateful = timing is not None and timing.stateful
        walked -= sys_layer.shared_single_stream_messages if stateful else sys_layer.shared_messages
    if walked > MAX_MESSAGES:
        raise ConfigError(
            f"this run would send about {walked:,} messages one by one, more than etsim's limit of {MAX_MESSAGES:,} "
            "(about ten minutes); use fewer chunks or smaller groups"
        )
    if walked > MESSAGE_WARNING:
        warn(
            f"this run will send about {expected:,} messages (more than {MESSAGE_WARNING:,}); it may take a long "
            "time — fewer chunks or a smaller group make it cheaper"
        )
    engine = Engine(env, network, sys_layer, traces, config, observer, fast_excluded)
    if folded is not None:
        engine.mirror(folded)
    display = Display(progress, delay=progress_interval) if progress is not None else current_display()
    if display is not None:
        _attach_progress(engine, display, wall0, expected)
    try:
        engine.start()
        env.run()
    except Exception:
        try:
            sys_layer.settle_checks()  # an algorithm that is wrong is the error to report, as if verified first
        except ConfigError as wrong:
            raise wrong from None
        raise
    except BaseException:  # (an interrupt: nothing is left verifying)
        sys_layer.cancel_checks()
        raise
    finally:
        if display is not None:
            display.clear()
    sys_layer.settle_checks()
    wall = time.perf_counter() - wall0
    if engine.ranks_done < n:
        if engine.fast is not None and (engine.fast.parts or engine.fast.pending):
            # Parts evaluated ahead (or still waiting for members) make a poor report: redo on the event path.
            raise FastPathConflict("the run cannot progress", None)
        raise DeadlockError(f"the simulation cannot progress at t = {env.now:.1f} ns; " + engine.deadlock_report())
    engine.check_all_received()
    if observer is not None:
        observer.finished(engine)
    ranks = [RankResult(r.rank, r.finish_ns, r.compute_ns, r.comm_ns, r.exposed_ns) for r in engine.runs]
    collectives = [
        CollectiveRecord(c.rank, c.node_id, c.type, c.bytes, list(c.group), c.algorithm, c.start_ns, c.end_ns, c.rule)
        for c in engine.collectives
    ]
    stats = network.link_stats()
    messages, nbytes = engine.messages, engine.bytes
    if folded is not None:
        ranks, stats = _mirror_results(folded, topo, ranks, stats)
        messages, nbytes = messages * folded.replicas, nbytes * folded.replicas
    finish = max((r.finish_ns for r in ranks), default=0.0)
    aware = getattr(network, "congestion_aware", True)
    if not aware:
        _check_physical(stats, finish, model_name, topo)
    # A family run with its files' own sizes moves what the files say, not what the call's comm_size says.
    as_is = sys_layer.written_as_is()
    checked = collectives if folded is None else _instance_records(folded, collectives)
    violations = collective_bound_violations([c for c in checked if c.algorithm not in as_is], topo)
    if violations:
        # A folded run checked one instance of each orbit of instances: say how many the whole run has.
        count = None if folded is None else sum(folded.group_orbit(v.group) for v in violations)
        warn(describe_violations(violations, model_name, aware, count=count))
    # utilisation: the share of the run the link spent serialising (None for a run that took no time).
    links = [
        {
            "link": s.link,
            "src": s.src,
            "dst": s.dst,
            "bytes": s.bytes,
            "busy_ns": s.busy,
            "messages": s.messages,
            "bandwidth_GBps": s.bandwidth,
            "utilisation": s.busy / finish if finish > 0 else None,
        }
        for s in stats
        if s.messages
    ]
    network_info: dict[str, Any] = {
        "model": model_name,
        "topology": topo_label,
        "messages": messages,
        "bytes": nbytes,
    }
    if topo.dims:  # lets plots lay links out on the grid of a mesh or torus
        network_info["dims"] = [{"kind": d.kind, "npus": d.npus} for d in topo.dims]
    return Result(
        finish_ns=finish,
        ranks=ranks,
        collectives=collectives,
        network=network_info,
        sim={
            "events": engine.events,
            "wall_s": wall,
            "bulk_parts": engine.fast.parts if engine.fast else 0,
            **({"folded": folded.description} if folded is not None else {}),
        },
        links=links,
    )


def _mirror_results(
    fold: ReplicaFold, topo: Topology, ranks: list[RankResult], stats: list[LinkStats]
) -> tuple[list[RankResult], list[LinkStats]]:
    """A folded run's ranks and links, every one: each mirror takes its representative's (exact by symmetry)."""
    by_rank = {r.rank: r for r in ranks}
    ranks = [dataclasses.replace(by_rank[fold.rep[r]], rank=r) for r in range(len(fold.rep))]
    used = {s.link: s for s in stats}
    links = []
    for rep, orbit in fold.link_orbits().items():
        s = used.get(rep)
        if s is not None:
            links += [dataclasses.replace(s, link=x, src=topo.links[x][0], dst=topo.links[x][1]) for x in orbit]
    links.sort(key=lambda s: s.link)
    return ranks, links


def _instance_records(fold: ReplicaFold, records: list[CollectiveRecord]) -> list[CollectiveRecord]:
    """The simulated ranks' collective records and, for the bound check, their mirrors in the same instances.

    A record's instance is complete once every member has one: the mirrors are the images of the record under
    the elements that map its group onto itself (the data-parallel shifts for a data-parallel group).
    """
    elements = fold.elements()[1:]
    fixing: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    out = []
    for c in records:
        out.append(c)
        group = tuple(c.group)
        found = fixing.get(group)
        if found is None:
            members = frozenset(group)
            found = fixing[group] = [g for g in elements if frozenset(fold.apply(g, m) for m in group) == members]
        for g in found:
            rank = fold.apply(g, c.rank)
            out.append(CollectiveRecord(rank, c.node_id, c.type, c.bytes, c.group, c.algorithm, c.start_ns, c.end_ns))
    return out


def _check_physical(stats: list[LinkStats], finish: float, model_name: str, topo: Topology) -> None:
    """Warn when a congestion-unaware run finished before its busiest link could carry its bytes."""
    over = [s for s in stats if s.busy > finish * (1 + 1e-9) and s.busy > 0]
    if not over:
        return
    worst = max(over, key=lambda s: s.busy)
    warn(
        f"network model {model_name!r} ignores contention, and this result is faster than the links can carry: "
        f"link {worst.link} ({worst.src} -> {worst.dst}) carried {format_size(worst.bytes)}, which takes "
        f"{format_time(worst.busy)} at {format_bandwidth(worst.bandwidth)}, but the run finished at "
        f"{format_time(finish)} ({len(over)} link(s) like this); use --model flow (congestion-aware, the default) "
        "for a physical bound"
    )
