"""What ``etsim optimise`` writes (:func:`write_outputs`): the best job, its report, convergence and timelines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from etsim.experiment.points import PointSpec
from etsim.files import parse_yaml, read_text, write_text
from etsim.simulation.inputs import point_workload
from etsim.tuning.optimise import OptimiseResult, _recorded_run

__all__ = ["write_outputs"]


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
    (out / "workload.comm_groups.json").unlink(missing_ok=True)  # (an earlier search's, in a reused directory)
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
        topology = parse_yaml(read_text(spec.topology, "topology file"), spec.topology) or {}
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
