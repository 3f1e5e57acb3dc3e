"""Collective algorithms: the plug-in base class, the registry and the native algorithms.

Importing this package registers the native algorithms in :data:`ALGORITHMS`: ``ring``,
``direct``, ``halving_doubling``, ``tree`` (double binary tree) and ``hierarchical``.
"""

from etsim.system.algorithms.astra import AstraDirectAlgorithm, AstraHalvingDoublingAlgorithm, AstraRingAlgorithm
from etsim.system.algorithms.base import ALGORITHMS, CollectiveAlgorithm
from etsim.system.algorithms.direct import DirectAlgorithm
from etsim.system.algorithms.halving_doubling import HalvingDoublingAlgorithm
from etsim.system.algorithms.hierarchical import HierarchicalAlgorithm, HierarchicalBaselineAlgorithm
from etsim.system.algorithms.ring import RingAlgorithm
from etsim.system.algorithms.tree import TreeAlgorithm

__all__ = [
    "ALGORITHMS",
    "AstraDirectAlgorithm",
    "AstraHalvingDoublingAlgorithm",
    "AstraRingAlgorithm",
    "CollectiveAlgorithm",
    "DirectAlgorithm",
    "HalvingDoublingAlgorithm",
    "HierarchicalAlgorithm",
    "HierarchicalBaselineAlgorithm",
    "RingAlgorithm",
    "TreeAlgorithm",
]
