"""Mutated input files of every kind: only etsim's own error type may escape, and nothing hangs.

Topology YAMLs, system YAMLs, comm-group files (JSON and YAML), ASTRA-sim system / network /
remote-memory files and MSCCL-IR XML, each mutated thousands of times — byte-level (flips, deletions,
duplications, non-UTF-8 bytes) and structure-level (a key's value replaced by junk, a key dropped or
added) — with a fixed seed, so a failure reproduces. Each load runs under a time limit.

Then (issue 20) hostile input through the command line, run in-process: nesting 50 … 2000 levels deep, alias
bombs, huge / tiny / non-finite numbers in every unit-parsed option, malformed ``module:Class`` plug-in names,
bombs and broken frames in Chakra ET files, hand-edited result JSON for ``report`` and ``plot links``, and mutated
experiment files.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import random
import re
import signal
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from etsim.chakra import CollectiveType, write_workload
from etsim.chakra.builder import TraceBuilder
from etsim.chakra.io import decode_varint, encode_varint
from etsim.cli import main
from etsim.compat.astra import load_astra_remote_memory, load_astra_system
from etsim.errors import EtsimError
from etsim.experiment.spec import load_experiment
from etsim.network import load_network
from etsim.producers import collective_workload
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


# --- Issue 20: adversarial inputs through the command line -----------------------------------------------------
#
# Each case runs `etsim …` in-process (etsim.cli.main) or a loader, under a time limit. It passes when it returns
# or exits 0/1/2 (an EtsimError as a library), prints no traceback and no bare Python exception name, answers in
# time and, with exit 0, prints no nan/inf as a result. A test gathers every failing case of its kind and names
# them all; each parameter id is one way etsim can go wrong, so a failure points at one bug.

LIMIT = 10.0  # seconds: a case that legitimately runs a simulation
FAST = 2.0  # seconds: what must be refused in milliseconds (alias bombs)
BOMB = 1.0  # seconds: decompression bombs and unbounded counts (refusing them takes milliseconds; imports are warm)

RAW_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")
NON_FINITE = re.compile(r"\b(nan|inf|infinity)\b", re.IGNORECASE)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Like time_limit, but fires again every half second: code that swallows one TimeoutError cannot hang."""

    def expire(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def outcome(
    capsys: pytest.CaptureFixture[str], args: Sequence[Any], *, limit: float = LIMIT, one_line: bool = False
) -> str | None:
    """Run ``etsim ARGS`` in-process: None if it behaved, else what went wrong."""
    start = time.perf_counter()
    try:
        with deadline(limit):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # whatever escapes is the finding
        capsys.readouterr()
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    elapsed = time.perf_counter() - start
    out, err = capsys.readouterr()
    first = err.lstrip().split("\n", 1)[0]
    if elapsed > limit:  # a TimeoutError swallowed on the way (a sweep records it as a failed point)
        return f"took {elapsed:.1f} s (limit {limit} s): {first[:160]}"
    verify = [str(a) for a in args[:2]] == ["algo", "verify"]  # (exit 3: cannot verify, an unreadable input too)
    if code not in ((0, 1, 2, 3) if verify else (0, 1, 2)):
        return f"exit code {code}: {first[:160]}"
    if "Traceback" in err:
        return "traceback: " + err.strip().rsplit("\n", 1)[-1][:160]
    if RAW_EXCEPTION.match(first):
        return f"bare exception on stderr: {first[:160]}"
    if code == 0 and NON_FINITE.search(out):
        line = next(line for line in out.splitlines() if NON_FINITE.search(line))
        return f"exit 0 with a non-finite result: {line.strip()[:160]}"
    if one_line and code in (1, 3) and (err.count("\n") != 1 or not err.startswith("etsim: error: ")):
        return f"not one 'etsim: error:' line ({err.count(chr(10))} lines): {err[:160]!r}"
    return None


def attempt(load: Callable[[Path], object], path: Path, limit: float = LIMIT) -> str | None:
    """Load *path*: None if it loaded or raised EtsimError in time, else what went wrong."""
    try:
        with deadline(limit):
            load(path)
    except EtsimError:
        return None
    except Exception as exc:  # TimeoutError included
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    return None


def short(value: Any) -> str:
    """repr(value), with a long number or string cut: ``10**400`` is ``1000…(401 chars)``."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:12]}…({len(text)} chars)"


def gather(results: Iterable[tuple[str, str | None]]) -> int:
    """Fail naming every case that went wrong (distinct problems first); return the number of cases."""
    cases = 0
    bad: dict[str, list[str]] = {}
    for label, problem in results:
        cases += 1
        if problem is not None:
            bad.setdefault(re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "#", problem), []).append(f"{label}: {problem}")
    lines = [f"{len(v)} x {v[0]}" + "".join(f"\n      also {w[:100]}" for w in v[1:3]) for v in bad.values()]
    assert not bad, f"{sum(map(len, bad.values()))} of {cases} cases failed:\n" + "\n".join(lines[:25])
    return cases


def mixed_workload(prefix: Path, npus: int = 4) -> str:
    """Every node kind a cost option touches: roofline and replayed compute, memory, a collective, send/recv."""
    traces = []
    for rank in range(npus):
        b = TraceBuilder()
        gemm = b.comp("gemm", duration_micros=5, num_ops=10**9, tensor_size=1 << 20)
        empty = b.comp("empty", deps=[gemm])
        load = b.mem(False, 1 << 16, deps=[empty])
        coll = b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[load])
        send = b.send((rank + 1) % npus, 4096, deps=[coll])
        recv = b.recv((rank - 1) % npus, 4096, deps=[coll])
        b.mem(True, 1 << 16, deps=[send, recv])
        traces.append(b.build(rank=rank))
    write_workload(traces, prefix)
    return str(prefix)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory, repo: Path) -> dict[str, str]:
    """Workloads, a topology and real results (written by etsim run) shared by the tests below."""
    d = tmp_path_factory.mktemp("made")
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4), d / "wl4")
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 16), d / "wl16")
    (d / "ring4.yaml").write_text("kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    made = {"wl4": str(d / "wl4"), "mixed": mixed_workload(d / "mixed"), "ring4": str(d / "ring4.yaml")}
    dp, ring8 = repo / "workloads" / "dp_8npus_4layers", repo / "topologies" / "ring8.yaml"
    args = [dp, "--topology", ring8, "--critical-path", "--json", d / "dp.json", "--trace", d / "dp.json.gz", "-q"]
    assert main([str(a) for a in args]) == 0
    assert main([str(dp), "--trace", str(d / "plain_trace.json"), "-q"]) == 0
    mesh = [d / "wl16", "--topology", repo / "topologies" / "mesh4x4.yaml", "--json", d / "mesh.json", "-q"]
    assert main([str(a) for a in mesh]) == 0
    made |= {k: str(d / f) for k, f in [("dp", "dp.json"), ("trace", "dp.json.gz"), ("mesh", "mesh.json")]}
    made |= {"plain_trace": str(d / "plain_trace.json"), "et": str(d / "wl4.0.et")}
    return made


# 1. Nesting: 50 … 2000 levels of lists and maps, in every configuration file, as a key's value and as the file.

NESTINGS = [50, 99, 100, 101, 150]
DEEP_NESTINGS = [500, 1000, 2000]  # past the recursion limit of a recursive reader: up to 0.3 s a case


def nested(depth: int, shape: str) -> str:
    if shape == "flow-list":
        return "[" * depth + "1" + "]" * depth
    if shape == "flow-map":
        return "{a: " * depth + "1" + "}" * depth
    if shape == "json-map":
        return '{"1": ' * depth + "1" + "}" * depth
    if shape == "block-map":
        return "".join("\n" + "  " * (i + 1) + "k:" for i in range(depth)) + " 1"
    if shape == "block-list":
        return "".join("\n" + "  " * (i + 1) + "-" for i in range(depth)) + " 1"
    return "[{a: " * (depth // 2) + "1" + "}]" * (depth // 2)  # mixed


SHAPES = ["flow-list", "flow-map", "json-map", "block-map", "block-list", "mixed"]
EXPERIMENT = "workload: {generate: collective, type: all_reduce, npus: 4, size: 1 KiB}\n"
CONFIG_KINDS: dict[str, tuple[str, str, Callable[[Path], object], list[str]]] = {
    # kind: (file name, text with @ for the value, loader, command line with {path} {wl} {out})
    "experiment": ("e.yaml", EXPERIMENT + "description: @\n", load_experiment,
                   ["experiment", "run", "{path}", "--out", "{out}", "--jobs", "1", "-q", "--no-plots"]),
    "system": ("s.yaml", "chunks: @\n", load_system_config, ["{wl}", "--system", "{path}", "-q"]),
    "topology": ("t.yaml", "kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\nname: @\n", load_network,
                 ["{wl}", "--topology", "{path}", "-q"]),
    "comm-groups": ("g.yaml", "groups:\n  1: @\n", lambda p: load_comm_groups(p, 4),
                    ["{wl}", "--comm-groups", "{path}", "-q"]),
    "comm-groups-json": ("g.json", '{"1": @}', lambda p: load_comm_groups(p, 4),
                         ["{wl}", "--comm-groups", "{path}", "-q"]),
}  # fmt: skip


def command(template: list[str], **values: Any) -> list[str]:
    return [part.format(**values) for part in template]


@pytest.mark.parametrize("kind", list(CONFIG_KINDS))
def test_deep_nesting_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str], kind: str
) -> None:
    name, text, load, cli = CONFIG_KINDS[kind]
    shapes = ["flow-list", "json-map"] if name.endswith(".json") else SHAPES
    path = tmp_path / name

    def cases() -> Iterator[tuple[str, str | None]]:
        for shape in shapes:
            for depth in NESTINGS:
                for where, written in [
                    ("value", text.replace("@", nested(depth, shape))),
                    ("file", nested(depth, shape)),
                ]:
                    path.write_text(written)
                    yield f"{shape} {depth} as the {where}", attempt(load, path)
        for shape in shapes:
            deep = {"flow-map": DEEP_NESTINGS, "json-map": DEEP_NESTINGS, "flow-list": [2000], "block-map": [2000]}
            for depth in deep.get(shape, []):
                path.write_text(text.replace("@", nested(depth, shape)))
                yield f"{shape} {depth}", attempt(load, path)
        for depth in [101, 150, 2000]:
            path.write_text(text.replace("@", nested(depth, shapes[1])))
            argv = command(cli, path=path, wl=made["wl4"], out=tmp_path / f"out{depth}")
            yield f"etsim {' '.join(argv)}", outcome(capsys, argv, one_line=True)

    gather(cases())


@pytest.mark.parametrize("kind", ["result-for-report-and-plot-links", "astra-system-json"])
def test_deep_json_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str], kind: str
) -> None:
    path = tmp_path / "deep.json"
    astra = tmp_path / "net.yml", tmp_path / "mem.json"
    astra[0].write_text("topology: [Ring]\nnpus_count: [4]\nbandwidth: [50.0]\nlatency: [500.0]\n")
    astra[1].write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')

    def cases() -> Iterator[tuple[str, str | None]]:
        for depth in [100, 101, 1000, 5000, 100_000]:
            for shape in ["flow-list", "json-map"]:
                body = nested(depth, shape)
                if kind == "astra-system-json":
                    path.write_text('{"preferred-dataset-splits": 1, "local-mem-bw": ' + body + "}")
                    argv = ["astra", "--workload-configuration", made["wl4"], "--system-configuration", path,
                            "--network-configuration", astra[0], "--remote-memory-configuration", astra[1]]  # fmt: skip
                    yield f"{shape} {depth}: etsim astra", outcome(capsys, argv, one_line=True)
                    continue
                path.write_text('{"finish_ns": 1.0, "ranks": ' + body + "}")
                for argv in (["report", path], ["plot", "links", path, "-o", tmp_path / "p.png"]):
                    yield f"{shape} {depth}: etsim {argv[0]}", outcome(capsys, argv, one_line=True)

    gather(cases())


# 2. Alias bombs ("billion laughs") of many widths and depths, and anchors reused as keys.

BOMBS = [(2, 30), (2, 19), (3, 20), (5, 12), (9, 6), (10, 9), (100, 4), (1000, 2)]


def alias_bomb(width: int, depth: int, style: str) -> list[str]:
    if style == "list":
        lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
        lines += [f"l{d}: &l{d} [" + ", ".join([f"*l{d - 1}"] * width) + "]" for d in range(1, depth + 1)]
    elif style == "map":
        lines = ["l0: &l0 {" + ", ".join(f"k{i}: lol" for i in range(width)) + "}"]
        lines += [
            f"l{d}: &l{d} {{" + ", ".join(f"k{i}: *l{d - 1}" for i in range(width)) + "}" for d in range(1, depth + 1)
        ]
    else:  # merge keys
        lines = ["l0: &l0 {k: lol}"]
        lines += [f"l{d}: &l{d} {{<<: [" + ", ".join([f"*l{d - 1}"] * width) + "]}" for d in range(1, depth + 1)]
    return lines


KEY_ALIASES = [
    "a: &a [1, 2]\n? *a\n: 1\n",
    "a: &a {x: 1}\n? *a\n: 1\n",
    "&k chunks: 1\n*k : 2\n",
    "a: &a chunks\n*a : 3\n",
    "&k kind: ring\n*k : switch\n",
    "x: &x [*x]\n",
    "&a [*a]\n",
    "? &k [1]\n: *k\n",
    "a: &a [1]\nb: {*a : 1}\n",
    "a: &a 1\nb: &a 2\nc: *a\n",
    "a: *undefined\n",
    "a: &a\nb: *a\n",
]


@pytest.mark.parametrize("kind", [k for k in CONFIG_KINDS if not k.endswith("json")])
def test_alias_bombs_are_refused_fast(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str], kind: str
) -> None:
    name, _, load, cli = CONFIG_KINDS[kind]
    path = tmp_path / name

    def cases() -> Iterator[tuple[str, str | None]]:
        for style in ["list", "map", "merge"]:
            for width, depth in BOMBS:
                lines = alias_bomb(width, depth, style)
                variants = {
                    "top": "\n".join(lines) + "\n",
                    "nested": "x:\n" + "\n".join("  " + line for line in lines) + "\n",
                    "flow": "[" + ", ".join(line.split(": ", 1)[1] for line in lines) + "]\n",
                }
                for variant, text in variants.items():
                    path.write_text(text)
                    yield f"{style} {width}^{depth} {variant}", attempt(load, path, FAST)
        for i, text in enumerate(KEY_ALIASES):
            path.write_text(text)
            yield f"key alias {i}: {text!r}", attempt(load, path, FAST)
        path.write_text("\n".join(alias_bomb(10, 9, "list")) + "\n")
        argv = command(cli, path=path, wl=made["wl4"], out=tmp_path / "out")
        yield f"etsim {' '.join(argv)}", outcome(capsys, argv, limit=FAST, one_line=True)

    gather(cases())


# 3. Huge, tiny and non-finite numbers in every unit-parsed option: a clear error or a finite result.

NUMBERS: dict[str, list[str]] = {
    # numbers of each class, written with units of the option's kind (and bare: then YAML decides the type)
    "ordinary": ["1e300", "1e308", "1e400", "inf", "-inf", "nan", ".inf", ".nan", "-1", "0", "-0", "1e18", "1e21",
                 "1e-300", str(10**30), "0x10", "1e"],
    "int-beyond-float": [str(10**400), str(-(10**400)), str(2**1024)],  # a YAML integer float() cannot hold
    "subnormal": ["1e-310", "5e-324", "1e-320"],  # positive, and stays so in internal units: 1 / x overflows
    "underflow-to-zero": ["1e-320", "5e-324"],  # positive, but 0.0 once in internal units
    "overflow-in-unit": ["1e300", "1e306", "1e308"],  # finite, but inf once in internal units
}  # fmt: skip
UNITS = {  # per class of number: which units to write it with
    "time": {"ordinary": ["", "ns", "s", "ps"], "keep": ["ns", "us"], "down": [], "up": ["s", "ms"]},
    "bandwidth": {"ordinary": ["", "GB/s", "B/ns", "Gbps"], "keep": ["", "GB/s", "TB/s", "B/ns"],
                  "down": ["B/s", "b/s", "KB/s"], "up": ["TB/s", "PiB/s"]},
    "flops": {"ordinary": ["", "TFLOP/s", "PFLOPS"], "keep": ["TFLOP/s", "PFLOPS"], "down": ["FLOP/s", "KFLOP/s"],
              "up": ["PFLOP/s"]},
    "size": {"ordinary": ["", "B"], "keep": ["B"], "down": [], "up": ["GiB", "PiB", "TB"]},
    "count": {"ordinary": [""], "keep": [""], "down": [], "up": []},
}  # fmt: skip
CLASS_UNITS = {"ordinary": "ordinary", "int-beyond-float": "ordinary", "subnormal": "keep",
               "underflow-to-zero": "down", "overflow-in-unit": "up"}  # fmt: skip


def numbers(number_class: str, kind: str) -> list[str]:
    """Values of *number_class* for an option of *kind*, each number with each unit (bare: YAML decides its type)."""
    units = UNITS[kind][CLASS_UNITS[number_class]]
    return [f"{n} {u}".strip() for n in NUMBERS[number_class] for u in units]


SYSTEM_NUMBERS = {
    "endpoint_delay": "time", "stream_delay": "time", "phase_delay": "time", "min_compute_ns": "time",
    "remote_memory_latency": "time", "peak_flops": "flops", "memory_bandwidth": "bandwidth",
    "reduction_bandwidth": "bandwidth", "remote_memory_bandwidth": "bandwidth", "chunks": "count",
    "active_streams": "count", "reduction_passes": "count", "resources.compute_streams": "count",
    "resources.comm_streams": "count", "resources.cpu_ops": "count",
}  # fmt: skip
SYSTEM_BASE = {
    "peak_flops": "312 TFLOP/s",
    "memory_bandwidth": "2 TB/s",
    "reduction_bandwidth": "100 GB/s",
    "chunks": "2",
}


@pytest.mark.parametrize("number_class", list(NUMBERS))
def test_numbers_in_system_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str], number_class: str
) -> None:
    """Every option of a system file, on a workload with roofline compute, memory, a collective and send/recv."""
    path = tmp_path / "sys.yaml"
    models = ["flow", "link", "analytical", "ideal"]

    def cases() -> Iterator[tuple[str, str | None]]:
        for key, kind in SYSTEM_NUMBERS.items():
            for i, value in enumerate(numbers(number_class, kind)):
                settings = dict(SYSTEM_BASE)
                if key.startswith("resources."):
                    settings["resources"] = f"{{{key.split('.')[1]}: {value}}}"
                else:
                    settings[key] = value
                path.write_text("".join(f"{k}: {v}\n" for k, v in settings.items()))
                yield f"{key}: {short(value)}", attempt(load_system_config, path)
                argv = [made["mixed"], "--system", path, "--model", models[i % 4], "-q"]
                yield f"{key}: {short(value)} (--model {models[i % 4]})", outcome(capsys, argv)

    gather(cases())


TOPOLOGY_NUMBERS = {
    "ring": "kind: ring\nnpus: 4\nbandwidth: {bandwidth}\nlatency: {latency}\n",
    "switch": "kind: switch\nnpus: 4\nbandwidth: {bandwidth}\nlatency: {latency}\n",
    "product": "kind: product\ndims:\n  - {{kind: ring, npus: 2, bandwidth: {bandwidth}, latency: {latency}}}\n"
               "  - {{kind: switch, npus: 2, bandwidth: 50 GB/s, latency: 1 us}}\n",
    "graph": "kind: graph\nnpus: 4\nswitches: 1\nbandwidth: 50 GB/s\nlatency: 500 ns\nlinks:\n"
             "  - {{src: 0, dst: s0, bandwidth: {bandwidth}, latency: {latency}}}\n"
             "  - {{src: 1, dst: s0}}\n  - {{src: 2, dst: s0}}\n  - {{src: 3, dst: s0}}\n",
    "astra": "topology: [Ring]\nnpus_count: [4]\nbandwidth: [{bandwidth}]\nlatency: [{latency}]\n",
}  # fmt: skip
NETWORK_NUMBERS = {"link": ("packet_size", "size"), "ideal": ("delay", "time"), "flow": ("seed", "count")}


@pytest.mark.parametrize("number_class", list(NUMBERS))
def test_numbers_in_topologies_and_network_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str], number_class: str
) -> None:
    """Link bandwidth and latency of every topology kind (under each model), and the models' own options."""
    path = tmp_path / "topo.yaml"
    models = ["flow", "link", "analytical"]

    def cases() -> Iterator[tuple[str, str | None]]:
        for kind, template in TOPOLOGY_NUMBERS.items():
            usual = (
                {"bandwidth": "50", "latency": "500"}
                if kind == "astra"
                else {"bandwidth": "50 GB/s", "latency": "1 us"}
            )
            for key, unit_kind in [("bandwidth", "bandwidth"), ("latency", "time")]:
                for i, value in enumerate(numbers(number_class, unit_kind)):
                    path.write_text(template.format(**(usual | {key: value})))
                    yield f"{kind} {key}: {short(value)}", attempt(load_network, path)
                    if i % 2 and number_class == "ordinary":
                        continue  # the loader checks every value; the runs take turns
                    argv = [made["mixed"], "--topology", path, "--model", models[i % 3], "-q"]
                    yield f"{kind} {key}: {short(value)} (--model {models[i % 3]})", outcome(capsys, argv)
        for model, (key, unit_kind) in NETWORK_NUMBERS.items():
            for value in numbers(number_class, unit_kind):
                if key == "packet_size" and value in ("1", "1 B"):
                    continue  # legal, and slow by design: an event per byte per hop
                network = f"network: {{model: {model}, {key}: {value}}}\n"
                path.write_text("kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\n" + network)
                yield f"network {model} {key}: {short(value)}", attempt(load_network, path)
                yield (
                    f"etsim run, network {model} {key}: {short(value)}",
                    outcome(capsys, [made["mixed"], "--topology", path, "-q"]),
                )

    gather(cases())


RUN_FLAGS = {"--endpoint-delay": "time", "--reduction-bandwidth": "bandwidth", "--chunks": "count"}


@pytest.mark.parametrize("number_class", list(NUMBERS))
def test_numbers_in_command_line_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str], number_class: str
) -> None:
    """etsim run's unit flags, workload gen --size and tune --sizes."""

    def cases() -> Iterator[tuple[str, str | None]]:
        for flag, kind in RUN_FLAGS.items():
            for value in numbers(number_class, kind):
                yield f"run {flag} {short(value)}", outcome(capsys, [made["mixed"], flag, value, "-q"], one_line=True)
        for value in numbers(number_class, "size"):
            argv = ["workload", "gen", "collective", "--type", "all_reduce", "--npus", "4", "--size", value]
            yield (
                f"workload gen --size {short(value)}",
                outcome(capsys, [*argv, "-o", tmp_path / "w" / "x"], one_line=True),
            )
            argv = ["tune", "--topology", made["ring4"], "--candidates", "ring", "--sizes", value, "--jobs", "1"]
            argv += ["--plot", "none", "-o", tmp_path / "t" / "table.yaml"]
            yield f"tune --sizes {short(value)}", outcome(capsys, argv)

    gather(cases())


