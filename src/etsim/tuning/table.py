"""From measurements to a selection table: the fastest candidate per point, adjacent sizes merged.

Per (collective, group size, dimension) — a *series* — the tuned sizes are sorted and each gets the fastest
candidate measured alone (ties: the candidate listed first). Runs of adjacent sizes with the same winner
become one rule: the first run has no ``min_bytes``, the last no ``max_bytes``, and every other boundary
sits right after the last size of a run (``max_bytes`` = that size, the next rule's ``min_bytes`` = that
size + 1), so every tuned point is served by its own winner and every size between two tuned sizes by the
winner of the larger one. The table is written as a system YAML (``--system`` takes it), the measurements as
CSV, and — with matplotlib installed — a plot of time or bus bandwidth against size with the crossovers marked.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from etsim.chakra.graph import collective_buffer_bytes
from etsim.errors import ConfigError
from etsim.files import write_text
from etsim.system.algorithms.sources import claiming_source
from etsim.system.rules import SelectionRule
from etsim.tuning.points import Point, bus_bandwidth_factor
from etsim.tuning.runner import Measurement
from etsim.units import format_size, format_time

__all__ = ["Series", "TunedPoint", "csv_text", "plot", "table_rules", "table_yaml", "winners"]

#: (collective, group size, dimension)
Series = tuple[str, int, int | None]


@dataclass(frozen=True)
class TunedPoint:
    """The winner of one (series, size) point."""

    series: Series
    size: int
    candidate: str
    time_ns: float
    group: tuple[int, ...]


def _series(point: Point) -> Series:
    return (point.collective, point.group_size, point.dimension)


def winners(measurements: Sequence[Measurement], candidates: Sequence[str]) -> list[TunedPoint]:
    """The fastest measured candidate of every (series, size), sorted by series and size.

    Points no candidate could serve are left out (the measurements say why).
    """
    order = {c: i for i, c in enumerate(candidates)}
    best: dict[tuple[Series, int], tuple[float, int, str, tuple[int, ...]]] = {}
    for m in measurements:
        p = m.point
        if not isinstance(p, Point) or m.time_ns is None:
            continue
        key = (_series(p), p.size)
        entry = (m.time_ns, order.get(p.candidate, len(order)), p.candidate, p.group)
        if key not in best or entry[:2] < best[key][:2]:
            best[key] = entry
    out = [TunedPoint(s, size, cand, t, group) for (s, size), (t, _, cand, group) in best.items()]
    return sorted(out, key=lambda w: (*_series_order(w.series), w.size))


def _series_order(series: Series) -> tuple[str, int, bool, int]:
    """The order of series: by collective and group size, then the groups spanning one dimension first.

    The others' rules carry no ``dimension`` key, and the table's first matching rule wins: the catch-all comes last.
    """
    collective, group_size, dimension = series
    return (collective, group_size, dimension is None, dimension or 0)


def table_rules(tuned: Sequence[TunedPoint], *, dimensions: bool, fallback: str | None) -> list[SelectionRule]:
    """Rules for *tuned* (see the module docstring); ``dimension`` is a key only with *dimensions*."""
    rules: list[SelectionRule] = []
    by_series: dict[Series, list[TunedPoint]] = {}
    for w in tuned:
        by_series.setdefault(w.series, []).append(w)
    for (collective, group_size, dimension), points in by_series.items():
        runs: list[list[TunedPoint]] = []
        for w in points:
            if runs and runs[-1][-1].candidate == w.candidate:
                runs[-1].append(w)
            else:
                runs.append([w])
        for k, run in enumerate(runs):
            low = runs[k - 1][-1].size + 1 if k > 0 else None
            high = run[-1].size if k < len(runs) - 1 else None
            i = len(rules)
            rules.append(
                SelectionRule(
                    run[0].candidate,
                    f"algorithms[{i}]",
                    f"algorithms[{i}]",
                    collective=collective,
                    min_bytes=low,
                    max_bytes=high,
                    group_sizes=((group_size, group_size),),
                    dimension=dimension if dimensions else None,
                )
            )
    if fallback:
        i = len(rules)
        rules.append(SelectionRule(fallback, f"algorithms[{i}]", f"algorithms[{i}]", is_default=True))
    return rules


def _relative(algorithm: str, out_dir: Path) -> str:
    """File candidates written relative to the table's directory (the table resolves paths against it)."""
    if (os.sep not in algorithm and "/" not in algorithm) or not claiming_source(algorithm).reads_files:
        return algorithm
    return _relative_path(algorithm, out_dir)


def _relative_path(path: str, out_dir: Path) -> str:
    return os.path.relpath(os.path.abspath(path), os.path.abspath(out_dir)).replace(os.sep, "/")


