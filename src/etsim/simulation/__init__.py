"""One run of a workload on a network: a :class:`Simulation` owns it from its inputs to its :class:`Result`.

Typical use::

    from etsim import load_workload, simulate

    result = simulate(load_workload("workloads/allreduce_8npus_1MiB"), topology="topologies/ring8.yaml")
    print(result.finish_ns)

A run goes through fixed phases, each a method of :class:`Simulation` (``docs/design.md``, "A run's lifecycle"):

1. **build**: the network, the system settings, the communicator groups, checked against the workload;
2. **plan**: what the run may shorten: replica folding (one rank of each set of symmetric replicas simulated) and
   the fast path (collectives evaluated in bulk), as a :class:`Plan`;
3. **run**: one attempt of the event loop under the plan. A plan that does not hold (a fast-path part that cannot
   be proven exact, a fold the mirrors cannot reproduce) is a *conflict*: the attempt ends with a new plan, which
   rules that shortcut out, and the run phase starts again; the build is kept;
4. **settle**: the checks verifications running beside the run left are made (a wrong algorithm is the error to
   report, as if it had been verified first);
5. **collect**: one :class:`Result`: ranks, collectives, links, warnings, and the reports :class:`Reports` asks for
   (exposure per communicator group, the step report of a generated training job, the critical path).

Each phase's state belongs to the Simulation: the plan, the deferred checks, the warnings recorded, the recorder;
no other layer's object is changed after it is built.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from etsim.chakra.graph import Workload
from etsim.chakra.validate import preflight
from etsim.errors import (
    ConfigError,
    DeadlockError,
    FastPathConflict,
    FoldConflict,
    SimulationError,
    warn,
)
from etsim.network import NetworkConfig, Topology, build_model, load_network, ring
from etsim.network.faults import schedule_link_changes
from etsim.network.model import DEFAULT_MODEL, NETWORK_MODELS, CountingEnvironment, NetworkModel
from etsim.progress import Display
from etsim.progress import current as current_display
from etsim.report.bounds import collective_bound_violations, describe_violations, link_bound_warning
from etsim.report.groups import exposure_by_group, exposure_from_ranks, single_group
from etsim.report.record import RunRecorder
from etsim.report.result import CollectiveRecord, RankResult, Result
from etsim.report.training import gpu_clash, training_info, training_report
from etsim.simulation.collect import instance_weights, link_entries, mirror_results, network_info
from etsim.simulation.phases import DEFAULT_REPORTS, NO_REPORTS, Plan, Reports, WarningLog, collector_paused
from etsim.system.algorithms import DeferredChecks
from etsim.system.collective import System
from etsim.system.config import SystemConfig, load_system_config
from etsim.system.groups import CommGroups, groups_from_metadata, load_comm_groups
from etsim.units import format_bandwidth, format_time
from etsim.workload.engine import Engine
from etsim.workload.fold import FoldedRouter, ReplicaFold, find_fold, mirrored_trace, settings_differ, smaller_fold
from etsim.workload.observe import RunObserver

__all__ = [
    "DEFAULT_BANDWIDTH",
    "DEFAULT_LATENCY",
    "DEFAULT_MODEL",
    "DEFAULT_REPORTS",
    "MAX_MESSAGES",
    "MAX_WALKED_NODES",
    "MESSAGE_WARNING",
    "NO_REPORTS",
    "Plan",
    "Reports",
    "Simulation",
    "check_workload",
    "default_topology",
    "simulate",
]

#: A run expected to send more messages than this is announced with a warning before it starts.
MESSAGE_WARNING = 20_000_000
#: Runs that would walk more messages than this are refused (at ~3 µs a message, more than ten minutes).
MAX_MESSAGES = 200_000_000
#: Runs that would walk more workload nodes than this are refused (a few hundred bytes each while running).
MAX_WALKED_NODES = 50_000_000

#: The default topology when none is given: a bidirectional ring of the workload's ranks.
#: The last simulated time (ns) a float holds to the nanosecond: past it, a result says its times are inexact.
EXACT_NS = float(2**53)
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


@dataclass(frozen=True)
class _Build:
    """What the build phase made: the inputs resolved once for every attempt."""

    config: SystemConfig
    network: NetworkConfig
    label: str
    model: str
    options: dict[str, Any]
    groups: CommGroups


@dataclass
class _Attempt:
    """One completed attempt of the run phase: the layers it built and ran."""

    network: NetworkModel
    system: System
    engine: Engine
    fold: ReplicaFold | None
    wall: float


class Simulation:
    """One run of *workload* on a network, in the phases the module docstring lists; :meth:`run` makes them all.

    Args:
        workload: one trace per rank, or the path of a trace family (read with :func:`etsim.load_workload`).
        topology: a topology YAML path, a built :class:`~etsim.network.Topology`, a loaded
            :class:`~etsim.network.NetworkConfig`, or None for :func:`default_topology`.
        model: network model name (overrides the topology file's ``network.model``; default :data:`DEFAULT_MODEL`).
        model_options: the model's options (override the file's).
        system: system parameters, or the path of a system YAML (default :class:`~etsim.system.config.SystemConfig`).
        reports: what the result reports beyond the run's own figures (default: groups and the training report).
        observer: a :class:`~etsim.workload.observe.RunObserver` that watches the run (timelines, critical path), or
            None. A :class:`~etsim.report.record.RunRecorder` given here also serves the reports; with another
            observer, the reports that need a recorded run are left out.
        progress: a stream to show the run's progress on (e.g. ``sys.stderr``; a line redrawn on a terminal, plain
            lines elsewhere), or None: the display of :func:`etsim.progress.shown_on`, if any.
        progress_interval: seconds before the first update (with *progress*).

    Attributes:
        recorder: the run's record once :meth:`run` has returned (a trace can be written from it), or None.
        plan: the plan of the last attempt.
    """

    def __init__(
        self,
        workload: Workload | str | os.PathLike[str],
        *,
        topology: str | os.PathLike[str] | Mapping[str, Any] | Topology | NetworkConfig | None = None,
        model: str | None = None,
        model_options: Mapping[str, Any] | None = None,
        system: SystemConfig | str | os.PathLike[str] | dict[str, Any] | None = None,
        reports: Reports = DEFAULT_REPORTS,
        observer: RunObserver | None = None,
        progress: TextIO | None = None,
        progress_interval: float = 0.5,
    ) -> None:
        # (paths are read here, as topologies are: a wrong type is named rather than failing deep in a phase)
        if isinstance(workload, str | os.PathLike):
            from etsim.chakra.io import load_workload

            workload = load_workload(workload)
        elif not isinstance(workload, Workload):
            raise TypeError(f"workload: expected a Workload or a trace path, got {type(workload).__name__}")
        if isinstance(system, str | os.PathLike | Mapping):  # (a mapping as a system YAML holds it)
            system = load_system_config(dict(system) if isinstance(system, Mapping) else system)
        elif system is not None and not isinstance(system, SystemConfig):
            raise TypeError(f"system: expected a SystemConfig, a mapping or a YAML path, got {type(system).__name__}")
        if not isinstance(topology, str | os.PathLike | Mapping | Topology | NetworkConfig | None):
            raise TypeError(f"topology: expected a Topology, a mapping or a YAML path, got {type(topology).__name__}")
        self.workload = workload
        self.topology = topology
        self.model = model
        self.model_options = dict(model_options or {})
        self.system = system
        self.reports = reports
        self.progress = progress
        self.progress_interval = progress_interval
        self.training = training_info(workload.traces) if reports.training else None
        self.recorder = self._recorder(observer)
        self.observer = observer if observer is not None else self.recorder
        self.plan: Plan | None = None
        self._log = WarningLog()
        self._build: _Build | None = None

    def _recorder(self, observer: RunObserver | None) -> RunRecorder | None:
        """The recorder the reports need: the observer if it is one, a new one if they need it, else None."""
        if isinstance(observer, RunRecorder):
            return observer
        reports = self.reports
        several_groups = reports.groups and single_group(self.workload.traces) is None
        needed = reports.timeline or reports.critical_path or reports.messages or several_groups
        if not needed and self.training is None:
            return None
        if observer is not None:
            if reports.critical_path:
                raise ConfigError("the critical path needs the run recorded: pass a RunRecorder as the observer")
            return None
        messages = reports.messages or reports.critical_path
        internals = reports.timeline or reports.critical_path or reports.messages  # (else nodes only: fast path on)
        return RunRecorder(
            messages=messages,
            message_limit=None if reports.critical_path else reports.message_limit,
            internals=internals,
        )

    # -- the lifecycle ---------------------------------------------------------------------------------------------

    def run(self) -> Result:
        """Build, plan, run (again under a new plan after a conflict), settle and collect: the run's :class:`Result`.

        Everything that may make the result misleading is issued as an :class:`~etsim.errors.EtsimWarning` and
        listed in ``Result.warnings``.

        Raises:
            DeadlockError: the run cannot progress, or messages were sent that nothing received; the message names
                stuck ranks and nodes.
            SimulationError, ConfigError: inconsistent inputs, named precisely.
        """
        log = self._log
        with log.recording(), collector_paused():
            build = self.build()
            built = log.mark()  # the build's warnings stay, whichever attempt completes
            plan = self.plan = self.make_plan(build)
            while True:
                log.truncate(built)
                outcome = self.run_attempt(build, plan)
                if isinstance(outcome, _Attempt):
                    break
                plan = self.plan = self._smaller_fold(build, plan, outcome) or plan.after(outcome)
            result = self.collect(build, outcome)
            result.warnings = log.messages()
        result.sim["reruns"] = plan.reruns
        apart = build.config.ranks_named(in_effect=True) or settings_differ(build.config)
        if (apart or plan.dropped) and plan.fold is None:
            result.sim["not_folded"] = plan.fold_note  # (a straggler, or a fold that did not hold: why every rank ran)
        self.report(build, result)
        return result

    def build(self) -> _Build:
        """Phase 1: the network, the settings and the communicator groups, checked against the workload."""
        config = self.system or SystemConfig()
        n = self.workload.num_ranks
        if n == 0:
            raise ConfigError("the workload has no ranks")
        for key, ranks in config.ranks_named().items():
            outside = sorted(r for r in ranks if r >= n)
            if outside:
                where = f"{config.where}: " if config.where else ""
                raise ConfigError(f"{where}{key}: rank {outside[0]} is not a rank of the workload (ranks 0..{n - 1})")
        net, label, default = self._network(n)
        topo = net.topology
        if topo.npus < n:
            raise ConfigError(f"the workload has {n} ranks but topology {label} has only {topo.npus} NPUs")
        idle = [r for r in topo.live_npus if r >= n]
        if idle and not default:
            which = f"NPU {idle[0]}" if len(idle) == 1 else f"NPUs {idle[0]}..{idle[-1]}"
            warn(
                f"topology {label} has {len(topo.live_npus)} NPUs but the workload has only {n} rank files; "
                f"{which} stay idle (a missing rank file? rank r runs on NPU r)"
            )
        if self.training is not None and (clash := gpu_clash(self.training, getattr(topo, "hardware", None), label)):
            warn(clash)
        failed = sorted(r for r in getattr(topo, "failed_npus", ()) if r < n)
        if failed:
            raise ConfigError(f"workload ranks {failed} sit on failed NPUs of topology {label}")
        model = self.model or net.model
        options = net.options_for(model)
        options.update(self.model_options)
        groups = CommGroups(n)
        if config.comm_groups:
            for name, members in load_comm_groups(config.resolve_path(config.comm_groups), n).groups.items():
                groups.add(name, members)
        groups_from_metadata(self.workload, groups)
        self._build = _Build(config, net, label, model, options, groups)
        return self._build

    def _network(self, n: int) -> tuple[NetworkConfig, str, bool]:
        """The network to run on, its label, and whether it is the default one."""
        topology = self.topology
        if topology is None:
            net = NetworkConfig(default_topology(n), DEFAULT_MODEL)
            npus = net.topology.npus
            bandwidth, latency = format_bandwidth(DEFAULT_BANDWIDTH), format_time(DEFAULT_LATENCY)
            return net, f"default ring of {npus} NPUs ({bandwidth}, {latency})", True
        if isinstance(topology, NetworkConfig):
            return topology, topology.label or topology.topology.name, False
        if isinstance(topology, Topology):
            return NetworkConfig(topology, DEFAULT_MODEL), topology.name, False
        if isinstance(topology, Mapping):  # (as a topology YAML holds it)
            return load_network(topology), str(topology.get("name") or "the topology mapping"), False
        return load_network(os.fspath(topology)), os.fspath(topology), False

    def make_plan(self, build: _Build) -> Plan:
        """Phase 2: the first plan: replica folding where the run is symmetric, the fast path where it is allowed."""
        config = build.config
        fast: frozenset[Hashable] | None = frozenset() if config.fast_path else None
        if build.network.changes:  # (the fast path and folding assume links that never change)
            return Plan(None, "links change during the run: every rank is simulated", None)
        if config.rank_fail:  # (the fast path evaluates ahead of time: it cannot see a GPU fail)
            return Plan(None, "rank_fail stops ranks: every rank is simulated", None)
        if not config.fold_replicas:
            return Plan(None, "replica folding is off", fast)
        if (differ := settings_differ(config)) is not None:
            return Plan(None, f"{differ}: every rank is simulated", fast)
        router = NETWORK_MODELS.get(build.model).checked_options(build.options).router
        topo = build.network.topology
        fold, note = find_fold(self.workload.traces, build.groups, topo, router, config.node_priorities)
        return Plan(fold, note, fast)

    def _smaller_fold(self, build: _Build, plan: Plan, conflict: FoldConflict | FastPathConflict) -> Plan | None:
        """After a fold that did not hold, the plan under a smaller fold (:func:`smaller_fold`), or None."""
        if not isinstance(conflict, FoldConflict) or plan.fold is None:
            return None
        smaller = smaller_fold(plan.fold, self.workload.traces, build.groups, build.network.topology)
        if smaller is None:
            return None
        kept = {shift.role for shift in smaller.shifts}
        left_out = " × ".join(shift.role for shift in plan.fold.shifts if shift.role not in kept)
        smaller.description += f" (not by {left_out}: {conflict})"
        return dataclasses.replace(plan, fold=smaller)

    def run_attempt(self, build: _Build, plan: Plan) -> _Attempt | FoldConflict | FastPathConflict:
        """Phase 3 (and 4): one attempt of the event loop under *plan*, its deferred checks settled.

        Returns the attempt, or the conflict that makes the plan not hold (the caller plans again).
        """
        checks = DeferredChecks(self._log.mark)
        try:
            try:
                attempt = self._attempt(build, plan, checks)
            except Exception:
                try:
                    self._settle(checks)  # a wrong algorithm is the error to report, as if it had been verified first
                except ConfigError as wrong:
                    raise wrong from None
                raise
            except BaseException:  # (an interrupt: nothing is left verifying)
                checks.cancel()
                raise
            self._settle(checks)
        except (FoldConflict, FastPathConflict) as conflict:
            return conflict
        return attempt

    def _attempt(self, build: _Build, plan: Plan, checks: DeferredChecks) -> _Attempt:
        """Build the layers of one attempt and run its event loop (the checks it leaves are settled by the caller)."""
        config = build.config if plan.fast_excluded is not None else build.config.with_overrides(fast_path=False)
        topo = build.network.topology
        traces = list(self.workload.traces)
        fold = plan.fold
        wall0 = time.perf_counter()
        # Time is a float from the start, so whole-ns runs report 1034.0 on every path (the fast path's times come
        # from float arrays; SimPy would keep int + int as an int).
        env = CountingEnvironment(0.0)
        routing = None
        if fold is not None:
            # A mirrored rank's trace is its representative's relabelled, parse problems included: check the latter.
            traces = [t if fold.rep[r] == r else mirrored_trace(t) for r, t in enumerate(traces)]
            router = NETWORK_MODELS.get(build.model).checked_options(build.options).router
            from etsim.network.routing import make_router

            routing = FoldedRouter(make_router(router, topo), fold)
        network = build_model(env, topo, build.model, build.options, routing=routing)
        schedule_link_changes(env, network, build.network.changes)
        walked_nodes = sum(t.num_nodes for t in traces)
        unfolded = "" if fold is not None else plan.fold_note  # (why every rank runs, for a refusal)
        if walked_nodes > MAX_WALKED_NODES:
            raise ConfigError(
                f"this run would walk {walked_nodes:,} workload nodes, more than etsim's limit of {MAX_WALKED_NODES:,}"
                f"{f' (every rank runs: {unfolded})' if unfolded else ''}; fewer micro-batches or ranks make it smaller"
            )
        check_workload(Workload(traces), config)
        dims = [d.npus for d in topo.dims] if len(getattr(topo, "dims", ())) > 1 else None
        simulated = frozenset(fold.simulated) if fold is not None else None
        mirror_of = fold.mirror if fold is not None else None
        system = System(
            config, build.groups, dims=dims, topology=topo, simulated=simulated, mirror_of=mirror_of, checks=checks
        )
        expected = self._check_message_count(system, traces, network, config, unfolded)
        fast_excluded = set(plan.fast_excluded) if plan.fast_excluded is not None else None
        engine = Engine(env, network, system, traces, config, self.observer, fast_excluded, fold=fold)
        self._run_loop(engine, expected)
        if engine.ranks_done + len(engine.failed) < len(traces):
            if engine.fast is not None and (engine.fast.parts or engine.fast.pending):
                # Parts evaluated ahead (or still waiting for members) make a poor report: redo on the event path.
                raise FastPathConflict("the run cannot progress", None)
            raise DeadlockError(
                f"the simulation cannot progress at t = {env.now:.1f} ns: {engine.deadlock_summary()}\n"
                + engine.deadlock_report()
            )
        return _Attempt(network, system, engine, fold, time.perf_counter() - wall0)

    def _check_message_count(
        self, system: System, traces: list[Any], network: NetworkModel, config: SystemConfig, unfolded: str = ""
    ) -> int:
        """The messages the run is expected to send; refuse a run that would walk too many, warn about a long one.

        *unfolded*: why every rank runs (a refusal says it: folding is what would have made the run smaller).
        """
        expected = system.message_estimate(traces)
        walked = expected
        if expected > min(MESSAGE_WARNING, MAX_MESSAGES) and config.fast_path and network.offers_bulk_timing():
            timing = network.bulk_timing()
            stateful = timing is not None and timing.stateful
            walked -= system.shared_single_stream_messages if stateful else system.shared_messages
        if walked > MAX_MESSAGES:
            raise ConfigError(
                f"this run would send about {walked:,} messages one by one, more than etsim's limit of "
                f"{MAX_MESSAGES:,} (about ten minutes)"
                + (f" (every rank runs: {unfolded})" if unfolded else "")
                + "; use fewer chunks or smaller groups"
            )
        if walked > MESSAGE_WARNING:
            warn(
                f"this run will send about {expected:,} messages (more than {MESSAGE_WARNING:,}); it may take a long "
                "time — fewer chunks or a smaller group make it cheaper"
            )
        return expected

    def _run_loop(self, engine: Engine, expected: int) -> None:
        """The event loop, its progress shown on the display."""
        progress = self.progress
        display = Display(progress, delay=self.progress_interval) if progress is not None else current_display()
        if display is not None:
            _attach_progress(engine, display, expected)
        try:
            engine.start()
            engine.env.run()
        finally:
            if display is not None:
                display.clear()

    def _settle(self, checks: DeferredChecks) -> None:
        """Phase 4: make the deferred checks; a late refusal drops the warnings said after its point."""
        try:
            checks.settle()
        except Exception:
            if checks.raised_at is not None:
                self._log.truncate(checks.raised_at)
            raise

    def collect(self, build: _Build, attempt: _Attempt) -> Result:
        """Phase 5: the run's own figures as a :class:`Result` (mirrored ranks and links filled in), bounds checked."""
        engine, network, fold = attempt.engine, attempt.network, attempt.fold
        engine.check_all_received()
        if self.observer is not None:
            self.observer.finished(engine)
        topo = build.network.topology
        ranks = [RankResult(r.rank, r.finish_ns, r.compute_ns, r.comm_ns, r.exposed_ns) for r in engine.runs]
        # The members of one call's group as one list its records share (a 1,024-rank collective has 1,024 records).
        members: dict[int, list[int]] = {}
        collectives = []
        unfinished = {id(c) for c in engine.open_calls.values()}  # (calls a failed GPU cut off: no end to report)
        for c in engine.collectives:
            if unfinished and id(c) in unfinished:
                continue
            group = members.get(id(c.group))
            if group is None:
                group = members[id(c.group)] = list(c.group)
            collectives.append(
                CollectiveRecord(c.rank, c.node_id, c.type, c.bytes, group, c.algorithm, c.start_ns, c.end_ns, c.rule)
            )
        stats = network.link_stats()
        messages, nbytes = engine.messages, engine.bytes
        if fold is not None:
            ranks, stats = mirror_results(fold, topo, ranks, stats)
            messages, nbytes = messages * fold.replicas, nbytes * fold.replicas
        finish = max((r.finish_ns for r in ranks), default=0.0)
        if finish > EXACT_NS:
            warn(
                f"the simulated time reaches {finish:.6g} ns ({format_time(finish)}), past 2^53 ns (104 days), where a "
                f"float no longer holds every ns (steps of {math.ulp(finish):g} ns): durations and rates are inexact "
                "(shorten the workload's durations)"
            )
        aware = getattr(network, "congestion_aware", True)
        if not aware:
            found = link_bound_warning(stats, finish, build.model)
            if found is not None:
                warn(found)
        # A family run with its files' own sizes moves what the files say, not what the call's comm_size says.
        as_is = attempt.system.written_as_is()
        weights = None if fold is None else instance_weights(fold, collectives)
        checked = [i for i, c in enumerate(collectives) if c.algorithm not in as_is]
        violations = collective_bound_violations(
            [collectives[i] for i in checked],
            topo,
            attempt.system.reduced_in_network(),
            None if weights is None else [weights[i] for i in checked],
        )
        if violations:
            # A folded run checked one instance of each orbit of instances: say how many the whole run has.
            count = None if fold is None else sum(fold.group_orbit(v.group) for v in violations)
            warn(describe_violations(violations, build.model, aware, count=count))
        return Result(
            finish_ns=finish,
            ranks=ranks,
            collectives=collectives,
            network=network_info(topo, build.label, build.model, messages, nbytes),
            sim={
                "events": engine.events,
                "wall_s": attempt.wall,
                "bulk_parts": engine.fast.parts if engine.fast else 0,
                **({"failed": {str(r): t for r, t in sorted(engine.failed.items())}} if engine.failed else {}),
                **({"folded": fold.description} if fold is not None else {}),
            },
            links=link_entries(stats, finish),
        )

    def report(self, build: _Build, result: Result) -> None:
        """The reports :attr:`reports` asks for, added to *result* (after the run's warnings are collected)."""
        reports, recorder, traces = self.reports, self.recorder, self.workload.traces
        if reports.groups:
            if recorder is not None:
                result.groups = exposure_by_group(recorder)
            else:
                group = single_group(traces)
                if group is not None:
                    result.groups = exposure_from_ranks(result, traces, group)
        if self.training is not None:
            streams = build.config.resources.comm_streams
            result.training = training_report(self.training, result, recorder, comm_streams=streams)
        if reports.critical_path and recorder is not None:
            from etsim.report.critical_path import critical_path

            result.critical_path = held = critical_path(recorder)
            if "folded" in result.sim and held["held_back"] is not None:  # (its rank stands for an orbit: design.md)
                held["held_back"]["folded"] = True


