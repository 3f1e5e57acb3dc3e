"""ASTRA-sim input files: bad values are one clear error naming the file and key, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etsim.chakra import CollectiveType
from etsim.cli import main


def _astra(tmp_path: Path, extra: dict[str, object], mem: dict[str, object] | None = None) -> list[str]:
    from etsim.chakra import write_workload
    from etsim.producers import collective_workload

    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4), tmp_path / "wl")
    system = {"preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"], "local-mem-bw": 1600, **extra}
    (tmp_path / "sys.json").write_text(json.dumps(system))
    (tmp_path / "net.yml").write_text("topology: [Ring]\nnpus_count: [4]\nbandwidth: [50.0]\nlatency: [500.0]\n")
    args = ["astra", "--workload-configuration", str(tmp_path / "wl"), "--system-configuration",
            str(tmp_path / "sys.json"), "--network-configuration", str(tmp_path / "net.yml")]  # fmt: skip
    if mem is not None:
        (tmp_path / "mem.json").write_text(json.dumps(mem))
        args += ["--remote-memory-configuration", str(tmp_path / "mem.json")]
    return args


@pytest.mark.parametrize(
    ("per_node", "fragment"),
    [("a: [\n", "not valid YAML"), ("abc: x\n", "expected a node id and an ET prefix")],
)
def test_astra_per_node_file_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], per_node: str, fragment: str
) -> None:
    (tmp_path / "per_node.yaml").write_text(per_node)
    args = _astra(tmp_path, {"per-node-custom-implementation": str(tmp_path / "per_node.yaml")})
    assert main(args) == 1
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert main(_astra(tmp_path, {"per-node-custom-implementation": 5})) == 1
    assert "must be the path of a YAML file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("mem", "fragment"),
    [
        ({"memory-type": "MEMORY_POOL", "remote-mem-latency": "abc"}, "'remote-mem-latency' must be a number >= 0"),
        ({"memory-type": "MEMORY_POOL", "remote-mem-bw": 0}, "'remote-mem-bw' must be a number > 0"),
        ({"memory-type": "MEMORY_POOL", "remote-mem-bw": -5}, "'remote-mem-bw' must be a number > 0"),
    ],
)
def test_astra_remote_memory_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mem: dict, fragment: str
) -> None:  # type: ignore[type-arg]
    assert main(_astra(tmp_path, {}, mem)) == 1
    assert fragment in capsys.readouterr().err


def test_astra_custom_collective_with_chunk_counts_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["algo", "export", "ring", "--collective", "all_reduce", "--npus", "4", "-o", str(tmp_path / "sym")]) == 0
    )
    capsys.readouterr()
    assert main(_astra(tmp_path, {"all-reduce-implementation-custom": [str(tmp_path / "sym")]})) == 1
    assert "gives sizes as chunk counts" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["MEMORY_POOL", "PER_NODE_MEMORY_EXPANSION"])
def test_a_shared_remote_memory_is_said_to_be_timed_per_npu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """ASTRA-sim serialises a pool's (or a node's) requests; etsim times each NPU's alone, which it did in silence."""
    from etsim.chakra import TraceBuilder, write_workload

    traces = []
    for rank in range(4):
        b = TraceBuilder()
        b.mem(True, 1000)
        traces.append(b.build(rank=rank))
    args = _astra(tmp_path, {}, {"memory-type": kind, "remote-mem-latency": 100, "remote-mem-bw": 10})
    write_workload(traces, tmp_path / "wl")
    assert main(args) == 0
    assert f"memory-type {kind}: etsim times every NPU's requests on its own" in capsys.readouterr().err
