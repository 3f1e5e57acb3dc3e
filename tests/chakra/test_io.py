"""Reading, byte-exact writing and family resolution."""

from __future__ import annotations

import dataclasses
import gzip
import os
import random
from pathlib import Path

import pytest

from etsim.chakra import (
    CollectiveType,
    NodeType,
    TraceBuilder,
    load_workload,
    read_trace,
    resolve_family,
    serialize_trace,
    write_trace,
    write_workload,
)
from etsim.chakra.io import encode_varint, frame_spans, read_bytes
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import EtsimWarning, TraceError


def corpus_files(corpus: Path) -> list[Path]:
    return sorted((corpus / "chakra").rglob("*.et"))


def test_corpus_round_trip_is_byte_exact(corpus: Path, tmp_path: Path) -> None:
    files = corpus_files(corpus)
    assert len(files) >= 60
    for path in files:
        trace = read_trace(path)
        out = write_trace(trace, tmp_path / path.name)
        assert out.read_bytes() == read_bytes(path), path


def test_pytorch_trace_loads_flat(corpus: Path) -> None:
    trace = read_trace(corpus / "chakra" / "pytorch_trace" / "chakra.0.et")
    assert trace.num_nodes == 3664
    assert len(trace.ids) == len(trace.types) == len(trace.comm_size) == len(trace.data_ptr) - 1
    colls = [i for i, t in enumerate(trace.types) if t == NodeType.COMM_COLL_NODE]
    sizes = sorted(trace.comm_size[i] for i in colls if trace.comm_type[i] == CollectiveType.ALL_REDUCE)
    assert sizes == [8196000, 9724160, 26255360, 26550272, 31502336]
    # CSR dependencies point at positions of existing nodes.
    assert all(0 <= d < trace.num_nodes for d in trace.data_idx)
    assert trace.missing_ctrl_deps  # the converter removed some ctrl parents; we keep note of them
    lean = read_trace(corpus / "chakra" / "pytorch_trace" / "chakra.0.et", keep_raw=False)
    assert lean.nodes == [] and lean.comm_size == trace.comm_size
    with pytest.raises(TraceError, match="keep_raw=False"):
        serialize_trace(lean)


def test_raw_attributes_any_numeric_member(tmp_path: Path) -> None:
    node = pb.Node(id=5, name="x", type=pb.COMM_COLL_NODE)
    node.attr.add(name="comm_size").uint64_val = 4096  # wrong member for the old feeder
    node.attr.add(name="comm_type").int32_val = 2
    node.attr.add(name="is_cpu_op").int64_val = 0
    node.attr.add(name="extra").string_list.values.extend(["a", "b"])
    from etsim.chakra import Trace

    trace = Trace.from_nodes([node])
    assert trace.comm_size == [4096] and trace.comm_type == [2] and trace.is_cpu_op == [False]
    assert trace.attributes(0)["extra"] == ["a", "b"]
    assert {(name, member) for _, name, member in trace.member_mismatches} == {
        ("comm_size", "uint64_val"),
        ("comm_type", "int32_val"),
    }


def test_gzip_detected_by_magic(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.comp(duration_micros=3)
    plain = write_trace(b.build(), tmp_path / "t.et")
    (tmp_path / "z.et").write_bytes(gzip.compress(plain.read_bytes()))
    assert read_trace(tmp_path / "z.et").duration_micros == [3]
    gz = write_trace(b.build(), tmp_path / "w.et.gz")
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert read_trace(gz).duration_micros == [3]


def test_zero_length_frame_is_a_node_not_eof(tmp_path: Path) -> None:
    meta = pb.GlobalMetadata(version="1.0.0").SerializeToString()
    later = pb.Node(id=7, type=pb.COMP_NODE).SerializeToString()
    data = encode_varint(len(meta)) + meta + b"\x00" + encode_varint(len(later)) + later
    path = tmp_path / "z.et"
    path.write_bytes(data)
    trace = read_trace(path)
    assert trace.ids == [0, 7] and trace.types == [0, 4]
    assert serialize_trace(trace) == data


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"\x05\x0a\x03ab", "truncated"),
        (b"\xff\xff\xff\xff\xff\xff", "longer than 5 bytes"),
        (b"\x03\x0a\x01a" + b"\x03\xff\xff\xff", "frame 1"),
        (b"\x1f\x8b\x08\x00garbage-garbage", "corrupt gzip"),
        (b"\x03\x08\x80", "frame 0"),
    ],
)
def test_bad_files_raise_trace_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.et"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as info:
        read_trace(path)
    assert str(path) in str(info.value)


