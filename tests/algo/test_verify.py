"""The semantic verifier: hand-built algorithms, right and wrong, and the data annotations' round trip."""

from __future__ import annotations

import pytest

from etsim.algo.dataflow import (
    IN_PLACE,
    OUT_OF_PLACE,
    NodeData,
    Segment,
    absolute_segments,
    format_segments,
    parse_segments,
    seg,
)
from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.family_io import algo_graph_to_trace, algorithm_traces
from etsim.algo.graph import AlgoGraph, AlgorithmBuilder
from etsim.algo.semantics import LAYOUTS, minimum_bytes
from etsim.algo.verify import Verdict, verify_graphs
from etsim.chakra import CollectiveType as C

# -- fixtures built with the library's builder ------------------------------------------------


def ring_all_reduce(
    p: int,
    *,
    rs_steps: int | None = None,
    ag_first: int = 0,
    again: bool = False,
    placement: str = IN_PLACE,
) -> AlgoGraph:
    """A ring all-reduce with relative peers (one graph for every rank), optionally broken.

    Reduce-scatter step s sends block r-s-1 and adds the message into block r-s-2; all-gather step s
    sends block r-s+ag_first and stores the message into block r-s-1.
    """
    b = AlgorithmBuilder(total_chunks=p, relative_peers=True, placement=placement)
    last: list[int] = []
    for s in range(p - 1 if rs_steps is None else rs_steps):
        b.send(1, 1, 0, deps=last, name=f"rs{s}_send", src=seg("o", -s - 1, rel=True))
        got = b.recv(-1, 1, 0, name=f"rs{s}_recv", dst=seg("o", -s - 2, rel=True), reduce=True)
        last = [b.reduce(1, deps=[got, *last], name=f"rs{s}_reduce")]
    if again:  # add the reduced chunk to itself once more
        last = [b.reduce(1, deps=last, name="again", dst=seg("o", 0, rel=True), src=seg("o", 0, rel=True))]
    for s in range(p - 1):
        b.send(1, 1, 1, deps=last, name=f"ag{s}_send", src=seg("o", -s + ag_first, rel=True))
        last = [b.recv(-1, 1, 1, deps=last, name=f"ag{s}_recv", dst=seg("o", -s - 1, rel=True))]
    return b.build()


def ring_all_gather(p: int, *, copy: bool = False, placement: str = IN_PLACE) -> list[AlgoGraph]:
    """Per-rank ring all-gathers with absolute offsets (out of place: the first send copies its input)."""
    graphs = []
    for r in range(p):
        b = AlgorithmBuilder(total_chunks=p, placement=placement)
        last: list[int] = []
        for s in range(p - 1):
            src = seg("o", (r - s) % p) if s or placement == IN_PLACE else seg("i", 0)
            b.send((r + 1) % p, 1, 0, deps=last, src=src, copy_to=seg("o", r) if copy and s == 0 else None)
            last = [b.recv((r - 1) % p, 1, 0, deps=last, dst=seg("o", (r - s - 1) % p))]
        graphs.append(b.build())
    return graphs


def test_correct_ring_all_reduce_for_many_sizes():
    for p in (1, 2, 3, 5, 8):
        v = verify_graphs([ring_all_reduce(p)] * p, C.ALL_REDUCE)
        assert v.ok is True, (p, v)
    v = verify_graphs([ring_all_reduce(4)] * 4, C.ALL_REDUCE)
    assert str(v) == "correct: all_reduce over 4 ranks, in place: all 16 output chunks hold what they should"


def test_ring_all_reduce_missing_one_step():
    v = verify_graphs([ring_all_reduce(4, rs_steps=2)] * 4, C.ALL_REDUCE)
    assert v == Verdict(
        False, "rank 0, chunk 0: missing contributions of ranks [1, 2, 3] (16 of 16 output chunks wrong)"
    )


