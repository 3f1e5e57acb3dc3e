"""``etsim run`` / ``python -m etsim WORKLOAD``: output, JSON document, errors, shipped examples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from etsim.cli import main

B, L = 50.0, 500.0


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_default_command_and_json_document(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "r.json"
    code, out, _ = run(
        capsys,
        str(repo / "workloads" / "allreduce_8npus_1MiB.et"),
        "--topology",
        str(repo / "topologies" / "ring8.yaml"),
        "--json",
        str(out_json),
    )
    assert code == 0 and "all_reduce" in out and "finish time" in out
    doc = json.loads(out_json.read_text())
    assert set(doc) >= {"finish_ns", "ranks", "collectives", "network", "sim"}
    expected = 2 * 7 * (L + (1 << 20) / 8 / B)
    assert doc["finish_ns"] == pytest.approx(expected, rel=1e-12)
    assert set(doc["ranks"][0]) == {"rank", "finish_ns", "compute_ns", "comm_ns", "exposed_comm_ns"}
    coll = doc["collectives"][0]
    assert coll["type"] == "ALL_REDUCE" and coll["bytes"] == 1 << 20 and coll["group"] == list(range(8))
    assert coll["algorithm"] == "ring" and coll["end_ns"] - coll["start_ns"] == pytest.approx(expected)
    assert (
        doc["network"]["model"] == "flow" and doc["network"]["messages"] == 8 * 14
    )  # the default: ring8.yaml names none
    assert doc["sim"]["events"] > 0


def test_per_collective_algorithms_and_models(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = str(repo / "workloads" / "allreduce_8npus_1MiB")
    fc = str(repo / "topologies" / "fully_connected8.yaml")
    code, out, _ = run(capsys, "run", wl, "--topology", fc, "--algo", "all_reduce=direct", "--json", "-")
    doc = json.loads(out)
    assert code == 0 and doc["collectives"][0]["algorithm"] == "direct"
    assert doc["finish_ns"] == pytest.approx(2 * (L + (1 << 20) / 8 / 25.0), rel=1e-12)  # 25 GB/s links
    code, out, _ = run(capsys, "run", wl, "--topology", fc, "--model", "link", "--json", "-")
    assert code == 0 and json.loads(out)["network"]["model"] == "link"


def test_system_yaml_resolves_paths_relative_to_itself(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sys.yaml").write_text(
        f"algorithms:\n  all_reduce: {repo / 'algorithms' / 'ring_allreduce_8npus'}\nchunks: 2\n"
    )
    code, out, _ = run(
        capsys, str(repo / "workloads" / "allreduce_8npus_1MiB"), "--system", str(tmp_path / "sys.yaml"), "--json", "-"
    )
    doc = json.loads(out)
    assert code == 0 and doc["collectives"][0]["algorithm"].endswith("ring_allreduce_8npus")
    (tmp_path / "bad.yaml").write_text("chunk: 2\n")
    code, _, err = run(capsys, str(repo / "workloads" / "allreduce_8npus_1MiB"), "--system", str(tmp_path / "bad.yaml"))
    assert code == 1 and "unknown key 'chunk'" in err and "bad.yaml" in err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--algo", "nonsense"], "neither an algorithm name"),
        (["--algo", "all_reduce=halving_doubling", "--topology", "TOPO6"], None),
        (["--model", "warp-drive"], "unknown network model 'warp-drive'"),
        (["--chunks", "0"], "--chunks must be >= 1"),
        (["--topology", "missing.yaml"], "missing.yaml"),
    ],
)
def test_bad_options_fail_cleanly(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str | None
) -> None:
    wl = str(repo / "workloads" / "allreduce_8npus_1MiB")
    args = [a.replace("TOPO6", str(repo / "topologies" / "ring16.yaml")) for a in args]
    code, _, err = run(capsys, wl, *args)
    if fragment is None:  # halving-doubling on 8 ranks of a 16-NPU ring is fine
        assert code == 0
        return
    assert code == 1 and err.startswith("etsim: error:") and fragment in err and "Traceback" not in err


def test_deadlock_exits_1_with_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from etsim.chakra import TraceBuilder, write_workload

    a, b = TraceBuilder(), TraceBuilder()
    b.recv(src=0, size=8, tag=4)
    write_workload([a.build(), b.build()], tmp_path / "dl")
    code, _, err = run(capsys, str(tmp_path / "dl"))
    assert code == 1 and "cannot progress" in err and "1 of 2 ranks stuck (ranks [1])" in err.splitlines()[0]
    code, _, err = run(capsys, str(tmp_path / "dl"), "--verbose")  # the whole report
    assert code == 1 and "rank 1" in err and "tag 4" in err


def test_pytorch_trace_needs_ignore_ctrl_deps(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(corpus / "chakra" / "pytorch_trace" / "chakra.0.et")
    code, _, err = run(capsys, trace)
    assert code == 1 and "--ignore-ctrl-deps" in err
    code, out, _ = run(capsys, trace, "--ignore-ctrl-deps", "--json", "-")
    doc = json.loads(out)
    assert code == 0 and doc["finish_ns"] > 1e8 and doc["ranks"][0]["compute_ns"] > 0
    assert {c["type"] for c in doc["collectives"]} == {"ALL_REDUCE", "BROADCAST"}


def test_brief_command_on_shipped_files(repo: Path) -> None:
    """The command from the project brief, as written, on shipped files."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "etsim",
            "workloads/allreduce_64npus_64MiB.et",
            "--algo",
            "algorithms/ring.et",
            "-q",
            "--json",
            "-",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["finish_ns"] == pytest.approx(2 * 63 * (L + (64 << 20) / 64 / B), rel=1e-12)


