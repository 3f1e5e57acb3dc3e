"""Workload sends as a runtime's own (NCCL's ncclSend): the communicator each names, and its fan-out."""

from __future__ import annotations

from collections.abc import Callable

from etsim.chakra.graph import NodeType, Trace
from etsim.errors import ConfigError
from etsim.system.groups import CommGroups

__all__ = ["P2pPair", "RuntimeSends"]

#: How a runtime carries a pair's messages: wire bytes per byte, its delay (ns) before a message enters the network,
#: and None, or the wire bytes per byte as a function of a message's size (the scale is then unused).
P2pPair = tuple[float, float, "Callable[[float], float] | None"]

_SEND = int(NodeType.COMM_SEND_NODE)


class RuntimeSends:
    """The wire bytes and the delay of each workload send, as the runtime that serves the run sends it.

    A send runs on the communicator its node names (``pg_name``); one without a name on its pair's own, as PyTorch
    gives a lone send; a name no group defines also gets the pair's (a send has no collective to match, so its
    group only shapes its timing). With it goes the send's fan-out: how many peers its rank sends to on that
    communicator (from its trace: one for a ring or a pipeline, every other member for an all-to-all), since NCCL
    shares a rank's channels among the peers of one group call. A pair's timing is asked once per communicator.

    Args:
        pair: the runtime's timing of a pair's sends, ``pair(src, dst, group, peers)`` (``NcclAlgorithm.p2p_pair``;
            *group* None: the pair's own communicator).
        groups: the run's communicator groups.
    """

    def __init__(self, pair: Callable[[int, int, tuple[int, ...] | None, int], P2pPair], groups: CommGroups) -> None:
        self._pair = pair
        self._groups = groups
        self._pairs: dict[tuple[int, int, str | None], P2pPair] = {}

    def __call__(self, src: int, dst: int, nbytes: float, trace: Trace, j: int) -> tuple[float, float]:
        """Node *j* of *trace* (rank *src*'s), a send of *nbytes* to *dst*: (wire bytes, delay ns)."""
        key = (src, dst, trace.pg_name[j] or None)
        found = self._pairs.get(key)
        if found is None:
            found = self._pairs[key] = self._timing(src, dst, key[2], trace)
        scale, delay, sized = found
        return float(round(nbytes * (scale if sized is None else sized(nbytes)))), delay

    def _timing(self, src: int, dst: int, pg_name: str | None, trace: Trace) -> P2pPair:
        try:
            group = tuple(self._groups.resolve(pg_name)) if pg_name else None
        except ConfigError:
            group = None
        if group is None:
            return self._pair(src, dst, None, 1)
        peers = {trace.comm_dst[i] for i, t in enumerate(trace.types) if t == _SEND and trace.pg_name[i] == pg_name}
        return self._pair(src, dst, group, len(peers))
