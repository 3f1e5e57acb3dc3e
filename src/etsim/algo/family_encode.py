"""A graph every rank shares, encoded as its family's files rank by rank: what does not move with the rank made once.

:class:`RankEncoder` gives, byte for byte, what :func:`~etsim.algo.family_io.encode_algo_graph` writes for each
position (``tests/algo/test_encode.py``). Exports use it to write a shared graph's family, and the family reader
uses it to recognise ranks that are the shared graph without decoding them
(:mod:`etsim.system.algorithms.family`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from etsim.algo.family_io import _FRAMED_ATTRIBUTES, _metadata_frame, _node_specs, _trace_spec, encode_algo_graph
from etsim.algo.graph import COMP, SEND, AlgoGraph
from etsim.chakra.io import encode_node, encode_varint

__all__ = ["RankEncoder"]


class RankEncoder:
    """:func:`encode_algo_graph` of one graph at every position of a group, what does not move with the rank made once.

    For a graph with relative peers (one graph every rank runs), a node's bytes are its fields and most of its
    attributes at every position; only its peer and its relative data annotations move with the rank. Those are
    filled in by :meth:`encode`, the rest is encoded once. Other graphs are encoded whole each time.
    ``encode(position)`` is ``encode_algo_graph(graph, position, group_size, metadata=…, size=…)``, byte for byte
    (``tests/algo/test_encode.py``).
    """

    def __init__(
        self, graph: AlgoGraph, group_size: int, *, metadata: Mapping[str, str] | None = None, size: int | None = None
    ) -> None:
        self.graph, self.group_size, self.metadata, self.size = graph, group_size, metadata, size
        #: Each node's frame, or its pieces: bytes, ("peer", send, offset), ("run", name, segments, buffer, offset,
        #: count, stride) for one relative run, or ("segs", name, segments).
        self._nodes: list[bytes | list[Any]] | None = self._template() if graph.relative_peers else None
        #: Receive and send peer attributes by peer.
        self._peers: tuple[list[Any], list[Any]] | None = None
        #: Every rank's file as numbers into one pool of byte strings (False: not every moving piece is a peer or run).
        self._plan: _Plan | Literal[False] | None = None

    def _template(self) -> list[bytes | list[Any]]:
        graph, n = self.graph, self.group_size
        specs = _node_specs(graph, 0, n, _FRAMED_ATTRIBUTES, self.size)  # (raises what encode_algo_graph raises)
        nodes: list[bytes | list[Any]] = []
        for pos, (node_type, name, deps, micros, attrs) in enumerate(specs):
            moving: dict[int, Any] = {}
            kind = graph.kinds[pos]
            if kind != COMP:  # the peer is the second attribute (_node_specs' order)
                moving[1] = ("peer", kind == SEND, graph.peers[pos])
            note = graph.data[pos] if pos < len(graph.data) else None
            if note is not None:
                present = [(key, segs) for key, segs in (("data_src", note.src), ("data_dst", note.dst)) if segs]
                for i, (key, segs) in enumerate(present, len(attrs) - len(present)):  # the last attributes
                    cnt = segs[0].cnt if len(segs) == 1 and segs[0].rel else None
                    if cnt:  # one run: looked up by its chunks
                        s = segs[0]
                        moving[i] = ("run", key, segs, s.buf, s.off, cnt, s.stride if cnt > 1 else 1)
                    elif any(seg.rel for seg in segs):
                        moving[i] = ("segs", key, segs)
            pieces: list[Any] = [encode_node(pos, name, node_type, deps, micros, ())]
            for i, attr in enumerate(attrs):
                if i in moving:
                    pieces.append(moving[i])
                elif pieces[-1].__class__ is bytes:
                    pieces[-1] += attr
                else:
                    pieces.append(attr)
            if len(pieces) == 1:
                nodes.append(encode_varint(len(pieces[0])) + pieces[0])
            else:
                nodes.append(pieces)
        return nodes

    def encode(self, position: int) -> bytes:
        """The file of the rank at *position*."""
        if self._nodes is None:
            return encode_algo_graph(self.graph, position, self.group_size, metadata=self.metadata, size=self.size)
        return self._encode(position)

    def encode_runs(self, position: int) -> bytes | None:
        """:meth:`encode`, or None when a relative data annotation does not stay one run within the buffer.

        (Written at *position*, such an annotation would wrap into several runs, or name chunks outside the buffer.)
        """
        total, n = self.graph.total_chunks, self.group_size
        if self._nodes is None or not total or total % n:
            return None
        if self._plan is None:
            self._plan = _Plan.make(self) or False
        return None if self._plan is False else self._plan.encode(self, position)

    def _encode(self, position: int) -> bytes:
        assert self._nodes is not None
        graph, n = self.graph, self.group_size
        extra, _ = _trace_spec(graph, position, n, _FRAMED_ATTRIBUTES, self.size)
        parts = [_metadata_frame(extra, self.metadata)]
        attributes, total = _FRAMED_ATTRIBUTES, graph.total_chunks
        if self._peers is None:  # each peer's attribute, made once
            self._peers = (
                [attributes["comm_src", q, None] for q in range(n)],
                [attributes["comm_dst", q, None] for q in range(n)],
            )
        peers, runs = self._peers, attributes.runs
        shift = position * (total // n) if total and not total % n else 0
        for node in self._nodes:
            if isinstance(node, bytes):
                parts.append(node)
                continue
            body_parts = []
            for piece in node:
                if piece.__class__ is bytes:
                    body_parts.append(piece)
                elif piece[0] == "peer":
                    body_parts.append(peers[piece[1]][(position + piece[2]) % n])
                else:
                    # A run already met at these absolute chunks (runs holds only runs that do not wrap).
                    attr = runs.get((piece[1], piece[3], (piece[4] + shift) % total, piece[5], piece[6])) if (
                        piece[0] == "run" and total
                    ) else None  # fmt: skip
                    if attr is None:
                        attr = attributes.segments(piece[1], piece[2], position, n, total)
                    body_parts.append(attr)
            body = b"".join(body_parts)
            parts.append(encode_varint(len(body)))
            parts.append(body)
        return b"".join(parts)


class _Plan:
    """Every rank's file as a sequence of numbers into one pool of byte strings, computed with numpy.

    The pool holds each constant piece once, every peer's attribute, every absolute position of each relative
    run (as :meth:`RankEncoder._encode` looks them up) and the varints of every frame length there can be. A rank's
    file is the pool's pieces at ``ids``: the constant ones, the peers shifted by the rank, the runs at their
    offset plus the rank's, and each pieced node's frame length, the sum of its pieces' lengths.
    """

    def __init__(self) -> None:
        self.pool: list[bytes] = []
        self.index: dict[bytes, int] = {}
        self.ids: Any = None  # the pieces of rank 0, with placeholders where the rank decides
        self.slots: dict[str, Any] = {}
        self.pieces: Any = None  # the pool as a numpy array of objects (a file's pieces gathered in one step)

    def piece(self, data: bytes) -> int:
        """The pool number of *data* (added once)."""
        number = self.index.get(data)
        if number is None:
            number = self.index[data] = len(self.pool)
            self.pool.append(data)
        return number

    @classmethod
    def make(cls, encoder: RankEncoder) -> _Plan | None:
        """The plan of *encoder*'s pieces, or None if one moving piece is neither a peer nor one run."""
        import numpy as np

        from etsim.algo.dataflow import Segment, format_segments

        assert encoder._nodes is not None
        plan = cls()
        n, total = encoder.group_size, encoder.graph.total_chunks or 0
        attributes = _FRAMED_ATTRIBUTES
        peer_base = []
        for name in ("comm_src", "comm_dst"):
            peer_base.append(len(plan.pool))
            plan.pool.extend(attributes[name, q, None] for q in range(n))
        empty = plan.piece(b"")
        run_base: dict[tuple[str, str, int, int], int] = {}
        ids: list[int] = []
        peers: list[tuple[int, int, int]] = []  # (where, base, offset)
        runs: list[tuple[int, int, int]] = []  # (where, base, offset)
        frames: list[tuple[int, int, int]] = []  # (where the length goes, first piece, end)
        wraps: list[int] = []  # pool numbers of runs that would wrap at that offset
        for node in encoder._nodes:
            if isinstance(node, bytes):
                ids.append(plan.piece(node))
                continue
            where = len(ids)
            ids.append(empty)  # the frame length, filled in per rank
            for piece in node:
                if piece.__class__ is bytes:
                    ids.append(plan.piece(piece))
                elif piece[0] == "peer":
                    peers.append((len(ids), peer_base[piece[1]], piece[2]))
                    ids.append(empty)
                elif piece[0] == "run":
                    _, name, _, buf, off, cnt, stride = piece
                    key = (name, buf, cnt, stride)
                    base = run_base.get(key)
                    if base is None:  # the run's attribute at every absolute offset (a mark where it would wrap)
                        base = run_base[key] = len(plan.pool)
                        for at in range(total):
                            if 0 <= at + (cnt - 1) * stride < total:
                                text = format_segments([Segment(buf, at, cnt, stride, False)])
                                plan.pool.append(attributes[name, text, "string_val"])
                            else:
                                wraps.append(len(plan.pool))
                                plan.pool.append(b"")
                    runs.append((len(ids), base, off))
                    ids.append(empty)
                else:
                    return None
            frames.append((where, where + 1, len(ids)))
        longest = max((len(b) for b in plan.pool), default=0) * max(
            (end - start for _, start, end in frames), default=0
        )
        plan.slots["varint"] = len(plan.pool)
        plan.pool.extend(encode_varint(length) for length in range(longest + 1))
        plan.ids = np.array(ids, dtype=np.int64)
        plan.pieces = np.empty(len(plan.pool), dtype=object)
        plan.pieces[:] = plan.pool
        plan.slots["lengths"] = np.array([len(b) for b in plan.pool], dtype=np.int64)
        plan.slots["inside"] = inside = np.ones(len(plan.pool), dtype=bool)
        inside[wraps] = False
        for name, rows in (("peers", peers), ("runs", runs), ("frames", frames)):
            plan.slots[name] = (
                tuple(np.array(column, dtype=np.int64) for column in zip(*rows, strict=True)) if rows else None
            )
        return plan

    def encode(self, encoder: RankEncoder, position: int) -> bytes | None:
        """The file of the rank at *position*, or None if a relative run would leave the buffer or wrap there."""
        import numpy as np

        n, total = encoder.group_size, encoder.graph.total_chunks or 0
        ids = self.ids.copy()
        peers, runs, frames = self.slots["peers"], self.slots["runs"], self.slots["frames"]
        if peers is not None:
            where, base, offset = peers
            ids[where] = base + (position + offset) % n
        if runs is not None:
            where, base, offset = runs
            ids[where] = base + (offset + position * (total // n)) % total
            if not self.slots["inside"][ids[where]].all():
                return None
        if frames is not None:
            where, start, end = frames
            sums = np.concatenate(([0], np.cumsum(self.slots["lengths"][ids])))
            ids[where] = self.slots["varint"] + sums[end] - sums[start]
        extra, _ = _trace_spec(encoder.graph, position, n, _FRAMED_ATTRIBUTES, encoder.size)
        # (Gathered by numpy, joined in C: tens of thousands of pieces a file.)
        return _metadata_frame(extra, encoder.metadata) + b"".join(self.pieces[ids].tolist())
