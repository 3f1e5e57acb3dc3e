"""The ``nccl`` algorithm against real ``nccl-tests`` tables: the figures ``docs/nccl.md`` records, re-run.

``scripts/validate_nccl.py --write`` records per table each row's error in ``docs/nccl-validation.json``. Here the
tables are simulated again and every row must give the recorded error (the model has not drifted from what the
docs say) and every recorded table must be in ``docs/nccl.md`` with its plot. The default suite re-runs the tables
that simulate in about a second; ``-m slow`` re-runs all of them. The tables are ``../shared/reference/nccl-tests``
(skipped without it, an error where the corpus is required, as in CI).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
#: Set (CI does) to make missing tables an error, as for the corpus (``tests/conftest.py``).
REQUIRE_ENV = "ETSIM_REQUIRE_CORPUS"
CORPUS_REQUIRED = os.environ.get(REQUIRE_ENV, "") not in ("", "0")
TABLES = REPO.parent / "shared" / "reference" / "nccl-tests" / "tables.jsonl"
RECORD = REPO / "docs" / "nccl-validation.json"
#: Tables of more GPUs than this run only with ``-m slow``.
QUICK_GPUS = 16


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("validate_nccl", REPO / "scripts" / "validate_nccl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


VALIDATE = _script()


def _tables() -> list[dict[str, Any]]:
    if not TABLES.is_file():
        return []
    return VALIDATE.load_tables(TABLES)


def _require_tables() -> None:
    if not TABLES.is_file():
        message = f"the nccl-tests tables are not at {TABLES} (put ../shared beside the clone)"
        if CORPUS_REQUIRED:
            pytest.fail(f"{message}; {REQUIRE_ENV} is set, so they must be", pytrace=False)
        pytest.skip(message)


def _params() -> list[Any]:
    out = []
    for table in _tables():
        marks = [] if table["gpus"] <= QUICK_GPUS else [pytest.mark.slow]
        out.append(pytest.param(table, id=table["id"], marks=marks))
    return out or [pytest.param(None, id="no-tables")]


@pytest.mark.parametrize("table", _params())
def test_each_table_gives_the_recorded_errors(table: dict[str, Any] | None) -> None:
    _require_tables()
    assert table is not None
    recorded = json.loads(RECORD.read_text())[table["id"]]
    result = VALIDATE.run_table(table)
    errors = [row["error"] for row in result["rows"]]
    assert errors == pytest.approx(recorded["errors"], abs=1e-4), table["id"]
    within, total, _ = VALIDATE.summary(result["rows"])
    assert (within, total) == (recorded["within"], recorded["rows"])
    assert [row["choice"] for row in result["rows"]] == recorded["choices"]


def test_every_table_is_recorded_and_listed_in_the_docs_with_its_plot() -> None:
    _require_tables()
    recorded = json.loads(RECORD.read_text())
    doc = (REPO / "docs" / "nccl.md").read_text()
    for table in _tables():
        assert table["id"] in recorded, table["id"]
        assert f"`{table['id']}`" in doc and f"figures/nccl/{table['id']}.png" in doc, table["id"]
        assert (REPO / "docs" / "figures" / "nccl" / f"{table['id']}.png").is_file()


def test_the_docs_summary_is_the_record() -> None:
    _require_tables()
    recorded = json.loads(RECORD.read_text())
    within = sum(r["within"] for r in recorded.values())
    rows = sum(r["rows"] for r in recorded.values())
    doc = (REPO / "docs" / "nccl.md").read_text()
    assert f"**All tables: {within} of {rows} rows within tolerance" in doc


def test_settings_the_sources_launch_file_states_are_read_where_the_table_lacks_them() -> None:
    table = {"id": "gb200-128g-all_reduce-oci-oke-2rack", "gpu": "NVIDIA GB200", "gpus": 128, "gpus_per_node": 4,
             "nodes": 32, "intra": "NVLink5 within each NVL72 rack (MNNVL)", "inter": "OCI RDMA cluster network",
             "nccl_version": "2.29.2+cuda13.1", "env": {}, "notes": "", "collective": "all_reduce",
             "rows": []}  # fmt: skip
    case = VALIDATE.describe(table)
    assert case.system["nccl"]["nvls"] is False
    assert any("BM.GPU.GB200-v3.4.yaml" in flag and "NCCL_NVLS_ENABLE=0" in flag for flag in case.flags)
    # a table's own environment wins over the launch file's
    case = VALIDATE.describe({**table, "env": {"NCCL_NVLS_ENABLE": "1"}})
    assert "nvls" not in case.system["nccl"]


def test_the_mapping_reads_metadata_only() -> None:
    """A table's hardware and settings come from what its source states, never from its rows."""
    table = {"id": "t", "gpu": "NVIDIA H100 80GB HBM3", "gpus": 32, "gpus_per_node": 8, "nodes": 4,
             "intra": "NVLink4 via NVSwitch", "inter": "InfiniBand NDR, 8 x ConnectX-7 400 Gb/s per node",
             "nccl_version": "2.21.5", "env": {"NCCL_ALGO": "Ring", "NCCL_MIN_CTAS": "16"},
             "notes": "mpirun -np 32", "collective": "all_reduce", "rows": []}  # fmt: skip
    case = VALIDATE.describe(table)
    assert case.topology["gpu"] == "h100" and case.topology["intra"] == "nvswitch"
    assert case.topology["nics_per_node"] == 8 and case.topology["nic_bandwidth"] == "50 GB/s"
    assert case.topology["fabric"] == "ib" and case.system["nccl"] == {
        "version": "2.21", "gpus_per_process": 1, "algo": "Ring", "min_ctas": 16
    }  # fmt: skip
    rack = {**table, "gpu": "NVIDIA GB200", "gpus": 128, "gpus_per_node": 4, "nodes": 32,
            "intra": "NVLink5 within each NVL72 rack (MNNVL)", "inter": "not stated"}  # fmt: skip
    case = VALIDATE.describe(rack)
    assert case.topology["gpus_per_node"] == 64 and any("racks" in flag for flag in case.flags)
    assert any("not stated" in flag for flag in case.flags)


