"""Plots of an experiment's ``results.csv``, drawn with matplotlib (``pip install 'etsim[plot]'``).

A plot (one entry of the experiment's ``plots:`` list) draws a result column against an axis::

    - name: slowdown            # file stem: DIR/plots/slowdown.png and .svg (default: Y_vs_X[_by_SERIES])
      x: size                   # an axis: sizes and times are placed by value (log scale when they span
      y: finish_ns              #   more than 100x, unless logx says otherwise) and labelled as written
      series: topology          # one line per value of this axis (optional)
      baseline: ring            # optional: y relative to this series (per x and facet) ...
      relative: slowdown        #   ... as y / baseline (slowdown, default) or baseline / y (speedup)
      facet: model              # one panel per value of a third axis (optional)
      where: {algo: ring}       # fix the other axes that have several values
      logx: true                # optional; logy: false
      title: …                  # optional, as are xlabel and ylabel
      formats: [png, svg]       # default

Repeats of a point are averaged. Failed points leave a gap. Drawing reads only the CSV, so
``etsim experiment plot`` redraws without running anything.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from etsim.errors import ConfigError, EtsimError
from etsim.experiment.plotspec import parse_plots
from etsim.experiment.points import Axis, PlotSpec
from etsim.experiment.results import read_results
from etsim.files import read_yaml_mapping as read_yaml
from etsim.report.plots import save_figure
from etsim.units import parse_size, parse_time

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PlotUnavailable", "draw_plot", "draw_plots", "plots_of_directory"]


class PlotUnavailable(ConfigError):
    """matplotlib is not installed."""


def _matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailable("plots need matplotlib: python -m pip install 'etsim[plot]'") from None


def _positions(labels: Sequence[str]) -> tuple[list[float], str]:
    """Numeric x positions of axis labels and their kind (size, time, number, category)."""
    for kind, parse in (
        ("number", float),
        ("size", lambda v: float(parse_size(v))),
        ("time", lambda v: parse_time(v)),
    ):
        try:
            values = [float(parse(label)) for label in labels]
        except (EtsimError, ValueError):
            continue
        if all(math.isfinite(v) for v in values):
            return values, kind
    return [float(i) for i in range(len(labels))], "category"


def draw_plot(plot: PlotSpec, header: Sequence[str], rows: Sequence[dict[str, str]], directory: Path) -> list[Path]:
    """Draw one plot from CSV rows into *directory*; return the files written.

    Raises:
        ConfigError: a column the plot names is not in the CSV.
        PlotUnavailable: matplotlib is not installed.
    """
    _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    selected = _selected_rows(plot, header, rows)
    facets = list(dict.fromkeys(r[plot.facet] for r in selected)) if plot.facet else [""]
    series = list(dict.fromkeys(r[plot.series] for r in selected)) if plot.series else [""]
    xs = list(dict.fromkeys(r[plot.x] for r in selected))
    positions, kind = _positions(xs)
    at = dict(zip(xs, positions, strict=True))
    value = _mean_values(plot, selected)

    ncols = min(3, len(facets))
    nrows = math.ceil(len(facets) / ncols) if facets else 1
    legend_width = 2.0 if plot.series else 0.0
    fig = Figure(figsize=(5.2 * ncols + legend_width, 3.8 * nrows + 0.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
    logx = plot.logx if plot.logx is not None else _wants_logx(positions, kind)
    ylabel = plot.ylabel or plot.y
    if plot.baseline is not None and plot.ylabel is None:
        ylabel = f"{plot.relative} vs {plot.series} = {plot.baseline} ({plot.y})"
    for i, facet in enumerate(facets):
        ax = axes[i // ncols][i % ncols]
        for s in series:
            points = _series_points(plot, value, facet, s, xs, at)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=s or plot.y)
        if logx:
            ax.set_xscale("log", base=2 if kind == "size" else 10)
        if plot.logy:
            ax.set_yscale("log")
        if kind == "category" or len(xs) <= 12:
            ax.set_xticks(positions, xs)
            ax.minorticks_off()
            ax.tick_params(axis="x", labelrotation=45 if len(xs) > 6 else 0)
        ax.set_xlabel(plot.xlabel or plot.x)
        if i % ncols == 0:
            ax.set_ylabel(ylabel)
        if plot.facet:
            ax.set_title(f"{plot.facet} = {facet}", fontsize="medium")
        ax.grid(True, alpha=0.3)
    for j in range(len(facets), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    if plot.series:
        fig.legend(
            *axes[0][0].get_legend_handles_labels(), title=plot.series, fontsize="small", loc="outside right upper"
        )
    fig.suptitle("\n".join(textwrap.wrap(plot.title or plot.name, 55 * ncols + 20)), fontsize="medium")
    return _save_figure(fig, plot, directory)


def _selected_rows(plot: PlotSpec, header: Sequence[str], rows: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The rows the plot draws: points that ran, match its ``where`` and have a *y* value.

    Raises:
        ConfigError: a column the plot names is not in the CSV.
    """
    for name in (plot.x, plot.y, plot.series, plot.facet, *plot.where):
        if name is not None and name not in header:
            raise ConfigError(f"plot {plot.name}: results.csv has no column {name!r}")
    return [
        r for r in rows if r["status"] == "ok" and all(r[k] == v for k, v in plot.where.items()) and r[plot.y] != ""
    ]


