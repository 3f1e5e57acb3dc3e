"""Run observers see every node, collective part and message, at the simulated time it happens."""

from __future__ import annotations

from etsim.chakra import CollectiveType, TraceBuilder, Workload
from etsim.network import ring
from etsim.simulation import simulate
from etsim.workload import RunObserver


class Recorder(RunObserver):
    def __init__(self) -> None:
        self.log: list[tuple] = []  # type: ignore[type-arg]
        self.engine = None

    def attach(self, engine) -> None:  # type: ignore[no-untyped-def]
        self.engine = engine
        self.log.append(("attach",))

    def finished(self, engine) -> None:  # type: ignore[no-untyped-def]
        self.log.append(("finished", engine.env.now))

    def node_started(self, run, j) -> None:  # type: ignore[no-untyped-def]
        self.log.append(("start", run.rank, run.trace.ids[j], self.engine.env.now))

    def node_finished(self, run, j) -> None:  # type: ignore[no-untyped-def]
        self.log.append(("finish", run.rank, run.trace.ids[j], self.engine.env.now))

    def collective_started(self, call) -> None:  # type: ignore[no-untyped-def]
        self.log.append(("collective", call.rank, call.type))

    def part_started(self, call, part) -> None:  # type: ignore[no-untyped-def]
        self.log.append(("part", call.rank, self.engine.env.now))

    def part_finished(self, call, part) -> None:  # type: ignore[no-untyped-def]
        self.log.append(("part-done", call.rank, self.engine.env.now))

    def message_sent(self, run, j, src, dst, tag, size) -> None:  # type: ignore[no-untyped-def]
        self.log.append(("sent", src, dst, size, self.engine.env.now))

    def message_delivered(self, run, j) -> None:  # type: ignore[no-untyped-def]
        self.log.append(("delivered", run.rank, self.engine.env.now))

    def message_received(self, send_run, send_j, recv_run, recv_j, size) -> None:  # type: ignore[no-untyped-def]
        self.log.append(("received", send_run.rank, recv_run.rank, size, self.engine.env.now))


def workload() -> Workload:
    builders = []
    for r in range(2):
        b = TraceBuilder()
        c = b.comp(duration_micros=2 + r)
        b.collective(CollectiveType.ALL_REDUCE, 1000, deps=[c])
        builders.append(b)
    return Workload([b.build(rank=r) for r, b in enumerate(builders)])


def test_observer_sees_nodes_parts_and_messages_in_time() -> None:
    rec = Recorder()
    result = simulate(workload(), topology=ring(2, 50.0, 500.0), observer=rec)
    log = rec.log
    assert log[0] == ("attach",) and log[-1] == ("finished", result.finish_ns)
    assert ("start", 0, 0, 0) in log and ("finish", 0, 0, 2000.0) in log and ("finish", 1, 0, 3000.0) in log
    assert [e[1] for e in log if e[0] == "collective"] == [0, 1]
    # ring all-reduce of 2 ranks: 2 steps of 500 bytes each way, every message received once
    sent = [e for e in log if e[0] == "sent"]
    received = [e for e in log if e[0] == "received"]
    assert len(sent) == len(received) == 4 and {e[3] for e in sent} == {500.0}
    # every message is delivered once, at least 500 ns + 10 ns after it was sent, before it is received
    delivered = sorted(e[2] for e in log if e[0] == "delivered")
    assert len(delivered) == 4
    assert all(d >= s + 510.0 for d, s in zip(delivered, sorted(e[4] for e in sent), strict=True))
    assert all(d <= r for d, r in zip(delivered, sorted(e[4] for e in received), strict=True))
    # rank 0's first message arrives at 2.51 us but rank 1 posts its receive when it joins, at 3 us
    assert min(r[4] for r in received) == 3000.0 and ("received", 0, 1, 500.0, 3000.0) in received
    finishes = {e[1]: e[3] for e in log if e[0] == "finish" and e[2] == 1}
    assert finishes == {r.rank: r.finish_ns for r in result.ranks}
    assert sum(e[0] == "part" for e in log) == sum(e[0] == "part-done" for e in log) == 2


def test_an_observer_changes_no_result() -> None:
    plain = simulate(workload(), topology=ring(2, 50.0, 500.0)).to_dict()
    watched = simulate(workload(), topology=ring(2, 50.0, 500.0), observer=Recorder()).to_dict()
    plain["sim"].pop("wall_s")
    watched["sim"].pop("wall_s")
    assert plain == watched


def test_an_observer_that_does_not_watch_messages_is_told_nothing_per_message() -> None:
    class Quiet(Recorder):
        messages = False

    rec = Quiet()
    simulate(workload(), topology=ring(2, 50.0, 500.0), observer=rec)
    kinds = {e[0] for e in rec.log}
    assert {"start", "finish", "part"} <= kinds and not kinds & {"sent", "delivered", "received"}