def test_floods_and_gzip_bombs_are_refused_fast(tmp_path: Path) -> None:
    # Issue 20, item 11: a 1 MB gzip of 1 GiB of zeros hung run, validate, inspect and jsonize.
    import time

    zeros = tmp_path / "zeros.et"
    zeros.write_bytes(bytes(1 << 24))
    with pytest.raises(TraceError, match=r"frame 2 at byte 2 is the second empty node .*a file of zeros"):
        read_trace(zeros)
    bomb = tmp_path / "bomb.et"
    bomb.write_bytes(gzip.compress(bytes(1 << 28), 9))  # 256 MiB of zeros in 256 KiB
    t0 = time.perf_counter()
    with pytest.raises(TraceError, match=r"decompresses to more than 67,108,864 bytes .* refused as a gzip bomb"):
        read_trace(bomb)
    assert time.perf_counter() - t0 < 5
    # A file that compresses well but not absurdly is read whole.
    meta = pb.GlobalMetadata(version="1.0.0").SerializeToString()
    node = pb.Node(id=1, name="n" * 100, type=pb.COMP_NODE).SerializeToString()
    plain = tmp_path / "plain.et.gz"
    plain.write_bytes(gzip.compress(encode_varint(len(meta)) + meta + encode_varint(len(node)) + node))
    assert read_trace(plain).ids == [1]


def _family(tmp_path: Path, prefix: str, ranks: list[int]) -> None:
    for r in ranks:
        b = TraceBuilder()
        b.comp(duration_micros=r)
        write_trace(b.build(), tmp_path / f"{prefix}.{r}.et")


def test_family_forms(tmp_path: Path) -> None:
    _family(tmp_path, "wl", [0, 1, 2])
    expected = [tmp_path / f"wl.{r}.et" for r in range(3)]
    assert resolve_family(tmp_path / "wl") == expected
    assert resolve_family(f"{tmp_path}/wl.et") == expected
    assert resolve_family(tmp_path) == expected
    with pytest.warns(EtsimWarning, match=r"wl\.1\.et' is one file \(rank 1\) of the 3-rank family .*wl\.0\.et"):
        assert resolve_family(tmp_path / "wl.1.et") == [tmp_path / "wl.1.et"]
    workload = load_workload(tmp_path / "wl")
    assert workload.num_ranks == 3
    assert [t.duration_micros[0] for t in workload] == [0, 1, 2]
    assert [t.rank for t in workload] == [0, 1, 2]


def test_family_errors(tmp_path: Path) -> None:
    _family(tmp_path, "a", [0, 2])
    with pytest.raises(TraceError, match=r"ranks 1 missing \(found files for ranks 0, 2"):
        resolve_family(tmp_path / "a")
    _family(tmp_path, "b", [0])
    with pytest.raises(TraceError, match="2 trace families") as info:
        resolve_family(tmp_path)
    assert "a" in str(info.value) and "b" in str(info.value)
    with pytest.raises(TraceError, match="no such file, family"):
        resolve_family(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="holds no trace family"):
        resolve_family(tmp_path / "empty")
    # A file that also names a family is ambiguous.
    _family(tmp_path / "amb", "c", [0, 1])
    write_trace(TraceBuilder().build(), tmp_path / "amb" / "c.et")
    with pytest.raises(TraceError, match="ambiguous"):
        resolve_family(tmp_path / "amb" / "c.et")


def test_write_workload_and_reload(tmp_path: Path) -> None:
    traces = []
    for r in range(2):
        b = TraceBuilder()
        b.send(dst=1 - r, size=8, tag=1)
        traces.append(b.build(rank=r))
    paths = write_workload(traces, tmp_path / "sub" / "p")
    assert [p.name for p in paths] == ["p.0.et", "p.1.et"]
    assert load_workload(tmp_path / "sub" / "p").traces[1].comm_dst == [0]


def test_writing_a_smaller_family_over_a_larger_one_replaces_it_whole(tmp_path: Path) -> None:
    # Rank files 4..7 of an 8-rank family left beside a new 4-rank one were read as its ranks (an 8-rank answer).
    from etsim.chakra import CollectiveType
    from etsim.producers import collective_workload

    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 8), tmp_path / "x")
    write_trace(TraceBuilder().build(), tmp_path / "x.9.et.gz")
    write_trace(TraceBuilder().build(), tmp_path / "xy.5.et")  # another family: kept
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4), tmp_path / "x")
    assert load_workload(tmp_path / "x").num_ranks == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.0.et", "x.1.et", "x.2.et", "x.3.et", "xy.5.et"]


