"""Mutated input files of every kind: only etsim's own error type may escape, and nothing hangs.

Topology YAMLs, system YAMLs, comm-group files (JSON and YAML), ASTRA-sim system / network /
remote-memory files and MSCCL-IR XML, each mutated thousands of times — byte-level (flips, deletions,
duplications, non-UTF-8 bytes) and structure-level (a key's value replaced by junk, a key dropped or
added) — with a fixed seed, so a failure reproduces. Each load runs under a time limit.
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from etsim.compat.astra import load_astra_remote_memory, load_astra_system
from etsim.errors import EtsimError
from etsim.network import load_network
from etsim.producers.msccl import convert_msccl
from etsim.system.config import load_system_config
from etsim.system.groups import load_comm_groups

JUNK: list[Any] = [None, -1, 0, 1, 2**40, 1e300, -0.5, float("nan"), True, "", "abc", "50 GB/s", "1 ns", [], {},
                   [1, "x"], {"a": 1}, "\u00e9", "x" * 300]  # fmt: skip


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not b:
            b += bytes([rng.randrange(256)])
            continue
        i = rng.randrange(len(b))
        action = rng.randrange(5)
        if action == 0:
            b[i] = rng.randrange(256)
        elif action == 1:
            del b[i : i + rng.randint(1, 8)]
        elif action == 2:
            j = rng.randrange(len(b))
            b[i:i] = b[j : j + rng.randint(1, 16)]
        elif action == 3:
            b[i:i] = bytes([0xFF, 0xFE, 0xC3])  # not UTF-8
        else:
            b[i:i] = rng.choice([b"\n", b": ", b"[", b"]", b"{", b"}", b"-", b"<", b">", b'"', b"0", b"9" * 12])
    return bytes(b)


def paths_in(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths_in(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths_in(v, (*prefix, i))


def mutate_structure(value: Any, rng: random.Random) -> Any:
    value = json.loads(json.dumps(value))  # deep copy
    paths = [p for p in paths_in(value) if p]
    if not paths or rng.random() < 0.1:
        return rng.choice([*JUNK, value])
    path = rng.choice(paths)
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    action = rng.randrange(3)
    if action == 0:
        parent[path[-1]] = rng.choice(JUNK)
    elif action == 1:
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[rng.choice(["colour", "npus", "kind", "bandwidth", "1", "groups"])] = rng.choice(JUNK)
    else:
        parent.append(rng.choice(JUNK))
    return value


def fuzz(
    tmp_path: Path,
    seeds: list[tuple[str, bytes]],
    load: Callable[[Path], object],
    cases: int,
    seed: int,
    parse: Callable[[bytes], Any] | None,
    dump: Callable[[Any], bytes] | None,
) -> int:
    """Mutate *seeds*; every load must return or raise EtsimError within the time limit. Returns rejections."""
    rng = random.Random(seed)
    rejected = 0
    for case in range(cases):
        name, data = rng.choice(seeds)
        if parse is not None and dump is not None and rng.random() < 0.5:
            try:
                mutated = dump(mutate_structure(parse(data), rng))
            except (ValueError, TypeError, yaml.YAMLError):
                mutated = mutate_bytes(data, rng)
        else:
            mutated = mutate_bytes(data, rng)
        path = tmp_path / name
        path.write_bytes(mutated)
        try:
            with time_limit(10.0):
                load(path)
        except EtsimError:
            rejected += 1
        except Exception as exc:
            message = f"case {case} (seed {seed}) of {name}: {type(exc).__name__}: {exc}\n{mutated!r}"
            raise AssertionError(message) from exc
    return rejected


def yaml_dump(value: Any) -> bytes:
    return yaml.safe_dump(value, allow_unicode=True).encode()


def json_dump(value: Any) -> bytes:
    return json.dumps(value).encode()


def test_topology_files(tmp_path: Path, repo: Path) -> None:
    seeds = [(p.name, p.read_bytes()) for p in sorted((repo / "topologies").glob("*.yaml")) if "1024" not in p.name]
    rejected = fuzz(tmp_path, seeds, load_network, 1500, 1, yaml.safe_load, yaml_dump)
    assert rejected > 500  # most mutations are wrong; the point is that none escapes or hangs


def test_system_files(tmp_path: Path) -> None:
    seeds = [
        ("sys.yaml", b"algorithms: {all_reduce: ring, default: direct}\nchunks: 4\nreduction_bandwidth: 100 GB/s\n"
                     b"endpoint_delay: 10 ns\nresources: {compute_streams: 2, comm_streams: 0}\n"),
        ("sys2.yaml", b"peak_flops: 312 TFLOP/s\nmemory_bandwidth: 2 TB/s\nremote_memory_latency: 1 us\n"
                      b"stream_order: lifo\nactive_streams: 2\nchunking: integer\nignore_ctrl_deps: true\n"),
    ]  # fmt: skip
    assert fuzz(tmp_path, seeds, load_system_config, 800, 2, yaml.safe_load, yaml_dump) > 100


def test_comm_group_files(tmp_path: Path) -> None:
    seeds = [
        ("groups.json", b'{"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}'),
        ("groups.yaml", b"groups:\n  1: [0, 1, 2, 3]\n  2: [4, 5, 6, 7]\n"),
    ]
    parse = lambda data: yaml.safe_load(data)  # noqa: E731 - JSON is YAML
    assert fuzz(tmp_path, seeds, lambda p: load_comm_groups(p, 8), 800, 3, parse, json_dump) > 100


def test_astra_files(tmp_path: Path) -> None:
    system = json.dumps({
        "scheduling-policy": "LIFO", "collective-optimization": "localBWAware", "preferred-dataset-splits": 4,
        "active-chunks-per-dimension": 1, "endpoint-delay": 10, "local-mem-bw": 1600,
        "all-reduce-implementation": ["ring", "direct"], "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["halvingDoubling"], "all-to-all-implementation": ["direct"],
        "roofline-enabled": 1, "peak-perf": 900, "L": 0,
    }).encode()  # fmt: skip
    network = b"topology: [Ring, Switch]\nnpus_count: [4, 2]\nbandwidth: [50.0, 25.0]\nlatency: [500.0, 700.0]\n"
    memory = json.dumps({"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 100, "remote-mem-bw": 50})
    fuzz(tmp_path, [("sys.json", system)], lambda p: load_astra_system(p), 600, 4, json.loads, json_dump)
    fuzz(tmp_path, [("net.yml", network)], load_network, 600, 5, yaml.safe_load, yaml_dump)
    fuzz(tmp_path, [("mem.json", memory.encode())], load_astra_remote_memory, 300, 6, json.loads, json_dump)


def test_msccl_ir_files(tmp_path: Path, corpus: Path) -> None:
    small = sorted(p for p in (corpus / "msccl").rglob("*.xml") if p.stat().st_size < 40_000)
    seeds = [(p.name, p.read_bytes()) for p in small[:8]]
    assert fuzz(tmp_path, seeds, lambda p: convert_msccl(p), 700, 7, None, None) > 300
