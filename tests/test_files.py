"""Reading configuration: strict YAML and JSON, bounded nesting and alias expansion, named errors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from etsim.errors import ConfigError, TopologyError
from etsim.files import MAX_NESTING, MAX_VALUES, parse_json, parse_yaml
from etsim.network import load_network
from etsim.system.config import load_system_config
from etsim.system.groups import load_comm_groups

#: A 9-level "billion laughs": 9^9 = 387 million strings once its aliases are expanded, in under 600 bytes.
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_an_alias_bomb_is_refused_at_once() -> None:
    assert len(LAUGHS) < 600
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"bomb.yaml: more than {MAX_VALUES:,} values once its aliases are expanded"):
        parse_yaml(LAUGHS, "bomb.yaml")
    assert time.perf_counter() - t0 < 1.0


def test_deep_nesting_is_an_error_not_a_recursion_error() -> None:
    for depth in (MAX_NESTING + 5, 1000, 100_000):
        with pytest.raises(ConfigError, match=r"deep.yaml: .*nested more than 100 levels deep"):
            parse_yaml("a: " + "[" * depth + "]" * depth, "deep.yaml")
        with pytest.raises(ConfigError, match=r"deep.json: .*nested more than 100 levels deep"):
            parse_json("[" * depth + "]" * depth, "deep.json")
    assert parse_yaml("a: &x [1, {b: 2}]\nc: *x\n", "ok.yaml") == {"a": [1, {"b": 2}], "c": [1, {"b": 2}]}


def test_duplicate_keys_are_errors_in_every_configuration_file(tmp_path: Path) -> None:
    system = tmp_path / "sys.yaml"
    system.write_text("chunks: 2\nchunks: 4\n")
    with pytest.raises(ConfigError, match=r"sys.yaml: invalid YAML: .*duplicate key 'chunks'"):
        load_system_config(system)
    topology = tmp_path / "t.yaml"
    topology.write_text("kind: ring\nnpus: 8\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    with pytest.raises(TopologyError, match=r"t.yaml: invalid YAML: .*duplicate key 'npus'"):
        load_network(topology)
    groups = tmp_path / "g.json"
    groups.write_text('{"1": [0, 1], "1": [2, 3]}')
    with pytest.raises(ConfigError, match=r"g.json: invalid JSON: duplicate key '1'"):
        load_comm_groups(groups, 4)
    groups_yaml = tmp_path / "g.yaml"
    groups_yaml.write_text("groups:\n  1: [0, 1]\n  1: [2, 3]\n")
    with pytest.raises(ConfigError, match=r"g.yaml: invalid YAML: .*duplicate key 1"):
        load_comm_groups(groups_yaml, 4)


def test_json_booleans_are_not_ranks(tmp_path: Path) -> None:
    groups = tmp_path / "g.json"
    groups.write_text('{"1": [true, false]}')
    with pytest.raises(ConfigError, match=r"group '1': ranks \[True, False\] are not in 0..3"):
        load_comm_groups(groups, 4)


def test_read_into_fills_a_reused_buffer_and_declines_what_read_bytes_must_handle(tmp_path, monkeypatch):
    import gzip as gz
    import os as _os

    from etsim.files import read_bytes as read_all
    from etsim.files import read_into

    small, large = tmp_path / "small", tmp_path / "large"
    small.write_bytes(b"abc")
    large.write_bytes(bytes(range(256)) * 100)
    buffer = bytearray(4)
    got = read_into(small, buffer)
    assert got is not None and got[0] is buffer and bytes(got[0][: got[1]]) == b"abc"
    got = read_into(large, buffer)  # too small: a larger buffer comes back
    assert got is not None and got[1] == 25_600 and bytes(got[0][: got[1]]) == read_all(large)
    again = read_into(small, got[0])  # reused, with the older file's bytes beyond the count
    assert again is not None and again[0] is got[0] and bytes(again[0][: again[1]]) == b"abc"
    packed = tmp_path / "packed.gz"
    packed.write_bytes(gz.compress(b"abc"))
    assert read_into(packed, buffer) is None  # (read_bytes decompresses it)
    assert read_into(tmp_path / "missing", buffer) is None
    real_fstat = _os.fstat
    monkeypatch.setattr(_os, "fstat", lambda fd: type("S", (), {"st_size": real_fstat(fd).st_size - 1})())
    assert read_into(large, bytearray(1 << 16)) is None  # it has more bytes than it said: not trusted


def test_only_regular_files_of_bounded_size_are_read(tmp_path: Path) -> None:
    import os

    from etsim.files import MAX_TEXT_BYTES, read_bytes, read_text

    with pytest.raises(ConfigError, match=r"/dev/zero: cannot read the system file: it is not a regular file"):
        read_text("/dev/zero", "system file")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it to read would wait for a writer: it must be refused before that read
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="not a regular file"):
        read_text(fifo, "topology file")
    assert time.perf_counter() - t0 < 5
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(MAX_TEXT_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ConfigError, match=rf"big.yaml: the topology file has {MAX_TEXT_BYTES + 1:,} bytes, more than"):
        read_text(big, "topology file")
    (tmp_path / "small").write_bytes(b"12345")
    assert read_bytes(tmp_path / "small", limit=5) == b"12345"
    with pytest.raises(ConfigError, match="has 5 bytes, more than etsim reads \\(4\\)"):
        read_bytes(tmp_path / "small", limit=4)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "WL", "--topology", "T", "--system", "/dev/zero"],
        ["run", "WL", "--topology", "/dev/zero"],
        ["report", "/dev/zero"],
        ["experiment", "run", "/dev/zero"],
    ],
)
def test_devices_given_as_inputs_are_one_line_errors(tmp_path: Path, args: list[str]) -> None:
    import subprocess
    import sys

    from etsim.chakra import CollectiveType, Workload, write_workload
    from etsim.producers import collective_workload

    write_workload(Workload(collective_workload(CollectiveType.ALL_REDUCE, 1024, 4)), tmp_path / "wl")
    (tmp_path / "t.yaml").write_text("kind: ring\nnpus: 4\nbandwidth: 1 GB/s\nlatency: 1 ns\n")
    argv = [{"WL": str(tmp_path / "wl"), "T": str(tmp_path / "t.yaml")}.get(a, a) for a in args]
    proc = subprocess.run([sys.executable, "-m", "etsim", *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.startswith("etsim: error: /dev/zero: cannot read the ")
    assert "not a regular file" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
