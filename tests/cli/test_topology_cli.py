import json
from pathlib import Path

import pytest

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def run_cli(argv):
    """Run through the real ``etsim`` main: a CLI that does not import fails these tests."""
    from etsim.cli import main

    return main(argv)


def test_show_text(capsys):
    assert run_cli(["topology", "show", str(TOPOLOGIES / "torus4x4.yaml")]) == 0
    out = capsys.readouterr().out
    assert "NPUs            16" in out
    assert "links           64 directed" in out
    assert "bisection       400 GB/s (closed form)" in out
    assert "diameter        4 hops" in out


def test_show_json(capsys):
    assert run_cli(["topology", "show", "--json", str(TOPOLOGIES / "ring8_switch8.yaml")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["npus"] == 64 and info["switches"] == 8 and info["links"] == 256
    assert info["bisection_bandwidth_bytes_per_ns"] == 1600.0
    assert info["diameter_hops"] == 6
    assert [d["kind"] for d in info["dims"]] == ["ring", "switch"]


def test_show_graph_uses_min_cut(capsys):
    assert run_cli(["topology", "show", "--json", str(TOPOLOGIES / "graph8_two_switches.yaml")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["bisection_method"] == "min cut between rank halves"
    assert info["bisection_bandwidth_bytes_per_ns"] == 300.0
    assert info["failed_links"] == [[3, "s0"], ["s0", 3]]


def test_show_model_block(capsys):
    assert run_cli(["topology", "show", str(TOPOLOGIES / "ring8_link_model.yaml")]) == 0
    assert "link (packet_size=64 KiB)" in capsys.readouterr().out


def test_bad_file_is_an_error_naming_file_and_key(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ring\nnpus: 8\nbandwidth: 50 GB\nlatency: 500 ns\n")
    assert run_cli(["topology", "show", str(bad)]) == 1
    captured = capsys.readouterr()
    assert f"etsim: error: {bad}: bandwidth: unknown bandwidth unit 'GB'" in captured.out + captured.err


def test_show_requires_file():
    with pytest.raises(SystemExit):
        run_cli(["topology", "show"])
