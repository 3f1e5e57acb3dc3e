"""``etsim optimise``: search workload-preserving rewrites of a job for a faster step (:mod:`etsim.tuning.optimise`)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from etsim.errors import ConfigError, warn
from etsim.experiment.engines import ENGINES
from etsim.experiment.points import PointSpec
from etsim.experiment.results import LOCK
from etsim.experiment.spec import load_experiment
from etsim.files import directory_locked, make_parent, write_text
from etsim.options import add_arguments, arguments_given, flag_name, parse_options
from etsim.tuning.optimise import Candidate, OptimiseRequest, OptimiseResult, move_kinds, optimise
from etsim.tuning.optimise_outputs import write_outputs
from etsim.units import format_time

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``optimise`` to the ``etsim`` parser."""
    p = subparsers.add_parser(
        "optimise",
        help="search workload-preserving rewrites (parallelism, schedule, buckets, algorithms) for a faster step",
        description="Start from a job (an experiment-style file with workload, topology, model and system, or a "
        "workload with --topology/--system), simulate one documented rewrite at a time from the best so far, "
        "most promising first by where the step's time goes, and keep the fastest that fits in GPU memory. "
        "Writes the best job's traces, system and topology (etsim run reproduces its time), report.md/json, "
        "convergence.csv/png and timelines of baseline and best. See docs/optimise.md.",
    )
    p.add_argument("job", help="an experiment-style YAML of one point, or a workload (trace prefix or directory)")
    p.add_argument("--topology", help="topology YAML (with a workload)")
    p.add_argument("--system", help="system YAML (with a workload)")
    p.add_argument("--model", help="network model (with a workload; default: the topology's, else flow)")
    # --budget, --time, --jobs, --moves, --engine: declared once, on OptimiseRequest.
    add_arguments(p, OptimiseRequest)
    p.add_argument("-o", "--output", required=True, help="output directory")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the best time")
    p.set_defaults(handler=cmd_optimise)


def _job_file(args: argparse.Namespace, tmp: str) -> Path:
    """The job as an experiment file: the one given, or one written for a workload and its flags."""
    job = Path(args.job)
    if job.suffix in (".yaml", ".yml") and not job.exists():
        raise ConfigError(f"{job}: no such job file")
    if job.suffix in (".yaml", ".yml") and job.is_file():
        if args.topology or args.system or args.model:
            raise ConfigError(f"{job}: a job file names its own topology, system and model; drop the flags")
        return job
    if args.topology is None:
        raise ConfigError("--topology is needed with a workload (or give a job file)")
    data: dict[str, object] = {"workload": os.path.abspath(args.job), "topology": os.path.abspath(args.topology)}
    if args.system:
        data["system"] = os.path.abspath(args.system)  # (the experiment loader reads it and names it in errors)
    if args.model:
        data["model"] = args.model
    path = Path(tmp) / "job.yaml"
    write_text(path, yaml.safe_dump(data))
    return path


def _search(
    args: argparse.Namespace, request: OptimiseRequest, spec: PointSpec, out: Path
) -> tuple[OptimiseResult, dict[str, Any]]:
    """Run the search from *spec*, showing each candidate (unless quiet); write its outputs to *out*."""
    cache = out / "candidates.jsonl"

    def show(c: Candidate) -> None:
        if not args.quiet:
            what = "; ".join(m.describe() for m in c.path) or "the job as given"
            when = format_time(c.iteration_ns) if c.status == "ok" else f"failed ({c.error.splitlines()[0]})"
            fit = "" if c.fits else " (does not fit in GPU memory)"
            print(f"  {when}{fit}: {what}", file=sys.stderr)

    try:
        result = optimise(
            spec,
            budget=request.budget,
            seconds=request.seconds,
            engine=request.engine,
            jobs=request.jobs,
            cache=cache,
            on_candidate=show,
            kinds=request.moves,
        )
    except KeyboardInterrupt:
        kept = sum(1 for line in cache.read_text().splitlines() if '"key"' in line) if cache.exists() else 0
        what = f"{kept} candidate{'s' if kept != 1 else ''}"
        print(f"etsim: {what} finished kept in {cache}: the same command resumes", file=sys.stderr)
        raise
    return result, write_outputs(result, out)


def cmd_optimise(args: argparse.Namespace) -> int:
    """Search, write the outputs, print the gain."""
    request = OptimiseRequest(**parse_options(OptimiseRequest, arguments_given(args, OptimiseRequest), key=flag_name,
                                              text=True))  # fmt: skip
    ENGINES.get(request.engine)  # (an unknown engine is named before anything runs)
    with tempfile.TemporaryDirectory() as tmp:
        path = _job_file(args, tmp)
        try:
            experiment = load_experiment(path)
        except ConfigError as exc:
            if not path.is_relative_to(tmp):
                raise
            # (the job this command wrote for the workload and its flags: the message names those, not the file)
            raise ConfigError(str(exc).replace(f"{path}: ", "", 1)) from None
        if len(experiment.points) != 1:
            raise ConfigError(
                f"{args.job}: optimise starts from one configuration; the file sweeps {len(experiment.points)} points"
            )
        valid = move_kinds(experiment.points[0].spec)
        unknown = sorted((request.moves or frozenset()) - set(valid))
        if unknown:
            raise ConfigError(f"--moves: unknown kind {unknown[0]!r}; valid: {', '.join(valid)}")
        out = Path(args.output)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"-o {out}: a file is there, not a directory; choose another output directory")
        make_parent(out / LOCK)
        # Held while the search writes here: a second search writing here would run every candidate twice.
        with directory_locked(out, "optimise run", LOCK):
            result, report = _search(args, request, experiment.points[0].spec, out)

    if args.quiet:
        print(format_time(report["best_ns"]))
        return 0
    print(
        f"baseline {format_time(report['baseline_ns'])}, best {format_time(report['best_ns'])} "
        f"({100 * report['gain']:.1f}% faster) after {report['candidates']} candidates"
    )
    if result.timed_out:
        print(f"the time limit ended the search: the best of {report['candidates']} candidates is shown")
    if not report["best_fits"]:
        warn(
            "no candidate fits in GPU memory (the generator's estimate), the job as given included: the best "
            "shown is the job as given; more GPUs, a smaller model or a larger GPU preset are needed"
        )
    for a in report["accepted"]:
        print(f"  accepted: {a['move']}  ({format_time(a['before_ns'])} -> {format_time(a['after_ns'])})")
    print(f"wrote {out}/: report.md, report.json, workload.*.et, system.yaml, topology.yaml, convergence.csv")
    print(f"reproduce: etsim run {out}/workload --system {out}/system.yaml --topology {out}/topology.yaml")
    return 0
