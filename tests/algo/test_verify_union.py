"""The verifier's union shortcut (``algo/verify_union.py``) gives the full execution's verdict, word for word.

Every case is verified twice: as ``verify_graphs`` does it (the shortcut where it proves the algorithm correct)
and with the shortcut turned off (every rank executed). The verdicts must be equal, and the shortcut must have
been taken where the algorithm only copies chunks and orders what it must.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import pytest

import etsim.algo.verify as verify
import etsim.workers as workers
from etsim.algo.dataflow import IN_PLACE, NodeData, Segment
from etsim.algo.family_io import written_tags
from etsim.algo.graph import RECV, SEND, AlgoGraph, AlgorithmBuilder
from etsim.algo.semantics import LAYOUTS
from etsim.algo.union import union_graph
from etsim.algo.verify import Verdict, verify_graphs
from etsim.algo.verify_union import union_verdict
from etsim.chakra.graph import CollectiveType
from etsim.network import mesh, ring, torus
from etsim.producers.tacos import algo_graphs, synthesize
from etsim.system.algorithms import HalvingDoublingAlgorithm, RingAlgorithm

AG, AR, RS = CollectiveType.ALL_GATHER, CollectiveType.ALL_REDUCE, CollectiveType.REDUCE_SCATTER


def verdicts(graphs: Sequence[AlgoGraph], collective: CollectiveType) -> tuple[Verdict, Verdict, int]:
    """The verdict with the shortcut, without it, and how many placements the shortcut proved."""
    proved = 0
    original = verify.union_verdict

    def counting(*args: object) -> bool:
        nonlocal proved
        ok = original(*args)  # type: ignore[arg-type]
        proved += ok
        return ok

    try:
        verify.union_verdict = counting  # type: ignore[assignment]
        fast = verify_graphs(graphs, collective)
        verify.union_verdict = lambda *args: False  # type: ignore[assignment]
        full = verify_graphs(graphs, collective)
    finally:
        verify.union_verdict = original
    return fast, full, proved


def tacos(topology: object, collective: str, k: int = 1, seed: int = 0, *, written: bool = True) -> list[AlgoGraph]:
    """A TACOS family; *written*: with the tags its files carry (one per transfer), else one per link."""
    graphs = algo_graphs(synthesize(topology, collective, size=1 << 20, chunks_per_npu=k, seed=seed).schedule)  # type: ignore[arg-type]
    n = len(graphs)
    return [dataclasses.replace(g, tags=written_tags(g, p, n)) if written else g for p, g in enumerate(graphs)]


FAMILIES = {
    "tacos-mesh3x3-ag": lambda: (tacos(mesh([3, 3], 50.0, 500.0), "all_gather"), AG, True),
    "tacos-torus2x4-ag-k2": lambda: (tacos(torus([2, 4], 50.0, 500.0), "all_gather", 2), AG, True),
    "tacos-ring5-ag": lambda: (tacos(ring(5, 50.0, 500.0), "all_gather", seed=3), AG, True),
    "tacos-mesh2x3-ar": lambda: (tacos(mesh([2, 3], 50.0, 500.0), "all_reduce"), AR, False),  # reductions
    "hd-ag-8": lambda: ([HalvingDoublingAlgorithm().graph(AG, 8, p) for p in range(8)], AG, True),
    "hd-rs-8": lambda: ([HalvingDoublingAlgorithm().graph(RS, 8, p) for p in range(8)], RS, False),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_families_get_the_full_executions_verdict(name: str) -> None:
    graphs, collective, copies_only = FAMILIES[name]()
    fast, full, proved = verdicts(graphs, collective)
    assert fast == full
    assert fast.ok is True
    assert (proved > 0) == copies_only


def _mutate(graphs: list[AlgoGraph], rng: random.Random) -> list[AlgoGraph]:
    """One random edit: drop a dependency, move an operand, retarget a send, or swap two nodes' annotations."""
    out = list(graphs)
    r = rng.randrange(len(out))
    g = out[r]
    edit = rng.randrange(4)
    if edit == 0 and g.deps_idx:  # drop one dependency
        k = rng.randrange(len(g.deps_idx))
        node = next(j for j in range(g.num_nodes) if g.deps_ptr[j + 1] > k)
        deps_idx = g.deps_idx[:k] + g.deps_idx[k + 1 :]
        deps_ptr = [p - (1 if j > node else 0) for j, p in enumerate(g.deps_ptr)]
        out[r] = dataclasses.replace(g, deps_idx=deps_idx, deps_ptr=deps_ptr, _succ=None, _succ_lists=None)
    elif edit == 1:  # move one operand by a chunk (possibly out of the buffer)
        j = rng.randrange(g.num_nodes)
        d = g.data[j]
        if d is not None:
            side = "src" if d.src and (not d.dst or rng.random() < 0.5) else "dst"
            segs = getattr(d, side)
            moved = tuple(s._replace(off=s.off + rng.choice([-1, 1, g.total_chunks or 1])) for s in segs)
            data = list(g.data)
            data[j] = d._replace(**{side: moved})
            out[r] = dataclasses.replace(g, data=data)
    elif edit == 2:  # a send to another rank (a receive then waits forever, or the wrong rank gets it)
        sends = [j for j, k in enumerate(g.kinds) if k == SEND]
        if sends:
            j = rng.choice(sends)
            peers = list(g.peers)
            peers[j] = rng.randrange(len(out))
            out[r] = dataclasses.replace(g, peers=peers)
    else:  # two receives store each other's chunks
        recvs = [j for j, k in enumerate(g.kinds) if k == RECV]
        if len(recvs) > 1:
            a, b = rng.sample(recvs, 2)
            if g.chunks[a] != g.chunks[b]:
                return out  # (an operand covers its node's chunks: readers refuse anything else)
            data = list(g.data)
            data[a], data[b] = data[b], data[a]
            out[r] = dataclasses.replace(g, data=data)
    return out


