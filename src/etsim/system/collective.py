"""Collectives: algorithm choice, matching across ranks, and expansion into algorithm graphs.

A rank issuing a COMM_COLL node *joins* the k-th collective of its communicator group (k =
how many collectives it issued on that group before). The first rank to join fixes the
collective's type, size and algorithm; every later rank must agree or the run stops with an
error naming both nodes. Each rank then runs its own part of the algorithm graph; there is no
barrier across ranks (a rank that arrives early simply waits for its peers' messages).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Hashable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from etsim import progress
from etsim.algo.graph import SEND, AlgoGraph
from etsim.chakra.graph import (
    COLLECTIVE_NAMES,
    CollectiveType,
    NodeType,
    Trace,
    algorithm_collective,
    collective_buffer_bytes,
)
from etsim.errors import ConfigError, EtsimError, FoldConflict, SimulationError, warn
from etsim.system.algorithms import CollectiveAlgorithm, DeferredCheck, DeferredChecks, Phase
from etsim.system.config import SystemConfig, chunk_sizes
from etsim.system.groups import CommGroups
from etsim.system.mirrors import Mirrors
from etsim.system.p2p import RuntimeSends
from etsim.system.rules import CallInfo
from etsim.system.selection import AlgorithmSelection, Choice, NoRuleError, default_algorithm

if TYPE_CHECKING:
    from etsim.network.topology import Topology

__all__ = ["CollectivePart", "Participation", "System", "default_algorithm"]


@dataclass(slots=True)
class CollectivePart:
    """One phase of one chunk (stream) of one rank's share of a collective: an algorithm graph to walk."""

    graph: AlgoGraph
    position: int
    """The rank's position in the group."""
    group: tuple[int, ...]
    """Global ranks by group position."""
    namespace: Hashable
    """Unique per collective instance, chunk and phase; keeps its messages apart from all others."""
    bytes_per_unit: float
    """Bytes per graph size unit (per chunk for symbolic graphs, 1 for byte-sized graphs)."""
    endpoint_delay: float = 0.0
    """ns every message of this part waits before entering the network."""
    start_delay: float = 0.0
    """ns before the part starts (:attr:`SystemConfig.stream_delay`)."""
    comp_ns: float | None = None
    """Duration of COMP nodes that carry none; None = the reduction model (bytes / bandwidth)."""
    stream: int = 0
    """The chunk (stream) this part belongs to."""
    phase: int = 0
    """The phase within its stream (0 first)."""
    last: bool = True
    """This is the last phase of its stream."""
    queue: Hashable = 0
    """The rank's queue the part waits in before it starts."""
    graph_of: Callable[[int], AlgoGraph] | None = None
    """The graph of any position of the group in this part, when positions run different graphs known ahead
    (one graph per position, no phases): the fast path evaluates such a part over the union of the graphs."""


@dataclass(slots=True)
class _Instance:
    collective: CollectiveType
    size: int
    where: str
    label: str
    algorithm: CollectiveAlgorithm
    namespace: int
    key: tuple[str, int]
    rule: str = ""
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
    rule: str = ""
    """The selection rule that chose the algorithm (``algorithms[2]``, ``built-in default`` …)."""