def simulate(
    workload: Workload | str | os.PathLike[str],
    *,
    topology: str | os.PathLike[str] | Mapping[str, Any] | Topology | NetworkConfig | None = None,
    model: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    system: SystemConfig | str | os.PathLike[str] | dict[str, Any] | None = None,
    progress: TextIO | None = None,
    progress_interval: float = 0.5,
    observer: RunObserver | None = None,
    reports: Reports = NO_REPORTS,
) -> Result:
    """Simulate *workload* and return its :class:`~etsim.report.Result`: ``Simulation(...).run()`` in one call.

    The arguments are :class:`Simulation`'s, but by default the result holds the run's own figures only
    (:data:`NO_REPORTS`: no recording, so nothing keeps the fast path off); ``reports=Reports()`` adds what
    ``etsim run`` reports (exposure per communicator group, a training job's step report).

    Raises:
        DeadlockError: the run cannot progress, or messages were sent that nothing received; the
            message names stuck ranks and nodes.
        SimulationError, ConfigError: inconsistent inputs, named precisely.
    """
    return Simulation(
        workload,
        topology=topology,
        model=model,
        model_options=model_options,
        system=system,
        reports=reports,
        observer=observer,
        progress=progress,
        progress_interval=progress_interval,
    ).run()


def _attach_progress(engine: Engine, display: Display, expected: int) -> None:
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
