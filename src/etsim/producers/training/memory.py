"""A training job's memory per GPU, term by term: what ``fits_in_memory`` and ``etsim optimise`` judge by.

Per pipeline stage, on one GPU of it (bytes; every term is an exact rational until :func:`stage_memory` rounds):

- **weights** ``2·P`` (BF16, also under FP8: Transformer Engine keeps BF16 weights and FP32 masters), **gradients**
  ``2·P`` (BF16, as the data-parallel collectives of the trace carry them) and **optimizer states** ``12·P`` (Adam:
  FP32 master weights and two moments), P the parameters the GPU holds: its layers' (dense ones split by tensor
  parallelism, experts by expert and expert tensor parallelism), the input embedding on the first model chunk, the
  output layer on the last (a ``gpt`` model's tied embedding has its copy there, as Megatron-LM keeps one); ZeRO-1
  shards the states, ZeRO-2 the gradients too (with one micro-batch: the trace reduces them after the last one, so
  they accumulate whole until then), ZeRO-3 the weights too, over the data-parallel group (``dp·cp``
  ranks; expert weights over their expert-data-parallel group, ``tp·cp·dp/(ep·etp)``). ZeRO-3 adds the two layers
  it holds gathered (the one computing and the one prefetched, the embedding or output layer where larger), its
  experts' weights included; FP8 adds the FP8 copy of each weight and its transpose, which Transformer Engine caches
  across micro-batches.
- **activations**: what each micro-batch leaves stored for its backward (:func:`layer_activations`, Korthikanti et
  al. 2022 §4, generalised to grouped-query attention and gated MLPs), summed over the layers of a model chunk, plus
  the embedding's dropout mask on the first chunk and the output layer's inputs and FP32 logits on the last; the
  peak over the stage's schedule of the chunks forwarded and not yet backwarded (1F1B: ``p − stage`` micro-batches;
  interleaved: more on the early stages; GPipe: all). Full recomputation stores each layer's input only, and adds
  one layer's activations while it is recomputed.
- **workspace** (:data:`WORKSPACE_BYTES`: CUDA context and kernels, cuBLAS/Transformer Engine workspaces, NCCL
  buffers) and **fragmentation** (:data:`FRAGMENTATION` of the tensors above: the caching allocator's unused
  blocks): an allowance, stated rather than measured.

Attention is fused (flash attention) by default: the ``s × s`` score matrix is never stored, only the softmax's
FP32 log-sum-exp per head and token; ``attention: unfused`` stores Korthikanti's ``5·a·s²·b`` (softmax output,
dropout mask and output; ``2·a·s²·b`` for a ``llama`` model, which has no dropout). Not modelled: FP8 activations
(saved inputs are counted in BF16), temporary buffers inside one kernel, the pipeline's send/receive buffers,
the order of an unbalanced router's loads (a MoE layer's routed copies are counted at the busiest expert-parallel
rank's mean load over the micro-batches, whichever micro-batches are in flight).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING

from etsim.producers.training.parallel import Op, schedule
from etsim.producers.training.routing import busiest_load

if TYPE_CHECKING:
    from etsim.producers.training.job import JobSpec

__all__ = ["FRAGMENTATION", "WORKSPACE_BYTES", "layer_activations", "peak_held", "stage_memory"]

#: The allowance for the CUDA context and kernel images (~0.5 GiB), cuBLAS and Transformer Engine workspaces
#: (~0.5 GiB) and NCCL's communicator buffers (~0.5 GiB).
WORKSPACE_BYTES = 3 << 29
#: The caching allocator's fragmentation, as a share of the tensors' memory.
FRAGMENTATION = Fraction(1, 20)
#: Bytes per parameter: BF16 weights, BF16 gradients, Adam's FP32 master weights and two moments.
WEIGHT_BYTES, GRADIENT_BYTES, STATE_BYTES = 2, 2, 12
#: FP8 weight copies Transformer Engine caches: the weight and its transpose, one byte each.
FP8_COPY_BYTES = 2


def layer_activations(job: JobSpec, layer: int) -> dict[str, Fraction]:
    """What one micro-batch leaves stored in *layer* for its backward on one GPU, by term (bytes).

    Elements are 2 bytes, dropout masks 1 (``gpt`` models only: ``llama`` ones have no dropout), softmax
    statistics and router probabilities 4 (FP32). Without sequence parallelism the norms' inputs, the blocks'
    inputs and the dropout masks are whole on every tensor-parallel rank; everything else is split by ``tp``.
    For a ``gpt`` model with ``ffn = 4h`` these are Korthikanti et al.'s ``sbh(10 + 24/t + 5as/(ht))`` (unfused),
    ``sbh/t·(34 + 5as/h)`` (with SP), ``sbh(10 + 24/t)`` and ``34·sbh/t`` (selective), ``2sbh`` and ``2sbh/t``
    (full).
    """
    m, lay = job.model, job.layout
    s, b, h, t = Fraction(m.seq, lay.cp), job.micro_batch, m.hidden, lay.tp
    whole = t if job.sp else 1  # the divisor of what tensor parallelism alone leaves whole
    sbh = s * b * h
    if job.recompute == "full":
        return {"layer input": 2 * sbh / whole}
    dropout = m.arch == "gpt"
    # latent attention keeps the up-projected query, key and value, and the latents they came from
    latents = m.q_lora_rank + m.kv_lora_rank + m.rope_head_dim
    qkv = 2 * m.q_hidden + m.o_hidden + latents if m.mla else m.q_hidden + 2 * m.kv_hidden
    terms = {
        "norm inputs": 4 * sbh / whole,
        "attention input": 2 * sbh / whole,
        "query, key, value": 2 * s * b * qkv / t,
        "attention output": 2 * s * b * m.o_hidden / t,
    }
    if job.recompute == "selective":
        pass  # the attention core is recomputed: nothing of it is kept
    elif job.attention == "unfused":
        terms["attention scores"] = (5 if dropout else 2) * m.heads * s * m.keys_attended(layer) * b / t
    else:
        terms["softmax statistics"] = 4 * m.heads * s * b / t
    inner_factor = 6 if m.gated else 4  # SwiGLU keeps its gate, up and product; GeLU its input and output
    if m.is_moe(layer):
        # each token's expert inputs, inner activations and outputs: its routed copies (as many as the busiest
        # expert-parallel rank receives under an unbalanced router) and its shared experts'
        load = Fraction(busiest_load(job.routing, m.experts, lay.ep, job.micro_batches, layer))
        copies = m.top_k * load + m.shared_experts
        terms["router"] = (2 * sbh + 4 * s * b * m.experts) / t
        # (expert tensor parallelism keeps the routed copies' inputs gathered over the etp ranks of an expert)
        terms["expert inputs and outputs"] = (copies * 4 + m.top_k * load * 2 * (lay.etp - 1)) * sbh / t
        terms["expert inner"] = copies * inner_factor * s * b * m.expert_ffn / t
    else:
        terms["mlp input"] = 2 * sbh / whole
        terms["mlp inner"] = inner_factor * s * b * m.ffn / t
    if dropout:
        terms["dropout masks"] = 2 * sbh / whole
    return terms


def _chunk_activations(job: JobSpec, chunk: int) -> Fraction:
    """One micro-batch's stored activations in model *chunk* (its layers, and the embedding or the head)."""
    m, lay = job.model, job.layout
    total = sum((sum(layer_activations(job, layer).values(), Fraction(0)) for layer in job.layers_of(chunk)),
                Fraction(0))  # fmt: skip
    sbh = Fraction(m.seq, lay.cp) * job.micro_batch * m.hidden
    whole = lay.tp if job.sp else 1
    if chunk == 0 and m.vocab and m.arch == "gpt":
        total += sbh / whole  # the embedding's dropout mask
    if chunk == lay.pp * job.chunks - 1 and m.vocab:  # the final norm's and the output layer's inputs, FP32 logits
        total += 4 * sbh / whole + 4 * Fraction(m.seq, lay.cp) * job.micro_batch * m.vocab / lay.tp
    return total


