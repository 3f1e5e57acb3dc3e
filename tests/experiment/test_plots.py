"""Plots: drawn from the CSV, redrawn identically without running, clear errors without matplotlib."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from etsim.cli import main
from etsim.errors import ConfigError
from etsim.experiment import load_experiment, run_experiment
from etsim.experiment.plots import PlotUnavailable, draw_plots, plots_of_directory
from etsim.experiment.results import read_results

from .conftest import RING8

pytest.importorskip("matplotlib")


def test_plots_are_drawn_and_redrawn_identically_from_the_csv(small: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    summary = run_experiment(load_experiment(small), out=out, jobs=1)
    assert summary.plots == [out / "plots" / "speed.png", out / "plots" / "speed.svg"]
    svg = (out / "plots" / "speed.svg").read_bytes()
    assert svg.startswith(b"<?xml") and b"<dc:date>" not in svg
    assert (out / "plots" / "speed.png").read_bytes()[:4] == b"\x89PNG"
    (out / "plots" / "speed.svg").unlink()
    # From the result directory alone: the plots come from experiment.yaml, the data from results.csv.
    assert main(["experiment", "plot", str(out)]) == 0
    assert (out / "plots" / "speed.svg").read_bytes() == svg
    assert main(["experiment", "plot", str(small), "--out", str(out)]) == 0
    assert (out / "plots" / "speed.svg").read_bytes() == svg
    assert "speed.png" in capsys.readouterr().out


def test_baseline_values_are_relative_to_the_baseline_series(small: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    run_experiment(load_experiment(small), out=out, jobs=1, plots=False)
    _, rows = read_results(out / "results.csv")
    (plot,) = plots_of_directory(out)
    assert (plot.x, plot.series, plot.baseline, plot.relative) == ("size", "algo", "ring", "slowdown")
    from matplotlib.figure import Figure

    drawn: list[list[float]] = []
    original = Figure.subplots

    def spy(self, *args, **kwargs):  # capture the plotted y values
        axes = original(self, *args, **kwargs)
        ax = axes[0][0]
        plot_line = ax.plot

        def record(x, y, **kw):
            drawn.append(list(y))
            return plot_line(x, y, **kw)

        ax.plot = record
        return axes

    Figure.subplots = spy
    try:
        draw_plots([plot], out)
    finally:
        Figure.subplots = original
    by = {(r["algo"], r["size"]): float(r["finish_ns"]) for r in rows}
    assert drawn[0] == [1.0, 1.0, 1.0]
    assert drawn[1] == [by[("direct", s)] / by[("ring", s)] for s in ("1 KiB", "1 MiB", "64 MiB")]


def test_missing_matplotlib_is_a_clean_error(small: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    run_experiment(load_experiment(small), out=out, jobs=1, plots=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotUnavailable, match=r"pip install 'etsim\[plot\]'"):
        draw_plots(load_experiment(small).plots, out)
    summary = run_experiment(load_experiment(small), out=out, jobs=1, force=True)
    assert summary.plots == [] and "etsim[plot]" in summary.plot_note


def test_plot_of_a_directory_checks_columns(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_experiment(load_experiment(small), out=out, jobs=1, plots=False)
    text = (out / "experiment.yaml").read_text()
    (out / "experiment.yaml").write_text(text.replace("y: finish_ns", "y: latency_ns"))
    with pytest.raises(ConfigError, match=r"experiment.yaml: plots\[0\].y: 'latency_ns' is not a result column"):
        plots_of_directory(out)


def test_a_zipped_axis_follows_the_plotted_one(write, tmp_path: Path) -> None:
    # layers and grad_size vary together: with x = grad_size, layers is decided by x and needs no pin.
    write("ring8.yaml", RING8)
    common = """
        workload: {generate: dp, npus: 8, layers: 1, grad_size: 1 MiB}
        topology: ring8.yaml
        model: analytical
        plots: [{x: workload.grad_size, y: finish_ns, series: algo}]
    """
    zipped = (
        common
        + """
        sweep: {algo: [ring, direct]}
        zip: {workload.layers: [1, 2, 3], workload.grad_size: [4 MiB, 2 MiB, 1 MiB]}
    """
    )
    out = tmp_path / "out"
    summary = run_experiment(load_experiment(write("z.yaml", zipped)), out=out, jobs=1)
    name = "finish_ns_vs_workload.grad_size_by_algo"
    assert summary.failed == 0 and [p.name for p in summary.plots] == [f"{name}.png", f"{name}.svg"]
    (plot,) = plots_of_directory(out)  # the same check, from the results directory
    assert plot.x == "workload.grad_size"
    crossed = (
        common
        + """
        sweep: {algo: [ring, direct], workload.layers: [1, 2], workload.grad_size: [4 MiB, 1 MiB]}
    """
    )
    with pytest.raises(ConfigError, match=r"axis 'workload\.layers' has 2 values but is not the plot's x"):
        load_experiment(write("n.yaml", crossed))


def test_a_damaged_row_is_skipped_with_a_warning(tmp_path: Path) -> None:
    # A row with too few fields (edited by hand) silently vanished from the plot.
    from etsim.errors import EtsimWarning

    path = tmp_path / "results.csv"
    path.write_text("point,algo,finish_ns\n0000,ring,5\n0001,direct\n0002,tree,7\n")
    with pytest.warns(
        EtsimWarning, match=r"1 row\(s\) with a wrong number of fields skipped \(line 3: 2, expected 3\)"
    ):
        _, rows = read_results(path)
    assert [r["point"] for r in rows] == ["0000", "0002"]
    path.write_text("point,algo,finish_ns\n0000,ring,5\n0001,dir")  # a torn last row: cut without a word
    assert [r["point"] for r in read_results(path)[1]] == ["0000"]
