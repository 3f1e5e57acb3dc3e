"""``RuntimeSends``: the communicator a workload send names and its rank's fan-out on it."""

from __future__ import annotations

from collections.abc import Callable

from etsim.chakra.builder import TraceBuilder
from etsim.system.groups import CommGroups
from etsim.system.p2p import RuntimeSends


def test_a_send_runs_on_its_named_group_with_its_ranks_peers_there() -> None:
    asked: list[tuple[int, int, tuple[int, ...] | None, int]] = []

    def pair(
        src: int, dst: int, group: tuple[int, ...] | None, peers: int
    ) -> tuple[float, float, Callable[[float], float] | None]:
        asked.append((src, dst, group, peers))
        return 2.0, 7.0, (None if group is None else (lambda nbytes: 3.0 if nbytes > 60 else 1.0))

    b = TraceBuilder()
    to_1 = b.send(1, 100, tag=1, pg_name="ep")
    b.send(2, 100, tag=2, pg_name="ep")
    b.send(2, 100, tag=3, pg_name="ep")  # the same peer again: still two peers on "ep"
    lone = b.send(3, 50, tag=4)
    unknown = b.send(3, 50, tag=5, pg_name="nowhere")
    trace = b.build(rank=0)
    sends = RuntimeSends(pair, CommGroups(4, {"ep": (0, 1, 2)}))
    index = {node: i for i, node in enumerate(trace.ids)}

    # a named group: its members, the rank's two peers there, the wire by size; asked once per pair and group
    assert sends(0, 1, 100, trace, index[to_1]) == (300, 7.0)
    assert sends(0, 1, 50, trace, index[to_1]) == (50, 7.0)
    # no name, or a name no group defines: the pair's own communicator, one scale for every size
    assert sends(0, 3, 50, trace, index[lone]) == (100, 7.0)
    assert sends(0, 3, 50, trace, index[unknown]) == (100, 7.0)
    assert asked == [(0, 1, (0, 1, 2), 2), (0, 3, None, 1), (0, 3, None, 1)]
