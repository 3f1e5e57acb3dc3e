"""Chrome/Perfetto traces: written for a small run, parsed back and checked against the simulation."""

from __future__ import annotations

import gzip
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etsim.chakra import CollectiveType, TraceBuilder, Workload
from etsim.errors import ConfigError, EtsimWarning
from etsim.network import ring
from etsim.report.record import RunRecorder
from etsim.report.trace import us, write_chrome_trace
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

B, L = 50.0, 500.0


def _workload() -> Workload:
    """4 ranks: uneven compute, a chunked all-reduce, a p2p exchange and an all-gather on a sub-group."""
    traces = []
    for r in range(4):
        b = TraceBuilder()
        c = b.comp(f"fwd{r}", duration_micros=1 + r)
        ar = b.collective(CollectiveType.ALL_REDUCE, 1 << 16, deps=[c], name="grad_ar")
        peer = r ^ 1
        s = b.send(peer, 3000, deps=[ar])
        rv = b.recv(peer, 3000, deps=[ar])
        b.comp("tail", duration_micros=1, deps=[s, rv])
        traces.append(b.build(rank=r))
    return Workload(traces)


def _run(**config: Any) -> tuple[Any, RunRecorder]:
    rec = RunRecorder(messages=True)
    result = simulate(_workload(), topology=ring(4, B, L), system=SystemConfig(**config), observer=rec)
    return result, rec


