"""Collectives: algorithm choice, matching across ranks, and expansion into algorithm graphs.

A rank issuing a COMM_COLL node *joins* the k-th collective of its communicator group (k =
how many collectives it issued on that group before). The first rank to join fixes the
collective's type, size and algorithm; every later rank must agree or the run stops with an
error naming both nodes. Each rank then runs its own part of the algorithm graph; there is no
barrier across ranks (a rank that arrives early simply waits for its peers' messages).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from etsim.chakra.algorithm import SEND, AlgoGraph, collective_buffer_bytes
from etsim.chakra.graph import COLLECTIVE_NAMES, CollectiveType, NodeType, Trace
from etsim.errors import ConfigError, EtsimError, SimulationError, warn
from etsim.system.algorithms import CollectiveAlgorithm
from etsim.system.algorithms.sources import AlgorithmContext, resolve_algorithm
from etsim.system.config import SystemConfig, chunk_sizes
from etsim.system.groups import CommGroups

__all__ = ["CollectivePart", "Participation", "System", "default_algorithm"]

#: Algorithm used when nothing is configured for a collective.
_DEFAULTS = {CollectiveType.GATHER: "direct", CollectiveType.SCATTER: "direct"}


def default_algorithm(collective: CollectiveType) -> str:
    """The native algorithm used when none is configured (``ring``, or ``direct`` for gather/scatter)."""
    return _DEFAULTS.get(collective, "ring")


@dataclass(slots=True)
class CollectivePart:
    """One chunk of one rank's share of a collective: an algorithm graph to walk."""

    graph: AlgoGraph
    position: int
    """The rank's position in the group."""
    group: tuple[int, ...]
    """Global ranks by group position."""
    namespace: int
    """Unique per collective instance and chunk; keeps its messages apart from all others."""
    bytes_per_unit: float
    """Bytes per graph size unit (per chunk for symbolic graphs, 1 for byte-sized graphs)."""
    endpoint_delay: float = 0.0
    """ns every message of this part waits before entering the network."""
    start_delay: float = 0.0
    """ns before the part starts (:attr:`SystemConfig.stream_delay`)."""
    comp_ns: float | None = None
    """Duration of COMP nodes that carry none; None = the reduction model (bytes / bandwidth)."""


@dataclass(slots=True)
class _Instance:
    collective: CollectiveType
    size: int
    where: str
    label: str
    algorithm: CollectiveAlgorithm
    namespace: int
    key: tuple[str, int]
    joined: int = 0


@dataclass(slots=True)
class Participation:
    """A rank's share of one collective (``parts`` is empty when there is nothing to send).

    Attributes:
        instance: identifies the collective instance across the ranks of its group.
        all_joined: this rank was the last of the group to issue it.
        synchronised: the call may complete on a rank only once every member has issued it.
    """

    collective: CollectiveType
    size: int
    group: tuple[int, ...]
    algorithm: str
    parts: list[CollectivePart] = field(default_factory=list)
    instance: tuple[str, int] = ("0", 0)
    all_joined: bool = True
    synchronised: bool = True


def _lookup(collective: CollectiveType) -> CollectiveType:
    """The collective an algorithm is asked for (a reduce-scatter-block is a reduce-scatter)."""
    return CollectiveType.REDUCE_SCATTER if collective == CollectiveType.REDUCE_SCATTER_BLOCK else collective


