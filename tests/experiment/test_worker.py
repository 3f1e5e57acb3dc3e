"""Workers: inputs built once per process and reused, failures discovered late, TACOS specs, progress display."""

from __future__ import annotations

import io
import json
from pathlib import Path

from etsim.chakra import CollectiveType, write_workload
from etsim.cli import main
from etsim.experiment import load_experiment, run_experiment
from etsim.experiment import worker as worker_module
from etsim.experiment.engines import batch_size
from etsim.experiment.runner import Progress
from etsim.experiment.worker import PointOutcome, PointTask, run_batch
from etsim.producers.workloads import collective_workload

from .conftest import RING8, rows


def _tasks(path: Path) -> list[PointTask]:
    return [PointTask(p.id, p.spec) for p in load_experiment(path).points]


def test_inputs_are_built_once_per_process(write, tmp_path: Path, monkeypatch) -> None:
    write("ring8.yaml", RING8)
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 8), tmp_path / "wl" / "ar")
    path = write(
        "e.yaml",
        """
        workload: wl/ar
        topology: ring8.yaml
        algo: {tacos: {chunks_per_npu: 1}}
        sweep: {system.chunks: [1, 2, 3]}
        zip: [{model: [analytical, link]}]
        """,
    )
    from etsim.simulation import inputs

    calls: dict[str, int] = {"load_workload": 0, "load_network": 0, "synthesize": 0}
    homes = {"load_workload": inputs, "load_network": worker_module, "synthesize": worker_module}
    for name in calls:
        original = getattr(homes[name], name)

        def counted(*args, _name=name, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(homes[name], name, counted)
    for cache in (inputs._WORKLOADS, worker_module._NETWORKS, worker_module._SYNTHESES):
        cache.clear()
    tasks = _tasks(path)
    calls.update(dict.fromkeys(calls, 0))  # (validating the file read the workload once: what the points build counts)
    outcomes = run_batch(tasks)
    assert [o.status for o in outcomes] == ["ok"] * 6, [o.error for o in outcomes]
    # Six points, one workload, one topology, one TACOS synthesis (same topology, collective, size, parameters).
    assert calls == {"load_workload": 1, "load_network": 1, "synthesize": 1}


def test_a_file_that_disappears_after_validation_fails_its_points_only(write, tmp_path: Path) -> None:
    write("ring8.yaml", RING8)
    write_workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 8), tmp_path / "alg" / "fam")
    path = write(
        "e.yaml",
        """
        workload: {generate: collective, type: all_reduce, npus: 8, size: 1 MiB}
        topology: ring8.yaml
        sweep: {algo: [ring, alg/fam.et]}
        """,
    )
    exp = load_experiment(path)
    for f in (tmp_path / "alg").iterdir():
        f.unlink()
    summary = run_experiment(exp, out=tmp_path / "out", jobs=1, plots=False)
    assert (summary.ok, summary.failed) == (1, 1)
    failed = rows(tmp_path / "out" / "results.csv")[1]
    assert failed["status"] == "failed" and "fam" in failed["error"]


def test_tacos_points_rerun_alone_identically(write, tmp_path: Path, capsys) -> None:
    write("mesh.yaml", "kind: mesh\nshape: [2, 4]\nbandwidth: 50 GB/s\nlatency: 500 ns\nfailed: [{link: [2, 3]}]\n")
    path = write(
        "t.yaml",
        """
        workload: {generate: sequence, npus: 8, size: 256 KiB, collectives: [all_reduce, all_gather]}
        topology: mesh.yaml
        model: link
        algo: {tacos: {chunks_per_npu: 2, seed: 3}}
        sweep: {size: [4 KiB, 1 MiB]}
        """,
    )
    out = tmp_path / "out"
    summary = run_experiment(load_experiment(path), out=out, jobs=2, plots=False)
    assert summary.failed == 0
    for line in (out / "results.jsonl").read_text().splitlines():
        swept = json.loads(line)
        labels = {c["algorithm"] for c in swept["result"]["collectives"]}
        assert labels == {"tacos(chunks_per_npu=2, seed=3, runs=1)"}
        capsys.readouterr()
        assert main(["run", "--config", str(out / "points" / swept["point"] / "config.yaml"), "--json", "-"]) == 0
        alone = json.loads(capsys.readouterr().out)
        alone["sim"].pop("wall_s"), swept["result"]["sim"].pop("wall_s")
        assert alone == swept["result"]


def test_progress_bar_on_a_terminal_and_batch_sizes() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    bar = Progress(3, stream)
    for status in ("ok", "failed", "ok"):
        bar.update(PointOutcome("0", status, {}, None, "", 0.0))
    bar.close()
    text = stream.getvalue()
    assert "3/3" in text and "1 failed" in text and "pt" in text
    assert (batch_size(1000, 2), batch_size(10, 2), batch_size(100_000, 8), batch_size(1, 4)) == (32, 1, 32, 1)
    assert batch_size(100, 2) == 7
