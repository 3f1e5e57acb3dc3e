"""``etsim tune`` and ``etsim workload gen moe`` from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.cli import main
from etsim.system.config import load_system_config


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_tune_writes_table_csv_and_exports(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "t.yaml"
    code, out, err = run(
        capsys, "tune", "--topology", str(repo / "topologies" / "ring8.yaml"), "--sizes", "1KiB..4MiB",
        "--candidates", "ring,direct,tree", "--jobs", "1", "-o", str(table), "--plot", "none",
        "--export", "nccl-tuner", str(tmp_path / "nccl.conf"), "--export", "msccl", str(tmp_path / "xml"),
    )  # fmt: skip
    assert code == 0, err
    assert f"wrote {table}" in out and "all_reduce" in out
    config = load_system_config(table)
    assert config.algorithm_rules and config.algorithm_rules[-1].is_default
    assert (tmp_path / "t.csv").read_text().startswith("collective,bytes,")
    assert "allreduce," in (tmp_path / "nccl.conf").read_text()
    assert "note:" in err and "NCCL has no algorithm 'direct'" in err


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--export", "nccl-tuner", "{d}"], "--export nccl-tuner {d}: a directory"),
        (["--export", "msccl", "{f}"], "--export msccl {f}: a file"),
        (["--csv", "{d}"], "--csv {d}: a directory"),
    ],
)
def test_an_unwritable_output_is_refused_before_tuning(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    """An export to a directory failed after the whole tuning ran (its results lost); now refused first."""
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("")
    names = {"d": str(tmp_path / "d"), "f": str(tmp_path / "f")}
    code, out, err = run(
        capsys, "tune", "--topology", str(repo / "topologies" / "ring8.yaml"), "--sizes", "1KiB",
        "--candidates", "ring", "-o", str(tmp_path / "t.yaml"), "--plot", "none",
        *(a.format(**names) for a in extra),
    )  # fmt: skip
    assert code == 1 and said.format(**names) in err
    assert not (tmp_path / "t.yaml").exists() and out == ""


def test_tune_workload_reports_the_comparison(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "tune", "--topology", str(repo / "topologies" / "ring4_switch4.yaml"), "--workload",
        str(repo / "workloads" / "moe_16npus_2layers"), "--candidates", "ring,direct", "--jobs", "1",
        "-o", str(tmp_path / "moe.yaml"), "--plot", "none",
    )  # fmt: skip
    assert code == 0, err
    assert "finish time with the tuned table vs each candidate alone" in out
    assert "tuned is" in out and "% faster" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--export", "mpi", "x"], "--export: unknown format 'mpi'"),
        (["--sizes", "3KiB..8KiB"], "a range runs over powers of two"),
        (["--collective", "allreduce_x"], "--collective: unknown collective 'allreduce_x'"),
        (["--workload", "w", "--collective", "all_reduce"], "--workload tunes the calls the workload makes"),
        (["--workload", "w", "--sizes", "4KiB"], "at their sizes; do not give --collective, --group-sizes or --sizes"),
        (["--jobs", "0"], "--jobs must be >= 1"),
        (["--candidates", "no/such/*.xml"], "matches no file"),
        (["--group-sizes", "4,x"], "--group-sizes: expected comma-separated integers"),
    ],
)
def test_tune_bad_input_is_one_line(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = run(capsys, "tune", "--topology", str(repo / "topologies" / "ring8.yaml"), "-o",
                       str(tmp_path / "t.yaml"), *args)  # fmt: skip
    assert code == 1
    assert err.startswith("etsim: error:") and message in err and err.count("\n") == 1


def test_tune_skips_a_candidate_that_serves_nothing(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "tune", "--topology", str(repo / "topologies" / "ring8.yaml"), "--collective", "all_to_all",
        "--sizes", "1MiB", "--candidates", "tree", "--jobs", "1", "-o", str(tmp_path / "t.yaml"),
    )  # fmt: skip
    assert code == 1
    assert "etsim: error: no candidate could serve any tuned point" in err and "does not implement all_to_all" in err


def test_workload_gen_moe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "workload", "gen", "moe", "--npus", "8", "--ep-size", "4", "--layers", "1",
                       "--token-size", "1 MiB", "--dense-grad-sizes", "4 KiB,1 MiB",
                       "-o", str(tmp_path / "m"))  # fmt: skip
    assert code == 0 and "wrote 8 file(s)" in out
    code, _, err = run(capsys, "workload", "gen", "moe", "--npus", "8", "--ep-size", "3", "--layers", "1",
                       "--token-size", "1 MiB", "--dense-grad-sizes", "4 KiB", "-o", str(tmp_path / "m"))  # fmt: skip
    assert code == 1 and "--ep-size 3 must divide --npus 8" in err


@pytest.mark.parametrize(
    ("sig", "code", "said"), [("SIGINT", 130, "etsim: interrupted"), ("SIGTERM", 143, "terminated")]
)
def test_ctrl_c_stops_a_long_tune_at_once(tmp_path: Path, sig: str, code: int, said: str) -> None:
    """A 20-s tuning (every size to 1 GiB on 64 NPUs), started as a shell's background job (SIGINT ignored)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parents[2]
    args = ["tune", "--topology", str(repo / "topologies" / "mesh8x8.yaml"), "--sizes", "1KiB..1GiB"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "etsim", *args, "--candidates", "ring,direct,tree,hd", "-o", str(tmp_path / "t.yaml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    time.sleep(4)
    assert proc.poll() is None
    proc.send_signal(getattr(signal, sig))
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=30)  # (returns once every process holding stderr, workers too, is gone)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"etsim tune still running 30 s after {sig}")
    assert time.monotonic() - t0 < 5 and proc.returncode == code
    assert err.decode().rstrip().endswith(said) and "Traceback" not in err.decode()
    assert not (tmp_path / "t.yaml").exists()
