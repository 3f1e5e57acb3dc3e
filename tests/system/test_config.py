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