def table_yaml(
    rules: Sequence[SelectionRule],
    tuned: Sequence[TunedPoint],
    *,
    out: Path,
    header: Sequence[str],
    settings: Mapping[str, Any] | None = None,
) -> str:
    """The selection table as a system YAML, each rule with the tuned points it serves as a comment."""
    lines = [f"# {h}" for h in header]
    if settings:
        written = dict(settings)
        if isinstance(written.get("comm_groups"), str):  # (a system file resolves its paths against itself)
            written["comm_groups"] = _relative_path(written["comm_groups"], out.parent)
        lines.append(yaml.safe_dump(written, sort_keys=True, default_flow_style=False).rstrip("\n"))
    lines.append("algorithms:")

    def matches(rule: SelectionRule, w: TunedPoint) -> bool:
        return (
            not rule.is_default
            and w.series[0] == rule.collective
            and rule.group_sizes == ((w.series[1], w.series[1]),)
            and (rule.dimension is None or rule.dimension == w.series[2])
            and (rule.min_bytes is None or w.size >= rule.min_bytes)
            and (rule.max_bytes is None or w.size <= rule.max_bytes)
        )

    # Each tuned point is served by the first rule that matches it (as the table is read).
    first = {id(w): next((i for i, r in enumerate(rules) if matches(r, w)), -1) for w in tuned}
    for i, rule in enumerate(rules):
        text = replace(rule, algorithm=_relative(rule.algorithm, out.parent), bounds_from_file=False).describe()
        served = [w for w in tuned if first[id(w)] == i]
        note = ", ".join(f"{format_size(w.size)} {format_time(w.time_ns)}" for w in served)
        lines.append(f"  - {text}" + (f"  # tuned: {note}" if note else "  # calls no tuned point covers"))
    return "\n".join(lines) + "\n"


def csv_text(measurements: Sequence[Measurement], tuned: Sequence[TunedPoint]) -> str:
    """Every measured point: ``collective,bytes,group_size,dimension,group,candidate,time_ns,bus_GBps,fastest,note``."""
    best = {(w.series, w.size): w.candidate for w in tuned}
    rows = ["collective,bytes,group_size,dimension,group,candidate,time_ns,bus_GBps,fastest,note"]
    points = [(m.point, m) for m in measurements if isinstance(m.point, Point)]
    for p, m in sorted(points, key=lambda pm: (_sort_key(pm[0]), pm[0].candidate)):
        time = "" if m.time_ns is None else f"{m.time_ns:.3f}"
        moves = p.collective != "barrier"  # (a barrier moves no data: no bus bandwidth)
        bus = "" if not m.time_ns or not moves else f"{_bus_gbps(p.collective, p.size, p.group_size, m.time_ns):.6g}"
        fastest = "yes" if best.get((_series(p), p.size)) == p.candidate and m.time_ns is not None else ""
        dim = "" if p.dimension is None else str(p.dimension)
        note = m.note.replace('"', "'")
        rows.append(
            f'{p.collective},{p.size},{p.group_size},{dim},"{" ".join(map(str, p.group))}",{p.candidate},{time},'
            f'{bus},{fastest},"{note}"'
        )
    return "\n".join(rows) + "\n"


def _bus_gbps(collective: str, size: int, n: int, time_ns: float) -> float:
    """nccl-tests' bus bandwidth (GB/s) of a call of comm_size *size* over *n* ranks that took *time_ns*."""
    return collective_buffer_bytes(collective, size, n) / time_ns * bus_bandwidth_factor(collective, n)


def _sort_key(p: Point) -> tuple[str, int, bool, int, int]:
    return (*_series_order(_series(p)), p.size)


def plot(
    path: str | os.PathLike[str],
    measurements: Sequence[Measurement],
    tuned: Sequence[TunedPoint],
    candidates: Sequence[str],
    *,
    metric: str = "time",
) -> None:
    """Plot time (or bus bandwidth, ``metric="busbw"``) against size, one line per candidate.

    One panel per series; dotted vertical lines mark where the winner changes, labelled with the new winner.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = sorted(
        {_series(m.point) for m in measurements if isinstance(m.point, Point)},
        key=lambda s: (s[0], s[1], -1 if s[2] is None else s[2]),
    )
    if not series:
        return
    fig, axes = plt.subplots(len(series), 1, figsize=(8, 3.6 * len(series)), squeeze=False)
    for ax, s in zip(axes[:, 0], series, strict=True):
        for cand in candidates:
            pts = sorted(
                (m.point.size, m.time_ns)
                for m in measurements
                if isinstance(m.point, Point) and _series(m.point) == s and m.point.candidate == cand and m.time_ns
            )
            if not pts:
                continue
            xs = [x for x, _ in pts]
            ys = [_bus_gbps(s[0], x, s[1], t) if metric == "busbw" else t / 1e3 for x, t in pts]
            ax.plot(xs, ys, marker="o", markersize=3, label=cand)
        ws = [w for w in tuned if w.series == s]
        for prev, w in itertools.pairwise(ws):
            if w.candidate != prev.candidate:
                x = math.sqrt(prev.size * w.size)
                ax.axvline(x, color="grey", linestyle=":", linewidth=1)
                ax.annotate(f"→ {w.candidate}", (x, 0.97), xycoords=("data", "axes fraction"), fontsize=7, va="top")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        where = f", dimension {s[2]}" if s[2] is not None else ""
        ax.set_title(f"{s[0]} over {s[1]} ranks{where}", fontsize=9)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)" if metric == "busbw" else "time (µs)")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    from etsim.report.plots import save_figure

    try:
        save_figure(fig, os.fspath(path))
    except (OSError, ValueError) as exc:  # (a format matplotlib does not write, say)
        raise ConfigError(f"{path}: cannot write the picture: {exc}") from None
    finally:
        plt.close(fig)


def write_outputs(path: Path, text: str) -> None:
    """Write *text* to *path* (one ``etsim: error:`` line naming the file when it cannot be written)."""
    write_text(path, text)