def test_reduction_applied_twice():
    v = verify_graphs([ring_all_reduce(4, again=True)] * 4, C.ALL_REDUCE)
    assert v.ok is False
    assert v.message.startswith(
        "rank 0, chunk 0: output chunk 0 on rank 0, node 'again' would count rank 0's contribution twice "
        "(it should hold chunk 0 reduced over all 4 ranks)"
    )


def test_all_gather_sending_the_wrong_chunk():
    v = verify_graphs([ring_all_reduce(4, ag_first=1)] * 4, C.ALL_REDUCE)
    assert v == Verdict(
        False,
        "rank 0, chunk 1: holds chunk 3 summed over ranks [0, 1, 2] instead of chunk 1 reduced over all 4 ranks "
        "(12 of 16 output chunks wrong)",
    )
    graphs = ring_all_gather(4)
    assert verify_graphs(graphs, C.ALL_GATHER).ok is True
    wrong = ring_all_gather(4)
    wrong[2].data[0] = NodeData("send", (), (Segment("o", 1, 1),))  # rank 2 sends rank 1's chunk first
    v = verify_graphs(wrong, C.ALL_GATHER)
    assert v.message == (
        "rank 0, chunk 2: rank 2, node 'send_3' reads output chunk 1 before anything was written there "
        "(it should hold rank 2's chunk 0) (3 of 16 output chunks wrong)"
    )


def test_out_of_place_needs_the_copy_of_the_own_piece():
    v = verify_graphs(ring_all_gather(3, placement=OUT_OF_PLACE), C.ALL_GATHER)
    assert v.message == (
        "rank 0, chunk 0: never written (it should hold rank 0's chunk 0) (3 of 9 output chunks wrong)"
    )
    assert verify_graphs(ring_all_gather(3, copy=True, placement=OUT_OF_PLACE), C.ALL_GATHER).ok is True
    # The same graphs declared valid in both placements are checked in both.
    both = ring_all_gather(3, copy=True, placement=OUT_OF_PLACE)
    for g in both:
        g.placement = (IN_PLACE, OUT_OF_PLACE)
    assert "in place and out of place" in verify_graphs(both, C.ALL_GATHER).message


def test_reading_what_was_never_written_is_reported_where_it_matters():
    # The root forwards scratch it never wrote: rank 1's output holds it.
    b0 = AlgorithmBuilder(total_chunks=1, placement=IN_PLACE)
    b0.send(1, 1, src="s@0", name="bcast")
    b1 = AlgorithmBuilder(total_chunks=1, placement=IN_PLACE)
    b1.recv(0, 1, dst="o@0")
    assert verify_graphs([b0.build(), b1.build()], C.BROADCAST).message == (
        "rank 1, chunk 0: rank 0, node 'bcast' reads scratch 's' chunk 0 before anything was written there "
        "(it should hold rank 0's chunk 0) (1 of 2 output chunks wrong)"
    )


def test_unused_bad_scratch_is_not_refused():
    b = AlgorithmBuilder(total_chunks=1, placement=IN_PLACE)
    b.reduce(1, dst="s@0", src="o@0")  # reduces into scratch never written, never used again
    assert verify_graphs([b.build()], C.ALL_REDUCE).ok is True


