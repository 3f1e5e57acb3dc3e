"""The family a schedule becomes: each rank's algorithm graph, and its file framed straight from the transfers.

:func:`position_graph` describes a rank as an :class:`~etsim.algo.graph.AlgoGraph` (what
:func:`~etsim.producers.tacos.synthesis.algo_graphs` returns: the verifier and the simulator read it), and
:func:`~etsim.algo.family_io.encode_algo_graph` writes such a graph. A 32×32 mesh all-gather is two million nodes,
and building each rank's graph only to encode it cost more than the synthesis (20 µs a node). :class:`FamilyEncoder`
writes the same bytes from the schedule (under 3 µs a node): what recurs (peers, tags, chunk slots, the size
attributes) is framed once per family, and a node is its id, its name and its dependencies around them.
``tests/producers/test_tacos.py`` checks it byte for byte against the graph path on meshes, rings, switches, tori
and mixed links, for every collective, with and without ``--size``.
"""

from __future__ import annotations

from collections.abc import Mapping

from etsim.algo.dataflow import IN_PLACE, format_segments, seg
from etsim.algo.family_io import encode_algo_graph, framed_attribute, header_frame
from etsim.algo.graph import AlgoGraph, AlgorithmBuilder
from etsim.chakra.graph import NodeType
from etsim.chakra.io import encode_varint
from etsim.producers.tacos.greedy import Schedule

__all__ = ["FamilyEncoder", "position_graph", "transfers_by_position"]


def transfers_by_position(sched: Schedule) -> list[list[int]]:
    """The transfers each position takes part in, in schedule order (its nodes are made in that order)."""
    lg = sched.links
    touching: list[list[int]] = [[] for _ in range(lg.n)]
    for x in range(sched.num_transfers):
        lid = sched.link[x]
        touching[lg.src[lid]].append(x)
        touching[lg.dst[lid]].append(x)
    return touching


def _buffer(sched: Schedule) -> str:
    """In place, a reduce-scatter's output lies in its input; the other collectives work in the output."""
    return "i" if sched.num_transfers and sched.reduce_count == sched.num_transfers else "o"


