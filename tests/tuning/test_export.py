"""Exports: NCCL's tuner-plugin CSV and MSCCL-IR files with size windows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lxml import etree

from etsim.system.config import load_system_config
from etsim.system.rules import SelectionRule
from etsim.tuning import msccl_files, nccl_tuner_csv
from etsim.tuning.export import SIZE_MAX

KiB, MiB = 1 << 10, 1 << 20


def _rules(*items: dict) -> tuple[SelectionRule, ...]:  # type: ignore[type-arg]
    return load_system_config({"algorithms": list(items)}).algorithm_rules


def test_nccl_tuner_csv_format() -> None:
    rules = _rules(
        {"collective": "all_reduce", "group_size": 8, "max_bytes": "64 KiB", "algorithm": "tree"},
        {"collective": "all_reduce", "group_size": 8, "min_bytes": 65537, "algorithm": "ring"},
        {"collective": "all_gather", "group_size": [4, 8], "max_bytes": "1 MiB", "algorithm": "ring"},
        {"collective": "all_reduce", "group_size": 16, "algorithm": "direct"},
        {"collective": "all_to_all", "algorithm": "direct"},
        {"collective": "reduce_scatter", "group_size": "2..8", "algorithm": "ring"},
        {"collective": "reduce_scatter", "dimension": 1, "algorithm": "ring"},
        {"default": "ring"},
    )
    text, notes = nccl_tuner_csv(rules, ["made by a test"])
    lines = text.splitlines()
    assert lines[0] == "# made by a test"
    assert lines[1] == "# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"
    body = [line for line in lines if not line.startswith("#")]
    assert body == [
        f"allreduce,0,{64 * KiB},tree,simple,-1,-1,8",
        f"allreduce,65537,{SIZE_MAX},ring,simple,-1,-1,8",
        f"allgather,0,{4 * MiB},ring,simple,-1,-1,4",  # NCCL's nBytes of an all-gather is its output
        f"allgather,0,{8 * MiB},ring,simple,-1,-1,8",
        f"reducescatter,0,{SIZE_MAX},ring,simple,-1,-1,-1",
    ]
    for line in body:  # the plugin's parser: 8 comma-separated fields, integers where it reads integers
        fields = line.split(",")
        assert len(fields) == 8 and fields[0] in {"allreduce", "allgather", "reducescatter", "broadcast", "reduce"}
        assert int(fields[1]) <= int(fields[2]) <= SIZE_MAX and fields[3] in {"ring", "tree"}
        assert fields[4] == "simple" and all(int(f) >= -1 for f in fields[5:])
    joined = "\n".join(notes)
    assert "algorithms[3]" in joined and "no algorithm 'direct'" in joined
    assert "algorithms[4]" in joined and "no all_to_all rules" in joined
    assert "algorithms[5]" in joined and "group-size range" in joined
    assert "algorithms[6]" in joined and "dimension is not a key" in joined
    assert "algorithms[7]" in joined and "default rule" in joined


def test_a_forced_nccl_choice_exports_what_it_forces_and_never_an_open_protocol() -> None:
    rules = _rules(
        {"collective": "all_reduce", "max_bytes": "64 KiB", "algorithm": "nccl:Ring/LL/8"},
        {"collective": "all_reduce", "min_bytes": 65537, "max_bytes": "1 MiB", "algorithm": "nccl:Tree/LL128"},
        {"collective": "all_reduce", "min_bytes": 1048577, "algorithm": "nccl:Ring"},
    )
    text, notes = nccl_tuner_csv(rules)
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body == [f"allreduce,0,{64 * KiB},ring,ll,8,-1,-1", f"allreduce,65537,{MiB},tree,ll128,-1,-1,-1"]
    joined = "\n".join(notes)
    # NCCL's example plugin reads an open protocol as simple: nccl:Ring ran LL, LL128 or Simple by size, not that
    assert "algorithms[2]" in joined and "reads an open one as simple" in joined
    assert joined.count("runs 1 channel") == 1  # its plugin's reading of -1, noted once


def test_msccl_export_sets_the_window_and_keeps_every_other_byte(corpus: Path, tmp_path: Path) -> None:
    src = tmp_path / "ag.xml"
    shutil.copy(corpus / "msccl" / "generated" / "allgather_recdbl_n8_i1.xml", src)
    rules = (
        SelectionRule("ring", "a", "a", collective="all_gather", max_bytes=KiB),
        SelectionRule(str(src), "b", "b", collective="all_gather", min_bytes=KiB + 1, max_bytes=MiB),
        SelectionRule(str(src), "c", "c", collective="all_gather", min_bytes=MiB + 1),
    )
    paths, notes = msccl_files(rules, tmp_path / "out")
    assert [p.name for p in paths] == ["ag.r1.xml", "ag.r2.xml"]
    assert notes == ["1 rule(s) chose no MSCCL-IR file and have nothing to export as MSCCL-IR"]
    original = src.read_bytes()
    for path, (low, high) in zip(paths, [(8 * (KiB + 1), 8 * MiB), (8 * (MiB + 1), 0)], strict=True):
        root = etree.fromstring(path.read_bytes())
        assert (root.get("minBytes"), root.get("maxBytes")) == (str(low), str(high))  # buffer bytes: 8 GPUs' output
        head = original.index(b">") + 1
        written = path.read_bytes()
        assert written[written.index(b">") + 1 :] == original[head:]
        assert written.startswith(original[: head - 1])  # the attributes were appended to the <algo> tag
    # An XML that already declares a window keeps its attribute order; only the values change.
    again, _ = msccl_files(
        (SelectionRule(str(paths[0]), "d", "d", collective="all_gather", max_bytes=5),), tmp_path / "o2"
    )
    text = again[0].read_bytes()
    assert text.replace(b'minBytes="0" maxBytes="40"', b'minBytes="8200" maxBytes="8388608"') == paths[0].read_bytes()


def test_msccl_export_names_a_missing_file(tmp_path: Path) -> None:
    from etsim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"nope\.xml"):
        msccl_files((SelectionRule(str(tmp_path / "nope.xml"), "x", "x", collective="all_reduce"),), tmp_path / "o")