def peak_held(ops: list[Op], weight: Callable[[Op], Fraction]) -> Fraction:
    """The most a schedule holds at once: the *weight* of each forwarded chunk until its backward."""
    held = peak = Fraction(0)
    for op in ops:
        held += weight(op) if op.kind == "F" else -weight(op)
        peak = max(peak, held)
    return peak


def _stage_parameters(job: JobSpec, stage: int) -> tuple[Fraction, Fraction, list[tuple[Fraction, Fraction]]]:
    """Parameters one GPU of *stage* holds: (dense, expert, each layer's (dense, expert)).

    The layers' list holds the embedding and the output layer where the stage has them, as ZeRO-3 gathers them.
    """
    m, lay = job.model, job.layout
    dense = expert = Fraction(0)
    layers: list[tuple[Fraction, Fraction]] = []
    last = lay.pp * job.chunks - 1
    for k in range(job.chunks):
        chunk = k * lay.pp + stage
        for layer in job.layers_of(chunk):
            total = m.layer_parameters(layer)
            experts = m.expert_weights(layer)
            d = Fraction(total - experts, lay.tp)  # (as the trace splits them: experts by ep·etp, the rest by tp)
            e = Fraction(experts, lay.ep * lay.etp)
            dense, expert = dense + d, expert + e
            layers.append((d, e))
        if m.vocab and chunk == 0:
            embedding = Fraction(m.input_embedding_parameters(), lay.tp)
            dense += embedding
            layers.append((embedding, Fraction(0)))  # (ZeRO-3 gathers it as a layer: _zero3_gather_weights)
        if m.vocab and chunk == last and (chunk != 0 or m.arch == "llama"):  # (a tied embedding: its copy)
            head = Fraction(m.vocab * m.hidden, lay.tp) + (m.hidden if m.arch == "llama" else 0)
            dense += head
            layers.append((head, Fraction(0)))
    return dense, expert, layers


