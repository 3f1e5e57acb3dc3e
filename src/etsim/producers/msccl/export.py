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

Buffers and offsets come from the graphs' data annotations (:mod:`etsim.algo.dataflow`), so the
XML is a data-correct program that :mod:`etsim.algo.verify` checks like any other: sends read
their chunks (``s``), storing receives write theirs (``r``), local copies and reductions are
``cpy``/``re``, and a receive that reduces becomes an ``r`` plus the ``re`` of the COMP node that
follows it (into a scratch slot first when it reduces in place). Scratch buffers other than ``s``
are laid out one after another in ``s``; ``inplace``/``outofplace`` are the graphs' placements.
When a graph has no annotations, or one MSCCL-IR cannot express (chunks that are not contiguous,
a send that also copies, a reducing receive without a COMP node after it, untimed setup copies),
every step addresses chunk 0 as a placeholder and ``<algo etsim_offsets="placeholder">`` says so:
the lowering then reads the file as having no data annotations (it cannot be verified) instead of
as a wrong program; the reason is returned in *notes*. A data-correct program is read back and verified before it is
returned (:func:`checked_program`): one wrong in place only is written for out of place only (a reducing receive
lands in its output slot, which in place is the input the reduction still reads), any other wrong one is refused.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import quoteattr

from etsim.algo.dataflow import IN_PLACE, OUT_OF_PLACE, Segment, absolute_segments
from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph
from etsim.chakra.dag import topological_order
from etsim.chakra.graph import CollectiveType, Workload
from etsim.chakra.io import load_workload
from etsim.errors import ConfigError, TraceError, warn
from etsim.producers.msccl.ir import msccl_collective

__all__ = ["MSCCL_COLL_NAMES", "PLACEHOLDER", "checked_program", "graphs_to_msccl", "workload_to_msccl"]

#: ``<algo etsim_offsets>`` value of a program whose offsets are placeholders (no data annotations).
PLACEHOLDER = "placeholder"

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


#: The MSCCL runtime's limits: thread blocks per GPU (the older runtime's) and steps per thread block.
MAX_RUNTIME_TBS, MAX_RUNTIME_STEPS = 216, 256
#: MSCCL's MAXCHANNELS and MSCCL_MAX_COUNT: a channel id and a step's count the runtimes' parsers accept.
MAX_RUNTIME_CHANNELS, MAX_RUNTIME_COUNT = 32, 72

#: A step's type and local buffers: ``(type, srcbuf, srcoff, dstbuf, dstoff)``.
_Data = tuple[str, str, int, str, int]


class _Tb:
    __slots__ = ("chan", "recv", "send", "steps")

    def __init__(self) -> None:
        self.send = -1
        self.recv = -1
        self.chan = -1
        self.steps: list[tuple[str, int, tuple[int, int], list[tuple[int, int]], _Data | None]] = []
        """(type, cnt, (depid, deps), extra waits carried by nops, data or None)"""


class _Inexpressible(Exception):
    """A graph's data annotation has no MSCCL-IR form (the message says why)."""


#: A node's operand, contiguous chunks of one buffer: ``(buffer, first chunk)``, the offset absolute (a scratch
#: buffer by its own name, before the scratch buffers are laid out in ``s``).
_Ref = tuple[str, int]


def _data_refs(
    graph: AlgoGraph, rank: int, group_size: int, label: str
) -> tuple[list[tuple[_Ref | None, _Ref | None]], dict[str, int]]:
    """Per node, where its annotation reads and writes; and how many chunks of each scratch buffer are used.

    Raises:
        _Inexpressible: an operand whose chunks are not contiguous.
    """
    total = graph.total_chunks
    refs: list[tuple[_Ref | None, _Ref | None]] = []
    extent: dict[str, int] = {}

    def one(segs: tuple[Segment, ...], v: int) -> _Ref | None:
        if not segs:
            return None
        fixed = absolute_segments(segs, rank, group_size, total)
        if len(fixed) != 1 or (fixed[0].stride != 1 and (fixed[0].cnt or 0) > 1):
            raise _Inexpressible(
                f"{label} rank {rank} node {v} ({graph.names[v]}): its chunks are not contiguous "
                "(an MSCCL-IR step moves cnt chunks from one offset)"
            )
        s = fixed[0]
        if s.buf not in ("i", "o"):
            extent[s.buf] = max(extent.get(s.buf, 0), s.off + (s.cnt or 0))
        return (s.buf, s.off)

    for v in range(graph.num_nodes):
        d = graph.data_of(v)
        refs.append((None, None) if d is None else (one(d.src, v), one(d.dst, v)))
    return refs, extent


