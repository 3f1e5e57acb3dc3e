"""Parse MSCCL-IR XML of every dialect into an :class:`~etsim.producers.msccl.ir.MscclProgram`."""

from __future__ import annotations

import os
from dataclasses import replace

from lxml import etree

from etsim.errors import ConfigError
from etsim.files import read_bytes
from etsim.producers.msccl.ir import (
    BUFFERS,
    COLLECTIVES,
    STEP_TYPES,
    WHY_UNKNOWN,
    MscclError,
    MscclGpu,
    MscclProgram,
    MscclStep,
    MscclTb,
    msccl_collective,
    step_uses,
)

__all__ = ["parse_msccl", "replicate_instances"]


#: The largest GPU or chunk count a program may declare (a buffer of this many chunks is already absurd).
MAX_COUNT = 1_000_000


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
    path, data = _read_source(source, name)
    algo = _find_algo(path, _parse_xml(path, data))
    none: dict[str, int | None] = {}
    coll = _str(path, algo, "coll", none)
    try:
        msccl_collective(coll)
    except ValueError:
        known = ", ".join(COLLECTIVES)
        raise MscclError(path, f"unknown collective coll={coll!r}; accepted: {known}", line=algo.sourceline) from None
    ngpus = _int(path, algo, "ngpus", none)
    nchunks = _int(path, algo, "nchunksperloop", none)
    if ngpus < 1 or nchunks < 1:
        raise MscclError(path, f"ngpus={ngpus} and nchunksperloop={nchunks} must be positive", line=algo.sourceline)
    for attr, value in (("ngpus", ngpus), ("nchunksperloop", nchunks)):
        if value > MAX_COUNT:
            raise MscclError(
                path, f"{attr}={value:,} is larger than etsim's limit of {MAX_COUNT:,}", line=algo.sourceline
            )
    attrs = {k: str(v) for k, v in algo.attrib.items()}

    def opt_int(attr: str) -> int | None:
        return _int(path, algo, attr, none) if algo.get(attr) is not None else None

    gpus: dict[int, MscclGpu] = {}
    for gpu_el in _children(algo, "gpu"):
        gpu = _parse_gpu(path, gpu_el, ngpus, gpus)
        gpus[gpu.id] = gpu
    if len(gpus) < ngpus:  # ids are checked to lie in 0..ngpus-1, so some id is missing
        first = next(g for g in range(len(gpus) + 1) if g not in gpus)
        raise MscclError(path, f"ngpus={ngpus} but there is no <gpu> with id {first}", line=algo.sourceline)
    max_chan = max((tb.chan for gpu in gpus.values() for tb in gpu.tbs), default=-1)
    declared = opt_int("nchannels")
    if declared is not None and declared <= max_chan:
        # (the runtime sets up nchannels channels: a tb on a channel past them has none; instances, which shift
        # channels by nchannels, would share one)
        gpu, tb = next((g, t) for g in gpus.values() for t in g.tbs if t.chan == max_chan)
        raise MscclError(
            path,
            f"nchannels={declared}, but gpu {gpu.id} tb {tb.id} uses chan={max_chan} (channels are 0..nchannels-1)",
            line=algo.sourceline,
        )
    program = MscclProgram(
        path=path,
        name=algo.get("name", ""),
        coll=coll,
        ngpus=ngpus,
        nchunksperloop=nchunks,
        nchannels=declared or max_chan + 1,
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


def _read_source(source: str | os.PathLike[str] | bytes, name: str | None) -> tuple[str, bytes]:
    """The name messages give *source* and its bytes (read from the file when *source* is a path)."""
    if isinstance(source, bytes):
        return name or "<string>", source
    path = name or os.fspath(source)
    try:
        return path, read_bytes(source, "MSCCL-IR file")
    except ConfigError as exc:
        raise MscclError(path, str(exc).removeprefix(f"{os.fspath(source)}: ")) from None


def _parse_xml(path: str, data: bytes) -> etree._Element:
    """The root element of *data*, or an error at the line (and gpu, tb, step) where the XML breaks."""
    parser = etree.XMLParser(remove_comments=False, resolve_entities=False, no_network=True, huge_tree=True)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        line = exc.lineno if isinstance(exc.lineno, int) else None
        hint = ""
        if "redefined" in str(exc.msg) and any(f"Attribute {a} " in str(exc.msg) for a in ("send", "recv")):
            hint = " (a tb sends to at most one peer and receives from at most one peer)"
        raise MscclError(path, f"not well-formed XML: {exc.msg}{hint}", line=line, **_locate(data, line)) from None


def _find_algo(path: str, root: etree._Element) -> etree._Element:
    """The ``<algo>`` element: the root itself or the first one inside it."""
    algo = root if root.tag == "algo" else next(iter(root.iter("algo")), None)
    if algo is None:
        raise MscclError(path, f"no <algo> element (the root is <{root.tag}>)", line=root.sourceline)
    return algo


def _parse_gpu(path: str, gpu_el: etree._Element, ngpus: int, gpus: dict[int, MscclGpu]) -> MscclGpu:
    """One ``<gpu>`` with its copies and tbs; *gpus* holds those parsed before it, to refuse a second id."""
    none: dict[str, int | None] = {}
    gid = _int(path, gpu_el, "id", none)
    at: dict[str, int | None] = {"gpu": gid}
    if not 0 <= gid < ngpus:
        raise MscclError(path, f"gpu id {gid} is outside 0..{ngpus - 1} (ngpus={ngpus})", line=gpu_el.sourceline)
    if gid in gpus:
        raise MscclError(path, f"gpu {gid} is defined twice", line=gpu_el.sourceline)
    counts = [_int(path, gpu_el, attr, at) for attr in ("i_chunks", "o_chunks", "s_chunks")]
    for attr, value in zip(("i_chunks", "o_chunks", "s_chunks"), counts, strict=True):
        if value > MAX_COUNT:
            raise MscclError(
                path,
                f"gpu {gid}: {attr}={value:,} is larger than etsim's limit of {MAX_COUNT:,}",
                line=gpu_el.sourceline,
            )
    gpu = MscclGpu(gid, counts[0], counts[1], counts[2], line=gpu_el.sourceline)
    for c in _children(gpu_el, "copy"):
        gpu.copies.append((_int(path, c, "i_off", at, -1), _int(path, c, "o_off", at, -1)))
    tbs: dict[int, MscclTb] = {}
    for tb_el in _children(gpu_el, "tb"):
        tb = _parse_tb(path, tb_el, gid, ngpus, tbs)
        tbs[tb.id] = tb
    for pos, tid in enumerate(sorted(tbs)):
        if tid != pos:
            raise MscclError(path, f"tb ids are not contiguous from 0: tb {pos} is missing", gpu=gid)
    gpu.tbs = [tbs[t] for t in sorted(tbs)]
    return gpu


def _parse_tb(path: str, tb_el: etree._Element, gid: int, ngpus: int, tbs: dict[int, MscclTb]) -> MscclTb:
    """One ``<tb>`` of gpu *gid* with its steps; *tbs* holds the gpu's tbs parsed before it."""
    tid = _int(path, tb_el, "id", {"gpu": gid})
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
    return tb


def _parse_step(path: str, el: etree._Element, tb: MscclTb, at_tb: dict[str, int | None]) -> MscclStep:
    s = _int(path, el, "s", at_tb)
    where: dict[str, int | None] = {**at_tb, "step": s}
    kind = _str(path, el, "type", where)
    if kind not in STEP_TYPES:
        why = WHY_UNKNOWN.get(kind, f"known types: {', '.join(STEP_TYPES)}")
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
        if buf not in BUFFERS:
            raise MscclError(path, f"{role}buf={buf!r} is not a buffer (i, o or s)", line=el.sourceline, **where)
        if off < 0 and step_uses(kind, role):
            raise MscclError(
                path, f"{role}off={off}: a {kind!r} step uses its {role} buffer", line=el.sourceline, **where
            )
    return step


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
                    # The runtime publishes a step's completion flag only when its hasdep is 1: a wait on a step
                    # without it spins forever on the GPU, so etsim must not time it as if it finished.
                    if st.depid != tb.id and target.steps[st.deps].hasdep != 1:
                        raise MscclError(
                            path,
                            f"waits on tb {st.depid} step {st.deps}, which has hasdep=0: that step publishes no "
                            'completion, so MSCCL\'s runtime would wait forever (set hasdep="1" on it)',
                            line=st.line,
                            **where,
                        )
                if st.type == "nop":
                    continue
                for role, buf, off in (("src", st.srcbuf, st.srcoff), ("dst", st.dstbuf, st.dstoff)):
                    # In-place programs alias the input and output buffers, so i/o offsets may reach
                    # the larger of the two (or the loop's chunk count); scratch has its own size.
                    limit = gpu.s_chunks if buf == "s" else io_limit
                    if step_uses(st.type, role) and off + st.cnt > limit:
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
    chunks, interleaved: chunk ``c`` of instance ``i`` is chunk ``c·k + i``. A step of ``cnt``
    chunks from ``off`` therefore moves chunks ``off·k + i``, ``(off + 1)·k + i``, … (offset
    ``off·k + i``, :attr:`~etsim.producers.msccl.ir.MscclStep.stride` k), the same number of (now
    *k* times smaller) chunks, so the bytes moved are unchanged. (MSCCLang's interleaved
    replication supports only single-chunk steps on the input and output buffers; per-chunk
    interleaving is the layout that keeps every collective's pieces in place for any step.)

    Raises:
        ValueError: *instances* < 1.
    """
    if instances < 1:
        raise ValueError(f"instances must be at least 1, not {instances}")
    if instances * program.nchunksperloop > MAX_COUNT:
        raise ValueError(
            f"{instances} instances of {program.nchunksperloop} chunks make more than etsim's limit of {MAX_COUNT:,}"
        )
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
                        stride=st.stride * k,
                    )
                    for st in tb.steps
                ]
                tbs.append(MscclTb(tb.id * k + i, tb.send, tb.recv, program.nchannels * i + tb.chan, steps, tb.line))
        tbs.sort(key=lambda t: t.id)
        gpus.append(
            replace(gpu, i_chunks=gpu.i_chunks * k, o_chunks=gpu.o_chunks * k, s_chunks=gpu.s_chunks * k, tbs=tbs)
        )
    return replace(program, nchunksperloop=program.nchunksperloop * k, nchannels=program.nchannels * k, gpus=gpus)
