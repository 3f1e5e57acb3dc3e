"""Pictures of a run with matplotlib (imported only when drawing; ``pip install 'etsim[plot]'``).

- :func:`plot_timeline`: a Gantt view of a Chrome trace etsim wrote (``--trace``): one row per track
  of each rank, one bar per slice, coloured by kind; for papers and for readers without a trace
  viewer.
- :func:`plot_links`: utilisation per directed link from a result JSON: a 2-D mesh or torus is drawn
  as its grid (one arrow per direction, wrap-around links as stubs at the edge); anything else as an
  endpoint × endpoint heatmap beside a bar chart of the busiest links.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etsim.errors import ConfigError
from etsim.files import make_parent, read_bytes

__all__ = ["load_trace_events", "plot_links", "plot_timeline", "save_figure"]

#: Bar colours by slice category.
COLOURS = {
    "compute": "#4C72B0",
    "cpu": "#8C8C8C",
    "collective": "#DD8452",
    "chunk": "#F1B98C",
    "send": "#55A868",
    "recv": "#8172B3",
    "memory": "#937860",
    "other": "#BBBBBB",
}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'etsim[plot]' (or pip install matplotlib)") from None
    return plt


def load_trace_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of a Chrome trace file (JSON object with ``traceEvents`` or a JSON array; gzipped or not).

    Raises:
        ConfigError: the file cannot be read or is not a trace (named, with the reason).
    """
    p = Path(path)
    data = read_bytes(p, "trace", ConfigError, gunzip=True)
    try:
        doc = json.loads(data)
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a trace: the file is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise ConfigError(f"{p}: not a trace: invalid JSON at {where} ({exc.msg})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ConfigError(f"{p}: not a trace: expected a JSON object with a traceEvents list, or a list of events")
    return events


def _time_unit(span_us: float) -> tuple[str, float]:
    if span_us >= 1e6:
        return "s", 1e6
    if span_us >= 1e3:
        return "ms", 1e3
    if span_us >= 1:
        return "µs", 1.0
    return "ns", 1e-3


def plot_timeline(
    events: Sequence[dict[str, Any]],
    out: str | os.PathLike[str],
    *,
    max_ranks: int = 16,
    title: str | None = None,
) -> dict[str, int]:
    """Draw complete (``X``) slices of *events* as a Gantt chart into *out* (``.png``, ``.pdf``, ``.svg`` …).

    Args:
        events: trace events (:func:`load_trace_events`).
        out: the picture file.
        max_ranks: draw the first this many processes (ranks) only; the title says when some were left out.
        title: the figure title (default: what was drawn).

    Returns:
        ``{"rows", "slices", "processes", "processes_drawn"}``.

    Raises:
        ConfigError: no slices to draw, matplotlib missing, or the file cannot be written.
    """
    tracks = _Tracks.of(events)
    slices, tsort = tracks.slices, tracks.tsort
    if not slices:
        raise ConfigError("the trace has no slices (complete 'X' events) to draw")
    pids = sorted({pid for pid, _ in slices}, key=lambda p: (tracks.psort.get(p, 0.0), str(p)))
    drawn = pids[:max_ranks]
    rows = sorted(
        (key for key in slices if key[0] in drawn),
        key=lambda k: (drawn.index(k[0]), tsort.get(k, 0.0), str(k[1])),
    )
    end = max(ts + dur for key in rows for ts, dur, _, _ in slices[key])
    unit, scale = _time_unit(end)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.28 * len(rows)))
    count = _draw_slices(ax, rows, slices, end, scale)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{tracks.pnames.get(p, p)} · {tracks.tnames.get((p, t), t)}" for p, t in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, end / scale)
    ax.set_xlabel(f"time ({unit})")
    left_out = len(pids) - len(drawn)
    default = f"{len(drawn)} of {len(pids)} ranks (first {max_ranks})" if left_out else f"{len(pids)} processes"
    ax.set_title(title or f"timeline: {default}", loc="left", fontsize=10)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=8, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    _save(fig, out, plt)
    return {"rows": len(rows), "slices": count, "processes": len(pids), "processes_drawn": len(drawn)}


