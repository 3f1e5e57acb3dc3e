"""``etsim convert msccl`` and ``etsim convert chakra-to-msccl`` through the real command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etsim.chakra import load_workload
from etsim.chakra.algorithm import COMP, RECV, SEND, algo_graph_from_trace
from etsim.cli import main

REPO = Path(__file__).resolve().parents[2]

RING = b"""<!-- a comment before the document, as RCCL files have -->
<algo name="ring4" proto="Simple" nchannels="1" nchunksperloop="4" ngpus="4" coll="allreduce" inplace="1">
%s
</algo>
"""


def ring_xml(n: int = 4) -> bytes:
    """An MSCCLang-style fused ring all-reduce on n GPUs (s, rrs…, rrcs, rcs…, r)."""
    gpus = []
    for g in range(n):
        plan = [("s", g)] + [("rrs", (g - k) % n) for k in range(1, n - 1)] + [("rrcs", (g + 1) % n)]
        plan += [("rcs", (g - k) % n) for k in range(0, n - 2)] + [("r", (g + 2) % n)]
        steps = [
            f'<step s="{s}" type="{kind}" srcbuf="i" srcoff="{chunk}" dstbuf="i" dstoff="{chunk}" cnt="1" '
            'depid="-1" deps="-1" hasdep="0"/>'
            for s, (kind, chunk) in enumerate(plan)
        ]
        gpus.append(
            f'<gpu id="{g}" i_chunks="{n}" o_chunks="0" s_chunks="0">\n<tb id="0" send="{(g + 1) % n}" '
            f'recv="{(g - 1) % n}" chan="0">\n' + "\n".join(steps) + "\n</tb>\n</gpu>"
        )
    return (
        RING.replace(b'ngpus="4"', f'ngpus="{n}"'.encode()).replace(
            b'nchunksperloop="4"', f'nchunksperloop="{n}"'.encode()
        )
        % "\n".join(gpus).encode()
    )


def finish(capsys, argv):
    capsys.readouterr()
    assert main([*argv, "--json", "-", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)["finish_ns"]


def test_convert_msccl_writes_one_file_per_gpu(tmp_path, capsys):
    xml = tmp_path / "ring.xml"
    xml.write_bytes(ring_xml())
    assert main(["convert", "msccl", str(xml), "-o", str(tmp_path / "out" / "ring")]) == 0
    out = capsys.readouterr().out
    assert "28 steps (4 r, 8 rcs, 4 rrcs, 8 rrs, 4 s)" in out and "→ 60 nodes, 24 messages" in out
    assert "wrote 4 files" in out
    wl = load_workload(tmp_path / "out" / "ring")
    assert wl.num_ranks == 4
    g = algo_graph_from_trace(wl[1])
    assert g.total_chunks == 4
    assert g.kinds == [SEND] + [RECV, COMP, SEND] * 3 + [RECV, SEND] * 2 + [RECV]
    assert [g.peers[i] for i in range(g.num_nodes) if g.kinds[i] == SEND] == [2] * 6
    assert main(["validate", str(tmp_path / "out" / "ring")]) == 0


def test_convert_without_output_only_checks(tmp_path, capsys):
    xml = tmp_path / "ring.xml"
    xml.write_bytes(ring_xml())
    assert main(["convert", "msccl", str(xml), "--instances", "2"]) == 0
    assert "48 messages, 8 chunks per buffer" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ring.xml"]


def test_algo_xml_runs_on_the_fly_and_equals_the_converted_family_and_native_ring(tmp_path, capsys):
    xml = tmp_path / "ring.xml"
    xml.write_bytes(ring_xml(8))
    assert main(["convert", "msccl", str(xml), "-o", str(tmp_path / "ring")]) == 0
    workload = str(REPO / "workloads" / "allreduce_8npus_1MiB")
    topo = str(REPO / "topologies" / "ring8.yaml")
    t_xml = finish(capsys, ["run", workload, "--algo", str(xml), "--topology", topo])
    t_et = finish(capsys, ["run", workload, "--algo", str(tmp_path / "ring"), "--topology", topo])
    t_native = finish(capsys, ["run", workload, "--algo", "ring", "--topology", topo])
    assert t_xml == t_et == pytest.approx(t_native)


def test_chakra_to_msccl_round_trip(tmp_path, capsys):
    assert (
        main(
            [
                "algo",
                "export",
                "halving_doubling",
                "--collective",
                "all_reduce",
                "--npus",
                "8",
                "-o",
                str(tmp_path / "hd"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "convert",
                "chakra-to-msccl",
                str(tmp_path / "hd"),
                "-o",
                str(tmp_path / "hd.xml"),
                "--collective",
                "all_reduce",
            ]
        )
        == 0
    )
    text = (tmp_path / "hd.xml").read_text()
    assert 'coll="allreduce"' in text and 'ngpus="8"' in text and 'nchunksperloop="8"' in text
    workload = str(REPO / "workloads" / "allreduce_8npus_1MiB")
    a = finish(capsys, ["run", workload, "--algo", str(tmp_path / "hd"), "--reduction-bandwidth", "100 GB/s"])
    b = finish(capsys, ["run", workload, "--algo", str(tmp_path / "hd.xml"), "--reduction-bandwidth", "100 GB/s"])
    assert a == b


def test_chakra_to_msccl_takes_the_collective_from_converted_metadata(tmp_path, capsys):
    xml = tmp_path / "ring.xml"
    xml.write_bytes(ring_xml())
    assert main(["convert", "msccl", str(xml), "-o", str(tmp_path / "ring")]) == 0
    assert main(["convert", "chakra-to-msccl", str(tmp_path / "ring"), "-o", str(tmp_path / "back.xml")]) == 0
    assert 'coll="allreduce"' in (tmp_path / "back.xml").read_text()


def test_errors_exit_1_with_location(tmp_path, capsys):
    bad = tmp_path / "bad.xml"
    bad.write_bytes(ring_xml().replace(b'type="rrcs"', b'type="rrcx"', 1))
    assert main(["convert", "msccl", str(bad), "-o", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("etsim: error: ") and "gpu 0, tb 0, step 3: unknown step type 'rrcx'" in err
    assert main(["run", str(REPO / "workloads" / "allreduce_8npus_1MiB"), "--algo", str(bad)]) == 1
    assert "unknown step type" in capsys.readouterr().err
    # A 4-GPU algorithm on an 8-rank group.
    good = tmp_path / "ring.xml"
    good.write_bytes(ring_xml())
    assert main(["run", str(REPO / "workloads" / "allreduce_8npus_1MiB"), "--algo", str(good)]) == 1
    assert "written for 4 GPUs" in capsys.readouterr().err
    assert main(["convert", "chakra-to-msccl", str(tmp_path / "nothing"), "-o", str(tmp_path / "o.xml")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["convert", "msccl", str(good), "--instances", "0"]) == 1
