"""Writing families: all ranks or none where a run would read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.algo.family_io import algorithm_traces, write_family, write_family_by_rank
from etsim.chakra import CollectiveType
from etsim.system.algorithms import RingAlgorithm


def _ring(n: int) -> list:
    algo = RingAlgorithm()
    return algorithm_traces([algo.graph(CollectiveType.ALL_REDUCE, n, p) for p in range(n)])


def test_an_interrupted_writer_leaves_no_partial_family(tmp_path: Path) -> None:
    traces = _ring(8)

    def some_then_stop():
        yield from traces[:3]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_family(some_then_stop(), tmp_path / "ring")
    assert list(tmp_path.iterdir()) == []  # neither ranks 0-2 nor the staging directory
    paths = write_family(traces, tmp_path / "ring.et")
    assert [p.name for p in paths] == [f"ring.{r}.et" for r in range(8)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)


def test_a_forked_writer_that_fails_leaves_no_partial_family(tmp_path: Path) -> None:
    from etsim.errors import TraceError

    def make(rank: int) -> bytes:
        if rank == 5:
            import os

            os._exit(3)  # the worker dies
        return b""

    with pytest.raises(TraceError, match="died"):
        write_family_by_rank(make, 16, tmp_path / "x", jobs=2)
    assert list(tmp_path.iterdir()) == []