@dataclass(slots=True)
class _Tracks:
    """The processes, threads and complete slices of a trace's events.

    Attributes:
        pnames, psort: per process id, its name and sort index (from metadata events).
        tnames, tsort: per (process, thread) id, its name and sort index.
        slices: per (process, thread) id, its slices as ``(ts, dur, category, name)`` in event order.
    """

    pnames: dict[Any, str]
    psort: dict[Any, float]
    tnames: dict[tuple[Any, Any], str]
    tsort: dict[tuple[Any, Any], float]
    slices: dict[tuple[Any, Any], list[tuple[float, float, str, str]]]

    @classmethod
    def of(cls, events: Sequence[dict[str, Any]]) -> _Tracks:
        """The tracks of *events*: metadata (``M``) and complete (``X``) events read, slices without times skipped."""
        pnames: dict[Any, str] = {}
        psort: dict[Any, float] = {}
        tnames: dict[tuple[Any, Any], str] = {}
        tsort: dict[tuple[Any, Any], float] = {}
        slices: dict[tuple[Any, Any], list[tuple[float, float, str, str]]] = {}
        for e in events:
            ph = e.get("ph")
            pid, tid = e.get("pid", 0), e.get("tid", 0)
            if ph == "M":
                args = e.get("args") or {}
                if e.get("name") == "process_name":
                    pnames[pid] = str(args.get("name", pid))
                elif e.get("name") == "process_sort_index":
                    psort[pid] = float(args.get("sort_index", 0))
                elif e.get("name") == "thread_name":
                    tnames[(pid, tid)] = str(args.get("name", tid))
                elif e.get("name") == "thread_sort_index":
                    tsort[(pid, tid)] = float(args.get("sort_index", 0))
            elif ph == "X":
                try:
                    ts, dur = float(e["ts"]), float(e.get("dur", 0))
                except (KeyError, TypeError, ValueError):
                    continue
                slices.setdefault((pid, tid), []).append((ts, dur, str(e.get("cat", "other")), str(e.get("name", ""))))
        return cls(pnames, psort, tnames, tsort, slices)


def _draw_slices(
    ax: Any,
    rows: Sequence[tuple[Any, Any]],
    slices: dict[tuple[Any, Any], list[tuple[float, float, str, str]]],
    end: float,
    scale: float,
) -> int:
    """Draw every row's slices as bars (labelled where the name fits) on *ax*; return the slices drawn."""
    seen: set[str] = set()
    count = 0
    for y, key in enumerate(rows):
        by_cat: dict[str, list[tuple[float, float]]] = {}
        for ts, dur, cat, name in slices[key]:
            # A zero-long slice is drawn one pixel wide rather than not at all.
            by_cat.setdefault(cat, []).append((ts / scale, max(dur / scale, end / scale / 2000)))
            count += 1
            # Label a slice when its name fits: the axes are ~10 in wide, a 6 pt character ~3.7 pt.
            if name and cat != "chunk" and dur / end * 720 > 3.7 * len(name) + 4:
                ax.text((ts + dur / 2) / scale, y, name, ha="center", va="center", fontsize=6, color="white",
                        clip_on=True, zorder=4)  # fmt: skip
        # Chunks nest inside their collective: drawn after it, thinner, so both stay visible.
        for cat, bars in sorted(by_cat.items(), key=lambda item: (item[0] == "chunk", item[0])):
            colour = COLOURS.get(cat, COLOURS["other"])
            label = cat if cat not in seen else None
            seen.add(cat)
            height = 0.3 if cat == "chunk" else 0.8
            offset = 0.25 if cat == "chunk" else 0.0
            ax.broken_barh(
                bars, (y - height / 2 + offset, height), facecolors=colour, edgecolors="white", linewidth=0.4,
                label=label, zorder=3,
            )  # fmt: skip
    return count


def _grid(network: dict[str, Any]) -> tuple[int, int] | None:
    dims = network.get("dims") or []
    if len(dims) == 2 and all(d.get("kind") in ("line", "ring", "uni_ring") for d in dims):
        return int(dims[0]["npus"]), int(dims[1]["npus"])
    return None


def _utilisation(link: dict[str, Any], finish: float) -> float:
    util = link.get("utilisation")
    if util is None:
        util = link.get("busy_ns", 0.0) / finish if finish > 0 else 0.0
    return float(util)


def plot_links(result: dict[str, Any], out: str | os.PathLike[str], *, top: int = 30) -> str:
    """Draw link utilisation of a result (:meth:`Result.to_dict`'s mapping) into *out*; returns the layout used.

    Raises:
        ConfigError: the result has no link statistics, matplotlib is missing, or *out* cannot be written.
    """
    links = result.get("links") or []
    if not links:
        raise ConfigError("the result has no per-link statistics (links) to draw")
    finish = float(result.get("finish_ns", 0.0))
    network = result.get("network") or {}
    plt = _pyplot()
    from matplotlib import cm, colors

    vmax = max(1e-12, max(_utilisation(lk, finish) for lk in links))
    norm = colors.Normalize(vmin=0.0, vmax=vmax)
    cmap = cm.get_cmap("viridis") if hasattr(cm, "get_cmap") else plt.get_cmap("viridis")
    grid = _grid(network)
    title = f"link utilisation ({network.get('model', '?')} on {network.get('topology', '?')})"
    if grid is not None and all(isinstance(lk["src"], int) and isinstance(lk["dst"], int) for lk in links):
        fig = _link_grid(plt, links, finish, grid, norm, cmap, title)
        layout = "grid"
    else:
        fig, layout = _link_chart(plt, links, finish, top, norm, cmap, title)
    fig.tight_layout()
    _save(fig, out, plt)
    return layout