def test_deadlock_unmatched_and_size_mismatch():
    a = AlgorithmBuilder(total_chunks=2, placement=IN_PLACE)
    a.recv(1, 1, 7, dst="o@1", name="wait")
    b = AlgorithmBuilder(total_chunks=2, placement=IN_PLACE)
    assert verify_graphs([a.build(), b.build()], C.ALL_GATHER).message == (
        "rank 0, node 'wait' (receive from rank 1, tag 7) never gets a message: rank 1 sends fewer messages to "
        "rank 0 with tag 7 than rank 0 receives, so the algorithm deadlocks"
    )
    a = AlgorithmBuilder(total_chunks=2, placement=IN_PLACE)
    a.send(1, 1, 3, src="o@0", name="extra")
    assert verify_graphs([a.build(), AlgorithmBuilder(total_chunks=2).build()], C.ALL_GATHER).message == (
        "rank 0, node 'extra': 1 message(s) to rank 1 with tag 3 that no receive of rank 1 takes"
    )
    a = AlgorithmBuilder(total_chunks=2, placement=IN_PLACE)
    a.send(1, 2, src="o@0", name="big")
    b = AlgorithmBuilder(total_chunks=2, placement=IN_PLACE)
    b.recv(0, 1, dst="o@0", name="small")
    assert verify_graphs([a.build(), b.build()], C.ALL_REDUCE).message == (
        "rank 1, node 'small' receives 1 chunks but the message it matches (rank 0, node 'big') carries 2"
    )


def test_outside_the_buffers():
    a = AlgorithmBuilder(total_chunks=4, placement=OUT_OF_PLACE)
    a.send(1, 1, src="i@1", name="beyond")  # an all-gather input holds one chunk (4 chunks / 4 ranks)
    graphs = [a.build()] + [AlgorithmBuilder(total_chunks=4).build() for _ in range(3)]
    graphs[1] = AlgorithmBuilder(total_chunks=4, placement=OUT_OF_PLACE).build()
    b = AlgorithmBuilder(total_chunks=4, placement=OUT_OF_PLACE)
    b.recv(0, 1, dst="o@1")
    graphs[1] = b.build()
    assert verify_graphs(graphs, C.ALL_GATHER).message == (
        "rank 0, node 'beyond' addresses input chunk 1, outside the 1-chunk input of a all_gather"
    )


def test_cannot_verify_without_annotations_or_chunks():
    b = AlgorithmBuilder(total_chunks=2)
    b.send(1, 1)
    c = AlgorithmBuilder(total_chunks=2)
    c.recv(0, 1)
    v = verify_graphs([b.build(), c.build()], C.ALL_REDUCE)
    assert v.ok is None and v.message.startswith("no data annotations")
    assert str(v).startswith("cannot verify: no data annotations")
    d = AlgorithmBuilder()  # absolute byte sizes
    d.send(1, 1024, src="o@0")
    e = AlgorithmBuilder()
    e.recv(0, 1024, dst="o@0")
    v = verify_graphs([d.build(), e.build()], C.ALL_REDUCE)
    assert v == Verdict(None, "sizes are absolute bytes, not chunks of the collective's buffer")
    f = AlgorithmBuilder(total_chunks=3, placement=IN_PLACE)
    assert verify_graphs([f.build()] * 2, C.ALL_GATHER).ok is None  # 3 chunks cannot be split over 2 ranks


def test_barrier_needs_no_annotations():
    def barrier(p: int, skip: int | None = None) -> list[AlgoGraph]:
        graphs = []
        for r in range(p):
            b = AlgorithmBuilder(total_chunks=1)
            last: list[int] = []
            for _ in range(p - 1):
                if r != skip:
                    b.send((r + 1) % p, 0, deps=last)
                if (r - 1) % p != skip:
                    last = [b.recv((r - 1) % p, 0, deps=last)]
            graphs.append(b.build())
        return graphs

    assert verify_graphs(barrier(4), C.BARRIER).ok is True
    v = verify_graphs(barrier(4, skip=3), C.BARRIER)
    assert v == Verdict(False, "rank 0 can leave the barrier before ranks [1, 2, 3] have entered it")


def test_every_collective_has_a_definition():
    for c in C:
        assert c == C.BARRIER or c in LAYOUTS


def test_minimum_bytes():
    assert minimum_bytes(C.ALL_REDUCE, 4, 100.0) == {"sent_per_rank": 100.0, "received_per_rank": 100.0, "total": 600.0}
    assert minimum_bytes(C.ALL_GATHER, 4, 100.0)["received_per_rank"] == 75.0
    assert minimum_bytes(C.ALL_REDUCE, 1, 100.0)["total"] == 0.0


