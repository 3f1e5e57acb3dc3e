"""What an algorithm node does to buffers: the data annotations of :class:`~etsim.algo.graph.AlgoGraph`.

Timing needs only sizes and dependencies; checking that an algorithm computes its collective
(:mod:`etsim.algo.verify`) also needs to know *which* chunks each node reads and writes. A node's
annotation is a :class:`NodeData` ``(op, dst, src)``:

======  =========  ====================================  =================================
kind    op         src (read)                            dst (written)
======  =========  ====================================  =================================
SEND    ``send``   the chunks sent, in message order     optional: a local copy of them
                                                         (NCCL's *copySend*)
RECV    ``store``  —                                     the message
RECV    ``reduce`` the local operand                     ``src ⊕ message`` (``src`` may be
                                                         ``dst``: a reduction in place)
COMP    ``copy``   the chunks copied                     ``src``
COMP    ``reduce`` the chunks added                      ``dst ⊕ src``
COMP    (none)     —                                     — (a cost only: its time, no data)
======  =========  ====================================  =================================

Reductions are carried by the receive that brings the operand (as MSCCL-IR's fused ``rrc``/``rrs``
steps do), so the COMP node that follows a receive in a native algorithm is a cost only.

Chunks are addressed by :class:`Segment` lists. A segment ``(buf, off, cnt, stride, rel)`` names the
chunks ``off, off + stride, …`` (``cnt`` of them) of buffer ``buf``: ``i`` (input), ``o`` (output)
or any other name (scratch, never initialised; ``s`` is MSCCL-IR's). A *relative* segment (``rel``)
is shifted by the rank: chunk ``(off + j·stride + position·T/n) mod T`` for total chunks ``T`` and
group size ``n``, which lets one graph with relative peers serve every rank of a symmetric
algorithm. The segments of an operand, concatenated, cover exactly the node's chunk count; a
message's chunks keep that order from the sender's ``src`` to the receiver's ``dst``.

In Chakra ET files the annotation is three string attributes, ``data_op``, ``data_src`` and
``data_dst``, each segment written ``BUF@OFF`` (all the node's chunks from ``OFF``),
``BUF@OFFxCNT`` or ``BUF@OFFxCNT/STRIDE``, relative offsets as ``BUF@r-1``, segments joined by
commas: ``o@r-1x1,s2@r+1x5``. Whether input and output alias is a property of the whole algorithm
(:data:`IN_PLACE`, :data:`OUT_OF_PLACE`), written in the file's global metadata as
``data_placement``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

__all__ = [
    "IN_PLACE",
    "OPS",
    "OUT_OF_PLACE",
    "PLACEMENTS",
    "NodeData",
    "Segment",
    "SegmentsLike",
    "absolute_segments",
    "format_segments",
    "parse_placement",
    "parse_segments",
    "seg",
    "segments",
]

#: Input and output are one buffer, aliased as the collective defines (:mod:`etsim.algo.verify`).
IN_PLACE = "in_place"
#: Input and output are separate buffers.
OUT_OF_PLACE = "out_of_place"
PLACEMENTS = (IN_PLACE, OUT_OF_PLACE)

#: Operations by node kind: SEND ``send``; RECV ``store``/``reduce``; COMP ``copy``/``reduce``.
OPS = frozenset({"send", "store", "reduce", "copy"})


class Segment(NamedTuple):
    """Chunks ``off, off + stride, …`` (``cnt`` of them; None: the rest of the node's) of buffer ``buf``."""

    buf: str
    off: int
    cnt: int | None = None
    stride: int = 1
    rel: bool = False
    """``off`` is relative to the rank (see the module docstring)."""


#: What the builder accepts for an operand: text (``"o@r-1"``), one segment, or a list of them.
SegmentsLike: TypeAlias = "str | Segment | Sequence[Segment]"


class NodeData(NamedTuple):
    """A node's data effect (see the module docstring)."""

    op: str
    dst: tuple[Segment, ...] = ()
    src: tuple[Segment, ...] = ()


def seg(buf: str, off: int, cnt: int | None = None, *, stride: int = 1, rel: bool = False) -> Segment:
    """A :class:`Segment` (keyword-friendly constructor)."""
    return Segment(buf, off, cnt, stride, rel)


_SEGMENT = re.compile(r"^([A-Za-z_][\w.]*)@(r?)([+-]?\d+)(?:x(\d+)(?:/([+-]?\d+))?)?$")


def parse_segments(text: str) -> tuple[Segment, ...]:
    """Segments from their text form (``o@r-1x1,s2@r+1x5``; see the module docstring).

    Raises:
        ValueError: text that is not a segment list.
    """
    out = []
    for part in text.split(","):
        m = _SEGMENT.match(part.strip())
        if m is None:
            raise ValueError(f"{part.strip()!r} is not a chunk segment (BUF@OFF, BUF@OFFxCNT or BUF@OFFxCNT/STRIDE)")
        buf, rel, off, cnt, stride = m.groups()
        out.append(Segment(buf, int(off), int(cnt) if cnt is not None else None, int(stride or 1), bool(rel)))
    return tuple(out)


def format_segments(segs: Sequence[Segment]) -> str:
    """The text form of *segs* (inverse of :func:`parse_segments`)."""
    parts = []
    for s in segs:
        off = (f"r{s.off:+d}" if s.off else "r+0") if s.rel else str(s.off)
        text = f"{s.buf}@{off}"
        if s.cnt is not None:
            text += f"x{s.cnt}"
            if s.stride != 1:
                text += f"/{s.stride}"
        elif s.stride != 1:
            raise ValueError(f"segment {s}: a stride needs an explicit count")
        parts.append(text)
    return ",".join(parts)


def segments(value: SegmentsLike, chunks: float, what: str) -> tuple[Segment, ...]:
    """*value* as segments whose counts add up to *chunks* (the last may leave its count implicit).

    Raises:
        ValueError: counts that do not add up, a fractional chunk count, a bad stride or buffer.
    """
    if value.__class__ is Segment and value.cnt is not None and value.cnt > 0 and value.cnt == chunks:  # type: ignore[union-attr]
        # The common case (one segment naming all the node's chunks), checked as the general path would.
        buf = value.buf  # type: ignore[union-attr]
        if buf and "@" not in buf and "," not in buf and value.stride != 0:  # type: ignore[union-attr]
            return (value,)  # type: ignore[return-value]
    if isinstance(value, str):
        segs = parse_segments(value)
    elif isinstance(value, Segment):
        segs = (value,)
    else:
        segs = tuple(Segment(*s) for s in value)
    if not segs:
        raise ValueError(f"{what}: no chunk segment")
    if chunks != int(chunks) or chunks < 0:
        raise ValueError(f"{what}: a node of {chunks} chunks cannot name its chunks (not a whole number)")
    total = int(chunks)
    out = []
    used = 0
    for i, s in enumerate(segs):
        if not s.buf or "@" in s.buf or "," in s.buf:
            raise ValueError(f"{what}: {s.buf!r} is not a buffer name")
        if s.stride == 0:
            raise ValueError(f"{what}: segment {format_segments([s]) if s.cnt else s}: stride 0")
        cnt = s.cnt
        if cnt is None:
            if i != len(segs) - 1:
                raise ValueError(f"{what}: only the last segment may leave its chunk count implicit")
            cnt = total - used
        if cnt < 0:
            raise ValueError(f"{what}: negative chunk count {cnt}")
        used += cnt
        out.append(s._replace(cnt=cnt))
    if used != total:
        raise ValueError(f"{what}: the segments name {used} chunks but the node moves {total}")
    return tuple(s for s in out if s.cnt)


def absolute_segments(segs: Sequence[Segment], position: int, group_size: int, total: int | None) -> list[Segment]:
    """*segs* with relative offsets resolved for the rank at *position* (wrapping runs split in two or more).

    Raises:
        ValueError: relative offsets without symbolic sizes, or with ``total`` not a multiple of the group size.
    """
    if not any(s.rel for s in segs):
        return list(segs)
    if not total or total % group_size:
        raise ValueError(
            f"relative chunk offsets need a total chunk count that is a multiple of the group size "
            f"({total} chunks, {group_size} ranks)"
        )
    shift = position * (total // group_size)
    out: list[Segment] = []
    for s in segs:
        if not s.rel:
            out.append(s)
            continue
        cnt = s.cnt or 0
        idx = [(s.off + j * s.stride + shift) % total for j in range(cnt)]
        start = 0
        for j in range(1, cnt + 1):
            if j == cnt or idx[j] != idx[j - 1] + s.stride:
                out.append(Segment(s.buf, idx[start], j - start, s.stride if j - start > 1 else 1))
                start = j
    return out


def parse_placement(text: str) -> tuple[str, ...]:
    """Placements from metadata text (``in_place``, ``out_of_place`` or both, comma-separated).

    Raises:
        ValueError: an unknown word.
    """
    words = tuple(w.strip() for w in text.split(",") if w.strip())
    for w in words:
        if w not in PLACEMENTS:
            raise ValueError(f"data_placement {w!r}: expected {' or '.join(PLACEMENTS)}")
    return words
