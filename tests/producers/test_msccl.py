"""MSCCL-IR import: dialects, step semantics, dependencies, instances, errors, and the export back."""

from __future__ import annotations

import pytest

from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.graph import COMP, RECV, SEND, AlgoGraph, AlgorithmBuilder
from etsim.chakra import Workload, load_workload
from etsim.chakra.graph import CollectiveType
from etsim.errors import ConfigError, TraceError
from etsim.network import fully_connected
from etsim.producers import collective_workload
from etsim.producers.msccl import (
    MscclError,
    convert_msccl,
    graphs_to_msccl,
    parse_msccl,
    replicate_instances,
    write_msccl_et,
)
from etsim.producers.msccl.source import MscclAlgorithm, load_msccl_algorithm
from etsim.registry import allowing_plugins
from etsim.simulation import simulate
from etsim.system.algorithms.base import CollectiveAlgorithm
from etsim.system.config import SystemConfig


def step(s, kind, cnt=1, srcoff=0, dstoff=0, depid=-1, deps=-1, srcbuf="i", dstbuf="i", hasdep=1):
    # hasdep 1 by default: any step may be waited on (a step waited on needs it; more is only extra flags).
    if kind == "nop":
        cnt, srcoff, dstoff, srcbuf, dstbuf = 0, -1, -1, "i", "o"
    return (
        f'<step s="{s}" type="{kind}" srcbuf="{srcbuf}" srcoff="{srcoff}" dstbuf="{dstbuf}" dstoff="{dstoff}" '
        f'cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>'
    )


def tb(tid, send, recv, *steps, chan=0, extra=""):
    return f'<tb id="{tid}" send="{send}" recv="{recv}" chan="{chan}">{extra}\n' + "\n".join(steps) + "\n</tb>"


def gpu(gid, *tbs, chunks=4, extra=""):
    return f'<gpu id="{gid}" i_chunks="{chunks}" o_chunks="0" s_chunks="0">{extra}\n' + "\n".join(tbs) + "\n</gpu>"


def algo(*gpus, coll="allreduce", n=None, chunks=4, attrs="", head=""):
    n = len(gpus) if n is None else n
    return (
        head + f'<algo name="t" proto="Simple" nchannels="1" nchunksperloop="{chunks}" ngpus="{n}" coll="{coll}" '
        f'inplace="1"{attrs}>\n' + "\n".join(gpus) + "\n</algo>"
    ).encode()


def pair_xml(coll="allreduce", attrs="", head="", tb_extra="", gpu_extra=""):
    """Two GPUs exchanging 2 chunks and reducing: a minimal all-reduce-shaped program."""
    return algo(
        gpu(0, tb(0, 1, 1, step(0, "s", 2), step(1, "rrc", 2), extra=tb_extra), extra=gpu_extra),
        gpu(1, tb(0, 0, 0, step(0, "s", 2, srcoff=2, dstoff=2), step(1, "rrc", 2, srcoff=2, dstoff=2))),
        coll=coll,
        attrs=attrs,
        head=head,
    )


def kinds(graph):
    return [{SEND: "S", RECV: "R", COMP: "C"}[k] for k in graph.kinds]


def deps_by_name(graph):
    return {graph.names[i]: sorted(graph.names[d] for d in graph.deps(i)) for i in range(graph.num_nodes)}


# ------------------------------------------------------------------------------------------ dialects