def test_calls_back_to_back_overlap_only_on_a_chain_from_a_root() -> None:
    """What nccl-tests' mean of calls in a row measures: a chain's period (broadcast, reduce: the root starts the
    next call while the last ranks still receive), one call's time for collectives every rank works through."""
    from etsim.network import load_network
    from etsim.simulation import simulate
    from etsim.system.config import load_system_config

    table = {"id": "t", "gpu": "NVIDIA A100-SXM4-80GB", "gpus": 8, "gpus_per_node": 8, "nodes": 1,
             "intra": "NVLink3 via NVSwitch", "inter": "", "nccl_version": "2.18", "env": {},
             "collective": "all_reduce", "rows": []}  # fmt: skip
    case = VALIDATE.describe(table)
    network, system = load_network(case.topology), load_system_config(case.system)

    def finish(collective: str, calls: int) -> float:
        workload = VALIDATE._workload(collective, 8 * VALIDATE.MiB, 8, calls)
        return float(simulate(workload, topology=network, system=system).finish_ns)

    assert finish("all_reduce", 3) == pytest.approx(3 * finish("all_reduce", 1), rel=1e-12)
    one, two, three = finish("broadcast", 1), finish("broadcast", 2), finish("broadcast", 3)
    # Each further call costs the chain's period, well under one call's latency, and every one the same: NCCL's
    # root does not wait for its receivers to launch the call (no barrier: NcclCall.synchronises_itself).
    assert two - one == pytest.approx(three - two, rel=1e-9)
    assert two - one < 0.4 * one
    assert set(VALIDATE.ROOTED) == {"broadcast", "reduce"}
    assert VALIDATE.ITERS == 20  # nccl-tests' default -n


def test_the_script_refuses_a_missing_tables_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = sys.argv
    sys.argv = ["validate_nccl.py", "--tables", str(tmp_path / "none.jsonl")]
    try:
        assert VALIDATE.main() == 2
    finally:
        sys.argv = argv
    assert "no tables at" in capsys.readouterr().err
