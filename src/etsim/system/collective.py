"""Collectives: algorithm choice, matching across ranks, and expansion into algorithm graphs.

A rank issuing a COMM_COLL node *joins* the k-th collective of its communicator group (k =
how many collectives it issued on that group before). The first rank to join fixes the
collective's type, size and algorithm; every later rank must agree or the run stops with an
error naming both nodes. Each rank then runs its own part of the algorithm graph; there is no
barrier across ranks (a rank that arrives early simply waits for its peers' messages).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from etsim.chakra.graph import COLLECTIVE_NAMES, CollectiveType
from etsim.chakra.io import load_workload
from etsim.errors import ConfigError, RegistryError, SimulationError, TraceError
from etsim.producers.builder import AlgoGraph, algo_graph_from_trace, collective_buffer_bytes
from etsim.system.algorithms import ALGORITHMS, CollectiveAlgorithm
from etsim.system.config import SystemConfig
from etsim.system.groups import CommGroups

__all__ = ["ChakraAlgorithm", "CollectivePart", "Participation", "System", "default_algorithm", "resolve_algorithm"]

#: Algorithm used when nothing is configured for a collective.
_DEFAULTS = {CollectiveType.GATHER: "direct", CollectiveType.SCATTER: "direct"}


def default_algorithm(collective: CollectiveType) -> str:
    """The native algorithm used when none is configured (``ring``, or ``direct`` for gather/scatter)."""
    return _DEFAULTS.get(collective, "ring")


class ChakraAlgorithm(CollectiveAlgorithm):
    """An algorithm ingested from a Chakra ET family: one file per algorithm rank.

    Algorithm rank *i* runs on the *i*-th rank of the communicator group. Sizes are symbolic
    (``msg_chunk_cnt`` of ``total_chunk_cnt``, scaled to the workload's ``comm_size``) or the
    files' absolute ``comm_size``.
    """

    name = "chakra-et"
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
                if graph.kinds[pos] != 4 and not 0 <= peer < group_size:
                    raise ConfigError(
                        f"algorithm {self.spec!r}: {self.workload[position].describe(pos)}: peer {peer} "
                        f"is outside the {group_size}-rank group"
                    )
            self._graphs[position] = graph
        return graph


def resolve_algorithm(
    spec: str,
    *,
    base_dir: str = ".",
    dims: Sequence[int] | None = None,
    ignore_ctrl_deps: bool = False,
    phase_delay: float = 0.0,
) -> tuple[str, CollectiveAlgorithm]:
    """Turn an ``--algo`` value into ``(label, algorithm)``: a registry name, else a Chakra ET family.

    Raises:
        ConfigError: neither a known name nor a readable family; the message lists both.
    """
    names = ALGORITHMS.names()
    if spec in names or (":" in spec and not os.path.exists(spec)):
        cls = ALGORITHMS.get(spec)
        if getattr(cls, "needs_dims", False):
            return spec, cls(dims=tuple(dims) if dims else None, phase_delay=phase_delay)  # type: ignore[call-arg]
        return spec, cls()
    path = spec if os.path.isabs(spec) else os.fspath(Path(base_dir) / spec)
    if spec.endswith(".xml"):  # MSCCL-IR, converted on the fly (cached per file)
        from etsim.producers.msccl import load_msccl_algorithm

        return spec, load_msccl_algorithm(path)
    try:
        return spec, ChakraAlgorithm(path, ignore_ctrl_deps=ignore_ctrl_deps)
    except ConfigError as exc:
        raise ConfigError(
            f"--algo {spec!r} is neither an algorithm name ({', '.join(names)}) nor a Chakra ET family: {exc}"
        ) from None


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
    """ns before the part starts (ASTRA-sim: one endpoint delay per stream)."""
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
    joined: int = 0


@dataclass(slots=True)
class Participation:
    """A rank's share of one collective (``parts`` is empty when there is nothing to send)."""

    collective: CollectiveType
    size: int
    group: tuple[int, ...]
    algorithm: str
    parts: list[CollectivePart] = field(default_factory=list)


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
        for key, spec in config.algorithms.items():
            if key != "default" and key not in COLLECTIVE_NAMES.values():
                valid = ", ".join(sorted(COLLECTIVE_NAMES.values()))
                raise ConfigError(f"algorithms: unknown collective {key!r}; valid: {valid}, default")
            self._algorithms[key] = self._resolve(spec)
        self._sequence: dict[tuple[str, int], int] = {}
        self._instances: dict[tuple[str, int], _Instance] = {}
        self._next_namespace = 0
        self._graphs: dict[tuple[int, int, int, int], AlgoGraph] = {}

    def _resolve(self, spec: str) -> tuple[str, CollectiveAlgorithm]:
        found = self._by_spec.get(spec)
        if found is None:
            try:
                found = resolve_algorithm(
                    spec,
                    base_dir=self.config.base_dir,
                    dims=self.dims,
                    ignore_ctrl_deps=self.config.ignore_ctrl_deps,
                    phase_delay=self.config.astra.endpoint_delay if self.config.astra else 0.0,
                )
            except RegistryError as exc:
                raise ConfigError(str(exc)) from None
            self._by_spec[spec] = found
        return found

    def algorithm_for(self, collective: CollectiveType) -> tuple[str, CollectiveAlgorithm]:
        """The configured (or default) algorithm of *collective*."""
        name = COLLECTIVE_NAMES[collective]
        if name in self._algorithms:
            return self._algorithms[name]
        if "default" in self._algorithms:
            # The default applies to the collectives the algorithm implements; others use their own
            # default (an algorithm that implements a collective but not this group size is an error).
            label, algo = self._algorithms["default"]
            if collective in algo.collectives:
                return label, algo
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
        if inst is None:
            lookup = CollectiveType.REDUCE_SCATTER if collective == CollectiveType.REDUCE_SCATTER_BLOCK else collective
            node_spec = self.config.node_algorithms.get(node_id) if node_id is not None else None
            label, algo = self._resolve(node_spec) if node_spec else self.algorithm_for(lookup)
            reason = algo.supports(lookup, len(group))
            if reason is not None and len(group) > 1:
                raise ConfigError(f"{where}: {reason}")
            inst = _Instance(collective, size, where, label, algo, self._next_namespace)
            self._next_namespace += len(self._stream_sizes(collective, size, len(group)))
            self._instances[key] = inst
        elif inst.collective != collective or inst.size != size:
            raise SimulationError(
                f"collective #{seq} of group {group_key!r} differs between ranks: {where} issues "
                f"{collective.name.lower()} of {size} bytes but {inst.where} issued "
                f"{inst.collective.name.lower()} of {inst.size} bytes"
            )
        inst.joined += 1
        if inst.joined == len(group):
            del self._instances[key]
        share = Participation(collective, size, group, inst.label)
        n = len(group)
        if n == 1:
            return share
        lookup = CollectiveType.REDUCE_SCATTER if collective == CollectiveType.REDUCE_SCATTER_BLOCK else collective
        graph_key = (id(inst.algorithm), int(lookup), n, position)
        graph = self._graphs.get(graph_key)
        if graph is None:
            graph = inst.algorithm.graph(lookup, n, position)
            self._graphs[graph_key] = graph
        astra = self.config.astra
        custom = isinstance(inst.algorithm, ChakraAlgorithm)
        if astra is not None and custom:
            # ASTRA-sim runs a custom collective as one stream of the ET's own sizes, with no endpoint
            # delay or reduction charge; COMP nodes take their duration (1 ns if none).
            if graph.total_chunks is not None:
                raise ConfigError(
                    f"{where}: custom collective {inst.label!r} gives sizes as chunk counts "
                    "(msg_chunk_cnt/total_chunk_cnt); ASTRA-sim runs custom collectives with the absolute "
                    "comm_size of each node — simulate it with `etsim run`, which scales chunk counts"
                )
            share.parts.append(CollectivePart(graph, position, group, inst.namespace, 1.0, comp_ns=1.0))
            return share
        start = float(astra.endpoint_delay) if astra is not None else 0.0
        for c, stream in enumerate(self._stream_sizes(collective, size, n)):
            if graph.total_chunks is not None:
                unit = collective_buffer_bytes(lookup, stream, n) / graph.total_chunks
            else:
                unit = stream / size if size else 0.0  # byte-sized graphs: scaled by the stream's share
            part = CollectivePart(graph, position, group, inst.namespace + c, unit, self.config.endpoint_delay, start)
            share.parts.append(part)
        return share

    def _stream_sizes(self, collective: CollectiveType, size: int, group_size: int) -> list[float]:
        """Bytes of each chunk (stream) of a collective; equal shares unless ASTRA-sim's rule applies."""
        astra = self.config.astra
        if astra is not None:
            return [
                float(s)
                for s in astra.stream_sizes(size, group_size, all_gather=collective == CollectiveType.ALL_GATHER)
            ]
        k = self.config.chunks
        return [size / k] * k
