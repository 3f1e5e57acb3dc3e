"""GPU presets and the compute-efficiency model that times a training job's kernels.

A kernel does ``flops`` operations and moves ``bytes`` through HBM. Its time is a roofline with efficiencies:

- ``max(flops / (peak · e), bytes / (hbm · e_memory))`` where ``peak`` is the GPU's dense tensor rate for the
  kernel's precision and ``e`` depends on the kind of kernel:
- ``gemm``: ``e_gemm · d / (d + d_half)``, ``d`` the smallest of the GEMM's three dimensions (M, N, K): large
  GEMMs approach ``e_gemm``, thin ones (small hidden sizes, wide tensor parallelism) fall off, as measured GEMM
  throughput does;
- ``attention``: ``e_attention`` (fused attention kernels reach a lower fraction of peak than GEMMs);
- ``memory``: element-wise kernels (norms, activations, residuals, the optimizer) are bandwidth bound.

The constants (:data:`DEFAULT_EFFICIENCY`) were chosen once against the Megatron-LM measurements of
``docs/training.md`` and are overridable per job (``--efficiency gemm=0.7,…`` on the transformer generator).
Peak rates are the vendors' dense (not sparse) figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from etsim.errors import ConfigError

__all__ = ["DEFAULT_EFFICIENCY", "GPUS", "Efficiency", "Gpu", "gpu_preset", "parse_efficiency"]


@dataclass(frozen=True)
class Gpu:
    """One GPU model: peak dense tensor rates, HBM bandwidth and capacity (SI units: FLOP/s, B/s, B)."""

    name: str
    peak_bf16: float
    """Dense 16-bit (BF16/FP16) tensor FLOP/s."""
    peak_fp8: float | None
    """Dense FP8 tensor FLOP/s (None: the GPU has no FP8 tensor cores)."""
    hbm_bandwidth: float
    memory: float
    source: str
    """Where the figures come from."""

    def peak(self, precision: str) -> float:
        """Dense FLOP/s at *precision* (``bf16`` or ``fp8``)."""
        if precision == "fp8":
            if self.peak_fp8 is None:
                raise ConfigError(f"GPU {self.name} has no FP8 tensor cores; use --precision bf16")
            return self.peak_fp8
        return self.peak_bf16


_MIB = 1 << 20
#: The GPU presets, by name. Capacity is the device memory the driver reports (``nvidia-smi``'s total: A100 40 and
#: 80 GB 40960 and 81920 MiB, H100/H800 80 GB 81559 MiB, B200 183359 MiB): the vendors' "80 GB" is HBM stacks of
#: binary size, 80 GiB; what the CUDA context, libraries and allocator take of it is the memory model's allowance.
GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu("a100-40gb", 312e12, None, 1555e9, 40960 * _MIB, "NVIDIA A100 datasheet (SXM4 40 GB)"),
        Gpu("a100-80gb", 312e12, None, 2039e9, 81920 * _MIB, "NVIDIA A100 datasheet (SXM4 80 GB)"),
        Gpu("h100-sxm", 989e12, 1979e12, 3.35e12, 81559 * _MIB, "NVIDIA H100 datasheet (SXM5, dense)"),
        Gpu("h800", 989e12, 1979e12, 3.35e12, 81559 * _MIB, "NVIDIA H800 SXM5 (H100 compute, reduced NVLink)"),
        Gpu("b200", 2.25e15, 4.5e15, 8e12, 183359 * _MIB, "NVIDIA HGX B200 datasheet (dense, per GPU)"),
    )
}


def gpu_preset(name: str, key: str = "--gpu") -> Gpu:
    """The preset *name*; a :class:`~etsim.errors.ConfigError` naming *key* and the valid names otherwise."""
    if name not in GPUS:
        raise ConfigError(f"{key}: unknown GPU {name!r}; valid: {', '.join(GPUS)}")
    return GPUS[name]


@dataclass(frozen=True)
class Efficiency:
    """The fractions of peak the kernel kinds reach (see the module docstring)."""

    gemm: float = 0.66
    gemm_half: float = 96.0
    """The GEMM dimension at which efficiency is half of ``gemm``."""
    attention: float = 0.45
    memory: float = 0.7

    def kernel_ns(self, gpu: Gpu, precision: str, kind: str, flops: float, nbytes: float, dim: float = 0.0) -> float:
        """Ns of one kernel of *kind* (``gemm``, ``attention``, ``memory``) on *gpu*."""
        if kind == "gemm":
            e = self.gemm * dim / (dim + self.gemm_half)
        elif kind == "attention":
            e = self.attention
        else:
            e = 1.0
        # FP8 speeds up the GEMMs only: the attention core stays in 16 bits (Transformer Engine's default recipe)
        compute = flops / (gpu.peak(precision if kind == "gemm" else "bf16") * e) if flops else 0.0
        memory = nbytes / (gpu.hbm_bandwidth * self.memory) if nbytes else 0.0
        return max(compute, memory) * 1e9


#: The efficiency model's defaults.
DEFAULT_EFFICIENCY = Efficiency()


#: The least efficiency a GPU may be given (a ten-thousandth of its peak).
MIN_EFFICIENCY = 1e-4


def parse_efficiency(values: Mapping[str, Any], key: str) -> Efficiency:
    """:class:`Efficiency` with *values* (``{gemm: 0.7}``) replacing its defaults, each in [MIN_EFFICIENCY, 1]."""
    fields = {"gemm", "gemm_half", "attention", "memory"}
    changes: dict[str, float] = {}
    for name, value in values.items():
        if name not in fields:
            raise ConfigError(f"{key}: unknown efficiency {name!r}; valid: {', '.join(sorted(fields))}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}.{name}: expected a number, got {value!r}")
        if name == "gemm_half":  # a GEMM dimension, not a fraction
            if not 0 < value < math.inf:
                raise ConfigError(f"{key}.{name}: expected a finite GEMM dimension > 0, got {value!r}")
        elif not MIN_EFFICIENCY <= value <= 1:  # (below it, kernel times overflow what a trace can hold)
            raise ConfigError(f"{key}.{name}: expected a number in [{MIN_EFFICIENCY:g}, 1], got {value!r}")
        changes[name] = float(value)
    return replace(DEFAULT_EFFICIENCY, **changes)
