"""The union of a family's graphs (``algo/union.py``): messages matched as the simulator matches them, in levels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from etsim.algo.graph import RECV, SEND, AlgoGraph, AlgorithmBuilder
from etsim.algo.union import UnionGraph, union_graph, union_of
from etsim.chakra.graph import CollectiveType
from etsim.network import mesh, torus
from etsim.producers.tacos import algo_graphs, synthesize
from etsim.system.algorithms import RingAlgorithm


def tacos_family(shape: list[int], collective: str = "all_gather", k: int = 1) -> list[AlgoGraph]:
    topology = (mesh if len(shape) == 2 and shape[0] == 3 else torus)(shape, 50.0, 500.0)
    return algo_graphs(synthesize(topology, collective, size=1 << 20, chunks_per_npu=k).schedule)


def _edges(u: UnionGraph) -> tuple[np.ndarray, np.ndarray]:
    heads = [u.deps_idx]
    tails = [np.repeat(np.arange(u.num_nodes), np.diff(u.deps_ptr))]
    recv = np.flatnonzero(u.kinds == RECV)
    heads.append(u.match[recv])
    tails.append(recv)
    return np.concatenate(heads), np.concatenate(tails)


@pytest.mark.parametrize(("shape", "collective", "k"), [([3, 3], "all_gather", 1), ([2, 3], "all_reduce", 2)])
def test_levels_order_every_edge_and_messages_pair_as_in_the_mailbox(shape: list[int], collective: str, k: int) -> None:
    graphs = tacos_family(shape, collective, k)
    u = union_graph(graphs)
    assert isinstance(u, UnionGraph)
    assert u.num_nodes == sum(g.num_nodes for g in graphs)
    # Every node once, in levels; every dependency and message edge goes to a later level.
    assert sorted(u.order.tolist()) == list(range(u.num_nodes))
    level = np.empty(u.num_nodes, dtype=np.int64)
    level[u.order] = np.repeat(np.arange(u.levels), np.diff(u.level_ptr))
    heads, tails = _edges(u)
    assert (level[heads] < level[tails]).all()
    # Within a level, node order (the walker's order among nodes of one instant).
    for lo, hi in zip(u.level_ptr[:-1], u.level_ptr[1:], strict=True):
        assert (np.diff(u.order[lo:hi]) > 0).all()
    # The k-th send of each (src, dst, tag) meets its k-th receive, both counted in node order.
    channels: dict[tuple[int, int, int, int], list[int]] = {}
    for r, g in enumerate(graphs):
        for j, kind in enumerate(g.kinds):
            if kind in (SEND, RECV):
                src, dst = (r, g.peers[j]) if kind == SEND else (g.peers[j], r)
                channels.setdefault((kind, src, dst, g.tags[j]), []).append(int(u.offsets[r]) + j)
    for (kind, src, dst, tag), nodes in channels.items():
        if kind == RECV:
            sends = channels[(SEND, src, dst, tag)]
            assert u.match[nodes].tolist() == sends
            assert u.match[sends].tolist() == nodes
            assert u.chan_prev[nodes].tolist() == [-1, *nodes[:-1]]


def test_native_graphs_with_relative_peers_join_too() -> None:
    """A native whose ranks share a graph with relative peers: peers are made absolute per rank."""
    algo = RingAlgorithm()
    graphs = [algo.graph(CollectiveType.ALL_REDUCE, 4, p) for p in range(4)]
    u = union_graph(graphs)
    assert isinstance(u, UnionGraph)
    sends = np.flatnonzero(u.kinds == SEND)
    assert ((u.peer[sends] - u.rank[sends]) % 4 == 1).all()  # every send of the ring goes to the next rank
    assert (u.rank[u.match[sends]] == u.peer[sends]).all()


def _pair(tags: tuple[int, int], sizes: tuple[int, int] = (1, 1)) -> list[AlgoGraph]:
    a, b = AlgorithmBuilder(), AlgorithmBuilder()
    a.send(1, sizes[0], tags[0])
    b.recv(0, sizes[1], tags[1])
    return [a.build(), b.build()]


def test_what_has_no_union_says_why() -> None:
    assert union_graph(_pair((0, 1))) == "its sends and receives do not pair up"
    assert union_graph(_pair((0, 0), (1, 2))) == "a receive and its send differ in size"
    # Each rank receives before it sends to the other: a cycle through the messages.
    a, b = AlgorithmBuilder(), AlgorithmBuilder()
    a.send(1, 1, 0, deps=[a.recv(1, 1, 0)])
    b.send(0, 1, 0, deps=[b.recv(0, 1, 0)])
    assert union_graph([a.build(), b.build()]) == "its message edges form a cycle across ranks"
    graphs = _pair((0, 0))
    graphs[0] = dataclasses.replace(graphs[0], peers=[5])
    assert union_graph(graphs) == "a peer lies outside the group"
    graphs = _pair((0, 0))
    graphs[1] = dataclasses.replace(graphs[1], gates={0: (1, 0)})
    assert union_graph(graphs) == "a graph has gated nodes"


def test_union_of_is_made_once_for_the_same_graphs() -> None:
    graphs = tacos_family([3, 3])
    first = union_of(graphs)
    assert union_of(list(graphs)) is first
    assert union_of(tacos_family([3, 3])) is not first  # equal graphs, other objects: made again