@pytest.mark.parametrize(
    ("coll", "attrs", "head", "tb_extra", "gpu_extra", "expected"),
    [
        ("allreduce", "", "", "", "", CollectiveType.ALL_REDUCE),  # microsoft MSCCLang
        ("allreduce", ' outofplace="0" minBytes="0" maxBytes="0"', "", "", "", CollectiveType.ALL_REDUCE),  # Azure
        ("reduce_scatter", "", "", "", "", CollectiveType.REDUCE_SCATTER),
        ("reducescatter", ' outofplace="1" minBytes="0" maxBytes="0"', "", "", "", CollectiveType.REDUCE_SCATTER),
        ("allreduce", ' outofplace="1" minBytes="64" maxBytes="0"', "<!-- Copyright (c) RCCL -->\n", "", "", None),
        ("allreduce", ' redop="nop"', "", "", '<copy i_off="0" o_off="0"/>', CollectiveType.ALL_REDUCE),  # TACCL-EF
        ("allreduce", ' maxBytes="1099511627776"', "", "<!-- tree 0 -->", "", CollectiveType.ALL_REDUCE),  # ForestColl
        ("allreduce", ' maxcount="1" nthreadblocks="24"', "", "", "", CollectiveType.ALL_REDUCE),  # RCCL unit tests
        ("custom", "", "", "", "", None),
    ],
)
def test_dialects_parse_to_the_same_graph(coll, attrs, head, tb_extra, gpu_extra, expected):
    conv = convert_msccl(pair_xml(coll, attrs, head, tb_extra, gpu_extra))
    if coll == "custom":
        assert conv.collective is None
    elif expected is not None:
        assert conv.collective == expected
    g0 = conv.graphs[0]
    assert kinds(g0) == ["S", "R", "C"]
    assert g0.total_chunks == 4
    assert g0.chunks == [2.0, 2.0, 2.0]
    assert g0.peers[:2] == [1, 1]


def test_minbytes_maxbytes_and_copies_are_kept():
    program = parse_msccl(
        pair_xml(
            attrs=' outofplace="1" minBytes="64" maxBytes="0" redop="nop"', gpu_extra='<copy i_off="0" o_off="1"/>'
        )
    )
    assert program.min_bytes == 64 and program.max_bytes == 0 and program.outofplace is True
    assert program.attributes["redop"] == "nop"
    assert program.gpus[0].copies == [(0, 1)]


def test_custom_implements_every_collective():
    algo_ = MscclAlgorithm(convert_msccl(pair_xml("custom")))
    assert algo_.supports(CollectiveType.ALL_GATHER, 2) is None
    assert "2 GPUs" in algo_.supports(CollectiveType.ALL_GATHER, 4)
    algo_ = MscclAlgorithm(convert_msccl(pair_xml("allreduce")))
    assert "not all_gather" in algo_.supports(CollectiveType.ALL_GATHER, 2)


# ------------------------------------------------------------------------------------------ step semantics


def chain_xml():
    """gpu0 sends; gpu1 rrs (recv, reduce, send on); gpu2 rrcs; gpu3 rcs; gpu4 r, cpy, re.

    A timing fixture, not an all-reduce: its offsets are marked as placeholders, so the verifier
    has nothing to check and ``--algo`` runs it.
    """
    return algo(
        gpu(0, tb(0, 1, -1, step(0, "s", 3))),
        gpu(1, tb(0, 2, 0, step(0, "rrs", 3))),
        gpu(2, tb(0, 3, 1, step(0, "rrcs", 3))),
        gpu(3, tb(0, 4, 2, step(0, "rcs", 3))),
        gpu(
            4,
            tb(
                0,
                -1,
                3,
                step(0, "r", 3),
                step(1, "cpy", 3, srcoff=0, dstoff=1, dstbuf="o"),
                step(2, "re", 1, srcoff=1, dstoff=3),
            ),
        ),
        chunks=4,
        attrs=' etsim_offsets="placeholder"',
    )


def test_every_step_type_lowers_to_its_parts_in_order():
    conv = convert_msccl(chain_xml())
    g = conv.graphs
    assert kinds(g[0]) == ["S"]
    assert kinds(g[1]) == ["R", "C", "S"]
    assert kinds(g[2]) == ["R", "C", "S"]
    assert kinds(g[3]) == ["R", "S"]
    assert kinds(g[4]) == ["R", "C", "C"]
    for graph in g:  # each part waits on the previous part of its step, and steps run in order
        assert [graph.deps(i) for i in range(graph.num_nodes)] == [[]] + [[i] for i in range(graph.num_nodes - 1)]
    assert g[1].peers == [0, -1, 2] and g[4].chunks == [3.0, 3.0, 1.0]
    # Provenance: rcs forwards what it received (its dst slot); rrs reads and forwards its src slot.
    assert [o[2:] for o in conv.origins[3]] == [("recv", "i", 0), ("send", "i", 0)]
    assert conv.origins[4][1][2:] == ("copy", "o", 1)


