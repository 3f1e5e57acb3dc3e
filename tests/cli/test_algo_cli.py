import argparse

import pytest

from etsim.algo.family_graph import algo_graph_from_trace
from etsim.algo.graph import SEND
from etsim.chakra import load_workload
from etsim.cli import algo as algo_cli
from etsim.errors import ConfigError, EtsimWarning


def run(argv):
    """Run our sub-command through an argparse parser of its own (independent of COMMAND_MODULES)."""
    parser = argparse.ArgumentParser(prog="etsim")
    algo_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_list(capsys):
    assert run(["algo", "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert {"ring", "direct", "halving_doubling", "hd", "tree", "hierarchical"} <= lines.keys()
    assert "all_to_all" in lines["ring"] and "barrier" in lines["ring"]
    assert "gather" in lines["direct"] and "scatter" in lines["direct"]
    assert "all_to_all" not in lines["tree"]
    assert "takes --dims" in lines["hierarchical"]
    assert "alias of halving_doubling" in lines["hd"]


def test_export_ring(tmp_path, capsys):
    assert (
        run(["algo", "export", "ring", "--collective", "allreduce", "--npus", "4", "-o", str(tmp_path / "r.et")]) == 0
    )
    assert "wrote 4 files" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"r.{i}.et" for i in range(4)]
    graphs = [algo_graph_from_trace(t) for t in load_workload(tmp_path / "r").traces]
    for rank, g in enumerate(graphs):
        assert g.total_chunks == 4
        sends = [i for i, k in enumerate(g.kinds) if k == SEND]
        assert len(sends) == 6  # 2(p-1) steps
        assert {g.peers[i] for i in sends} == {(rank + 1) % 4}


def test_export_hierarchical_dims(tmp_path):
    assert (
        run(
            [
                "algo",
                "export",
                "hierarchical",
                "--collective",
                "all-reduce",
                "--npus",
                "8",
                "--dims",
                "2x4",
                "-o",
                str(tmp_path / "h"),
            ]
        )
        == 0
    )
    g = algo_graph_from_trace(load_workload(tmp_path / "h").traces[0])
    sends = [i for i, k in enumerate(g.kinds) if k == SEND]
    # dim 0 (size 2): 1 RS + 1 AG step of 4 chunks to rank 1; dim 1 (size 4): 3 + 3 steps of 1 chunk to rank 2.
    assert sorted((g.peers[i], g.chunks[i]) for i in sends) == [(1, 4.0)] * 2 + [(2, 1.0)] * 6


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["rnig", "--collective", "all_reduce", "--npus", "4"], r"unknown collective algorithm 'rnig'.*ring"),
        (["ring", "--collective", "allsum", "--npus", "4"], "unknown collective 'allsum'.*all_reduce"),
        (["ring", "--collective", "gather", "--npus", "4"], "does not implement gather"),
        (["halving_doubling", "--collective", "all_reduce", "--npus", "6"], "power-of-two"),
        (["hierarchical", "--collective", "all_reduce", "--npus", "6", "--dims", "4x8"], "4x8 covers 32"),
        (["hierarchical", "--collective", "all_reduce", "--npus", "6", "--dims", "4xy"], "expected sizes"),
        (["ring", "--collective", "all_reduce", "--npus", "8", "--dims", "2x4"], "takes no --dims"),
        (["ring", "--collective", "all_reduce", "--npus", "0"], "between 1 and 4,096"),
        (["ring", "--collective", "all_reduce", "--npus", "10000000"], "between 1 and 4,096 .* not 10,000,000"),
    ],
)
def test_export_errors(tmp_path, argv, match):
    with pytest.raises(ConfigError, match=match):
        run(["algo", "export", *argv, "-o", str(tmp_path / "x")])
    assert not list(tmp_path.iterdir())


# -- etsim algo verify ---------------------------------------------------------------------------


def verify(capsys, argv):
    capsys.readouterr()
    status = run(["algo", "verify", *argv])
    return status, capsys.readouterr().out.strip()


def test_verify_a_native_needs_collective_and_npus(capsys):
    status, out = verify(capsys, ["ring", "--collective", "all_reduce", "--npus", "6"])
    assert status == 0
    assert out == "ring: correct: all_reduce over 6 ranks, in place: all 36 output chunks hold what they should"
    status, out = verify(capsys, ["hierarchical", "--collective", "reduce_scatter", "--npus", "12", "--dims", "3x4"])
    assert status == 0 and "correct: reduce_scatter over 12 ranks" in out
    # What stops the check exits 3, "cannot verify" (it exited 1, which says the algorithm is wrong).
    for argv, said in (
        (["ring", "--npus", "4"], "say which collective to check with --collective"),
        (["ring", "--collective", "all_reduce"], "say for how many ranks with --npus"),
        (["hd", "--collective", "all_reduce", "--npus", "6"], "needs a power-of-two group size"),
        (["no_such_family_here"], "no such file"),
        (["ring", "--collective", "all_reduce", "--npus", "0"], "--npus must be between 1"),
        (["ring", "--collective", "bogus", "--npus", "4"], "unknown collective 'bogus'"),
    ):
        assert run(["algo", "verify", *argv]) == 3
        assert said in capsys.readouterr().err


