"""``flow`` against packet-level ``link`` (4 KiB packets, 512 B below 1 MiB) over the validation matrix.

The matrix and the accepted error per case live in ``scripts/validate_flow.py``, which prints the table of
``docs/network-models.md``: within 5% everywhere but the cases it names (arbitration: max-min fair flows against
FIFO packet queues; store-and-forward per packet at 64 KiB). The default suite runs the reduced matrix, ``-m slow``
the whole one.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("validate_flow", REPO / "scripts" / "validate_flow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VALIDATE = _script()


def _check(name: str, algorithm: str, size: int) -> None:
    row = VALIDATE.case(name, algorithm, size)
    assert abs(row["flow_err"]) <= VALIDATE.tolerance(name, algorithm, size), row


@pytest.mark.parametrize(("name", "algorithm", "size"), VALIDATE.matrix(quick=True))
def test_flow_tracks_packet_level_on_the_reduced_matrix(name: str, algorithm: str, size: int) -> None:
    _check(name, algorithm, size)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "algorithm", "size"), VALIDATE.matrix(quick=False))
def test_flow_tracks_packet_level_on_the_whole_matrix(name: str, algorithm: str, size: int) -> None:
    _check(name, algorithm, size)


def test_every_tolerance_names_a_case_of_the_matrix() -> None:
    assert set(VALIDATE.TOLERANCE) <= set(VALIDATE.matrix(quick=False))
    assert all(0.05 < tol < 0.5 for tol in VALIDATE.TOLERANCE.values())
