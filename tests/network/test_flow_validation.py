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


@pytest.mark.slow
def test_the_documented_validation_table_is_the_matrix() -> None:
    """docs/network-models.md's error table and its summary, from every case of the matrix (about 6 min)."""
    import re
    import statistics

    rows = [VALIDATE.case(*c) for c in VALIDATE.matrix(quick=False)]
    text = (REPO / "docs" / "network-models.md").read_text()
    sizes = {"64 KiB": 64 << 10, "1 MiB": 1 << 20, "16 MiB": 16 << 20, "64 MiB": 64 << 20}
    by_case = {(r["topology"], r["algorithm"], r["size"]): r["flow_err"] for r in rows}
    cells = 0
    for line in text.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if len(parts) != 6 or not re.fullmatch(r"\*{0,2}[+-][\d.]+%\*{0,2}", parts[2]):
            continue
        for size, cell in zip(sizes.values(), parts[2:], strict=True):
            err = by_case[parts[0], parts[1], size]
            shown = f"{100 * err:+.1f}%"
            assert cell == (f"**{shown}**" if abs(err) > 0.05 else shown), (parts[0], parts[1], size)
            cells += 1
    assert cells == len(rows)

    def share(key: str) -> tuple[int, str]:
        errors = [abs(r[f"{key}_err"]) for r in rows]
        return sum(e <= 0.05 for e in errors), f"{100 * statistics.median(errors):.1f}"

    quoted = re.search(
        r"within 5% on \*\*(\d+) of (\d+)\*\* cases \(median \|error\| ([\d.]+)%\), against (\d+) for "
        r"store-and-forward `link`\s+\(median ([\d.]+)%, up to \+(\d+)%.*?\) and (\d+) for `analytical` "
        r"\(median ([\d.]+)%, up to −(\d+)%\)",
        text,
    )
    assert quoted is not None
    flow, link, analytical = share("flow"), share("link"), share("analytical")
    assert quoted.groups() == (
        str(flow[0]), str(len(rows)), flow[1], str(link[0]), link[1],
        f"{100 * max(r['link_err'] for r in rows):.0f}", str(analytical[0]), analytical[1],
        f"{-100 * min(r['analytical_err'] for r in rows):.0f}",
    )  # fmt: skip
    big = [r for r in rows if r["size"] >= 16 << 20]
    large = re.search(r"At 16 MiB and more `flow` is within 5% on (\d+) of (\d+) cases", text)
    assert large is not None and large.groups() == (str(sum(abs(r["flow_err"]) <= 0.05 for r in big)), str(len(big)))
    readme = (REPO / "README.md").read_text()
    assert f"Within 5% of packet-level `link` on {flow[0]} of {len(rows)} validation cases" in readme
