"""The system refuses an algorithm that does not compute its collective, once per algorithm, collective and size."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest

import etsim.system.algorithms.base as base
from etsim.algo.dataflow import NodeData, Segment
from etsim.chakra import CollectiveType as C
from etsim.chakra import TraceBuilder, Workload, load_workload, write_workload
from etsim.cli.algo import export_algorithm, make_algorithm
from etsim.errors import ConfigError, EtsimWarning
from etsim.network import fully_connected, mesh
from etsim.producers import collective_workload
from etsim.simulation import simulate
from etsim.system.algorithms import RingAlgorithm
from etsim.system.config import SystemConfig

MiB = 1 << 20


def run(algo: str, n: int = 4, collective: C = C.ALL_REDUCE, count: int = 1):
    workload = collective_workload(collective, MiB, n)
    if count > 1:  # the same collective several times on every rank
        from etsim.chakra import TraceBuilder

        traces = []
        for r in range(n):
            b = TraceBuilder()
            last: list[int] = []
            for _ in range(count):
                last = [b.collective(collective, MiB, deps=last)]
            traces.append(b.build(rank=r))
        workload = traces
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EtsimWarning)
        return simulate(
            Workload(workload),
            topology=fully_connected(n, 50.0, 500.0),
            system=SystemConfig(algorithms={"default": algo}),
        )


def family(tmp_path: Path, name: str = "ring", n: int = 4) -> Path:
    prefix = tmp_path / name
    export_algorithm(make_algorithm(name), C.ALL_REDUCE, n, prefix)
    return prefix


def break_node(prefix: Path, rank: int, node: str) -> Path:
    """Rank *rank*'s node *node* sends output chunk 3 instead of what it should."""
    workload = load_workload(prefix)
    for n in workload.traces[rank].nodes:
        if n.name == node:
            for attr in n.attr:
                if attr.name == "data_src":
                    attr.string_val = "o@3x1"
    out = prefix.parent / (prefix.name + "_broken")
    write_workload(workload.traces, str(out))
    return out


def test_a_wrong_family_is_refused_before_it_runs(tmp_path):
    good = family(tmp_path)
    assert run(str(good)).finish_ns > 0
    bad = break_node(good, 1, "ag1_send")
    with pytest.raises(ConfigError) as info:
        run(str(bad))
    message = str(info.value)
    assert f"algorithm {str(bad)!r} does not compute all_reduce over 4 ranks: rank 2, chunk 0: holds" in message
    assert message.startswith("rank 0: node 0 (ALL_REDUCE): ")


def test_verdicts_are_computed_once_per_algorithm_collective_and_size(tmp_path, monkeypatch):
    calls = []
    real = base.verify_graphs

    def counting(graphs, collective):
        calls.append((len(graphs), collective))
        return real(graphs, collective)

    monkeypatch.setattr(base, "verify_graphs", counting)
    run(str(family(tmp_path)), count=3)
    assert calls == [(4, C.ALL_REDUCE)]


def test_natives_are_verified_by_the_tests_not_at_run_time(monkeypatch):
    def refuse(graphs, collective):
        raise AssertionError("a native was verified at run time")

    monkeypatch.setattr(base, "verify_graphs", refuse)
    assert run("ring").finish_ns > 0
    assert run("direct", collective=C.ALL_TO_ALL).finish_ns > 0


def test_a_subclass_that_changes_the_graphs_is_verified():
    class Broken(RingAlgorithm):
        """Ring, but every all-gather receive stores one chunk too far."""

        name = "broken"

        def _build(self, collective, p, position):
            g = super()._build(collective, p, position)
            g.data = [
                NodeData(d.op, (Segment(d.dst[0].buf, d.dst[0].off + 1, 1, 1, True),), d.src)
                if d is not None and d.op == "store"
                else d
                for d in g.data
            ]
            return g

    Broken().check_correct(C.ALL_GATHER, 1)  # one rank: nothing moves, nothing to get wrong
    with pytest.raises(
        ConfigError, match=r"algorithm 'broken' does not compute all_gather over 3 ranks: rank 0, chunk"
    ):
        Broken().check_correct(C.ALL_GATHER, 3)
    RingAlgorithm().check_correct(C.ALL_GATHER, 3)  # declared verified by the tests: not checked here
    assert Broken().verify(C.ALL_GATHER, 3).ok is False
    assert Broken().verify(C.ALL_GATHER, 5).ok is False
    assert RingAlgorithm().verify(C.ALL_GATHER, 3).ok is True
    assert RingAlgorithm().verify(C.GATHER, 3).ok is None  # not implemented: cannot verify, with the reason