# 4. Empty and malformed module:Class plug-in names, wherever a plug-in is named: one line, exit 1 (or 2).

PLUGIN_NAMES = {
    "malformed": [":", "a:", ":B", "::", "a::b", ":" * 50, "a:b:c", " :X", "\t:\t", "a :B"],
    "unimportable": ["no_such_mod:X", "no_such_mod.sub:X", "x_no_such.py:Y", "/nonexistent/p.py:C", "..py:X",
                     ".py:X", "foo-bar:X", "1abc:X", "\u00e9:x", "a" * 300 + ":B", "os.no_such:X"],
    "not-a-plugin": ["os:path", "etsim:Nope", "os.path:join", "etsim.errors:EtsimError", "json:loads", "sys:exit",
                     "builtins:SystemExit", "builtins:object", "etsim.cli:main", "os:_exit", "etsim:__version__"],
    "relative-module": [".:X", "..x:Y", "./:X", ".etsim:X"],  # a module name importlib reads as relative
}  # fmt: skip


def plugin_commands(name: str, tmp: Path, made: dict[str, str]) -> Iterator[tuple[str, list[Any]]]:
    """Every place a plug-in is named, with *name* there; writes the files those places are in."""
    wl, ring4 = made["mixed"], made["ring4"]
    ring = {"kind": "ring", "npus": 4, "bandwidth": "50 GB/s", "latency": "500 ns"}
    files = {
        "kind.yaml": {"kind": name, "npus": 4},
        "model.yaml": ring | {"network": {"model": name}},
        "router.yaml": ring | {"network": {"router": name}},
        "system.yaml": {"algorithms": {"all_reduce": name}},
        "experiment.yaml": yaml.safe_load(EXPERIMENT) | {"model": name},
        "generator.yaml": {"workload": {"generate": name, "npus": 4}},
        "experiment_algo.yaml": yaml.safe_load(EXPERIMENT) | {"algo": name},
    }
    for file, value in files.items():
        (tmp / file).write_text(yaml.safe_dump(value, allow_unicode=True))
    experiment = ["experiment", "run", "--jobs", "1", "-q", "--no-plots", "--out"]
    tune = ["tune", "--topology", ring4, "--sizes", "1KiB", "--jobs", "1", "--plot", "none", "-o", tmp / "t.yaml"]
    yield "run --model", [wl, "--model", name, "-q"]
    yield "run --algo", [wl, "--algo", name, "-q"]
    yield "run --algo all_reduce=", [wl, "--algo", f"all_reduce={name}", "-q"]
    yield "topology kind:", [wl, "--topology", tmp / "kind.yaml", "-q"]
    yield "topology network.model:", [wl, "--topology", tmp / "model.yaml", "-q"]
    yield "topology network.router:", [wl, "--topology", tmp / "router.yaml", "-q"]
    yield "system algorithms:", [wl, "--system", tmp / "system.yaml", "-q"]
    yield "algo export", ["algo", "export", name, "--collective", "all_reduce", "--npus", "4", "-o", tmp / "ae" / "x"]
    yield "algo verify", ["algo", "verify", name, "--collective", "all_reduce", "--npus", "4"]
    yield "experiment model:", [*experiment, tmp / "ex1", tmp / "experiment.yaml"]
    yield "experiment algo:", [*experiment, tmp / "ex2", tmp / "experiment_algo.yaml"]
    yield "experiment generate:", [*experiment, tmp / "ex3", tmp / "generator.yaml"]
    yield "experiment --engine", [*experiment, tmp / "ex4", "--engine", name, tmp / "experiment.yaml"]
    yield "workload gen", ["workload", "gen", name, "-o", tmp / "wg" / "x"]
    yield "tune --candidates", [*tune, "--candidates", name]
    yield "tune --model", [*tune, "--candidates", "ring", "--model", name]