def _scratch_bases(extent: dict[str, int]) -> tuple[dict[str, int], int]:
    """Where each scratch buffer starts in ``s`` (``s`` itself first, then the others by name); the chunks used."""
    base: dict[str, int] = {}
    used = 0
    for name in sorted(extent, key=lambda b: (b != "s", b)):
        base[name] = used
        used += extent[name]
    return base, used


def _data_plan(graph: AlgoGraph, rank: int, group_size: int, label: str) -> tuple[list[_Data | None], int]:
    """Per node, the step type and buffers its data annotation becomes; and the scratch chunks used.

    Raises:
        _Inexpressible: an annotation MSCCL-IR cannot say (see the module docstring).
    """
    n_nodes = graph.num_nodes
    if graph.setup:
        raise _Inexpressible(f"{label} rank {rank}: untimed setup copies have no MSCCL-IR form (a cpy step is timed)")
    refs, extent = _data_refs(graph, rank, group_size, label)
    base, used = _scratch_bases(extent)

    def where(ref: _Ref) -> _Ref:
        return ref if ref[0] in ("i", "o") else ("s", base[ref[0]] + ref[1])

    plan: list[_Data | None] = [None] * n_nodes
    paired: set[int] = set()
    succ = graph.successor_lists()
    for v in range(n_nodes):
        d = graph.data_of(v)
        kind = graph.kinds[v]
        name = f"{label} rank {rank} node {v} ({graph.names[v]})"
        cnt = int(graph.chunks[v])
        if d is None:
            if kind in (SEND, RECV):
                raise _Inexpressible(f"{name}: no data annotation")
            if v not in paired and plan[v] is None:
                raise _Inexpressible(f"{name}: a COMP node that moves no data has no MSCCL-IR form")
            continue
        src, dst = refs[v]
        if kind == SEND:
            if d.dst:
                raise _Inexpressible(f"{name}: a send that also copies locally has no MSCCL-IR form")
            assert src is not None
            b, o = where(src)
            plan[v] = ("s", b, o, b, o)
        elif kind == RECV and d.op == "store":
            assert dst is not None
            b, o = where(dst)
            plan[v] = ("r", b, o, b, o)
        elif kind == RECV:  # reduce: r now, re in the COMP node that follows
            assert src is not None and dst is not None
            free = [w for w in succ[v] if graph.kinds[w] == COMP and graph.data_of(w) is None and w not in paired]
            comp = next((w for w in free if graph.chunks[w] == cnt), None)
            if comp is None:
                raise _Inexpressible(f"{name}: a reducing receive needs a COMP node after it to carry the reduction")
            paired.add(comp)
            db, do = where(dst)
            sb, so = where(src)
            if (db, do) == (sb, so):
                landing = ("s", used)
                used += cnt
            elif db == sb and do < so + cnt and so < do + cnt:
                raise _Inexpressible(f"{name}: a reduction between overlapping chunk ranges")
            else:
                landing = (db, do)
            plan[v] = ("r", landing[0], landing[1], landing[0], landing[1])
            plan[comp] = ("re", landing[0], landing[1], db, do) if landing != (db, do) else ("re", sb, so, db, do)
        else:
            assert src is not None and dst is not None
            sb, so = where(src)
            db, do = where(dst)
            plan[v] = ("cpy" if d.op == "copy" else "re", sb, so, db, do)
    return plan, used


def _chunks(graph: AlgoGraph, pos: int, where: str) -> int:
    amount = graph.chunks[pos]
    if amount != int(amount) or amount < 0:
        raise ConfigError(f"{where}: {amount} chunks is not a whole number; MSCCL-IR counts whole chunks")
    return int(amount)


