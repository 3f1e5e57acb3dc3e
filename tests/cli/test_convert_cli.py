"""``etsim convert msccl`` and ``etsim convert chakra-to-msccl`` through the real command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.graph import COMP, RECV, SEND
from etsim.chakra import load_workload
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


# -- verification ------------------------------------------------------------------------------------


def split_ring_xml(n: int = 8, ring: int = 4) -> bytes:
    """ngpus=n, but GPUs run separate rings of *ring* GPUs: each ring all-reduces among itself only."""
    one = ring_xml(ring).decode()
    body = one[one.index("<gpu ") : one.rindex("</gpu>") + len("</gpu>")]
    blocks = []
    for base in range(0, n, ring):
        text = body
        for g in reversed(range(ring)):  # shift ids and peers (highest first, so no id is shifted twice)
            for attr in ("id", "send", "recv"):
                text = text.replace(f'{attr}="{g}"', f'{attr}="#{g + base}"')
        blocks.append(text.replace('="#', '="').replace('<tb id="' + str(base), '<tb id="0'))
    head = one[: one.index("<gpu ")].replace(f'ngpus="{ring}"', f'ngpus="{n}"')
    return (head + "\n".join(blocks) + "\n</algo>\n").encode()


def test_convert_msccl_prints_the_verdict(tmp_path, capsys):
    xml = tmp_path / "ring.xml"
    xml.write_bytes(ring_xml())
    assert main(["convert", "msccl", str(xml)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"{xml}: correct: all_reduce over 4 ranks, in place: all 16 output chunks hold what they should"


def test_convert_msccl_refuses_a_program_that_does_not_compute_its_collective(tmp_path, capsys):
    xml = tmp_path / "split.xml"
    xml.write_bytes(split_ring_xml())
    capsys.readouterr()
    assert main(["convert", "msccl", str(xml), "-o", str(tmp_path / "out" / "split")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"etsim: error: {xml}: the program does not compute allreduce over 8 GPUs: rank 0, chunk 0: missing "
        "contributions of ranks [4, 5, 6, 7] (32 of 32 output chunks wrong); nothing written\n"
    )
    assert not (tmp_path / "out").exists()
    # --algo refuses it with the same first missing piece.
    assert main(["run", str(REPO / "workloads" / "allreduce_8npus_1MiB"), "--algo", str(xml)]) == 1
    err = capsys.readouterr().err
    assert (
        "does not compute all_reduce over 8 ranks: rank 0, chunk 0: missing contributions of ranks [4, 5, 6, 7]" in err
    )
    assert err.count("\n") == 1


def test_chakra_to_msccl_writes_real_offsets_that_verify(tmp_path, capsys):
    main(["algo", "export", "tree", "--collective", "all_reduce", "--npus", "6", "-o", str(tmp_path / "tree")])
    assert main(["convert", "chakra-to-msccl", str(tmp_path / "tree"), "-o", str(tmp_path / "tree.xml")]) == 0
    text = (tmp_path / "tree.xml").read_text()
    assert "etsim_offsets" not in text and 'srcoff="1"' in text and 'type="re"' in text
    capsys.readouterr()
    assert main(["convert", "msccl", str(tmp_path / "tree.xml")]) == 0
    assert "correct: all_reduce over 6 ranks" in capsys.readouterr().out


def test_chakra_to_msccl_says_when_offsets_are_placeholders(tmp_path, capsys):
    # The all-to-all's copy of the own piece is untimed: MSCCL-IR has no step for that.
    main(["algo", "export", "direct", "--collective", "all_to_all", "--npus", "4", "-o", str(tmp_path / "a2a")])
    capsys.readouterr()
    assert main(["convert", "chakra-to-msccl", str(tmp_path / "a2a"), "-o", str(tmp_path / "a2a.xml")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("etsim: warning: ") and "buffer offsets are placeholders" in err
    assert "untimed setup copies have no MSCCL-IR form" in err
    assert 'etsim_offsets="placeholder"' in (tmp_path / "a2a.xml").read_text()
    assert main(["convert", "msccl", str(tmp_path / "a2a.xml")]) == 0
    assert "cannot verify: no data annotations" in capsys.readouterr().out