@pytest.mark.parametrize("names", list(PLUGIN_NAMES))
def test_malformed_plugin_names_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str], names: str
) -> None:
    def cases() -> Iterator[tuple[str, str | None]]:
        for name in PLUGIN_NAMES[names]:
            for where, argv in plugin_commands(name, tmp_path, made):
                # tune lists every point it skipped (see the test below for --model); a sweep, its failed points
                one_line = not where.startswith(("tune", "experiment algo"))  # these list what they skipped
                yield f"{where} {name[:40]!r}", outcome(capsys, argv, one_line=one_line)

    gather(cases())


def test_tune_refuses_a_malformed_model_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str]
) -> None:
    """A network model no point can load is refused before any work, in one line (as tune does for --fallback)."""
    base = ["tune", "--topology", made["ring4"], "--jobs", "1", "--plot", "none", "-o", tmp_path / "t.yaml"]

    def cases() -> Iterator[tuple[str, str | None]]:
        for name in [":", "a:", ":B", "etsim:Nope", "no_such_mod:X", "os:path"]:
            yield (
                f"tune --model {name!r}",
                outcome(capsys, [*base, "--sizes", "1KiB..64KiB", "--model", name], one_line=True),
            )

    gather(cases())


# 5. Bombs in Chakra ET files: gzip of zeros, empty-frame floods, truncated varints, huge declared lengths.