def _gpu_tbs(graph: AlgoGraph, rank: int, group_size: int, label: str, plan: list[_Data | None]) -> list[_Tb]:
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
        data = plan[v] if plan else None
        if data is not None:
            step_type = data[0]
        tb.steps.append((step_type, cnt, main, waits[1:], data))
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
    notes: list[str] | None = None,
) -> str:
    """The MSCCL-IR XML of one algorithm graph per rank (see the module docstring).

    Args:
        graphs: graph of rank *i* at index *i*; all symbolic with the same ``total_chunks``.
        collective: the collective implemented (None writes ``coll="custom"``).
        name: ``<algo name>``.
        proto: ``<algo proto>``.
        label: how to name the input in messages.
        notes: if given, why the offsets are placeholders is appended to it.

    Raises:
        ConfigError: a graph MSCCL-IR cannot express (named node and reason).
    """
    n = len(graphs)
    if n < 1:
        raise ConfigError(f"{label}: no ranks")
    total = _total_chunks(graphs, label)
    coll = MSCCL_COLL_NAMES.get(collective, "custom") if collective is not None else "custom"
    buf = "o" if coll == "allgather" else "i"
    plans, scratch, why = _data_plans(graphs, label)
    if why and notes is not None:
        notes.append(why)
    per_gpu = [_gpu_tbs(g, r, n, label, plans[r]) for r, g in enumerate(graphs)]
    most_tbs = max((len(tbs) for tbs in per_gpu), default=0)
    most_steps = max((len(tb.steps) for tbs in per_gpu for tb in tbs), default=0)
    max_cnt = max((st[1] for tbs in per_gpu for tb in tbs for st in tb.steps), default=0)
    size = max(total, max_cnt)
    nchannels = max((tb.chan for tbs in per_gpu for tb in tbs), default=0) + 1
    if (most_tbs > MAX_RUNTIME_TBS or most_steps > MAX_RUNTIME_STEPS or nchannels > MAX_RUNTIME_CHANNELS
            or max_cnt >= MAX_RUNTIME_COUNT):  # fmt: skip
        warn(
            f"{label}: {most_tbs} thread blocks on a GPU, {most_steps} steps in a thread block, {nchannels} channels "
            f"and a step of {max_cnt} chunks: MSCCL's runtime takes at most {MAX_RUNTIME_TBS}, {MAX_RUNTIME_STEPS}, "
            f"{MAX_RUNTIME_CHANNELS} and fewer than {MAX_RUNTIME_COUNT} (etsim reads and runs the XML; the runtime "
            "may refuse it)"
        )
    placement = graphs[0].placement or (OUT_OF_PLACE,)
    inplace, outofplace = int(IN_PLACE in placement), int(OUT_OF_PLACE in placement)
    if why:
        inplace, outofplace = 1, 0
    marker = f' etsim_offsets="{PLACEHOLDER}"' if why else ""
    lines = [
        f'<algo name={quoteattr(name)} proto={quoteattr(proto)} nchannels="{nchannels}" '
        f'nchunksperloop="{total}" ngpus="{n}" coll="{coll}" inplace="{inplace}" outofplace="{outofplace}" '
        f'minBytes="0" maxBytes="0"{marker}>'
    ]
    for r, tbs in enumerate(per_gpu):
        i_chunks, o_chunks = (0, size) if buf == "o" else (size, 0)
        if not why:
            i_chunks, o_chunks = _buffer_chunks(coll, total, size, n, plans[r], outofplace)
        lines.append(f'  <gpu id="{r}" i_chunks="{i_chunks}" o_chunks="{o_chunks}" s_chunks="{scratch[r]}">')
        _append_tbs(lines, tbs, buf)
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


#: Collectives whose input (``"i"``) or output (``"o"``) is one rank's piece, ``total / ngpus`` chunks.
_PIECE_BUFFER = {"allgather": "i", "gather": "i", "reducescatter": "o", "scatter": "o"}


def _buffer_chunks(
    coll: str, total: int, size: int, n: int, plan: list[_Data | None], outofplace: int
) -> tuple[int, int]:
    """``i_chunks`` and ``o_chunks`` of one GPU: the collective's buffers as MSCCL's runtimes size them.

    The older runtime refuses a GPU whose non-zero ``i_chunks`` times nRanks (all-gather) or ``o_chunks`` times
    nRanks (reduce-scatter) is not ``nchunksperloop``, as producers write them: an all-gather's input is the rank's
    piece (0 when in place and never read, as MSCCLang writes in-place all-gathers), a reduce-scatter's output
    likewise; every other buffer is the whole loop.
    """
    piece = _PIECE_BUFFER.get(coll)
    if piece is None or total % n:
        return size, size
    used = {b for data in plan if data is not None for b in (data[1], data[3])}
    chunks = total // n if outofplace or piece in used else 0
    return (chunks, size) if piece == "i" else (size, chunks)


def _total_chunks(graphs: Sequence[AlgoGraph], label: str) -> int:
    """The ``total_chunks`` every graph shares (MSCCL-IR's ``nchunksperloop``).

    Raises:
        ConfigError: a graph sized in absolute bytes, or graphs that disagree.
    """
    totals = {g.total_chunks for g in graphs}
    if None in totals:
        raise ConfigError(
            f"{label}: sizes are absolute bytes (comm_size); MSCCL-IR needs symbolic sizes "
            "(msg_chunk_cnt of total_chunk_cnt)"
        )
    if len(totals) != 1:
        raise ConfigError(f"{label}: ranks disagree on total_chunk_cnt ({sorted(t or 0 for t in totals)})")
    return int(next(iter(totals)) or 0)


