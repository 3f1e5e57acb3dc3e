import argparse
import json
import re

import pytest

from etsim.algo.family_graph import algo_graph_from_trace
from etsim.chakra import CollectiveType, load_workload, write_workload
from etsim.cli import main
from etsim.cli import synth as synth_cli
from etsim.errors import ConfigError
from etsim.producers import collective_workload


def run(argv):
    """Run our sub-command through an argparse parser of its own (independent of COMMAND_MODULES)."""
    parser = argparse.ArgumentParser(prog="etsim")
    synth_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


def number_ns(text, label):
    m = re.search(rf"^{label}\s+.*\(([0-9.e+]+) ns\)", text, re.M)
    assert m, text
    return float(m.group(1))


def test_all_gather_on_a_shipped_mesh(tmp_path, capsys):
    out = tmp_path / "ag"
    argv = ["synth", "tacos", "--topology", "topologies/mesh4x4.yaml", "--collective", "all_gather"]
    assert run([*argv, "--size", "16 MiB", "--runs", "4", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "16 NPUs, 48 logical links" in text and "1 MiB" in text
    assert "lower bound" in text and "1.0000x" in text  # a 4x4 mesh reaches the chunk-step bound
    assert re.search(r"synthesis\s+[0-9.]+ s wall, 240 transfers, best of 4 runs", text)
    assert number_ns(text, "collective time") == pytest.approx(8 * (500 + 2**20 / 50), rel=1e-5)
    graphs = [algo_graph_from_trace(t) for t in load_workload(out).traces]
    assert len(graphs) == 16 and all(g.total_chunks == 16 for g in graphs)


def test_printed_time_is_what_etsim_run_measures(tmp_path, capsys):
    """The whole loop on the command line: synthesise, generate a workload, simulate with --algo."""
    algo, work = tmp_path / "ar", tmp_path / "w"
    topo = "topologies/torus4x4.yaml"
    assert (
        main(
            [
                "synth",
                "tacos",
                "--topology",
                topo,
                "--collective",
                "all_reduce",
                "--chunks-per-npu",
                "2",
                "--size",
                "32 MiB",
                "-o",
                str(algo),
            ]
        )
        == 0
    )
    synthesised = number_ns(capsys.readouterr().out, "collective time")
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 32 << 20, 16), str(work))
    json_out = tmp_path / "r.json"
    assert (
        main(
            [
                "run",
                str(work),
                "--topology",
                topo,
                "--model",
                "link",
                "--algo",
                str(algo),
                "--json",
                str(json_out),
                "-q",
            ]
        )
        == 0
    )
    measured = json.loads(json_out.read_text())
    assert measured["finish_ns"] == pytest.approx(synthesised, rel=1e-5)


def test_group_and_failures(tmp_path, capsys):
    topo = tmp_path / "t.yaml"
    topo.write_text("kind: mesh\nshape: [4, 4]\nbandwidth: 50 GB/s\nlatency: 500 ns\nfailed: [{npu: 15}]\n")
    assert (
        run(["synth", "tacos", "--topology", str(topo), "--collective", "reduce_scatter", "-o", str(tmp_path / "a")])
        == 0
    )
    assert "15 NPUs" in capsys.readouterr().out
    assert (
        run(
            [
                "synth",
                "tacos",
                "--topology",
                str(topo),
                "--collective",
                "all_gather",
                "--group",
                "0-3,4-7",
                "-o",
                str(tmp_path / "g"),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "8 NPUs" in text and "wrote 8 files" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--group", "0,0"], "twice"),
        (["--group", "a-b"], "expected ranks"),
        (["--group", "0,5,10"], "cut off"),
        (["--chunks-per-npu", "0"], ">= 1"),
        (["--runs", "0"], ">= 1"),
        (["--size", "lots"], "size"),
    ],
)
def test_errors(tmp_path, capsys, extra, message):
    argv = [
        "synth",
        "tacos",
        "--topology",
        "topologies/mesh4x4.yaml",
        "--collective",
        "all_gather",
        "-o",
        str(tmp_path / "x"),
        *extra,
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("etsim: error:") and message in err


def test_parse_group():
    assert synth_cli.parse_group("0-2, 7") == [0, 1, 2, 7]
    with pytest.raises(ConfigError):
        synth_cli.parse_group("3-1")


def test_an_empty_group_is_refused_not_taken_for_every_npu(tmp_path, capsys):
    """`--group ''` (a variable that expanded to nothing) synthesised for every NPU, silently."""
    topo = tmp_path / "t.yaml"
    topo.write_text("kind: mesh\nshape: [2, 2]\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    args = ["synth", "tacos", "--topology", str(topo), "--collective", "all_gather", "--group", "", "-o"]
    assert main([*args, str(tmp_path / "a")]) == 1
    assert "--group '': no ranks" in capsys.readouterr().err
    assert not list(tmp_path.glob("a*"))
