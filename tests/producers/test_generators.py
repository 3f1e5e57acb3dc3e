"""Workload generators: one registry, every generator the same from the command line, experiments and Python."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from etsim.chakra.io import load_workload, serialize_trace
from etsim.cli import main
from etsim.errors import ConfigError
from etsim.experiment import load_experiment
from etsim.options import flag_name
from etsim.producers.workloads import WORKLOAD_GENERATORS, generate, normalize
from etsim.producers.workloads.base import generated_collectives, parse

#: Parameters of every built-in generator, as an experiment writes them (and as flags, after flag_name).
EXAMPLES = {
    "collective": {"type": "all_gather", "size": "64 KiB", "npus": 4, "count": 2},
    "sendrecv": {"size": "1 KiB", "npus": 3},
    "dp": {"npus": 4, "layers": 2, "grad_size": "1 MiB", "fwd_us": 10, "bwd_us": 20},
    "moe": {"npus": 8, "ep_size": 4, "layers": 1, "token_size": "1 MiB", "dense_grad_sizes": ["64 KiB", "4 MiB"]},
    "sequence": {"npus": 4, "collectives": [{"type": "all_reduce", "size": "1 MiB"}, {"type": "all_gather"}],
                 "size": "4 KiB"},
}  # fmt: skip


def _flags(params: dict[str, object]) -> list[str]:
    """*params* as ``etsim workload gen`` flags (lists as the command line writes them)."""
    out: list[str] = []
    for name, value in params.items():
        if name == "collectives":
            text = ",".join(f"{s['type']}:{s.get('size', '')}".rstrip(":") for s in value)  # type: ignore[attr-defined]
        elif isinstance(value, list):
            text = ",".join(map(str, value))
        else:
            text = str(value)
        out += [flag_name(name), text]
    return out


def test_every_built_in_generator_is_registered() -> None:
    assert set(EXAMPLES) <= set(WORKLOAD_GENERATORS.names())


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_a_generator_writes_the_same_traces_from_the_command_line_an_experiment_and_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    params = EXAMPLES[kind]
    assert main(["workload", "gen", kind, *_flags(params), "-o", str(tmp_path / "cli")]) == 0
    from_cli = [serialize_trace(t) for t in load_workload(str(tmp_path / "cli"))]

    experiment = tmp_path / "e.yaml"
    import yaml

    experiment.write_text(yaml.safe_dump({"workload": {"generate": kind, **params}}))
    spec = load_experiment(experiment).points[0].spec.workload
    assert isinstance(spec, dict)
    from_experiment = [serialize_trace(t) for t in generate(spec)]

    generator, options = parse(kind, params)
    from_python = [serialize_trace(t) for t in generator.generate(options)]
    assert from_cli == from_experiment == from_python
    # The normalized form holds every parameter, sizes in bytes, and builds the same options again.
    assert spec == normalize({"generate": kind, **params})
    assert set(spec) - {"generate"} == {f.name for f in dataclasses.fields(type(options))}


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_a_generator_names_the_collectives_its_traces_use(kind: str) -> None:
    spec = normalize({"generate": kind, **EXAMPLES[kind]})
    generator = WORKLOAD_GENERATORS.get(kind)()
    declared = generated_collectives(spec)
    # The base class finds them by generating the traces: the override must agree with it.
    options = type(generator).Options(**{k: v for k, v in spec.items() if k != "generate"})
    from etsim.producers.workloads.base import WorkloadGenerator

    assert declared == WorkloadGenerator.collectives(generator, options)


def test_moe_works_in_experiments_which_refused_it(tmp_path: Path) -> None:
    path = tmp_path / "moe.yaml"
    path.write_text(
        "workload: {generate: moe, npus: 8, ep_size: 4, layers: 1, token_size: 1 MiB, dense_grad_sizes: [64 KiB]}\n"
        "sweep: {token_size: [1 MiB, 2 MiB]}\n"
    )
    experiment = load_experiment(path)
    assert [p.spec.workload["token_size"] for p in experiment.points] == [1 << 20, 2 << 20]  # type: ignore[index]
    assert experiment.collectives == ["all_to_all", "all_reduce"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"npus": 8, "ep_size": 3, "layers": 1, "token_size": "1 MiB", "dense_grad_sizes": ["1 KiB"]},
         "workload.ep_size 3 must divide workload.npus 8"),
        ({"npus": 8, "ep_size": 4, "layers": 1, "token_size": "1 MiB", "dense_grad_sizes": []},
         "workload.dense_grad_sizes: expected a non-empty list"),
        ({"npus": 8, "ep_size": 4, "layers": 1, "token_size": "1 MiB"}, "workload.dense_grad_sizes: missing"),
        ({"npus": 8, "ep_size": 4, "layers": 1, "token_size": "1 MiB", "dense_grad_sizes": ["1 KiB"], "x": 1},
         "workload.x: not a parameter of generate: moe"),
    ],
)  # fmt: skip
def test_generator_parameters_are_checked_with_the_key_named(params: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        normalize({"generate": "moe", **params})


def test_the_command_line_names_flags_in_its_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["workload", "gen", "sequence", "--npus", "2", "--collectives", "all_reduce", "-o", str(tmp_path / "s")]
    assert main(args) == 1
    assert "--collectives[0].size: missing (and the generator has no default size)" in capsys.readouterr().err
    assert main([*args[:-2], "--size", "2 KB/s", "-o", str(tmp_path / "s")]) == 1
    assert "--size: unknown size unit 'KB/s'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kind", "values"),
    [
        ("collective", {"type": "all_reduce", "size": "1 KiB", "npus": 8, "count": 10**9}),
        ("dp", {"npus": 64, "layers": 100_000, "grad_size": "1 KiB", "iterations": 1000}),
        (
            "moe",
            {
                "npus": 64,
                "ep_size": 8,
                "layers": 10**5,
                "token_size": "1 KiB",
                "dense_grad_sizes": [1],
                "iterations": 99,
            },
        ),
        ("sequence", {"npus": 1024, "collectives": [{"type": "all_reduce", "size": "1 KiB", "count": 10**6}]}),
    ],
)
def test_a_workload_too_large_to_hold_is_refused_before_it_is_built(kind: str, values: dict) -> None:
    # Issue 20, item 11: `workload gen --count` had no bound; memory ran out building the traces.
    import time

    from etsim.producers.workloads.base import parse

    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"generate: {kind} with these parameters makes about .* nodes, more than"):
        parse(kind, values)
    assert time.perf_counter() - t0 < 1


@pytest.mark.parametrize("kind", ["collective", "dp", "moe", "sequence"])
def test_the_node_estimate_is_not_below_what_is_built(kind: str) -> None:
    from etsim.producers.workloads.base import parse

    values = {
        "collective": {"type": "all_reduce", "size": "1 KiB", "npus": 4, "count": 3},
        "dp": {"npus": 4, "layers": 3, "grad_size": "1 KiB", "iterations": 2},
        "moe": {"npus": 4, "ep_size": 2, "layers": 3, "token_size": "1 KiB", "iterations": 2,
                "dense_grad_sizes": ["1 KiB", "2 KiB", "4 KiB"]},
        "sequence": {"npus": 4, "collectives": [{"type": "all_reduce", "size": "1 KiB", "count": 5}]},
    }[kind]  # fmt: skip
    generator, options = parse(kind, values)
    built = sum(len(t.ids) for t in generator.generate(options))
    assert built <= generator.nodes(options) <= 2 * built


_TINY = {"layers": 2, "hidden": 64, "heads": 4, "ffn": 128, "vocab": 100, "seq": 32}
_TINY_MOE = {**_TINY, "experts": 4, "top_k": 2, "moe_every": 1, "expert_ffn": 64}


@pytest.mark.parametrize(
    "values",
    [
        {"model": _TINY, "pp": 2},  # a tied embedding's all-reduce between the first and last stage
        {"model": _TINY, "pp": 2, "dp": 2, "zero": 1},
        {"model": _TINY, "tp": 2, "sp": True, "dp": 2, "zero": 3},
        {"model": _TINY_MOE, "tp": 2, "sp": True, "dp": 2, "ep": 2, "zero": 1},  # experts reduce-scattered
        {"model": _TINY_MOE, "dp": 2, "ep": 2},
        {"model": _TINY_MOE, "dp": 2, "ep": 2, "expert_imbalance": 0.5},  # sends, not an all-to-all
        {"model": _TINY_MOE, "dp": 2, "ep": 2, "capacity_factor": 0.5},
        {"model": _TINY_MOE, "tp": 2, "sp": True, "etp": 2, "dp": 2, "ep": 2},
    ],
    ids=lambda v: ",".join(f"{k}={v[k]}" for k in v if k != "model"),
)
def test_the_transformers_collectives_are_those_its_traces_issue(values: dict[str, Any]) -> None:
    # An experiment's per-collective columns come from this list: the tied embedding's all-reduce was missing (no
    # column, its time in no row), experts under ZeRO and an unbalanced router's exchange were listed but not issued.
    from etsim.producers.workloads.base import WorkloadGenerator

    generator, options = parse("transformer", {"global_batch": 4, **values})
    assert set(generator.collectives(options)) == set(WorkloadGenerator.collectives(generator, options))


def test_generate_takes_a_mapping_as_experiment_files_write_it() -> None:
    # generate() needed a normalized mapping: `size: 1 MiB`, as experiment files and the README write it, raised a
    # raw TypeError ('<' not supported between 'str' and 'int').
    from etsim import generate

    written = generate({"generate": "collective", "type": "all_reduce", "size": "1 MiB", "npus": 4})
    in_bytes = generate({"generate": "collective", "type": "all_reduce", "size": 2**20, "npus": 4})
    assert [serialize_trace(t) for t in written] == [serialize_trace(t) for t in in_bytes]
    assert [t.comm_size for t in written] == [[2**20]] * 4
    with pytest.raises(ConfigError, match=r"workload\.size: unknown size unit 'MB/s'"):
        generate({"generate": "collective", "type": "all_reduce", "size": "1 MB/s", "npus": 4})
    with pytest.raises(ConfigError, match=r"workload\.generate: missing \(the generator: one of collective, dp"):
        generate({})
    with pytest.raises(ConfigError, match=r"workload: expected a mapping like \{generate: collective, …\}, got None"):
        generate(None)  # type: ignore[arg-type]