def test_mutants_get_the_full_executions_verdict() -> None:
    """Seeded edits of TACOS and native families: the verdicts agree, right or wrong, word for word."""
    rng = random.Random(22)
    bases = [FAMILIES[name]()[:2] for name in ("tacos-mesh3x3-ag", "tacos-torus2x4-ag-k2", "hd-ag-8")]
    proved = wrong = 0
    for i in range(400):
        graphs, collective = bases[i % len(bases)]
        mutant = _mutate(list(graphs), rng)
        fast, full, shortcut = verdicts(mutant, collective)
        assert fast == full, (i, fast, full)
        proved += shortcut > 0
        wrong += fast.ok is False
    assert proved > 20 and wrong > 20  # both kinds were seen


def _race(dependent: bool) -> list[AlgoGraph]:
    """Two ranks swap their chunk of an in-place all-gather; rank 0 forwards what it got back to rank 1.

    Without *dependent*, rank 0's forwarding send does not wait for the receive that wrote its chunk.
    """
    a, b = AlgorithmBuilder(total_chunks=2, placement=IN_PLACE), AlgorithmBuilder(total_chunks=2, placement=IN_PLACE)
    a.send(1, 1, 0, src=Segment("o", 0, 1))
    got = a.recv(1, 1, 1, dst=Segment("o", 1, 1))
    a.send(1, 1, 2, deps=[got] if dependent else [], src=Segment("o", 1, 1))
    b.send(0, 1, 1, src=Segment("o", 1, 1))
    b.recv(0, 1, 0, dst=Segment("o", 0, 1))
    b.recv(0, 1, 2, dst=Segment("s", 0, 1))
    return [a.build(), b.build()]


def test_a_read_that_does_not_wait_for_its_write_is_left_to_the_execution() -> None:
    layout = LAYOUTS[AG]
    for dependent in (True, False):
        graphs = _race(dependent)
        union = union_graph(graphs)
        assert not isinstance(union, str)
        assert union_verdict(graphs, union, layout, IN_PLACE, 2) is dependent
        fast, full, _ = verdicts(graphs, AG)
        assert fast == full


