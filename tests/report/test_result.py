"""The Result document: the documented JSON keys and the table, from a real run."""

from __future__ import annotations

import json

from etsim.chakra import CollectiveType, Workload
from etsim.network import ring
from etsim.producers import collective_workload
from etsim.simulation import simulate


def _result():  # type: ignore[no-untyped-def]
    workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4))
    return simulate(workload, topology=ring(4, 50.0, 500.0), model="link")


def test_json_has_the_documented_keys() -> None:
    data = json.loads(_result().to_json())
    assert {"finish_ns", "ranks", "collectives", "network", "sim", "links"} <= set(data)
    assert set(data["ranks"][0]) == {"rank", "finish_ns", "compute_ns", "comm_ns", "exposed_comm_ns"}
    assert set(data["collectives"][0]) == {
        "rank", "node_id", "type", "bytes", "group", "algorithm", "start_ns", "end_ns", "rule", "algbw_GBps",
        "busbw_GBps",
    }  # fmt: skip
    assert {"model", "topology", "messages", "bytes"} <= set(data["network"])
    assert {"events", "wall_s"} <= set(data["sim"])
    link = data["links"][0]
    assert {"link", "src", "dst", "bytes", "busy_ns", "messages", "bandwidth_GBps", "utilisation"} <= set(link)


def test_json_numbers_agree_with_the_run() -> None:
    result = _result()
    data = json.loads(result.to_json())
    assert data["finish_ns"] == result.finish_ns == max(r["finish_ns"] for r in data["ranks"])
    # a ring all-reduce sends 2(p-1) messages of S/p per rank
    assert data["network"]["messages"] == 4 * 6
    assert data["network"]["bytes"] == 4 * 6 * (1 << 20) / 4
    assert sum(link["bytes"] for link in data["links"]) == data["network"]["bytes"]  # one hop each
    assert [c["end_ns"] for c in data["collectives"]] == [r["finish_ns"] for r in data["ranks"]]


def test_table_names_the_finish_collectives_and_network() -> None:
    text = _result().table()
    assert text.startswith("finish time:")
    assert "all_reduce" in text and "ring" in text
    assert "network: link on ring" in text


def test_a_saved_result_renders_as_the_fresh_one() -> None:
    import pytest

    from etsim.errors import ConfigError
    from etsim.report import Result

    result = _result()
    result.groups = [{"group": "0", "ranks": 4, "calls": 4, "bytes": 4.0, "comm_ns_max": 1.0,
                      "exposed_comm_ns_mean": 1.0, "exposed_comm_ns_max": 1.0, "rank_of_max": 0}]  # fmt: skip
    again = Result.from_dict(json.loads(result.to_json()))
    assert again.to_dict() == result.to_dict() and again.table() == result.table()
    for bad in ([], {"ranks": []}, {"finish_ns": 1, "ranks": [{"rank": 0}]}, {"finish_ns": "x", "ranks": []}):
        with pytest.raises(ConfigError, match="not an etsim result"):
            Result.from_dict(bad, source="r.json")


def test_collective_records_serialise_every_field_as_asdict_does() -> None:
    from dataclasses import asdict

    from etsim.report.result import CollectiveRecord, Result

    record = CollectiveRecord(3, 7, "ALL_REDUCE", 1 << 20, [2, 3], "ring", 10.0, 2010.0, "built-in default")
    out = Result(2010.0, [], [record], {}, {}).to_dict()["collectives"][0]
    algbw, busbw = record.bandwidths()
    assert out == {**asdict(record), "algbw_GBps": algbw, "busbw_GBps": busbw}
    assert list(out)[: len(asdict(record))] == list(asdict(record))  # the same key order
