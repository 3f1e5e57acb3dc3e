"""``RuntimeSends``: the communicator a workload send names and the group call it belongs to."""

from __future__ import annotations

from collections.abc import Callable

from etsim.chakra.builder import TraceBuilder
from etsim.system.groups import CommGroups
from etsim.system.p2p import RuntimeSends

Asked = list[tuple[int, int, tuple[int, ...] | None, int, bool]]


def recording(asked: Asked) -> Callable[..., tuple[float, float, Callable[[float], float] | None]]:
    def pair(
        src: int, dst: int, group: tuple[int, ...] | None, peers: int, receives: bool
    ) -> tuple[float, float, Callable[[float], float] | None]:
        asked.append((src, dst, group, peers, receives))
        return 2.0, 7.0, (None if group is None else (lambda nbytes: 3.0 if nbytes > 60 else 1.0))

    return pair


def test_a_send_runs_on_its_named_group_in_its_group_call() -> None:
    asked: Asked = []
    b = TraceBuilder()
    start = b.comp(duration_micros=1)
    # one call: sends to 1 and 2 (twice to 2: still two peers) and a receive, all after the same node
    to_1 = b.send(1, 100, tag=1, deps=[start], pg_name="ep")
    b.send(2, 100, tag=2, deps=[start], pg_name="ep")
    b.send(2, 100, tag=3, deps=[start], pg_name="ep")
    b.recv(1, 100, tag=1, deps=[start], pg_name="ep")
    # another call, after to_1: one peer, no receive
    later = b.send(2, 100, tag=4, deps=[to_1], pg_name="ep")
    lone = b.send(3, 50, tag=5)
    unknown = b.send(3, 50, tag=6, pg_name="nowhere")
    trace = b.build(rank=0)
    sends = RuntimeSends(recording(asked), CommGroups(4, {"ep": (0, 1, 2)}))
    index = {node: i for i, node in enumerate(trace.ids)}

    # a named group: its members, its call's two peers and its receive, the wire by size; asked once per shape
    assert sends(0, 1, 100, trace, index[to_1]) == (300, 7.0)
    assert sends(0, 1, 50, trace, index[to_1]) == (50, 7.0)
    assert sends(0, 2, 100, trace, index[later]) == (300, 7.0)
    # no name, or a name no group defines: the pair's own communicator, one scale for every size
    assert sends(0, 3, 50, trace, index[lone]) == (100, 7.0)
    assert sends(0, 3, 50, trace, index[unknown]) == (100, 7.0)
    # (a pair is first asked as a lone send; where its timing goes by size, its call's shape is asked for too)
    assert asked == [
        (0, 1, (0, 1, 2), 1, False),
        (0, 1, (0, 1, 2), 2, True),
        (0, 2, (0, 1, 2), 1, False),
        (0, 3, None, 1, False),
        (0, 3, None, 1, False),
    ]