def test_phased_algorithms_and_gated_nodes_cannot_be_verified():
    from etsim.algo.graph import AlgorithmBuilder
    from etsim.algo.verify import verify_graphs
    from etsim.system.algorithms.base import CollectiveAlgorithm, Phase

    class Phased(CollectiveAlgorithm):
        name = "phased"
        collectives = frozenset({C.ALL_REDUCE})

        def phases(self, collective, group_size, position, *, stream, state):
            return [Phase(AlgorithmBuilder(total_chunks=1).build())]

    verdict = Phased().verify(C.ALL_REDUCE, 2)
    assert verdict.ok is None and "runs as phases" in verdict.message
    # Not verified, but its phases' bytes are counted: moving nothing, it cannot compute the all-reduce (a phased
    # plug-in that moved half or a thousandth of what is needed ran, exit 0).
    with pytest.raises(ConfigError, match="its 2 ranks send 0 buffers in all, and at least 2 are needed"):
        Phased().check_correct(C.ALL_REDUCE, 2)
    b = AlgorithmBuilder(total_chunks=1)
    a = b.recv(1, 1, dst="o@0")
    c = b.recv(1, 1, 1, dst="s@0")
    d = b.reduce(1, deps=[a, c], dst="o@0", src="s@0")
    b.gate(d, 1, a)
    verdict = verify_graphs([b.build(), b.build()], C.ALL_REDUCE)
    assert verdict.ok is None and verdict.message.startswith("gated nodes")


def test_an_unverifiable_algorithm_that_moves_too_little_is_refused(tmp_path: Path) -> None:
    """A send/receive workload given as the all-reduce ran in one hop (21.5 us, against 43.7 us for any
    all-reduce) with only a warning that it records no collective."""
    from etsim.network import ring
    from etsim.producers.workloads import ring_sendrecv_workload

    write_workload(ring_sendrecv_workload(1 << 20, 8), tmp_path / "sendrecv")
    workload = Workload(collective_workload(C.ALL_REDUCE, 1 << 20, 8))
    system = SystemConfig(algorithms={"default": str(tmp_path / "sendrecv")})
    expected = (
        r"cannot compute all_reduce over 8 ranks: its 8 ranks send 8\.38861e\+06 bytes in all, and at least "
        r"1\.46801e\+07 are needed \(it cannot be verified"
    )
    with pytest.warns(EtsimWarning, match="records no collective type"), pytest.raises(ConfigError, match=expected):
        simulate(workload, topology=ring(8, 50.0, 500.0), system=system)


def test_absolute_sizes_written_for_a_larger_call_are_warned(tmp_path: Path) -> None:
    """A family of absolute sizes runs as written: one written for 1 MiB ran a 1 KiB all-reduce as 1 MiB (21.5 us,
    exit 0, against 1.5 us), with a warning only that it records no collective. Far more bytes than the call
    needs are now said (once); at the size it was written for, nothing more is said."""
    from etsim.network import ring

    exchange = []
    for rank in range(2):  # (each rank sends its whole 1 MiB buffer to the other, as a 2-rank all-reduce may)
        b = TraceBuilder()
        b.send(dst=1 - rank, size=MiB)
        b.recv(src=1 - rank, size=MiB)
        exchange.append(b.build(rank=rank))
    write_workload(exchange, tmp_path / "exchange")
    system = SystemConfig(algorithms={"default": str(tmp_path / "exchange")})
    topology = ring(2, 50.0, 500.0)
    small = Workload(collective_workload(C.ALL_REDUCE, 1024, 2, count=2))
    with pytest.warns(EtsimWarning) as said:
        simulate(small, topology=topology, system=system)
    oversized = [str(w.message) for w in said if "absolute sizes" in str(w.message)]
    assert oversized == [
        f"algorithm '{tmp_path / 'exchange'}' gives absolute sizes (comm_size), which run as written: its 2 ranks "
        "send 2.09715e+06 bytes for a 1024-byte all_reduce, 1024x the 2048 it needs at least; written for a larger "
        "call? (sizes written as chunk counts, msg_chunk_cnt of total_chunk_cnt, scale with the call)"
    ]
    with pytest.warns(EtsimWarning) as said:
        simulate(Workload(collective_workload(C.ALL_REDUCE, MiB, 2)), topology=topology, system=system)
    assert not [w for w in said if "absolute sizes" in str(w.message)]  # (only that it records no collective)
    # A one-shot all-reduce of 16 ranks (each rank's whole buffer to every peer) at the size it was written for
    # sends 8x the least an all-reduce needs: no warning (it said "written for a larger call?").
    n, oneshot = 16, []
    for rank in range(n):
        b = TraceBuilder()
        for peer in range(n):
            if peer != rank:
                b.send(dst=peer, size=MiB)
                b.recv(src=peer, size=MiB)
        oneshot.append(b.build(rank=rank))
    write_workload(oneshot, tmp_path / "oneshot")
    with pytest.warns(EtsimWarning) as said:
        simulate(
            Workload(collective_workload(C.ALL_REDUCE, MiB, n)),
            topology=ring(n, 50.0, 500.0),
            system=SystemConfig(algorithms={"default": str(tmp_path / "oneshot")}),
        )
    assert not [w for w in said if "absolute sizes" in str(w.message)]


