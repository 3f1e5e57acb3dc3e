"""Experiment files: expansion into points and one clear error for every kind of bad input."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from etsim.chakra import CollectiveType, Workload
from etsim.errors import ConfigError
from etsim.experiment import load_experiment, run_experiment, select_points
from etsim.experiment.spec import point_config
from etsim.producers.workloads import collective_workload
from etsim.simulation import simulate

from .conftest import RING8, SWITCH8


def test_sweep_is_the_cartesian_product_in_file_order(small: Path) -> None:
    exp = load_experiment(small)
    assert exp.axis_keys == ["size", "algo"]
    assert [p.id for p in exp.points] == [f"{i:04d}" for i in range(6)]
    assert [p.labels for p in exp.points] == [
        ("1 KiB", "ring"), ("1 KiB", "direct"), ("1 MiB", "ring"),
        ("1 MiB", "direct"), ("64 MiB", "ring"), ("64 MiB", "direct"),
    ]  # fmt: skip
    # A bare axis is a generator parameter; sizes are resolved to bytes, the algorithm to a default.
    spec = exp.points[3].spec
    assert spec.workload == {
        "generate": "collective", "type": "all_reduce", "size": 1 << 20, "npus": 8, "count": 1, "pg_name": None
    }  # fmt: skip
    assert spec.algo == {"default": "direct"}
    assert spec.topology == str(small.parent / "ring8.yaml")
    assert spec.model == "analytical"
    assert exp.collectives == ["all_reduce"]
    assert exp.columns[:4] == ["point", "size", "algo", "network_model"]
    assert "all_reduce_ns" in exp.columns


def test_dotted_keys_zip_labels_and_repeat(write) -> None:
    write("ring8.yaml", RING8)
    write("switch8.yaml", SWITCH8)
    path = write(
        "e.yaml",
        """
        workload: {generate: dp, npus: 8, layers: 2, grad_size: 1 MiB}
        topology: ring8.yaml
        algo: {tacos: {chunks_per_npu: 2}}
        sweep:
          topology: {ring: ring8.yaml, star: switch8.yaml}
          topology.bandwidth: [50 GB/s, 100 GB/s]
        zip:
          workload.layers: [1, 3]
          system.chunks: [1, 2]
        repeat: 2
        """,
    )
    exp = load_experiment(path)
    assert exp.name == "e"
    assert exp.axis_keys == ["topology", "topology.bandwidth", "workload.layers", "system.chunks"]
    assert len(exp.points) == 2 * 2 * 2 * 2  # zipped axes count once; repeat doubles
    first, second = exp.points[0], exp.points[1]
    assert first.labels == ("ring", "50 GB/s", "1", "1") and first.repeat == 0 and second.repeat == 1
    # A dotted key into a topology given as a file turns it into an inline mapping, named after the file.
    assert first.spec.topology == {**yaml.safe_load(RING8), "bandwidth": "50 GB/s", "name": "ring8"}
    assert first.spec.workload["layers"] == 1 and first.spec.system == {"chunks": 1}
    assert exp.points[-1].spec.workload["layers"] == 3 and exp.points[-1].spec.system == {"chunks": 2}
    # Repeats advance the synthesis seed.
    assert first.spec.algo["default"] == {"tacos": {"chunks_per_npu": 2, "seed": 0, "runs": 1, "size": None}}
    assert second.spec.algo["default"]["tacos"]["seed"] == 1  # type: ignore[index]
    assert "repeat" in exp.columns


def test_repeats_advance_the_jitter_and_routing_seeds_where_they_draw(write, tmp_path: Path) -> None:
    # With compute_jitter, three repeats gave three identical rows (jitter_seed stayed 0), averaged as if measured.
    write("ring8.yaml", RING8)
    path = write(
        "e.yaml",
        """
        workload: {generate: dp, npus: 8, layers: 2, grad_size: 1 MiB, fwd_us: 100, bwd_us: 100}
        topology: ring8.yaml
        system: {compute_jitter: 0.2}
        repeat: 3
        """,
    )
    exp = load_experiment(path)
    assert [p.spec.system["jitter_seed"] for p in exp.points[1:]] == [1, 2] and "jitter_seed" not in exp.points[
        0
    ].spec.system
    run_experiment(exp, out=tmp_path / "out", jobs=1, plots=False)
    with open(tmp_path / "out" / "results.csv", newline="") as f:
        finishes = [row["finish_ns"] for row in csv.DictReader(f)]
    assert len(set(finishes)) == 3


def test_repeats_of_a_cluster_point_advance_the_seeds_of_its_file(write, tmp_path: Path) -> None:
    # A cluster point's system is its file's: three repeats with compute_jitter gave three identical rows.
    write("ring8.yaml", RING8)
    write("jit.yaml", "compute_jitter: 0.2\n")
    write(
        "c.yaml",
        """
        topology: ring8.yaml
        system: jit.yaml
        jobs:
          - {name: a, workload: {generate: dp, npus: 4, layers: 2, grad_size: 1 MiB, fwd_us: 100, bwd_us: 100},
             placement: packed}
        """,
    )
    path = write("e.yaml", "cluster: c.yaml\nrepeat: 3\n")
    exp = load_experiment(path)
    seeds = [p.spec.cluster["file"]["system"] for p in exp.points]
    assert seeds[0] == "jit.yaml" and [s["jitter_seed"] for s in seeds[1:]] == [1, 2]
    run_experiment(exp, out=tmp_path / "out", jobs=1, plots=False)
    with open(tmp_path / "out" / "results.csv", newline="") as f:
        finishes = [row["finish_ns"] for row in csv.DictReader(f)]
    assert len(set(finishes)) == 3
    # The seed is the whole run's: advanced where written (the cluster's 7), not given to jobs that draw with it
    # (a job's seed beside the cluster's was refused as differing).
    write("c.yaml", """
        topology: ring8.yaml
        system: {jitter_seed: 7}
        jobs:
          - {name: a, workload: {generate: dp, npus: 4, layers: 2, grad_size: 1 MiB, fwd_us: 100, bwd_us: 100},
             placement: packed, system: {compute_jitter: 0.2}}
        """)  # fmt: skip
    exp = load_experiment(path)
    second = exp.points[1].spec.cluster["file"]
    assert second["system"]["jitter_seed"] == 8 and "jitter_seed" not in second["jobs"][0]["system"]
    run_experiment(exp, out=tmp_path / "out2", jobs=1, plots=False)
    assert (tmp_path / "out2" / "results.csv").read_text().count("\n") == 4  # (a header and three rows)


def test_point_config_round_trips(small: Path, tmp_path: Path) -> None:
    exp = load_experiment(small)
    point = exp.points[4]
    directory = tmp_path / "out" / "points" / point.id
    directory.mkdir(parents=True)
    config = directory / "config.yaml"
    config.write_text(yaml.safe_dump(point_config(point.spec, directory)))
    assert "ring8.yaml" in config.read_text() and str(tmp_path) not in config.read_text()  # relative paths
    again = load_experiment(config)
    assert len(again.points) == 1 and again.points[0].spec == point.spec


def test_only_selects_by_label_yaml_value_or_size(small: Path) -> None:
    exp = load_experiment(small)
    assert [p.id for p in select_points(exp, ["size=1MiB"])] == ["0002", "0003"]
    assert [p.id for p in select_points(exp, ["size=1 KiB", "size=64 MiB", "algo=direct"])] == ["0001", "0005"]
    with pytest.raises(ConfigError, match="no axis 'sizes'; axes: size, algo"):
        select_points(exp, ["sizes=1 KiB"])
    with pytest.raises(ConfigError, match="size has no value '2 MiB'; values: 1 KiB, 1 MiB, 64 MiB"):
        select_points(exp, ["size=2 MiB"])
    with pytest.raises(ConfigError, match="expected AXIS=VALUE"):
        select_points(exp, ["size"])


BASE = """
workload: {generate: collective, type: all_reduce, npus: 8, size: 1 MiB}
topology: ring8.yaml
"""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("algos: ring\n", r"e.yaml: algos: unknown key; valid keys: name, description, workload"),
        ("sweep: {}\n", r"e.yaml: sweep: empty sweep"),
        ("sweep: {size: []}\n", r"e.yaml: sweep.size: empty axis"),
        ("sweep: {size: 1 KiB}\n", r"e.yaml: sweep.size: expected a list of values or a mapping"),
        (
            "sweep: {size: [1 KiB, 2 KB/s]}\n",
            r"e.yaml: workload, sweep.size\[1\]: workload.size: unknown size unit 'KB/s'",
        ),
        ("sweep: {size: [1 KiB, 1 KiB]}\n", r"e.yaml: sweep.size: value '1 KiB' appears twice"),
        (
            "sweep: {sizes: [1 KiB]}\n",
            r"e.yaml: workload, sweep.sizes\[0\]: workload.sizes: not a parameter of generate: collective",
        ),
        (
            "sweep: {topology: [ring8.yaml, missing.yaml]}\n",
            r"e.yaml: sweep.topology\[1\]: no such topology file .*missing.yaml",
        ),
        ("sweep: {algo: [ring, nope/family]}\n", r"e.yaml: sweep.algo\[1\]: algo: .*nope/family"),
        ("sweep: {algo: [ring, gone.xml]}\n", r"e.yaml: sweep.algo\[1\]: algo: no such MSCCL-IR file .*gone.xml"),
        ("sweep: {system.chunk: [1]}\n", r"e.yaml: system, sweep.system.chunk\[0\]: .*unknown key 'chunk'"),
        ("sweep: {model: [analytical, warp]}\n", r"e.yaml: sweep.model\[1\]: .*warp"),
        ("model_options: {packets: 1}\nmodel: link\n", r"e.yaml: model_options: .*packets"),
        ("zip: {size: [1 KiB, 2 KiB], algo: [ring]}\n", r"e.yaml: zip: zipped axes must have equal lengths"),
        ("sweep: {size: [1 KiB]}\nzip: {size: [2 KiB]}\n", r"e.yaml: size: the axis is given twice"),
        ("repeat: 0\n", r"e.yaml: repeat: expected an integer >= 1"),
        ("algo: {allreduce: ring}\n", r"e.yaml: algo: algo.allreduce: unknown collective"),
        ("algo: {tacos: {chunks: 2}}\n", r"e.yaml: algo: algo.tacos.chunks: unknown TACOS parameter"),
        (
            "sweep: {size: [1 KiB]}\nplots: [{x: size, y: finish}]\n",
            r"e.yaml: plots\[0\].y: 'finish' is not a result column; numeric columns: finish_ns",
        ),
        ("sweep: {size: [1 KiB]}\nplots: [{x: algo, y: finish_ns}]\n", r"e.yaml: plots\[0\].x: 'algo' is not an axis"),
        (
            "sweep: {size: [1 KiB], algo: [ring, direct]}\nplots: [{x: size, y: finish_ns}]\n",
            r"e.yaml: plots\[0\]: axis 'algo' has 2 values but is not the plot's x, series or facet",
        ),
        (
            "sweep: {size: [1 KiB], algo: [ring, direct]}\n"
            "plots: [{x: size, y: finish_ns, series: algo, baseline: tree}]\n",
            r"e.yaml: plots\[0\].baseline: 'tree' is not a value of algo: ring, direct",
        ),
        ("sweep: {size: [1 KiB]}\nplots: [{x: size, y: finish_ns, colour: red}]\n", r"plots\[0\].colour: unknown"),
        ("sweep: {status: [1]}\n", r"e.yaml: status: the axis name clashes with a result column"),
        ("name: has space\n", r"e.yaml: name: expected a name"),
    ],
)
def test_bad_input_is_one_error_naming_file_and_key(write, body: str, message: str) -> None:
    write("ring8.yaml", RING8)
    path = write("e.yaml", BASE + body)
    with pytest.raises(ConfigError, match=message):
        load_experiment(path)


def test_generator_errors_name_the_key(write) -> None:
    write("ring8.yaml", RING8)
    path = write("e.yaml", "workload: {generate: collective, type: all_reduce, npus: 8}\n")
    with pytest.raises(ConfigError, match=r"e.yaml: workload: workload.size: missing"):
        load_experiment(path)
    path = write("e.yaml", "workload: {generate: sequence, npus: 8, collectives: [{type: all_reduce}]}\n")
    with pytest.raises(ConfigError, match=r"workload.collectives\[0\].size: missing"):
        load_experiment(path)
    path = write("e.yaml", "workload: {generate: collective, type: all_reduce, npus: 2000000, size: 1 MiB}\n")
    with pytest.raises(ConfigError, match=r"workload.npus: 2,000,000 NPUs is more than etsim's limit of 1,048,576"):
        load_experiment(path)
    path = write("e.yaml", "topology: ring8.yaml\n")
    with pytest.raises(ConfigError, match=r"e.yaml: workload: missing"):
        load_experiment(path)
    path = write("e.yaml", "workload: workloads/none\n")
    with pytest.raises(ConfigError, match=r"e.yaml: workload: .*none"):
        load_experiment(path)


def test_unreadable_files_are_clean_errors(tmp_path: Path) -> None:
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(
        ConfigError, match=r"list.yaml: expected a mapping of experiment keys at the top level, got a list"
    ):
        load_experiment(tmp_path / "list.yaml")
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(
        ConfigError, match=r"latin1.yaml: the experiment file is not UTF-8 text \(byte 0xe9 at offset 9\)"
    ):
        load_experiment(tmp_path / "latin1.yaml")
    (tmp_path / "dup.yaml").write_text("name: a\nname: b\n")
    with pytest.raises(ConfigError, match=r"dup.yaml: invalid YAML: .*duplicate key 'name'"):
        load_experiment(tmp_path / "dup.yaml")
    (tmp_path / "bad.yaml").write_text("name: [\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: invalid YAML"):
        load_experiment(tmp_path / "bad.yaml")
    with pytest.raises(ConfigError, match=r"absent.yaml: cannot read"):
        load_experiment(tmp_path / "absent.yaml")
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(ConfigError, match=r"empty.yaml: expected a mapping .* got empty"):
        load_experiment(tmp_path / "empty.yaml")


def test_sequence_generator_and_model_resolution(write) -> None:
    write("ring8.yaml", RING8 + "network: {model: link}\n")
    path = write(
        "e.yaml",
        """
        workload: {generate: sequence, npus: 8, size: 4 KiB,
                   collectives: [all_reduce, {type: all_gather, size: 1 KiB, count: 2}]}
        sweep: {topology: [ring8.yaml, null]}
        """,
    )
    exp = load_experiment(path)
    with_file, default = exp.points
    # The model is made explicit: the topology file's, else the one simulate() picks by itself.
    by_itself = simulate(Workload(collective_workload(CollectiveType.ALL_REDUCE, 8, 8))).network["model"]
    assert with_file.spec.model == "link" and default.spec.model == by_itself
    assert with_file.spec.workload["collectives"] == [
        {"type": "all_reduce", "size": 4096, "count": 1},
        {"type": "all_gather", "size": 1024, "count": 2},
    ]
    assert exp.collectives == ["all_reduce", "all_gather"]


@pytest.mark.parametrize("sweep", ["{size: [1 KiB], workload.size: [2 KiB, 4 KiB]}"])
def test_two_axes_that_set_one_value_are_an_error(tmp_path: Path, sweep: str) -> None:
    """An axis shadowed by another labelled rows 1 KiB while 2 and 4 KiB ran."""
    path = tmp_path / "e.yaml"
    path.write_text(BASE + f"sweep: {sweep}\n")
    (tmp_path / "ring8.yaml").write_text("kind: ring\nnpus: 8\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    with pytest.raises(ConfigError, match=r"e.yaml: size, workload.size: the axes set the same value, workload.size"):
        load_experiment(path)


def test_a_sweep_too_large_is_refused_before_any_point_is_built(write) -> None:
    # Issue 20, item 11: 10^6 points took 41 s and 600 MB before the first row; repeat 10^12 hung.
    sizes = ", ".join(f"{i + 1} KiB" for i in range(1000))
    path = write(
        "big.yaml",
        f"""
        workload: {{generate: collective, type: all_reduce, npus: 8, size: 1 MiB}}
        sweep:
          size: [{sizes}]
          system.chunks: [{", ".join(str(c) for c in range(1, 102))}]
        """,
    )
    import time

    t0 = time.perf_counter()
    with pytest.raises(
        ConfigError,
        match=r"big.yaml: sweep: 1000 x 101 combinations x repeat 1 make 101,000 points, more than etsim's limit",
    ):
        load_experiment(path)
    assert time.perf_counter() - t0 < 5
    huge = write(
        "rep.yaml", "workload: {generate: collective, type: all_reduce, npus: 8, size: 1 KiB}\nrepeat: 1000000000000"
    )
    with pytest.raises(ConfigError, match=r"rep.yaml: repeat: expected an integer >= 1 and <= 100,000"):
        load_experiment(huge)