def test_two_writes_of_one_slot_are_left_to_the_execution() -> None:
    graphs = _race(True)
    g = graphs[1]
    data = list(g.data)
    data[2] = NodeData("store", (Segment("o", 0, 1),), ())  # the forwarded chunk lands on rank 1's own
    graphs[1] = dataclasses.replace(g, data=data)
    union = union_graph(graphs)
    assert not isinstance(union, str)
    assert union_verdict(graphs, union, LAYOUTS[AG], IN_PLACE, 2) is False
    fast, full, _ = verdicts(graphs, AG)
    assert fast == full


def test_a_send_that_copies_over_what_it_sends_is_left_to_the_execution() -> None:
    """Rank 0 sends chunks 2, 3 and copies them swapped over themselves; the receiver stores them reversed.

    The message carries the chunks as they were before the copy (wrong at rank 1); evaluated at the receive, after
    the copy, they would look right. (Found by review.)
    """
    b0 = AlgorithmBuilder(total_chunks=4)
    b0.copy(2, src="i@0", dst="o@0")
    b0.send(1, 2, src=[Segment("i", 2, 1), Segment("i", 3, 1)], copy_to=[Segment("i", 3, 1), Segment("i", 2, 1)])
    b1 = AlgorithmBuilder(total_chunks=4)
    b1.recv(0, 2, dst=[Segment("o", 1, 1), Segment("o", 0, 1)])
    graphs = [b0.build(), b1.build()]
    fast, full, proved = verdicts(graphs, CollectiveType.SCATTER)
    assert fast == full and fast.ok is False and proved == 0


@pytest.fixture
def beside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every family of distinct graphs verified in a forked copy (whatever its size and this machine's CPUs)."""
    monkeypatch.setattr(verify, "BACKGROUND_NODES", 0)
    monkeypatch.setattr(workers, "fork_jobs", lambda cap=None: 2)


def test_a_verification_beside_the_caller_gives_the_verdict_made_here(beside: None) -> None:
    """TACOS and seeded mutants: the forked copy's verdict is the one ``verify_graphs`` gives, right or wrong."""
    rng = random.Random(7)
    graphs, collective = FAMILIES["tacos-torus2x4-ag-k2"]()[:2]
    seen = set()
    for i in range(24):
        family = graphs if i == 0 else _mutate(list(graphs), rng)
        pending = verify.verify_graphs_later(family, collective)
        expected = verify_graphs(family, collective)
        if isinstance(union_graph(family), str):
            assert pending is None  # (no union: verified here, now)
            continue
        assert pending is not None
        assert pending() == expected
        assert pending() == expected  # (asked again: the same verdict, not a second wait)
        seen.add(expected.ok)
    assert seen == {True, False}


def test_small_families_are_verified_here_and_a_lost_copy_is_redone_here(
    beside: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = [RingAlgorithm().graph(AG, 8, 0)] * 8
    pending = verify.verify_graphs_later(shared, AG)  # one graph: rank 0's execution, in the copy
    assert pending is not None and pending() == verify_graphs(shared, AG)
    graphs, collective = FAMILIES["tacos-mesh3x3-ag"]()[:2]
    monkeypatch.setattr(verify, "BACKGROUND_NODES", sum(g.num_nodes for g in graphs) + 1)
    assert verify.verify_graphs_later(graphs, collective) is None  # too small to be worth a fork
    monkeypatch.setattr(verify, "BACKGROUND_NODES", 0)

    class Lost:
        def result(self, waiting: object = None) -> None:
            raise workers.BackgroundLost("the process died before it answered")

    monkeypatch.setattr(workers, "fork_call", lambda *args: Lost())
    pending = verify.verify_graphs_later(graphs, collective)
    assert pending is not None
    assert pending() == verify_graphs(graphs, collective)


def test_waiting_for_a_verdict_beside_the_caller_shows_progress(beside: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import time

    from etsim import progress

    real = verify._verify_quietly
    monkeypatch.setattr(verify, "_verify_quietly", lambda *args: time.sleep(1.3) or real(*args))
    graphs, collective = FAMILIES["tacos-mesh3x3-ag"]()[:2]
    stream = io.StringIO()
    with progress.shown_on(stream, delay=0):
        pending = verify.verify_graphs_later(graphs, collective)
        assert pending is not None and pending().ok is True
    assert "verifying all_gather over 9 ranks beside the run: 1 s waited" in stream.getvalue()
