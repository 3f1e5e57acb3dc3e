"""``etsim optimise``: search workload-preserving rewrites of a job for a faster step; every candidate is simulated.

A *move* is one documented, reversible rewrite that keeps the job's work and data dependencies:

- of a generated training job (``generate: transformer``), one generator parameter for the same model, global
  batch and GPU count: the micro-batch (×2, ÷2), the pipeline schedule (``1f1b``, ``gpipe``, ``interleaved`` with
  v = 2, 3, 4 chunks), the tensor/pipeline/data split (a factor 2 moved between two degrees), activation
  recomputation, the ZeRO stage, sequence parallelism, the data-parallel gradient bucket (×2, ÷2);
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

Outputs (:func:`write_outputs`): the best job as an experiment-style file (``best.yaml``), its traces
(``workload.<rank>.et``, ``workload.comm_groups.json``) and ``system.yaml`` (``etsim run OUT/workload --system
OUT/system.yaml --topology T`` reproduces ``best_ns``), ``report.json`` and ``report.md`` (baseline, best, each
accepted move with its gain, the critical path's split before and after), ``convergence.csv`` (best time after each
candidate) and, with matplotlib, ``convergence.png``.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from etsim import progress
from etsim.chakra.graph import COLLECTIVE_NAMES, NodeType, parse_collective
from etsim.errors import ConfigError
from etsim.experiment.engines import ENGINES
from etsim.experiment.points import PointSpec
from etsim.experiment.worker import PointOutcome, PointTask, point_workload
from etsim.files import write_text
from etsim.producers.tacos import COLLECTIVES as TACOS_COLLECTIVES
from etsim.producers.workloads.base import normalize
from etsim.system.algorithms import ALGORITHMS

__all__ = [
    "MOVE_KINDS",
    "Candidate",
    "Move",
    "OptimiseResult",
    "apply",
    "memory_moves",
    "moves",
    "optimise",
    "reorder_moves",
    "write_outputs",
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


def _factor_moves(values: dict[str, Any]) -> Iterator[Move]:
    """A factor 2 moved between two of tp, pp and dp (the GPU count stays)."""
    for a, b in (("tp", "pp"), ("pp", "tp"), ("pp", "dp"), ("dp", "pp"), ("tp", "dp"), ("dp", "tp")):
        if values[b] % 2 == 0:
            new = {a: values[a] * 2, b: values[b] // 2}
            role = "pp" if "pp" in (a, b) else "tp"
            yield Move("workload", tuple(sorted(new.items())), role)


def moves(spec: PointSpec, collectives: list[str]) -> list[Move]:
    """Every move from *spec*, in a fixed order (the search orders them by promise)."""
    out: list[Move] = []
    workload = spec.workload
    if isinstance(workload, dict) and workload.get("generate") == "transformer":
        v = workload
        for b in (v["micro_batch"] * 2, v["micro_batch"] // 2):
            if b >= 1:
                out.append(Move("workload", (("micro_batch", b),), "pp"))
        schedules = [("1f1b", 1), ("gpipe", 1), *(("interleaved", k) for k in (2, 3, 4))]
        for schedule, chunks in schedules:
            if (schedule, chunks) != (v["schedule"], v["virtual_stages"]) and v["pp"] > 1:
                out.append(Move("workload", (("schedule", schedule), ("virtual_stages", chunks)), "pp"))
        out.extend(_factor_moves(v))
        for recompute in ("none", "selective", "full"):
            if recompute != v["recompute"]:
                out.append(Move("workload", (("recompute", recompute),), "compute"))
        if v["dp"] > 1:
            out += [Move("workload", (("zero", z),), "dp") for z in range(4) if z != v["zero"]]
            for size in (v["bucket_size"] * 2, v["bucket_size"] // 2):
                if size >= 1 << 20:
                    out.append(Move("workload", (("bucket_size", size),), "dp"))
        if v["tp"] > 1:
            out.append(Move("workload", (("sp", not v["sp"]),), "tp"))
    current = spec.system.get("algorithms", {}) or {}
    for collective in collectives:
        for name in CANDIDATES:
            implemented = set(TACOS_COLLECTIVES.values()) if name == "tacos" else ALGORITHMS.get(name).collectives
            if current.get(collective, "") != name and parse_collective(collective) in implemented:
                out.append(Move("system", ((f"algorithms.{collective}", name),), "dp"))
    chunks = spec.system.get("chunks", 1)
    out += [Move("system", (("chunks", c),), "tp") for c in (1, 2, 4) if c != chunks]
    streams = (spec.system.get("resources", {}) or {}).get("comm_streams", 1)
    out += [Move("system", (("resources.comm_streams", c),), "order") for c in (0, 1, 2) if c != streams]
    return out


def memory_moves(spec: PointSpec) -> list[Move]:
    """The moves of a generated training job that lower its memory per GPU, tried with a faster one that does not fit.

    In the order they are added (each keeps the ones before): sequence parallelism, selective recomputation, the
    next ZeRO stage, full recomputation, half the micro-batch.
    """
    v = spec.workload
    if not (isinstance(v, dict) and v.get("generate") == "transformer"):
        return []
    out = []
    if v["tp"] > 1 and not v["sp"]:
        out.append(Move("workload", (("sp", True),), "memory"))
    if v["recompute"] == "none":
        out.append(Move("workload", (("recompute", "selective"),), "memory"))
    if v["dp"] > 1 and v["zero"] < 3:
        out.append(Move("workload", (("zero", v["zero"] + 1),), "memory"))
    if v["recompute"] != "full":
        out.append(Move("workload", (("recompute", "full"),), "memory"))
    if v["micro_batch"] > 1:
        out.append(Move("workload", (("micro_batch", v["micro_batch"] // 2),), "memory"))
    return out


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
        if j is None:
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
    """Whether the candidate fits in its GPUs' memory (the generator's estimate, warned about by the report)."""
    return not any("the job would not fit" in w for w in outcome.warnings)


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
    done: dict[str, dict[str, Any]] = {}
    if cache is not None and cache.exists():
        for line in cache.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                done[entry["key"]] = entry
    runner = ENGINES.get(engine)(jobs=jobs)
    t0 = time.monotonic()
    evaluated: list[Candidate] = []
    history: list[float] = []

    def evaluate(batch: list[Candidate]) -> None:
        fresh = [c for c in batch if c.key not in done]
        outcomes: dict[str, PointOutcome] = {}
        if fresh:
            tasks = [PointTask(str(i), c.spec) for i, c in enumerate(fresh)]
            runner.run(tasks, lambda o: outcomes.__setitem__(o.id, o))
        for i, c in enumerate(fresh):
            o = outcomes.get(str(i))
            entry: dict[str, Any] = {"key": c.key, "status": "failed", "error": "lost", "metrics": {}, "fits": False}
            if o is not None:
                entry = {"key": c.key, "status": o.status, "error": o.error, "metrics": o.metrics, "fits": _fits(o)}
            done[c.key] = entry
            if cache is not None:
                with cache.open("a") as f:
                    f.write(json.dumps(entry, sort_keys=True) + "\n")
        for c in batch:
            entry = done[c.key]
            c.status, c.error, c.metrics, c.fits = entry["status"], entry["error"], entry["metrics"], entry["fits"]
            if c.status == "ok":
                c.iteration_ns = float(c.metrics.get("iteration_ns", c.metrics.get("finish_ns", float("inf"))))
            counted = c.iteration_ns if c.status == "ok" and c.fits else float("inf")
            evaluated.append(c)
            history.append(min(history[-1], counted) if history else counted)
            if on_candidate is not None:
                on_candidate(c)

    base = Candidate(baseline, ())
    evaluate([base])
    if base.status != "ok":
        raise ConfigError(f"the job as given cannot be simulated: {base.error}")
    best = base
    accepted: list[tuple[tuple[Move, ...], float, float]] = []
    collectives = _collectives(baseline)
    tried = {base.key}
    watch = progress.stage("optimising", budget, "candidates")

    def fresh(candidates: Iterator[Candidate]) -> list[Candidate]:
        """The candidates not tried yet, up to the budget."""
        out: list[Candidate] = []
        for cand in candidates:
            if len(evaluated) + len(out) >= budget:
                break
            if cand.key not in tried:
                tried.add(cand.key)
                out.append(cand)
        return out

    def step(spec: PointSpec, path: tuple[Move, ...], options: list[Move]) -> Iterator[Candidate]:
        for move in options:
            new = apply(spec, move)
            if new is not None:
                yield Candidate(new, (*path, move))

    while len(evaluated) < budget and (seconds is None or time.monotonic() - t0 < seconds):
        order = _promise(best.metrics)
        options = sorted(moves(best.spec, collectives), key=lambda m: order.index(m.role))
        if _slots_limited(best.spec) and (kinds is None or "order" in kinds):
            options = reorder_moves(best.spec) + options
        options = [m for m in options if kinds is None or m.kind in kinds]
        batch = fresh(step(best.spec, best.path, options))
        if not batch:
            break
        evaluate(batch)
        watch.advance(len(batch))
        # The fastest moves that do not fit in memory, each with one, two, three … moves that save memory.
        unfit = sorted(
            (
                c
                for c in batch
                if c.status == "ok" and not c.fits and (c.iteration_ns < best.iteration_ns or not best.fits)
            ),
            key=lambda c: c.iteration_ns,
        )[:REPAIRED]
        repairs = fresh(r for c in unfit for r in _repaired(c, kinds))
        if repairs:
            evaluate(repairs)
            watch.advance(len(repairs))
        winner = min(
            (c for c in batch + repairs if c.status == "ok" and c.fits), key=lambda c: c.iteration_ns, default=None
        )
        if winner is None or (best.fits and not winner.iteration_ns < best.iteration_ns):
            break  # a local optimum: no move from the best helps (a best that does not fit takes any that does)
        accepted.append((winner.path[len(best.path) :], best.iteration_ns, winner.iteration_ns))
        best = winner
    return OptimiseResult(base, best, evaluated, accepted, history)


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


def _recorded(spec: PointSpec, trace: Path | None) -> dict[str, Any]:
    """Simulate *spec* once more with a recorder: its critical path's split (and a timeline at *trace*)."""
    from etsim.report.trace import write_chrome_trace

    recorder, path = _recorded_run(spec)
    if trace is not None:
        write_chrome_trace(recorder, trace, links=False)
    nodes = sorted(path["nodes"], key=lambda n: -(n["end_ns"] - n["start_ns"]))[:5]
    longest = [{k: n[k] for k in ("rank", "node_id", "name", "type", "start_ns", "end_ns")} for n in nodes]
    return {"finish_ns": path["finish_ns"], "totals": path["totals"], "longest": longest}