def test_verify_a_family_reads_collective_and_size_from_its_files(tmp_path, capsys):
    run(["algo", "export", "direct", "--collective", "all_to_all", "--npus", "5", "-o", str(tmp_path / "a2a")])
    status, out = verify(capsys, [str(tmp_path / "a2a")])
    assert status == 0
    assert out.endswith(
        "correct: all_to_all over 5 ranks, out of place: all 25 output chunks hold what they should "
        "(with 5 untimed local copies the graphs declare)"
    )


def test_verify_a_wrong_family_exits_1_with_the_first_missing_piece(tmp_path, capsys):
    prefix = tmp_path / "ring"
    run(["algo", "export", "ring", "--collective", "all_reduce", "--npus", "4", "-o", str(prefix)])
    # Rank 2's last reduce-scatter reduction only costs time: the message it should add is dropped.
    wrong = wrong_family(prefix, rank=2, node="rs2_reduce")
    status, out = verify(capsys, [wrong])
    assert status == 1
    assert out == (
        f"{wrong}: WRONG: rank 0, chunk 2: missing contributions of ranks [0, 1, 3] (4 of 16 output chunks wrong)"
    )


def test_verify_without_annotations_exits_3(tmp_path, capsys):
    from etsim.chakra import TraceBuilder, write_workload

    traces = []
    for r in range(2):
        b = TraceBuilder()
        b.send(dst=1 - r, size=1024)
        b.recv(src=1 - r, size=1024)
        traces.append(b.build(rank=r))
    write_workload(traces, str(tmp_path / "plain"))
    with pytest.warns(EtsimWarning, match="records no collective type"):
        status, out = verify(capsys, [str(tmp_path / "plain"), "--collective", "all_reduce"])
    assert status == 3
    assert out.endswith(
        "cannot verify: no data annotations (the graphs say how much each node moves, not which chunks)"
    )


def wrong_family(prefix, *, rank: int, node: str) -> str:
    """A copy of the family at *prefix* whose rank *rank* node *node* has lost its data annotation."""
    from etsim.chakra import write_workload

    workload = load_workload(prefix)
    for n in workload.traces[rank].nodes:
        if n.name == node:
            keep = [a for a in n.attr if not a.name.startswith("data_")]
            del n.attr[:]
            n.attr.extend(keep)
    out = str(prefix) + "_wrong"
    write_workload(workload.traces, out)
    return out


def test_writers_take_the_buffer_size_or_say_the_files_are_size_free(tmp_path, capsys, repo, corpus) -> None:
    from etsim.cli import main

    def sizes(prefix):
        trace = load_workload(prefix).traces[0]
        return {trace.comm_size[i] for i, k in enumerate(trace.types) if k in (5, 6)}

    export = ["algo", "export", "ring", "--collective", "all_reduce", "--npus", "4"]
    assert main([*export, "-o", str(tmp_path / "a")]) == 0
    assert "note: the files give sizes as chunk counts only" in capsys.readouterr().out
    assert sizes(tmp_path / "a") == {None}
    assert main([*export, "--size", "4 MiB", "-o", str(tmp_path / "b")]) == 0
    assert "note:" not in capsys.readouterr().out and sizes(tmp_path / "b") == {1 << 20}
    assert main([*export, "--size", "1001", "-o", str(tmp_path / "c")]) == 1
    assert "--size: a buffer of 1001 bytes does not split into the algorithm's 4 chunks" in capsys.readouterr().err
    xml = corpus / "msccl" / "shipped" / "msccl-scheduler" / "ndv4" / "r48ll128.xml"  # 48 chunks per buffer
    assert main(["convert", "msccl", str(xml), "--size", "48 MiB", "-o", str(tmp_path / "m")]) == 0
    assert "note:" not in capsys.readouterr().out and None not in sizes(tmp_path / "m")
    topo = str(repo / "topologies" / "mesh4x4.yaml")
    assert main(["synth", "tacos", "--topology", topo, "--collective", "all_gather", "-o", str(tmp_path / "t")]) == 0
    assert "note:" not in capsys.readouterr().out and sizes(tmp_path / "t") == {(1 << 30) // 16}
