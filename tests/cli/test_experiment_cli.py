"""`etsim experiment run|show|plot` and `etsim run --config` on the command line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from etsim.cli import main

RING8 = "kind: ring\nnpus: 8\nbandwidth: 50 GB/s\nlatency: 500 ns\n"


def _experiment(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "ring8.yaml").write_text(RING8)
    path = tmp_path / "e.yaml"
    path.write_text(
        textwrap.dedent(
            """
            name: cli
            workload: {generate: collective, type: all_gather, npus: 8, size: 64 KiB}
            topology: ring8.yaml
            model: analytical
            sweep:
              algo: [ring, direct, nosuchalgo]
            """
        )
        + extra
    )
    return path


def test_show_lists_points_without_running(tmp_path: Path, capsys) -> None:
    path = _experiment(tmp_path)
    assert main(["experiment", "show", str(path), "--only", "algo=direct"]) == 0
    out = capsys.readouterr().out
    assert "experiment cli: 1 of 3 points (algo (3))" in out
    assert "0001   direct  analytical" in out
    assert not (tmp_path / "results").exists()


def test_run_records_a_failing_point_and_exits_1(tmp_path: Path, capsys, monkeypatch) -> None:
    path = _experiment(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "run", str(path), "--jobs", "2"]) == 1
    captured = capsys.readouterr()
    assert "experiment cli: 3 points, ran 3" in captured.out and "2 ok, 1 failed" in captured.out
    assert "etsim: 1 of 3 points failed" in captured.err
    csv = (tmp_path / "results" / "cli" / "results.csv").read_text().splitlines()
    assert csv[0].startswith(
        "point,algo,network_model,status,finish_ns,compute_ns,comm_ns,exposed_comm_ns,all_gather_ns"
    )
    assert csv[3].startswith("0002,nosuchalgo,analytical,failed,,") and "nosuchalgo" in csv[3].split(",", 5)[5]
    # Progress lines go to stderr when it is not a terminal.
    assert "etsim: 3/3 points (2 ok, 1 failed)" in captured.err


def test_bad_input_is_an_error_line_not_a_traceback(tmp_path: Path) -> None:
    path = _experiment(tmp_path, "plots: [{x: algo, y: finished_ns}]\n")
    result = subprocess.run(
        [sys.executable, "-m", "etsim", "experiment", "run", str(path), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"etsim: error: {path}: plots[0].y: 'finished_ns' is not a result column")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()  # nothing ran


def test_option_errors(tmp_path: Path, capsys) -> None:
    path = _experiment(tmp_path)
    assert main(["experiment", "run", str(path), "--jobs", "0", "--out", str(tmp_path / "o")]) == 1
    assert "--jobs must be >= 1" in capsys.readouterr().err
    assert main(["experiment", "run", str(path), "--only", "algo=tree", "--out", str(tmp_path / "o")]) == 1
    assert "algo has no value 'tree'; values: ring, direct, nosuchalgo" in capsys.readouterr().err
    assert main(["run", "--config", str(path)]) == 1
    assert "--config takes one point; this file has 3" in capsys.readouterr().err
    assert main(["run", "--config", str(path), "--chunks", "2"]) == 1
    assert "drop --chunks" in capsys.readouterr().err
    assert main(["run"]) == 1
    assert "give a WORKLOAD, or --config FILE" in capsys.readouterr().err
