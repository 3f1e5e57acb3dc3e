"""Bad input on the command line: one clear line naming the file and key, exit 1, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from etsim import __version__
from etsim.chakra import CollectiveType, write_workload
from etsim.cli import main
from etsim.producers import collective_workload

BAD = b"kind: ring\nnpus: 4\n# caf\xe9 \xff\n"  # Latin-1 bytes where UTF-8 is expected


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.fixture
def wl4(tmp_path: Path) -> str:
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4), tmp_path / "wl")
    return str(tmp_path / "wl")


def _astra_files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "sys.json").write_text(
        json.dumps({"preferred-dataset-splits": 1, "local-mem-bw": 1600, "all-reduce-implementation": ["ring"]})
    )
    (tmp_path / "net.yml").write_text("topology: [Ring]\nnpus_count: [4]\nbandwidth: [50.0]\nlatency: [500.0]\n")
    (tmp_path / "mem.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    return {"sys": tmp_path / "sys.json", "net": tmp_path / "net.yml", "mem": tmp_path / "mem.json"}


@pytest.mark.parametrize(
    "which", ["topology", "system", "comm-groups", "astra-system", "astra-network", "astra-memory"]
)
def test_non_utf8_configuration_files_name_the_file_and_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wl4: str, which: str
) -> None:
    bad = tmp_path / f"bad.{'json' if which in ('astra-system', 'astra-memory') else 'yaml'}"
    bad.write_bytes(BAD)
    if which.startswith("astra"):
        files = _astra_files(tmp_path)
        files[which.split("-")[1][:3]] = bad
        args = ["astra", "--workload-configuration", wl4, "--system-configuration", str(files["sys"]),
                "--network-configuration", str(files["net"]),
                "--remote-memory-configuration", str(files["mem"])]  # fmt: skip
    else:
        option = {"topology": "--topology", "system": "--system", "comm-groups": "--comm-groups"}[which]
        args = [wl4, option, str(bad)]
    code, _, err = run(capsys, *args)
    assert code == 1
    assert f"{bad}" in err and "not UTF-8 text (byte 0xe9 at offset 24)" in err


@pytest.mark.parametrize(
    "args",
    [
        ["algo", "export", "ring", "--collective", "all_reduce", "--npus", "4", "-o", "{file}/sub/ring"],
        ["convert", "msccl", "{corpus}/msccl/generated/allgather_recdbl_n8_i1.xml", "-o", "{file}/x"],
        ["convert", "chakra-to-msccl", "{repo}/algorithms/ring_allreduce_8npus", "-o", "{file}/x.xml"],
        [
            "synth",
            "tacos",
            "--topology",
            "{repo}/topologies/ring8.yaml",
            "--collective",
            "all_gather",
            "-o",
            "{file}/t",
        ],
        ["visualize", "{repo}/workloads/dp_8npus_4layers", "--rank", "0", "-o", "{file}/g.dot"],
        ["{repo}/workloads/allreduce_8npus_1MiB", "--json", "{file}/r.json"],
    ],
    ids=["algo-export", "convert-msccl", "chakra-to-msccl", "synth-tacos", "visualize", "run-json"],
)
def test_an_output_under_a_file_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], repo: Path, corpus: Path, args: list[str]
) -> None:
    file = tmp_path / "plain.txt"
    file.write_text("I am a file")
    argv = [a.format(file=file, repo=repo, corpus=corpus) for a in args]
    code, _, err = run(capsys, *argv)
    assert code == 1
    assert f"{file} is a file, not a directory" in err
    assert err.count("\n") == 1  # one line


def test_bench_script_help(repo: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(repo / "scripts" / "bench.py"), "--help"], capture_output=True, text=True, check=True
    )
    assert "usage: bench.py" in out.stdout and "ring-ar-1024-link" in out.stdout


def test_unknown_algorithm_in_a_system_file_names_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wl4: str
) -> None:
    system = tmp_path / "sys.yaml"
    system.write_text("algorithms:\n  all_gather: nosuch\n")
    code, _, err = run(capsys, wl4, "--system", str(system))
    assert code == 1
    assert f"{system}: algorithms.all_gather 'nosuch' is neither an algorithm name" in err


def test_misspelled_key_in_a_comm_group_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], wl4: str) -> None:
    groups = tmp_path / "groups.yaml"
    groups.write_text("groupz:\n  1: [0, 1]\n")
    code, _, err = run(capsys, wl4, "--comm-groups", str(groups))
    assert code == 1 and "unknown key 'groupz'; expected 'groups'" in err


def test_astra_aware_on_a_multi_dimensional_network_is_refused_as_astra_sim_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 8), tmp_path / "wl")
    files = _astra_files(tmp_path)
    files["net"].write_text("topology: [Ring, Ring]\nnpus_count: [4, 2]\nbandwidth: [50, 50]\nlatency: [500, 500]\n")
    code, _, err = run(capsys, "astra", "--workload-configuration", str(tmp_path / "wl"), "--system-configuration",
                       str(files["sys"]), "--network-configuration", str(files["net"]), "--model", "aware")  # fmt: skip
    assert code == 1 and "only support 1-dim topology" in err and "has 2 dimensions" in err


def test_test_only_models_are_not_listed(capsys: pytest.CaptureFixture[str], wl4: str) -> None:
    from etsim.network import NETWORK_MODELS

    assert NETWORK_MODELS.get("etsim-test-ideal") is not None  # still resolvable by name
    assert "etsim-test-ideal" not in NETWORK_MODELS.names()
    code, _, err = run(capsys, wl4, "--model", "nosuch")
    assert code == 1 and "available: analytical, flow, ideal, link" in err and "etsim-test" not in err


def test_a_repeated_algo_key_is_an_error(capsys: pytest.CaptureFixture[str], wl4: str) -> None:
    code, _, err = run(capsys, wl4, "--algo", "all_gather=ring", "--algo", "all_gather=direct")
    assert code == 1 and "--algo is given twice for all_gather ('ring' and 'direct')" in err
    code, _, err = run(capsys, wl4, "--algo", "ring", "--algo", "tree")
    assert code == 1 and "given twice for a default algorithm" in err


def test_warnings_are_one_line_each_on_stderr(capsys: pytest.CaptureFixture[str], wl4: str) -> None:
    code, out, err = run(capsys, wl4, "--algo", "tree", "--chunks", "2")
    assert code == 0 and "finish time" in out
    assert err == ""  # nothing to say: tree implements all-reduce, the link model respects bandwidth
    code, _, err = run(capsys, wl4, "--model", "analytical", "--chunks", "4")
    assert code == 0 and err.startswith("etsim: warning: network model 'analytical' ignores contention")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"etsim {__version__}"


@pytest.mark.parametrize("size", ["9000 PiB", "8192 PiB", "1e300 GiB"])
def test_sizes_past_what_etsim_parses_are_clear_errors(capsys, tmp_path: Path, size: str) -> None:
    # Past 1 EiB (and so before Chakra's int64 comm_size, or a float's range) the parser refuses the size.
    args = ["--type", "all_reduce", "--size", size, "--npus", "8", "-o", str(tmp_path / "w")]
    code, _, err = run(capsys, "workload", "gen", "collective", *args)
    assert code == 1 and f"--size: size '{size}' is larger than etsim's limit of 1,152,921,504,606,846,976 bytes" in err


def test_values_past_chakras_integer_fields_are_clear_errors(tmp_path: Path) -> None:
    from etsim.chakra import TraceBuilder
    from etsim.errors import TraceError

    with pytest.raises(TraceError, match=r"'comm_size': 9223372036854775808 does not fit Chakra's int64_val field"):
        TraceBuilder().collective(CollectiveType.ALL_REDUCE, 2**63)


def test_a_duration_past_chakras_field_is_a_clear_error(capsys, tmp_path: Path) -> None:
    args = ["workload", "gen", "dp", "--npus", "8", "--layers", "2", "--grad-size", "1MiB"]
    code, _, err = run(capsys, *args, "--fwd-us", str(10**23), "-o", str(tmp_path / "d"))
    assert code == 1 and "does not fit Chakra's Node message" in err


def test_more_npus_than_a_topology_may_hold_is_refused_before_writing(capsys, tmp_path: Path) -> None:
    args = ["workload", "gen", "collective", "--type", "all_reduce", "--size", "1 MiB", "--npus", "2000000"]
    code, _, err = run(capsys, *args, "-o", str(tmp_path / "w"))
    assert code == 1 and "--npus 2,000,000: larger than etsim's limit of 1,048,576 NPUs" in err
    assert not (tmp_path / "w.0.et").exists()


def test_an_overflowing_flag_is_an_error_not_a_nan(capsys, wl4: str) -> None:
    code, out, err = run(capsys, wl4, "--endpoint-delay", "1e300 s")
    assert code == 1 and "--endpoint-delay: time '1e300 s' is longer than etsim's limit" in err and "nan" not in out


def test_a_node_type_the_walker_does_not_know_stops_the_run(capsys, tmp_path: Path) -> None:
    from etsim.chakra import TraceBuilder, write_workload

    b = TraceBuilder()
    b.comp("mystery", duration_micros=1)
    b.nodes[-1].type = 999
    write_workload([b.build(rank=0), TraceBuilder().build(rank=1)], tmp_path / "w")
    code, _, err = run(capsys, str(tmp_path / "w"))
    assert code == 1 and "unknown node type 999" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", ":"], "network model ':': expected 'package.module:Class' or 'file.py:Class' with both parts"),
        (["--model", "a:"], "network model 'a:': expected"),
    ],
)
def test_an_empty_plug_in_path_is_a_clear_error(capsys, wl4: str, args: list[str], message: str) -> None:
    code, _, err = run(capsys, wl4, *args)
    assert code == 1 and message in err and "Traceback" not in err


def test_a_rule_for_a_list_of_collectives_is_a_clear_error(capsys, wl4: str, tmp_path: Path) -> None:
    system = tmp_path / "s.yaml"
    system.write_text("algorithms:\n  - {collective: [all_reduce, all_gather], algorithm: ring}\n")
    code, _, err = run(capsys, wl4, "--system", str(system))
    assert code == 1 and "algorithms[0].collective: expected one collective name" in err


def test_tune_refuses_a_plot_format_before_any_work(capsys, tmp_path: Path) -> None:
    topo = str(Path(__file__).resolve().parents[2] / "topologies" / "ring8.yaml")
    code, _, err = run(
        capsys, "tune", "--topology", topo, "--sizes", "1KiB", "--plot", "p.xyz", "-o", str(tmp_path / "t.yaml")
    )
    assert code == 1 and "--plot p.xyz: the file's suffix says its format" in err
    assert not (tmp_path / "t.yaml").exists()


def test_long_errors_show_a_self_sufficient_first_line_and_the_rest_with_verbose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from etsim.chakra import CollectiveType, TraceBuilder, Workload, write_workload
    from etsim.cli import ERROR_LINES

    traces = []
    for rank in range(16):  # rank 5 never joins the all-reduce: 15 ranks stuck
        b = TraceBuilder(rank)
        if rank == 5:
            b.comp("x", duration_micros=1)
        else:
            b.collective(CollectiveType.ALL_REDUCE, 1024)
        traces.append(b.build(rank=rank))
    write_workload(Workload(traces), tmp_path / "dl")
    assert main(["run", str(tmp_path / "dl")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == ERROR_LINES + 1 and err[-1].endswith("more lines: add --verbose to see them")
    first = err[0]
    assert "15 of 16 ranks stuck" in first and "never by ranks [5]" in first
    assert main(["run", str(tmp_path / "dl"), "--verbose"]) == 1
    full = capsys.readouterr().err.splitlines()
    assert len(full) > 20 and full[0] == first and "add --verbose" not in full[-1]
