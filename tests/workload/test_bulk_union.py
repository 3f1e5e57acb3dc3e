"""The fast path over the union of per-rank graphs (``workload/bulk_union.py``) against the event path.

Families whose ranks run different graphs (TACOS syntheses, natives without relative peers) are evaluated a
level at a time over the union of their graphs; each case here runs with the fast path off and on and the JSON
results must be identical (``test_bulk.both``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import etsim.workload.bulk as bulk
from etsim.chakra import CollectiveType, TraceBuilder, Workload
from etsim.network import mesh, ring, switch, torus
from etsim.producers import collective_workload
from etsim.producers.tacos import synthesize, write_synthesis
from etsim.system.config import SystemConfig, load_system_config

from .test_bulk import B, L, MiB, both

AG, AR, RS = CollectiveType.ALL_GATHER, CollectiveType.ALL_REDUCE, CollectiveType.REDUCE_SCATTER
pytestmark = pytest.mark.filterwarnings("ignore::etsim.errors.EtsimWarning")


@pytest.fixture(autouse=True)
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "MIN_WORK", 0)


TOPOLOGIES = {
    "mesh3x3": lambda: mesh([3, 3], B, L),
    "torus2x4": lambda: torus([2, 4], B, L),
    "ring6": lambda: ring(6, B, L),
    "switch6": lambda: switch(6, B, L),
}


@pytest.mark.parametrize("model", ["flow", "analytical", "ideal", "link"])
@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "all_reduce"])
@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_tacos_families(tmp_path: Path, topology: str, collective: str, model: str) -> None:
    """TACOS families (one graph per rank) run in bulk with the event path's result, bit for bit."""
    topo = TOPOLOGIES[topology]()
    syn = synthesize(topo, collective, size=1 << 20, chunks_per_npu=2 if topology == "ring6" else 1)
    write_synthesis(syn, tmp_path / "fam", jobs=1)
    n = topo.npus
    kind = {"all_gather": AG, "reduce_scatter": RS, "all_reduce": AR}[collective]
    system = SystemConfig(algorithms={"default": str(tmp_path / "fam")})
    fast = both(Workload(collective_workload(kind, 720 * 4096, n)), system, topology=topo, model=model)  # whole chunks
    if model != "link":
        assert fast.sim["bulk_parts"] == n


@pytest.mark.parametrize("model", ["flow", "analytical", "link"])
def test_settings_and_overlap(tmp_path: Path, model: str) -> None:
    """Endpoint delays (at the sender and at the receiver), chunks and compute skew around the collective."""
    topo = mesh([3, 3], B, L)
    write_synthesis(synthesize(topo, "all_gather", size=1 << 20), tmp_path / "ag", jobs=1)
    traces = []
    for r in range(9):
        b = TraceBuilder()
        c = b.comp(duration_micros=1 + r % 4)
        b.collective(AG, 9 * MiB, deps=[c])
        b.comp(duration_micros=2, deps=[b.collective(AG, 3 * MiB)])
        traces.append(b.build(rank=r))
    workload = Workload(traces)
    for extra in ({}, {"endpoint_delay": "7.5 ns"}, {"endpoint_delay": "3 ns", "endpoint_delay_at": "receive"},
                  {"chunks": 2}, {"integer_ns": True}):  # fmt: skip
        system = load_system_config({"algorithms": {"default": str(tmp_path / "ag")}, **extra})
        fast = both(workload, system, topology=topo, model=model)
        if model == "analytical" or (model == "flow" and "chunks" not in extra):  # (streams share links: event path)
            assert fast.sim["bulk_parts"] > 0, extra


def test_natives_without_relative_peers_run_in_bulk() -> None:
    """Halving-doubling and the tree (a graph per rank) take the union under flow, with the same result."""
    for algorithm, collective in (("hd", AG), ("hd", RS), ("hd", AR), ("tree", AR)):
        system = SystemConfig(algorithms={"default": algorithm})
        fast = both(Workload(collective_workload(collective, 4 * MiB, 8)), system, topology=ring(8, B, L),
                    model="analytical")  # fmt: skip
        assert fast.sim["bulk_parts"] == 8, algorithm


def test_messages_of_fractional_bytes_stay_on_the_event_path() -> None:
    """Statistics add sizes in send order on the event path: the union is taken only for whole-byte messages."""
    system = SystemConfig(algorithms={"default": "hd"})
    whole = both(Workload(collective_workload(RS, 8000, 8)), system, topology=ring(8, B, L), model="analytical")
    split = both(Workload(collective_workload(RS, 8001, 8)), system, topology=ring(8, B, L), model="analytical")
    assert whole.sim["bulk_parts"] == 8 and split.sim["bulk_parts"] == 0