class ChainAlgorithm(CollectiveAlgorithm):
    """The chain program's graphs as an all-reduce: a timing fixture (it is not one, and is refused as one)."""

    name = "chain"
    collectives = frozenset({CollectiveType.ALL_REDUCE})
    verified_by_tests = True  # not a claim about the graphs: these tests time them, they do not run them as one

    def graph(self, collective: CollectiveType, group_size: int, position: int) -> AlgoGraph:
        return convert_msccl(chain_xml()).graphs[position]


def test_chain_simulates_and_reduction_costs_count(tmp_path):
    path = tmp_path / "chain.xml"
    path.write_bytes(chain_xml())
    size = 4 << 20
    # The chain moves 12 of its 4-chunk buffers' chunks over 5 GPUs: far less than any all-reduce must, and it
    # cannot be verified (placeholder offsets), so it is refused as one...
    with pytest.raises(ConfigError, match=r"cannot compute all_reduce over 5 ranks: its 5 ranks send 12 chunks"):
        simulate(
            Workload(collective_workload(CollectiveType.ALL_REDUCE, size, 5)),
            topology=fully_connected(5, 50.0, 500.0),
            system=SystemConfig(algorithms={"default": str(path)}),
        )
    # ... while its lowering is still timed: the same graphs, as an algorithm the suite vouches for.
    t = {}
    for red_bw in (None, 10.0):
        with allowing_plugins([f"{__file__}:ChainAlgorithm"]):
            r = simulate(
                Workload(collective_workload(CollectiveType.ALL_REDUCE, size, 5)),
                topology=fully_connected(5, 50.0, 500.0),
                system=SystemConfig(algorithms={"default": f"{__file__}:ChainAlgorithm"}, reduction_bandwidth=red_bw),
            )
        t[red_bw] = r.finish_ns
        assert r.network["messages"] == 4
        assert r.network["bytes"] == pytest.approx(4 * 3 / 4 * size)
    hop = 500.0 + 3 / 4 * size / 50.0
    assert t[None] == pytest.approx(4 * hop)
    # On the path: the reductions of gpu1 and gpu2 (3 chunks each), then gpu4's copy (3) and re (1).
    chunk = size / 4
    assert t[10.0] == pytest.approx(4 * hop + (3 + 3 + 3 + 1) * chunk / 10.0)


def test_nop_carried_dependencies_and_dependency_on_a_nop():
    xml = algo(
        gpu(
            0,
            tb(0, 1, -1, step(0, "s", 1)),
            tb(1, -1, 1, step(0, "r", 1)),
            # tb2: two nops carry waits on tb0 and tb1 to the copy; tb3 waits on tb2's nop (step 1).
            tb(
                2,
                -1,
                -1,
                step(0, "nop", depid=0, deps=0),
                step(1, "nop", depid=1, deps=0),
                step(2, "cpy", 1, srcoff=0, dstoff=1),
            ),
            tb(3, -1, -1, step(0, "re", 1, srcoff=2, dstoff=3, depid=2, deps=1)),
        ),
        gpu(1, tb(0, 0, 0, step(0, "s", 1), step(1, "r", 1))),
        chunks=4,
    )
    conv = convert_msccl(xml)
    d = deps_by_name(conv.graphs[0])
    assert d["tb2_s2_cpy_copy"] == ["tb0_s0_s_send", "tb1_s0_r_recv"]
    # A wait on a nop means: what the nop waited on, and the tb's steps before it.
    assert d["tb3_s0_re_reduce"] == ["tb0_s0_s_send", "tb1_s0_r_recv"]
    assert conv.graphs[0].num_nodes == 4  # nops make no nodes


def test_cross_tb_dependency_pointing_forward_in_the_document():
    xml = algo(
        gpu(0, tb(0, 1, -1, step(0, "s", 1, depid=1, deps=0)), tb(1, -1, 1, step(0, "r", 1))),
        gpu(1, tb(0, 0, 0, step(0, "s", 1), step(1, "r", 1))),
        chunks=2,
    )
    g = convert_msccl(xml).graphs[0]
    assert g.names == ["tb1_s0_r_recv", "tb0_s0_s_send"]  # topologically ordered
    assert g.deps(1) == [0]


