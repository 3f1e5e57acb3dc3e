"""MSCCL-IR programs through the verifier: wrong programs are named wrong; replication keeps programs correct.

Every corpus file's verdict is asserted in ``test_msccl_corpus.py`` (which simulates each file and reuses it).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from etsim.algo.verify import Verdict, verify_graphs
from etsim.chakra import CollectiveType as C
from etsim.producers.msccl import MscclProgram, convert_msccl, convert_program, parse_msccl

from .conftest import CORPUS, REPO

RING8 = CORPUS / "generated" / "allreduce_ring_n8_c1_i1_LL128.xml"


def ring8_xml(tmp_path: Path) -> Path:
    """The corpus's 8-GPU ring all-reduce, or (a plain clone) the same file as our generator writes it.

    ``tests/experiment/test_shipped_experiments.py`` checks that the generator reproduces the corpus file byte for byte.
    """
    if RING8.is_file():
        return RING8
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import gen_msccl_ring
    finally:
        sys.path.pop(0)
    path = tmp_path / RING8.name
    path.write_text(gen_msccl_ring.allreduce_ring(8))
    return path


def to_xml(program: MscclProgram) -> str:
    """A program as MSCCL-IR text (the attributes the parser reads)."""
    head = (
        f'<algo name="{program.name}" proto="{program.proto}" nchannels="{program.nchannels}" '
        f'nchunksperloop="{program.nchunksperloop}" ngpus="{program.ngpus}" coll="{program.coll}" '
        f'inplace="{int(bool(program.inplace))}" outofplace="{int(bool(program.outofplace))}">'
    )
    lines = [head]
    for g in program.gpus:
        lines.append(f'  <gpu id="{g.id}" i_chunks="{g.i_chunks}" o_chunks="{g.o_chunks}" s_chunks="{g.s_chunks}">')
        for tb in g.tbs:
            lines.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
            for st in tb.steps:
                lines.append(
                    f'      <step s="{st.s}" type="{st.type}" srcbuf="{st.srcbuf}" srcoff="{st.srcoff}" '
                    f'dstbuf="{st.dstbuf}" dstoff="{st.dstoff}" cnt="{st.cnt}" depid="{st.depid}" '
                    f'deps="{st.deps}" hasdep="{st.hasdep}"/>'
                )
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def sixteen_gpus_moving_data_among_eight(ring8_path: Path) -> MscclProgram:
    """The 8-GPU ring all-reduce declared for 16 GPUs: GPUs 8-15 run a second ring among themselves."""
    ring8 = parse_msccl(ring8_path)
    gpus = list(ring8.gpus)
    for g in ring8.gpus:
        tbs = [
            dataclasses.replace(tb, send=tb.send + 8 if tb.send >= 0 else -1, recv=tb.recv + 8 if tb.recv >= 0 else -1)
            for tb in g.tbs
        ]
        gpus.append(dataclasses.replace(g, id=g.id + 8, tbs=tbs))
    return dataclasses.replace(ring8, path="sixteen.xml", ngpus=16, gpus=gpus)


def test_a_file_declaring_16_gpus_that_moves_data_among_8_is_wrong(tmp_path: Path):
    conv = convert_program(sixteen_gpus_moving_data_among_eight(ring8_xml(tmp_path)))
    assert verify_graphs(conv.graphs, C.ALL_REDUCE) == Verdict(
        False,
        "rank 0, chunk 0: missing contributions of ranks [8, 9, 10, 11, 12, 13, 14, 15] "
        "(128 of 128 output chunks wrong)",
    )
    # The same text through the parser gives the same verdict.
    again = convert_msccl(to_xml(sixteen_gpus_moving_data_among_eight(ring8_xml(tmp_path))).encode())
    assert verify_graphs(again.graphs, C.ALL_REDUCE).ok is False


@pytest.mark.corpus
@pytest.mark.parametrize(
    "rel",
    [
        "generated/allgather_recdbl_n8_i1.xml",  # multi-chunk steps in the output buffer
        "shipped/msccl-scheduler/ndv4/ap-1pass.xml",  # multi-chunk reductions through scratch
        "shipped/msccl-scheduler/ndv4/a2a2ll.xml",
        "generated/reducescatter_ring_n8_i1_oop.xml",
    ],
)
def test_instances_keep_the_program_correct(rel):
    # Replicated steps of several chunks move every k-th chunk (per-chunk interleaving); offsets that
    # simply advanced by one chunk per instance made instance i overwrite instance i+1's chunks.
    for k in (2, 3):
        conv = convert_msccl(CORPUS / rel, instances=k)
        verdict = verify_graphs(conv.graphs, conv.collective or C.ALL_REDUCE)
        assert verdict.ok is True, f"{rel} ×{k}: {verdict}"


def test_msccl_step_semantics_reduce_in_the_receive():
    from etsim.algo.dataflow import NodeData, Segment
    from etsim.producers.msccl.ir import MscclStep, MscclTb
    from etsim.producers.msccl.lower import _step_data

    tb = MscclTb(3, 1, 2, 0)

    def step(kind: str) -> MscclStep:
        return MscclStep(5, kind, "i", 4, "o", 6, 2, -1, -1, 0)

    i4, o6, t = (Segment("i", 4, 2),), (Segment("o", 6, 2),), (Segment("t3.5", 0, 2),)
    assert _step_data(tb, step("s"), "send") == NodeData("send", (), i4)
    assert _step_data(tb, step("r"), "recv") == NodeData("store", o6)
    assert _step_data(tb, step("rcs"), "send") == NodeData("send", (), o6)
    assert _step_data(tb, step("rrs"), "recv") == NodeData("reduce", t, i4)
    assert _step_data(tb, step("rrs"), "send") == NodeData("send", (), t)
    assert _step_data(tb, step("rrs"), "reduce") is None
    assert _step_data(tb, step("rrcs"), "recv") == NodeData("reduce", o6, i4)
    assert _step_data(tb, step("rrcs"), "send") == NodeData("send", (), o6)
    assert _step_data(tb, step("cpy"), "copy") == NodeData("copy", o6, i4)
    assert _step_data(tb, step("re"), "reduce") == NodeData("reduce", o6, i4)
