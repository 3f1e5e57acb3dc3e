"""GPU presets and the kernel-time model: what each precision speeds up."""

from __future__ import annotations

import pytest

from etsim.system.gpus import DEFAULT_EFFICIENCY, GPUS


def test_fp8_speeds_up_gemms_only_the_attention_core_stays_in_16_bits() -> None:
    # FP8 once timed the attention core at the FP8 peak too (31 -> 21 µs on an H100 layer); the docs say GEMMs only.
    gpu, e = GPUS["h100-sxm"], DEFAULT_EFFICIENCY
    flops = 1e12
    assert e.kernel_ns(gpu, "fp8", "attention", flops, 0) == e.kernel_ns(gpu, "bf16", "attention", flops, 0)
    gemm = e.kernel_ns(gpu, "fp8", "gemm", flops, 0, dim=8192)
    assert gemm == pytest.approx(e.kernel_ns(gpu, "bf16", "gemm", flops, 0, dim=8192) * gpu.peak_bf16 / gpu.peak("fp8"))
