"""Lower an MSCCL-IR program to one algorithm graph per GPU, and check that connections pair up."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from etsim.algo.dataflow import IN_PLACE, OUT_OF_PLACE, NodeData, Segment
from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph
from etsim.algo.verify import Verdict, verify_graphs
from etsim.chakra.dag import topological_order, transpose
from etsim.chakra.graph import CollectiveType
from etsim.producers.msccl.ir import STEP_TYPES, MscclError, MscclGpu, MscclProgram, MscclStep, MscclTb, step_uses
from etsim.producers.msccl.parse import parse_msccl, replicate_instances

__all__ = ["MscclConversion", "convert_msccl", "convert_program", "step_counts"]


@dataclass(slots=True)
class MscclConversion:
    """The per-GPU algorithm graphs of a program, with provenance for every node.

    Attributes:
        program: the (instance-replicated) program converted.
        graphs: one :class:`~etsim.algo.graph.AlgoGraph` per GPU (peers are GPU ids).
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

    def verify(self, collective: CollectiveType | None = None) -> Verdict:
        """Whether the program computes *collective* (default: its ``<algo coll>``); see :mod:`etsim.algo.verify`."""
        coll = collective if collective is not None else self.collective
        if coll is None:
            return Verdict(None, f"coll={self.program.coll!r} names no collective to check the program against")
        return verify_graphs(self.graphs, coll)


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


def placements(program: MscclProgram) -> tuple[str, ...]:
    """The buffer placements a program declares valid: ``inplace``, ``outofplace`` (neither: out of place)."""
    places = []
    if program.inplace:
        places.append(IN_PLACE)
    if program.outofplace or not places:
        places.append(OUT_OF_PLACE)
    return tuple(places)


def _step_data(tb: MscclTb, st: MscclStep, part: str) -> NodeData | None:
    """What one node of step *st* does to buffers (the step table of :mod:`etsim.producers.msccl`).

    The runtime reads ``src`` as a local buffer for ``rrs``/``rrc``/``rrcs`` and the fused sends
    forward what the step wrote (``rcs``, ``rrcs``) or, for ``rrs``, its result, which lives in no
    buffer: a temporary ``t<tb>.<step>``. Reductions are carried by the receive; the COMP node
    of a fused step is its cost only.
    """
    src = (Segment(st.srcbuf, st.srcoff, st.cnt, st.stride),)
    dst = (Segment(st.dstbuf, st.dstoff, st.cnt, st.stride),)
    temp = (Segment(f"t{tb.id}.{st.s}", 0, st.cnt),)
    kind = st.type
    if part == "send":
        return NodeData("send", (), {"s": src, "rrs": temp}.get(kind, dst))
    if part == "recv":
        if kind in ("r", "rcs"):
            return NodeData("store", dst)
        return NodeData("reduce", temp if kind == "rrs" else dst, src)
    if kind == "cpy":
        return NodeData("copy", dst, src)
    if kind == "re":
        return NodeData("reduce", dst, src)
    return None


@dataclass(slots=True)
class _StepNodes:
    """One GPU's nodes in document order, as columns, before the steps' waits are added and the nodes sorted.

    Attributes:
        kinds, peers, tags, chunks, names, data: per node, as the algorithm graph holds them.
        origin: per node, as :attr:`MscclConversion.origins` holds it.
        deps: per node, the nodes it waits on (so far, the previous part of its own step).
        first: per tb, per step: the step's first node (-1 for a nop).
        last: per tb, per step: the step's last node (-1 for a nop).
    """

    kinds: list[int]
    peers: list[int]
    tags: list[int]
    chunks: list[float]
    names: list[str]
    data: list[NodeData | None]
    origin: list[tuple[int, int, str, str, int]]
    deps: list[list[int]]
    first: list[list[int]]
    last: list[list[int]]


def _convert_gpu(program: MscclProgram, gpu: MscclGpu) -> tuple[AlgoGraph, list[tuple[int, int, str, str, int]]]:
    """One GPU lowered to its algorithm graph (nodes in dependency order), with every node's origin."""
    nodes = _step_nodes(gpu)
    _add_step_waits(program.path, gpu, nodes)
    order = _dependency_order(program.path, gpu, nodes)
    return _ordered_graph(program, nodes, order)


def _step_nodes(gpu: MscclGpu) -> _StepNodes:
    """A node per part of every step of *gpu*, each part waiting on the one before it."""
    kinds: list[int] = []
    peers: list[int] = []
    tags: list[int] = []
    chunks: list[float] = []
    names: list[str] = []
    data: list[NodeData | None] = []
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
                    buf, off = (st.dstbuf, st.dstoff) if step_uses(st.type, "dst") else (st.srcbuf, st.srcoff)
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
                data.append(_step_data(tb, st, part))
                origin.append((tb.id, st.s, part, buf, off))
                deps.append([prev] if prev >= 0 else [])
                if head < 0:
                    head = node
                prev = node
            tb_first.append(head)
            tb_last.append(prev)
        first.append(tb_first)
        last.append(tb_last)
    return _StepNodes(kinds, peers, tags, chunks, names, data, origin, deps, first, last)


def _add_step_waits(path: str, gpu: MscclGpu, nodes: _StepNodes) -> None:
    """Make each step's first node wait on its tb's previous step and on its ``depid``/``deps`` step.

    A nop has no node, so waiting on one means waiting on what the nop itself waits on.
    """
    first, last, deps = nodes.first, nodes.last, nodes.deps
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


def _dependency_order(path: str, gpu: MscclGpu, nodes: _StepNodes) -> list[int]:
    """The nodes in topological order, lowest position first so document order is kept where possible.

    Raises:
        MscclError: the dependencies form a cycle (named at the first node left waiting).
    """
    deps, names, origin = nodes.deps, nodes.names, nodes.origin
    n = len(nodes.kinds)
    dep_ptr = [0]
    dep_idx: list[int] = []
    for ds in deps:
        dep_idx.extend(ds)
        dep_ptr.append(len(dep_idx))
    succ_ptr, succ = transpose(n, [(dep_ptr, dep_idx)])
    indeg = [len(d) for d in deps]
    order = topological_order(succ_ptr, succ, indeg)
    if len(order) != n:
        placed = set(order)
        indeg = [sum(1 for d in deps[i] if d not in placed) for i in range(n)]
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
    return order


def _ordered_graph(
    program: MscclProgram, nodes: _StepNodes, order: list[int]
) -> tuple[AlgoGraph, list[tuple[int, int, str, str, int]]]:
    """The algorithm graph of *nodes* taken in *order*, with their origins in that order."""
    kinds, peers, tags, chunks = nodes.kinds, nodes.peers, nodes.tags, nodes.chunks
    names, data, origin, deps = nodes.names, nodes.data, nodes.origin, nodes.deps
    new_pos = [0] * len(kinds)
    for pos, old in enumerate(order):
        new_pos[old] = pos
    placeholder = program.attributes.get("etsim_offsets") == "placeholder"  # see producers.msccl.export
    g = AlgoGraph(total_chunks=program.nchunksperloop, placement=() if placeholder else placements(program))
    new_origin = []
    for old in order:
        g.kinds.append(kinds[old])
        g.peers.append(peers[old])
        g.tags.append(tags[old])
        g.chunks.append(chunks[old])
        g.durations_ns.append(None)
        g.names.append(names[old])
        g.data.append(None if placeholder else data[old])
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
    try:
        replicated = replicate_instances(program, instances)
    except ValueError as exc:
        raise MscclError(program.path, str(exc)) from None
    return convert_program(replicated)


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
