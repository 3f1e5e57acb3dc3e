"""Running sweeps: results match simulate(), stream in order, survive failures, kills and dead workers."""

from __future__ import annotations

import json
import multiprocessing
import signal
import tempfile
import threading
import warnings
from pathlib import Path

import pytest

from etsim.chakra import CollectiveType, Workload
from etsim.cli import main
from etsim.errors import ConfigError
from etsim.experiment import load_experiment, run_experiment
from etsim.experiment.engines import STOP
from etsim.experiment.engines.local import _pool_round, run_local
from etsim.experiment.spec import select_points
from etsim.experiment.worker import PointOutcome, PointTask
from etsim.producers.workloads import collective_workload
from etsim.registry import PLUGINS_ENV
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

from .conftest import RING8, TROUBLE_MODEL, rows, without_wall


@pytest.fixture(autouse=True)
def _plugins_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The misbehaving model is a plug-in the experiments name: allowed here as ``--allow-plugins`` would."""
    monkeypatch.setenv(PLUGINS_ENV, "1")


def test_rows_match_simulate_and_every_point_has_config_and_report(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = run_experiment(load_experiment(small), out=out, jobs=2, plots=False)
    assert (summary.ok, summary.failed, summary.ran) == (6, 0, 6)
    table = rows(out / "results.csv")
    assert [r["point"] for r in table] == [f"{i:04d}" for i in range(6)]
    for r in table:
        size = {"1 KiB": 1024, "1 MiB": 1 << 20, "64 MiB": 64 << 20}[r["size"]]
        with warnings.catch_warnings():  # a model may warn about what it ignores; the sweep records that
            warnings.simplefilter("ignore")
            expected = simulate(
                Workload(collective_workload(CollectiveType.ALL_REDUCE, size, 8)),
                topology=small.parent / "ring8.yaml",
                model="analytical",
                system=SystemConfig(algorithms={"default": r["algo"]}),
            )
        assert float(r["finish_ns"]) == expected.finish_ns
        assert float(r["all_reduce_ns"]) == expected.finish_ns  # one collective from t = 0
        assert int(r["messages"]) == expected.network["messages"]
        assert (r["status"], r["error"], r["network_model"]) == ("ok", "", "analytical")
        assert (out / "points" / r["point"] / "config.yaml").is_file()
    reports = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [rep["point"] for rep in reports] == [r["point"] for r in table]
    assert reports[1]["axes"] == {"size": "1 KiB", "algo": "direct"}
    assert reports[1]["result"]["finish_ns"] == float(table[1]["finish_ns"])


def test_identical_inputs_give_identical_files_whatever_the_engine_order(small: Path, tmp_path: Path) -> None:
    exp = load_experiment(small)
    run_experiment(exp, out=tmp_path / "a", jobs=1, plots=False)
    run_experiment(exp, out=tmp_path / "b", jobs=2, plots=False)
    assert without_wall(tmp_path / "a") == without_wall(tmp_path / "b")
    for point in ("0000", "0005"):
        config = Path("points") / point / "config.yaml"
        a, b = ((tmp_path / d / config).read_text().splitlines() for d in "ab")
        assert a[0] == b[0] and a[2:] == b[2:]  # line 2 names the result directory


def test_point_config_reruns_alone_with_the_identical_result(small: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    run_experiment(load_experiment(small), out=out, jobs=1, plots=False)
    reports = {json.loads(line)["point"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}
    for point in ("0001", "0004"):
        capsys.readouterr()
        assert main(["run", "--config", str(out / "points" / point / "config.yaml"), "--json", "-"]) == 0
        alone = json.loads(capsys.readouterr().out)
        swept = reports[point]["result"]
        alone["sim"].pop("wall_s"), swept["sim"].pop("wall_s")
        assert alone == swept


def _trouble(write, name: str, sweep: str) -> Path:
    """An 8-NPU all-reduce experiment *name* on the misbehaving model (conftest), swept over *sweep* (flow style)."""
    write("ring8.yaml", RING8)
    write("trouble.py", TROUBLE_MODEL)
    return write(
        name,
        f"""
        workload: {{generate: collective, type: all_reduce, npus: 8, size: 1 MiB}}
        topology: ring8.yaml
        model: trouble.py:Trouble
        sweep: {sweep}
        """,
    )


def test_failed_points_are_recorded_and_rerun_by_resume(write, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    exp = load_experiment(
        _trouble(write, "t.yaml", f'{{size: [1 KiB, 2 KiB, 3 KiB, 4 KiB], model_options.needs: ["", {str(marker)!r}]}}')
    )
    out = tmp_path / "out"
    summary = run_experiment(exp, out=out, jobs=2, plots=False)
    assert (summary.ok, summary.failed) == (4, 4)
    table = rows(out / "results.csv")
    failed = [r for r in table if r["status"] == "failed"]
    assert [r["point"] for r in failed] == ["0001", "0003", "0005", "0007"]
    assert all(r["error"] == f"trouble: {marker} is missing" and r["finish_ns"] == "" for r in failed)
    ok_before = {r["point"]: r for r in table if r["status"] == "ok"}

    marker.write_text("")
    summary = run_experiment(exp, out=out, jobs=2, resume=True, plots=False)
    assert (summary.skipped, summary.ran, summary.ok, summary.failed) == (4, 4, 8, 0)
    table = rows(out / "results.csv")
    assert [r["point"] for r in table] == [f"{i:04d}" for i in range(8)]
    assert all(r["status"] == "ok" for r in table)
    assert {r["point"]: r for r in table if r["point"] in ok_before} == ok_before  # kept, not rerun


def test_an_unexpected_exception_is_a_failed_point_not_a_crash(write, tmp_path: Path) -> None:
    path = _trouble(write, "b.yaml", '{model_options.bug: ["", "oops"]}')
    summary = run_experiment(load_experiment(path), out=tmp_path / "out", jobs=1, plots=False)
    assert (summary.ok, summary.failed) == (1, 1)
    error = rows(tmp_path / "out" / "results.csv")[1]["error"]
    assert error.startswith("internal error: ZeroDivisionError: oops (at trouble.py:")


def test_warnings_are_recorded_with_their_point(write, tmp_path: Path, capsys) -> None:
    path = _trouble(write, "w.yaml", '{model_options.warn: ["", "mind the gap"]}')
    # pytest turns warnings into errors here: a worker must record them, not fail on them.
    assert main(["experiment", "run", str(path), "--out", str(tmp_path / "out"), "--jobs", "2"]) == 0
    quiet, warned = rows(tmp_path / "out" / "results.csv")
    # The model delivers at infinite bandwidth, so both rows also carry the bandwidth-bound warning.
    bound = "finished faster than their bytes can cross the links"
    assert quiet["status"] == "ok" and bound in quiet["warnings"] and "mind the gap" not in quiet["warnings"]
    assert (warned["status"], warned["warnings"].split(" | ")[0]) == ("ok", "mind the gap")
    report = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[1])
    assert report["warnings"][0] == "mind the gap" and bound in report["warnings"][1]
    assert "2 with warnings" in capsys.readouterr().out


def test_a_dead_worker_fails_only_its_point(write, tmp_path: Path) -> None:
    path = _trouble(
        write, "d.yaml", '{size: [1 KiB, 2 KiB, 3 KiB, 4 KiB, 5 KiB, 6 KiB], model_options.crash: ["", "yes"]}'
    )
    out = tmp_path / "out"
    summary = run_experiment(load_experiment(path), out=out, jobs=2, plots=False)
    assert (summary.ok, summary.failed) == (6, 6)
    for r in rows(out / "results.csv"):
        crashed = r["model_options.crash"] == "yes"
        assert r["status"] == ("failed" if crashed else "ok")
        assert ("worker process died" in r["error"]) == crashed


def test_existing_results_need_resume_or_force(small: Path, tmp_path: Path) -> None:
    exp = load_experiment(small)
    out = tmp_path / "out"
    run_experiment(exp, out=out, jobs=1, only=["size=1 KiB"], plots=False)
    with pytest.raises(ConfigError, match=r"results.csv exists: pass --resume .* or --force"):
        run_experiment(exp, out=out, jobs=1, plots=False)
    summary = run_experiment(exp, out=out, jobs=1, resume=True, plots=False)
    assert (summary.skipped, summary.ran) == (2, 4)
    summary = run_experiment(exp, out=out, jobs=1, force=True, only=["algo=ring"], plots=False)
    assert (summary.skipped, summary.ran) == (0, 3)
    assert [r["point"] for r in rows(out / "results.csv")] == ["0000", "0002", "0004"]


def test_resume_reruns_points_whose_topology_file_changed_in_place(write, tmp_path: Path) -> None:
    """Same configuration text, same path, 10x slower links: the rows are the new file's, not the old one's."""
    topology = write("ring4.yaml", "kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    exp = write(
        "e.yaml",
        """
        workload: {generate: collective, type: all_reduce, npus: 4, size: 16 MiB}
        topology: ring4.yaml
        sweep: {algo: [ring, direct]}
        """,
    )
    out = tmp_path / "out"
    run_experiment(load_experiment(exp), out=out, jobs=1, plots=False)
    before = [float(r["finish_ns"]) for r in rows(out / "results.csv")]
    summary = run_experiment(load_experiment(exp), out=out, jobs=1, resume=True, plots=False)
    assert (summary.skipped, summary.ran) == (2, 0)  # unchanged: kept
    topology.write_text("kind: ring\nnpus: 4\nbandwidth: 5 GB/s\nlatency: 500 ns\n")
    summary = run_experiment(load_experiment(exp), out=out, jobs=1, resume=True, plots=False)
    assert (summary.skipped, summary.ran) == (0, 2)
    after = [float(r["finish_ns"]) for r in rows(out / "results.csv")]
    assert all(a > 9 * b for a, b in zip(after, before, strict=True))


def test_resume_reruns_points_whose_configuration_changed(small: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    run_experiment(load_experiment(small), out=out, jobs=1, plots=False)
    # The same directory spelled differently is the same sweep.
    monkeypatch.chdir(tmp_path)
    summary = run_experiment(load_experiment(small), out="out", jobs=1, resume=True, plots=False)
    assert (summary.skipped, summary.ran) == (6, 0)
    # A renamed value is a changed point (its row would carry the old label).
    small.write_text(small.read_text().replace("algo: [ring, direct]", "algo: {ring: ring, dir: direct}"))
    summary = run_experiment(load_experiment(small), out=out, jobs=1, resume=True, plots=False)
    assert (summary.skipped, summary.ran) == (3, 3)
    small.write_text(small.read_text().replace("model: analytical", "model: link"))
    summary = run_experiment(load_experiment(small), out=out, jobs=1, resume=True, plots=False)
    assert (summary.skipped, summary.ran) == (0, 6)
    assert {r["network_model"] for r in rows(out / "results.csv")} == {"link"}


def test_resume_refuses_results_of_other_axes(small: Path, write, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_experiment(load_experiment(small), out=out, jobs=1, plots=False)
    other = write("o.yaml", small.read_text().replace("algo: [ring, direct]", "system.chunks: [1, 2]"))
    other.write_text(other.read_text().replace("series: algo, baseline: ring", "series: system.chunks"))
    with pytest.raises(ConfigError, match=r"has columns point, size, algo.*use another --out"):
        run_experiment(load_experiment(other), out=out, jobs=1, resume=True, plots=False)


def _sizes_sweep(write, name: str, points: int) -> Path:
    """A sweep of *points* 64-rank ring all-reduces (1, 2, … MiB) on the default topology."""
    sizes = ", ".join(f"{k} MiB" for k in range(1, points + 1))
    return write(
        name,
        f"""
        workload: {{generate: collective, type: all_reduce, npus: 64, size: 1 MiB}}
        model: analytical
        algo: ring
        sweep: {{size: [{sizes}]}}
        """,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_sweep_loses_nothing_and_resumes(write, tmp_path: Path, sig: signal.Signals, signal_command) -> None:
    # 40 points of a 64-rank ring all-reduce on the default topology: long enough to kill half-way.
    path = _sizes_sweep(write, "k.yaml", 40)
    out = tmp_path / "out"
    csv_path = out / "results.csv"

    def six_rows() -> bool:
        return csv_path.exists() and csv_path.read_text().count("\n") >= 6

    # For SIGKILL, the command ending at all proves the pool workers noticed their parent's death.
    args = ["experiment", "run", str(path), "--out", str(out), "--jobs", "2", "-q"]
    status, err = signal_command(args, sig, six_rows)
    assert status == (143 if sig == signal.SIGTERM else -9)  # 128 + SIGTERM, as a shell reports it
    if sig == signal.SIGTERM:
        assert "Traceback" not in err and "etsim: terminated" in err
    done = [r["point"] for r in rows(csv_path) if r["status"] == "ok"]
    assert 5 <= len(done) < 40
    if sig == signal.SIGTERM:
        assert done == sorted(done)  # an interrupted run still leaves its files in point order
    summary = run_experiment(load_experiment(path), out=out, jobs=2, resume=True, plots=False)
    assert summary.skipped == len(done) and summary.ran == 40 - len(done) and summary.failed == 0
    reference = tmp_path / "ref"
    run_experiment(load_experiment(path), out=reference, jobs=2, plots=False)
    assert without_wall(out) == without_wall(reference)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("delay", [0.25, 0.5, 0.75])
def test_a_signal_to_the_group_while_workers_start_is_a_clean_stop(
    write, tmp_path: Path, delay: float, sig: signal.Signals, signal_command
) -> None:
    # Ctrl-C (or `kill -- -PGID`, `timeout`, a batch scheduler) reaches the whole process group, the worker
    # server included: while it was importing etsim, it died with a traceback and the sweep crashed
    # starting its next worker.
    path = _sizes_sweep(write, "c.yaml", 20)
    args = ["experiment", "run", str(path), "--out", str(tmp_path / "o"), "--jobs", "2"]
    status, err = signal_command(args, sig, delay, group=True)
    assert "Traceback" not in err, err
    # Done, stopped (128 + the signal), or killed by the signal: a SIGTERM that came before the sweep took it
    # over, or a Ctrl-C that landed inside an exec() of a string (dataclasses does that while etsim imports):
    # CPython then ends the process by SIGINT at exit even though etsim handled it, as a shell expects.
    assert status in (0, 128 + sig, -sig, -signal.SIGTERM)


def test_a_stopped_local_pool_leaves_no_process_or_thread_behind(small: Path) -> None:
    # The sweep's process must be able to exit at once after a stop, whatever the workers were doing: no
    # worker process and no helper thread may survive the engine (a thread stuck reading a torn result
    # made an interrupted sweep hang at exit, 1 run in ~20, with concurrent.futures' pool).
    tasks = [PointTask(p.id, p.spec) for p in select_points(load_experiment(small), ())] * 4
    threads = set(threading.enumerate())
    outcomes: list[PointOutcome] = []

    def on_outcome(outcome: PointOutcome) -> None:
        outcomes.append(outcome)
        STOP.set()  # as the SIGINT/SIGTERM handler does

    STOP.clear()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_local(tasks, on_outcome, jobs=2)
    finally:
        STOP.clear()
    assert 1 <= len(outcomes) < len(tasks)
    assert multiprocessing.active_children() == []
    assert set(threading.enumerate()) <= threads


def test_workers_remove_their_synthesis_directories_when_done_or_stopped(write, tmp_path: Path) -> None:
    write("mesh.yaml", "kind: mesh\nshape: [2, 4]\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    path = write(
        "t.yaml",
        """
        workload: {generate: collective, type: all_gather, npus: 8, size: 64 KiB}
        topology: mesh.yaml
        model: link
        algo: {tacos: {chunks_per_npu: 2, seed: 1}}
        sweep: {algo.tacos.seed: [1, 2, 3, 4, 5, 6, 7, 8]}
        """,
    )
    tasks = [PointTask(p.id, p.spec) for p in select_points(load_experiment(path), ())]
    synth_dirs = lambda: set(Path(tempfile.gettempdir()).glob("etsim-synth-*"))  # noqa: E731
    before = synth_dirs()
    lost = _pool_round([[t] for t in tasks], 2, lambda o: None)  # ends idle workers
    assert lost == [] and synth_dirs() == before

    def stop(outcome: PointOutcome) -> None:
        STOP.set()  # the other worker is terminated in the middle of its point

    STOP.clear()
    try:
        with pytest.raises(KeyboardInterrupt):
            _pool_round([[t] for t in tasks], 2, stop)
    finally:
        STOP.clear()
    assert synth_dirs() == before


def test_a_dead_worker_loses_only_its_own_batch(write, tmp_path: Path) -> None:
    path = _trouble(write, "d.yaml", '{size: [1 KiB, 2 KiB, 3 KiB], model_options.crash: ["", "yes"]}')
    points = select_points(load_experiment(path), ())
    crashing = sorted(p.id for p in points if "yes" in p.labels)
    assert len(crashing) == 3
    seen: list[str] = []
    # One point per batch, two workers: each crash costs its own point, every other point finishes.
    lost = _pool_round([[PointTask(p.id, p.spec)] for p in points], 2, lambda o: seen.append(o.id))
    assert sorted(t.id for t in lost) == crashing
    assert sorted(seen) == sorted(set(p.id for p in points) - set(crashing))


def test_torn_last_lines_are_dropped_and_rerun(small: Path, tmp_path: Path) -> None:
    exp = load_experiment(small)
    out, reference = tmp_path / "out", tmp_path / "ref"
    run_experiment(exp, out=reference, jobs=1, plots=False)
    run_experiment(exp, out=out, jobs=1, plots=False)
    # A kill in the middle of writing point 0005: its report is torn, its row missing; 0004's row is torn too.
    csv_text = (out / "results.csv").read_text()
    (out / "results.csv").write_text(csv_text[: csv_text.rindex("\n0004,") + 8])
    jsonl = (out / "results.jsonl").read_bytes()
    (out / "results.jsonl").write_bytes(jsonl[: len(jsonl) - 100])
    summary = run_experiment(exp, out=out, jobs=1, resume=True, plots=False)
    assert (summary.skipped, summary.ran) == (4, 2)
    assert without_wall(out) == without_wall(reference)


def test_an_unusable_result_directory_is_a_clear_error(small: Path, tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    exp = load_experiment(small)
    for out in (tmp_path / "a_file", tmp_path / "a_file" / "r"):
        with pytest.raises(ConfigError, match=r"a_file is a file, not a directory"):
            run_experiment(exp, out=out, jobs=1, plots=False)
    with pytest.raises(ConfigError, match="--resume keeps earlier results and --force discards them"):
        run_experiment(exp, out=tmp_path / "r", jobs=1, resume=True, force=True, plots=False)


def test_force_deletes_only_what_etsim_wrote(small: Path, tmp_path: Path) -> None:
    """`name: ..` once made --force remove plots/ and points/ of the working directory."""
    exp = load_experiment(small)
    foreign = tmp_path / "mine"
    (foreign / "points").mkdir(parents=True)
    (foreign / "points" / "precious.txt").write_text("keep me")
    (foreign / "results.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match=r"mine holds a results.csv that etsim did not write .*choose another --out"):
        run_experiment(exp, out=foreign, jobs=1, force=True, plots=False)
    assert (foreign / "points" / "precious.txt").read_text() == "keep me"
    assert (foreign / "results.csv").read_text() == "a,b\n1,2\n"
    # Its own directory, --force replaces.
    run_experiment(exp, out=tmp_path / "ours", jobs=1, plots=False)
    assert (tmp_path / "ours" / ".etsim-results").is_file()
    summary = run_experiment(exp, out=tmp_path / "ours", jobs=1, force=True, plots=False)
    assert summary.ran == len(exp.points)


def test_a_name_is_one_path_component(small: Path, tmp_path: Path) -> None:
    for name in ("..", ".", "a/b"):
        path = tmp_path / "e.yaml"
        path.write_text(small.read_text().replace("name: small", f"name: '{name}'"))
        (tmp_path / "ring8.yaml").write_text((small.parent / "ring8.yaml").read_text())
        with pytest.raises(ConfigError, match=r"name: expected a name of up to 100 letters"):
            load_experiment(path)


def test_a_second_sweep_on_one_directory_is_refused_naming_the_first(small: Path, tmp_path: Path) -> None:
    import fcntl
    import os

    exp = load_experiment(small)
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".etsim-lock", "w") as held:  # what a running sweep holds
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242")
        held.flush()
        for kwargs in ({"force": True}, {"resume": True}, {}):
            with pytest.raises(ConfigError, match=r"out is being written by another sweep \(etsim process 4242\)"):
                run_experiment(exp, out=out, jobs=1, plots=False, **kwargs)
    assert not (out / "results.csv").exists()
    run_experiment(exp, out=out, jobs=1, plots=False)  # released: the directory is usable again
    assert os.path.getsize(out / "results.csv") > 0


def test_resume_drops_records_spliced_by_two_writers(small: Path, tmp_path: Path) -> None:
    exp = load_experiment(small)
    out, reference = tmp_path / "out", tmp_path / "ref"
    run_experiment(exp, out=reference, jobs=1, plots=False)
    run_experiment(exp, out=out, jobs=1, plots=False)
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    # Another writer's whole record lands in the middle of point 0002's: the line starts as 0002's and ends as
    # 0003's (its head still parses), and 0002's tail follows as a line of its own.
    half = len(lines[2]) // 2
    lines[2] = lines[2][:half] + lines[3] + lines[2][half:]
    (out / "results.jsonl").write_bytes(b"".join(lines))
    summary = run_experiment(exp, out=out, jobs=1, resume=True, plots=False)
    assert summary.ran == 1
    assert without_wall(out) == without_wall(reference)
    for line in (out / "results.jsonl").read_bytes().splitlines():
        json.loads(line)


def test_resume_when_points_is_a_file_is_a_clear_error(small: Path, tmp_path: Path) -> None:
    exp = load_experiment(small)
    out = tmp_path / "out"
    run_experiment(exp, out=out, jobs=1, plots=False)
    import shutil

    shutil.rmtree(out / "points")
    (out / "points").write_text("")
    with pytest.raises(ConfigError, match=r"points is a file, where the results keep a directory"):
        run_experiment(exp, out=out, jobs=1, resume=True, plots=False)


def test_ctrl_c_on_a_large_sweep_stops_at_once(write, tmp_path: Path, signal_command) -> None:
    # Issue 20, item 10: a 10^5-point sweep took 14 s to stop, its config writer finishing every file first.
    sizes = ", ".join(f"{i + 1} KiB" for i in range(1000))
    path = write(
        "big.yaml",
        f"""
        workload: {{generate: collective, type: all_reduce, npus: 8, size: 1 MiB}}
        model: analytical
        repeat: 50
        sweep: {{size: [{sizes}]}}
        """,
    )
    out = tmp_path / "out"

    def running() -> bool:
        return (out / "results.csv").exists() and (out / "results.csv").read_text().count("\n") >= 20

    import time

    t0 = time.perf_counter()
    status, err = signal_command(
        ["experiment", "run", str(path), "--out", str(out), "--jobs", "1"], signal.SIGINT, running
    )
    assert status == 130 and "etsim: interrupted" in err and "Traceback" not in err
    written = len(list((out / "points").iterdir()))
    assert written < 50_000  # the writer stopped with the sweep instead of finishing all 50,000 files
    assert time.perf_counter() - t0 < 20


def test_a_collective_the_workload_did_not_declare_is_named_in_the_warnings(write, tmp_path: Path, monkeypatch) -> None:
    # The per-collective columns come from the generator's declaration: a call it left out was in no column, silently.
    from etsim.producers.workloads.collective import CollectiveGenerator

    monkeypatch.setattr(CollectiveGenerator, "collectives", lambda self, options: [])
    write("ring4.yaml", "kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    exp = write(
        "e.yaml", "workload: {generate: collective, type: all_reduce, npus: 4, size: 1 MiB}\ntopology: ring4.yaml\n"
    )
    run_experiment(load_experiment(exp), out=tmp_path / "out", jobs=1, plots=False)
    (row,) = rows(tmp_path / "out" / "results.csv")
    assert "all_reduce_ns: measured, but the experiment has no column for it" in row["warnings"]


def test_one_filter_may_be_a_string_and_the_experiment_must_be_loaded(small: Path, tmp_path: Path) -> None:
    # only="algo=ring" was taken letter by letter ("--only 'a': expected AXIS=VALUE"); a path for the experiment
    # raised an AttributeError.
    summary = run_experiment(load_experiment(small), out=tmp_path / "out", jobs=1, plots=False, only="algo=ring")
    assert summary.ran == 3
    with pytest.raises(ConfigError, match=r"run_experiment: expected an Experiment \(load_experiment\(PATH\)\)"):
        run_experiment(str(small), out=tmp_path / "other")  # type: ignore[arg-type]
