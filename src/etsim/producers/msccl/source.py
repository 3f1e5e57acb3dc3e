"""``msccl-ir``: an MSCCL-IR XML algorithm, converted when first used (once per file and process).

:class:`MscclSource` claims ``--algo`` values ending in ``.xml``; it reaches the system's source registry
through the ``etsim.algorithm_sources`` entry point ``msccl-ir`` (``pyproject.toml``).
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import TYPE_CHECKING

from etsim.algo.graph import AlgoGraph
from etsim.chakra.graph import CollectiveType
from etsim.producers.msccl.ir import MscclError
from etsim.system.algorithms.base import CollectiveAlgorithm
from etsim.system.algorithms.sources import AlgorithmContext, AlgorithmSource

if TYPE_CHECKING:
    from etsim.producers.msccl.lower import MscclConversion

__all__ = ["MscclAlgorithm", "MscclSource", "load_msccl_algorithm"]


class MscclAlgorithm(CollectiveAlgorithm):
    """An MSCCL-IR XML converted on load: GPU *i* runs on group position *i*.

    Args:
        source: the XML file (or a finished :class:`~etsim.producers.msccl.MscclConversion`).
        instances: replicate the program (see :func:`~etsim.producers.msccl.replicate_instances`).

    The algorithm implements the ``<algo coll>`` collective (any collective for ``custom``) on
    groups of exactly ``ngpus`` ranks.
    """

    name = "msccl"
    source = "msccl-ir"

    def __init__(self, source: str | os.PathLike[str] | MscclConversion, *, instances: int = 1) -> None:
        from etsim.producers.msccl.lower import MscclConversion, convert_msccl  # lxml: only once an XML is used

        self.conversion = source if isinstance(source, MscclConversion) else convert_msccl(source, instances=instances)
        coll = self.conversion.collective
        self.collectives = frozenset(CollectiveType) if coll is None else frozenset({coll})  # type: ignore[misc]
        program = self.conversion.program
        low, high = program.min_bytes or 0, program.max_bytes or None  # maxBytes 0 (or absent): no upper bound
        #: ``(minBytes, maxBytes or None)`` when the file declares a size window, else None.
        self.byte_window: tuple[int, int | None] | None = (low, high) if (low or high) else None

    def supports(self, collective: CollectiveType, group_size: int) -> str | None:
        """None if *collective* is the program's and the group has ``ngpus`` ranks, else why not."""
        program = self.conversion.program
        if collective not in self.collectives:
            return f"MSCCL-IR algorithm {program.path!r} implements {program.coll}, not {collective.name.lower()}"
        if group_size != program.ngpus:
            return (
                f"MSCCL-IR algorithm {program.path!r} is written for {program.ngpus} GPUs but the "
                f"communicator group has {group_size} ranks"
            )
        return None

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        """The converted graph of GPU *position*."""
        self.check_position(collective, group_size, position)
        return self.conversion.graphs[position]


@lru_cache(maxsize=16)
def _converted(real: str, mtime_ns: int, size: int, instances: int, name: str) -> MscclAlgorithm:
    # Keyed by the file's identity and state: an edited file is converted again.
    return MscclAlgorithm(name, instances=instances)


def load_msccl_algorithm(path: str | os.PathLike[str], *, instances: int = 1) -> MscclAlgorithm:
    """An :class:`MscclAlgorithm` for *path*, converted once per process (keyed by file, mtime and size).

    Raises:
        MscclError: the file cannot be read or converted.
    """
    name = os.fspath(path)
    real = os.path.realpath(name)
    try:
        st = os.stat(real)
    except OSError as exc:
        raise MscclError(name, f"cannot read: {exc.strerror or exc}") from None
    return _converted(real, st.st_mtime_ns, st.st_size, instances, name)


class MscclSource(AlgorithmSource):
    """MSCCL-IR XML files (converted on the fly, once per file and process)."""

    name = "msccl-ir"
    priority = 50
    reads_files = True

    def claims(self, spec: str) -> bool:
        """Paths ending in ``.xml``."""
        return spec.endswith(".xml")

    def load(self, spec: str, context: AlgorithmContext) -> CollectiveAlgorithm:
        """Convert (or reuse) the XML."""
        return load_msccl_algorithm(context.path(spec))
