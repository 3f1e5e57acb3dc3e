"""Collective algorithms: the plug-in base class, the registries and the native algorithms.

Importing this package registers the native algorithms in :data:`ALGORITHMS` (``ring``,
``direct``, ``halving_doubling``/``hd``, ``tree`` (double binary tree), ``hierarchical`` and
``hierarchical_baseline``) and the algorithm sources in :data:`SOURCES` (names, MSCCL-IR XML,
Chakra ET families).
"""

from etsim.system.algorithms.base import (
    ALGORITHMS,
    BuiltAlgorithm,
    CollectiveAlgorithm,
    DeferredCheck,
    DeferredChecks,
    Phase,
)
from etsim.system.algorithms.direct import DirectAlgorithm
from etsim.system.algorithms.family import ChakraAlgorithm
from etsim.system.algorithms.halving_doubling import HalvingDoublingAlgorithm
from etsim.system.algorithms.hierarchical import HierarchicalAlgorithm, HierarchicalBaselineAlgorithm
from etsim.system.algorithms.nccl import NcclAlgorithm
from etsim.system.algorithms.ring import RingAlgorithm
from etsim.system.algorithms.sources import SOURCES, AlgorithmContext, AlgorithmSource, resolve_algorithm
from etsim.system.algorithms.tree import TreeAlgorithm

__all__ = [
    "ALGORITHMS",
    "SOURCES",
    "AlgorithmContext",
    "AlgorithmSource",
    "BuiltAlgorithm",
    "ChakraAlgorithm",
    "CollectiveAlgorithm",
    "DeferredCheck",
    "DeferredChecks",
    "DirectAlgorithm",
    "HalvingDoublingAlgorithm",
    "HierarchicalAlgorithm",
    "HierarchicalBaselineAlgorithm",
    "NcclAlgorithm",
    "Phase",
    "RingAlgorithm",
    "TreeAlgorithm",
    "resolve_algorithm",
]