def _load(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    doc = json.loads(data, parse_float=Decimal)
    assert isinstance(doc, dict)
    return doc


def _ns(value: Any) -> float:
    """A trace time (µs, an exact decimal) back in ns."""
    return float(Decimal(value) * 1000)


def test_every_node_appears_once_with_the_simulated_times(tmp_path: Path) -> None:
    result, rec = _run(chunks=2)
    out = tmp_path / "t.json"
    summary = write_chrome_trace(rec, out, messages=True)
    doc = _load(out)
    events = doc["traceEvents"]
    assert summary.events == sum(e["ph"] != "M" for e in events) and not summary.truncated
    nodes = [e for e in events if e["ph"] == "X" and "type" in e["args"]]
    seen = {(e["pid"], e["args"]["node_id"]): e for e in nodes}
    assert len(seen) == len(nodes) == sum(len(t.ids) for t in _workload().traces)
    for run in rec.engine.runs:  # type: ignore[union-attr]
        for j, node_id in enumerate(run.trace.ids):
            e = seen[(run.rank, node_id)]
            start, finish = rec.start[run.rank][j], rec.finish[run.rank][j]
            assert _ns(e["ts"]) == start and _ns(e["dur"]) == finish - start
            assert e["name"] == run.trace.names[j]
    # collective slices are exactly the JSON's collective records, and name their algorithm
    colls = sorted((e["pid"], e["args"]["node_id"], _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in events
                   if e.get("cat") == "collective")  # fmt: skip
    records = sorted((c.rank, c.node_id, c.start_ns, c.end_ns) for c in result.collectives)
    assert [c[:3] for c in colls] == [c[:3] for c in records]
    assert all(math.isclose(a[3], b[3], rel_tol=1e-15) for a, b in zip(colls, records, strict=True))
    assert {e["args"]["algorithm"] for e in events if e.get("cat") == "collective"} == {"ring"}
    # two chunks per collective: the first nests in the collective's track, the second has its own
    chunks = [e for e in events if e.get("cat") == "chunk"]
    assert len(chunks) == 2 * len(records)
    coll_tracks = {(e["pid"], e["tid"]) for e in events if e.get("cat") == "collective"}
    assert {(e["pid"], e["tid"]) for e in chunks if e["args"]["chunk"] == 0} == coll_tracks
    assert all((e["pid"], e["tid"]) not in coll_tracks for e in chunks if e["args"]["chunk"] == 1)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"compute", "comm", "recv", "comm · chunk 2"} <= names


def test_flows_join_each_send_to_its_matching_receive(tmp_path: Path) -> None:
    _, rec = _run()
    out = tmp_path / "t.json"
    write_chrome_trace(rec, out, messages=True)
    events = _load(out)["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(starts) == set(ends) == set(range(rec.num_messages))
    sends = [e for e in events if e.get("cat") == "send" and "to" in e["args"] and "type" not in e["args"]]
    recvs = [e for e in events if e.get("cat") == "recv" and "from" in e["args"] and "type" not in e["args"]]
    for row in range(rec.num_messages):
        s, f = starts[row], ends[row]
        assert (s["pid"], _ns(s["ts"])) == (rec.m_src[row], rec.m_sent[row])
        assert (f["pid"], _ns(f["ts"])) == (rec.m_dst[row], rec.m_delivered[row]) and f["bp"] == "e"
        # each flow end sits on a message slice of its track: the send's slice encloses its start,
        # the receive's slice starts at delivery and ends when the receive took the message
        assert any(
            (e["pid"], e["tid"]) == (s["pid"], s["tid"]) and _ns(e["ts"]) == rec.m_sent[row]
            and _ns(e["ts"]) + _ns(e["dur"]) == pytest.approx(rec.m_delivered[row], rel=1e-15)
            and e["args"]["to"] == rec.m_dst[row]
            for e in sends
        )  # fmt: skip
        assert any(
            (e["pid"], e["tid"]) == (f["pid"], f["tid"]) and _ns(e["ts"]) == rec.m_delivered[row]
            and e["args"]["from"] == rec.m_src[row] and e["args"]["bytes"] == rec.m_size[row]
            for e in recvs
        )  # fmt: skip
    assert len(sends) == len(recvs) == rec.num_messages


def test_link_counters_follow_messages_in_flight(tmp_path: Path) -> None:
    """Two ranks, one 1 MB message: the link's counter is the message's bytes from send to delivery."""
    traces = []
    for r in range(2):
        b = TraceBuilder()
        if r == 0:
            b.send(1, 1_000_000)
        else:
            b.recv(0, 1_000_000)
        traces.append(b.build(rank=r))
    rec = RunRecorder(messages=True)
    result = simulate(Workload(traces), topology=ring(2, B, L), observer=rec)
    out = tmp_path / "t.json"
    write_chrome_trace(rec, out)
    counters = [e for e in _load(out)["traceEvents"] if e["ph"] == "C"]
    assert [(_ns(e["ts"]), e["args"]["bytes"]) for e in counters] == [(0.0, 1_000_000), (L + 1e6 / B, 0)]
    assert result.finish_ns == L + 1e6 / B
    assert counters[0]["name"] == "link 0: 0 → 1"


def test_trace_is_deterministic_and_gzip_when_asked(tmp_path: Path) -> None:
    paths = []
    for i in range(2):
        _, rec = _run()
        paths.append(tmp_path / f"t{i}.json")
        write_chrome_trace(rec, paths[-1], messages=True)
        write_chrome_trace(rec, tmp_path / f"t{i}.json.gz", messages=True)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    gz = [(tmp_path / f"t{i}.json.gz").read_bytes() for i in range(2)]
    assert gz[0] == gz[1] and gz[0][:2] == b"\x1f\x8b"
    assert gzip.decompress(gz[0]) == paths[0].read_bytes()


def test_limit_cuts_the_trace_and_says_so(tmp_path: Path) -> None:
    _, rec = _run()
    full = tmp_path / "full.json"
    everything = write_chrome_trace(rec, full, messages=True)
    out = tmp_path / "cut.json"
    with pytest.warns(EtsimWarning, match="trace cut at"):
        summary = write_chrome_trace(rec, out, messages=True, limit=40)
    doc = _load(out)
    assert summary.truncated and doc["otherData"]["truncated"] is True and "limit of 40" in doc["otherData"]["note"]
    assert summary.available == everything.events > 40 >= summary.events
    events = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    marker = [e for e in events if e["ph"] == "i"]
    assert len(marker) == 1 and _ns(marker[0]["ts"]) == summary.cut_ns
    assert all(_ns(e["ts"]) < summary.cut_ns for e in events if e["ph"] != "i")
    # what was kept is complete up to the cut: the same slices and counters as in the full trace
    # (a flow arrow is kept when both its ends are)
    cut = summary.cut_ns
    assert cut is not None
    kept = [e for e in _load(full)["traceEvents"] if e["ph"] in "XC" and _ns(e["ts"]) < cut]
    assert kept == [e for e in events if e["ph"] in "XC"]


def test_a_recorder_message_limit_cuts_the_trace_at_the_first_message_left_out(tmp_path: Path) -> None:
    rec = RunRecorder(messages=True, message_limit=5)
    simulate(_workload(), topology=ring(4, B, L), observer=rec)
    assert rec.num_messages == 5 and rec.messages_cut_ns < math.inf
    with pytest.warns(EtsimWarning, match="trace cut"):
        summary = write_chrome_trace(rec, tmp_path / "t.json", messages=True)
    assert summary.cut_ns == rec.messages_cut_ns


def test_bad_limit_and_unwatched_recorder_are_errors(tmp_path: Path) -> None:
    _, rec = _run()
    with pytest.raises(ConfigError, match="at least 1"):
        write_chrome_trace(rec, tmp_path / "t.json", limit=0)
    with pytest.raises(ConfigError, match="did not watch"):
        write_chrome_trace(RunRecorder(), tmp_path / "t.json")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ConfigError, match=r"dir\.json: cannot write the trace"):
        write_chrome_trace(rec, tmp_path / "dir.json")


@given(st.floats(min_value=0, max_value=1e18, allow_nan=False))
def test_times_are_exact_decimals_of_ns(ns: float) -> None:
    text = us(ns)
    assert "e" not in text.lower()
    assert float(Decimal(text) * 1000) == ns
    json.loads(text)
