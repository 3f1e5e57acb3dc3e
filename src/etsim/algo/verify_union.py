"""The verifier's shortcut for families whose ranks run different graphs: copies checked over the union, in bulk.

:func:`union_verdict` decides, without the rank-by-rank execution of :mod:`etsim.algo.execution`, that an
algorithm whose nodes only copy chunks (sends, stores and local copies; no reductions) computes its collective.
It runs over the :class:`~etsim.algo.union.UnionGraph` of the ranks' graphs, a level at a time in numpy, and
says *correct* only where every interleaving gives the same outcome, so the full execution's verdict would be
the same:

- every channel's sends and receives are ordered by their own dependencies (each one depends on the one before
  it in its channel), so the k-th send meets the k-th receive whatever the interleaving;
- every chunk slot of every rank is written by one node at most, and every node that reads a slot written by a
  node depends on that node directly (no read races a write, no two writes race), and no node writes a slot it
  reads (so a message carries what its slots hold once written, whenever it is received);
- every chunk addressed lies inside its buffer, and every message carries as many chunks as its receive stores.

Then each slot's final value is the one its writer copies, the copies are evaluated a level at a time, and
every output slot is compared with the collective's definition (:mod:`etsim.algo.semantics`). Anything else —
a reduction, a race, an out-of-bounds chunk, a wrong output — returns False, and the caller runs the full
execution, which finds and words the problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from etsim.algo.dataflow import IN_PLACE, NodeData
from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph
from etsim.algo.semantics import CollectiveLayout

if TYPE_CHECKING:
    from etsim.algo.union import UnionGraph

__all__ = ["union_verdict"]

#: Node kind -> the operations it may carry here (None: a cost-only COMP).
_OPS = {SEND: ("send",), RECV: ("store",), COMP: ("copy", None)}


def union_verdict(
    graphs: Sequence[AlgoGraph], union: UnionGraph, layout: CollectiveLayout, placement: str, total: int
) -> bool:
    """Whether the copies over *union* show every output right in every interleaving (module docstring)."""
    import numpy as np

    n = union.n
    if any(g.setup for g in graphs) or bool(((union.chan_prev >= 0) & ~union.chain_after).any()):
        return False
    k = total // n if total % n == 0 else 0
    ops = _operands(graphs, union, n, k, total, np)
    if ops is None:
        return False
    src_ptr, src_buf, src_idx, dst_ptr, dst_buf, dst_idx, scratch = ops
    store = _Store.lay_out(layout, placement, n, k, total, scratch, np)
    reads, writes = store.slots(union, src_ptr, src_buf, src_idx, np), store.slots(union, dst_ptr, dst_buf, dst_idx, np)
    if reads is None or writes is None:
        return False
    if not _writes_ordered(union, reads, writes, src_ptr, dst_ptr, store.end, np):
        return False
    copies = _copies(union, reads, src_ptr, dst_ptr, np)
    if copies is None:
        return False
    value = _final_values(union, store, writes, *copies, np)
    # The outputs against the collective's definition.
    ranks = np.arange(n, dtype=np.int64)
    out = np.arange(store.out_size, dtype=np.int64)
    checked = ranks[:1] if layout.root_only else ranks
    want_chunk, origin = layout.expect(checked[:, None], out[None, :], k)  # type: ignore[arg-type]
    if origin is None:
        return False  # a sum over ranks: made only by reductions
    want = np.broadcast_to(want_chunk * n + origin, (len(checked), store.out_size))
    got = value[store.out_region + checked[:, None] * (store.io + store.out_base) + out[None, :]]
    return bool((got == want).all())


@dataclass(frozen=True, slots=True)
class _Store:
    """Every rank's chunk slots numbered in one array: per rank the input/output store(s), then each scratch buffer.

    Buffers are known by code: 0 the input, 1 the output, then the scratch buffers.

    Attributes:
        in_size, out_size: chunks of a rank's input and output.
        io: slots per rank of an input or output region (in place, one region serves both).
        in_base, out_base: how far the input (output) lies inside the other buffer per rank, in place (else 0).
        out_region: the first slot of the output region.
        end: slots in all.
        code_region, code_stride, code_limit, code_base: per buffer code, the first slot of its region, its slots
            per rank, its size (-1: scratch, unbounded) and its base per rank.
    """

    in_size: int
    out_size: int
    io: int
    in_base: int
    out_base: int
    out_region: int
    end: int
    code_region: Any
    code_stride: Any
    code_limit: Any
    code_base: Any

    @classmethod
    def lay_out(
        cls, layout: CollectiveLayout, placement: str, n: int, k: int, total: int, scratch: list[int], np: Any
    ) -> _Store:
        """The slots of *n* ranks running *layout* in *placement*, with *scratch* chunks per scratch buffer."""
        # Slots: per rank the input/output store(s), then every scratch buffer at its largest index.
        in_size = k if layout.piece_input else total
        out_size = k if layout.piece_output else total
        in_place = placement == IN_PLACE
        in_base = k if in_place and layout.alias == "input_in_output" else 0  # times the rank
        out_base = k if in_place and layout.alias == "output_in_input" else 0
        io = max(in_size + in_base * (n - 1), out_size + out_base * (n - 1))
        regions = {"i": 0, "o": 0 if in_place else n * io}
        limits = {"i": in_size, "o": out_size}
        bases = {"i": in_base, "o": out_base}
        end = n * io * (1 if in_place else 2)
        region, stride = [regions["i"], regions["o"]], [io, io]
        for size in scratch:  # (by buffer code: 0 is the input, 1 the output, then the scratch buffers)
            region.append(end)
            stride.append(size)
            end += n * size
        code_region = np.array(region, dtype=np.int64)
        code_stride = np.array(stride, dtype=np.int64)
        code_limit = np.array([limits["i"], limits["o"]] + [-1] * len(scratch), dtype=np.int64)
        code_base = np.array([bases["i"], bases["o"]] + [0] * len(scratch), dtype=np.int64)
        return cls(
            in_size, out_size, io, in_base, out_base, regions["o"], end, code_region, code_stride, code_limit, code_base
        )

    def slots(self, union: UnionGraph, ptr: Any, buf: Any, idx: Any, np: Any) -> Any:
        """The slot of every chunk of one side's operands (``ptr`` per node); None if one lies outside its buffer."""
        owner = np.repeat(union.rank, np.diff(ptr))
        limit = self.code_limit[buf]
        if bool(((idx < 0) | ((limit >= 0) & (idx >= limit))).any()):
            return None  # outside its buffer: the full execution says where
        return self.code_region[buf] + owner * self.code_stride[buf] + owner * self.code_base[buf] + idx


