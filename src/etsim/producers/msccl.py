"""MSCCL-IR XML → Chakra ET: parse every dialect, lower every step type, check the pairing.

MSCCL-IR describes a collective as, per GPU, thread blocks (``<tb>``) that execute their
``<step>`` lists in order; a tb sends to at most one peer and receives from at most one peer on
one channel, and a step may wait on one step of another tb of the same GPU (``depid``/``deps``,
plus extra waits carried by ``nop`` steps). This module turns that into one
:class:`~etsim.producers.builder.AlgoGraph` per GPU:

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
:func:`~etsim.producers.builder.collective_buffer_bytes` for every collective: MSCCL-IR counts
chunks of the larger buffer (the all-gather output, the reduce-scatter input, the all-reduce and
all-to-all buffer). COMP nodes carry their chunk count; the simulator costs them with its
reduction bandwidth (copies included, as memory time).

Errors name the file, line, GPU, tb and step and say why (:class:`MscclError`, a
:class:`~etsim.errors.TraceError`).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from lxml import etree

from etsim.chakra.attributes import make_attribute
from etsim.chakra.graph import CollectiveType, Trace
from etsim.chakra.io import write_workload
from etsim.errors import TraceError
from etsim.producers.builder import COMP, RECV, SEND, AlgoGraph, algo_graph_to_trace
from etsim.system.algorithms.base import CollectiveAlgorithm

__all__ = [
    "COLLECTIVES",
    "STEP_TYPES",
    "MscclAlgorithm",
    "MscclConversion",
    "MscclError",
    "MscclGpu",
    "MscclProgram",
    "MscclStep",
    "MscclTb",
    "conversion_traces",
    "convert_msccl",
    "convert_program",
    "load_msccl_algorithm",
    "parse_msccl",
    "replicate_instances",
    "step_counts",
    "write_msccl_et",
]

#: Step types and the nodes each lowers to ("recv", "reduce", "copy", "send").
STEP_TYPES: dict[str, tuple[str, ...]] = {
    "s": ("send",),
    "r": ("recv",),
    "rcs": ("recv", "send"),
    "rrs": ("recv", "reduce", "send"),
    "rrc": ("recv", "reduce"),
    "rrcs": ("recv", "reduce", "send"),
    "cpy": ("copy",),
    "re": ("reduce",),
    "nop": (),
}

#: ``<algo coll>`` values (both runtimes' spellings) → the collective they implement
#: (None: ``custom`` and point-to-point programs, usable for any collective).
COLLECTIVES: dict[str, CollectiveType | None] = {
    "allreduce": CollectiveType.ALL_REDUCE,
    "allgather": CollectiveType.ALL_GATHER,
    "alltoall": CollectiveType.ALL_TO_ALL,
    "alltoallv": CollectiveType.ALL_TO_ALL,
    "reduce_scatter": CollectiveType.REDUCE_SCATTER,
    "reducescatter": CollectiveType.REDUCE_SCATTER,
    "broadcast": CollectiveType.BROADCAST,
    "reduce": CollectiveType.REDUCE,
    "gather": CollectiveType.GATHER,
    "scatter": CollectiveType.SCATTER,
    "custom": None,
    "send": None,
    "recv": None,
}

_BUFFERS = ("i", "o", "s")
_WHY_UNKNOWN = {
    "ra": "'ra' (residual add) is accepted only by the old MSCCL runtime, whose semantics "
    "(which buffers it reads) no generator or document defines",
}


class MscclError(TraceError):
    """An MSCCL-IR document that cannot be converted; the message says where and why.

    Attributes:
        path: the file (or ``<string>``).
        gpu: GPU id, or None.
        tb: thread block id, or None.
        step: step index ``s``, or None.
        reason: what is wrong, without the location.
    """

    def __init__(
        self,
        path: str,
        reason: str,
        *,
        gpu: int | None = None,
        tb: int | None = None,
        step: int | None = None,
        line: int | None = None,
    ) -> None:
        self.path, self.reason, self.gpu, self.tb, self.step, self.line = path, reason, gpu, tb, step, line
        where = [path + (f":{line}" if line else "")]
        if gpu is not None:
            where.append(f"gpu {gpu}")
        if tb is not None:
            where.append(f"tb {tb}")
        if step is not None:
            where.append(f"step {step}")
        super().__init__(f"{', '.join(where)}: {reason}")


@dataclass(slots=True)
class MscclStep:
    """One ``<step>``."""

    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    line: int | None = None


@dataclass(slots=True)
class MscclTb:
    """One ``<tb>``: a peer to send to (or −1), a peer to receive from (or −1), a channel, steps."""

    id: int
    send: int
    recv: int
    chan: int
    steps: list[MscclStep] = field(default_factory=list)
    line: int | None = None


@dataclass(slots=True)
class MscclGpu:
    """One ``<gpu>``: buffer sizes in chunks and thread blocks (indexed by tb id)."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: list[MscclTb] = field(default_factory=list)
    copies: list[tuple[int, int]] = field(default_factory=list)
    """TACCL ``<copy i_off o_off>`` hints (no runtime reads them; kept for information)."""
    line: int | None = None


