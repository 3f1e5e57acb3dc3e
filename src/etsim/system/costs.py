"""Cost models of the work an NPU does itself: compute, memory accesses and reductions.

The walker asks these for a duration and schedules one event; it holds no cost formulas itself.
All times are ns. The settings come from :class:`~etsim.system.config.SystemConfig`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from etsim.chakra.graph import NodeType, Trace
from etsim.errors import SimulationError
from etsim.system.config import SystemConfig

__all__ = ["CostModel", "compute_scale", "window_factor"]


def compute_scale(
    config: SystemConfig, rank: int, nodes: int
) -> tuple[float, list[float] | None, tuple[tuple[float, float, float], ...], float]:
    """What multiplies the compute times of *rank*: its straggler factor, with noise one factor per node, its windows.

    - ``compute_slowdown[rank]`` (1.0 when the rank has none: times stay exact);
    - with ``compute_jitter`` σ > 0, ``numpy.random.default_rng([jitter_seed, rank]).lognormal(−σ²/2, σ, nodes)``
      (mean 1), node *j* of the rank's trace taking factor *j*; else None;
    - the rank's ``slowdown_windows`` as ``(from_ns, until_ns, factor)`` (a node starting inside one is slowed);
    - ``compute_delay[rank]``: ns added to each compute node after the factors (0.0 when the rank has none).
    """
    jitter = None
    if config.compute_jitter > 0:
        import numpy as np  # (only runs with noise pay for numpy here)

        sigma = config.compute_jitter
        jitter = np.random.default_rng([config.jitter_seed, rank]).lognormal(-sigma * sigma / 2, sigma, nodes).tolist()
    windows = tuple((start, until, factor) for r, start, until, factor in config.slowdown_windows if r == rank)
    return config.compute_slowdown.get(rank, 1.0), jitter, windows, config.compute_delay.get(rank, 0.0)


def window_factor(windows: tuple[tuple[float, float, float], ...], now: float) -> float:
    """The product of the factors of the ``(from_ns, until_ns, factor)`` windows that hold at *now*."""
    scale = 1.0
    for start, until, factor in windows:
        if start <= now < until:
            scale *= factor
    return scale


class CostModel:
    """Durations of COMP, MEM_LOAD/MEM_STORE and reduction nodes under one configuration.

    - COMP: a roofline ``max(num_ops / peak_flops, tensor_size / memory_bandwidth)`` for GPU ops
      when both rates are configured and the node has ``num_ops`` and ``tensor_size`` (truncated to whole ns
      with ``integer_ns``, computed as ``num_ops / min(bandwidth · num_ops / tensor_size, peak)``); otherwise the
      replayed ``duration_micros``, raised to ``min_compute_ns``.
    - MEM_LOAD / MEM_STORE: ``remote_memory_latency + tensor_size / remote_memory_bandwidth``.
    - Reduction of m bytes: ``passes · m / reduction_bandwidth`` (free without a bandwidth), with
      ``m / reduction_bandwidth`` truncated to whole ns first when ``integer_ns`` is set.

    Args:
        config: the system parameters.
    """

    __slots__ = ("_bandwidth", "_config", "_integer", "_min_compute", "_passes", "_roofline")

    def __init__(self, config: SystemConfig) -> None:
        self._config = config
        self._bandwidth = config.reduction_bandwidth
        self._passes = float(config.reduction_passes)
        self._integer = config.integer_ns
        self._min_compute = config.min_compute_ns
        self._roofline = bool(config.peak_flops and config.memory_bandwidth)

    def reduction_time(self, nbytes: float) -> float:
        """Ns of a reduction of *nbytes* bytes."""
        bw = self._bandwidth
        if not bw:
            return 0.0
        if self._integer:
            return self._passes * math.floor(nbytes / bw)
        if self._passes == 1.0:
            return nbytes / bw
        return self._passes * (nbytes / bw)

    def compute_time(self, trace: Trace, j: int) -> float:
        """Ns of COMP node *j* of *trace* (see the class docstring)."""
        cfg = self._config
        if self._roofline and not trace.is_cpu_op[j]:
            ops, size = trace.num_ops[j], trace.tensor_size[j]
            if ops is not None and size:
                if self._integer:
                    if ops <= 0:
                        raise SimulationError(
                            f"{trace.describe(j)}: num_ops {ops} with tensor_size {size} under the roofline with "
                            "whole-ns times: the time is computed as num_ops / (bandwidth · num_ops / tensor_size), "
                            "0/0 for this node (the reference simulator never finishes it); give it num_ops >= 1"
                        )
                    # Whole ns, computed in seconds through the operational intensity (the reference simulator's
                    # arithmetic, so the truncation falls where its does).
                    rate = min(cfg.memory_bandwidth * 1e9 * (ops / size), cfg.peak_flops * 1e9)  # type: ignore[operator]
                    return float(math.floor(ops / rate * 1e9))
                return max(ops / cfg.peak_flops, size / cfg.memory_bandwidth)  # type: ignore[operator]
        duration = trace.duration_micros[j] * 1000.0
        if duration < self._min_compute:
            return self._min_compute
        return duration

    def roofline_notes(self, traces: Sequence[Trace]) -> list[str]:
        """What lets compute take less time than the roofline allows (warnings), when the roofline is configured.

        - GPU COMP nodes without ``num_ops`` or ``tensor_size``: their recorded durations (0 µs ones take
          ``min_compute_ns``), which nothing relates to the peak;
        - more than one compute stream: each runs its nodes at the full peak, so concurrent nodes exceed it;
        - straggler factors below 1 (``compute_slowdown``, ``slowdown_windows``): a GPU faster than its peak.
        """
        if not self._roofline:
            return []
        cfg, comp, notes = self._config, NodeType.COMP_NODE, []
        missing, example = 0, ""
        for trace in traces:
            for j, (kind, cpu, ops, size) in enumerate(
                zip(trace.types, trace.is_cpu_op, trace.num_ops, trace.tensor_size, strict=True)
            ):
                if kind == comp and not cpu and (ops is None or not size):
                    missing += 1
                    example = example or trace.describe(j)
        if missing:
            notes.append(
                f"{missing:,} GPU COMP node(s) have no num_ops or tensor_size (e.g. {example}): they take their "
                "recorded duration_micros"
                + (f" (at least {self._min_compute:g} ns)" if self._min_compute else "")
                + ", not a roofline time; give both for one"
            )
        if cfg.resources.compute_streams != 1:
            streams = "unlimited" if cfg.resources.compute_streams == 0 else str(cfg.resources.compute_streams)
            notes.append(
                f"compute_streams {streams} with the roofline: each stream runs its COMP nodes at the full peak, so "
                "nodes in flight together exceed the GPU's peak (compute_streams: 1 keeps to it)"
            )
        faster = sorted({r for r, f in cfg.compute_slowdown.items() if f < 1} | {w[0] for w in cfg.slowdown_windows
                                                                                  if w[3] < 1})  # fmt: skip
        if faster:
            notes.append(
                f"a compute slowdown below 1 with the roofline (rank {faster[0]}"
                + (f" and {len(faster) - 1} more" if len(faster) > 1 else "")
                + "): its GPU computes faster than the roofline's peak"
            )
        return notes

    def memory_time(self, size: int) -> float:
        """Ns of a MEM_LOAD/MEM_STORE of *size* bytes."""
        return self._config.remote_memory_latency + size / self._config.remote_memory_bandwidth
