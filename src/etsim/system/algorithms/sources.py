"""Where algorithms come from: a registry of *sources* that turn an ``--algo`` value into an algorithm.

An ``--algo`` value (or a system YAML's ``algorithms:`` entry) is offered to the sources in
priority order; the first that claims it loads it:

==========  ========  =====================================================================
source      priority  claims
==========  ========  =====================================================================
native      0         a name in :data:`~etsim.system.algorithms.base.ALGORITHMS` (``ring`` …)
                      or a ``package.module:Class`` path
tacos       10        ``tacos`` or ``tacos:k=v,…``: TACOS synthesis for the run's topology and each group
                      (:mod:`etsim.producers.tacos.source`)
msccl-ir    50        a path ending in ``.xml`` (MSCCL-IR, any dialect; converted once per file;
                      :mod:`etsim.producers.msccl.source`)
chakra-et   100       anything else: a Chakra ET family (prefix, ``P.et`` or directory)
==========  ========  =====================================================================

``native`` and ``chakra-et`` are defined here; every other source, etsim's own producers included, is
published through the entry-point group ``etsim.algorithm_sources`` (``module:Class`` is not needed: a
source is found by what it claims), so the system layer imports no producer. A spec ``NAME:…`` whose NAME
is a source's registry name belongs to that source, never to ``native``'s ``module:Class`` form.
A new XML/JSON dialect is
one :class:`AlgorithmSource` subclass whose :meth:`~AlgorithmSource.claims` looks at the suffix and
whose :meth:`~AlgorithmSource.load` returns a
:class:`~etsim.system.algorithms.base.CollectiveAlgorithm` (usually by building
:class:`~etsim.algo.graph.AlgoGraph` objects with the shared builder).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from etsim.chakra.graph import CollectiveType
from etsim.errors import ConfigError, RegistryError
from etsim.registry import Registry
from etsim.system.algorithms.base import ALGORITHMS, CollectiveAlgorithm
from etsim.system.algorithms.family import ChakraAlgorithm

if TYPE_CHECKING:
    from etsim.network.topology import Topology

__all__ = [
    "SOURCES",
    "AlgorithmContext",
    "AlgorithmSource",
    "FamilySource",
    "NativeSource",
    "claiming_source",
    "resolve_algorithm",
]


@dataclass(frozen=True, kw_only=True)
class AlgorithmContext:
    """What a source may need besides the spec."""

    base_dir: str = "."
    """Relative paths resolve against this directory."""
    dims: tuple[int, ...] | None = None
    """Dimension sizes of the topology (dimension 0 first) for multi-dimensional algorithms."""
    ignore_ctrl_deps: bool = False
    """Walk data dependencies only in ingested graphs."""
    phase_delay: float = 0.0
    """ns between dimension phases of multi-dimensional algorithms."""
    topology: Topology | None = None
    """The run's topology, for algorithms synthesised for it (``tacos``) or laid on its hardware (``nccl``)."""
    nccl: Any = None
    """The ``nccl`` algorithm's settings (``SystemConfig.nccl``), or None: NCCL's defaults."""

    def path(self, spec: str) -> str:
        """*spec* made absolute against :attr:`base_dir`."""
        return spec if os.path.isabs(spec) else os.fspath(Path(self.base_dir) / spec)


class AlgorithmSource:
    """Base class of algorithm sources (see the module docstring).

    Contract for subclasses:

    - ``priority`` (class attribute): sources are asked in increasing priority, ties by name;
      built-ins use 0 (names), 50 (file suffixes) and 100 (the fallback family reader).
    - :meth:`claims` says, without reading files, whether a spec is this source's (e.g. by suffix).
    - ``reads_files`` (class attribute) says whether its specs are file paths: relative ones resolve against the
      directory of the file that names them (a system YAML's), or the working directory on the command line.
    - :meth:`collectives` says which collectives a spec's algorithm implements when that is known without reading
      files (None otherwise): what an optimiser may try it for.
    - :meth:`load` returns a :class:`~etsim.system.algorithms.base.CollectiveAlgorithm`, or raises
      :class:`~etsim.errors.ConfigError` (or another :class:`~etsim.errors.EtsimError`) naming the spec.
    - Sources hold no state between calls; caching, if any, is keyed by the file's identity.
    """

    #: Registry name (informational; the registry key is what lists it).
    name: ClassVar[str] = ""
    #: Order in which sources are asked.
    priority: ClassVar[int] = 50
    #: Its specs are file paths (not names or parameters).
    reads_files: ClassVar[bool] = False

    def claims(self, spec: str) -> bool:
        """True if *spec* is for this source."""
        raise NotImplementedError

    def collectives(self, spec: str) -> frozenset[CollectiveType] | None:
        """The collectives the algorithm *spec* names implements, if known without reading files (default: None)."""
        return None

    def load(self, spec: str, context: AlgorithmContext) -> CollectiveAlgorithm:
        """Load the algorithm *spec* names."""
        raise NotImplementedError