def _writes_ordered(union: UnionGraph, reads: Any, writes: Any, src_ptr: Any, dst_ptr: Any, end: int, np: Any) -> bool:
    """Whether no two writes or a read and a write of one slot can race.

    That is: each slot has one writer at most, no node writes what it reads, and every reader of a written slot
    depends on its writer directly.
    """
    writer_of = np.full(end, -1, dtype=np.int64)
    writers = np.repeat(np.arange(union.num_nodes, dtype=np.int64), np.diff(dst_ptr))
    ordered = np.sort(writes)
    if bool((ordered[1:] == ordered[:-1]).any()):
        return False  # a slot written twice
    writer_of[writes] = writers
    readers = np.repeat(np.arange(union.num_nodes, dtype=np.int64), np.diff(src_ptr))
    w = writer_of[reads]
    if bool((w == readers).any()):
        return False  # a node that writes what it reads (a send's copy over its own chunks): the execution's
    check = w >= 0
    return not check.any() or _direct_deps(union, readers[check], w[check], np)


def _copies(union: UnionGraph, reads: Any, src_ptr: Any, dst_ptr: Any, np: Any) -> tuple[Any, Any, Any] | None:
    """The nodes that write, how many chunks each, and the slot every written chunk is copied from.

    None when a receive's message differs in size from what the receive stores, or a writer's payload from what it
    writes.
    """
    # Each writer's payload: a receive stores its send's chunks; a send or a copy writes its own.
    kinds = union.kinds
    source = np.where(kinds == RECV, union.match, np.arange(union.num_nodes))
    wrote = np.flatnonzero(np.diff(dst_ptr) > 0)
    counts = np.diff(dst_ptr)[wrote]
    payload_from = source[wrote]
    if not np.array_equal(src_ptr[payload_from + 1] - src_ptr[payload_from], counts):
        return None
    recv = np.flatnonzero(kinds == RECV)
    sent = np.diff(src_ptr)[union.match[recv]]
    if not np.array_equal(sent, union.chunks[recv]) or not np.array_equal(sent, np.diff(dst_ptr)[recv]):
        return None
    payload = reads[np.repeat(src_ptr[payload_from], counts) + _ramp(counts, np)]
    return wrote, counts, payload


def _final_values(union: UnionGraph, store: _Store, writes: Any, wrote: Any, counts: Any, payload: Any, np: Any) -> Any:
    """Every slot's final value, the copies made a level at a time.

    Chunk c of rank r's input is the value c·n + r; -1 is a slot never written.
    """
    n = union.n
    value = np.full(store.end, -1, dtype=np.int64)
    ranks = np.arange(n, dtype=np.int64)
    chunk = np.arange(store.in_size, dtype=np.int64)
    value[(ranks[:, None] * (store.io + store.in_base) + chunk[None, :]).ravel()] = (
        chunk[None, :] * n + ranks[:, None]
    ).ravel()
    level_of = np.empty(union.num_nodes, dtype=np.int64)
    level_of[union.order] = np.repeat(np.arange(union.levels), np.diff(union.level_ptr))
    write_level = np.repeat(level_of[wrote], counts)
    by_level = np.argsort(write_level, kind="stable")
    targets, sources = writes[by_level], payload[by_level]
    bounds = np.searchsorted(write_level[by_level], np.arange(union.levels + 1))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if hi > lo:
            value[targets[lo:hi]] = value[sources[lo:hi]]
    return value


