"""Workload sends as a runtime's own (NCCL's ncclSend): the communicator each names, and its group call."""

from __future__ import annotations

from collections.abc import Callable

from etsim.chakra.graph import NodeType, Trace
from etsim.errors import ConfigError
from etsim.system.groups import CommGroups

__all__ = ["P2pPair", "RuntimeSends"]

#: How a runtime carries a pair's messages: wire bytes per byte, its delay (ns) before a message enters the network,
#: and None, or the wire bytes per byte as a function of a message's size (the scale is then unused).
P2pPair = tuple[float, float, "Callable[[float], float] | None"]

_SEND, _RECV = int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)


class RuntimeSends:
    """The wire bytes and the delay of each workload send, as the runtime that serves the run sends it.

    A send runs on the communicator its node names (``pg_name``); one without a name on its pair's own, as PyTorch
    gives a lone send, and so does one whose group is not defined or does not hold both ends (a send has no
    collective to match, so its group only shapes its timing). On a named communicator a send belongs to a group
    call: the sends and receives of its rank on that communicator that depend on the same nodes (an all-to-all's
    exchange, a ring's send and receive), issued together; NCCL shares the call's channels among its peers and
    splits each channel's warps between a send and a receive. Of the call go the peers its sends reach and whether
    it receives; a trace's calls are found only where they matter (the runtime times the pair by size), and a pair's
    timing is asked once per communicator and call shape.

    Args:
        pair: the runtime's timing of a pair's sends, ``pair(src, dst, group, peers, receives)``
            (``NcclAlgorithm.p2p_pair``; *group* None: the pair's own communicator).
        groups: the run's communicator groups.
    """

    def __init__(
        self, pair: Callable[[int, int, tuple[int, ...] | None, int, bool], P2pPair], groups: CommGroups
    ) -> None:
        self._pair = pair
        self._groups = groups
        self._pairs: dict[tuple[int, int, str | None], P2pPair] = {}
        self._shaped: dict[tuple[int, int, str, int, bool], P2pPair] = {}
        self._calls: dict[tuple[int, str], dict[int, tuple[int, bool]]] = {}

    def __call__(self, src: int, dst: int, nbytes: float, trace: Trace, j: int) -> tuple[float, float]:
        """Node *j* of *trace* (rank *src*'s), a send of *nbytes* to *dst*: (wire bytes, delay ns)."""
        pg_name = trace.pg_name[j] or None
        found = self._pairs.get((src, dst, pg_name))
        if found is None:  # as a lone send: where the call's shape does not matter, the timing of every send
            found = self._pairs[src, dst, pg_name] = self._timing(src, dst, pg_name, 1, False)
        if found[2] is not None and pg_name is not None:  # it does: the send's own call
            calls = self._calls.get((id(trace), pg_name))
            if calls is None:
                calls = self._calls[id(trace), pg_name] = _group_calls(trace, pg_name)
            peers, receives = calls[j]
            if peers != 1 or receives:
                key = (src, dst, pg_name, peers, receives)
                shaped = self._shaped.get(key)
                if shaped is None:
                    shaped = self._shaped[key] = self._timing(*key)
                found = shaped
        scale, delay, sized = found
        return float(round(nbytes * (scale if sized is None else sized(nbytes)))), delay

    def _timing(self, src: int, dst: int, pg_name: str | None, peers: int, receives: bool) -> P2pPair:
        try:
            group = tuple(self._groups.resolve(pg_name)) if pg_name else None
        except ConfigError:
            group = None
        return self._pair(src, dst, group, peers, receives)


def _group_calls(trace: Trace, pg_name: str) -> dict[int, tuple[int, bool]]:
    """Per send node of *trace* on *pg_name*: its group call's peers and whether the call receives.

    A call is the rank's sends and receives on *pg_name* with the same dependencies (data and control).
    """
    data_ptr, data_idx, ctrl_ptr, ctrl_idx = trace.data_ptr, trace.data_idx, trace.ctrl_ptr, trace.ctrl_idx
    names = trace.pg_name
    members: dict[tuple[int, ...], list[int]] = {}
    for i in [i for i, t in enumerate(trace.types) if t in (_SEND, _RECV)]:
        if names[i] == pg_name:
            deps = (
                *sorted(data_idx[data_ptr[i] : data_ptr[i + 1]]),
                -1,
                *sorted(ctrl_idx[ctrl_ptr[i] : ctrl_ptr[i + 1]]),
            )
            members.setdefault(deps, []).append(i)
    calls: dict[int, tuple[int, bool]] = {}
    for nodes in members.values():
        sends = [i for i in nodes if trace.types[i] == _SEND]
        shape = (len({trace.comm_dst[i] for i in sends}), len(sends) < len(nodes))
        for i in sends:
            calls[i] = shape
    return calls