#: Algorithm sources: built-ins, the ``etsim.algorithm_sources`` entry points, ``module:Class``.
SOURCES: Registry[AlgorithmSource] = Registry("algorithm source", "etsim.algorithm_sources", AlgorithmSource)


@SOURCES.register("native")
class NativeSource(AlgorithmSource):
    """Registered algorithm names and ``package.module:Class`` paths."""

    name = "native"
    priority = 0

    def claims(self, spec: str) -> bool:
        """A registered name, or ``package.module:Class`` / ``file.py:Class`` that is not an existing file.

        ``NAME:…`` where NAME is another source's registry name (``tacos:seed=1``) is that source's.
        """
        if spec in ALGORITHMS.names():
            return True
        module, sep, attr = spec.rpartition(":")
        if not (sep and attr.isidentifier() and module) or os.path.exists(spec):
            return False
        return spec.partition(":")[0] not in SOURCES.names()

    def collectives(self, spec: str) -> frozenset[CollectiveType]:
        """The class's ``collectives``."""
        return frozenset(ALGORITHMS.get(spec).collectives)

    def load(self, spec: str, context: AlgorithmContext) -> CollectiveAlgorithm:
        """Instantiate the class; multi-dimensional ones get the topology's ``dims``."""
        cls = ALGORITHMS.get(spec)
        if getattr(cls, "needs_context", False):
            return cls(topology=context.topology, settings=context.nccl)  # type: ignore[call-arg]
        if getattr(cls, "needs_dims", False):
            return cls(dims=context.dims, phase_delay=context.phase_delay)  # type: ignore[call-arg]
        return cls()


@SOURCES.register("chakra-et")
class FamilySource(AlgorithmSource):
    """Chakra ET families (the fallback: claims everything)."""

    name = "chakra-et"
    priority = 100
    reads_files = True

    def claims(self, spec: str) -> bool:
        """Everything."""
        return True

    def load(self, spec: str, context: AlgorithmContext) -> CollectiveAlgorithm:
        """Read the family (its graphs are built per rank when first used)."""
        return ChakraAlgorithm(context.path(spec), ignore_ctrl_deps=context.ignore_ctrl_deps)


def _ordered_sources() -> Sequence[AlgorithmSource]:
    classes = sorted(SOURCES.items(), key=lambda item: (item[1].priority, item[0]))
    return [cls() for _, cls in classes]


def claiming_source(spec: str) -> AlgorithmSource:
    """The source that claims *spec* (the first, in priority order; the Chakra ET family reader claims all)."""
    for source in _ordered_sources():
        if source.claims(spec):
            return source
    raise ConfigError(f"{spec!r}: no algorithm source claims it")  # pragma: no cover - chakra-et claims all


def resolve_algorithm(
    spec: str, context: AlgorithmContext | None = None, *, origin: str = "--algo"
) -> tuple[str, CollectiveAlgorithm]:
    """Turn an ``--algo`` value into ``(label, algorithm)`` with the first source that claims it.

    Args:
        spec: the value.
        context: paths, dimensions and options the sources may need.
        origin: where the value was given, for messages (``--algo``, ``sys.yaml: algorithms.all_reduce``).

    Raises:
        ConfigError: no source can load it; for the fallback family reader the message lists the
            algorithm names too.
    """
    context = context or AlgorithmContext()
    for source in _ordered_sources():
        if not source.claims(spec):
            continue
        try:
            return spec, source.load(spec, context)
        except RegistryError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        except ConfigError as exc:
            if isinstance(source, FamilySource):
                names = ", ".join(ALGORITHMS.names())
                raise ConfigError(
                    f"{origin} {spec!r} is neither an algorithm name ({names}) nor a Chakra ET family: {exc}"
                ) from None
            raise
    raise ConfigError(f"{origin} {spec!r}: no algorithm source claims it")  # pragma: no cover - chakra-et claims all