def test_family_with_two_files_for_one_rank(tmp_path: Path) -> None:
    trace = TraceBuilder().build()
    for name in ("f.0.et", "f.00.et", "f.1.et"):
        write_trace(trace, tmp_path / name)
    with pytest.raises(TraceError, match=r"f.0.et and f.00.et are both rank 0 of f|f.00.et and f.0.et are both"):
        resolve_family(tmp_path / "f")


def _messy_nodes(count: int, seed: int) -> list[pb.Node]:
    """Nodes with everything a reader must get right: ids out of order and repeated, dependencies forward,
    backward, far away and missing, attributes in the expected member, another member, of the wrong kind,
    repeated and unknown."""
    rng = random.Random(seed)
    ids = list(range(count))
    rng.shuffle(ids)
    ids[7] = ids[count - 3]  # a repeated id
    nodes = []
    for pos, nid in enumerate(ids):
        node = pb.Node(id=nid, name=rng.choice(["comp", "send", "recv", f"op{pos % 13}", ""]), type=rng.randrange(8))
        node.duration_micros = rng.choice([0, 1, rng.randrange(10**6)])
        node.data_deps.extend(rng.choice(ids) for _ in range(rng.randrange(3)))
        node.ctrl_deps.extend(rng.choice([*ids[:5], count + 5]) for _ in range(rng.randrange(2)))
        for _ in range(rng.randrange(5)):
            name = rng.choice(["comm_size", "comm_type", "comm_src", "is_cpu_op", "pg_name", "num_ops", "other"])
            attr = node.attr.add(name=name)
            kind = rng.randrange(5)
            if kind == 0:
                attr.int64_val = rng.randrange(1 << 40)
            elif kind == 1:
                attr.int32_val = rng.randrange(100)
            elif kind == 2:
                attr.bool_val = rng.random() < 0.5
            elif kind == 3:
                attr.string_val = rng.choice(["dp", "tp", "7"])
            else:
                attr.double_val = rng.choice([2.0, 2.5])
        nodes.append(node)
    return nodes


@pytest.mark.parametrize("keep_raw", [True, False])
def test_reading_in_several_processes_gives_the_same_trace(tmp_path: Path, keep_raw: bool) -> None:
    from etsim.chakra import Trace

    meta = pb.GlobalMetadata(version="0.0.4")
    path = write_trace(Trace.from_nodes(_messy_nodes(3001, seed=11), meta), tmp_path / "messy.et")
    serial = read_trace(path, keep_raw=keep_raw, jobs=1)
    assert serial.duplicate_ids and serial.missing_ctrl_deps and serial.bad_attributes and serial.member_mismatches
    for jobs in (2, 3):
        parallel = read_trace(path, keep_raw=keep_raw, jobs=jobs)
        for f in dataclasses.fields(Trace):
            assert getattr(parallel, f.name) == getattr(serial, f.name), (jobs, f.name)
        if keep_raw:
            assert serialize_trace(parallel) == read_bytes(path)


def test_reading_the_corpus_in_several_processes_gives_the_same_trace(corpus: Path) -> None:
    from etsim.chakra import Trace

    path = corpus / "chakra" / "pytorch_trace" / "chakra.0.et"
    serial, parallel = read_trace(path, jobs=1), read_trace(path, jobs=2)
    assert all(getattr(parallel, f.name) == getattr(serial, f.name) for f in dataclasses.fields(Trace))


