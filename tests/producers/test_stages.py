"""Uneven pipelines: layers split over model chunks as given, as Megatron-LM's first/last stage counts, or balanced.

The balanced split is optimal (against every split of small cases); uneven jobs of the published shapes (126
layers on 16 stages, 70 on 12, 61 on 8 × 4 chunks) generate, validate and run, and the step report's per-stage
compute follows each stage's layers exactly.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from etsim.chakra.graph import Workload
from etsim.chakra.validate import validate_workload
from etsim.cli import main
from etsim.network import NetworkConfig, switch
from etsim.producers.training.stages import balanced_split, layer_times
from etsim.producers.workloads.base import parse
from etsim.producers.workloads.transformer import job_spec
from etsim.report.record import RunRecorder
from etsim.report.training import training_info, training_lines, training_report
from etsim.simulation import simulate
from etsim.system.config import Resources, SystemConfig


def splits(n: int, k: int) -> list[tuple[int, ...]]:
    """Every split of n layers into k runs of at least one."""
    return [
        tuple(b - a for a, b in zip((0, *cuts), (*cuts, n), strict=True))
        for cuts in itertools.combinations(range(1, n), k - 1)
    ]


def slowest(times: list[float], counts: tuple[int, ...], first: float, last: float) -> float:
    out, i = [], 0
    for c in counts:
        out.append(sum(times[i : i + c]))
        i += c
    out[0] += first
    out[-1] += last
    return max(out)


@pytest.mark.parametrize("seed", range(30))
def test_the_balanced_split_is_the_best_of_every_split(seed: int) -> None:
    rng = random.Random(seed)
    n, k = rng.randint(2, 9), rng.randint(1, 5)
    k = min(k, n)
    times = [float(rng.randint(1, 9)) for _ in range(n)]
    first, last = float(rng.randint(0, 9)), float(rng.randint(0, 9))
    counts = balanced_split(times, k, first, last)
    assert len(counts) == k and sum(counts) == n and min(counts) >= 1
    assert slowest(times, counts, first, last) == min(slowest(times, s, first, last) for s in splits(n, k))


def test_equal_layers_that_divide_split_evenly_and_the_head_takes_fewer() -> None:
    assert balanced_split([1.0] * 8, 4) == (2, 2, 2, 2)
    assert balanced_split([1.0] * 9, 4, 0.0, 1.5) == (3, 3, 2, 1)  # the last chunk's head counts
    assert balanced_split([1.0] * 7, 3, 2.0, 0.0) == (1, 3, 3)  # the first chunk's embedding counts


def job(**values: Any) -> Any:
    _, options = parse("transformer", {"global_batch": 4, **values})
    return job_spec(options)


def test_megatron_first_and_last_stage_layers() -> None:
    model = {"layers": 10, "hidden": 64, "heads": 4, "vocab": 0, "seq": 64}
    assert job(model=model, pp=4, first_stage_layers=1, last_stage_layers=3).chunk_layers == (1, 3, 3, 3)
    assert job(model=model, pp=4, first_stage_layers=4).chunk_layers == (4, 2, 2, 2)
    assert job(model=model, pp=2, pipeline_layers=[7, 3]).chunk_layers == (7, 3)
    assert job(model=model, pp=5).chunk_layers == (2, 2, 2, 2, 2)  # even when they divide


@pytest.mark.parametrize(("layers", "pp", "v"), [(126, 16, 1), (70, 12, 1), (61, 8, 4)])  # Llama 3, BLOOM, DeepSeek-V3
def test_published_uneven_shapes_generate_validate_and_run(layers: int, pp: int, v: int) -> None:
    model = {"layers": layers, "hidden": 512, "heads": 4, "vocab": 2000, "seq": 128}  # (a head of 0.3 layers)
    schedule = {"schedule": "interleaved", "virtual_stages": v} if v > 1 else {}
    gen, options = parse("transformer", {"model": model, "pp": pp, "global_batch": pp, **schedule})
    traces = gen.generate(options)
    workload = Workload(traces)
    validate_workload(workload)
    info = training_info(traces)
    assert info is not None
    split = info["pipeline_layers"]
    assert len(split) == pp * v and sum(split) == layers and max(split) - min(split) == 1
    times, embedding, head = layer_times(job_spec(options))
    assert tuple(split) == balanced_split(times, pp * v, embedding, head)
    recorder = RunRecorder(messages=False)
    system = SystemConfig(resources=Resources(comm_streams=0))
    result = simulate(workload, topology=NetworkConfig(switch(pp, 100, 0), "ideal"), system=system, observer=recorder)
    report = training_report(info, result, recorder)
    assert len(report["stage_compute_ns"]) == pp and report["iteration_ns"] > 0
    assert any(line.startswith("  compute per stage") for line in training_lines(report))


def test_stage_compute_follows_the_layers_of_each_stage() -> None:
    trunk = {"layers": 10, "hidden": 256, "heads": 4, "vocab": 0, "seq": 256}  # no embedding or head
    gen, options = parse("transformer", {"model": trunk, "pp": 3, "global_batch": 3, "pipeline_layers": "5,3,2"})
    workload = Workload(gen.generate(options))
    recorder = RunRecorder(messages=False)
    system = SystemConfig(resources=Resources(comm_streams=0))
    result = simulate(workload, topology=NetworkConfig(switch(3, 100, 0), "ideal"), system=system, observer=recorder)
    info = training_info(workload.traces)
    assert info is not None
    stages = training_report(info, result, recorder)["stage_compute_ns"]
    optimizer = [sum(d for tr in [workload.traces[s]] for j, d in enumerate(tr.duration_micros)
                     if tr.names[j] == "optimizer_step") * 1000.0 for s in range(3)]  # fmt: skip
    per_layer = (stages[0] - optimizer[0]) / 5
    assert [stages[s] - optimizer[s] for s in range(3)] == pytest.approx([5 * per_layer, 3 * per_layer, 2 * per_layer],
                                                                          rel=1e-12)  # fmt: skip


def test_the_command_line_takes_the_split(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "j"
    code = main(["workload", "gen", "transformer", "--model", "gpt3-175b", "--pp", "16", "--global-batch", "16",
                 "--pipeline-layers", "auto", "-o", str(out / "j")])  # fmt: skip
    assert code == 0
    capsys.readouterr()
    code = main(["workload", "gen", "transformer", "--model", "gpt3-175b", "--pp", "16", "--global-batch", "16",
                 "--pipeline-layers", "6,6", "-o", str(out / "k")])  # fmt: skip
    assert code == 1
    assert "--pipeline-layers: expected 16 counts (pp 16 × 1 chunks)" in capsys.readouterr().err
