"""``RuntimeSends``: the communicator a workload send names and its rank's fan-out on it."""

from __future__ import annotations

from etsim.chakra.builder import TraceBuilder
from etsim.system.groups import CommGroups
from etsim.system.p2p import RuntimeSends


def test_a_send_runs_on_its_named_group_with_its_ranks_peers_there() -> None:
    calls: list[tuple[int, int, float, tuple[int, ...] | None, int]] = []

    def message(src: int, dst: int, nbytes: float, group: tuple[int, ...] | None, peers: int) -> tuple[float, float]:
        calls.append((src, dst, nbytes, group, peers))
        return 2 * nbytes, 7.0

    b = TraceBuilder()
    to_1 = b.send(1, 100, tag=1, pg_name="ep")
    b.send(2, 100, tag=2, pg_name="ep")
    b.send(2, 100, tag=3, pg_name="ep")  # the same peer again: still two peers on "ep"
    lone = b.send(3, 50, tag=4)
    unknown = b.send(3, 50, tag=5, pg_name="nowhere")
    trace = b.build(rank=0)
    sends = RuntimeSends(message, CommGroups(4, {"ep": (0, 1, 2)}))
    index = {node: i for i, node in enumerate(trace.ids)}

    assert sends(0, 1, 100, trace, index[to_1]) == (200, 7.0)
    sends(0, 3, 50, trace, index[lone])
    sends(0, 3, 50, trace, index[unknown])
    # a named group: its members, the rank's two peers there; no name, or a name no group defines: the pair's own
    assert calls == [(0, 1, 100, (0, 1, 2), 2), (0, 3, 50, None, 1), (0, 3, 50, None, 1)]