def _link_grid(
    plt: Any, links: list[dict[str, Any]], finish: float, grid: tuple[int, int], norm: Any, cmap: Any, title: str
) -> Any:
    """A figure of the 2-D *grid*: its NPUs, and every link as an arrow coloured by its utilisation."""
    from matplotlib import cm

    nx_, ny_ = grid
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * nx_, 0.8 + 1.1 * ny_))
    for r in range(nx_ * ny_):
        ax.plot(r % nx_, r // nx_, "o", color="#333333", markersize=10, zorder=3)
        ax.annotate(str(r), (r % nx_, r // nx_), color="white", fontsize=6, ha="center", va="center", zorder=4)
    for lk in sorted(links, key=lambda lk: lk["link"]):
        s, d = lk["src"], lk["dst"]
        x0, y0, x1, y1 = s % nx_, s // nx_, d % nx_, d // nx_
        ux, uy = _sign(x1 - x0), _sign(y1 - y0)
        length = 0.85
        if abs(x1 - x0) > 1 or abs(y1 - y0) > 1:  # wrap-around: a stub leaving the grid edge
            ux, uy, length = -ux, -uy, 0.45
        # The two directions of a link are drawn side by side, each offset to its right.
        ox, oy = -uy * 0.1, ux * 0.1
        colour = cmap(norm(_utilisation(lk, finish)))
        ax.annotate(
            "",
            xy=(x0 + length * ux + ox, y0 + length * uy + oy),
            xytext=(x0 + 0.15 * ux + ox, y0 + 0.15 * uy + oy),
            arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2.5, "shrinkA": 0, "shrinkB": 0},
        )
    ax.set_xlim(-0.7, nx_ - 0.3)
    ax.set_ylim(ny_ - 0.3, -0.7)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="utilisation (busy / finish)", shrink=0.8)
    ax.set_title(title, fontsize=9)
    return fig


def _link_chart(
    plt: Any, links: list[dict[str, Any]], finish: float, top: int, norm: Any, cmap: Any, title: str
) -> tuple[Any, str]:
    """A figure of the *top* busiest links as bars, and its layout: "heatmap" or "bars".

    With at most 128 endpoints, an endpoint × endpoint heatmap of every link is drawn beside the bars.
    """
    ends = sorted({str(lk["src"]) for lk in links} | {str(lk["dst"]) for lk in links}, key=_endpoint_order)
    heat = len(ends) <= 128
    fig, axes = plt.subplots(1, 2 if heat else 1, figsize=(14 if heat else 8, 6), squeeze=False)
    if heat:
        import numpy as np

        index = {e: i for i, e in enumerate(ends)}
        matrix = np.full((len(ends), len(ends)), np.nan)
        for lk in links:
            matrix[index[str(lk["src"])], index[str(lk["dst"])]] = _utilisation(lk, finish)
        hm = axes[0][0]
        image = hm.imshow(matrix, cmap=cmap, norm=norm, interpolation="nearest")
        step = max(1, len(ends) // 32)
        hm.set_xticks(range(0, len(ends), step))
        hm.set_xticklabels(ends[::step], rotation=90, fontsize=6)
        hm.set_yticks(range(0, len(ends), step))
        hm.set_yticklabels(ends[::step], fontsize=6)
        hm.set_xlabel("to")
        hm.set_ylabel("from")
        fig.colorbar(image, ax=hm, label="utilisation (busy / finish)", shrink=0.8)
        hm.set_title(title, fontsize=9)
    bars = axes[0][-1]
    busiest = sorted(links, key=lambda lk: (-_utilisation(lk, finish), lk["link"]))[:top]
    values = [_utilisation(lk, finish) for lk in busiest]
    bars.barh(range(len(busiest)), values, color=[cmap(norm(v)) for v in values])
    bars.set_yticks(range(len(busiest)))
    bars.set_yticklabels([f"{lk['src']} → {lk['dst']}" for lk in busiest], fontsize=7)
    bars.invert_yaxis()
    bars.set_xlabel("utilisation (busy / finish)")
    bars.set_title(f"{len(busiest)} busiest of {len(links)} links", fontsize=9)
    return fig, "heatmap" if heat else "bars"


def _sign(v: int) -> int:
    return (v > 0) - (v < 0)


def _endpoint_order(name: str) -> tuple[int, int, str]:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _save(fig: Any, out: str | os.PathLike[str], plt: Any) -> None:
    p = make_parent(out)
    try:
        save_figure(fig, p, dpi=150)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{p}: cannot write the picture: {exc}") from None
    finally:
        plt.close(fig)


#: Per format, the metadata that would carry a date or a version (matplotlib writes them unless told not to).
_NO_STAMPS = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


def save_figure(fig: Any, path: str | os.PathLike[str], *, dpi: int = 150, fmt: str | None = None) -> None:
    """Save *fig* so that identical figures give identical files: fixed SVG ids, no dates or versions.

    *fmt*: the format (default: *path*'s suffix, as matplotlib takes it).
    """
    import matplotlib

    fmt = fmt or Path(path).suffix.lstrip(".").lower() or "png"
    with matplotlib.rc_context({"svg.hashsalt": "etsim", "svg.fonttype": "path"}):
        fig.savefig(path, format=fmt, dpi=dpi, metadata=_NO_STAMPS.get(fmt))