TRACE_COMMANDS = ["run", "validate", "inspect", "jsonize"]


def trace_command(command_name: str, path: Path, tmp: Path) -> list[Any]:
    return {
        "run": ["run", path, "-q"],
        "validate": ["validate", path],
        "inspect": ["inspect", path],
        "jsonize": ["jsonize", path, "-o", tmp / "out.json"],
    }[command_name]


def mutate_frames(data: bytes, rng: random.Random) -> bytes:
    """A Chakra ET file with its framing broken: truncated, a varint cut or overlong, a length past the end, …"""
    spans = []
    pos = 0
    while pos < len(data):
        length, start = decode_varint(data, pos)
        spans.append((pos, start, start + length))
        pos = start + length
    frame, start, end = rng.choice(spans)
    action = rng.randrange(9)
    if action == 0:
        return data[: rng.randrange(len(data))]  # truncated anywhere
    if action == 1:
        return data[:start] + data[start : end - rng.randint(1, max(1, end - start))]  # last frame cut short
    if action == 2:
        return data[:frame] + b"\x80" * rng.randint(1, 4)  # a varint that never ends
    if action == 3:
        return data[:frame] + b"\xff" * rng.randint(5, 12) + b"\x01" + data[start:]  # longer than 5 bytes
    if action == 4:
        huge = rng.choice([2**31, 2**32 - 1, 2**35, 2**63])
        return data[:frame] + encode_varint(huge)[:5] + data[start:]  # declares far more than the file holds
    if action == 5:
        return data[:end] + b"\x00" * rng.randint(1, 4096) + data[end:]  # a run of empty frames
    if action == 6:
        return data[:start] + bytes(rng.randrange(256) for _ in range(end - start)) + data[end:]  # junk payload
    if action == 7:
        return data[:frame] + encode_varint(end - start + rng.randint(1, 3)) + data[start:]  # overlapping frames
    return gzip.compress(mutate_frames(data, rng), mtime=0)[: rng.choice([None, 20, -8])]  # gzipped, maybe cut