def test_instances_replicate_tbs_channels_and_chunks():
    program = parse_msccl(pair_xml())
    rep = replicate_instances(program, 3)
    assert rep.nchunksperloop == 12 and rep.nchannels == 3
    assert [(t.id, t.chan) for t in rep.gpus[0].tbs] == [(0, 0), (1, 1), (2, 2)]
    assert [st.srcoff for t in rep.gpus[1].tbs for st in t.steps[:1]] == [6, 7, 8]  # interleaved 2·3 + i
    conv = convert_msccl(pair_xml(), instances=3)
    assert conv.num_messages == 3 * convert_msccl(pair_xml()).num_messages
    g = conv.graphs[0]
    assert sorted(set(g.tags[i] for i in range(g.num_nodes) if g.kinds[i] != COMP)) == [0, 1, 2]
    # Same bytes in all: 3 instances × 2 chunks of buffer/12 = 2 chunks of buffer/4.
    assert sum(c for c, k in zip(g.chunks, g.kinds, strict=True) if k == SEND) / g.total_chunks == 2 / 4


# ------------------------------------------------------------------------------------------ errors


def err(xml, name="bad.xml"):
    with pytest.raises(MscclError) as info:
        convert_msccl(xml, name=name)
    assert isinstance(info.value, TraceError)
    return info.value


def test_missing_attribute_names_file_gpu_tb_step():
    xml = pair_xml().replace(
        b'<step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="2"',
        b'<step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0"',
        1,
    )
    e = err(xml)
    assert (e.gpu, e.tb, e.step) == (0, 0, 1)
    assert "no 'cnt' attribute" in str(e) and str(e).startswith("bad.xml:5, gpu 0, tb 0, step 1:")


@pytest.mark.parametrize(
    ("attr", "text"),
    [("ngpus", "no 'ngpus'"), ("nchunksperloop", "no 'nchunksperloop'"), ("coll", "no 'coll'")],
)
def test_missing_algo_attribute(attr, text):
    xml = pair_xml().decode()
    start = xml.index(f' {attr}="')
    end = xml.index('"', start + len(attr) + 3) + 1
    assert text in str(err((xml[:start] + xml[end:]).encode()))


def test_dangling_depid_and_deps():
    e = err(algo(gpu(0, tb(0, -1, -1, step(0, "re", 1, depid=5, deps=0)))))
    assert (e.gpu, e.tb, e.step) == (0, 0, 0) and "depid=5 names no tb" in e.reason
    e = err(algo(gpu(0, tb(0, -1, -1, step(0, "re", 1)), tb(1, -1, -1, step(0, "re", 1, depid=0, deps=3)))))
    assert (e.tb, e.step) == (1, 0) and "deps=3 names no step of tb 0 (it has 1 steps)" in e.reason


def test_a_wait_on_a_step_that_publishes_no_completion_is_an_error():
    # MSCCL's runtime sets a step's completion flag only when hasdep=1: a wait on one without it never ends.
    e = err(algo(gpu(0, tb(0, -1, -1, step(0, "re", 1, hasdep=0)), tb(1, -1, -1, step(0, "re", 1, depid=0, deps=0)))))
    assert (e.gpu, e.tb, e.step) == (0, 1, 0)
    assert "waits on tb 0 step 0, which has hasdep=0" in e.reason and "wait forever" in e.reason
    # the same program with the flag published parses
    parse_msccl(algo(gpu(0, tb(0, -1, -1, step(0, "re", 1)), tb(1, -1, -1, step(0, "re", 1, depid=0, deps=0)))))


def test_tb_sending_to_two_peers():
    xml = pair_xml().replace(b'<tb id="0" send="1" recv="1"', b'<tb id="0" send="1" send="0" recv="1"', 1)
    e = err(xml)
    assert (e.gpu, e.tb) == (0, 0)
    assert "send redefined" in e.reason and "at most one peer" in e.reason


def test_unknown_step_type_and_ra():
    e = err(pair_xml().replace(b'type="rrc"', b'type="xyz"', 1))
    assert (e.gpu, e.tb, e.step) == (0, 0, 1) and "unknown step type 'xyz'" in e.reason and "rrcs" in e.reason
    e = err(pair_xml().replace(b'type="rrc"', b'type="ra"', 1))
    assert "residual add" in e.reason


