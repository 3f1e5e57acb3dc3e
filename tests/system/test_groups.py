"""Communicator groups from files and from METADATA nodes."""

from __future__ import annotations

import pytest

from etsim.chakra import TraceBuilder, Workload
from etsim.errors import ConfigError
from etsim.simulation import simulate


def test_metadata_group_ranks_must_be_a_list() -> None:
    b = TraceBuilder()
    b.node(1, "process_group:init")
    b.nodes[-1].inputs.values = '[\'[{"pg_name": "1", "ranks": 5}]\']'
    with pytest.raises(ConfigError, match="process group ranks must be a list"):
        simulate(Workload([b.build(rank=0)]))