class System:
    """Collective matching and expansion for one simulation.

    Args:
        config: system parameters (algorithms, chunks, …).
        groups: communicator groups.
        dims: dimension sizes of the topology (for hierarchical algorithms), or None.
    """

    def __init__(self, config: SystemConfig, groups: CommGroups, dims: Sequence[int] | None = None) -> None:
        self.config = config
        self.groups = groups
        self.dims = tuple(dims) if dims else None
        self._algorithms: dict[str, tuple[str, CollectiveAlgorithm]] = {}
        self._by_spec: dict[str, tuple[str, CollectiveAlgorithm]] = {}
        self._warned: set[tuple[str, ...]] = set()
        for key, spec in config.algorithms.items():
            origin = config.algorithm_origins.get(key, "--algo")
            if key != "default" and key not in COLLECTIVE_NAMES.values():
                valid = ", ".join(sorted(COLLECTIVE_NAMES.values()))
                raise ConfigError(f"{origin}: unknown collective {key!r}; valid: {valid}, default")
            self._algorithms[key] = self._resolve(spec, origin)
        self._sequence: dict[tuple[str, int], int] = {}
        self._instances: dict[tuple[str, int], _Instance] = {}
        self._next_namespace = 0
        self._graphs: dict[tuple[int, int, int, int], AlgoGraph] = {}

    def _resolve(self, spec: str, origin: str = "--algo") -> tuple[str, CollectiveAlgorithm]:
        found = self._by_spec.get(spec)
        if found is None:
            context = AlgorithmContext(
                base_dir=self.config.base_dir,
                dims=self.dims,
                ignore_ctrl_deps=self.config.ignore_ctrl_deps,
                phase_delay=self.config.phase_delay,
            )
            found = self._by_spec[spec] = resolve_algorithm(spec, context, origin=origin)
        return found

    def _warn_once(self, key: tuple[str, ...], message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warn(message)

    def algorithm_for(self, collective: CollectiveType) -> tuple[str, CollectiveAlgorithm]:
        """The configured (or default) algorithm of *collective*.

        A ``default`` algorithm serves the collectives it implements; the others fall back to their
        own default (ring, or direct for gather/scatter), and a warning says so once.
        """
        name = COLLECTIVE_NAMES[collective]
        if name in self._algorithms:
            return self._algorithms[name]
        if "default" in self._algorithms:
            label, algo = self._algorithms["default"]
            if collective in algo.collectives:
                return label, algo
            fallback = default_algorithm(collective)
            self._warn_once(
                ("fallback", label, name),
                f"algorithm {label!r} does not implement {name}; {fallback!r} served it "
                f"(choose one with --algo {name}=ALGO or algorithms: {{{name}: ALGO}})",
            )
        return self._resolve(default_algorithm(collective))

    def join(
        self,
        rank: int,
        collective: CollectiveType,
        size: int,
        pg_name: str | None,
        where: str,
        node_id: int | None = None,
    ) -> Participation:
        """Rank *rank* issues a collective; return its share (algorithm graphs per chunk).

        Raises:
            SimulationError: the rank is not in the group, or the collective differs from the one
                the group's other ranks issued at the same position (both nodes named).
        """
        group = self.groups.resolve(pg_name)
        group_key = pg_name if pg_name and pg_name != "0" else "0"
        try:
            position = group.index(rank)
        except ValueError:
            raise SimulationError(
                f"{where}: rank {rank} is not a member of group {group_key!r} {list(group)}"
            ) from None
        seq_key = (group_key, rank)
        seq = self._sequence.get(seq_key, 0)
        self._sequence[seq_key] = seq + 1
        key = (group_key, seq)
        inst = self._instances.get(key)
        n = len(group)
        lookup = _lookup(collective)
        if inst is None:
            node_spec = self.config.node_algorithms.get(node_id) if node_id is not None else None
            origin = "per-node algorithm"
            label, algo = self._resolve(node_spec, origin) if node_spec else self.algorithm_for(lookup)
            reason = algo.supports(lookup, n)
            if reason is not None and n > 1:
                raise ConfigError(f"{where}: {reason}")
            if n > 1:  # refuse an algorithm that does not compute its collective (verified once, cached)
                algo.check_correct(lookup, n, where=where, label=label)
            inst = _Instance(collective, size, where, label, algo, self._next_namespace, key)
            self._next_namespace += len(self._stream_sizes(collective, size, n))
            self._instances[key] = inst
            self._check_instance(inst, lookup, n)
        elif inst.collective != collective or inst.size != size:
            raise SimulationError(
                f"collective #{seq} of group {group_key!r} differs between ranks: {where} issues "
                f"{collective.name.lower()} of {size} bytes but {inst.where} issued "
                f"{inst.collective.name.lower()} of {inst.size} bytes"
            )
        inst.joined += 1
        if inst.joined == n:
            del self._instances[key]
        share = Participation(
            collective,
            size,
            group,
            inst.label,
            instance=key,
            all_joined=inst.joined == n,
            synchronised=self.config.synchronise_collectives,
        )
        if n == 1:
            self._warn_once(
                ("one-rank", group_key),
                f"{where}: a {collective.name.lower()} over a 1-rank group moves no data and costs nothing",
            )
            return share
        graph_key = (id(inst.algorithm), int(lookup), n, position)
        graph = self._graphs.get(graph_key)
        if graph is None:
            graph = inst.algorithm.graph(lookup, n, position)
            self._graphs[graph_key] = graph
        config = self.config
        if config.families_as_written and inst.algorithm.source == "chakra-et":
            # One stream of the files' own sizes, no endpoint delay or reduction model; COMP nodes
            # without a duration take the minimum compute time.
            if graph.total_chunks is not None:
                raise ConfigError(
                    f"{where}: algorithm family {inst.label!r} gives sizes as chunk counts "
                    "(msg_chunk_cnt/total_chunk_cnt), but families are run as written here, with the absolute "
                    "comm_size of each node — simulate it with `etsim run`, which scales chunk counts"
                )
            part = CollectivePart(graph, position, group, inst.namespace, 1.0, comp_ns=config.min_compute_ns)
            share.parts.append(part)
            return share
        start = config.stream_delay
        for c, stream in enumerate(self._stream_sizes(collective, size, n)):
            if graph.total_chunks is not None:
                unit = collective_buffer_bytes(lookup, stream, n) / graph.total_chunks
            else:
                unit = stream / size if size else 0.0  # byte-sized graphs: scaled by the stream's share
            if c == 0 and size > 0:
                self._check_message_size(graph, unit, where, collective, size, n, inst.label)
            part = CollectivePart(graph, position, group, inst.namespace + c, unit, self.config.endpoint_delay, start)
            share.parts.append(part)
        return share

    def message_estimate(self, traces: Sequence[Trace]) -> int:
        """About how many messages the collectives of *traces* will send (for a warning before a long run).

        Counts, per collective node of every rank, the SEND nodes of that rank's algorithm graph
        times the number of chunks. Collectives that cannot be resolved count as none (the run
        reports them).
        """
        total = 0
        counted: dict[tuple[int, str, int, int], int] = {}
        for rank, trace in enumerate(traces):
            for pos, node_type in enumerate(trace.types):
                if node_type != NodeType.COMM_COLL_NODE or trace.is_cpu_op[pos] or trace.comm_type[pos] is None:
                    continue
                try:
                    collective = _lookup(CollectiveType(trace.comm_type[pos]))  # type: ignore[arg-type]
                    group = self.groups.resolve(trace.pg_name[pos])
                    n = len(group)
                    if n == 1 or rank not in group:
                        continue
                    label, algo = self.algorithm_for(collective)
                    key = (int(collective), label, n, group.index(rank))
                    sends = counted.get(key)
                    if sends is None:
                        if algo.supports(collective, n) is not None:
                            continue
                        graph = algo.graph(collective, n, group.index(rank))
                        sends = counted[key] = graph.kinds.count(SEND)
                except (EtsimError, ValueError):
                    continue
                total += sends * self.config.chunks
        return total

    def _check_instance(self, inst: _Instance, lookup: CollectiveType, n: int) -> None:
        """Say once when an algorithm runs outside the sizes it declares (MSCCL-IR minBytes/maxBytes)."""
        window = getattr(inst.algorithm, "byte_window", None)
        if window is None or n == 1:
            return
        low, high = window
        buffer = collective_buffer_bytes(lookup, inst.size, n)
        if buffer < low or (high is not None and buffer > high):
            upper = "no upper bound" if high is None else f"{high:,}"
            self._warn_once(
                ("window", inst.label),
                f"{inst.where}: algorithm {inst.label!r} declares it is meant for buffers of {low:,} to {upper} "
                f"bytes (minBytes/maxBytes), not {buffer:,.0f}; a runtime would not choose it for this call",
            )

    def _check_message_size(
        self, graph: AlgoGraph, unit: float, where: str, collective: CollectiveType, size: int, n: int, label: str
    ) -> None:
        """Refuse a split that makes messages smaller than one byte."""
        sizes = [graph.chunks[i] * unit for i, kind in enumerate(graph.kinds) if kind == SEND and graph.chunks[i] > 0]
        if sizes and min(sizes) < 1.0:
            raise ConfigError(
                f"{where}: {collective.name.lower()} of {size} bytes over {n} ranks in {self.config.chunks} chunk(s) "
                f"with {label!r} makes messages of {min(sizes):.3g} bytes, less than one byte; use fewer chunks "
                "(chunks / preferred-dataset-splits) or a larger size"
            )

    def _stream_sizes(self, collective: CollectiveType, size: int, group_size: int) -> list[float]:
        """Bytes of each chunk (stream) of a collective (:func:`~etsim.system.config.chunk_sizes`)."""
        per_rank = collective == CollectiveType.ALL_GATHER
        return chunk_sizes(size, self.config.chunks, group_size, per_rank_size=per_rank, rule=self.config.chunking)