def test_send_step_in_a_tb_without_send_peer():
    e = err(algo(gpu(0, tb(0, -1, 1, step(0, "rcs", 1))), gpu(1, tb(0, 0, -1, step(0, "s", 1)))))
    assert (e.gpu, e.tb, e.step) == (0, 0, 0) and "send=-1" in e.reason


def test_pairing_mismatch_reports_the_first_one():
    xml = pair_xml().replace(
        b'<step s="1" type="rrc" srcbuf="i" srcoff="2" dstbuf="i" dstoff="2" cnt="2"',
        b'<step s="1" type="rrc" srcbuf="i" srcoff="2" dstbuf="i" dstoff="2" cnt="1"',
    )
    e = err(xml)
    assert "gpu 0 → gpu 1 on channel 0: message #0 is sent with 2 chunks (gpu 0 tb 0 step 0)" in str(e)
    assert "received with 1 chunks (gpu 1 tb 0 step 1)" in str(e)
    # One receive too many.
    xml = algo(gpu(0, tb(0, 1, -1, step(0, "s", 1))), gpu(1, tb(0, -1, 0, step(0, "r", 1), step(1, "r", 1))))
    e = err(xml)
    assert (e.gpu, e.tb, e.step) == (1, 0, 1) and "receives 2 messages but gpu 0 sends 1" in e.reason
    # Different channels do not pair.
    xml = algo(gpu(0, tb(0, 1, -1, step(0, "s", 1), chan=1)), gpu(1, tb(0, -1, 0, step(0, "r", 1))))
    assert "on channel" in str(err(xml.replace(b'nchannels="1"', b'nchannels="2"')))


def test_a_tb_on_a_channel_past_nchannels_is_an_error():
    # The runtime sets up nchannels channels; instances shift channels by nchannels, so two would share one.
    xml = algo(gpu(0, tb(0, 1, -1, step(0, "s", 1), chan=1)), gpu(1, tb(0, -1, 0, step(0, "r", 1), chan=1)))
    assert "nchannels=1, but gpu 0 tb 0 uses chan=1 (channels are 0..nchannels-1)" in str(err(xml))
    parse_msccl(xml.replace(b'nchannels="1"', b'nchannels="2"'))


def test_other_structural_errors():
    assert "not contiguous" in err(algo(gpu(0, tb(1, -1, -1, step(0, "re", 1))))).reason
    assert "s=2 where 1" in err(algo(gpu(0, tb(0, -1, -1, step(0, "re", 1), step(2, "re", 1))))).reason
    assert "is the gpu itself" in err(algo(gpu(0, tb(0, 0, -1, step(0, "s", 1))))).reason
    assert "no <gpu> with id 1" in err(algo(gpu(0, tb(0, -1, -1, step(0, "re", 1))), n=2)).reason
    assert "exceed the buffer" in err(algo(gpu(0, tb(0, -1, -1, step(0, "re", 2, srcoff=3))))).reason
    assert "unknown collective" in err(pair_xml("allsum")).reason
    assert "not well-formed" in err(b"<algo").reason
    cyc = algo(
        gpu(0, tb(0, -1, -1, step(0, "re", 1, depid=1, deps=0)), tb(1, -1, -1, step(0, "re", 1, depid=0, deps=0)))
    )
    e = err(cyc)
    assert "cycle" in e.reason and e.gpu == 0


def test_missing_file():
    with pytest.raises(MscclError, match="cannot read"):
        convert_msccl("/nonexistent/x.xml")
    with pytest.raises(MscclError, match="cannot read"):
        load_msccl_algorithm("/nonexistent/x.xml")


# ------------------------------------------------------------------------------------------ writing, caching


def test_written_family_reads_back_into_the_same_graphs(tmp_path):
    conv = convert_msccl(chain_xml())
    paths = write_msccl_et(conv, tmp_path / "chain.et")
    assert [p.name for p in paths] == [f"chain.{i}.et" for i in range(5)]
    wl = load_workload(tmp_path / "chain")
    for rank, trace in enumerate(wl):
        back = algo_graph_from_trace(trace)
        g = conv.graphs[rank]
        assert back.kinds == g.kinds and back.chunks == g.chunks and back.total_chunks == 4
        assert [back.deps(i) for i in range(back.num_nodes)] == [g.deps(i) for i in range(g.num_nodes)]
        attrs = trace.attributes(0)
        assert attrs["tb_id"] == 0 and attrs["local_time_step"] == 0
    meta = {a.name: a.string_val for a in wl[0].metadata.attr}
    assert meta["collective"] == "allreduce" and meta["nchunksperloop"] == "4"


