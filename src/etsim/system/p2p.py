"""Workload sends as a runtime's own (NCCL's ncclSend): the communicator each names, and its fan-out."""

from __future__ import annotations

from collections.abc import Callable

from etsim.chakra.graph import NodeType, Trace
from etsim.errors import ConfigError
from etsim.system.groups import CommGroups

__all__ = ["P2pMessage", "RuntimeSends"]

#: ``(src, dst, bytes, group, peers) → (wire bytes, delay ns)``: a runtime's send of *bytes* on the communicator
#: *group* (None: the pair's own), its rank sending to *peers* peers of that communicator.
P2pMessage = Callable[[int, int, float, "tuple[int, ...] | None", int], "tuple[float, float]"]

_SEND = int(NodeType.COMM_SEND_NODE)


class RuntimeSends:
    """The wire bytes and the delay of each workload send, as the runtime that serves the run sends it.

    A send runs on the communicator its node names (``pg_name``); one without a name on its pair's own, as PyTorch
    gives a lone send; a name no group defines also gets the pair's (a send has no collective to match, so its
    group only shapes its timing). With it goes the send's fan-out: how many peers its rank sends to on that
    communicator (from its trace: one for a ring or a pipeline, every other member for an all-to-all), since NCCL
    shares a rank's channels among the peers of one group call.

    Args:
        message: the runtime's timing of one send (``NcclAlgorithm.p2p_message``).
        groups: the run's communicator groups.
    """

    def __init__(self, message: P2pMessage, groups: CommGroups) -> None:
        self._message = message
        self._groups = groups
        self._members: dict[str, tuple[int, ...]] = {}
        self._peers: dict[tuple[int, str], int] = {}

    def __call__(self, src: int, dst: int, nbytes: float, trace: Trace, j: int) -> tuple[float, float]:
        """Node *j* of *trace*, a send of *nbytes* from *src* to *dst*: (wire bytes, delay ns)."""
        pg_name = trace.pg_name[j]
        if not pg_name:
            return self._message(src, dst, nbytes, None, 1)
        group = self._members.get(pg_name)
        if group is None:
            try:
                group = tuple(self._groups.resolve(pg_name))
            except ConfigError:
                group = ()
            self._members[pg_name] = group
        if not group:
            return self._message(src, dst, nbytes, None, 1)
        key = (id(trace), pg_name)
        peers = self._peers.get(key)
        if peers is None:
            peers = self._peers[key] = len(
                {trace.comm_dst[i] for i, t in enumerate(trace.types) if t == _SEND and trace.pg_name[i] == pg_name}
            )
        return self._message(src, dst, nbytes, group, peers)
