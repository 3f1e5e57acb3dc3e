"""``chakra-et``: an algorithm read from a Chakra ET family, one file per algorithm rank."""

from __future__ import annotations

from etsim.algo.family_io import algo_graph_from_trace, recorded_collective
from etsim.algo.graph import RECV, SEND, AlgoGraph
from etsim.chakra.graph import CollectiveType, NodeType
from etsim.chakra.io import load_workload
from etsim.errors import ConfigError, TraceError, warn
from etsim.system.algorithms.base import CollectiveAlgorithm

__all__ = ["ChakraAlgorithm"]


class ChakraAlgorithm(CollectiveAlgorithm):
    """An algorithm ingested from a Chakra ET family: one file per algorithm rank.

    Algorithm rank *i* runs on the *i*-th rank of the communicator group. Sizes are symbolic
    (``msg_chunk_cnt`` of ``total_chunk_cnt``, scaled to the workload's ``comm_size``) or the
    files' absolute ``comm_size``. The collective it implements is the one its global metadata
    records (``collective``, as etsim and the MSCCL-IR converters write it); a family that records
    none runs for any collective, with a warning once.

    Args:
        spec: the family (a prefix, ``P.et`` or a directory).
        ignore_ctrl_deps: walk data dependencies only.

    Raises:
        ConfigError: the family cannot be read, is a workload (it has collective nodes), or its ranks
            disagree on the collective they implement (the message names it).
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
        self._warned = False
        for trace in self.workload:
            for pos, node_type in enumerate(trace.types):
                if node_type == NodeType.COMM_COLL_NODE:
                    raise ConfigError(
                        f"algorithm {spec!r} is a workload, not an algorithm family: {trace.describe(pos)} is a "
                        "collective (COMM_COLL) node; an algorithm is made of SEND, RECV and COMP nodes"
                    )
        recorded = set()
        for trace in self.workload:
            try:
                recorded.add(recorded_collective(trace))
            except ValueError as exc:
                raise ConfigError(f"algorithm {spec!r}: {trace.where()}metadata 'collective': {exc}") from None
        if len(recorded) > 1:
            names = sorted(str(getattr(r, "name", r)).lower() for r in recorded)
            raise ConfigError(f"algorithm {spec!r}: its rank files record different collectives ({', '.join(names)})")
        #: The collective the files record (a CollectiveType, "any", or None when they record none).
        self.recorded = recorded.pop() if recorded else None
        if isinstance(self.recorded, CollectiveType):
            self.collectives = frozenset({self.recorded})  # type: ignore[misc]

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """The recorded collective (any, if none is recorded), on a group as large as the family."""
        if isinstance(self.recorded, CollectiveType) and collective != self.recorded:
            return (
                f"algorithm {self.spec!r} implements {self.recorded.name.lower()} (its metadata says so), "
                f"not {collective.name.lower()}"
            )
        n = self.workload.num_ranks
        if n != group_size:
            return f"algorithm {self.spec!r} has {n} rank files but the communicator group has {group_size} ranks"
        if self.recorded is None and not self._warned:
            self._warned = True
            warn(
                f"algorithm {self.spec!r} records no collective type in its metadata; etsim cannot check that it "
                f"implements {collective.name.lower()} (etsim's writers record it)"
            )
        return None

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """The ingested graph of algorithm rank *position*."""
        graph = self._graphs.get(position)
        if graph is None:
            trace = self.workload[position]
            try:
                graph = algo_graph_from_trace(trace, ignore_ctrl_deps=self.ignore_ctrl_deps)
            except ValueError as exc:
                raise ConfigError(f"algorithm {self.spec!r}: {exc}") from None
            for pos, peer in enumerate(graph.peers):
                if graph.kinds[pos] in (SEND, RECV) and not 0 <= peer < group_size:
                    raise ConfigError(
                        f"algorithm {self.spec!r}: {trace.describe(pos)}: peer {peer} is outside the {group_size}-rank "
                        "group"
                    )
            self._graphs[position] = graph
            # The graph is all that is read from now on: let the parsed file go (a family's files take more
            # memory than its graphs). The slot stays, so the family keeps its rank count.
            self.workload.traces[position] = None  # type: ignore[call-overload]
        return graph