def test_broken_frames_in_trace_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    """Rank 0 of a 4-rank workload broken 150 ways, through each command that reads traces."""
    family = tmp_path / "wl"
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4), family)
    seeds = [(family.with_name("wl.0.et")).read_bytes(), (repo / "workloads" / "dp_8npus_4layers.0.et").read_bytes()]
    rng = random.Random(20)

    def cases() -> Iterator[tuple[str, str | None]]:
        for case in range(150):
            broken = mutate_frames(rng.choice(seeds), rng)
            family.with_name("wl.0.et").write_bytes(broken)
            for name in TRACE_COMMANDS:
                argv = trace_command(name, family.with_name("wl.0.et"), tmp_path)
                yield f"case {case} (seed 20) {name}: {broken[:24]!r}", outcome(capsys, argv)

    gather(cases())


@pytest.mark.parametrize("bomb", ["gzip-of-64MiB-of-zeros", "4MiB-of-empty-frames"])
def test_trace_bombs_are_refused_fast(tmp_path: Path, capsys: pytest.CaptureFixture[str], bomb: str) -> None:
    """A small file that expands to tens of millions of empty nodes is refused, not walked for minutes."""
    metadata = b"\x0a\x051.0.0"
    path = tmp_path / "bomb.0.et"
    if bomb.startswith("gzip"):
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 64 MiB of zeros: 65 KB of gzip
        path.write_bytes(packer.compress(bytes(64 << 20)) + packer.flush())
    else:
        path.write_bytes(encode_varint(len(metadata)) + metadata + bytes(4 << 20))

    small = tmp_path / "small"
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 1), small)

    def cases() -> Iterator[tuple[str, str | None]]:
        for name in TRACE_COMMANDS:
            yield (
                f"etsim {name} (a small trace)",
                outcome(capsys, trace_command(name, small.with_name("small.0.et"), tmp_path)),
            )
            yield f"etsim {name}", outcome(capsys, trace_command(name, path, tmp_path), limit=BOMB)

    gather(cases())