def test_cache_converts_once_and_notices_changes(tmp_path):
    path = tmp_path / "p.xml"
    path.write_bytes(pair_xml())
    a = load_msccl_algorithm(path)
    assert load_msccl_algorithm(str(path)) is a
    path.write_bytes(pair_xml("custom") + b"\n")
    b = load_msccl_algorithm(path)
    assert b is not a and b.conversion.collective is None


# ------------------------------------------------------------------------------------------ export


def test_export_refuses_what_msccl_cannot_say():
    b = AlgorithmBuilder(total_chunks=None)
    b.send(1, 100)
    with pytest.raises(ConfigError, match="absolute bytes"):
        graphs_to_msccl([b.build(), b.build()], collective=CollectiveType.ALL_REDUCE)
    b = AlgorithmBuilder(total_chunks=2)
    b.reduce(1, duration_ns=5.0)
    with pytest.raises(ConfigError, match="fixed duration"):
        graphs_to_msccl([b.build()], collective=None)
    b = AlgorithmBuilder(total_chunks=2)
    b.send(1, 0.5)
    with pytest.raises(ConfigError, match="whole number"):
        graphs_to_msccl([b.build(), b.build()], collective=None)


def test_export_packs_chains_and_carries_extra_dependencies_in_nops():
    # rank 0: two independent receives, then a reduction needing both, then a send of the result.
    b0 = AlgorithmBuilder(total_chunks=2)
    r1 = b0.recv(1, 1, tag=0)
    r2 = b0.recv(2, 1, tag=0)
    c0 = b0.reduce(1)
    c = b0.reduce(1, deps=[r1, r2, c0])
    b0.send(1, 1, tag=0, deps=[c])
    b1 = AlgorithmBuilder(total_chunks=2)
    b1.send(0, 1, tag=0)
    b1.recv(0, 1, tag=0)
    b2 = AlgorithmBuilder(total_chunks=2)
    b2.send(0, 1, tag=0)
    graphs = [b0.build(), b1.build(), b2.build()]
    xml = graphs_to_msccl(graphs, collective=None, name="x")
    assert 'type="nop"' in xml and 'coll="custom"' in xml
    conv = convert_msccl(xml.encode())
    g = conv.graphs[0]
    assert sorted(kinds(g)) == ["C", "C", "R", "R", "S"]
    red = next(i for i in range(g.num_nodes) if g.kinds[i] == COMP and g.deps(i))
    assert sorted(g.kinds[d] for d in g.deps(red)) == sorted([RECV, RECV, COMP])


def test_an_export_past_the_runtimes_thread_block_limit_is_warned(tmp_path) -> None:
    # A 128-rank ring gives hundreds of thread blocks a GPU, past the 216 MSCCL's runtime takes: it said nothing.
    from etsim.errors import EtsimWarning
    from etsim.system.algorithms.ring import RingAlgorithm

    graphs = [RingAlgorithm().graph(CollectiveType.ALL_REDUCE, 128, r) for r in range(128)]
    with pytest.warns(EtsimWarning, match=r"ring128: \d+ thread blocks on a GPU, .* at most 216, 256, 32 and fewer"):
        graphs_to_msccl(graphs, collective=CollectiveType.ALL_REDUCE, label="ring128")
    eight = [RingAlgorithm().graph(CollectiveType.ALL_REDUCE, 8, r) for r in range(8)]
    graphs_to_msccl(eight, collective=CollectiveType.ALL_REDUCE)  # (under the limits: no warning)
    # A 24-rank ring's family: 46 channels (one per tag), past MSCCL's 32 (it was said of thread blocks only).
    from etsim.cli import main
    from etsim.producers.msccl import workload_to_msccl

    assert (
        main(["algo", "export", "ring", "--collective", "all_reduce", "--npus", "24", "-o", str(tmp_path / "r")]) == 0
    )
    with pytest.warns(EtsimWarning, match=r"\d+ thread blocks on a GPU, \d+ steps in a thread block, 46 channels"):
        workload_to_msccl(tmp_path / "r")
