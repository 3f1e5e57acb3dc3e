"""Bad inputs found in review: each is a clear etsim error (never a traceback) or now behaves right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etsim.chakra import CollectiveType, TraceBuilder, Workload, resolve_family, validate_workload, write_trace
from etsim.chakra.graph import Trace
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.cli import main
from etsim.errors import ConfigError, SimulationError, TraceError
from etsim.simulation import simulate
from etsim.system.config import load_system_config


def test_system_yaml_rejects_null_bandwidth_and_groups(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="remote_memory_bandwidth: expected a bandwidth"):
        load_system_config({"remote_memory_bandwidth": None})
    with pytest.raises(ConfigError, match="must be positive"):
        load_system_config({"reduction_bandwidth": "0 GB/s"})
    with pytest.raises(ConfigError, match="comm_groups: expected the path"):
        load_system_config({"comm_groups": None})


def test_metadata_group_ranks_must_be_a_list() -> None:
    b = TraceBuilder()
    b.node(1, "process_group:init")
    b.nodes[-1].inputs.values = '[\'[{"pg_name": "1", "ranks": 5}]\']'
    with pytest.raises(ConfigError, match="process group ranks must be a list"):
        simulate(Workload([b.build(rank=0)]))


def test_duplicate_ids_are_rejected_before_the_run() -> None:
    nodes = [pb.Node(id=1, type=pb.COMP_NODE, duration_micros=10), pb.Node(id=1, type=pb.COMP_NODE)]
    with pytest.raises(SimulationError, match="node id 1 is defined more than once"):
        simulate(Workload([Trace.from_nodes(nodes, rank=0)]))


def test_family_with_two_files_for_one_rank(tmp_path: Path) -> None:
    trace = TraceBuilder().build()
    for name in ("f.0.et", "f.00.et", "f.1.et"):
        write_trace(trace, tmp_path / name)
    with pytest.raises(TraceError, match=r"f.0.et and f.00.et are both rank 0 of f|f.00.et and f.0.et are both"):
        resolve_family(tmp_path / "f")


def test_validate_ignores_ctrl_deps_across_ranks_too() -> None:
    # A send sitting on a control-dependency cycle: with --ignore-ctrl-deps it is issued normally.
    a = [
        pb.Node(id=1, type=pb.COMP_NODE, ctrl_deps=[2]),
        pb.Node(id=2, type=pb.COMM_SEND_NODE, ctrl_deps=[1]),
    ]
    for key, value in (("comm_dst", 1), ("comm_tag", 0), ("comm_size", 8)):
        a[1].attr.add(name=key).int64_val = value
    r = TraceBuilder()
    r.recv(src=0, size=8, tag=0)
    wl = Workload([Trace.from_nodes(a, rank=0), r.build(rank=1)])
    errors = [i.message for i in validate_workload(wl, ignore_ctrl_deps=True) if i.severity == "error"]
    assert errors == []
    assert any("0 sends but 1 receives" in i.message for i in validate_workload(wl) if i.severity == "error")


def test_cli_algo_paths_are_relative_to_the_working_directory(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    for p in (repo / "algorithms").glob("ring_allreduce_8npus.*.et"):
        shutil.copy(p, tmp_path / p.name)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "sys.yaml").write_text("chunks: 1\n")
    monkeypatch.chdir(tmp_path)
    wl = str(repo / "workloads" / "allreduce_8npus_1MiB")
    for algo in ("ring_allreduce_8npus", "./ring_allreduce_8npus"):
        assert main([wl, "--algo", algo, "--system", "sub/sys.yaml", "-q"]) == 0
    assert main([wl, "--algo", "all_reduce=", "-q"]) == 1
    assert "no algorithm given" in capsys.readouterr().err


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