def _data_plans(graphs: Sequence[AlgoGraph], label: str) -> tuple[list[list[_Data | None]], list[int], str]:
    """Per rank, the data plan and the scratch chunks it uses; and why offsets must be placeholders ("" if not).

    With placeholders every plan is empty and no rank uses scratch.
    """
    n = len(graphs)
    plans: list[list[_Data | None]] = []
    scratch: list[int] = []
    why = ""
    if not any(any(d is not None for d in g.data) for g in graphs):
        why = f"{label}: the graphs have no data annotations"
    else:
        try:
            for r, g in enumerate(graphs):
                plan, used = _data_plan(g, r, n, label)
                plans.append(plan)
                scratch.append(used)
        except _Inexpressible as exc:
            why = str(exc)
    if why:
        plans, scratch = [[] for _ in graphs], [0] * n
    return plans, scratch, why


def _append_tbs(lines: list[str], tbs: list[_Tb], buf: str) -> None:
    """Append the ``<tb>`` elements of one GPU to *lines*, each extra wait as a nop before its step.

    Steps without a data plan address chunk 0 of *buf* (placeholder offsets).
    """
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
        for kind, cnt, (dt, ds), extra, data in tb.steps:
            for et, es in extra:
                has = int((t, s) in targets)
                lines.append(
                    f'      <step s="{s}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" '
                    f'depid="{et}" deps="{index[et][es]}" hasdep="{has}"/>'
                )
                s += 1
            depid, deps = (dt, index[dt][ds]) if dt >= 0 else (-1, -1)
            has = int((t, s) in targets)
            sbuf, soff, dbuf, doff = data[1:] if data is not None else (buf, 0, buf, 0)
            lines.append(
                f'      <step s="{s}" type="{kind}" srcbuf="{sbuf}" srcoff="{soff}" dstbuf="{dbuf}" '
                f'dstoff="{doff}" cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{has}"/>'
            )
            s += 1
        lines.append("    </tb>")


def _recorded(workload: Workload, key: str) -> str | None:
    """A string the MSCCL-IR converter recorded in the family's global metadata (``collective``, ``proto`` …)."""
    for attr in workload[0].metadata.attr:
        if attr.name == key and attr.WhichOneof("value") == "string_val":
            return str(attr.string_val)
    return None


def _collective_of(workload: Workload) -> CollectiveType | None:
    """The ``collective`` recorded in the family's global metadata, if any."""
    recorded = _recorded(workload, "collective")
    try:
        return msccl_collective(recorded.lower()) if recorded else None
    except ValueError:
        return None


def workload_to_msccl(
    spec: str | os.PathLike[str],
    *,
    collective: CollectiveType | None = None,
    name: str | None = None,
    proto: str | None = None,
    notes: list[str] | None = None,
) -> str:
    """The MSCCL-IR XML of a Chakra ET algorithm family (``PREFIX.<rank>.et``).

    Args:
        spec: the family (a prefix, ``PREFIX.et`` or a directory; see ``load_workload``).
        collective: the collective it implements; default: the files' ``collective`` metadata
            (written by the MSCCL-IR converter), else ``custom``.
        name: ``<algo name>`` (default: the name the MSCCL-IR converter recorded, else the prefix's base name).
        proto: ``<algo proto>`` (default: the recorded one, else ``Simple``).
        notes: if given, why the offsets are placeholders is appended to it (:func:`graphs_to_msccl`).

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
    name = name or _recorded(workload, "msccl_name") or base
    proto = proto or _recorded(workload, "proto") or "Simple"
    why: list[str] = []
    xml = graphs_to_msccl(graphs, collective=collective, name=name, proto=proto, label=label, notes=why)
    if notes is not None:
        notes += why
    return xml if why else checked_program(xml, label, notes)


def checked_program(xml: str, label: str, notes: list[str] | None = None) -> str:
    """*xml* once it is read back and verified: a program that does not compute its collective is never written.

    A reducing receive lands in its output slot before the reduction reads the input's: out of place that is right,
    in place the two slots are one and the landing overwrites the contribution. So a program declared for both
    placements that fails in place is written for out of place only (the reason appended to *notes*).

    Raises:
        ConfigError: the program does not compute its collective (the first wrong piece named).
    """
    from etsim.producers.msccl.lower import convert_msccl

    verdict = convert_msccl(xml.encode(), name=label).verify()
    both = 'inplace="1" outofplace="1"'
    if verdict.ok is False and both in xml:
        narrowed = xml.replace(both, 'inplace="0" outofplace="1"', 1)
        if convert_msccl(narrowed.encode(), name=label).verify().ok is not False:
            if notes is not None:
                notes.append(f"written for out of place only: in place it would not compute its collective ({verdict})")
            return narrowed
    if verdict.ok is False:
        raise ConfigError(f"{label}: the MSCCL-IR written from it would not compute its collective: {verdict}")
    return xml
