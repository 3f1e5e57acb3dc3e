"""The step report of generated training jobs, checked against the pipeline closed forms on a free network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from etsim.chakra.graph import NodeType, Workload
from etsim.cli import main
from etsim.network import NetworkConfig, switch
from etsim.producers.training.info import job_info
from etsim.producers.workloads.base import parse
from etsim.producers.workloads.transformer import job_spec
from etsim.report.record import RunRecorder
from etsim.report.result import Result
from etsim.report.training import training_info, training_report
from etsim.simulation import simulate
from etsim.system.config import Resources, SystemConfig

TRUNK = {"layers": 8, "hidden": 512, "heads": 8, "vocab": 0, "seq": 512}  # equal stages: no embedding or logits
STREAMS = SystemConfig(resources=Resources(comm_streams=0))


def run_free(**values: Any) -> tuple[Workload, Result, dict[str, float]]:
    """A job on an ideal network (messages take no time); the stage's forward/backward/optimizer times."""
    gen, options = parse("transformer", {"model": TRUNK, **values})
    workload = Workload(gen.generate(options))
    recorder = RunRecorder(messages=False)
    result = simulate(workload, topology=NetworkConfig(switch(workload.num_ranks, 100, 0), "ideal"), system=STREAMS,
                      observer=recorder)  # fmt: skip
    info = training_info(workload.traces)
    assert info is not None
    result.training = training_report(info, result, recorder)
    tr = workload.traces[0]
    total = {"F": 0.0, "B": 0.0, "o": 0.0}
    for j, t in enumerate(tr.types):
        if t == NodeType.COMP_NODE and tr.names[j][0] in "FBo" and tr.names[j].split("_")[1] in ("mb0", "step"):
            total[tr.names[j][0]] += tr.duration_micros[j] * 1000.0
    return workload, result, total


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(4, 8), (2, 4), (4, 4), (8, 16)])
def test_gpipe_and_1f1b_take_m_plus_p_minus_1_stage_times(schedule: str, p: int, m: int) -> None:
    _, result, t = run_free(pp=p, global_batch=m, schedule=schedule)
    # (m + p − 1)·(t_f + t_b), then the optimizer step (Narayanan et al. 2021, §2.2).
    assert result.finish_ns == (m + p - 1) * (t["F"] + t["B"]) + t["o"]
    report = result.training
    assert report is not None
    busy = m * (t["F"] + t["B"]) + t["o"]
    assert report["bubble_fraction"] == pytest.approx((p - 1) * (t["F"] + t["B"]) / busy, rel=1e-12)


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (2, 4, 2), (2, 4, 4), (4, 4, 2)])
def test_interleaved_1f1b_shrinks_the_bubble_by_v(p: int, m: int, v: int) -> None:
    _, result, t = run_free(pp=p, global_batch=m, schedule="interleaved", virtual_stages=v)
    # (m + (p − 1)/v)·(t_f + t_b) with t_f, t_b a whole stage's times: bubble (p − 1)/(v·m).
    stage = t["F"] + t["B"]
    assert result.finish_ns == pytest.approx((m * v + p - 1) * stage / v + t["o"], rel=1e-12)
    assert result.training is not None
    assert result.training["bubble_fraction"] == pytest.approx((p - 1) * stage / v / (m * stage + t["o"]), rel=1e-9)


def test_the_rates_follow_from_flops_time_and_peak() -> None:
    _, result, _ = run_free(pp=2, global_batch=4, recompute="full", gpu="h100-sxm")
    report = result.training
    assert report is not None
    seconds = result.finish_ns * 1e-9
    gen, options = parse("transformer", {"model": TRUNK, "pp": 2, "global_batch": 4, "recompute": "full"})
    info = training_info(gen.generate(options))
    assert info is not None
    assert report["tokens_per_s"] == pytest.approx(4 * 512 / seconds)
    assert report["model_tflops_per_gpu"] == pytest.approx(info["model_flops"] / seconds / 2 / 1e12)
    assert report["mfu"] == pytest.approx(info["model_flops"] / seconds / 2 / 989e12)
    assert report["hfu"] == pytest.approx(info["hardware_flops"] / seconds / 2 / 989e12)
    assert report["hfu"] > report["mfu"]  # full recomputation executes a fourth more FLOPs than the model needs


def test_exposed_communication_is_split_by_parallelism(tmp_path: Path) -> None:
    gen, options = parse("transformer", {"model": TRUNK, "tp": 2, "dp": 2, "pp": 2, "global_batch": 4})
    workload = Workload(gen.generate(options))
    recorder = RunRecorder(messages=False)
    result = simulate(workload, topology=NetworkConfig(switch(8, 10, 1000), "flow"), system=STREAMS, observer=recorder)
    info = training_info(workload.traces)
    assert info is not None
    report = training_report(info, result, recorder)
    exposed = report["exposed_comm_ns"]
    assert set(exposed) == {"tp", "pp", "dp", "ep", "cp"}
    assert exposed["tp"] > 0 and exposed["pp"] > 0 and exposed["dp"] > 0  # every parallelism costs something here
    assert exposed["ep"] == exposed["cp"] == 0
    assert all(v <= result.finish_ns for v in exposed.values())


