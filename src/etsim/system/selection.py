"""Which algorithm serves a collective call: the selection configured for a run.

Two forms, both in a system YAML's ``algorithms`` (and ``--algo [COLL=]ALGO`` on the command line):

- **A mapping** collective type → algorithm (``algorithms: {all_reduce: ring, default: direct}``). A
  ``default`` serves the collectives it implements; the others fall back to their own default (ring, or
  direct for gather and scatter; ``nccl`` on a ``gpu_cluster`` that names its GPUs), and a warning says so once.
- **A table**: an ordered list of rules (:mod:`etsim.system.rules`); the first rule that matches the call
  (collective, bytes, group size, group name, topology dimension) serves it. A rule naming a collective
  whose algorithm does not implement it is an error; a ``{default: ALGO}`` rule falls back as above; a call
  no rule matches is an error naming the call (raised before the run starts). An MSCCL-IR rule given
  without ``min_bytes``/``max_bytes`` takes the file's ``minBytes``/``maxBytes`` (converted from buffer
  bytes to the call's ``comm_size``) and, without ``group_size``, the file's ``ngpus``, as a runtime
  loading the file would. Rules that can never fire are named in a warning.

The choice is a pure function of :class:`~etsim.system.rules.CallInfo` — what every rank of the group
knows — so every rank of a group computes the same one. Every value is resolved once, through the
algorithm sources (:mod:`etsim.system.algorithms.sources`), and shared by every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from etsim.chakra.graph import COLLECTIVE_NAMES, CollectiveType, algorithm_collective
from etsim.errors import ConfigError, warn
from etsim.network.hardware import GpuCluster
from etsim.system.algorithms import CollectiveAlgorithm
from etsim.system.algorithms.sources import AlgorithmContext, resolve_algorithm
from etsim.system.config import SystemConfig
from etsim.system.rules import CallInfo, SelectionRule, shadowing

if TYPE_CHECKING:
    from etsim.network.topology import Topology

__all__ = ["AlgorithmSelection", "Choice", "NoRuleError", "default_algorithm"]

#: Algorithm used when nothing is configured for a collective.
_DEFAULTS = {CollectiveType.GATHER: "direct", CollectiveType.SCATTER: "direct"}
#: The rule label of a call served by a collective's own default algorithm.
BUILT_IN = "built-in default"


#: On a GPU cluster whose hardware the topology describes (``Topology.hardware``), the collectives NCCL runs.
_NCCL = frozenset(
    {CollectiveType.ALL_REDUCE, CollectiveType.REDUCE_SCATTER, CollectiveType.REDUCE_SCATTER_BLOCK,
     CollectiveType.ALL_GATHER, CollectiveType.ALL_TO_ALL, CollectiveType.BROADCAST, CollectiveType.REDUCE}
)  # fmt: skip


def default_algorithm(collective: CollectiveType, topology: Topology | None = None) -> str:
    """The native algorithm used when none is configured.

    ``nccl`` on a ``gpu_cluster`` that names its GPUs (GPU jobs run on NCCL) for the collectives NCCL has;
    otherwise ``ring``, or ``direct`` for gather and scatter.
    """
    if collective in _NCCL and isinstance(getattr(topology, "hardware", None), GpuCluster):
        return "nccl"
    return _DEFAULTS.get(collective, "ring")


class NoRuleError(ConfigError):
    """No rule of a selection table matches a call and the table has no default."""


@dataclass(frozen=True, slots=True)
class Choice:
    """The algorithm serving a call and the rule that chose it."""

    rule: str
    """The serving rule's label (``algorithms[2]``, ``algorithms.all_reduce``, ``--algo``, ``built-in default``)."""
    label: str
    """The algorithm as given (``ring``, ``algorithms/x.xml`` …)."""
    algorithm: CollectiveAlgorithm


def _lookup_name(collective: CollectiveType) -> str:
    return COLLECTIVE_NAMES[algorithm_collective(collective)]


