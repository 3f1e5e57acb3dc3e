"""The trace tools on the command line: output, exit codes, and no tracebacks on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from etsim.chakra import load_workload, validate_workload
from etsim.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_workload_gen_inspect_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = str(tmp_path / "ar")
    code, out, _ = run(
        capsys, "workload", "gen", "collective", "--type", "all_gather", "--size", "1 MiB", "--npus", "4", "-o", prefix
    )
    assert code == 0 and "ar.3.et" in out
    code, out, _ = run(capsys, "inspect", prefix, "--json")
    data = json.loads(out)
    assert code == 0 and len(data) == 4
    assert data[2]["collectives"] == {"all_gather": {"1048576": 1}}
    code, _, err = run(capsys, "validate", f"{prefix}.et")
    assert code == 0 and "OK: 4 rank(s)" in err


def test_validate_reports_errors_with_exit_1(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", str(corpus / "chakra" / "generator_npus4" / "one_comm_recv_node"))
    assert code == 1
    assert "one_comm_recv_node.2.et, rank 2: node" in out and "receive without comm_src" in out
    assert "FAILED" in err


def test_validate_refuses_a_negative_max(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "workload", "gen", "sendrecv", "--size", "64", "--npus", "2", "-o", str(tmp_path / "p"))
    code, _, err = run(capsys, "validate", "--max", "-1", str(tmp_path / "p"))
    assert code == 1 and err == "etsim: error: --max must be >= 0, got -1\n"  # (an IndexError traceback before)


def test_jsonize_and_visualize(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = corpus / "chakra" / "generator_npus4" / "ALL_REDUCE.0.et"
    code, out, _ = run(capsys, "jsonize", str(src))
    assert code == 0 and out == (corpus / "chakra" / "generator_npus4" / "json" / "ALL_REDUCE.0.json").read_text()
    code, _, _ = run(capsys, "jsonize", "--array", str(src), "-o", str(tmp_path / "a.json"))
    assert code == 0 and len(json.loads((tmp_path / "a.json").read_text())) == 2
    code, out, _ = run(
        capsys,
        "visualize",
        str(corpus / "chakra" / "generator_npus4" / "two_comp_nodes_dependent"),
        "--rank",
        "3",
        "-o",
        str(tmp_path / "g.dot"),
    )
    assert code == 0 and "->" in (tmp_path / "g.dot").read_text()
    code, _, err = run(capsys, "visualize", str(src), "--rank", "5", "-o", str(tmp_path / "g.dot"))
    assert code == 1 and "--rank 5" in err


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(b"\xff\xff\xff\xff\xff\xff", "longer than 5 bytes"), (b"\x1f\x8bnot-gzip", "corrupt gzip"), (b"", "empty file")],
)
def test_bad_files_give_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, fragment: str
) -> None:
    bad = tmp_path / "bad.et"
    bad.write_bytes(content)
    for command in ("inspect", "validate", "jsonize"):
        code, _, err = run(capsys, command, str(bad))
        assert code == 1
        assert err.startswith("etsim: error: ") and fragment in err and "Traceback" not in err


def test_missing_rank_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "workload", "gen", "sendrecv", "--size", "64", "--npus", "3", "-o", str(tmp_path / "p"))
    (tmp_path / "p.1.et").unlink()
    code, _, err = run(capsys, "inspect", str(tmp_path / "p"))
    assert code == 1 and "ranks 1 missing" in err


def test_bad_generator_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys,
        "workload",
        "gen",
        "collective",
        "--type",
        "all_reduce",
        "--size",
        "3 parsecs",
        "--npus",
        "2",
        "-o",
        str(tmp_path / "x"),
    )
    assert code == 1 and "--size" in err
    code, _, err = run(
        capsys,
        "workload",
        "gen",
        "dp",
        "--npus",
        "0",
        "--layers",
        "2",
        "--grad-size",
        "1 KiB",
        "-o",
        str(tmp_path / "x"),
    )
    assert code == 1 and "--npus must be >= 1" in err


def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "etsim",
            "workload",
            "gen",
            "dp",
            "--npus",
            "2",
            "--layers",
            "2",
            "--grad-size",
            "1 MiB",
            "-o",
            str(tmp_path / "dp"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert validate_workload(load_workload(tmp_path / "dp")) == []