def tacos_family(tmp_path: Path, broken: bool) -> Path:
    """A TACOS all-gather family on a 3×3 mesh; *broken*: rank 1's first send sends chunk 0 instead of its own."""
    from etsim.producers.tacos import synthesize, write_synthesis

    prefix = tmp_path / "ag"
    write_synthesis(synthesize(mesh([3, 3], 50.0, 500.0), "all_gather", size=MiB), prefix, jobs=1)
    if not broken:
        return prefix
    workload = load_workload(prefix)
    send = next(n for n in workload.traces[1].nodes if any(a.name == "data_src" for a in n.attr))
    for attr in send.attr:
        if attr.name == "data_src":
            assert attr.string_val != "o@0x1"
            attr.string_val = "o@0x1"
    write_workload(workload.traces, str(tmp_path / "broken"))
    return tmp_path / "broken"


def run_tacos(prefix: Path) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EtsimWarning)
        return simulate(
            Workload(collective_workload(C.ALL_GATHER, MiB, 9)),
            topology=mesh([3, 3], 50.0, 500.0),
            system=SystemConfig(algorithms={"default": str(prefix)}),
        )


@pytest.mark.parametrize("broken", [False, True])
def test_a_family_verified_beside_the_run_gives_what_verifying_it_first_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: bool
) -> None:
    """Result or refusal, word for word, whether the family is verified in a forked copy or before the run."""
    import etsim.algo.verify as verify
    import etsim.workers as workers

    prefix = tacos_family(tmp_path, broken)
    outcomes = []
    forks: list[object] = []
    real_fork = workers.fork_call
    monkeypatch.setattr(workers, "fork_call", lambda *args: forks.append(args) or real_fork(*args))
    monkeypatch.setattr(workers, "fork_jobs", lambda cap=None: 2)
    for threshold in (0, 1 << 60):  # beside the run, then before it
        monkeypatch.setattr(verify, "BACKGROUND_NODES", threshold)
        try:
            data = json.loads(run_tacos(prefix).to_json())  # type: ignore[attr-defined]
            data["sim"].pop("wall_s")  # (how long it took)
            outcomes.append(json.dumps(data))
        except ConfigError as exc:
            outcomes.append(str(exc))
    assert len(forks) == 1
    assert outcomes[0] == outcomes[1]
    assert ("does not compute all_gather over 9 ranks" in outcomes[0]) == broken


def test_a_wrong_family_verified_beside_the_run_is_the_error_reported_when_the_run_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import etsim.algo.verify as verify
    import etsim.simulation as simulation
    import etsim.workers as workers
    from etsim.errors import SimulationError

    monkeypatch.setattr(verify, "BACKGROUND_NODES", 0)
    monkeypatch.setattr(workers, "fork_jobs", lambda cap=None: 2)

    def fails(self: object, until: object = None) -> None:
        raise SimulationError("the run failed")

    monkeypatch.setattr(simulation.CountingEnvironment, "run", fails)
    with pytest.raises(SimulationError, match="the run failed"):
        run_tacos(tacos_family(tmp_path / "good", broken=False))
    with pytest.raises(ConfigError, match="does not compute all_gather over 9 ranks"):
        run_tacos(tacos_family(tmp_path / "bad", broken=True))


def _children(jobs: list[object]) -> list[int]:
    """The forked copies of *jobs* that still exist (running, or finished and not reaped)."""
    alive = []
    for job in jobs:
        pid = job._pid  # type: ignore[attr-defined]
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive


@pytest.fixture
def beside(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every large-enough family verified in a forked copy; the copies started, for the test to inspect."""
    import etsim.algo.verify as verify
    import etsim.workers as workers

    jobs: list[object] = []
    real_fork = workers.fork_call
    monkeypatch.setattr(verify, "BACKGROUND_NODES", 0)
    monkeypatch.setattr(workers, "fork_jobs", lambda cap=None: 2)
    monkeypatch.setattr(workers, "fork_call", lambda *args: jobs.append(real_fork(*args)) or jobs[-1])
    return jobs


def _solo_groups_after(tmp_path: Path, family: Path) -> tuple[str, list[str]]:
    """An all-gather with *family*, then on every rank an all-reduce over a group of its own (which warns)."""
    from etsim.chakra import TraceBuilder
    from etsim.chakra.schema import et_def_pb2 as pb

    groups = json.dumps({f"solo{r}": [r] for r in range(9)})
    traces = []
    for r in range(9):
        b = TraceBuilder()
        first = b.collective(C.ALL_GATHER, MiB)
        b.collective(C.ALL_REDUCE, MiB, deps=[first], pg_name=f"solo{r}")
        b.metadata.attr.append(pb.AttributeProto(name="etsim_comm_groups", string_val=groups))
        traces.append(b.build(rank=r))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Exception) as info:
            simulate(
                Workload(traces),
                topology=mesh([3, 3], 50.0, 500.0),
                system=SystemConfig(algorithms={"all_gather": str(family)}),
            )
    return f"{type(info.value).__name__}: {info.value}", [str(w.message) for w in caught]


def test_a_late_refusal_drops_what_the_run_warned_after_the_point_where_it_would_have_stopped(
    tmp_path: Path, beside: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    import etsim.algo.verify as verify

    broken = tacos_family(tmp_path, broken=True)
    late = _solo_groups_after(tmp_path, broken)
    assert len(beside) == 1
    monkeypatch.setattr(verify, "BACKGROUND_NODES", 1 << 60)
    first = _solo_groups_after(tmp_path, broken)
    assert late == first
    assert first[0].startswith("ConfigError") and "does not compute all_gather" in first[0]
    assert not any("1-rank group" in w for w in first[1])


def test_a_verifier_that_fails_beside_the_run_fails_as_it_would_have_first(
    tmp_path: Path, beside: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any error a late check raises drops what the run warned after its point, not only a refusal."""
    import etsim.algo.verify as verify

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the verifier crashed")

    monkeypatch.setattr(verify, "verify_graphs", crash)
    monkeypatch.setattr(base, "verify_graphs", crash)
    good = tacos_family(tmp_path, broken=False)
    late = _solo_groups_after(tmp_path, good)
    assert len(beside) == 1
    monkeypatch.setattr(verify, "BACKGROUND_NODES", 1 << 60)
    assert late == _solo_groups_after(tmp_path, good) == ("RuntimeError: the verifier crashed", [])


def test_no_verifying_copy_is_left_behind_by_a_refusal_or_an_interrupt(
    tmp_path: Path, beside: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    import etsim.algo.verify as verify
    import etsim.simulation as simulation
    from etsim.chakra import TraceBuilder

    broken, good = tacos_family(tmp_path / "b", broken=True), tacos_family(tmp_path / "g", broken=False)
    traces = []
    for r in range(9):  # two families verified beside the run: the first refuses, the second is cancelled
        b = TraceBuilder()
        b.collective(C.ALL_REDUCE, MiB, deps=[b.collective(C.ALL_GATHER, MiB)])
        traces.append(b.build(rank=r))
    ar = tmp_path / "ar"
    export_algorithm(make_algorithm("ring"), C.ALL_REDUCE, 9, ar)
    system = SystemConfig(algorithms={"all_gather": str(broken), "all_reduce": str(ar)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EtsimWarning)
        with pytest.raises(ConfigError, match="does not compute all_gather"):
            simulate(Workload(traces), topology=mesh([3, 3], 50.0, 500.0), system=system)
        assert len(beside) == 2 and _children(beside) == []
        beside.clear()
        real_verify = verify._verify_quietly
        monkeypatch.setattr(verify, "_verify_quietly", lambda *a: time.sleep(30) or real_verify(*a))

        def interrupted(self: object, until: object = None) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(simulation.CountingEnvironment, "run", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_tacos(good)
        assert len(beside) == 1 and _children(beside) == []


def test_a_phased_algorithm_that_moves_half_an_all_reduce_is_refused() -> None:
    # A ring's reduce-scatter given as the all-reduce's one phase: 7 of the 14 buffers 8 ranks must send.
    from etsim.system.algorithms.base import CollectiveAlgorithm, Phase
    from etsim.system.algorithms.ring import RingAlgorithm

    class HalfRing(CollectiveAlgorithm):
        name = "half"
        collectives = frozenset({C.ALL_REDUCE})

        def phases(self, collective, group_size, position, *, stream, state):
            return [Phase(RingAlgorithm().graph(C.REDUCE_SCATTER, group_size, position))]

    with pytest.raises(ConfigError, match="its 8 ranks send 7 buffers in all, and at least 14 are needed"):
        HalfRing().check_correct(C.ALL_REDUCE, 8)