class AlgorithmSelection:
    """The algorithms of one run, resolved once, and the rules that pick one per call.

    Args:
        config: the system configuration (``algorithms`` or ``algorithm_rules``, origins, paths, options).
        dims: the topology's dimension sizes, for multi-dimensional algorithms.
        topology: the run's topology, for algorithms synthesised for it (``tacos``).

    Raises:
        ConfigError: an unknown collective key, an algorithm no source can load, or a rule whose algorithm
            does not implement the rule's collective (named with where it was given).
    """

    def __init__(
        self, config: SystemConfig, dims: tuple[int, ...] | None = None, topology: Topology | None = None
    ) -> None:
        self.config = config
        self.context = AlgorithmContext(
            base_dir=config.base_dir,
            dims=dims,
            ignore_ctrl_deps=config.ignore_ctrl_deps,
            phase_delay=config.phase_delay,
            topology=topology,
            nccl=config.nccl,
        )
        self._by_spec: dict[str, tuple[str, CollectiveAlgorithm]] = {}
        self._warned: set[tuple[str, str]] = set()
        self._chosen: dict[tuple[CallInfo, int], Choice] = {}
        self.table = bool(config.algorithm_rules)
        self.rules: list[SelectionRule] = []
        if self.table:
            self.rules = [self._table_rule(rule) for rule in config.algorithm_rules]
            for rule, earlier in shadowing(self.rules):
                by = "; ".join(f"{r.origin} {r.describe()}" for r in earlier)
                warn(f"{rule.origin} {rule.describe()} can never fire: every call it matches is taken first by {by}")
        else:
            for key, spec in config.algorithms.items():
                origin = config.algorithm_origins.get(key, "--algo")
                if key != "default" and key not in COLLECTIVE_NAMES.values():
                    valid = ", ".join(sorted(COLLECTIVE_NAMES.values()))
                    raise ConfigError(f"{origin}: unknown collective {key!r}; valid: {valid}, default")
                self.resolve(spec, origin)
                name = "--algo" if origin == "--algo" else f"algorithms.{key}"
                if key == "default":
                    continue
                self.rules.append(SelectionRule(spec, name, origin, collective=key))
            if "default" in config.algorithms:
                origin = config.algorithm_origins.get("default", "--algo")
                name = "--algo" if origin == "--algo" else "algorithms.default"
                self.rules.append(SelectionRule(config.algorithms["default"], name, origin, is_default=True))

    def _table_rule(self, rule: SelectionRule) -> SelectionRule:
        """Resolve a rule's algorithm; check it implements the rule's collective; take an XML's window."""
        _, algo = self.resolve(rule.algorithm, rule.origin)
        if rule.collective is not None:
            lookup = algorithm_collective(CollectiveType[rule.collective.upper()])
            if lookup not in algo.collectives:
                supported = ", ".join(sorted(c.name.lower() for c in algo.collectives)) or "nothing"
                raise ConfigError(
                    f"{rule.origin}: algorithm {rule.algorithm!r} does not implement {rule.collective} "
                    f"(it implements {supported})"
                )
        window = getattr(algo, "byte_window", None)
        program = getattr(getattr(algo, "conversion", None), "program", None)
        if rule.is_default or window is None or program is None or (rule.min_bytes, rule.max_bytes) != (None, None):
            return rule
        ngpus = int(program.ngpus)
        low, high = window
        per_rank = len(algo.collectives) == 1 and CollectiveType.ALL_GATHER in algo.collectives
        # minBytes/maxBytes bound the buffer; an all-gather's comm_size is one rank's share of it.
        divisor = ngpus if per_rank else 1
        min_size = -(-low // divisor) if low else None
        max_size = high // divisor if high is not None else None
        return rule.with_bounds(min_size, max_size, ngpus)

    def resolve(self, spec: str, origin: str = "--algo") -> tuple[str, CollectiveAlgorithm]:
        """``(label, algorithm)`` of an algorithm value, loaded once per run."""
        found = self._by_spec.get(spec)
        if found is None:
            found = self._by_spec[spec] = resolve_algorithm(spec, self.context, origin=origin)
        return found

    def choose(self, collective: CollectiveType, call: CallInfo | None = None) -> Choice:
        """The algorithm (and rule) serving a call of *collective* (see the module docstring).

        Args:
            collective: the collective an algorithm is asked for (a reduce-scatter-block's is a reduce-scatter).
            call: what the group's ranks know about the call; None matches only on the collective (mapping form).

        Raises:
            NoRuleError: no rule of a table matches and it has no default (the call is named).
        """
        if call is None and self.table:
            raise ValueError("a selection table chooses per call: pass the CallInfo")
        key = (call or CallInfo(COLLECTIVE_NAMES[collective], 0, 0, "0"), int(collective))
        found = self._chosen.get(key)
        if found is None:
            found = self._chosen[key] = self._choose(collective, key[0], call is not None)
        return found

    def _choose(self, collective: CollectiveType, call: CallInfo, known: bool) -> Choice:
        lookup = _lookup_name(collective)
        for rule in self.rules:
            if rule.is_default:
                return self._default(rule, collective)
            matched = rule.matches(call, lookup) if known else rule.collective in (call.collective, lookup)
            if matched:
                label, algo = self.resolve(rule.algorithm, rule.origin)
                return Choice(rule.name, label, algo)
        if self.table:
            where = self.config.algorithm_rules[0].origin.rsplit(":", 1)[0]
            raise NoRuleError(
                f"{call.describe()}: no rule of the selection table ({where}: algorithms) matches it and the "
                "table has no {default: ALGO} rule"
            )
        label, algo = self.resolve(default_algorithm(collective, self.context.topology))
        return Choice(BUILT_IN, label, algo)

    def _default(self, rule: SelectionRule, collective: CollectiveType) -> Choice:
        label, algo = self.resolve(rule.algorithm, rule.origin)
        if collective in algo.collectives:
            return Choice(rule.name, label, algo)
        name = COLLECTIVE_NAMES[collective]
        fallback = default_algorithm(collective, self.context.topology)
        if (label, name) not in self._warned:
            self._warned.add((label, name))
            warn(
                f"algorithm {label!r} does not implement {name}; {fallback!r} served it "
                f"(choose one with --algo {name}=ALGO or algorithms: {{{name}: ALGO}})"
            )
        flabel, falgo = self.resolve(fallback)
        return Choice(f"{rule.name} (fallback)", flabel, falgo)