def test_a_bad_frame_read_by_another_process_is_named(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(40):
        b.comp(duration_micros=1)
    data = bytearray(write_trace(b.build(), tmp_path / "ok.et").read_bytes())
    data[-2] = 0xFF  # inside the last node's payload: a field with an invalid wire type
    (tmp_path / "bad.et").write_bytes(bytes(data))
    with pytest.raises(TraceError, match=r"bad\.et: frame 40 \(node 39\) is not a Node message"):
        read_trace(tmp_path / "bad.et", jobs=2)


def test_only_large_traces_are_read_in_several_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from etsim.chakra.io import PARALLEL_NODES, _reading_jobs

    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert _reading_jobs(PARALLEL_NODES - 1, None) == 1
    assert _reading_jobs(PARALLEL_NODES, None) == min(len(os.sched_getaffinity(0)), 4)
    assert _reading_jobs(5, 8) == 5 and _reading_jobs(100, 1) == 1
    monkeypatch.setattr(threading, "active_count", lambda: 2)  # forking a threaded process is unsafe
    assert _reading_jobs(PARALLEL_NODES, None) == 1


def test_the_first_bad_frame_is_named_whichever_process_finds_one_first(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(300):
        b.comp(duration_micros=1)
    path = write_trace(b.build(), tmp_path / "two_bad.et")
    data = bytearray(path.read_bytes())
    _, ends = frame_spans(bytes(data))
    data[ends[200] - 1] = 0xFF  # frames 200 and 201: the ends of two runs of frames when read by 3 processes
    data[ends[201] - 1] = 0xFF
    path.write_bytes(bytes(data))
    for _ in range(3):
        with pytest.raises(TraceError, match=r"frame 200 \(node 199\)"):
            read_trace(path, jobs=3)


def test_writing_no_traces_is_refused_and_keeps_the_family_there(tmp_path) -> None:
    # write_workload([], prefix) returned [] after removing every rank file of the family at prefix.
    from etsim.chakra import TraceBuilder, Workload, load_workload, write_workload
    from etsim.errors import TraceError

    b = TraceBuilder()
    b.comp("c", duration_micros=1)
    written = write_workload([b.build(rank=0), b.build(rank=1)], tmp_path / "w")
    for empty in ([], Workload([])):
        with pytest.raises(TraceError, match=r"w: no traces to write .* nothing was written"):
            write_workload(empty, tmp_path / "w")
    with pytest.raises(TraceError, match=r"expected a Workload or a list of Traces to write, got 'workloads/x'"):
        write_workload("workloads/x", tmp_path / "w")  # type: ignore[arg-type]
    assert all(p.exists() for p in written) and load_workload(tmp_path / "w").num_ranks == 2


def test_the_api_takes_names_and_refuses_what_is_no_path() -> None:
    # TraceBuilder.collective("ALL_REDUCE") raised ValueError from int(); generate() refused the CollectiveType
    # the API exports; load_workload(None) or a generator mapping raised a raw TypeError.
    from etsim import generate
    from etsim.chakra import CollectiveType, TraceBuilder
    from etsim.errors import TraceError

    b = TraceBuilder()
    b.collective("ALL_REDUCE", 1024)
    b.collective("all-gather", 1024)
    assert b.build(rank=0).comm_type == [CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER]
    with pytest.raises(TraceError, match=r"collective: unknown collective 'allreduse'"):
        b.collective("allreduse", 1)
    spec = {"generate": "collective", "type": CollectiveType.ALL_REDUCE, "size": 1024, "npus": 2}
    assert len(generate(spec)) == 2
    for bad, said in ((None, "got None"), (spec, "a generator mapping is etsim.generate's")):
        with pytest.raises(TraceError, match=rf"load_workload: expected a path or prefix of \.et files, .*{said}"):
            load_workload(bad)  # type: ignore[arg-type]


def test_a_workload_is_made_of_traces() -> None:
    # Workload("abc") or Workload(None) was made, and a run then failed deep in it (an AttributeError).
    from etsim.chakra import TraceBuilder, Workload
    from etsim.errors import TraceError

    for bad in ("abc", None, [1, 2]):
        with pytest.raises(TraceError, match=r"Workload: expected a list of Traces \(rank r at index r\)"):
            Workload(bad)  # type: ignore[arg-type]
    b = TraceBuilder()
    b.comp("c", duration_micros=1)
    assert Workload((b.build(rank=0),)).num_ranks == 1  # (a tuple is taken as its list)


def test_a_prefix_written_with_et_names_the_family_as_reading_it_does(tmp_path) -> None:
    # write_workload(w, "o.et") wrote o.et.0.et, which load_workload("o.et") does not read.
    from etsim.chakra import TraceBuilder, load_workload, write_workload

    b = TraceBuilder()
    b.comp("c", duration_micros=1)
    paths = write_workload([b.build(rank=0)], tmp_path / "o.et")
    assert [p.name for p in paths] == ["o.0.et"] and load_workload(tmp_path / "o.et").num_ranks == 1


def test_a_builder_names_the_node_and_attribute_of_a_value_of_the_wrong_type() -> None:
    # A duration of "100", deps=5, a size of "1 MiB" or num_ops=1e9 raised raw TypeErrors from protobuf.
    from etsim.chakra import CollectiveType, TraceBuilder
    from etsim.errors import TraceError

    b = TraceBuilder()
    with pytest.raises(TraceError, match=r"node 0 \('c'\): expected .* an integer duration_micros .* got .*'100'"):
        b.comp("c", duration_micros="100")  # type: ignore[arg-type]
    with pytest.raises(TraceError, match=r"node 0 \(ALL_REDUCE\): attribute 'comm_size': '1 MiB' is not of its type"):
        b.collective(CollectiveType.ALL_REDUCE, "1 MiB")  # type: ignore[arg-type]
    with pytest.raises(TraceError, match=r"attribute 'num_ops': 1000000000\.0 is not of its type"):
        b.comp("c", num_ops=1e9)  # type: ignore[arg-type]
    assert b.comp("c") == 0  # (a refused node leaves no gap in the ids)
