"""Progress of long jobs: shown on stderr after a delay, redrawn on a terminal, plain lines elsewhere, never with -q."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from etsim import progress
from etsim.chakra import CollectiveType, write_workload
from etsim.cli import main
from etsim.producers import collective_workload


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nobody_watching_costs_nothing_visible() -> None:
    watch = progress.stage("quiet", 3, "steps")
    for _ in range(3):
        watch.advance()
    assert watch.done == 3 and watch.display is None


def test_plain_lines_off_a_terminal_and_nothing_before_the_delay() -> None:
    stream = io.StringIO()
    with progress.shown_on(stream, delay=0.0):
        watch = progress.stage("reading x.et", 10, "files")
        watch.advance(3)
        watch.advance()  # within PLAIN_INTERVAL of the first line: not drawn
    assert stream.getvalue() == "etsim: reading x.et: 3/10 files, 0 s\n"
    late = io.StringIO()
    with progress.shown_on(late, delay=60.0):
        progress.stage("fast job").advance()
    assert late.getvalue() == ""


def test_a_terminal_line_is_redrawn_and_erased() -> None:
    stream = Terminal()
    with progress.shown_on(stream, delay=0.0):
        progress.stage("tuning", 4, "points").advance()
    text = stream.getvalue()
    assert text.startswith("\rtuning: 1/4 points, 0 s") and text.endswith("\r" + " " * 110 + "\r")


@pytest.fixture
def shown_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "PLAIN_INTERVAL", 0.0)


def test_run_shows_its_stages_on_stderr_and_not_with_q(
    shown_at_once: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 64), tmp_path / "ar")
    assert main(["run", str(tmp_path / "ar"), "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(f"etsim: reading {tmp_path / 'ar'}: 1/64 files")
    assert "etsim" not in out.split('"finish_ns"')[0]  # machine output stays clean
    assert main(["run", str(tmp_path / "ar"), "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("finish time")


def test_synthesis_tuning_and_verification_report_stages(
    shown_at_once: None, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topo = str(repo / "topologies" / "mesh4x4.yaml")
    assert main(["synth", "tacos", "--topology", topo, "--collective", "all_gather", "-o", str(tmp_path / "t")]) == 0
    assert "etsim: synthesising all_gather on mesh4x4: 1/1 runs" in capsys.readouterr().err
    assert main(["algo", "verify", str(tmp_path / "t")]) == 0
    assert "etsim: verifying all_gather over 16 ranks" in capsys.readouterr().err
