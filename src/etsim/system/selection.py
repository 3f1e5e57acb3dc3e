"""Which algorithm serves a collective call: the selection configured for a run.

Today a selection maps a collective type to an algorithm (``algorithms: {all_reduce: ring, default:
direct}`` in a system YAML, ``--algo [COLL=]ALGO`` on the command line). A ``default`` serves the
collectives it implements; the others fall back to their own default (ring, or direct for gather
and scatter), and a warning says so once. Every value is resolved once, through the algorithm
sources (:mod:`etsim.system.algorithms.sources`), and shared by every call.
"""

from __future__ import annotations

from etsim.chakra.graph import COLLECTIVE_NAMES, CollectiveType
from etsim.errors import ConfigError, warn
from etsim.system.algorithms import CollectiveAlgorithm
from etsim.system.algorithms.sources import AlgorithmContext, resolve_algorithm
from etsim.system.config import SystemConfig

__all__ = ["AlgorithmSelection", "default_algorithm"]

#: Algorithm used when nothing is configured for a collective.
_DEFAULTS = {CollectiveType.GATHER: "direct", CollectiveType.SCATTER: "direct"}


def default_algorithm(collective: CollectiveType) -> str:
    """The native algorithm used when none is configured (``ring``, or ``direct`` for gather/scatter)."""
    return _DEFAULTS.get(collective, "ring")


class AlgorithmSelection:
    """The algorithms of one run, resolved once, and the rule that picks one per collective.

    Args:
        config: the system configuration (``algorithms``, ``algorithm_origins``, paths, options).
        dims: the topology's dimension sizes, for multi-dimensional algorithms.

    Raises:
        ConfigError: an unknown collective key or an algorithm no source can load (named with where it
            was given).
    """

    def __init__(self, config: SystemConfig, dims: tuple[int, ...] | None = None) -> None:
        self.config = config
        self.context = AlgorithmContext(
            base_dir=config.base_dir,
            dims=dims,
            ignore_ctrl_deps=config.ignore_ctrl_deps,
            phase_delay=config.phase_delay,
        )
        self._by_spec: dict[str, tuple[str, CollectiveAlgorithm]] = {}
        self._warned: set[tuple[str, str]] = set()
        self._algorithms: dict[str, tuple[str, CollectiveAlgorithm]] = {}
        for key, spec in config.algorithms.items():
            origin = config.algorithm_origins.get(key, "--algo")
            if key != "default" and key not in COLLECTIVE_NAMES.values():
                valid = ", ".join(sorted(COLLECTIVE_NAMES.values()))
                raise ConfigError(f"{origin}: unknown collective {key!r}; valid: {valid}, default")
            self._algorithms[key] = self.resolve(spec, origin)

    def resolve(self, spec: str, origin: str = "--algo") -> tuple[str, CollectiveAlgorithm]:
        """``(label, algorithm)`` of an algorithm value, loaded once per run."""
        found = self._by_spec.get(spec)
        if found is None:
            found = self._by_spec[spec] = resolve_algorithm(spec, self.context, origin=origin)
        return found

    def choose(self, collective: CollectiveType) -> tuple[str, CollectiveAlgorithm]:
        """The algorithm that serves *collective* (see the module docstring)."""
        name = COLLECTIVE_NAMES[collective]
        if name in self._algorithms:
            return self._algorithms[name]
        if "default" in self._algorithms:
            label, algo = self._algorithms["default"]
            if collective in algo.collectives:
                return label, algo
            fallback = default_algorithm(collective)
            if (label, name) not in self._warned:
                self._warned.add((label, name))
                warn(
                    f"algorithm {label!r} does not implement {name}; {fallback!r} served it "
                    f"(choose one with --algo {name}=ALGO or algorithms: {{{name}: ALGO}})"
                )
        return self.resolve(default_algorithm(collective))
