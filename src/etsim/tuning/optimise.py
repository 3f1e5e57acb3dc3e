"""``etsim optimise``: search workload-preserving rewrites of a job for a faster step; every candidate is simulated.

A *move* is one documented, reversible rewrite that keeps the job's work and data dependencies:

- of a generated workload, one change of its generator's parameters that the generator declares keeps the job's
  work (:meth:`~etsim.producers.workloads.base.WorkloadGenerator.rewrites`): for ``generate: transformer``, for
  the same model, global batch and GPU count, the micro-batch (×2, ÷2), the pipeline schedule (``1f1b``,
  ``gpipe``, ``interleaved`` with v = 2, 3, 4 chunks), the tensor/pipeline/data split (a factor 2 moved between
  two degrees), activation recomputation, the ZeRO stage, sequence parallelism, the data-parallel gradient bucket
  (×2, ÷2); for ``generate: moe``, the expert-parallel size (×2, ÷2); a workload read from files has none;
- of any workload, one system setting: the algorithm of one collective type (``algorithms.<collective>``: the
  natives that implement it and TACOS), the chunks per collective (1, 2, 4), the communication streams per NPU
  (``resources.comm_streams`` 0, 1, 2), or the issue order of a node on the critical path that waited for its
  rank's slot (``node_priorities``).

The search is steepest descent from the job as given: each round simulates every move from the current best
that has not been tried (in parallel, on an experiment engine), most promising first, and keeps the fastest
candidate if it beats the current best and fits in GPU memory (the generator's estimate; a faster candidate that
does not fit is tried again with moves that save memory). Promise comes from where
the current best's step goes, as its critical path shows it: the pipeline bubble and pipeline waits make schedule,
micro-batch and split moves first; exposed tensor-parallel communication makes ``tp``-related moves first;
exposed data-parallel communication makes bucket, ZeRO and algorithm moves first. A budget (candidates) or a time
bounds the search; every evaluated candidate is kept in ``OUT/candidates.jsonl``, so a second run with the same
inputs resumes without simulating them again, and the same inputs give the same search.

Outputs (``optimise_outputs.write_outputs``): the best job as an experiment-style file (``best.yaml``), its traces
(``workload.<rank>.et``, ``workload.comm_groups.json``) and ``system.yaml`` (``etsim run OUT/workload --system
OUT/system.yaml --topology T`` reproduces ``best_ns``), ``report.json`` and ``report.md`` (baseline, best, each
accepted move with its gain, the critical path's split before and after), ``convergence.csv`` (best time after each
candidate) and, with matplotlib, ``convergence.png``.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from etsim import progress
from etsim.chakra.graph import COLLECTIVE_NAMES, NodeType, parse_collective
from etsim.errors import ConfigError, EtsimError
from etsim.experiment.engines import ENGINES
from etsim.experiment.points import PointSpec
from etsim.experiment.worker import PointOutcome, PointTask
from etsim.network import load_network
from etsim.options import Integer, ListOf, Optional, Parser, Text, Time, option
from etsim.producers.workloads.base import generator_of, normalize
from etsim.simulation.inputs import point_workload
from etsim.stamp import input_stamp
from etsim.system.algorithms.sources import claiming_source
from etsim.system.selection import default_algorithm
from etsim.workers import stop_on_signals

__all__ = [
    "MOVE_KINDS",
    "Candidate",
    "Move",
    "OptimiseRequest",
    "OptimiseResult",
    "apply",
    "memory_moves",
    "move_kinds",
    "moves",
    "optimise",
    "reorder_moves",
]

#: Algorithms tried per collective type: the natives that implement it, and TACOS synthesised for the topology.
CANDIDATES = ("ring", "direct", "halving_doubling", "tree", "hierarchical", "tacos")
#: The families of moves (``--moves`` restricts the search to some).
MOVE_KINDS = (
    "micro_batch", "schedule", "split", "recompute", "zero", "bucket", "sp", "algorithm", "chunks", "streams", "order",
)  # fmt: skip
#: A move's first key (before any ``.``) → its kind, where the two differ.
_KIND_OF = {"tp": "split", "pp": "split", "dp": "split", "bucket_size": "bucket", "algorithms": "algorithm",
            "resources": "streams", "node_priorities": "order"}  # fmt: skip
#: How many of a round's fastest candidates that do not fit in memory are tried with memory-saving moves.
REPAIRED = 3
#: Roles a move addresses, for ordering by where the step's time goes (issue-order moves come first).
ROLES = ("pp", "tp", "dp", "compute", "order")


class MoveKinds(Parser):
    """Kinds of moves (comma-separated on the command line); which exist depends on the job (:func:`move_kinds`)."""

    metavar = "KIND,…"

    def __call__(self, value: Any, *, key: str) -> frozenset[str]:
        """The kinds named."""
        return frozenset(ListOf(Text(empty=False), what="kinds")(value, key=key))


def move_kinds(spec: PointSpec) -> list[str]:
    """The kinds of moves there are for *spec*: :data:`MOVE_KINDS`, and those its generator declares."""
    found = generator_of(spec.workload)
    kinds = dict.fromkeys(MOVE_KINDS)
    if found is not None:
        generator, options = found
        for r in [*generator.rewrites(options), *generator.memory_rewrites(options)]:
            kinds[Move("workload", r.values, r.role).kind] = None
    return list(kinds)


@dataclass(frozen=True, kw_only=True)
class OptimiseRequest:
    """How to search: the ``etsim optimise`` settings (each declared once; the command line's flags come from here)."""

    budget: int = option(40, "candidates to simulate at most", Integer(1))
    time: float | None = option(
        None,
        "start no candidate after this long (e.g. '5 min', '1 h'): the search ends within it plus one candidate",
        Optional(Time()),
        metavar="TIME",
    )
    jobs: int = option(1, "candidates simulated at once", Integer(1))
    moves: frozenset[str] | None = option(
        None,
        f"only these kinds of moves, comma-separated: {', '.join(MOVE_KINDS)}, or a parameter a generator declares "
        "moves of (default: all)",
        Optional(MoveKinds()),
    )
    engine: str = option("local", "experiment engine that simulates the candidates", Text(empty=False))

    @property
    def seconds(self) -> float | None:
        """:attr:`time` in seconds (None: no limit)."""
        return None if self.time is None else self.time / 1e9


@dataclass(frozen=True)
class Move:
    """One rewrite: ``where`` is ``workload`` (a generator parameter) or ``system``; ``values`` the new settings."""

    where: str
    values: tuple[tuple[str, Any], ...]
    role: str

    def describe(self) -> str:
        """``micro_batch = 2``-style text (the new values)."""
        return ", ".join(f"{k} = {v}" for k, v in self.values)

    @property
    def kind(self) -> str:
        """Which family of :data:`MOVE_KINDS` the move belongs to."""
        prefix = self.values[0][0].split(".")[0]
        return _KIND_OF.get(prefix, prefix)


@dataclass
class Candidate:
    """A simulated configuration: the moves from the baseline that made it, and its outcome."""

    spec: PointSpec
    path: tuple[Move, ...]
    status: str = ""
    iteration_ns: float = float("inf")
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    fits: bool = True

    @property
    def key(self) -> str:
        """The candidate's identity: its resolved spec as canonical JSON (what resumption matches on)."""
        return json.dumps(self.spec.as_dict(), sort_keys=True)


@dataclass
class OptimiseResult:
    """What a search found: every candidate in the order evaluated, the baseline, the best and the accepted moves."""

    baseline: Candidate
    best: Candidate
    evaluated: list[Candidate]
    accepted: list[tuple[tuple[Move, ...], float, float]]
    """Each accepted step (one move, or a move and the move that makes it fit in memory) with the step time before
    and after it."""
    history: list[float]
    """Best time after each evaluated candidate."""
    timed_out: bool = False
    """Whether the search ended because its time was up (the best is the best so far)."""


def moves(spec: PointSpec, collectives: list[str]) -> list[Move]:
    """Every move from *spec*, in a fixed order (the search orders them by promise).

    The workload's moves are those its generator declares (:meth:`WorkloadGenerator.rewrites`; none for a workload
    read from files); the system's are the same for every workload.
    """
    out: list[Move] = []
    found = generator_of(spec.workload)
    if found is not None:
        generator, options = found
        out += [Move("workload", r.values, r.role) for r in generator.rewrites(options)]
    current = spec.system.get("algorithms", {}) or {}
    # A selection table of rules (``etsim tune``'s) is kept as it is: the moves set one algorithm per collective.
    for collective in collectives if isinstance(current, dict) else ():
        running = _running(spec, current, collective)  # (a move to it would simulate the job as it is)
        for name in CANDIDATES:
            implemented = claiming_source(name).collectives(name) or frozenset()
            if name != running and parse_collective(collective) in implemented:
                out.append(Move("system", ((f"algorithms.{collective}", name),), "dp"))
    chunks = spec.system.get("chunks", 1)
    out += [Move("system", (("chunks", c),), "tp") for c in (1, 2, 4) if c != chunks]
    streams = (spec.system.get("resources", {}) or {}).get("comm_streams", 1)
    out += [Move("system", (("resources.comm_streams", c),), "order") for c in (0, 1, 2) if c != streams]
    return out


def _running(spec: PointSpec, current: dict[str, Any], collective: str) -> str:
    """The algorithm *collective* runs on now: the system's, the point's ``algo``, else the topology's default."""
    for table in (current, spec.algo):
        for key in (collective, "default"):
            if isinstance(table.get(key), str):
                return str(table[key])
    try:
        topology = load_network(spec.topology).topology if spec.topology is not None else None
    except EtsimError:
        return ""
    return default_algorithm(parse_collective(collective), topology)


def memory_moves(spec: PointSpec) -> list[Move]:
    """The moves that lower the job's memory per GPU.

    Tried with a faster one that does not fit (its generator's, :meth:`WorkloadGenerator.memory_rewrites`, in
    their order: each keeps the ones before).
    """
    found = generator_of(spec.workload)
    if found is None:
        return []
    generator, options = found
    return [Move("workload", r.values, "memory") for r in generator.memory_rewrites(options)]


def reorder_moves(spec: PointSpec) -> list[Move]:
    """Issue-order moves from *spec*'s critical path: each node on it that waited for a slot of its rank, first.

    A node waited when it started after its last dependency finished: a node of the same slot class held the slot
    (one compute stream, one communication stream). The move gives it priority over the nodes ready with it
    (``node_priorities``), keeping every dependency: the seed paper's reordering of two independent nodes.
    """
    recorder, path = _recorded_run(spec)
    engine = recorder.engine
    if engine is None:
        return []
    current = spec.system.get("node_priorities", {}) or {}
    out = []
    seen: set[str] = set()
    csrs: dict[int, list[tuple[list[int], list[int]]]] = {}  # per rank, built once (the path crosses many nodes)
    for entry in path["nodes"]:
        rank = entry["rank"]
        run = engine.runs[rank]
        j = run.trace.index_of.get(entry["node_id"])
        if j is None or run.trace.types[j] == NodeType.COMM_COLL_NODE:
            # (a collective issued earlier on one rank only would meet the others' in another order: NCCL hangs,
            # and etsim refuses the run; a collective moves for every member or not at all)
            continue
        if rank not in csrs:
            csrs[rank] = run.trace.dependency_csrs(include_ctrl=not run.engine.config.ignore_ctrl_deps)
        deps = [d for ptr, idx in csrs[rank] for d in idx[ptr[j] : ptr[j + 1]]]
        ready = max((recorder.finish[rank][d] for d in deps), default=0.0)
        key = f"{rank}:{entry['node_id']}"
        if recorder.start[rank][j] > ready and key not in current and key not in seen:
            seen.add(key)
            out.append(Move("system", ((f"node_priorities.{key}", -1),), "order"))
    return out


def _repaired(candidate: Candidate, kinds: frozenset[str] | None = None) -> Iterator[Candidate]:
    """*candidate* with the first k of its memory-saving moves (of *kinds*) applied, for k = 1, 2 and so on."""
    spec, path = candidate.spec, candidate.path
    for move in memory_moves(candidate.spec):
        if kinds is not None and move.kind not in kinds:
            continue
        new = apply(spec, move)
        if new is None:
            continue
        spec, path = new, (*path, move)
        yield Candidate(spec, path)


def apply(spec: PointSpec, move: Move) -> PointSpec | None:
    """*spec* with *move* applied, or None when the generator refuses the result (its message is not an error)."""
    if move.where == "workload":
        assert isinstance(spec.workload, dict)
        values = {**spec.workload, **dict(move.values)}
        try:
            return replace(spec, workload=normalize(values))
        except ConfigError:
            return None
    system = json.loads(json.dumps(spec.system))
    for key, value in move.values:
        if key.startswith("algorithms."):
            system.setdefault("algorithms", {})[key.split(".", 1)[1]] = value
        elif key.startswith("node_priorities."):
            system.setdefault("node_priorities", {})[key.split(".", 1)[1]] = value
        elif key.startswith("resources."):
            system["resources"] = {**(system.get("resources") or {}), key.split(".", 1)[1]: value}
        elif key == "chunks" and value == 1:
            system.pop("chunks", None)  # the default: the same candidate as one that never set it
        else:
            system[key] = value
    return replace(spec, system=system)


def _promise(metrics: dict[str, Any]) -> list[str]:
    """Roles by how much of the step they hold: exposed communication per parallelism, the bubble as ``pp``."""
    iteration = metrics.get("iteration_ns") or metrics.get("finish_ns") or 1.0
    weight = {
        "pp": metrics.get("exposed_pp_ns", 0.0) + metrics.get("bubble_fraction", 0.0) * iteration,
        "tp": metrics.get("exposed_tp_ns", 0.0),
        "dp": metrics.get("exposed_dp_ns", 0.0) + metrics.get("exposed_comm_ns", 0.0),
        "compute": metrics.get("compute_ns", 0.0) * 0.1,
        "order": 0.0,  # (reorder moves are put first by the search: they come from the critical path itself)
    }
    return sorted(ROLES, key=lambda r: (-weight[r], ROLES.index(r)))


def _slots_limited(spec: PointSpec) -> bool:
    """Whether ready nodes may wait for a slot (a resource with a limit), so that their issue order matters."""
    resources = spec.system.get("resources", {}) or {}
    return any(resources.get(k, 1) != 0 for k in ("cpu_ops", "compute_streams", "comm_streams"))


def _fits(outcome: PointOutcome) -> bool:
    """Whether the candidate fits in its GPUs' memory (the generator's estimate; no estimate: it does)."""
    return outcome.fits_in_memory is not False


def _collectives(spec: PointSpec) -> list[str]:
    """The collective types the job issues (the system moves' targets)."""
    found: dict[str, None] = {}
    for trace in point_workload(spec.workload).traces:
        for t, c, cpu in zip(trace.types, trace.comm_type, trace.is_cpu_op, strict=True):
            if t == NodeType.COMM_COLL_NODE and c is not None and not cpu:
                found.setdefault(COLLECTIVE_NAMES[c].lower(), None)
    return list(found)


def optimise(
    baseline: PointSpec,
    *,
    budget: int = 40,
    seconds: float | None = None,
    engine: str = "local",
    jobs: int = 1,
    cache: Path | None = None,
    on_candidate: Callable[[Candidate], None] | None = None,
    kinds: frozenset[str] | None = None,
) -> OptimiseResult:
    """Search from *baseline* (see the module docstring); at most *budget* candidates are simulated.

    *kinds* restricts the moves to some of :data:`MOVE_KINDS` (memory repairs included); None allows every one.

    Raises:
        ConfigError: the baseline itself cannot be simulated (its message).
    """
    deadline = None if seconds is None else time.monotonic() + seconds
    done = _cached(cache, input_stamp(baseline.as_dict()))
    search = _Search(budget, ENGINES.get(engine)(jobs=jobs), done, cache, on_candidate, kinds, deadline)
    base = Candidate(baseline, ())
    # Ctrl-C and SIGTERM end the search at once (every candidate finished is in the cache: a second run resumes).
    again = f"the candidates finished are in {cache}: run again to resume" if cache else "nothing kept"
    with stop_on_signals(immediate=True, again=again):
        search.evaluate([base], first=True)
        if base.status != "ok":
            raise ConfigError(f"the job as given cannot be simulated: {base.error}")
        best = base
        accepted: list[tuple[tuple[Move, ...], float, float]] = []
        collectives = _collectives(baseline)
        search.begin(base)
        while len(search.evaluated) < budget and not search.out_of_time():
            winner = search.round(best, collectives)
            if winner is None or (best.fits and not winner.iteration_ns < best.iteration_ns):
                break  # a local optimum: no move from the best helps (a best that does not fit takes any that does)
            accepted.append((winner.path[len(best.path) :], best.iteration_ns, winner.iteration_ns))
            best = winner
    return OptimiseResult(base, best, search.evaluated, accepted, search.history, search.out_of_time())


def _cached(cache: Path | None, stamp: str) -> dict[str, dict[str, Any]]:
    """The candidates an earlier search with the same inputs evaluated (``candidates.jsonl``), by key.

    The file's first line stamps the files the job reads (:func:`input_stamp`): when they changed (a topology edited
    in place, a workload regenerated at the same path) the cache is started over, as its times are no longer theirs.
    """
    done: dict[str, dict[str, Any]] = {}
    if cache is None:
        return done
    lines = cache.read_text().splitlines() if cache.exists() else []
    try:
        same = bool(lines) and json.loads(lines[0]).get("inputs") == stamp
    except (ValueError, AttributeError):
        same = False
    if not same:
        cache.write_text(json.dumps({"inputs": stamp}) + "\n")
        return done
    for line in lines[1:]:
        try:
            entry = json.loads(line)
            done[entry["key"]] = entry
        except (ValueError, TypeError, KeyError):
            continue  # a line torn by a kill (or blank): that candidate runs again
    return done


class _Search:
    """The state of one search: the candidates evaluated, tried and cached, and how each round goes."""

    def __init__(
        self,
        budget: int,
        runner: Any,
        done: dict[str, dict[str, Any]],
        cache: Path | None,
        on_candidate: Callable[[Candidate], None] | None,
        kinds: frozenset[str] | None,
        deadline: float | None = None,
    ) -> None:
        self.budget = budget
        self.deadline = deadline
        self.runner = runner
        self.done = done
        self.cache = cache
        self.on_candidate = on_candidate
        self.kinds = kinds
        self.evaluated: list[Candidate] = []
        self.history: list[float] = []
        self.tried: set[str] = set()
        self.watch: progress.Stage | None = None

    def begin(self, base: Candidate) -> None:
        """The rounds start from *base* (evaluated): it counts as tried, and progress is shown from now on."""
        self.tried.add(base.key)
        self.watch = progress.stage("optimising", self.budget, "candidates")

    def out_of_time(self) -> bool:
        """Whether the search's time is up (no candidate may start now)."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def evaluate(self, batch: list[Candidate], *, first: bool = False) -> list[Candidate]:
        """Simulate the candidates of *batch* not cached yet (cache them), record each; return those recorded.

        Under a time limit, candidates start a round of the engine's workers at a time and none starts once the
        time is up (the job as given, *first*, always runs): the search ends within its time plus one candidate's.
        """
        done = self.done
        fresh = [c for c in batch if c.key not in done]

        def record(key: str, entry: dict[str, Any]) -> None:
            # As each finishes, so that an interrupted search keeps every candidate it finished.
            done[key] = entry
            if self.cache is not None:
                with self.cache.open("a") as f:
                    f.write(json.dumps(entry, sort_keys=True) + "\n")

        def finished(o: PointOutcome) -> None:
            key = fresh[int(o.id)].key
            record(key, {"key": key, "status": o.status, "error": o.error, "metrics": o.metrics, "fits": _fits(o)})

        step = len(fresh) if self.deadline is None or first else max(1, self.runner.jobs)
        started = 0
        while started < len(fresh) and (first or not self.out_of_time()):
            tasks = [PointTask(str(i), fresh[i].spec) for i in range(started, min(started + step, len(fresh)))]
            self.runner.run(tasks, finished)
            self._in_order([fresh[int(task.id)].key for task in tasks])
            started += len(tasks)
        for c in fresh[:started]:
            if c.key not in done:
                record(c.key, {"key": c.key, "status": "failed", "error": "lost", "metrics": {}, "fits": False})
        unstarted = {c.key for c in fresh[started:]}
        batch = [c for c in batch if c.key not in unstarted]
        history = self.history
        for c in batch:
            entry = done[c.key]
            c.status, c.error, c.metrics, c.fits = entry["status"], entry["error"], entry["metrics"], entry["fits"]
            if c.status == "ok":
                c.iteration_ns = float(c.metrics.get("iteration_ns", c.metrics.get("finish_ns", float("inf"))))
            counted = c.iteration_ns if c.status == "ok" and c.fits else float("inf")
            self.evaluated.append(c)
            history.append(min(history[-1], counted) if history else counted)
            if self.on_candidate is not None:
                self.on_candidate(c)
        return batch

    def _in_order(self, keys: list[str]) -> None:
        """Put a round's candidates, cached as each finished, in the order they were made (the file too).

        Workers finish in any order; the same inputs must give the same ``candidates.jsonl``.
        """
        done = self.done
        for key in keys:
            if key in done:
                done[key] = done.pop(key)  # (to the end, in the round's order)
        if self.cache is not None and self.cache.exists():
            header = self.cache.read_text().split("\n", 1)[0]
            lines = [header, *(json.dumps(entry, sort_keys=True) for entry in done.values())]
            fresh = self.cache.with_name(self.cache.name + ".tmp")  # (replaced whole: a kill keeps one or the other)
            fresh.write_text("\n".join(lines) + "\n")
            os.replace(fresh, self.cache)

    def _advance(self, count: int) -> None:
        if self.watch is not None:
            self.watch.advance(count)

    def fresh(self, candidates: Iterator[Candidate]) -> list[Candidate]:
        """The candidates not tried yet, up to the budget."""
        out: list[Candidate] = []
        for cand in candidates:
            if len(self.evaluated) + len(out) >= self.budget:
                break
            if cand.key not in self.tried:
                self.tried.add(cand.key)
                out.append(cand)
        return out

    def round(self, best: Candidate, collectives: list[str]) -> Candidate | None:
        """One round from *best*: its fastest candidate that fits, or None.

        Every untried move is simulated, most promising first, then memory repairs of the fastest that do not fit.
        """
        kinds = self.kinds
        order = _promise(best.metrics)
        options = sorted(moves(best.spec, collectives), key=lambda m: order.index(m.role))
        if _slots_limited(best.spec) and (kinds is None or "order" in kinds):
            options = reorder_moves(best.spec) + options
        options = [m for m in options if kinds is None or m.kind in kinds]
        batch = self.fresh(_step(best.spec, best.path, options))
        if not batch:
            return None
        batch = self.evaluate(batch)
        self._advance(len(batch))
        # The fastest moves that do not fit in memory, each with one, two, three … moves that save memory.
        unfit = sorted(
            (
                c
                for c in batch
                if c.status == "ok" and not c.fits and (c.iteration_ns < best.iteration_ns or not best.fits)
            ),
            key=lambda c: c.iteration_ns,
        )[:REPAIRED]
        repairs = self.fresh(r for c in unfit for r in _repaired(c, kinds)) if not self.out_of_time() else []
        if repairs:
            repairs = self.evaluate(repairs)
            self._advance(len(repairs))
        return min(
            (c for c in batch + repairs if c.status == "ok" and c.fits), key=lambda c: c.iteration_ns, default=None
        )


def _step(spec: PointSpec, path: tuple[Move, ...], options: list[Move]) -> Iterator[Candidate]:
    """The candidates one of *options* makes from *spec* (reached by *path*)."""
    for move in options:
        new = apply(spec, move)
        if new is not None:
            yield Candidate(new, (*path, move))


def _recorded_run(spec: PointSpec) -> tuple[Any, dict[str, Any]]:
    """Simulate *spec* once more with a recorder; return it and the run's critical path."""
    from etsim.experiment.worker import simulate_point
    from etsim.report.critical_path import critical_path
    from etsim.report.record import RunRecorder

    recorder = RunRecorder(messages=True)  # (the critical path follows messages)
    with warnings.catch_warnings():  # the candidate's own run recorded them already
        warnings.simplefilter("ignore")
        simulate_point(spec, recorder)
    return recorder, critical_path(recorder)