def stage_memory(job: JobSpec, stage: int) -> dict[str, float]:
    """One GPU of pipeline *stage*: bytes per term (see the module docstring) and their ``total``."""
    lay = job.layout
    dense, expert, per_layer = _stage_parameters(job, stage)
    shard, expert_shard = lay.dense_copies, lay.expert_copies

    def held(per_param: int, sharded: bool) -> Fraction:
        return per_param * (dense / shard + expert / expert_shard if sharded else dense + expert)

    terms: dict[str, Fraction] = {
        "weights": held(WEIGHT_BYTES, job.zero >= 3),
        # (the trace reduces gradients after the last micro-batch, as Megatron-LM and FSDP's no_sync do: until
        # then they accumulate whole, so ZeRO-2/3 hold them sharded only when there is one micro-batch)
        "gradients": held(GRADIENT_BYTES, job.zero >= 2 and job.micro_batches == 1),
        "optimizer states": held(STATE_BYTES, job.zero >= 1),
    }
    if job.zero >= 3 and (shard > 1 or expert_shard > 1):  # (a layer's experts are gathered as its dense weights)
        gathered = [d * (shard > 1) + e * (expert_shard > 1) for d, e in per_layer]
        terms["gathered layers"] = 2 * WEIGHT_BYTES * max(gathered, default=Fraction(0))
    if job.precision == "fp8":
        terms["fp8 weight copies"] = FP8_COPY_BYTES * (dense + expert)
    ops = schedule(job.schedule, lay.pp, stage, job.micro_batches, job.chunks)
    per_chunk = {k: _chunk_activations(job, k * lay.pp + stage) for k in range(job.chunks)}
    terms["activations"] = peak_held(ops, lambda op: per_chunk[op.chunk])
    if job.recompute == "full":  # one layer's activations while it is recomputed and backwarded
        full = job.with_recompute("none")
        layers = [layer for k in range(job.chunks) for layer in job.layers_of(k * lay.pp + stage)]
        terms["recomputed layer"] = max((sum(layer_activations(full, la).values(), Fraction(0)) for la in layers),
                                        default=Fraction(0))  # fmt: skip
    tensors = sum(terms.values(), Fraction(0))
    terms["fragmentation"] = tensors * FRAGMENTATION
    terms["workspace"] = Fraction(WORKSPACE_BYTES)
    out = {name: float(value) for name, value in terms.items()}
    out["total"] = float(sum(terms.values(), Fraction(0)))
    return out
