"""Shipped workloads are exactly what the generator script writes, and they validate cleanly."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from etsim.chakra import load_workload, validate_workload
from etsim.cli import main


def test_shipped_workloads_regenerate_identically(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["gen_workloads.py", str(tmp_path)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(repo / "scripts" / "gen_workloads.py"), run_name="__main__")
    assert done.value.code == 0
    fresh = sorted(p.name for p in tmp_path.glob("*.et"))
    shipped = sorted(p.name for p in (repo / "workloads").glob("*.et"))
    assert fresh == shipped and fresh
    for name in fresh:
        assert (tmp_path / name).read_bytes() == (repo / "workloads" / name).read_bytes(), name


def shipped_families(repo: Path) -> list[Path]:
    return sorted({p.parent / p.name.split(".")[0] for p in (repo / "workloads").glob("*.et")})


def test_every_shipped_workload_validates_and_inspects(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    families = shipped_families(repo)
    assert len(families) >= 6
    for family in families:
        assert validate_workload(load_workload(family)) == [], family
        assert main(["inspect", str(family)]) == 0
    capsys.readouterr()
