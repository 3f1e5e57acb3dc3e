"""``tacos``: an algorithm synthesised (TACOS) for the run's topology and each communicator group.

The spec is ``tacos`` or ``tacos:KEY=VALUE,…`` with keys ``chunks_per_npu`` (default 1), ``seed`` (0), ``runs``
(1) and ``size`` (the bytes the link weights are computed for, default ``1MiB``). A synthesis depends on the
topology, the group's NPUs and the collective (all-gather, reduce-scatter, all-reduce); it runs when a group
first needs it and is cached per process, keyed by (topology identity, collective, group, parameters), so
every later call and every later simulation on the same :class:`~etsim.network.Topology` object reuses it.
The graphs are symbolic (one chunk of ``buffer / (n·k)`` per message), so one synthesis serves every size.

:class:`TacosSource` claims such specs; it reaches the system's source registry through the
``etsim.algorithm_sources`` entry point ``tacos`` (``pyproject.toml``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from etsim.algo.graph import AlgoGraph
from etsim.cache import BoundedCache
from etsim.chakra.graph import CollectiveType
from etsim.errors import ConfigError
from etsim.options import Integer, Size, option, parse_options
from etsim.system.algorithms.base import CollectiveAlgorithm
from etsim.system.algorithms.sources import AlgorithmContext, AlgorithmSource

if TYPE_CHECKING:
    from etsim.network.topology import Topology

__all__ = ["TacosAlgorithm", "TacosParams", "TacosSource", "parse_tacos_spec"]

_C = CollectiveType
_COLLECTIVES = frozenset({_C.ALL_GATHER, _C.REDUCE_SCATTER, _C.ALL_REDUCE})


#: The most seeds one synthesis may try.
MAX_RUNS = 10_000


@dataclass(frozen=True, kw_only=True)
class TacosParams:
    """Parameters of a TACOS synthesis.

    ``tacos:KEY=VALUE,…``, ``algo: {tacos: {KEY: VALUE}}`` in experiments and the flags of ``etsim synth tacos``
    all read these declarations.
    """

    chunks_per_npu: int = option(1, "chunks each NPU's piece is split into", Integer(1), metavar="K")
    seed: int = option(0, "seed of the random tie-breaks", Integer(0))
    runs: int = option(1, "try seeds seed … seed+R-1, keep the fastest", Integer(1, MAX_RUNS), metavar="R")
    size: int = option(1 << 20, "the bytes the link weights are computed for (bare numbers are bytes)", Size())


def parse_tacos_spec(spec: str) -> TacosParams:
    """``tacos:chunks_per_npu=2,seed=0`` → :class:`TacosParams`.

    Raises:
        ConfigError: an unknown key, a value that is not a number (or a size for ``size``), or one out of range.
    """
    _, _, rest = spec.partition(":")
    names = [f.name for f in fields(TacosParams)]
    values: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in names:
            choices = ", ".join(names)
            raise ConfigError(f"algorithm {spec!r}: expected KEY=VALUE with KEY one of {choices}; got {item!r}")
        values[key.strip()] = value.strip()
    return TacosParams(**parse_options(TacosParams, values, key=lambda name: f"algorithm {spec!r}: {name}", text=True))


#: (id(topology), collective, sorted group, params) → graphs by sorted position: the synthesis of the last few
#: groups (a tuning session or a sweep asks again for the same ones; the topology is kept with its entry).
_CACHE: BoundedCache[list[AlgoGraph]] = BoundedCache(32)


def _synthesised(
    topology: Topology, collective: CollectiveType, group: tuple[int, ...], params: TacosParams
) -> list[AlgoGraph]:
    from etsim.producers.tacos.synthesis import algo_graphs, synthesize  # numpy and networkx: only when used

    def make() -> list[AlgoGraph]:
        syn = synthesize(
            topology,
            collective,
            size=params.size,
            chunks_per_npu=params.chunks_per_npu,
            seed=params.seed,
            runs=params.runs,
            group=list(group),
        )
        return algo_graphs(syn.schedule)

    return _CACHE.get((id(topology), int(collective), group, params), make, keep=(topology,))


class TacosAlgorithm(CollectiveAlgorithm):
    """A ``tacos`` spec before it knows its group; :meth:`for_call` gives the algorithm of one group.

    Args:
        spec: the spec as written (its label).
        params: its parameters.
        topology: the run's topology (None: an error when a group first needs it).
    """

    name = "tacos"
    source = "tacos"
    collectives = _COLLECTIVES

    def __init__(self, spec: str, params: TacosParams, topology: Topology | None) -> None:
        self.spec = spec
        self.params = params
        self.topology = topology
        self._groups: dict[tuple[int, ...], _GroupTacos] = {}

    def for_call(self, collective: CollectiveType, size: int, group: tuple[int, ...]) -> CollectiveAlgorithm:
        """The algorithm synthesised for *group* (global ranks by group position), whatever the size."""
        found = self._groups.get(group)
        if found is None:
            if self.topology is None:
                raise ConfigError(f"algorithm {self.spec!r} is synthesised for a topology, and none is known here")
            found = self._groups[group] = _GroupTacos(self, group)
        return found

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """Not available before the group is known (:meth:`for_call`)."""
        raise ConfigError(f"algorithm {self.spec!r} is synthesised per group; it needs the group's NPUs")


class _GroupTacos(CollectiveAlgorithm):
    """The synthesis of one group: graphs by group position, peers as group positions."""

    name = "tacos"
    source = "tacos"
    collectives = _COLLECTIVES

    def __init__(self, parent: TacosAlgorithm, group: tuple[int, ...]) -> None:
        self.parent = parent
        self.group = group
        self._graphs: dict[int, list[AlgoGraph]] = {}

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """None for the collectives TACOS synthesises over this group."""
        if collective not in _COLLECTIVES:
            names = ", ".join(sorted(c.name.lower() for c in _COLLECTIVES))
            return f"algorithm {self.parent.spec!r} (TACOS) synthesises {names}, not {collective.name.lower()}"
        if group_size != len(self.group):
            return f"algorithm {self.parent.spec!r} was synthesised for {len(self.group)} ranks, not {group_size}"
        return None

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """The graph of group position *position* (synthesised when first needed)."""
        self.check_position(collective, group_size, position)
        graphs = self._graphs.get(int(collective))
        if graphs is None:
            assert self.parent.topology is not None
            ordered = tuple(sorted(self.group))
            synthesised = _synthesised(self.parent.topology, collective, ordered, self.parent.params)
            if ordered == self.group:
                graphs = synthesised
            else:
                # Synthesis numbers the group's NPUs in rank order; map to the group's own positions.
                to_position = {ordered.index(r): p for p, r in enumerate(self.group)}
                graphs = [
                    replace(
                        synthesised[ordered.index(r)],
                        peers=[to_position[q] if q >= 0 else q for q in synthesised[ordered.index(r)].peers],
                        _succ=None,
                        _succ_lists=None,
                    )
                    for r in self.group
                ]
            self._graphs[int(collective)] = graphs
        return graphs[position]


class TacosSource(AlgorithmSource):
    """``tacos`` or ``tacos:chunks_per_npu=2,seed=0,runs=1,size=1MiB``: TACOS synthesis per topology and group."""

    name = "tacos"
    priority = 10

    def claims(self, spec: str) -> bool:
        """``tacos`` and ``tacos:…``."""
        return spec == "tacos" or spec.startswith("tacos:")

    def collectives(self, spec: str) -> frozenset[CollectiveType]:
        """All-gather, reduce-scatter and all-reduce: what synthesis makes."""
        return _COLLECTIVES

    def load(self, spec: str, context: AlgorithmContext) -> CollectiveAlgorithm:
        """A :class:`TacosAlgorithm`, synthesised per group when first used."""
        return TacosAlgorithm(spec, parse_tacos_spec(spec), context.topology)