def _ramp(counts: Any, np: Any) -> Any:
    """``0 .. c-1`` for each count ``c``, concatenated."""
    starts = np.cumsum(counts) - counts
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)


def _direct_deps(union: UnionGraph, nodes: Any, needed: Any, np: Any) -> bool:
    """Whether each ``needed[i]`` is a dependency of ``nodes[i]``."""
    lengths = union.deps_ptr[nodes + 1] - union.deps_ptr[nodes]
    if not bool((lengths > 0).all()):
        return False
    owner = np.repeat(np.arange(len(nodes)), lengths)
    at = np.repeat(union.deps_ptr[nodes], lengths) + _ramp(lengths, np)
    found = np.zeros(len(nodes), dtype=bool)
    found[owner[union.deps_idx[at] == needed[owner]]] = True
    return bool(found.all())


def _operands(graphs: Sequence[AlgoGraph], union: UnionGraph, n: int, k: int, total: int, np: Any) -> Any:
    """Every node's read and written chunks as ``(ptr, buffer code, chunk index)`` per side, and scratch sizes.

    None when a node does something this shortcut does not check (a reduction, a segment of unknown length, an
    operation its kind does not carry): the full execution decides then.
    """
    import itertools

    # Annotations are shared objects (a reader decodes each distinct text once): number them by identity.
    flat = list(
        itertools.chain.from_iterable(g.data if len(g.data) == g.num_nodes else [None] * g.num_nodes for g in graphs)
    )
    ids = np.fromiter(map(id, flat), dtype=np.int64, count=len(flat))
    ordered = np.sort(ids)  # (a sort and a search: np.unique's inverse costs twice as much here)
    keep = np.ones(len(ordered), dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    unique = ordered[keep]
    codes = np.searchsorted(unique, ids)
    first = np.empty(len(unique), dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # (the last write wins: each object's first node)
    distinct: list[NodeData | None] = [flat[i] for i in first.tolist()]
    del flat
    # Per distinct annotation: its op and segments, in flat columns.
    buf_names: dict[str, int] = {"i": 0, "o": 1}
    op_of = []
    sides: list[list[list[tuple[int, int, int, int, bool]]]] = [[], []]
    for d in distinct:
        op_of.append(None if d is None else d.op)
        for side, segs in enumerate((() if d is None else d.src, () if d is None else d.dst)):
            rows = []
            for s in segs:
                if s.cnt is None or s.stride < 1:
                    return None  # (the execution takes the node's count; a stride below 1 is its error)
                rows.append((buf_names.setdefault(s.buf, len(buf_names)), s.off, s.cnt, s.stride, s.rel))
            sides[side].append(rows)
    kinds = union.kinds
    if "reduce" in op_of:
        return None
    allowed = {kind: {i for i, op in enumerate(op_of) if op in ops} for kind, ops in _OPS.items()}
    for kind, ok in allowed.items():
        mask = kinds == kind
        if mask.any() and not np.isin(codes[mask], np.fromiter(ok, dtype=np.int64, count=len(ok))).all():
            return None
    out: list[Any] = []
    scratch_max: dict[int, int] = {}
    shift = k
    for per_annotation in sides:
        seg_count = np.array([len(r) for r in per_annotation], dtype=np.int64)
        table = np.array([s for r in per_annotation for s in r], dtype=np.int64).reshape(-1, 5)
        seg_ptr = np.zeros(len(per_annotation) + 1, dtype=np.int64)
        np.cumsum(seg_count, out=seg_ptr[1:])
        chunks_of = np.array([sum(s[2] for s in r) for r in per_annotation], dtype=np.int64)
        ptr = np.zeros(union.num_nodes + 1, dtype=np.int64)
        np.cumsum(chunks_of[codes], out=ptr[1:])
        per_node = seg_count[codes]
        if bool((seg_count <= 1).all()):  # (one segment per operand at most: no expansion by segment)
            has = per_node == 1
            segs = seg_ptr[codes[has]]
            seg_rank = union.rank[has]
        else:
            segs = np.repeat(seg_ptr[codes], per_node) + _ramp(per_node, np)
            seg_rank = np.repeat(union.rank, per_node)
        buf, off, cnt, stride, rel = (table[:, c][segs] for c in range(5))
        start = np.where(rel == 1, off + seg_rank * shift, off)
        if bool((cnt == 1).all()):  # one chunk per segment: no expansion by chunk
            base, moved, bufs = start, rel == 1, buf
        else:
            base = np.repeat(start, cnt) + _ramp(cnt, np) * np.repeat(stride, cnt)
            moved, bufs = np.repeat(rel == 1, cnt), np.repeat(buf, cnt)
        idx = np.where(moved, base % max(total, 1), base)
        for b in range(2, len(buf_names)):
            used = bufs == b
            if used.any():
                scratch_max[b] = max(scratch_max.get(b, 0), int(idx[used].max()) + 1)
        out.extend((ptr, bufs, idx))
    # Scratch buffers by code (codes 2, 3, …): the chunks each needs per rank.
    return (*out, [scratch_max.get(b, 0) for b in range(2, len(buf_names))])