# 6. Hand-edited results for etsim report and etsim plot links: every field of a real result given the wrong type,
# a non-finite number, dropped or joined by an extra key; and files that are not results at all.

RESULT_JUNK: list[Any] = [None, -1, 2**70, 1.5, float("nan"), float("inf"), -float("inf"), True, "many", "", [], {},
                          [1, 2], {"a": 1}, "1e400", "DROP", "EXTRA"]  # fmt: skip
RESULT_FIELDS = ["finish_ns", "ranks", "collectives", "network", "sim", "links", "groups", "critical_path", "warnings"]
REPORT_FORMATS = [
    ["--format", "text"], ["--format", "markdown"], ["--format", "csv", "--table", "collectives"],
    ["--format", "csv", "--table", "ranks"], ["--format", "csv", "--table", "groups"],
    ["--format", "csv", "--table", "links"], ["--format", "csv", "--table", "critical_path"],
    ["--format", "csv", "--table", "summary"], ["--format", "markdown", "--table", "critical_path"],
]  # fmt: skip


def some_paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """paths_in, but into the first two items of each list only."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from some_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):
            yield from some_paths(v, (*prefix, i))


def edited(result: dict[str, Any], path: tuple[Any, ...], junk: Any) -> str | None:
    """*result* with the value at *path* replaced by *junk* (or dropped, or given an extra key), as JSON text."""
    result = json.loads(json.dumps(result))
    parent = result
    for key in path[:-1]:
        parent = parent[key]
    if junk == "DROP":
        del parent[path[-1]]
    elif junk == "EXTRA":
        target = parent[path[-1]]
        if isinstance(target, dict):
            target["unexpected"] = {"x": 1}
        elif isinstance(target, list):
            target.append(target[0] if target else 7)
        else:
            return None
    else:
        parent[path[-1]] = "@1e400@" if junk == "1e400" else junk
    return json.dumps(result).replace('"@1e400@"', "1e400")  # NaN and Infinity as Python writes them


@pytest.mark.parametrize("field", [*RESULT_FIELDS, "whole-file"])
def test_hand_edited_results_for_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str], field: str
) -> None:
    result = json.loads(Path(made["dp"]).read_text())
    path = tmp_path / "result.json"
    paths = [p for p in some_paths(result) if p and p[0] == field]
    whole = ["not json", "[]", "null", "1", '"result"', "{}", '{"finish_ns": 1}', json.dumps({"traceEvents": []}),
             json.dumps([result]), json.dumps(result) + "\n{}", json.dumps({**result, "finish_ns": "NaN"})]  # fmt: skip
    formats = itertools.cycle(REPORT_FORMATS)
    rng = random.Random(RESULT_FIELDS.index(field) if field in RESULT_FIELDS else 99)

    def cases() -> Iterator[tuple[str, str | None]]:
        if field == "whole-file":
            for i, text in enumerate(whole):
                path.write_text(text)
                for fmt in REPORT_FORMATS:
                    yield (
                        f"file {i} {text[:30]!r} {' '.join(fmt)}",
                        outcome(capsys, ["report", path, *fmt], one_line=True),
                    )
            for name in ["trace", "plain_trace", "et"]:
                for argv in (["report", made[name]], ["plot", "links", made[name], "-o", tmp_path / "p.png"]):
                    yield f"a {name} given as the result: etsim {argv[0]}", outcome(capsys, argv, one_line=True)
            return
        for p in paths:
            for junk in rng.sample(RESULT_JUNK, 9):  # 9 of the 17 edits per value, seeded
                text = edited(result, p, junk)
                if text is None:
                    continue
                path.write_text(text)
                fmt = next(formats)
                where = ".".join(map(str, p))
                yield (
                    f"{where} = {short(junk)} ({' '.join(fmt)})",
                    outcome(capsys, ["report", path, *fmt], one_line=True),
                )

    gather(cases())


@pytest.mark.parametrize("which", ["fields", "dims-npus-huge"])
def test_hand_edited_results_for_plot_links(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: dict[str, str], which: str
) -> None:
    """plot links draws a grid for a 2-D mesh (network.dims) and bars otherwise; each picture costs ~0.1 s."""
    mesh = json.loads(Path(made["mesh"]).read_text())
    path = tmp_path / "result.json"
    rng = random.Random(6)
    if which == "fields":
        paths = [p for p in some_paths(mesh) if p and p[0] in ("links", "network", "finish_ns")]
        edits = [(p, rng.choice(RESULT_JUNK)) for p in rng.sample(paths, 14)]
        edits += [(("links",), {"a": 1}), (("links", 0, "bytes"), "many"), (("finish_ns",), "1e400"),
                  (("network", "dims"), [1, 2]), (("network", "dims", 0, "npus"), 0),
                  (("links", 0), "DROP")]  # fmt: skip
    else:
        edits = [(("network", "dims", 0, "npus"), 2**64)]

    def cases() -> Iterator[tuple[str, str | None]]:
        for p, junk in edits:
            text = edited(mesh, p, junk)
            if text is None:
                continue
            path.write_text(text)
            argv = ["plot", "links", path, "-o", tmp_path / "links.png"]
            yield f"{'.'.join(map(str, p))} = {short(junk)}", outcome(capsys, argv, limit=FAST, one_line=True)

    gather(cases())


# 7. Experiment files: names that are not one path component, absurd repeat counts, sweep axes with junk, counts
# no generator should take; run with --out under tmp_path, and nothing outside it touched.


EXPERIMENT_NAMES = ["..", "./x", "", "a/b", ".", "/", "/tmp", "../keep", "a\\b", "~", "$HOME", "a\nb", " ", "-",
                    ".hidden", "x" * 300, "\u540d\u524d", "a b", None, 1, [], {"a": 1}, True, "ok.1-2"]  # fmt: skip


def experiment_outcome(
    capsys: pytest.CaptureFixture[str], tmp: Path, data: Any, *, limit: float = LIMIT, out: bool = True
) -> str | None:
    """Write *data* as an experiment file and run it (into a fresh --out, or without one in the working directory)."""
    runs = sorted(tmp.glob("run*"))
    here = tmp / f"run{len(runs):05d}"
    here.mkdir()
    path = here / "exp.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, allow_unicode=True))
    argv = ["experiment", "run", path, "--jobs", "1", "-q", "--no-plots", "--force"]
    problem = outcome(capsys, [*argv, "--out", here / "out"] if out else argv, limit=limit)
    if problem is None:
        errors = [row.get("error", "") for row in csv_rows(here / "out" / "results.csv")]
        internal = [e for e in errors if e.startswith("internal error")]
        problem = f"a point failed with {internal[0][:160]}" if internal else None
    return problem


def csv_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("which", ["names", "sweep-junk", "repeat", "generator-junk"])
def test_mutated_experiments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """Clear errors or results; every file outside the runs' directories stays as it was."""
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "results.csv").write_text("mine\n")
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path / "runs")  # a name resolves to results/<name> here when --out is not given
    before = snapshot(tmp_path / "keep")
    base = yaml.safe_load(EXPERIMENT) | {"name": "fz"}
    rng = random.Random(7)

    def cases() -> Iterator[tuple[str, str | None]]:
        runs = tmp_path / "runs"
        if which == "names":
            for name in EXPERIMENT_NAMES:
                for out in (True, False):
                    problem = experiment_outcome(capsys, runs, base | {"name": name}, out=out)
                    yield f"name {short(name)} ({'--out' if out else 'no --out'})", problem
        elif which == "repeat":
            yield "an ordinary experiment", experiment_outcome(capsys, runs, base)
            for repeat in [0, -1, 1.5, "3", True, None, [], "1e12", 2, 10**12, 2**63, 10**400]:
                problem = experiment_outcome(capsys, runs, base | {"repeat": repeat}, limit=BOMB)
                yield f"repeat {short(repeat)}", problem
        elif which == "generator-junk":
            workload = base["workload"]
            yield "an ordinary experiment", experiment_outcome(capsys, runs, base)
            for key, value in [("count", 10**12), ("size", "1e300 GiB"), ("size", 10**400), ("npus", 10**12),
                               ("count", 0), ("type", "nope"), ("size", -1), ("pg_name", [])]:  # fmt: skip
                problem = experiment_outcome(capsys, runs, base | {"workload": workload | {key: value}}, limit=BOMB)
                yield f"workload.{key} {short(value)}", problem
            dp = {"generate": "dp", "npus": 4, "layers": 2, "grad_size": "1 KiB"}
            for key, value in [("layers", 10**12), ("iterations", 10**12), ("fwd_us", 10**24), ("layers", 0)]:
                problem = experiment_outcome(capsys, runs, base | {"workload": dp | {key: value}}, limit=BOMB)
                yield f"dp {key} {value}", problem
            gen = ["workload", "gen", "dp", "--npus", "4", "--grad-size", "1KiB", "-o", tmp_path / "runs" / "gen" / "x"]
            for flags in [
                ["--layers", 10**12],
                ["--layers", 2, "--iterations", 10**12],
                ["--layers", 2, "--fwd-us", 10**24],
            ]:
                yield f"etsim workload gen dp {flags}", outcome(capsys, [*gen, *flags], limit=BOMB, one_line=True)
            gen = ["workload", "gen", "collective", "--type", "all_reduce", "--npus", "4", "--size", "1KiB", "--count"]
            yield (
                "etsim workload gen collective --count 10**12",
                outcome(capsys, [*gen, 10**12, "-o", runs / "g"], limit=BOMB),
            )
        else:
            sweep = {"size": ["1 KiB", "4 KiB"], "algo": {"r": "ring", "d": "direct"}, "system.chunks": [1, 2],
                     "topology.bandwidth": ["50 GB/s", "100 GB/s"]}  # fmt: skip
            seed = base | {"topology": {"kind": "ring", "npus": 4, "bandwidth": "50 GB/s", "latency": "1 us"}}
            seed |= {"sweep": sweep, "zip": {"model_options.seed": [0, 1], "system.endpoint_delay": ["0 ns", "9 ns"]}}
            for case in range(120):
                data = mutate_structure(seed, rng)
                if case % 4:  # most are only loaded and expanded: experiment show
                    path = runs / "show.yaml"
                    path.write_text(yaml.safe_dump(data, allow_unicode=True))
                    yield f"case {case} (seed 7) shown", outcome(capsys, ["experiment", "show", path])
                else:
                    yield f"case {case} (seed 7) run", experiment_outcome(capsys, runs, data)
            for axis in ["size", "system.chunks", "system.endpoint_delay", "topology.latency"]:
                for junk in [[10**400], ["1e300 GiB"], [float("nan")], [[1, 2]], [{"a": 1}], [None], ["x" * 300]]:
                    yield (
                        f"sweep {axis} {short(junk)}",
                        experiment_outcome(capsys, runs, base | {"sweep": {axis: junk}}),
                    )
            wide = base | {
                "sweep": {"size": [f"{i} KiB" for i in range(1, 1001)], "system.chunks": list(range(1, 1001))}
            }
            yield "sweep of 1000 x 1000 points", experiment_outcome(capsys, runs, wide, limit=BOMB)
        assert snapshot(tmp_path / "keep") == before
        assert not (tmp_path / "results").exists() and not (tmp_path / "keep" / "fz").exists()

    gather(cases())