@dataclass(slots=True)
class MscclProgram:
    """A parsed ``<algo>`` document."""

    path: str
    name: str
    coll: str
    ngpus: int
    nchunksperloop: int
    nchannels: int
    proto: str
    inplace: bool | None
    outofplace: bool | None
    min_bytes: int | None
    max_bytes: int | None
    gpus: list[MscclGpu]
    attributes: dict[str, str] = field(default_factory=dict)
    """Every ``<algo>`` attribute as written (extra ones such as ``redop``/``maxcount`` included)."""

    @property
    def collective(self) -> CollectiveType | None:
        """The collective implemented, or None for ``custom`` (any collective)."""
        return COLLECTIVES[self.coll]

    @property
    def num_steps(self) -> int:
        """All ``<step>`` elements, nops included."""
        return sum(len(tb.steps) for gpu in self.gpus for tb in gpu.tbs)


# --------------------------------------------------------------------------------------------- parse


def _int(path: str, elem: etree._Element, attr: str, where: dict[str, int | None], default: int | None = None) -> int:
    raw = elem.get(attr)
    if raw is None:
        if default is not None:
            return default
        raise MscclError(path, f"<{elem.tag}> has no '{attr}' attribute", line=elem.sourceline, **where)
    try:
        return int(raw.strip())
    except ValueError:
        raise MscclError(
            path, f"<{elem.tag}> attribute {attr}={raw!r} is not an integer", line=elem.sourceline, **where
        ) from None


def _str(path: str, elem: etree._Element, attr: str, where: dict[str, int | None]) -> str:
    raw = elem.get(attr)
    if raw is None:
        raise MscclError(path, f"<{elem.tag}> has no '{attr}' attribute", line=elem.sourceline, **where)
    return raw.strip()


def _flag(raw: str | None) -> bool | None:
    return None if raw is None else raw.strip() not in ("0", "", "false", "False")


def _children(elem: etree._Element, tag: str) -> list[etree._Element]:
    # Comments and processing instructions have a non-string tag; unknown elements are skipped
    # as both runtimes do.
    return [c for c in elem if isinstance(c.tag, str) and c.tag == tag]


