"""MSCCL-IR XML → Chakra ET: parse every dialect, lower every step type, check the pairing.

MSCCL-IR describes a collective as, per GPU, thread blocks (``<tb>``) that execute their
``<step>`` lists in order; a tb sends to at most one peer and receives from at most one peer on
one channel, and a step may wait on one step of another tb of the same GPU (``depid``/``deps``,
plus extra waits carried by ``nop`` steps). This module turns that into one
:class:`~etsim.algo.graph.AlgoGraph` per GPU:

==========  ==========================================  ==================================
step        nodes (in order, each depending on the      local buffers read / written
            previous one)
==========  ==========================================  ==================================
``s``       SEND ``cnt`` chunks to ``tb.send``          reads ``src``
``r``       RECV ``cnt`` chunks from ``tb.recv``        writes ``dst``
``rcs``     RECV, SEND (forward)                        writes ``dst``
``rrs``     RECV, COMP (reduce), SEND                   reads ``src`` (no local write)
``rrc``     RECV, COMP (reduce)                         reads ``src``, writes ``dst``
``rrcs``    RECV, COMP (reduce), SEND                   reads ``src``, writes ``dst``
``cpy``     COMP (local copy, ``cnt`` chunks)           reads ``src``, writes ``dst``
``re``      COMP (local reduce, ``cnt`` chunks)         reads ``src`` and ``dst``, writes ``dst``
``nop``     nothing: its wait applies to the next step  —
==========  ==========================================  ==================================

Dependencies: the first node of step *i* waits for the completion of step *i − 1* of its tb
(program order), for step ``deps`` of tb ``depid`` when given, and for everything the ``nop``
steps just before it wait on. A ``nop`` "completes" when what it waits on and the step before
it have completed, so a dependency *on* a nop works too. Cross-GPU order comes from the
connections: sends and receives on ``(sender, receiver, channel)`` match first-to-first, and
:func:`convert_program` checks that each connection's sends and receives pair up in number and
size, reporting the first mismatch.

Sizes are symbolic: ``total_chunks`` = ``nchunksperloop`` (× instances), which matches
:func:`~etsim.chakra.graph.collective_buffer_bytes` for every collective: MSCCL-IR counts
chunks of the larger buffer (the all-gather output, the reduce-scatter input, the all-reduce and
all-to-all buffer). COMP nodes carry their chunk count; the simulator costs them with its
reduction bandwidth (copies included, as memory time).

Errors name the file, line, GPU, tb and step and say why (:class:`MscclError`, a
:class:`~etsim.errors.TraceError`).

Modules: :mod:`~etsim.producers.msccl.ir` (the program model), :mod:`~etsim.producers.msccl.parse`
(XML → program), :mod:`~etsim.producers.msccl.lower` (program → algorithm graphs),
:mod:`~etsim.producers.msccl.write` (graphs → Chakra ET family) and
:mod:`~etsim.producers.msccl.export` (Chakra ET family → XML). The simulator's adapter, the
``msccl-ir`` algorithm source, is :mod:`~etsim.producers.msccl.source`.
"""

from typing import TYPE_CHECKING

from etsim.lazy import lazy_attributes

if TYPE_CHECKING:
    from etsim.producers.msccl.export import MSCCL_COLL_NAMES, graphs_to_msccl, workload_to_msccl
    from etsim.producers.msccl.ir import (
        COLLECTIVES,
        STEP_TYPES,
        MscclError,
        MscclGpu,
        MscclProgram,
        MscclStep,
        MscclTb,
        msccl_collective,
    )
    from etsim.producers.msccl.lower import MscclConversion, convert_msccl, convert_program, step_counts
    from etsim.producers.msccl.parse import parse_msccl, replicate_instances
    from etsim.producers.msccl.write import conversion_traces, write_msccl_et

#: Where each public name lives; a submodule (and what it imports) loads when one of its names is first used.
_HOMES = {
    "COLLECTIVES": "ir",
    "MSCCL_COLL_NAMES": "export",
    "MscclConversion": "lower",
    "MscclError": "ir",
    "MscclGpu": "ir",
    "MscclProgram": "ir",
    "MscclStep": "ir",
    "MscclTb": "ir",
    "STEP_TYPES": "ir",
    "conversion_traces": "write",
    "convert_msccl": "lower",
    "convert_program": "lower",
    "graphs_to_msccl": "export",
    "msccl_collective": "ir",
    "parse_msccl": "parse",
    "replicate_instances": "parse",
    "step_counts": "lower",
    "workload_to_msccl": "export",
    "write_msccl_et": "write",
}
__getattr__ = lazy_attributes(__name__, _HOMES)

__all__ = [
    "COLLECTIVES",
    "MSCCL_COLL_NAMES",
    "STEP_TYPES",
    "MscclConversion",
    "MscclError",
    "MscclGpu",
    "MscclProgram",
    "MscclStep",
    "MscclTb",
    "conversion_traces",
    "convert_msccl",
    "convert_program",
    "graphs_to_msccl",
    "msccl_collective",
    "parse_msccl",
    "replicate_instances",
    "step_counts",
    "workload_to_msccl",
    "write_msccl_et",
]