SMALL_TOPOLOGIES = ["ring8.yaml", "fully_connected8.yaml", "switch8.yaml", "torus4x4.yaml", "ring8_link_model.yaml"]


def shipped_workloads(repo: Path) -> list[str]:
    return sorted({p.name.split(".")[0] for p in (repo / "workloads").glob("*.et")})


@pytest.mark.filterwarnings("ignore::etsim.errors.EtsimWarning")  # checked in result.warnings below
@pytest.mark.parametrize("algo", ["ring", "direct", "tree", "halving_doubling"])
def test_every_shipped_workload_runs(repo: Path, algo: str) -> None:
    from etsim.chakra import load_workload
    from etsim.simulation import simulate
    from etsim.system.config import SystemConfig

    for name in shipped_workloads(repo):
        workload = load_workload(repo / "workloads" / name)
        topologies = SMALL_TOPOLOGIES if workload.num_ranks <= 8 else ["ring64.yaml", "switch64.yaml"]
        if workload.num_ranks == 16:
            topologies = ["ring16.yaml", "switch16.yaml", "ring4_switch4.yaml"]
        for topo in topologies:
            if workload.num_ranks > 8 and topo.endswith("8.yaml"):
                continue
            result = simulate(
                workload, topology=repo / "topologies" / topo, system=SystemConfig(algorithms={"default": algo})
            )
            assert result.finish_ns > 0, (name, topo)
            assert len(result.ranks) == workload.num_ranks
            idle = any("stay idle" in w for w in result.warnings)
            small = ("torus4x4.yaml", "ring16.yaml", "mesh4x4.yaml", "switch16.yaml", "ring4_switch4.yaml")
            assert idle == (topo in small and workload.num_ranks < 16), (name, topo)


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


def test_a_one_rank_workload_runs_on_the_ring_of_two_the_readme_names(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from etsim.chakra import TraceBuilder, write_workload

    b = TraceBuilder()
    b.comp("work", duration_micros=3)
    write_workload([b.build(rank=0)], tmp_path / "one")
    assert main(["run", str(tmp_path / "one")]) == 0
    out = capsys.readouterr().out
    assert "finish time: 3 us" in out and "default ring of 2 NPUs" in out
    assert "a one-rank workload gets a ring of 2 NPUs" in (repo / "README.md").read_text().replace("\n", " ")


def test_more_ranks_than_npus_is_refused_before_any_trace_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from etsim.chakra import CollectiveType, Workload, write_workload
    from etsim.cli import run as run_cli
    from etsim.producers import collective_workload

    write_workload(Workload(collective_workload(CollectiveType.ALL_REDUCE, 1024, 16)), tmp_path / "wl")
    (tmp_path / "t.yaml").write_text("kind: ring\nnpus: 8\nbandwidth: 1 GB/s\nlatency: 1 ns\n")
    read: list[object] = []
    original = run_cli.load_workload
    monkeypatch.setattr(run_cli, "load_workload", lambda *a, **k: read.append(a) or original(*a, **k))
    assert main(["run", str(tmp_path / "wl"), "--topology", str(tmp_path / "t.yaml")]) == 1
    err = capsys.readouterr().err
    assert f"the workload has 16 ranks but topology {tmp_path / 't.yaml'} has only 8 NPUs" in err
    assert read == []


def test_a_file_that_is_not_a_trace_is_called_that(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = Path(__file__).resolve().parents[2] / "README.md"
    assert main(["run", str(readme)]) == 1
    assert f"{readme}: not a Chakra ET file: it is text ('# etsim'" in capsys.readouterr().err
    (tmp_path / "noise.et").write_bytes(bytes(range(7, 256)) * 20)
    assert main(["inspect", str(tmp_path / "noise.et")]) == 1
    assert "first frame is no GlobalMetadata with a version either: not a Chakra ET file" in capsys.readouterr().err
    # A real trace cut short is still called truncated.
    from etsim.chakra import CollectiveType, Workload, write_workload
    from etsim.producers import collective_workload

    (path,) = write_workload(Workload(collective_workload(CollectiveType.ALL_REDUCE, 1024, 1)), tmp_path / "one")
    path.write_bytes(path.read_bytes()[:-3])
    assert main(["inspect", str(path)]) == 1
    assert "(truncated file?)" in capsys.readouterr().err


def test_algo_options_take_an_algorithms_own_parameters() -> None:
    from etsim.cli.run import parse_algo_options
    from etsim.errors import ConfigError

    # `tacos:seed=1` was read as COLL=ALGO ("unknown collective 'tacos:seed'").
    assert parse_algo_options(["tacos:seed=1", "all_gather=tacos:chunks_per_npu=2,seed=0"]) == {
        "default": "tacos:seed=1",
        "all_gather": "tacos:chunks_per_npu=2,seed=0",
    }
    with pytest.raises(ConfigError, match="unknown collective 'allsum'"):
        parse_algo_options(["allsum=ring"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--trace-messages"], "--trace-messages adds the messages to the --trace file: give --trace FILE too"),
        (["--trace", "-"], "--trace writes a file (a Chrome trace, often large): give a path, not '-'"),
    ],
)
def test_trace_flags_that_would_write_nothing_or_a_file_named_dash_are_refused(
    repo: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    # --trace-messages alone was ignored; --trace - wrote a file named "-".
    assert main(["run", str(repo / "workloads" / "allreduce_8npus_1MiB"), *flags]) == 1
    assert message in capsys.readouterr().err


def test_an_algo_for_a_collective_the_workload_never_issues_is_warned(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(repo / "workloads" / "allreduce_8npus_1MiB"), "--algo", "all_gather=direct", "-q"]) == 0
    assert "--algo all_gather=direct: the workload issues no all_gather; it had no effect" in capsys.readouterr().err