def write_outputs(result: OptimiseResult, out: Path) -> dict[str, Any]:
    """Write the best job, its traces and system, the reports and the convergence (module docstring)."""
    import yaml

    from etsim.chakra.io import write_workload
    from etsim.producers.workloads.base import parse

    best, base = result.best, result.baseline
    spec = best.spec
    out.mkdir(parents=True, exist_ok=True)
    workload = point_workload(spec.workload)
    write_workload(workload.traces, out / "workload")
    if isinstance(spec.workload, dict):
        values = {k: v for k, v in spec.workload.items() if k != "generate"}
        generator, options = parse(str(spec.workload["generate"]), values)
        groups = generator.comm_groups(options)
        if groups:
            write_text(out / "workload.comm_groups.json", json.dumps(groups) + "\n")
    system = json.loads(json.dumps(spec.system))
    named = {k: v for k, v in spec.algo.items() if isinstance(v, str)}
    if named:
        system["algorithms"] = {**named, **system.get("algorithms", {})}
    write_text(out / "system.yaml", yaml.safe_dump(system, sort_keys=True))
    topology: dict[str, Any] = {}
    if isinstance(spec.topology, dict):
        topology = json.loads(json.dumps(spec.topology))
    elif isinstance(spec.topology, str):
        topology = yaml.safe_load(Path(spec.topology).read_text())
    network = dict(topology.get("network", {}) or {})
    network.update({"model": spec.model, **spec.model_options})
    topology["network"] = network
    write_text(out / "topology.yaml", yaml.safe_dump(topology, sort_keys=True))
    job = {"workload": spec.workload, "topology": topology, "model": spec.model, "system": system}
    write_text(out / "best.yaml", yaml.safe_dump(job, sort_keys=True))
    before = _recorded(base.spec, out / "baseline.trace.json.gz")
    after = _recorded(spec, out / "best.trace.json.gz")
    report = {
        "baseline_ns": base.iteration_ns,
        "best_ns": best.iteration_ns,
        "gain": 1 - best.iteration_ns / base.iteration_ns,
        "baseline_fits": base.fits,
        "best_fits": best.fits,
        "candidates": len(result.evaluated),
        "accepted": [
            {"move": " + ".join(m.describe() for m in ms), "before_ns": b, "after_ns": a, "gain": 1 - a / b}
            for ms, b, a in result.accepted
        ],
        "critical_path": {"before": before, "after": after},
        "reproduce": "etsim run OUT/workload --system OUT/system.yaml --topology OUT/topology.yaml",
    }
    write_text(out / "report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    write_text(out / "report.md", _markdown(report))
    rows = ["candidate,iteration_ns,status,best_ns,moves"]
    for i, (c, h) in enumerate(zip(result.evaluated, result.history, strict=True)):
        moves_text = "; ".join(m.describe() for m in c.path)
        rows.append(f'{i},{c.iteration_ns if c.status == "ok" else ""},{c.status},{h},"{moves_text}"')
    write_text(out / "convergence.csv", "\n".join(rows) + "\n")
    _plot(result.history, out / "convergence.png")
    return report


def _markdown(report: dict[str, Any]) -> str:
    """The report for people."""
    from etsim.units import format_time

    lines = [
        "# etsim optimise",
        "",
        f"- baseline: {format_time(report['baseline_ns'])}",
        f"- best: {format_time(report['best_ns'])} ({100 * report['gain']:.1f}% faster), "
        f"after {report['candidates']} simulated candidates",
        f"- reproduce: `{report['reproduce']}`",
        "",
        "| accepted move | before | after | gain |",
        "|---|---|---|---|",
    ]
    for a in report["accepted"]:
        lines.append(
            f"| {a['move']} | {format_time(a['before_ns'])} | {format_time(a['after_ns'])} | {100 * a['gain']:.1f}% |"
        )
    lines += ["", "Critical path (time on it):", "", "| | compute | exposed communication | other |"]
    lines.append("|---|---|---|---|")
    for when in ("before", "after"):
        t = report["critical_path"][when]["totals"]
        lines.append(
            f"| {when} | {format_time(t['compute_ns'])} | {format_time(t['exposed_comm_ns'])} | "
            f"{format_time(t['memory_ns'] + t['other_ns'])} |"
        )
    return "\n".join(lines) + "\n"


def _plot(history: list[float], path: Path) -> None:
    """Best step time against candidates simulated (skipped without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.step(range(1, len(history) + 1), [h / 1e6 for h in history], where="post")
    ax.set_xlabel("candidates simulated")
    ax.set_ylabel("best step time (ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