class System:
    """Collective matching and expansion for one simulation.

    Args:
        config: system parameters (algorithms, chunks, …).
        groups: communicator groups.
        dims: dimension sizes of the topology (for hierarchical algorithms), or None.
        topology: the run's topology (the dimension a group spans; algorithms synthesised for it), or None.
        simulated: the ranks that run when others mirror them (replica folding, ``workload/fold.py``), or None: all.
        mirror_of: for a mirrored rank, its representative and the map that takes the representative's ranks to the
            mirror's (``g``: ``g(rep)`` is the rank), for algorithms whose graphs differ by position; None: those
            are refused where members are mirrored.
        checks: where verifications running beside the simulation leave their checks (the simulation settles them
            before it reports anything), or None: every algorithm is verified when a collective first uses it.
    """

    def __init__(
        self,
        config: SystemConfig,
        groups: CommGroups,
        dims: Sequence[int] | None = None,
        topology: Topology | None = None,
        *,
        simulated: frozenset[int] | None = None,
        mirror_of: Callable[[int], tuple[int, Callable[[int], int]]] | None = None,
        checks: DeferredChecks | None = None,
    ) -> None:
        self.config = config
        self.groups = groups
        self.dims = tuple(dims) if dims else None
        self.topology = topology
        self.selection = AlgorithmSelection(config, self.dims, topology)
        self._dimension: dict[tuple[int, ...], int | None] = {}
        self._warned: set[tuple[str, ...]] = set()
        self._sequence: dict[tuple[str, int], int] = {}
        self._last_node: dict[tuple[str, int], int] = {}  # (group, rank) -> the node of its last collective
        self._instances: dict[tuple[str, int], _Instance] = {}
        self._written_labels: set[str] = set()
        self._in_network_labels: set[str] = set()
        self._next_namespace = 0
        self._graphs: dict[tuple[int, ...], AlgoGraph] = {}
        self._algorithm_state: dict[tuple[int, int], dict[str, Any]] = {}
        #: Of the messages :meth:`message_estimate` counted, those sent by graphs every rank shares.
        self.shared_messages = 0
        #: Of those, the messages of collectives that run as one stream (a model with link state takes only
        #: these in bulk: streams of one collective share links at the same time).
        self.shared_single_stream_messages = 0
        # The smallest SEND of each graph, in chunks, or a lower bound of it (the graph kept with its id; exact?).
        self._smallest_send: dict[int, tuple[AlgoGraph, float | None, bool]] = {}
        self._sends: dict[int, tuple[AlgoGraph, int]] = {}
        #: The ranks that run when others mirror them (replica folding, ``workload/fold.py``), or None: all run.
        self.simulated = simulated
        self.mirrors = Mirrors(simulated, mirror_of)
        self._checks = checks

    def _warn_once(self, key: tuple[str, ...], message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warn(message)

    def group_dimension(self, group: tuple[int, ...]) -> int | None:
        """The topology dimension *group* spans (its members differ in that coordinate only), else None."""
        if group in self._dimension:
            return self._dimension[group]
        topo = self.topology
        found: int | None = None
        if topo is not None and topo.dims and len(group) > 1 and all(0 <= r < topo.npus for r in group):
            coords = [topo.coords(r) for r in group]
            spanned = [d for d in range(len(topo.dims)) if len({c[d] for c in coords}) > 1]
            found = spanned[0] if len(spanned) == 1 else None
        self._dimension[group] = found
        return found

    def call_info(self, collective: CollectiveType, size: int, group: tuple[int, ...], group_key: str) -> CallInfo:
        """What every rank of *group* knows about a call: the input of the selection rules."""
        return CallInfo(COLLECTIVE_NAMES[collective], size, len(group), group_key, self.group_dimension(group))

    def choose(self, collective: CollectiveType, size: int, group: tuple[int, ...], group_key: str) -> Choice:
        """The rule and algorithm serving a call (one that depends on the call is bound to it: ``for_call``)."""
        lookup = algorithm_collective(collective)
        choice = self.selection.choose(lookup, self.call_info(collective, size, group, group_key))
        bound = choice.algorithm.for_call(lookup, size, group)
        if bound is not choice.algorithm:
            choice = Choice(choice.rule, getattr(bound, "label", None) or choice.label, bound)
        return choice

    def members_run(self, group: tuple[int, ...]) -> int:
        """How many members of *group* run (all of them unless others mirror some, see :attr:`simulated`)."""
        return self.mirrors.members_run(group)

    def _check_mirrors(
        self,
        graph: AlgoGraph | None,
        group: tuple[int, ...],
        label: str,
        where: str,
        algorithm: CollectiveAlgorithm,
        lookup: CollectiveType,
    ) -> None:
        """:meth:`Mirrors.check <etsim.system.mirrors.Mirrors.check>` of *algorithm*'s graphs over *group*."""
        graph_at = functools.partial(self._graph_at, algorithm, lookup, len(group))
        self.mirrors.check(graph, group, label, where, graph_at, algorithm)

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
        if node_id is not None:
            last = self._last_node.get(seq_key)
            self._last_node[seq_key] = node_id
            if last is not None and node_id < last:
                # Collectives are matched across a group by issue order: a rank that issues its own out of program
                # order pairs them with different collectives of the other ranks, without an error if they agree in
                # type and size.
                self._warn_once(
                    ("order", group_key),
                    f"{where}: rank {rank} issues this collective of group {group_key!r} after node {last}, a later "
                    "node in its program; collectives are matched across the group by issue order (here "
                    f"#{seq}), so it may be paired with another node of the other ranks; add a dependency",
                )
        key = (group_key, seq)
        inst = self._instances.get(key)
        n = len(group)
        lookup = algorithm_collective(collective)
        if inst is None:
            inst = self._new_instance(key, collective, size, group, where, node_id)
        elif inst.collective != collective or inst.size != size:
            raise SimulationError(
                f"collective #{seq} of group {group_key!r} differs between ranks: {where} issues "
                f"{collective.name.lower()} of {size} bytes but {inst.where} issued "
                f"{inst.collective.name.lower()} of {inst.size} bytes"
            )
        inst.joined += 1
        joined = inst.joined == self.members_run(group)
        if joined:
            del self._instances[key]
        share = Participation(
            collective,
            size,
            group,
            inst.label,
            instance=key,
            all_joined=joined,
            synchronised=self.config.synchronise_collectives and not inst.algorithm.synchronises_itself,
            rule=inst.rule,
        )
        if n == 1:
            self._warn_once(
                ("one-rank", group_key),
                f"{where}: a {collective.name.lower()} over a 1-rank group moves no data and costs nothing",
            )
            return share
        phased = type(inst.algorithm).phases is not CollectiveAlgorithm.phases
        graph = None if phased else self._graph_at(inst.algorithm, lookup, n, position)
        if self.simulated is not None:
            self._check_mirrors(graph, group, inst.label, where, inst.algorithm, lookup)
        if self.config.families_as_written and inst.algorithm.source == "chakra-et" and graph is not None:
            share.parts.append(self._part_as_written(inst, lookup, graph, position, group, where))
            return share
        share.parts += self._parts(inst, lookup, rank, position, group, group_key, graph, where)
        return share

    def _new_instance(
        self,
        key: tuple[str, int],
        collective: CollectiveType,
        size: int,
        group: tuple[int, ...],
        where: str,
        node_id: int | None,
    ) -> _Instance:
        """The instance *key* of a collective its group's first member issues: its algorithm chosen and checked."""
        n = len(group)
        lookup = algorithm_collective(collective)
        node_spec = self.config.node_algorithms.get(node_id) if node_id is not None else None
        if node_spec:
            label, algo = self.selection.resolve(node_spec, "per-node algorithm")
            rule = "per-node algorithm"
        else:
            try:
                choice = self.choose(collective, size, group, key[0])
            except NoRuleError as exc:
                raise NoRuleError(f"{where}: {exc}") from None
            rule, label, algo = choice.rule, choice.label, choice.algorithm
        reason = algo.supports(lookup, n)
        if reason is not None and n > 1:
            raise ConfigError(f"{where}: {reason}")
        if n > 1:  # refuse an algorithm that does not compute its collective (verified once, cached)
            as_written = self.config.families_as_written  # (the files' own sizes, not the call's)
            later: list[DeferredCheck] | None = [] if self._checks is not None else None
            algo.check_correct(lookup, n, where=where, label=label, size=None if as_written else size, later=later)
            if later and self._checks is not None:
                for check in later:
                    self._checks.add(check)
        inst = _Instance(collective, size, where, label, algo, self._next_namespace, key, rule)
        if self.config.families_as_written and algo.source == "chakra-et":
            self._written_labels.add(label)
        if algo.reduces_in_network:
            self._in_network_labels.add(label)
        try:
            self._next_namespace += len(self._stream_sizes(collective, size, n))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        self._instances[key] = inst
        self._check_instance(inst, lookup, n)
        return inst

    def _part_as_written(
        self,
        inst: _Instance,
        lookup: CollectiveType,
        graph: AlgoGraph,
        position: int,
        group: tuple[int, ...],
        where: str,
    ) -> CollectivePart:
        """The one part of a family run with its files' own sizes.

        One stream, no endpoint delay or reduction model; COMP nodes without a duration take the minimum compute time.
        """
        if graph.total_chunks is not None:
            if graph.written_bytes is None:
                raise ConfigError(
                    f"{where}: algorithm family {inst.label!r} gives sizes as chunk counts "
                    "(msg_chunk_cnt/total_chunk_cnt) only, but families are run as written here, with the "
                    "absolute comm_size of each node — write it with --size BYTES (comm_size beside the counts), "
                    "or simulate it with `etsim run`, which scales chunk counts"
                )
            written_key = (id(inst.algorithm), int(lookup), len(group), position, -1)
            graph = self._graphs.get(written_key) or self._graphs.setdefault(written_key, graph.as_written())
        return CollectivePart(graph, position, group, (inst.namespace, 0, 0), 1.0, comp_ns=self.config.min_compute_ns)

    def _parts(
        self,
        inst: _Instance,
        lookup: CollectiveType,
        rank: int,
        position: int,
        group: tuple[int, ...],
        group_key: str,
        graph: AlgoGraph | None,
        where: str,
    ) -> list[CollectivePart]:
        """The rank's parts: per chunk (stream), each phase of the algorithm (*graph* when it has one phase)."""
        config, algorithm = self.config, inst.algorithm
        collective, size, n = inst.collective, inst.size, len(group)
        phased = graph is None
        graph_of = None
        if graph is not None and not graph.relative_peers:
            graph_of = functools.partial(self._graph_at, algorithm, lookup, n)
        start, endpoint = config.stream_delay, config.endpoint_delay
        if group_key != "0" and config.group_endpoint_delay is not None:
            start = endpoint = config.group_endpoint_delay
        state = self._algorithm_state.setdefault((rank, id(algorithm)), {}) if phased else {}
        parts = []
        for c, stream in enumerate(self._stream_sizes(collective, size, n)):
            phases = algorithm.phases(lookup, n, position, stream=c, state=state) if phased else [Phase(graph)]  # type: ignore[arg-type]  # built
            for p, phase in enumerate(phases):
                g = phase.graph
                if g.total_chunks is not None:
                    unit = collective_buffer_bytes(lookup, stream, n) / g.total_chunks
                else:
                    unit = stream / size if size else 0.0  # byte-sized graphs: scaled by the stream's share
                if c == 0 and size > 0:
                    self._check_message_size(g, unit, where, collective, size, n, inst.label)
                part = CollectivePart(
                    g,
                    position,
                    group,
                    (inst.namespace, c, p),
                    unit,
                    endpoint if phase.endpoint_delay else 0.0,
                    start if phase.start_delay else 0.0,
                    stream=c,
                    phase=p,
                    last=p == len(phases) - 1,
                    queue=phase.queue,
                    graph_of=graph_of,
                )
                parts.append(part)
        return parts

    def _graph_at(self, algorithm: CollectiveAlgorithm, lookup: CollectiveType, n: int, position: int) -> AlgoGraph:
        """*algorithm*'s graph of *position* in a group of *n* (made once, as :meth:`join` makes it)."""
        key = (id(algorithm), int(lookup), n, position)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = algorithm.graph(lookup, n, position)
        return graph

    def p2p_timing(self) -> RuntimeSends | None:
        """How workload send/receive messages run: NCCL's ncclSend/ncclRecv where NCCL serves the run's all-to-all.

        It gives, for a send node of a trace, its wire bytes and the runtime's delay before it enters the network
        (:class:`~etsim.system.p2p.RuntimeSends`); None: plain messages (every other algorithm).
        """
        # The algorithm the run's configuration names for all-to-all, without choosing (no fallback warnings).
        rule = next((r for r in self.selection.rules if r.is_default or r.collective == "all_to_all"), None)
        if rule is not None:
            algorithm = self.selection.resolve(rule.algorithm, rule.origin)[1]
        elif self.selection.table:
            return None
        else:
            algorithm = self.selection.resolve(default_algorithm(CollectiveType.ALL_TO_ALL, self.topology))[1]
        if not getattr(algorithm, "serves_p2p", False):
            return None
        return RuntimeSends(algorithm.p2p_pair, self.groups)  # type: ignore[attr-defined]

    def written_as_is(self) -> AbstractSet[str]:
        """Labels of the algorithms run with their files' own sizes (``families_as_written``), not the call's.

        A live, read-only view: it grows as such algorithms are first used.
        """
        return self._written_labels

    def reduced_in_network(self) -> AbstractSet[str]:
        """Labels of the algorithms whose switches reduce (``CollectiveAlgorithm.reduces_in_network``).

        A live, read-only view: it grows as such algorithms are first used.
        """
        return self._in_network_labels

    def message_estimate(self, traces: Sequence[Trace]) -> int:
        """About how many messages the collectives of *traces* will send; refuse impossible splits first.

        Counts, per collective node of every rank, the SEND nodes of that rank's algorithm graph
        times the number of chunks. Collectives that cannot be resolved count as none (the run
        reports them when it reaches them). :attr:`shared_messages` is set to the part of the count
        sent by graphs every rank shares (relative peers), which the fast path can evaluate in bulk.

        Raises:
            ConfigError: a collective split into more chunks than allowed, or into messages smaller than
                one byte (named), before any time is spent simulating.
        """
        total = 0
        self.shared_messages = self.shared_single_stream_messages = 0
        sends_of: dict[tuple[int, int, int, int], tuple[AlgoGraph, int] | None] = {}
        watch = progress.stage("preparing the collectives", len(traces), "ranks")
        streams_of: dict[tuple[int, int, str, int], int] = {}
        for rank, trace in enumerate(traces):
            watch.advance()
            for pos, node_type in enumerate(trace.types):
                if node_type != NodeType.COMM_COLL_NODE or trace.is_cpu_op[pos] or trace.comm_type[pos] is None:
                    continue
                try:
                    collective = CollectiveType(trace.comm_type[pos])  # type: ignore[arg-type]
                    pg_name = trace.pg_name[pos]
                    group = self.groups.resolve(pg_name)
                    n = len(group)
                    if n == 1 or rank not in group:
                        continue
                    lookup = algorithm_collective(collective)
                    group_key = pg_name if pg_name and pg_name != "0" else "0"
                    size = trace.comm_size[pos] or 0
                    node_spec = self.config.node_algorithms.get(trace.ids[pos])
                    if node_spec:
                        label, algo = self.selection.resolve(node_spec, "per-node algorithm")
                    else:
                        try:
                            choice = self.choose(collective, size, group, group_key)
                        except NoRuleError as exc:
                            raise NoRuleError(f"{trace.describe(pos)}: {exc}") from None
                        label, algo = choice.label, choice.algorithm
                    key = (int(lookup), id(algo), n, group.index(rank))
                    if key not in sends_of:
                        sends_of[key] = None
                        if algo.supports(lookup, n) is None:
                            phases = algo.phases(lookup, n, group.index(rank), stream=0, state={})
                            sends = sum(self._send_count(ph.graph) for ph in phases)
                            sends_of[key] = (phases[0].graph, sends)
                            if self.simulated is not None:
                                graph = phases[0].graph if len(phases) == 1 else None
                                self._check_mirrors(graph, group, label, trace.describe(pos), algo, lookup)
                except (NoRuleError, FoldConflict):
                    raise
                except (EtsimError, ValueError):
                    continue
                found = sends_of[key]
                if found is None:
                    continue
                graph, sends = found
                split_key = (int(collective), size, label, n)
                count = streams_of.get(split_key)
                if count is None:
                    where = trace.describe(pos)
                    try:
                        streams = self._stream_sizes(collective, size, n)
                    except ConfigError as exc:
                        raise ConfigError(f"{where}: {exc}") from None
                    if size > 0 and graph.total_chunks is not None:
                        unit = collective_buffer_bytes(lookup, streams[0], n) / graph.total_chunks
                        self._check_message_size(graph, unit, where, collective, size, n, label)
                    count = streams_of[split_key] = len(streams)
                total += sends * count
                # Graphs whose reductions queue at the NPUs' shared reduction units walk message by message.
                queued = self.config.shared_reductions and self.config.reduction_bandwidth and graph.priced_reductions
                if graph.relative_peers and not queued:
                    self.shared_messages += sends * count
                    if count == 1:
                        self.shared_single_stream_messages += sends
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

    def _send_count(self, graph: AlgoGraph) -> int:
        """SEND nodes of *graph* (counted once per graph: ranks often share one)."""
        found = self._sends.get(id(graph))
        if found is None or found[0] is not graph:
            found = self._sends[id(graph)] = (graph, graph.kinds.count(SEND))
        return found[1]

    def _check_message_size(
        self, graph: AlgoGraph, unit: float, where: str, collective: CollectiveType, size: int, n: int, label: str
    ) -> None:
        """Refuse a split that makes messages smaller than one byte."""
        found = self._smallest_send.get(id(graph))
        if found is None or found[0] is not graph:
            # The smallest size of any node bounds the smallest send's from below, in a tenth of the time.
            bound = min(graph.chunks, default=0.0)
            found = self._smallest_send[id(graph)] = (graph, bound if bound > 0 else None, False)
        smallest = found[1]
        if not found[2] and (smallest is None or smallest * unit < 1.0):  # the bound does not settle it
            # (in C: compress, map and filter; a family of a million sends is checked graph by graph)
            sends = itertools.compress(graph.chunks, map(SEND.__eq__, graph.kinds))
            positive = filter(functools.partial(operator.lt, 0), sends)
            smallest = min(positive, default=None)
            self._smallest_send[id(graph)] = (graph, smallest, True)
        if smallest is not None and smallest * unit < 1.0:
            raise ConfigError(
                f"{where}: {collective.name.lower()} of {size} bytes over {n} ranks in {self.config.chunks} chunk(s) "
                f"with {label!r} makes messages of {smallest * unit:.3g} bytes, less than one byte; use fewer chunks "
                "(chunks / preferred-dataset-splits) or a larger size"
            )

    def _stream_sizes(self, collective: CollectiveType, size: int, group_size: int) -> list[float]:
        """Bytes of each chunk (stream) of a collective (:func:`~etsim.system.config.chunk_sizes`)."""
        per_rank, rule = collective == CollectiveType.ALL_GATHER, self.config.chunking
        floor = self.groups.num_ranks if rule == "whole_system" else group_size  # (the byte per rank it keeps)
        return chunk_sizes(size, self.config.chunks, floor, per_rank_size=per_rank, rule=rule)
