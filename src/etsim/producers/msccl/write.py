"""Write a lowered MSCCL-IR program as a Chakra ET algorithm family, with provenance attributes."""

from __future__ import annotations

import os
from pathlib import Path

from etsim.algo.family_io import algo_graph_to_trace, write_family
from etsim.chakra.attributes import make_attribute
from etsim.chakra.graph import Trace
from etsim.producers.msccl.lower import MscclConversion

__all__ = ["conversion_traces", "write_msccl_et"]


def conversion_traces(conversion: MscclConversion, *, size: int | None = None) -> list[Trace]:
    """One Chakra ET trace per GPU, with symbolic sizes and MSCCL provenance attributes.

    Every node carries ``msg_chunk_cnt``/``total_chunk_cnt`` (int32, as the reference converter
    writes) plus ``msg_chunk_idx`` (the local chunk offset), ``tb_id``, ``local_time_step``
    (the step index) and ``msccl_buffer`` (``i``/``o``/``s``). GlobalMetadata carries
    ``collective``, ``msccl_name``, ``proto``, ``nchunksperloop`` and ``source`` (the file name).
    """
    program = conversion.program
    n = program.ngpus
    traces = []
    for gid, graph in enumerate(conversion.graphs):
        trace = algo_graph_to_trace(graph, gid, n, size=size)
        for node, (tb, s, _part, buf, off) in zip(trace.nodes, conversion.origins[gid], strict=True):
            node.attr.append(make_attribute("msg_chunk_idx", off, member="int32_val"))
            node.attr.append(make_attribute("tb_id", tb, member="int32_val"))
            node.attr.append(make_attribute("local_time_step", s, member="int32_val"))
            node.attr.append(make_attribute("msccl_buffer", buf, member="string_val"))
        meta = trace.metadata
        for key, value in (
            ("collective", program.coll),
            ("msccl_name", program.name),
            ("proto", program.proto),
            ("nchunksperloop", str(program.nchunksperloop)),
            ("source", Path(program.path).name),
        ):
            meta.attr.append(make_attribute(key, value, member="string_val"))
        traces.append(Trace.from_nodes(trace.nodes, meta, rank=gid))
    return traces


def write_msccl_et(
    conversion: MscclConversion, prefix: str | os.PathLike[str], *, size: int | None = None
) -> list[Path]:
    """Write ``PREFIX.<gpu>.et`` for every GPU (a trailing ``.et`` on *prefix* is dropped).

    With *size* (the collective's buffer in bytes) every node also carries its ``comm_size``.
    """
    return write_family(conversion_traces(conversion, size=size), prefix)