def _mean_values(plot: PlotSpec, selected: Sequence[dict[str, str]]) -> dict[tuple[str, str, str], float]:
    """Per (facet, series, x), the mean of *y* over the repeats.

    Raises:
        ConfigError: a *y* value that is not a finite number.
    """
    sums: dict[tuple[str, str, str], list[float]] = {}
    for r in selected:
        key = (r[plot.facet] if plot.facet else "", r[plot.series] if plot.series else "", r[plot.x])
        try:
            measured = float(r[plot.y])
        except ValueError:
            measured = math.nan
        if not math.isfinite(measured):
            point = r.get("point", "?")
            raise ConfigError(f"plot {plot.name}: results.csv, point {point}: {plot.y} is {r[plot.y]!r}, not a number")
        sums.setdefault(key, []).append(measured)
    return {k: sum(v) / len(v) for k, v in sums.items()}


def _wants_logx(positions: Sequence[float], kind: str) -> bool:
    """Whether x is drawn on a log scale by default: sizes or times, all positive, spanning more than 100x."""
    pos = [p for p in positions if p > 0]
    return kind in ("size", "time") and len(pos) == len(positions) and bool(pos) and max(pos) / min(pos) > 100


def _series_points(
    plot: PlotSpec,
    value: dict[tuple[str, str, str], float],
    facet: str,
    series: str,
    xs: Sequence[str],
    at: dict[str, float],
) -> list[tuple[float, float]]:
    """The ``(x position, y)`` points of one series in one facet (relative to the baseline if the plot has one).

    An x without a value, or without a usable baseline (missing or zero, or a zero value), is left out.
    """
    points = []
    for x in xs:
        y = value.get((facet, series, x))
        if y is not None and plot.baseline is not None:
            base = value.get((facet, plot.baseline, x))
            if base is None or base == 0 or y == 0:
                continue
            y = y / base if plot.relative == "slowdown" else base / y
        if y is not None:
            points.append((at[x], y))
    return points


def _save_figure(fig: Figure, plot: PlotSpec, directory: Path) -> list[Path]:
    """Save *fig* in each of the plot's formats into *directory*; return the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in plot.formats:  # (identical results give identical plots: save_figure)
        path = directory / f"{plot.name}.{fmt}"
        save_figure(fig, path, dpi=120, fmt=fmt)
        written.append(path)
    return written


def draw_plots(plots: Sequence[PlotSpec], directory: str | os.PathLike[str]) -> list[Path]:
    """Draw every plot from ``DIR/results.csv`` into ``DIR/plots``; return the files written.

    Raises:
        ConfigError: no results.csv, or a plot names a column it lacks.
        PlotUnavailable: matplotlib is not installed.
    """
    _matplotlib()
    d = Path(directory)
    header, rows = read_results(d / "results.csv")
    written: list[Path] = []
    for plot in plots:
        written += draw_plot(plot, header, rows, d / "plots")
    return written


def plots_of_directory(directory: str | os.PathLike[str]) -> list[PlotSpec]:
    """The plots declared by ``DIR/experiment.yaml``, checked against ``DIR/results.csv``.

    Only the ``plots`` entry is read: the axes and their values come from the CSV, so the
    experiment's input files need not exist any more.

    Raises:
        ConfigError: a missing file, or a plot naming an axis or column the CSV lacks.
    """
    d = Path(directory)
    source = d / "experiment.yaml"
    data, _ = read_yaml(source)
    header, rows = read_results(d / "results.csv")
    end = header.index("network_model") if "network_model" in header else len(header)
    keys = [k for k in header[1:end] if k != "repeat"]
    axes = []
    for key in keys:
        labels = tuple(dict.fromkeys(r[key] for r in rows))
        axes.append(Axis(key, labels, labels, tuple(f"{key}[{i}]" for i in range(len(labels)))))
    numeric = [c for c in header[end:] if c not in ("network_model", "status", "error", "warnings")]
    return parse_plots(str(source), data.get("plots"), axes, numeric, data.get("zip"))
