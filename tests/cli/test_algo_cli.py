import argparse

import pytest

from etsim.chakra import load_workload
from etsim.chakra.algorithm import SEND, algo_graph_from_trace
from etsim.cli import algo as algo_cli
from etsim.errors import ConfigError


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
        (["ring", "--collective", "all_reduce", "--npus", "0"], "at least 1"),
    ],
)
def test_export_errors(tmp_path, argv, match):
    with pytest.raises(ConfigError, match=match):
        run(["algo", "export", *argv, "-o", str(tmp_path / "x")])
    assert not list(tmp_path.iterdir())
