"""System YAML: every key validated, units parsed once, clear errors naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from etsim.errors import ConfigError
from etsim.system.config import Resources, SystemConfig, load_system_config


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


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # each ran with exit 0 and a wrong time, or failed deep in the run (a ZeroDivisionError, an AttributeError)
        ({"remote_memory_bandwidth": -1.0}, r"remote_memory_bandwidth: expected bytes per ns \(a number > 0\), got -1"),
        ({"compute_slowdown": {0: -1.0}}, r"compute_slowdown\.0: expected a finite factor > 0"),
        ({"compute_jitter": 5.0}, r"compute_jitter: expected a finite number >= 0 and <= 1"),
        ({"rank_start": {0: -1e6}}, r"rank_start: expected a mapping of rank to ns \(numbers >= 0\)"),
        ({"endpoint_delay": float("inf")}, r"endpoint_delay: expected ns \(a finite number >= 0\), got inf"),
        ({"chunks": 0}, r"chunks: expected an integer >= 1"),
        ({"chunking": "bogus"}, r"chunking: expected one of equal, whole, whole_system"),
        ({"algorithms": "ring"}, r"algorithms: expected a mapping like"),
        ({"resources": {"comm_streams": 0}}, r"resources: expected a Resources"),
        ({"peak_flops": "312 TFLOP/s"}, r"peak_flops: .* \(in Python, numbers in etsim's units: load_system_config"),
        ({"slowdown_windows": ((0, 1.0),)}, r"slowdown_windows: expected \(rank, from_ns, until_ns, factor\) rows"),
    ],
)
def test_a_config_built_in_python_is_checked_as_a_file_is(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"SystemConfig\." + message):
        SystemConfig(**values)
    with pytest.raises(ConfigError, match=r"resources\.comm_streams: expected an integer >= 0, got -1"):
        Resources(comm_streams=-1)
    # What a file gives passes, and so do numbers in etsim's units.
    assert load_system_config({"remote_memory_bandwidth": "10 GB/s", "chunks": 2}) == SystemConfig(
        remote_memory_bandwidth=10.0, chunks=2
    )


def test_a_config_built_in_python_takes_what_ran_before_and_stores_it_as_a_file_gives_it(tmp_path: Path) -> None:
    # numpy's numbers, a Path, lists for windows, any mapping for algorithms, string ranks: all ran before the checks
    from types import MappingProxyType

    import numpy as np

    config = SystemConfig(
        chunks=np.int64(4), endpoint_delay=np.int64(100), remote_memory_bandwidth=np.float32(10.0),
        comm_groups=tmp_path / "g.json", fast_path=np.bool_(True), algorithms=MappingProxyType({"default": "ring"}),
        slowdown_windows=[(0, 0.0, 100.0, 2.0)], rank_start={"1": 5.0}, rank_fail={2: float("inf")},
        compute_slowdown={0: np.float32(2.0)}, node_priorities={"0:1": np.int64(2)},
    )  # fmt: skip
    assert config.slowdown_windows == ((0, 0.0, 100.0, 2.0),) and config.rank_start == {1: 5.0}
    assert config.algorithms == {"default": "ring"} and config.compute_slowdown == {0: 2.0}
    assert Resources(comm_streams=np.int64(0)).comm_streams == 0
    with pytest.raises(ConfigError, match=r"SystemConfig\.rank_start: -1 is not a rank"):
        SystemConfig(rank_start={-1: 5.0})  # (ignored before: a file refuses it)