def _locate(data: bytes, line: int | None) -> dict[str, int | None]:
    """The gpu/tb/step ids around *line* of a malformed document, read with lxml's recovering parser."""
    if line is None:
        return {}
    try:
        root = etree.fromstring(data, etree.XMLParser(recover=True, resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError:
        return {}
    if root is None:
        return {}
    found: dict[str, int | None] = {}
    best = None
    for el in root.iter("gpu", "tb", "step"):
        if el.sourceline is not None and el.sourceline <= line:
            best = el
    for el in [] if best is None else [best, *best.iterancestors()]:
        key = {"gpu": "gpu", "tb": "tb", "step": "step"}.get(el.tag)
        raw = el.get("s" if el.tag == "step" else "id")
        if key and key not in found and raw is not None and raw.strip().lstrip("-").isdigit():
            found[key] = int(raw)
    return found


def parse_msccl(source: str | os.PathLike[str] | bytes, *, name: str | None = None) -> MscclProgram:
    """Parse an MSCCL-IR document of any dialect into an :class:`MscclProgram`.

    Args:
        source: a file path, or the XML itself as ``bytes``.
        name: how to name the source in messages (default: the path, or ``<string>``).

    Raises:
        MscclError: unreadable XML, a missing or malformed attribute, ids that are not
            contiguous, a peer or dependency out of range, an unknown step type — with the
            file, line, GPU, tb and step.
    """
    if isinstance(source, bytes):
        path = name or "<string>"
        data = source
    else:
        path = name or os.fspath(source)
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise MscclError(path, f"cannot read: {exc.strerror or exc}") from None
    parser = etree.XMLParser(remove_comments=False, resolve_entities=False, no_network=True, huge_tree=True)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        line = exc.lineno if isinstance(exc.lineno, int) else None
        hint = ""
        if "redefined" in str(exc.msg) and any(f"Attribute {a} " in str(exc.msg) for a in ("send", "recv")):
            hint = " (a tb sends to at most one peer and receives from at most one peer)"
        raise MscclError(path, f"not well-formed XML: {exc.msg}{hint}", line=line, **_locate(data, line)) from None
    algo = root if root.tag == "algo" else next(iter(root.iter("algo")), None)
    if algo is None:
        raise MscclError(path, f"no <algo> element (the root is <{root.tag}>)", line=root.sourceline)
    none: dict[str, int | None] = {}
    coll = _str(path, algo, "coll", none)
    if coll not in COLLECTIVES:
        known = ", ".join(COLLECTIVES)
        raise MscclError(path, f"unknown collective coll={coll!r}; accepted: {known}", line=algo.sourceline)
    ngpus = _int(path, algo, "ngpus", none)
    nchunks = _int(path, algo, "nchunksperloop", none)
    if ngpus < 1 or nchunks < 1:
        raise MscclError(path, f"ngpus={ngpus} and nchunksperloop={nchunks} must be positive", line=algo.sourceline)
    attrs = {k: str(v) for k, v in algo.attrib.items()}

    def opt_int(attr: str) -> int | None:
        return _int(path, algo, attr, none) if algo.get(attr) is not None else None

    gpus: dict[int, MscclGpu] = {}
    max_chan = -1
    for gpu_el in _children(algo, "gpu"):
        gid = _int(path, gpu_el, "id", none)
        at: dict[str, int | None] = {"gpu": gid}
        if not 0 <= gid < ngpus:
            raise MscclError(path, f"gpu id {gid} is outside 0..{ngpus - 1} (ngpus={ngpus})", line=gpu_el.sourceline)
        if gid in gpus:
            raise MscclError(path, f"gpu {gid} is defined twice", line=gpu_el.sourceline)
        gpu = MscclGpu(
            gid,
            _int(path, gpu_el, "i_chunks", at),
            _int(path, gpu_el, "o_chunks", at),
            _int(path, gpu_el, "s_chunks", at),
            line=gpu_el.sourceline,
        )
        for c in _children(gpu_el, "copy"):
            gpu.copies.append((_int(path, c, "i_off", at, -1), _int(path, c, "o_off", at, -1)))
        tbs: dict[int, MscclTb] = {}
        for tb_el in _children(gpu_el, "tb"):
            tid = _int(path, tb_el, "id", at)
            at_tb: dict[str, int | None] = {"gpu": gid, "tb": tid}
            if tid in tbs:
                raise MscclError(path, f"tb {tid} is defined twice on this gpu", line=tb_el.sourceline, gpu=gid)
            tb = MscclTb(
                tid,
                _int(path, tb_el, "send", at_tb),
                _int(path, tb_el, "recv", at_tb),
                _int(path, tb_el, "chan", at_tb),
                line=tb_el.sourceline,
            )
            for role, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer == gid:
                    raise MscclError(path, f"{role}={peer} is the gpu itself", line=tb.line, **at_tb)
                if not -1 <= peer < ngpus:
                    raise MscclError(path, f"{role}={peer} is not a gpu (0..{ngpus - 1}) or -1", line=tb.line, **at_tb)
            if tb.chan < 0:
                raise MscclError(path, f"chan={tb.chan} is negative", line=tb.line, **at_tb)
            max_chan = max(max_chan, tb.chan)
            for st_el in _children(tb_el, "step"):
                tb.steps.append(_parse_step(path, st_el, tb, at_tb))
            for pos, st in enumerate(tb.steps):
                if st.s != pos:
                    raise MscclError(
                        path,
                        f"step index s={st.s} where {pos} was expected (steps count from 0, nops included)",
                        line=st.line,
                        gpu=gid,
                        tb=tid,
                        step=st.s,
                    )
            tbs[tid] = tb
        for pos, tid in enumerate(sorted(tbs)):
            if tid != pos:
                raise MscclError(path, f"tb ids are not contiguous from 0: tb {pos} is missing", gpu=gid)
        gpu.tbs = [tbs[t] for t in sorted(tbs)]
        gpus[gid] = gpu
    missing = [g for g in range(ngpus) if g not in gpus]
    if missing:
        raise MscclError(path, f"ngpus={ngpus} but there is no <gpu> with id {missing[0]}", line=algo.sourceline)
    program = MscclProgram(
        path=path,
        name=algo.get("name", ""),
        coll=coll,
        ngpus=ngpus,
        nchunksperloop=nchunks,
        nchannels=opt_int("nchannels") or max_chan + 1,
        proto=algo.get("proto", "Simple"),
        inplace=_flag(algo.get("inplace")),
        outofplace=_flag(algo.get("outofplace")),
        min_bytes=opt_int("minBytes"),
        max_bytes=opt_int("maxBytes"),
        gpus=[gpus[g] for g in range(ngpus)],
        attributes=attrs,
    )
    _check_references(program)
    return program


def _parse_step(path: str, el: etree._Element, tb: MscclTb, at_tb: dict[str, int | None]) -> MscclStep:
    s = _int(path, el, "s", at_tb)
    where: dict[str, int | None] = {**at_tb, "step": s}
    kind = _str(path, el, "type", where)
    if kind not in STEP_TYPES:
        why = _WHY_UNKNOWN.get(kind, f"known types: {', '.join(STEP_TYPES)}")
        raise MscclError(path, f"unknown step type {kind!r}: {why}", line=el.sourceline, **where)
    nop = kind == "nop"
    # A nop moves nothing; generators still write every attribute, but only its wait matters.
    cnt = _int(path, el, "cnt", where, 0 if nop else None)
    srcoff = _int(path, el, "srcoff", where, -1 if nop else None)
    dstoff = _int(path, el, "dstoff", where, -1 if nop else None)
    srcbuf = el.get("srcbuf", "i" if nop else None)
    dstbuf = el.get("dstbuf", "o" if nop else None)
    if srcbuf is None or dstbuf is None:
        raise MscclError(
            path, f"<step> has no '{'srcbuf' if srcbuf is None else 'dstbuf'}' attribute", line=el.sourceline, **where
        )
    has_depid, has_deps = el.get("depid") is not None, el.get("deps") is not None
    if has_depid != has_deps:
        raise MscclError(
            path,
            f"<step> has '{'depid' if has_depid else 'deps'}' without '{'deps' if has_depid else 'depid'}'",
            line=el.sourceline,
            **where,
        )
    depid = _int(path, el, "depid", where, -1)
    deps = _int(path, el, "deps", where, -1)
    step = MscclStep(
        s,
        kind,
        srcbuf.strip(),
        srcoff,
        dstbuf.strip(),
        dstoff,
        cnt,
        depid,
        deps,
        _int(path, el, "hasdep", where, 0),
        el.sourceline,
    )
    if cnt < 0:
        raise MscclError(path, f"cnt={cnt} is negative", line=el.sourceline, **where)
    if nop:  # a nop without depid waits on nothing: legal, and it makes no node
        return step
    if cnt == 0:
        raise MscclError(
            path, f"a {kind!r} step with cnt=0 moves nothing (only nops have cnt 0)", line=el.sourceline, **where
        )
    parts = STEP_TYPES[kind]
    if "send" in parts and tb.send < 0:
        raise MscclError(
            path, f"a {kind!r} step sends, but its tb has send=-1 (no peer to send to)", line=el.sourceline, **where
        )
    if "recv" in parts and tb.recv < 0:
        raise MscclError(
            path,
            f"a {kind!r} step receives, but its tb has recv=-1 (no peer to receive from)",
            line=el.sourceline,
            **where,
        )
    for role, buf, off in (("src", step.srcbuf, srcoff), ("dst", step.dstbuf, dstoff)):
        if buf not in _BUFFERS:
            raise MscclError(path, f"{role}buf={buf!r} is not a buffer (i, o or s)", line=el.sourceline, **where)
        if off < 0 and _uses(kind, role):
            raise MscclError(
                path, f"{role}off={off}: a {kind!r} step uses its {role} buffer", line=el.sourceline, **where
            )
    return step


def _uses(kind: str, role: str) -> bool:
    """Whether step *kind* touches its local *role* ("src"/"dst") buffer (see the module table)."""
    if role == "src":
        return kind in ("s", "rrs", "rrc", "rrcs", "cpy", "re")
    return kind in ("r", "rcs", "rrc", "rrcs", "cpy", "re")


def _check_references(program: MscclProgram) -> None:
    path = program.path
    for gpu in program.gpus:
        io_limit = max(gpu.i_chunks, gpu.o_chunks, program.nchunksperloop)
        for tb in gpu.tbs:
            for st in tb.steps:
                where = {"gpu": gpu.id, "tb": tb.id, "step": st.s}
                if st.depid >= 0 or st.deps >= 0:
                    if not 0 <= st.depid < len(gpu.tbs):
                        raise MscclError(
                            path,
                            f"depid={st.depid} names no tb of this gpu (tbs 0..{len(gpu.tbs) - 1})",
                            line=st.line,
                            **where,
                        )
                    target = gpu.tbs[st.depid]
                    if not 0 <= st.deps < len(target.steps):
                        raise MscclError(
                            path,
                            f"deps={st.deps} names no step of tb {st.depid} (it has {len(target.steps)} steps)",
                            line=st.line,
                            **where,
                        )
                    if st.depid == tb.id and st.deps >= st.s:
                        raise MscclError(
                            path, f"waits on its own tb's step {st.deps}, which runs later", line=st.line, **where
                        )
                if st.type == "nop":
                    continue
                for role, buf, off in (("src", st.srcbuf, st.srcoff), ("dst", st.dstbuf, st.dstoff)):
                    # In-place programs alias the input and output buffers, so i/o offsets may reach
                    # the larger of the two (or the loop's chunk count); scratch has its own size.
                    limit = gpu.s_chunks if buf == "s" else io_limit
                    if _uses(st.type, role) and off + st.cnt > limit:
                        raise MscclError(
                            path,
                            f"{role}buf={buf!r} chunks [{off}, {off + st.cnt}) exceed the buffer ({limit} chunks)",
                            line=st.line,
                            **where,
                        )


def replicate_instances(program: MscclProgram, instances: int) -> MscclProgram:
    """The program replicated *instances* times, as ``MSCCLProgram(instances=k)`` does.

    Every tb becomes *k* tbs (id ``tb·k + i``, channel ``nchannels·i + chan``), dependencies stay
    inside their instance, and every buffer (and ``nchunksperloop``) holds *k* times as many
    chunks; offsets are interleaved (``off·k + i``). Each step moves the same number of (now
    *k* times smaller) chunks, so the bytes moved are unchanged.

    Raises:
        ValueError: *instances* < 1.
    """
    if instances < 1:
        raise ValueError(f"instances must be at least 1, not {instances}")
    if instances == 1:
        return program
    k = instances
    gpus = []
    for gpu in program.gpus:
        tbs = []
        for tb in gpu.tbs:
            for i in range(k):
                steps = [
                    replace(
                        st,
                        srcoff=st.srcoff * k + i if st.srcoff >= 0 else -1,
                        dstoff=st.dstoff * k + i if st.dstoff >= 0 else -1,
                        depid=st.depid * k + i if st.depid >= 0 else -1,
                    )
                    for st in tb.steps
                ]
                tbs.append(MscclTb(tb.id * k + i, tb.send, tb.recv, program.nchannels * i + tb.chan, steps, tb.line))
        tbs.sort(key=lambda t: t.id)
        gpus.append(
            replace(gpu, i_chunks=gpu.i_chunks * k, o_chunks=gpu.o_chunks * k, s_chunks=gpu.s_chunks * k, tbs=tbs)
        )
    return replace(program, nchunksperloop=program.nchunksperloop * k, nchannels=program.nchannels * k, gpus=gpus)


# --------------------------------------------------------------------------------------------- convert


@dataclass(slots=True)
class MscclConversion:
    """The per-GPU algorithm graphs of a program, with provenance for every node.

    Attributes:
        program: the (instance-replicated) program converted.
        graphs: one :class:`~etsim.producers.builder.AlgoGraph` per GPU (peers are GPU ids).
        origins: per GPU, per node: ``(tb, step, part, buffer, offset)`` — the step a node
            comes from, which part of it ("send", "recv", "reduce", "copy"), and the local
            buffer and chunk offset it reads (send, reduce) or writes (recv, copy).
    """

    program: MscclProgram
    graphs: list[AlgoGraph]
    origins: list[list[tuple[int, int, str, str, int]]]

    @property
    def collective(self) -> CollectiveType | None:
        """The collective (None for ``custom``)."""
        return self.program.collective

    @property
    def num_nodes(self) -> int:
        """Nodes over all GPUs."""
        return sum(g.num_nodes for g in self.graphs)

    @property
    def num_messages(self) -> int:
        """SEND nodes over all GPUs."""
        return sum(g.kinds.count(SEND) for g in self.graphs)


def convert_program(program: MscclProgram) -> MscclConversion:
    """Lower every GPU of *program* to an algorithm graph and check that the connections pair up.

    Raises:
        MscclError: a dependency cycle, or a connection whose sends and receives differ in
            number or size (the first mismatch, with both steps named).
    """
    graphs: list[AlgoGraph] = []
    origins: list[list[tuple[int, int, str, str, int]]] = []
    for gpu in program.gpus:
        graph, origin = _convert_gpu(program, gpu)
        graphs.append(graph)
        origins.append(origin)
    _check_pairing(program)
    return MscclConversion(program, graphs, origins)


def _convert_gpu(program: MscclProgram, gpu: MscclGpu) -> tuple[AlgoGraph, list[tuple[int, int, str, str, int]]]:
    path = program.path
    kinds: list[int] = []
    peers: list[int] = []
    tags: list[int] = []
    chunks: list[float] = []
    names: list[str] = []
    origin: list[tuple[int, int, str, str, int]] = []
    deps: list[list[int]] = []
    first: list[list[int]] = []  # per tb, per step: first node (-1 for nop)
    last: list[list[int]] = []
    for tb in gpu.tbs:
        tb_first, tb_last = [], []
        for st in tb.steps:
            prev = -1
            head = -1
            for part in STEP_TYPES[st.type]:
                if part == "send":
                    kind, peer, buf, off = SEND, tb.send, st.srcbuf, st.srcoff
                    if st.type in ("rcs",):
                        buf, off = st.dstbuf, st.dstoff  # forwards what it just received
                elif part == "recv":
                    kind, peer = RECV, tb.recv
                    buf, off = (st.dstbuf, st.dstoff) if _uses(st.type, "dst") else (st.srcbuf, st.srcoff)
                else:
                    kind, peer = COMP, -1
                    buf, off = (
                        (st.dstbuf, st.dstoff) if st.type in ("cpy", "re", "rrc", "rrcs") else (st.srcbuf, st.srcoff)
                    )
                node = len(kinds)
                kinds.append(kind)
                peers.append(peer)
                tags.append(tb.chan if kind != COMP else 0)
                chunks.append(float(st.cnt))
                names.append(f"tb{tb.id}_s{st.s}_{st.type}_{part}")
                origin.append((tb.id, st.s, part, buf, off))
                deps.append([prev] if prev >= 0 else [])
                if head < 0:
                    head = node
                prev = node
            tb_first.append(head)
            tb_last.append(prev)
        first.append(tb_first)
        last.append(tb_last)

    # done(tb, s): the nodes whose completion means step s of tb has completed.
    memo: dict[tuple[int, int], tuple[int, ...]] = {}
    active: set[tuple[int, int]] = set()

    def waits(t: int, s: int) -> tuple[int, ...]:
        st = gpu.tbs[t].steps[s]
        found: list[int] = []
        if s > 0:
            found.extend(done(t, s - 1))
        if st.depid >= 0:
            found.extend(done(st.depid, st.deps))
        return tuple(dict.fromkeys(found))

    def done(t: int, s: int) -> tuple[int, ...]:
        key = (t, s)
        hit = memo.get(key)
        if hit is not None:
            return hit
        if last[t][s] >= 0:
            result: tuple[int, ...] = (last[t][s],)
        else:
            if key in active:
                raise MscclError(path, "nop dependencies form a cycle", gpu=gpu.id, tb=t, step=s)
            active.add(key)
            result = waits(t, s)
            active.discard(key)
        memo[key] = result
        return result

    try:
        for t, tb in enumerate(gpu.tbs):
            for s in range(len(tb.steps)):
                head = first[t][s]
                if head >= 0:
                    deps[head].extend(d for d in waits(t, s) if d not in deps[head])
    except RecursionError:
        raise MscclError(path, "nop dependency chain too deep to resolve", gpu=gpu.id) from None

    # Topological order (Kahn, lowest position first so document order is kept where possible).
    import heapq

    n = len(kinds)
    indeg = [len(d) for d in deps]
    succ: list[list[int]] = [[] for _ in range(n)]
    for child, ds in enumerate(deps):
        for d in ds:
            succ[d].append(child)
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for c in succ[v]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    if len(order) != n:
        stuck = min(i for i in range(n) if indeg[i] > 0)
        t, s = origin[stuck][0], origin[stuck][1]
        raise MscclError(
            path,
            f"dependencies form a cycle through this step ({names[stuck]} waits on "
            + ", ".join(names[d] for d in deps[stuck] if indeg[d] > 0)
            + ")",
            gpu=gpu.id,
            tb=t,
            step=s,
            line=gpu.tbs[t].steps[s].line,
        )
    new_pos = [0] * n
    for pos, old in enumerate(order):
        new_pos[old] = pos
    g = AlgoGraph(total_chunks=program.nchunksperloop)
    new_origin = []
    for old in order:
        g.kinds.append(kinds[old])
        g.peers.append(peers[old])
        g.tags.append(tags[old])
        g.chunks.append(chunks[old])
        g.durations_ns.append(None)
        g.names.append(names[old])
        g.deps_idx.extend(sorted(new_pos[d] for d in deps[old]))
        g.deps_ptr.append(len(g.deps_idx))
        new_origin.append(origin[old])
    return g, new_origin


def _check_pairing(program: MscclProgram) -> None:
    """Check every connection (sender, receiver, channel): same number of messages, same sizes."""
    sends: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
    recvs: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
    send_tbs: dict[tuple[int, int, int], set[int]] = {}
    recv_tbs: dict[tuple[int, int, int], set[int]] = {}
    for gpu in program.gpus:
        for tb in gpu.tbs:
            for st in tb.steps:
                parts = STEP_TYPES[st.type]
                if "send" in parts:
                    key = (gpu.id, tb.send, tb.chan)
                    sends.setdefault(key, []).append((st.cnt, tb.id, st.s))
                    send_tbs.setdefault(key, set()).add(tb.id)
                if "recv" in parts:
                    key = (tb.recv, gpu.id, tb.chan)
                    recvs.setdefault(key, []).append((st.cnt, tb.id, st.s))
                    recv_tbs.setdefault(key, set()).add(tb.id)
    for key in sorted(set(sends) | set(recvs)):
        src, dst, chan = key
        out, inc = sends.get(key, []), recvs.get(key, [])
        conn = f"connection gpu {src} → gpu {dst} on channel {chan}"
        ordered = len(send_tbs.get(key, ())) <= 1 and len(recv_tbs.get(key, ())) <= 1
        if ordered:
            for k, ((c_out, t_out, s_out), (c_in, t_in, s_in)) in enumerate(zip(out, inc, strict=False)):
                if c_out != c_in:
                    raise MscclError(
                        program.path,
                        f"{conn}: message #{k} is sent with {c_out} chunks (gpu {src} tb {t_out} step {s_out}) "
                        f"but received with {c_in} chunks (gpu {dst} tb {t_in} step {s_in})",
                        gpu=src,
                        tb=t_out,
                        step=s_out,
                    )
        elif sorted(c for c, _, _ in out) != sorted(c for c, _, _ in inc) and len(out) == len(inc):
            raise MscclError(
                program.path,
                f"{conn}: the message sizes sent and received differ "
                f"(several tbs share the connection, so the order is not fixed)",
                gpu=src,
            )
        if len(out) != len(inc):
            if len(out) > len(inc):
                c, t, s = out[len(inc)]
                what = f"gpu {src} sends {len(out)} messages but gpu {dst} receives {len(inc)}; the first unmatched"
                raise MscclError(program.path, f"{conn}: {what} is this send ({c} chunks)", gpu=src, tb=t, step=s)
            c, t, s = inc[len(out)]
            what = f"gpu {dst} receives {len(inc)} messages but gpu {src} sends {len(out)}; the first unmatched"
            raise MscclError(program.path, f"{conn}: {what} is this receive ({c} chunks)", gpu=dst, tb=t, step=s)


def convert_msccl(
    source: str | os.PathLike[str] | bytes, *, instances: int = 1, name: str | None = None
) -> MscclConversion:
    """Parse and convert an MSCCL-IR document (see :func:`parse_msccl`, :func:`convert_program`).

    Args:
        source: a file path or the XML as bytes.
        instances: replicate the program this many times (:func:`replicate_instances`).
        name: how to name the source in messages.

    Raises:
        MscclError: the document cannot be converted (where and why).
    """
    program = parse_msccl(source, name=name)
    return convert_program(replicate_instances(program, instances))


# --------------------------------------------------------------------------------------------- write


def conversion_traces(conversion: MscclConversion) -> list[Trace]:
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
        trace = algo_graph_to_trace(graph, gid, n)
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


def write_msccl_et(conversion: MscclConversion, prefix: str | os.PathLike[str]) -> list[Path]:
    """Write ``PREFIX.<gpu>.et`` for every GPU (a trailing ``.et`` on *prefix* is dropped)."""
    text = os.fspath(prefix)
    if text.endswith(".et"):
        text = text[: -len(".et")]
    Path(text).parent.mkdir(parents=True, exist_ok=True)
    return write_workload(conversion_traces(conversion), text)


# --------------------------------------------------------------------------------------------- simulate


class MscclAlgorithm(CollectiveAlgorithm):
    """An MSCCL-IR XML converted on load: GPU *i* runs on group position *i*.

    Args:
        source: the XML file (or a finished :class:`MscclConversion`).
        instances: replicate the program (see :func:`replicate_instances`).

    The algorithm implements the ``<algo coll>`` collective (any collective for ``custom``) on
    groups of exactly ``ngpus`` ranks.
    """

    name = "msccl"

    def __init__(self, source: str | os.PathLike[str] | MscclConversion, *, instances: int = 1) -> None:
        self.conversion = source if isinstance(source, MscclConversion) else convert_msccl(source, instances=instances)
        coll = self.conversion.collective
        self.collectives = frozenset(CollectiveType) if coll is None else frozenset({coll})  # type: ignore[misc]

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


_CACHE: OrderedDict[tuple[str, int, int, int], MscclAlgorithm] = OrderedDict()
_CACHE_SIZE = 16


def load_msccl_algorithm(path: str | os.PathLike[str], *, instances: int = 1) -> MscclAlgorithm:
    """An :class:`MscclAlgorithm` for *path*, converted once per process (keyed by file and mtime).

    Raises:
        MscclError: the file cannot be converted.
    """
    real = os.path.realpath(os.fspath(path))
    try:
        st = os.stat(real)
    except OSError as exc:
        raise MscclError(os.fspath(path), f"cannot read: {exc.strerror or exc}") from None
    key = (real, st.st_mtime_ns, st.st_size, instances)
    algo = _CACHE.get(key)
    if algo is None:
        algo = MscclAlgorithm(os.fspath(path), instances=instances)
        _CACHE[key] = algo
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return algo


def _iter_steps(program: MscclProgram) -> Iterable[tuple[MscclGpu, MscclTb, MscclStep]]:
    for gpu in program.gpus:
        for tb in gpu.tbs:
            for st in tb.steps:
                yield gpu, tb, st


def step_counts(program: MscclProgram) -> dict[str, int]:
    """How many steps of each type the program has."""
    counts: dict[str, int] = {}
    for _, _, st in _iter_steps(program):
        counts[st.type] = counts.get(st.type, 0) + 1
    return counts
