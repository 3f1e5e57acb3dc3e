"""The job's JSON a training trace carries for the step report.

Under :data:`~etsim.producers.training.describe.TRAINING_ATTR`: the model, the layout, FLOPs per iteration, memory
per stage and the router's draws.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from etsim.producers.training.memory import stage_memory
from etsim.producers.training.routing import load_summary

if TYPE_CHECKING:
    from etsim.producers.training.job import JobSpec

__all__ = ["job_info"]


def job_info(job: JobSpec, roles: dict[str, str]) -> str:
    """The JSON the step report reads (:data:`TRAINING_ATTR`)."""
    lay, model = job.layout, job.model
    sequences = job.global_batch
    model_flops: float = model.model_flops(sequences)
    recompute_flops: float = 0
    if job.recompute == "full":
        recompute_flops = sequences * model.seq * (model.forward_flops_per_token() - 2 * model.hidden * model.vocab)
    elif job.recompute == "selective":
        recompute_flops = sequences * model.seq * sum(model.attention_core_flops(i) for i in range(model.layers))
    routing = load_summary(job.routing, model, lay.ep, job.micro_batches)
    # the FLOPs the experts do not run: the routed copies a capacity drops, in every pass that runs them
    dropped = routing.get("dropped_copies", 0.0) * sum(model.is_moe(i) for i in range(model.layers))
    per_copy = 2 * model.hidden * model.expert_ffn * ((2 if model.gated else 1) + 1)  # both GEMMs, forward
    dropped_flops = dropped * sequences * model.seq * model.top_k * per_copy  # (one forward pass)
    # Model FLOPs count what the model computes: not the copies dropped (an MFU of 504% counted them at capacity
    # 0.05); the hardware also runs them again when it recomputes the forward pass.
    if dropped_flops:  # (else the integers stay integers in the trace's JSON)
        model_flops -= 3 * dropped_flops
        recompute_flops -= dropped_flops if job.recompute == "full" else 0
    stages = [stage_memory(job, stage) for stage in range(lay.pp)]
    largest = max(range(lay.pp), key=lambda stage: stages[stage]["total"])
    return json.dumps(
        {
            "model": model.name,
            "parameters": model.parameters(),
            "gpus": lay.ranks,
            "gpu": job.gpu.name,
            "precision": job.precision,
            # (MFU and HFU are of the dense 16-bit peak, as the field reports them, FP8 jobs too: an FP8 job's
            # over the FP8 peak read lower than the same job's in BF16, though it ran 26% faster)
            "peak_flops_per_gpu": job.gpu.peak("bf16"),
            "gpu_memory_bytes": job.gpu.memory,
            "tokens_per_iteration": sequences * model.seq,
            "model_flops": model_flops,
            "hardware_flops": model_flops + recompute_flops,
            "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep, "sp": job.sp,
            **({"etp": lay.etp} if lay.etp > 1 else {}),
            "schedule": job.schedule, "virtual_stages": job.chunks, "micro_batches": job.micro_batches,
            "micro_batch": job.micro_batch, "global_batch": job.global_batch, "zero": job.zero,
            "recompute": job.recompute,
            "groups": roles,
            "activation_bytes_in_flight": [terms["activations"] for terms in stages],
            "memory_bytes_per_gpu": [terms["total"] for terms in stages],
            "memory_terms": {"stage": largest, **stages[largest]},
            "attention": job.attention,
            "pipeline_layers": list(job.chunk_layers),
            **routing,
        },
        sort_keys=True,
    )  # fmt: skip
