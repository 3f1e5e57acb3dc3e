"""System YAML: every key validated, units parsed once, clear errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.errors import ConfigError
from etsim.system.config import load_system_config


def test_system_yaml_rejects_null_bandwidth_and_groups(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="remote_memory_bandwidth: expected a bandwidth"):
        load_system_config({"remote_memory_bandwidth": None})
    with pytest.raises(ConfigError, match="must be positive"):
        load_system_config({"reduction_bandwidth": "0 GB/s"})
    with pytest.raises(ConfigError, match="comm_groups: expected the path"):
        load_system_config({"comm_groups": None})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("endpoint_delay", "1e300 s", "endpoint_delay: time '1e300 s' is longer than etsim's limit of 1e\\+18 ns"),
        ("stream_delay", "1e300 s", "stream_delay: time"),
        ("min_compute_ns", "1e300 s", "min_compute_ns: time"),
        ("peak_flops", "1e400 TFLOP/s", "peak_flops: .*larger than etsim's limit"),
        ("reduction_bandwidth", "1e300 TB/s", "reduction_bandwidth: bandwidth .*larger than etsim's limit"),
    ],
)
def test_values_that_would_overflow_a_time_are_errors_not_nan(key: str, value: str, message: str) -> None:
    """A setting past its finite range made every time infinite and the result NaN, printed with exit 0."""
    with pytest.raises(ConfigError, match=message):
        load_system_config({key: value})
