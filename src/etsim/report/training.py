"""The step report of a generated training job: iteration time, tokens/s, TFLOP/s per GPU, MFU, bubble, exposure.

The ``transformer`` generator writes the job's description into every rank's GlobalMetadata (attribute
``etsim_training``: model and hardware FLOPs per iteration, tokens, GPUs, the GPU's peak rate, the parallel
layout, which ``pg_name`` is which parallelism). From it and a recorded run:

- ``iteration_ns``: the run's finish time; ``tokens_per_s`` = tokens per iteration / iteration time;
- ``model_tflops_per_gpu`` = model FLOPs / (iteration time · GPUs) (Narayanan et al.: FLOPs the model needs, no
  recomputation); ``hardware_tflops_per_gpu`` counts the FLOPs executed, recomputation included;
- ``mfu`` and ``hfu``: those rates over the GPU's dense 16-bit peak (FP8 jobs too, as the field reports them);
- ``exposed_comm_ns``: per parallelism (``tp``, ``pp``, ``dp``, ``ep``, ``cp``; expert gradients count as ``dp``),
  the mean over ranks of the time its communication is in flight while no compute runs; ``pp`` is the wait in
  pipeline SEND/RECV and so includes the pipeline bubble;
- ``bubble_fraction``: mean over ranks of idle / busy, where busy is compute plus exposed non-pipeline
  communication and idle is the rest of the iteration: with free communication and equal stages it is the
  reference's ``(p − 1) / (v · m)``;
- ``peak_activation_bytes`` per stage (the most the schedule holds of what each micro-batch stores for its
  backward) and the estimated ``memory_bytes_per_gpu`` per stage, with ``memory_terms`` (the largest stage's
  estimate term by term: :mod:`etsim.producers.training.memory`);
- ``stage_compute_ns``: per pipeline stage, the mean compute time of its GPUs, and ``pipeline_layers``: the layers
  of each model chunk (an uneven split shows here);
- ``fits_in_memory``: whether the largest stage's estimate fits in the GPU's memory (None when either is unknown);
  a job that does not fit is also warned about.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from etsim.errors import warn
from etsim.producers.training.describe import TRAINING_ATTR, training_job
from etsim.report.groups import exposure_by_role
from etsim.units import format_size, format_time

if TYPE_CHECKING:
    from etsim.chakra.graph import Trace
    from etsim.report.record import RunRecorder
    from etsim.report.result import Result

__all__ = [
    "ROLES",
    "TRAINING_ATTR",
    "gpu_clash",
    "training_columns",
    "training_info",
    "training_lines",
    "training_report",
]

#: The memory estimate's terms, in the order the report prints them (:mod:`etsim.producers.training.memory`).
MEMORY_TERMS = ("weights", "gradients", "optimizer states", "gathered layers", "fp8 weight copies", "activations",
                "recomputed layer", "fragmentation", "workspace")  # fmt: skip

#: What a job with an unbalanced router says of it (:mod:`etsim.producers.training.routing`).
ROUTING = ("expert_imbalance", "capacity_factor", "routing_seed", "expert_load_peak", "dropped_copies")

#: Groups counted with another parallelism: expert gradients as data-parallel communication, the gathers of expert
#: tensor parallelism as tensor-parallel, a tied embedding's gradient sum between the end stages as pipeline.
COUNTED_AS = {"edp": "dp", "etp": "tp", "emb": "pp"}

#: The parallelisms the report splits exposed communication by.
ROLES = ("tp", "pp", "dp", "ep", "cp")


def training_info(traces: Sequence[Trace]) -> dict[str, Any] | None:
    """The job description of a generated training workload, or None for any other workload."""
    return training_job(traces)


def gpu_clash(info: dict[str, Any], hardware: Any, topology: str) -> str | None:
    """Why a training job's compute, timed on its ``--gpu``, is not the cluster's GPU (None when they agree).

    The job names a compute preset (``h100-sxm``), a ``gpu_cluster`` its GPU generation (``h100``).
    """
    cluster = getattr(getattr(hardware, "gpu", None), "name", None)
    if cluster is None or str(info.get("gpu", "")).split("-")[0] == cluster:
        return None
    return (
        f"the job's compute was timed on {info.get('gpu')} (its --gpu), but topology {topology} has {cluster} "
        "GPUs: the step report's times and MFU are the former's"
    )


#: The job's description the report repeats (its ``job`` block).
JOB_KEYS = ("model", "gpus", "gpu", "precision", "tp", "pp", "dp", "cp", "ep", "etp", "sp", "schedule",
            "virtual_stages", "micro_batches", "global_batch", "zero", "recompute")  # fmt: skip


def training_report(
    info: dict[str, Any],
    result: Result,
    recorder: RunRecorder | None,
    *,
    comm_streams: int = 0,
    own_ranks: Sequence[int] | None = None,
    start_ns: float = 0.0,
) -> dict[str, Any]:
    """The ``training`` section of *result* (see the module docstring).

    *comm_streams* is the run's ``resources.comm_streams``: with one stream, the job's communication of different
    parallelisms ran one operation at a time, which the report warns about. A job that shares its run with others
    (``etsim cluster``) gives the ranks of the run that are its own, in its rank order (*own_ranks*: *result* holds
    those ranks only), and when it started (*start_ns*: its iteration ends at ``result.finish_ns``).
    """
    iteration = result.finish_ns - start_ns
    seconds = iteration * 1e-9
    gpus = info["gpus"]
    peak = info["peak_flops_per_gpu"]
    model_rate = info["model_flops"] / seconds / gpus if seconds > 0 else 0.0
    hardware_rate = info["hardware_flops"] / seconds / gpus if seconds > 0 else 0.0
    roles = {str(k): COUNTED_AS.get(v, v) for k, v in info.get("groups", {}).items()}
    exposed = dict.fromkeys(ROLES, 0.0)
    bubble = 0.0
    if recorder is not None and recorder.engine is not None:
        per_role, others = exposure_by_role(recorder, roles)
        if own_ranks is not None:  # (the job's own ranks, in its order)
            per_role = {role: [values[r] for r in own_ranks] for role, values in per_role.items()}
            others = [others[r] for r in own_ranks]
        for role, values in per_role.items():
            if role in exposed:
                exposed[role] = sum(values) / len(values)
        fractions = []
        for r, rank in enumerate(result.ranks):
            busy = rank.compute_ns + others[r]
            fractions.append(max(iteration - busy, 0.0) / busy if busy > 0 else 0.0)
        bubble = sum(fractions) / len(fractions) if fractions else 0.0
    used = {role for role in roles.values()} | ({"pp"} if info.get("pp", 1) > 1 else set())
    notes = []
    if comm_streams == 1 and len(used) > 1:
        notes.append(
            "training job: its communication of different parallelisms ran one operation at a time "
            "(resources.comm_streams: 1), so data-parallel gradient reductions delayed tensor-parallel and pipeline "
            "transfers; Megatron-LM overlaps them on separate streams: a system file with "
            "'resources: {comm_streams: 0}' models that"
        )
    memory = info.get("memory_bytes_per_gpu", [])
    capacity = info.get("gpu_memory_bytes")
    fits = max(memory) <= capacity if memory and capacity else None
    if memory and capacity and not fits:
        stage = max(range(len(memory)), key=lambda s: memory[s])
        notes.append(
            f"training job: stage {stage} needs about {format_size(max(memory))} per GPU (weights, gradients, "
            f"optimizer state, activations), more than the {info.get('gpu')}'s {format_size(capacity)}; "
            "the job would not fit (more tensor/pipeline parallelism, ZeRO or recomputation reduce it)"
        )
    for note in notes:  # issued now and kept in the result's warnings (the run's own are collected already)
        warn(note)
        result.warnings.append(note)
    return {
        "iteration_ns": iteration,
        "tokens_per_s": info["tokens_per_iteration"] / seconds if seconds > 0 else 0.0,
        "model_tflops_per_gpu": model_rate / 1e12,
        "hardware_tflops_per_gpu": hardware_rate / 1e12,
        "mfu": model_rate / peak,
        "hfu": hardware_rate / peak,
        "bubble_fraction": bubble,
        "exposed_comm_ns": exposed,
        "peak_activation_bytes": info.get("activation_bytes_in_flight", []),
        "memory_bytes_per_gpu": memory,
        "memory_terms": info.get("memory_terms", {}),
        "fits_in_memory": fits,
        "stage_compute_ns": _stage_compute(info, result),
        "pipeline_layers": info.get("pipeline_layers", []),
        **({"routing": {k: info[k] for k in ROUTING if k in info}} if "expert_load_peak" in info else {}),
        "job": {k: info[k] for k in JOB_KEYS if k in info},
    }  # fmt: skip


def training_lines(report: dict[str, Any]) -> list[str]:
    """The report as table lines."""
    job = report.get("job", {})
    layout = " ".join(f"{k}={job[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "etp") if k in job)
    lines = [
        f"training step ({job.get('model', '?')} on {job.get('gpus', '?')} x {job.get('gpu', '?')}, {layout}, "
        f"{job.get('schedule', '?')}, {job.get('micro_batches', '?')} micro-batches):",
        f"  iteration {format_time(report['iteration_ns'])}   {report['tokens_per_s']:,.0f} tokens/s",
        f"  TFLOP/s per GPU: model {report['model_tflops_per_gpu']:.1f}, "
        f"hardware {report['hardware_tflops_per_gpu']:.1f}   "
        f"MFU {100 * report['mfu']:.1f}%   HFU {100 * report['hfu']:.1f}%"
        + (" (of the BF16 peak)" if job.get("precision") == "fp8" else ""),
        f"  pipeline bubble {100 * report['bubble_fraction']:.1f}% of busy time",
        "  exposed comm (mean per GPU): "
        + ", ".join(f"{role} {format_time(ns)}" for role, ns in report["exposed_comm_ns"].items()),
    ]
    stages = report.get("stage_compute_ns") or []
    if len(stages) > 1:
        layers = report.get("pipeline_layers") or []
        pp = len(stages)
        per_stage = [sum(layers[k] for k in range(s, len(layers), pp)) for s in range(pp)] if layers else []
        slowest = max(range(pp), key=lambda s: stages[s])
        lines.append(
            f"  compute per stage (mean per GPU): {format_time(min(stages))} to {format_time(max(stages))}, "
            f"slowest stage {slowest}" + (f" ({per_stage[slowest]} layers)" if per_stage else "")
        )
    routing = report.get("routing")
    if routing:
        capacity = routing.get("capacity_factor")
        lines.append(
            f"  experts: busiest expert-parallel rank {routing['expert_load_peak']:.3f}x the mean load (imbalance "
            f"{routing['expert_imbalance']:g}, seed {routing['routing_seed']})"
            + (f", {100 * routing['dropped_copies']:.2f}% of copies dropped (capacity factor {capacity:g})"
               if capacity is not None else ", dropless")
        )  # fmt: skip
    if report.get("memory_bytes_per_gpu"):
        terms = report.get("memory_terms") or {}
        where = f"stage {terms['stage']}" if "stage" in terms else "largest stage"
        lines.append(f"  memory per GPU (estimate, {where}): {format_size(max(report['memory_bytes_per_gpu']))}")
        shown = [f"{name} {format_size(terms[name])}" for name in MEMORY_TERMS if terms.get(name)]
        if shown:
            lines.append("    " + ", ".join(shown))
    return lines


def _stage_compute(info: dict[str, Any], result: Result) -> list[float]:
    """Per pipeline stage, the mean compute time of its GPUs (ranks in Megatron-LM's order: the stage slowest)."""
    pp = int(info.get("pp", 1))
    per_stage = len(result.ranks) // pp if pp else 0
    if pp < 1 or not per_stage or per_stage * pp != len(result.ranks):
        return []
    return [sum(r.compute_ns for r in result.ranks[s * per_stage:(s + 1) * per_stage]) / per_stage
            for s in range(pp)]  # fmt: skip


def training_columns(report: dict[str, Any]) -> dict[str, float]:
    """The experiment columns of a step report (``iteration_ns`` … ``exposed_<role>_ns``)."""
    out = {k: float(report[k]) for k in ("iteration_ns", "tokens_per_s", "model_tflops_per_gpu",
                                          "hardware_tflops_per_gpu", "mfu", "hfu", "bubble_fraction")}  # fmt: skip
    for role in ROLES:
        out[f"exposed_{role}_ns"] = float(report["exposed_comm_ns"].get(role, 0.0))
    return out
