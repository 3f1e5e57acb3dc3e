"""How a model's layers are split over the pipeline's model chunks: evenly, as given, or balanced by time.

A split gives every model chunk (``p · v`` of them, chunk ``k`` on stage ``k mod p``) a run of consecutive layers,
at least one each. Megatron-LM splits evenly and lets the first and last stages differ
(``--decoder-first-pipeline-num-layers``, ``--decoder-last-pipeline-num-layers``: the other stages share the
rest evenly); etsim takes those, an explicit count per chunk, or ``auto``: the split whose slowest chunk is
fastest, timing each chunk's forward and backward of one micro-batch on one GPU with the job's compute model
(its layers, the embedding on chunk 0, the output layer and loss on the last chunk). When the layers do not divide
evenly and nothing is given, the split is ``auto``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from etsim.errors import ConfigError

if TYPE_CHECKING:
    from etsim.producers.training.job import JobSpec

__all__ = ["balanced_split", "layer_times", "split_layers"]


def layer_times(job: JobSpec) -> tuple[list[float], float, float]:
    """Estimated ns of one micro-batch's forward and backward on one GPU: per layer, the embedding, the head."""
    m, lay, eff, gpu, fp = job.model, job.layout, job.efficiency, job.gpu, job.precision
    n = job.micro_batch * m.seq / lay.cp  # tokens per GPU
    t = lay.tp
    passes = {"none": 3.0, "selective": 3.0, "full": 4.0}[job.recompute]  # forward, backward (2x), recomputation
    times = []
    for layer in range(m.layers):
        gemm = passes * 2 * n * m.layer_matmul_weights(layer) / t
        attention = (passes + (1 if job.recompute == "selective" else 0)) * n * m.attention_core_flops(layer) / t
        dim = min(n, m.hidden)
        core = eff.kernel_ns(gpu, fp, "attention", attention, 0.0)
        times.append(eff.kernel_ns(gpu, fp, "gemm", gemm, 0.0, dim) + core)
    embedding = eff.kernel_ns(gpu, fp, "memory", 0.0, 8 * n * m.hidden) if m.vocab else 0.0
    head = 0.0
    if m.vocab:
        head = eff.kernel_ns(gpu, fp, "gemm", 3 * 2 * n * m.hidden * m.vocab / t, 0.0, min(n, m.hidden))
        head += eff.kernel_ns(gpu, fp, "memory", 0.0, 3 * n * m.vocab / t * 4)
    return times, embedding, head


def balanced_split(times: Sequence[float], chunks: int, first: float = 0.0, last: float = 0.0) -> tuple[int, ...]:
    """Consecutive runs of layers, one per chunk, at least one each, whose slowest chunk is fastest.

    *first* and *last* are added to the first and the last chunk (the embedding, the head). Among the best splits,
    the one whose earlier chunks take the most layers (dynamic programming over (chunks, layers); deterministic).
    """
    n = len(times)
    if not 1 <= chunks <= n:
        raise ConfigError(f"{n} layers cannot be split into {chunks} model chunks of at least one layer each")
    prefix = [0.0]
    for x in times:
        prefix.append(prefix[-1] + x)
    inf = float("inf")
    # best[k][i]: the least possible slowest chunk when the first k chunks hold the first i layers.
    best = [[inf] * (n + 1) for _ in range(chunks + 1)]
    cut = [[0] * (n + 1) for _ in range(chunks + 1)]
    best[0][0] = 0.0
    for k in range(1, chunks + 1):
        extra = (first if k == 1 else 0.0) + (last if k == chunks else 0.0)
        for i in range(k, n - (chunks - k) + 1):
            for j in range(i - 1, k - 2, -1):  # (the last chunk holds layers j .. i-1; largest chunk first)
                value = max(best[k - 1][j], prefix[i] - prefix[j] + extra)
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    counts = []
    i = n
    for k in range(chunks, 0, -1):
        j = cut[k][i]
        counts.append(i - j)
        i = j
    return tuple(reversed(counts))


def split_layers(
    job: JobSpec, given: str | Sequence[int] | None, first: int | None, last: int | None, key: str
) -> tuple[int, ...]:
    """The layers of each model chunk for *job* (whose own split is ignored), from the options as given.

    *given*: a count per model chunk, ``"auto"``, or None (even when the layers divide, else ``auto``); *first* /
    *last*: Megatron-LM's first and last stage layer counts (1F1B and GPipe). Errors name *key* and say why.
    """
    layers, pp, chunks = job.model.layers, job.layout.pp, job.layout.pp * job.chunks
    if (first is not None or last is not None) and given is not None:
        raise ConfigError(f"{key}: give a count per chunk or first/last stage layers, not both")
    if first is not None or last is not None:
        if job.chunks > 1:
            raise ConfigError(f"{key}: first/last stage layers need one chunk per stage; give a count per chunk")
        ends = (first or 0) + (last or 0)
        middle = pp - (first is not None) - (last is not None)
        rest = layers - ends
        if middle < 0 or rest < middle or (middle and rest % middle) or (not middle and rest):
            raise ConfigError(
                f"{key}: {layers} layers less the first/last stages' {ends} do not split evenly over the other "
                f"{max(middle, 0)} stages"
            )
        even = rest // middle if middle else 0
        counts = [even] * pp
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        return tuple(counts)
    if isinstance(given, str) or (given is None and layers % chunks):
        if given not in (None, "auto"):
            raise ConfigError(f"{key}: expected 'auto' or comma-separated layers per chunk, got {given!r}")
        times, embedding, head = layer_times(job)
        return balanced_split(times, chunks, embedding, head)
    if given is None:
        return (layers // chunks,) * chunks
    listed = tuple(int(c) for c in given)
    if len(listed) != chunks or sum(listed) != layers or min(listed) < 1:
        raise ConfigError(
            f"{key}: expected {chunks} counts (pp {pp} × {job.chunks} chunks) of at least 1 layer adding up to the "
            f"model's {layers} layers, got {','.join(map(str, listed))} ({len(listed)} counts, {sum(listed)} layers)"
        )
    return listed