def position_graph(sched: Schedule, touching: list[list[int]], p: int) -> AlgoGraph:
    """The algorithm graph of position *p* (see :func:`~etsim.producers.tacos.synthesis.algo_graphs`)."""
    lg = sched.links
    n = lg.n
    k = sched.chunks_per_npu
    buf = _buffer(sched)
    src, dst = lg.src, lg.dst
    b = AlgorithmBuilder(total_chunks=n * k, placement=IN_PLACE)
    last_send: dict[int, int] = {}
    have: dict[int, list[int]] = {}
    for x in touching[p]:
        lid = sched.link[x]
        c = sched.chunk[x]
        s, d = src[lid], dst[lid]
        slot = seg(buf, (c % n) * k + c // n, 1)
        if s == p:
            deps = list(have.get(c, ()))
            prev = last_send.get(lid)
            if prev is not None:
                deps.append(prev)
            last_send[lid] = b.send(d, 1, lid, deps=deps, name=f"send_c{c}_to{d}", src=slot)
        if d == p:
            reduce = x < sched.reduce_count
            land = seg("t", x, 1) if reduce else slot  # a partial to reduce lands in scratch; the COMP adds it in
            node = b.recv(s, 1, lid, name=f"recv_c{c}_from{s}", dst=land)
            if reduce:
                node = b.reduce(1, deps=[node], name=f"reduce_c{c}", dst=slot, src=land)
            have.setdefault(c, []).append(node)
    return b.build()


_SEND = b"\x18" + encode_varint(int(NodeType.COMM_SEND_NODE))
_RECV = b"\x18" + encode_varint(int(NodeType.COMM_RECV_NODE))
_COMP = b"\x18" + encode_varint(int(NodeType.COMP_NODE))


class FamilyEncoder:
    """Each rank's file: ``encode(p)`` is ``encode_algo_graph(position_graph(…, p), p, n, …)``, byte for byte.

    Tags are written as :func:`~etsim.algo.family_io.written_tags` numbers them: per (kind, peer) the rank of
    (logical link, k) among the pair's transfers, which is k, the pair's transfers so far, where one logical link
    joins each ordered pair (every link graph of a topology). Where two do, ranks take the graph path.

    Args:
        sched: the schedule.
        touching: :func:`transfers_by_position` of it.
        metadata: string attributes of every file's global metadata.
        size: the collective's buffer in bytes (``comm_size`` beside the chunk counts), or None.
    """

    def __init__(
        self, sched: Schedule, touching: list[list[int]], *, metadata: Mapping[str, str], size: int | None
    ) -> None:
        self.sched, self.touching, self.metadata, self.size = sched, touching, metadata, size
        lg = sched.links
        n, k = lg.n, sched.chunks_per_npu
        total = n * k
        if size is not None and size % total:
            raise ValueError(f"a buffer of {size} bytes does not split into the algorithm's {total} chunks")
        #: The first frame, the same at every rank.
        self.header = header_frame(position_graph(sched, touching, 0), 0, n, metadata=metadata, size=size)
        self.parallel = len(set(zip(lg.src, lg.dst, strict=True))) < len(lg.src)
        tail = framed_attribute("msg_chunk_cnt", 1, "int32_val")
        tail += framed_attribute("total_chunk_cnt", total, "int32_val")
        if size is not None:
            tail += framed_attribute("comm_size", size // total)
        not_cpu = framed_attribute("is_cpu_op", False)
        self._store = tail + framed_attribute("data_op", "store", "string_val")
        self._reduce = not_cpu + tail + framed_attribute("data_op", "reduce", "string_val")
        #: Per peer: the attributes before the tag (is_cpu_op, then comm_dst; a receive's type field, is_cpu_op, then
        #: comm_src).
        self._to = [not_cpu + framed_attribute("comm_dst", q) for q in range(n)]
        self._from = [_RECV + not_cpu + framed_attribute("comm_src", q) for q in range(n)]
        #: Per buffer chunk (slot): what follows the tag on a send of it and on a receive storing it; its data_dst.
        send = tail + framed_attribute("data_op", "send", "string_val")
        slots = [format_segments((seg(_buffer(sched), i, 1),)) for i in range(total)]
        self._send_rest = [send + framed_attribute("data_src", text, "string_val") for text in slots]
        self._into = [framed_attribute("data_dst", text, "string_val") for text in slots]
        self._store_rest = [self._store + into for into in self._into]
        longest = max(map(len, touching), default=0)  # a rank's transfers, at most
        most = longest * 2 + 2  # nodes of a rank, at most
        #: Per node position: its id field (none for 0) and the name field's tag, its varint; per count: a comm_tag.
        self._varint = [encode_varint(i) for i in range(max(most, 256))]
        self._ids = [b"\x12"] + [b"\x08" + v + b"\x12" for v in self._varint[1:]]  # (each with the name's tag)
        self._tags = [framed_attribute("comm_tag", i) for i in range(longest + 1)]
        #: Node names in pieces: per chunk its send/receive prefix, per position its number.
        self._send_c = [b"send_c%d_to" % c for c in range(total)]
        self._recv_c = [b"recv_c%d_from" % c for c in range(total)]
        self._decimal = [b"%d" % q for q in range(n)]

    def encode(self, p: int) -> bytes:
        """The file of position *p*."""
        sched = self.sched
        if self.parallel:
            graph = position_graph(sched, self.touching, p)
            return encode_algo_graph(graph, p, sched.links.n, metadata=self.metadata, size=self.size)
        lg = sched.links
        n, k = lg.n, sched.chunks_per_npu
        src, dst = lg.src, lg.dst
        t_link, t_chunk, reduce_count = sched.link, sched.chunk, sched.reduce_count
        to, frm, tags, ids, vint = self._to, self._from, self._tags, self._ids, self._varint
        send_rest, store_rest = self._send_rest, self._store_rest
        send_c, recv_c, decimal = self._send_c, self._recv_c, self._decimal
        varint = encode_varint
        parts = [self.header]
        pos = 0
        sent = [0] * n  # transfers to / from each peer so far: their tag numbers
        got = [0] * n
        last_send = [-1] * len(src)  # per logical link, its last send
        have: list[list[int] | None] = [None] * (n * k)  # per chunk, the nodes that brought it here
        for x in self.touching[p]:
            lid = t_link[x]
            c = t_chunk[x]
            s, d = src[lid], dst[lid]
            slot = (c % n) * k + c // n
            if s == p:
                name = send_c[c] + decimal[d]
                deps = have[c]
                prev = last_send[lid]
                last_send[lid] = pos
                if prev >= 0:
                    deps = [*deps, prev] if deps else [prev]
                if deps:
                    packed = b"".join([vint[v] for v in deps])
                    packed = b"\x2a" + varint(len(packed)) + packed
                else:
                    packed = b""
                number = sent[d]
                sent[d] = number + 1
                body = b"".join((ids[pos], vint[len(name)], name, _SEND, packed, to[d], tags[number], send_rest[slot]))
                parts.append(varint(len(body)))
                parts.append(body)
                pos += 1
            if d == p:
                name = recv_c[c] + decimal[s]
                number = got[s]
                got[s] = number + 1
                head = b"".join((ids[pos], vint[len(name)], name, frm[s], tags[number]))
                if x < reduce_count:  # a partial lands in scratch; the COMP that follows adds it in
                    scratch = format_segments((seg("t", x, 1),))
                    body = head + self._store + framed_attribute("data_dst", scratch, "string_val")
                    parts.append(varint(len(body)))
                    parts.append(body)
                    name = f"reduce_c{c}".encode()
                    packed = vint[pos]  # its one dependency: the receive
                    pos += 1
                    body = (
                        ids[pos] + vint[len(name)] + name + _COMP + b"\x2a" + vint[len(packed)] + packed
                        + self._reduce + framed_attribute("data_src", scratch, "string_val") + self._into[slot]
                    )  # fmt: skip
                else:
                    body = head + store_rest[slot]
                parts.append(varint(len(body)))
                parts.append(body)
                brought = have[c]
                if brought is None:
                    have[c] = [pos]
                else:
                    brought.append(pos)
                pos += 1
        return b"".join(parts)
