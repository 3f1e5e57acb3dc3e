"""The algorithm format: collective algorithms as per-rank graphs, their files, their meaning and their verifier.

Every algorithm source (native code, Chakra ET families, MSCCL-IR, TACOS) produces the same thing, an
:class:`~etsim.algo.graph.AlgoGraph` per rank, written with :class:`~etsim.algo.graph.AlgorithmBuilder`:

- :mod:`etsim.algo.graph`: the graph and its builder;
- :mod:`etsim.algo.dataflow`: what each node does to buffers (the data annotations);
- :mod:`etsim.algo.family_io`: a family of Chakra ET files, one per rank (encode, decode, write);
- :mod:`etsim.algo.semantics`: each collective's definition and the bytes any algorithm for it must move;
- :mod:`etsim.algo.verify`: the symbolic executor that checks a family computes its collective.

This layer sits on the trace format (:mod:`etsim.chakra`) and below everything that runs algorithms; it never
imports SimPy.
"""

from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph, AlgorithmBuilder

__all__ = ["COMP", "RECV", "SEND", "AlgoGraph", "AlgorithmBuilder"]
