"""Build the layers from a resolved configuration, run SimPy, return a :class:`~etsim.report.Result`.

Typical use::

    from etsim.chakra import load_workload
    from etsim.simulation import simulate

    result = simulate(load_workload("workloads/allreduce_8npus_1MiB"), topology="topologies/ring8.yaml")
    print(result.finish_ns)
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Mapping
from typing import Any, TextIO

from etsim.chakra.graph import Workload
from etsim.chakra.validate import preflight
from etsim.errors import ConfigError, DeadlockError, SimulationError
from etsim.network import NetworkConfig, Topology, build_model, load_network, ring
from etsim.network.model import CountingEnvironment
from etsim.report.result import CollectiveRecord, RankResult, Result
from etsim.system.collective import System
from etsim.system.config import SystemConfig
from etsim.system.groups import CommGroups, groups_from_metadata, load_comm_groups
from etsim.units import format_bandwidth, format_time
from etsim.workload.engine import Engine

__all__ = ["DEFAULT_BANDWIDTH", "DEFAULT_LATENCY", "check_workload", "default_topology", "simulate"]

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


def _attach_progress(engine: Engine, stream: TextIO, interval: float, wall0: float) -> None:
    """Redraw a progress line every *interval* seconds, checked every few thousand messages."""
    state = {"last": time.perf_counter()}

    def report(eng: Engine) -> None:
        now = time.perf_counter()
        if now - state["last"] < interval:
            return
        state["last"] = now
        done = eng.ranks_done
        total = len(eng.runs)
        width = 20
        filled = width * done // total if total else width
        stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} ranks done, "
            f"t = {format_time(eng.env.now)}, {eng.messages} messages, {now - wall0:.1f} s"
        )
        stream.flush()

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
) -> Result:
    """Simulate *workload* and return its :class:`~etsim.report.Result`.

    Args:
        workload: one trace per rank.
        topology: a topology YAML path, a built :class:`~etsim.network.Topology`, a loaded
            :class:`~etsim.network.NetworkConfig`, or None for :func:`default_topology`.
        model: network model name (overrides the topology file's ``network.model``).
        model_options: the model's options (override the file's).
        system: system parameters (default :class:`~etsim.system.config.SystemConfig`).
        progress: a stream to draw a one-line progress display on (e.g. ``sys.stderr``), or None.
        progress_interval: seconds between progress updates.

    Raises:
        DeadlockError: the run cannot progress; the message names stuck ranks and nodes.
        SimulationError, ConfigError: inconsistent inputs, named precisely.
    """
    config = system or SystemConfig()
    n = workload.num_ranks
    if n == 0:
        raise ConfigError("the workload has no ranks")
    if topology is None:
        net = NetworkConfig(default_topology(n))
        npus = net.topology.npus
        topo_label = (
            f"default ring of {npus} NPUs ({format_bandwidth(DEFAULT_BANDWIDTH)}, {format_time(DEFAULT_LATENCY)})"
        )
    elif isinstance(topology, NetworkConfig):
        net = topology
        topo_label = net.topology.name
    elif isinstance(topology, Topology):
        net = NetworkConfig(topology)
        topo_label = topology.name
    else:
        net = load_network(os.fspath(topology))
        topo_label = os.fspath(topology)
    topo = net.topology
    if topo.npus < n:
        raise ConfigError(f"the workload has {n} ranks but topology {topo_label} has only {topo.npus} NPUs")
    failed = sorted(r for r in getattr(topo, "failed_npus", ()) if r < n)
    if failed:
        raise ConfigError(f"workload ranks {failed} sit on failed NPUs of topology {topo_label}")
    model_name = model or net.model
    options = dict(net.options) if model is None or model == net.model else {}
    options.update(model_options or {})

    check_workload(workload, config)
    groups = CommGroups(n)
    if config.comm_groups:
        for name, members in load_comm_groups(config.resolve_path(config.comm_groups), n).groups.items():
            groups.add(name, members)
    groups_from_metadata(workload, groups)

    wall0 = time.perf_counter()
    env = CountingEnvironment()
    network = build_model(env, topo, model_name, options)
    dims = [d.npus for d in topo.dims] if len(getattr(topo, "dims", ())) > 1 else None
    sys_layer = System(config, groups, dims=dims)
    engine = Engine(env, network, sys_layer, list(workload.traces), config)
    if progress is not None:
        _attach_progress(engine, progress, progress_interval, wall0)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived events; the cyclic collector only costs time here
    try:
        engine.start()
        env.run()
    finally:
        if gc_was_enabled:
            gc.enable()
    wall = time.perf_counter() - wall0
    if progress is not None:
        progress.write("\r" + " " * 78 + "\r")
        progress.flush()
    if engine.ranks_done < n:
        raise DeadlockError(
            f"the simulation cannot progress at t = {env.now:.1f} ns; stuck ranks:\n" + engine.deadlock_report()
        )
    ranks = [RankResult(r.rank, r.finish_ns, r.compute_ns, r.comm_ns, r.exposed_ns) for r in engine.runs]
    collectives = [
        CollectiveRecord(c.rank, c.node_id, c.type, c.bytes, list(c.group), c.algorithm, c.start_ns, c.end_ns)
        for c in engine.collectives
    ]
    links = [
        {"link": s.link, "src": s.src, "dst": s.dst, "bytes": s.bytes, "busy_ns": s.busy, "messages": s.messages}
        for s in network.link_stats()
        if s.messages
    ]
    return Result(
        finish_ns=max((r.finish_ns for r in ranks), default=0.0),
        ranks=ranks,
        collectives=collectives,
        network={"model": model_name, "topology": topo_label, "messages": engine.messages, "bytes": engine.bytes},
        sim={"events": engine.events, "wall_s": wall},
        links=links,
    )