def test_a_job_too_large_for_the_gpu_is_warned_about() -> None:
    _, options = parse("transformer", {"model": "gpt3-175b", "tp": 8, "global_batch": 1})
    info = json.loads(job_info(job_spec(options), {}))  # the description only: 96 layers' traces take a while
    result = Result(finish_ns=1e9, ranks=[], collectives=[], network={}, sim={})
    with pytest.warns(UserWarning, match="stage 0 needs about .* more than the a100-80gb's"):
        training_report(info, result, None)
    assert any("would not fit" in w for w in result.warnings)


def test_one_communication_stream_is_warned_about() -> None:
    gen, options = parse("transformer", {"model": TRUNK, "tp": 2, "dp": 2, "global_batch": 2})
    info = training_info(gen.generate(options))
    assert info is not None
    result = Result(finish_ns=1e9, ranks=[], collectives=[], network={}, sim={})
    with pytest.warns(UserWarning, match="comm_streams: 0"):
        training_report(info, result, None, comm_streams=1)


@pytest.mark.parametrize("model", ["flow", "link", "analytical", "ideal"])
def test_the_command_line_reports_the_step_under_every_network_model(tmp_path: Path, model: str, capsys: Any) -> None:
    prefix = tmp_path / "job"
    args = ["--model", "megatron-1.7b", "--tp", "2", "--pp", "2", "--dp", "2", "--sp", "--zero", "1"]
    assert main(["workload", "gen", "transformer", *args, "--global-batch", "4", "-o", str(prefix)]) == 0
    topo = tmp_path / "cluster.yaml"
    topo.write_text("kind: gpu_cluster\npreset: dgx-a100\ngpus: 8\n")
    out = tmp_path / "r.json"
    trace = tmp_path / "t.json"
    assert main(["run", str(prefix), "--topology", str(topo), "--model", model, "--json", str(out),
                 "--critical-path", "--trace", str(trace)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "MFU" in printed and "tokens/s" in printed
    doc = json.loads(out.read_text())
    report = doc["training"]
    assert report["iteration_ns"] == doc["finish_ns"]
    assert 0 < report["mfu"] < 1 and report["hfu"] == report["mfu"]
    assert set(report["exposed_comm_ns"]) == {"tp", "pp", "dp", "ep", "cp"}
    assert Result.from_dict(doc).training == report
    assert trace.stat().st_size > 0 and doc["critical_path"]["nodes"]


def test_the_readme_and_docs_example_gives_the_figures_docs_training_md_quotes(tmp_path: Path, capsys: Any) -> None:
    """README's training example (Korthikanti et al.'s 22B row: measured 1.10 s, MFU 41.5%)."""
    repo = Path(__file__).resolve().parents[2]
    prefix = tmp_path / "m22"
    assert (
        main(
            [
                "workload",
                "gen",
                "transformer",
                "--model",
                "megatron-22b",
                "--tp",
                "8",
                "--sp",
                "--recompute",
                "selective",
                "--global-batch",
                "4",
                "--micro-batch",
                "4",
                "--gpu",
                "a100-80gb",
                "-o",
                str(prefix),
            ]
        )
        == 0
    )
    topo = tmp_path / "dgx.yaml"
    topo.write_text("kind: gpu_cluster\npreset: dgx-a100\ngpus: 8\n")
    out = tmp_path / "r.json"
    assert main(["run", str(prefix), "--topology", str(topo), "--system", str(repo / "systems" / "training.yaml"),
                 "--json", str(out), "-q"]) == 0  # fmt: skip
    report = json.loads(out.read_text())["training"]
    assert round(report["iteration_ns"] / 1e9, 4) == 1.0194  # docs/training.md's table
    assert round(100 * report["mfu"], 1) == 44.9


def test_a_job_timed_on_another_gpu_than_the_clusters_is_warned() -> None:
    # A job generated with the default --gpu (a100-80gb) run on dgx-h100 once reported A100 times and MFU silently.
    from etsim.network.builders import build_topology
    from etsim.report.training import gpu_clash

    h100 = build_topology({"kind": "gpu_cluster", "preset": "dgx-h100", "gpus": 8}, None).hardware
    assert gpu_clash({"gpu": "h100-sxm"}, h100, "t.yaml") is None
    message = gpu_clash({"gpu": "a100-80gb"}, h100, "t.yaml")
    assert message is not None and "timed on a100-80gb" in message and "t.yaml has h100 GPUs" in message
    assert gpu_clash({"gpu": "a100-80gb"}, None, "mesh.yaml") is None  # a topology that names no GPU