# -- the annotations as data and as Chakra ET ----------------------------------------------------


def test_segment_text_round_trip():
    for text in ("o@3", "o@r-1", "o@r+0x1", "s2@r+1x5", "i@0x4/2", "t3.5@0x1,o@r-2x3"):
        assert format_segments(parse_segments(text)) == text
    with pytest.raises(ValueError, match="not a chunk segment"):
        parse_segments("o3")
    assert absolute_segments(parse_segments("o@r+1x3"), 2, 4, 4) == [Segment("o", 3, 1), Segment("o", 0, 2)]


def test_builder_checks_counts():
    b = AlgorithmBuilder(total_chunks=4)
    with pytest.raises(ValueError, match="name 2 chunks but the node moves 3"):
        b.send(1, 3, src=[seg("o", 0, 1), seg("o", 2, 1)])
    with pytest.raises(ValueError, match="not a whole number"):
        b.send(1, 0.5, src="o@0")


def test_annotations_round_trip_through_chakra_et():
    graph = ring_all_reduce(4)
    setup = AlgorithmBuilder(total_chunks=4, relative_peers=True, placement=OUT_OF_PLACE)
    setup.setup_copy(1, src=seg("i", 0, 1, rel=True), dst=seg("o", 0, 1, rel=True))
    setup.send(1, 2, src=seg("i", 3, 2, rel=True))  # wraps around: two segments once absolute
    setup.recv(-1, 2, dst=[seg("o", -1, 1, rel=True), seg("s", 0, 1)])
    for g in (graph, setup.build()):
        back = [algo_graph_from_trace(t) for t in algorithm_traces([g] * 4)]
        assert verify_graphs(back, C.ALL_REDUCE).ok == verify_graphs([g] * 4, C.ALL_REDUCE).ok
        for r, h in enumerate(back):
            assert h.placement == g.placement
            for pos, d in enumerate(g.data):
                got = h.data[pos]
                if d is None:
                    assert got is None
                    continue
                assert got is not None and got.op == d.op
                for mine, theirs in ((d.src, got.src), (d.dst, got.dst)):
                    assert absolute_segments(mine, r, 4, 4) == list(theirs)
    trace = algo_graph_to_trace(setup.build(), 0, 4)
    meta = {a.name: a.string_val for a in trace.metadata.attr}
    assert meta["data_placement"] == "out_of_place" and meta["data_setup"] == "o@0x1=i@0x1"
    attrs = {a.name: a.string_val for a in trace.nodes[0].attr if a.name.startswith("data_")}
    assert attrs == {"data_op": "send", "data_src": "i@3x1,i@0x1"}


def test_bad_annotations_in_a_file_are_named():
    b = AlgorithmBuilder(total_chunks=2)
    b.send(1, 1, src="o@0")
    trace = algo_graph_to_trace(b.build(), 0, 2)
    for attr in trace.nodes[0].attr:
        if attr.name == "data_op":
            attr.string_val = "store"
    with pytest.raises(ValueError, match="data_op 'store' on this node"):
        algo_graph_from_trace(trace)


def test_an_all_to_all_whose_chunks_do_not_split_per_rank_cannot_be_verified_and_does_not_crash() -> None:
    # A custom program of 4 chunks run as an all-to-all over 3 ranks divided by zero chunks per rank.
    graphs = []
    for r in range(3):
        b = AlgorithmBuilder(total_chunks=4)
        b.send((r + 1) % 3, 1, src="i@0")
        b.recv((r - 1) % 3, 1, dst="o@0")
        graphs.append(b.build())
    verdict = verify_graphs(graphs, C.ALL_TO_ALL)
    assert verdict.ok is None and "4 chunks cannot be split into equal pieces for 3 ranks" in verdict.message
