"""``chakra-et``: an algorithm read from a Chakra ET family, one file per algorithm rank."""

from __future__ import annotations

from etsim.chakra.algorithm import RECV, SEND, AlgoGraph, algo_graph_from_trace
from etsim.chakra.graph import CollectiveType
from etsim.chakra.io import load_workload
from etsim.errors import ConfigError, TraceError
from etsim.system.algorithms.base import CollectiveAlgorithm

__all__ = ["ChakraAlgorithm"]


class ChakraAlgorithm(CollectiveAlgorithm):
    """An algorithm ingested from a Chakra ET family: one file per algorithm rank.

    Algorithm rank *i* runs on the *i*-th rank of the communicator group. Sizes are symbolic
    (``msg_chunk_cnt`` of ``total_chunk_cnt``, scaled to the workload's ``comm_size``) or the
    files' absolute ``comm_size``.

    Args:
        spec: the family (a prefix, ``P.et`` or a directory).
        ignore_ctrl_deps: walk data dependencies only.

    Raises:
        ConfigError: the family cannot be read (the message names it).
    """

    name = "chakra-et"
    source = "chakra-et"
    collectives = frozenset(CollectiveType)

    def __init__(self, spec: str, *, ignore_ctrl_deps: bool = False) -> None:
        self.spec = spec
        try:
            self.workload = load_workload(spec)
        except TraceError as exc:
            raise ConfigError(f"algorithm {spec!r}: {exc}") from None
        self.ignore_ctrl_deps = ignore_ctrl_deps
        self._graphs: dict[int, AlgoGraph] = {}

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """Any collective, on a group as large as the family."""
        n = self.workload.num_ranks
        if n != group_size:
            return f"algorithm {self.spec!r} has {n} rank files but the communicator group has {group_size} ranks"
        return None

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """The ingested graph of algorithm rank *position*."""
        graph = self._graphs.get(position)
        if graph is None:
            try:
                graph = algo_graph_from_trace(self.workload[position], ignore_ctrl_deps=self.ignore_ctrl_deps)
            except ValueError as exc:
                raise ConfigError(f"algorithm {self.spec!r}: {exc}") from None
            for pos, peer in enumerate(graph.peers):
                if graph.kinds[pos] in (SEND, RECV) and not 0 <= peer < group_size:
                    raise ConfigError(
                        f"algorithm {self.spec!r}: {self.workload[position].describe(pos)}: peer {peer} "
                        f"is outside the {group_size}-rank group"
                    )
            self._graphs[position] = graph
        return graph
