"""The shipped algorithm families: regeneration is byte-identical and each reads back into the native graphs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.family_io import written_tags
from etsim.algo.graph import COMP
from etsim.chakra import load_workload, validate_workload
from etsim.cli.algo import make_algorithm

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "algorithms"


def _gen_module():
    spec = importlib.util.spec_from_file_location("gen_algorithms", REPO / "scripts" / "gen_algorithms.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _gen_module()


def test_regeneration_is_identical(tmp_path):
    written = GEN.generate(tmp_path)
    assert set(written) == set(GEN.FAMILIES)
    fresh = sorted(p.name for p in tmp_path.iterdir())
    # Other generators (MSCCL conversions) ship families here too; every family of this script is shipped.
    shipped = sorted(p.name for p in SHIPPED.glob("*.et") if p.name.split(".")[0] in GEN.FAMILIES)
    assert fresh == shipped
    for name in fresh:
        assert (tmp_path / name).read_bytes() == (SHIPPED / name).read_bytes(), name


def test_required_ring_family():
    assert [SHIPPED / f"ring.{r}.et" for r in range(64)] == sorted(
        SHIPPED.glob("ring.*.et"), key=lambda p: int(p.name.split(".")[1])
    )


@pytest.mark.parametrize("prefix", sorted(GEN.FAMILIES))
def test_family_reads_back_as_native(prefix):
    name, collective, npus = GEN.FAMILIES[prefix]
    algo = make_algorithm(name)
    workload = load_workload(SHIPPED / prefix)
    assert workload.num_ranks == npus
    # Symbolic sizes: the validator (which expects comm_size) is asked about everything else.
    errors = [i for i in validate_workload(workload) if i.severity == "error" and "without comm_size" not in i.message]
    assert errors == []
    for rank, trace in enumerate(workload.traces):
        got = algo_graph_from_trace(trace)
        want = algo.graph(collective, npus, rank)
        assert got.total_chunks == want.total_chunks
        assert got.kinds == want.kinds
        assert got.chunks == want.chunks
        assert got.tags == written_tags(want, rank, npus)  # unique per transfer of a rank pair
        assert got.deps_ptr == want.deps_ptr and got.deps_idx == want.deps_idx
        comm = [i for i, k in enumerate(want.kinds) if k != COMP]
        assert [got.peers[i] for i in comm] == [want.peer_position(i, rank, npus) for i in comm]
