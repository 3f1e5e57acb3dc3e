"""Chakra ET algorithm → MSCCL-IR XML, for algorithms made of sends, receives and reductions.

The inverse of :mod:`etsim.producers.msccl.lower` for the graphs etsim writes (``etsim algo export``
families, synthesised algorithms): every SEND becomes an ``s`` step, every RECV an ``r`` step,
every reduction (COMP) an ``re`` step of the same chunk count. Steps are packed into thread
blocks as chains — a node joins the tb whose last step it depends on, when the tb's peers and
channel allow — so program order never adds a wait the graph did not have; the node's other
dependencies become its ``depid``/``deps`` and one ``nop`` per extra dependency, as MSCCLang
writes them. The channel of a tb is the messages' ``comm_tag``. Reading the XML back with
:func:`~etsim.producers.msccl.lower.convert_msccl` gives the same nodes and dependencies, so the
simulated time is identical.

What MSCCL-IR cannot say is refused with the node named: absolute byte sizes (MSCCL-IR sizes
are chunks of the buffer), fractional chunk counts, and COMP nodes with a fixed duration.
Buffer offsets are not part of an etsim graph; every step addresses chunk 0 of the input buffer
(the output buffer for all-gather), which the runtimes' bounds allow but which is not a
data-correct program for a real GPU.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import quoteattr

from etsim.chakra.algorithm import COMP, RECV, SEND, AlgoGraph, algo_graph_from_trace
from etsim.chakra.dag import topological_order
from etsim.chakra.graph import CollectiveType, Workload
from etsim.chakra.io import load_workload
from etsim.errors import ConfigError, TraceError
from etsim.producers.msccl.ir import msccl_collective

__all__ = ["MSCCL_COLL_NAMES", "graphs_to_msccl", "workload_to_msccl"]

#: The ``<algo coll>`` written for each collective (Azure/RCCL spelling); others are ``custom``.
MSCCL_COLL_NAMES: dict[CollectiveType, str] = {
    CollectiveType.ALL_REDUCE: "allreduce",
    CollectiveType.ALL_GATHER: "allgather",
    CollectiveType.REDUCE_SCATTER: "reducescatter",
    CollectiveType.ALL_TO_ALL: "alltoall",
    CollectiveType.BROADCAST: "broadcast",
    CollectiveType.REDUCE: "reduce",
    CollectiveType.GATHER: "gather",
    CollectiveType.SCATTER: "scatter",
}


class _Tb:
    __slots__ = ("chan", "recv", "send", "steps")

    def __init__(self) -> None:
        self.send = -1
        self.recv = -1
        self.chan = -1
        self.steps: list[tuple[str, int, tuple[int, int], list[tuple[int, int]]]] = []
        """(type, cnt, (depid, deps), extra waits carried by nops)"""


def _chunks(graph: AlgoGraph, pos: int, where: str) -> int:
    amount = graph.chunks[pos]
    if amount != int(amount) or amount < 0:
        raise ConfigError(f"{where}: {amount} chunks is not a whole number; MSCCL-IR counts whole chunks")
    return int(amount)


def _gpu_tbs(graph: AlgoGraph, rank: int, group_size: int, label: str) -> list[_Tb]:
    succ_ptr, succ, indeg = graph.successors()
    order = topological_order(succ_ptr, succ, indeg)
    if len(order) != graph.num_nodes:
        raise ConfigError(f"{label} rank {rank}: the algorithm graph has a dependency cycle")
    tbs: list[_Tb] = []
    slot: dict[int, tuple[int, int]] = {}  # node -> (tb, step)
    for v in order:
        where = f"{label} rank {rank} node {v} ({graph.names[v] or 'unnamed'})"
        kind = graph.kinds[v]
        cnt = _chunks(graph, v, where)
        if kind == COMP:
            dur = graph.durations_ns[v]
            if dur:
                raise ConfigError(
                    f"{where}: a COMP node with a fixed duration ({dur} ns) has no MSCCL-IR form "
                    "(MSCCL-IR reductions are sized in chunks)"
                )
            step_type, peer = "re", -1
        elif kind in (SEND, RECV):
            step_type = "s" if kind == SEND else "r"
            peer = graph.peer_position(v, rank, group_size)
            if peer == rank or not 0 <= peer < group_size:
                raise ConfigError(f"{where}: peer {peer} is not another rank of the {group_size}-rank group")
        else:  # pragma: no cover - AlgoGraph holds only these kinds
            raise ConfigError(f"{where}: node kind {kind} has no MSCCL-IR form")
        deps = list(dict.fromkeys(graph.deps(v)))
        chosen = -1
        for d in deps:
            t, s = slot[d]
            tb = tbs[t]
            if s != len(tb.steps) - 1:
                continue
            if kind == SEND and (tb.send not in (-1, peer) or tb.chan not in (-1, graph.tags[v])):
                continue
            if kind == RECV and (tb.recv not in (-1, peer) or tb.chan not in (-1, graph.tags[v])):
                continue
            chosen = t
            break
        if chosen < 0:
            chosen = len(tbs)
            tbs.append(_Tb())
        tb = tbs[chosen]
        if kind == SEND:
            tb.send, tb.chan = peer, graph.tags[v]
        elif kind == RECV:
            tb.recv, tb.chan = peer, graph.tags[v]
        implicit = (chosen, len(tb.steps) - 1)
        waits = [slot[d] for d in deps if slot[d] != implicit]
        main = waits[0] if waits else (-1, -1)
        tb.steps.append((step_type, cnt, main, waits[1:]))
        # nops come before the step, so the step's index is shifted by them.
        slot[v] = (chosen, len(tb.steps) - 1)
    return tbs


def graphs_to_msccl(
    graphs: Sequence[AlgoGraph],
    *,
    collective: CollectiveType | None,
    name: str = "etsim",
    proto: str = "Simple",
    label: str = "algorithm",
) -> str:
    """The MSCCL-IR XML of one algorithm graph per rank (see the module docstring).

    Args:
        graphs: graph of rank *i* at index *i*; all symbolic with the same ``total_chunks``.
        collective: the collective implemented (None writes ``coll="custom"``).
        name: ``<algo name>``.
        proto: ``<algo proto>``.
        label: how to name the input in messages.

    Raises:
        ConfigError: a graph MSCCL-IR cannot express (named node and reason).
    """
    n = len(graphs)
    if n < 1:
        raise ConfigError(f"{label}: no ranks")
    totals = {g.total_chunks for g in graphs}
    if None in totals:
        raise ConfigError(
            f"{label}: sizes are absolute bytes (comm_size); MSCCL-IR needs symbolic sizes "
            "(msg_chunk_cnt of total_chunk_cnt)"
        )
    if len(totals) != 1:
        raise ConfigError(f"{label}: ranks disagree on total_chunk_cnt ({sorted(t or 0 for t in totals)})")
    total = int(next(iter(totals)) or 0)
    coll = MSCCL_COLL_NAMES.get(collective, "custom") if collective is not None else "custom"
    buf = "o" if coll == "allgather" else "i"
    per_gpu = [_gpu_tbs(g, r, n, label) for r, g in enumerate(graphs)]
    max_cnt = max((st[1] for tbs in per_gpu for tb in tbs for st in tb.steps), default=0)
    size = max(total, max_cnt)
    nchannels = max((tb.chan for tbs in per_gpu for tb in tbs), default=0) + 1
    lines = [
        f'<algo name={quoteattr(name)} proto={quoteattr(proto)} nchannels="{nchannels}" '
        f'nchunksperloop="{total}" ngpus="{n}" coll="{coll}" inplace="1" outofplace="0" '
        'minBytes="0" maxBytes="0">'
    ]
    for r, tbs in enumerate(per_gpu):
        i_chunks, o_chunks = (0, size) if buf == "o" else (size, 0)
        lines.append(f'  <gpu id="{r}" i_chunks="{i_chunks}" o_chunks="{o_chunks}" s_chunks="0">')
        # Map (tb, logical step) to the written step index (nops shift indices).
        index: list[list[int]] = []
        for tb in tbs:
            idx, s = [], 0
            for st in tb.steps:
                s += len(st[3])
                idx.append(s)
                s += 1
            index.append(idx)
        targets = {(t, index[t][s]) for tb in tbs for st in tb.steps for (t, s) in [st[2], *st[3]] if t >= 0}
        for t, tb in enumerate(tbs):
            lines.append(f'    <tb id="{t}" send="{tb.send}" recv="{tb.recv}" chan="{max(tb.chan, 0)}">')
            s = 0
            for kind, cnt, (dt, ds), extra in tb.steps:
                for et, es in extra:
                    has = int((t, s) in targets)
                    lines.append(
                        f'      <step s="{s}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" '
                        f'depid="{et}" deps="{index[et][es]}" hasdep="{has}"/>'
                    )
                    s += 1
                depid, deps = (dt, index[dt][ds]) if dt >= 0 else (-1, -1)
                has = int((t, s) in targets)
                lines.append(
                    f'      <step s="{s}" type="{kind}" srcbuf="{buf}" srcoff="0" dstbuf="{buf}" dstoff="0" '
                    f'cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{has}"/>'
                )
                s += 1
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def _collective_of(workload: Workload) -> CollectiveType | None:
    """The ``collective`` recorded in the family's global metadata, if any."""
    for attr in workload[0].metadata.attr:
        if attr.name == "collective" and attr.WhichOneof("value") == "string_val":
            try:
                return msccl_collective(attr.string_val.lower())
            except ValueError:
                return None
    return None


def workload_to_msccl(
    spec: str | os.PathLike[str],
    *,
    collective: CollectiveType | None = None,
    name: str | None = None,
    proto: str = "Simple",
) -> str:
    """The MSCCL-IR XML of a Chakra ET algorithm family (``PREFIX.<rank>.et``).

    Args:
        spec: the family (a prefix, ``PREFIX.et`` or a directory; see ``load_workload``).
        collective: the collective it implements; default: the files' ``collective`` metadata
            (written by the MSCCL-IR converter), else ``custom``.
        name: ``<algo name>`` (default: the prefix's base name).
        proto: ``<algo proto>``.

    Raises:
        TraceError: the family cannot be read.
        ConfigError: a node MSCCL-IR cannot express.
    """
    workload = load_workload(spec)
    graphs = []
    for trace in workload:
        try:
            graphs.append(algo_graph_from_trace(trace))
        except ValueError as exc:
            raise TraceError(str(exc)) from None
    if collective is None:
        collective = _collective_of(workload)
    label = os.fspath(spec)
    base = Path(label).name
    if base.endswith(".et"):
        base = base[: -len(".et")]
    return graphs_to_msccl(graphs, collective=collective, name=name or base, proto=proto, label=label)
